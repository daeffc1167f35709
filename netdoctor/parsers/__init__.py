"""Pure parsers: tool output text in, frozen dataclasses out. No I/O here.

Every parser raises `NothingToParse` for empty/no-record input and `ParseError` (with the
line number and line) for output it does not recognise; known tool error messages
(`ibpanic:`, `Failed to initialize NVML`, `can't open UMAD port`, ...) are screened first
and reported as such. `parser_for_command` maps a snapshot command NAME to its parser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from netdoctor.parsers.ibdev2netdev import NetdevMapping, parse_ibdev2netdev
from netdoctor.parsers.iblinkinfo import FabricLink, parse_ibnetdiscover_ports, parse_iblinkinfo
from netdoctor.parsers.ibstat import (
    IbstatCa,
    IbstatOutput,
    IbstatPort,
    IbstatusPort,
    parse_ibstat,
    parse_ibstat_output,
    parse_ibstatus,
)
from netdoctor.parsers.ibv_devinfo import IbvDevice, IbvPort, parse_ibv_devinfo
from netdoctor.parsers.mlnx_qos import MlnxQos, TrafficClass, parse_ethtool_stats, parse_mlnx_qos, parse_mlnx_qos_all
from netdoctor.parsers.nvidia_smi_topo import (
    TopoMatrix,
    parse_nvidia_smi_topo,
    parse_nvidia_smi_topo_matrix,
    parse_nvidia_smi_topo_p2p,
)
from netdoctor.parsers.perfquery import (
    PERFQUERY_TO_SYSFS,
    PerfqueryBlock,
    PortErrors,
    counters_as_sysfs,
    parse_ibqueryerrors,
    parse_perfquery,
)

# Snapshot command NAME (CONTRACT.md section 4) -> parser. perfquery and mlnx_qos names
# carry the device/netdev after a fixed prefix.
_BY_NAME: dict[str, Callable[[str], Any]] = {
    "nvidia-smi-topo-m": parse_nvidia_smi_topo,
    "ibstat": parse_ibstat,
    "ibv_devinfo-v": parse_ibv_devinfo,
    "iblinkinfo": parse_iblinkinfo,
    "ibdev2netdev": parse_ibdev2netdev,
}
_BY_PREFIX: dict[str, Callable[[str], Any]] = {
    "perfquery-x-": parse_perfquery,
    "mlnx_qos-": parse_mlnx_qos,
}


def parser_for_command(name: str) -> Callable[[str], Any] | None:
    """The parser for a snapshot command NAME (`perfquery-x-mlx5_0-1` -> parse_perfquery), or None."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    for prefix, parser in _BY_PREFIX.items():
        if name.startswith(prefix) and len(name) > len(prefix):
            return parser
    return None


__all__ = [
    "PERFQUERY_TO_SYSFS",
    "FabricLink",
    "IbstatCa",
    "IbstatOutput",
    "IbstatPort",
    "IbstatusPort",
    "IbvDevice",
    "IbvPort",
    "MlnxQos",
    "NetdevMapping",
    "PerfqueryBlock",
    "PortErrors",
    "TopoMatrix",
    "TrafficClass",
    "counters_as_sysfs",
    "parse_ethtool_stats",
    "parse_ibdev2netdev",
    "parse_ibnetdiscover_ports",
    "parse_iblinkinfo",
    "parse_ibqueryerrors",
    "parse_ibstat",
    "parse_ibstat_output",
    "parse_ibstatus",
    "parse_ibv_devinfo",
    "parse_mlnx_qos",
    "parse_mlnx_qos_all",
    "parse_nvidia_smi_topo",
    "parse_nvidia_smi_topo_matrix",
    "parse_nvidia_smi_topo_p2p",
    "parse_perfquery",
    "parser_for_command",
]
