"""Pure parsers: tool output text in, frozen dataclasses out. No I/O here.

Every parser raises `NothingToParse` for empty/no-record input and `ParseError` (with the
line number and line) for output it does not recognise; known tool error messages
(`ibpanic:`, `Failed to initialize NVML`, `can't open UMAD port`, ...) are screened first
and reported as such. Which parser reads which command is said by that command's row of
the source table (`netdoctor.host.sources.SOURCES`).
"""

from __future__ import annotations

from netdoctor.parsers.ibdev2netdev import NetdevMapping, parse_ibdev2netdev
from netdoctor.parsers.iblinkinfo import FabricLink, parse_iblinkinfo
from netdoctor.parsers.ibstat import IbstatCa, IbstatOutput, IbstatPort, parse_ibstat, parse_ibstat_output
from netdoctor.parsers.ibv_devinfo import IbvDevice, IbvPort, parse_ibv_devinfo
from netdoctor.parsers.mlnx_qos import MlnxQos, TrafficClass, parse_mlnx_qos, parse_mlnx_qos_all
from netdoctor.parsers.nvidia_smi_topo import TopoMatrix, parse_nvidia_smi_topo, parse_nvidia_smi_topo_matrix
from netdoctor.parsers.perfquery import PERFQUERY_TO_SYSFS, PerfqueryBlock, counters_as_sysfs, parse_perfquery

__all__ = [
    "PERFQUERY_TO_SYSFS",
    "FabricLink",
    "IbstatCa",
    "IbstatOutput",
    "IbstatPort",
    "IbvDevice",
    "IbvPort",
    "MlnxQos",
    "NetdevMapping",
    "PerfqueryBlock",
    "TopoMatrix",
    "TrafficClass",
    "counters_as_sysfs",
    "parse_ibdev2netdev",
    "parse_iblinkinfo",
    "parse_ibstat",
    "parse_ibstat_output",
    "parse_ibv_devinfo",
    "parse_mlnx_qos",
    "parse_mlnx_qos_all",
    "parse_nvidia_smi_topo",
    "parse_nvidia_smi_topo_matrix",
    "parse_perfquery",
]
