"""Property tests: whatever text a parser gets, only ParseError (or a subclass) may escape.

Inputs are arbitrary text and real corpus outputs that were truncated, had lines dropped,
duplicated or swapped, or had characters replaced. NETDOCTOR_FUZZ_EXAMPLES raises the
number of examples in CI (default 200 per property).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corpus_util import corpus_files
from netdoctor.errors import ParseError
from netdoctor.parsers import (
    parse_ibdev2netdev,
    parse_iblinkinfo,
    parse_ibstat,
    parse_ibstat_output,
    parse_ibv_devinfo,
    parse_mlnx_qos,
    parse_mlnx_qos_all,
    parse_nvidia_smi_topo,
    parse_nvidia_smi_topo_matrix,
    parse_perfquery,
)
from netdoctor.parsers.fi_info import parse_fi_info, parse_fi_info_version
from netdoctor.parsers.kernel_log import parse_kernel_log
from netdoctor.parsers.nccl import parse_nccl_log
from netdoctor.parsers.nccl_env import parse_device_filter, parse_nccl_conf
from netdoctor.parsers.nccl_tests import parse_nccl_tests
from netdoctor.parsers.perftest import parse_perftest_bw
from netdoctor.parsers.nvidia_smi_nvlink import parse_nvidia_smi_nvlink_status
from netdoctor.parsers.nvidia_imex_ctl import parse_nvidia_imex_ctl
from netdoctor.parsers.nvidia_smi_q import parse_gpu_sections, parse_nvidia_smi_q
from netdoctor.parsers.systemctl import parse_systemctl_show
from netdoctor.parsers.lspci import parse_lspci_vvv
from netdoctor.parsers.ip_addr import parse_ip_addr_json
from netdoctor.parsers.lldpctl import parse_lldpctl_json
from netdoctor.parsers.smpquery import parse_smpquery_nodedesc, parse_smpquery_nodeinfo
from netdoctor.parsers.versions import parse_fabricmanager_version, parse_ofed_info
from netdoctor.parsers.transceiver import parse_ethtool_module, parse_mlxlink_module
from netdoctor.parsers.mlxlink_counters import parse_ber, parse_mlxlink_counters
from netdoctor.parsers.ethtool_stats import parse_ethtool_stats
from netdoctor.parsers.common import strip_ansi
from netdoctor.parsers.sysfs_values import (
    parse_byte,
    parse_counter,
    parse_hex_or_int,
    parse_int,
    parse_link_width,
    parse_numa_node,
    parse_pcie_speed,
    parse_phys_state,
    parse_port_state,
    parse_rate,
    parse_traffic_class,
)

FUZZ = settings(
    max_examples=int(os.environ.get("NETDOCTOR_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

def _samples(kind: str, keep: Callable[[str], bool] = lambda name: True) -> list[str]:
    return [path.read_text() for path in corpus_files(kind) if keep(path.name)]


# parser name -> (parser, real samples to mutate)
PARSERS: dict[str, tuple[Callable[[str], Any], list[str]]] = {
    "ibstat": (parse_ibstat_output, _samples("ibstat")),
    "ibv_devinfo": (parse_ibv_devinfo, _samples("ibv_devinfo")),
    "ibdev2netdev": (parse_ibdev2netdev, _samples("ibdev2netdev")),
    "iblinkinfo": (parse_iblinkinfo, _samples("iblinkinfo")),
    "perfquery": (parse_perfquery, _samples("perfquery")),
    "mlnx_qos": (parse_mlnx_qos_all, _samples("mlnx_qos")),
    "topo": (parse_nvidia_smi_topo_matrix, _samples("nvidia-smi-topo", lambda name: "p2p" not in name)),
    # The parsers the source table names (netdoctor.host.sources), and NCCL's.
    "ibstat-cas": (parse_ibstat, _samples("ibstat")),
    "mlnx_qos-one": (parse_mlnx_qos, _samples("mlnx_qos")),
    "topo-inventory": (parse_nvidia_smi_topo, _samples("nvidia-smi-topo", lambda name: "p2p" not in name)),
    "nccl-log": (parse_nccl_log, _samples("nccl-log")),
    "nccl-tests": (parse_nccl_tests, _samples("nccl-tests")),
    "kernel-log": (parse_kernel_log, _samples("dmesg")),
    "systemctl": (parse_systemctl_show, _samples("systemctl")),
    "nvlink-status": (parse_nvidia_smi_nvlink_status, _samples("nvidia-smi-nvlink")),
    # The NVLink domain (CONTRACT 8): IMEX's view, and nvidia-smi -q (the device tool's whole real
    # 2x H200 output, and the real Fabric / Platform Info fragments of issues).
    "nvidia-imex-ctl": (parse_nvidia_imex_ctl, _samples("nvidia-imex-ctl")),
    "nvidia-smi-q": (parse_nvidia_smi_q, [(Path(__file__).parent / "data" / "device" / "nvidia-h200-x2"
                                           / "nvidia-smi-q.out").read_text(encoding="utf-8")]),
    "nvidia-smi-q-sections": (parse_gpu_sections, _samples("nvidia-smi-q")),
    # The 8x H100 dump is 0.9 MB: its first 40 kB (root ports, a switch, GPUs) keep mutation fast.
    "lspci": (parse_lspci_vvv, [sample[:40_000] for sample in _samples("lspci")]),
    "mlxlink": (parse_mlxlink_module, _samples("mlxlink")),
    "ethtool-m": (parse_ethtool_module, _samples("ethtool-m")),
    # The physical layer: BER and per-lane errors as the firmware counts them, the driver's statistics,
    # and each real BER value as mlxlink prints it (colour escapes are stripped before parse_ber sees it).
    "mlxlink-c": (parse_mlxlink_counters, _samples("mlxlink-c")),
    "ethtool-S": (parse_ethtool_stats, _samples("ethtool-S")),
    "mlxlink-ber": (parse_ber, [value.strip() for sample in _samples("mlxlink-c") for line in strip_ansi(sample).splitlines()
                                for label, _, value in [line.partition(":")] if label.strip().endswith("BER")]),
    "nccl-conf": (parse_nccl_conf, _samples("nccl-conf")),
    "perftest": (parse_perftest_bw, _samples("perftest")),
    # The first-hop switch and the versions the report carries (CONTRACT 6.2/6.3).
    "smpquery-nodeinfo": (parse_smpquery_nodeinfo, _samples("smpquery", lambda name: "-nd-" not in name)),
    "smpquery-nodedesc": (parse_smpquery_nodedesc, _samples("smpquery", lambda name: "-nd-" in name)),
    "lldpctl-json": (parse_lldpctl_json, _samples("lldpctl")),
    "ip-j-addr": (parse_ip_addr_json, _samples("ip-addr")),
    "ofed_info": (parse_ofed_info, _samples("ofed_info")),
    "nv-fabricmanager": (parse_fabricmanager_version, _samples("nv-fabricmanager")),
    # libfabric on AWS EFA: the providers it sees, and its version (one real `--version` capture).
    "fi_info": (parse_fi_info, _samples("fi_info", lambda name: "fi_info-version" not in name)),
    "fi_info-version": (parse_fi_info_version, _samples("fi_info", lambda name: "fi_info-version" in name)),
    # Each value of the real settings, as NCCL_IB_HCA / NCCL_SOCKET_IFNAME would carry it.
    "nccl-device-filter": (parse_device_filter, [line.partition("=")[2] for sample in _samples("nccl-conf")
                                                 for line in sample.splitlines() if "=" in line]),
}

VALUE_PARSERS: list[Callable[[str], Any]] = [
    parse_port_state, parse_phys_state, parse_rate, parse_counter, parse_int, parse_numa_node,
    parse_hex_or_int, parse_pcie_speed, parse_link_width, parse_byte, parse_traffic_class,
]

# Text that looks a little like tool output: the characters these formats are built of.
_TOOLISH = st.text(
    alphabet=st.sampled_from(list("\t\n :'\"()[]=<>-./,#+x0123456789ABCDEFXPortCAGUIDNVSYSPIXNODE_ \x1b")),
    max_size=400,
)
_ANY_TEXT = st.one_of(st.text(max_size=300), _TOOLISH)


def _only_parse_errors(parser: Callable[[str], Any], text: str) -> None:
    try:
        parser(text)
    except ParseError:
        pass


@st.composite
def _mutated(draw: st.DrawFn, samples: list[str]) -> str:
    text = draw(st.sampled_from(samples))
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        operation = draw(st.sampled_from(["truncate", "drop", "duplicate", "swap", "replace", "insert"]))
        if not lines:
            break
        index = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        if operation == "truncate":
            joined = "".join(lines)
            lines = [joined[: draw(st.integers(min_value=0, max_value=len(joined)))]]
        elif operation == "drop":
            del lines[index]
        elif operation == "duplicate":
            lines.insert(index, lines[index])
        elif operation == "swap":
            other = draw(st.integers(min_value=0, max_value=len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
        elif operation == "replace" and lines[index]:
            position = draw(st.integers(min_value=0, max_value=len(lines[index]) - 1))
            character = draw(st.characters())
            lines[index] = lines[index][:position] + character + lines[index][position + 1:]
        elif operation == "insert":
            lines.insert(index, draw(_ANY_TEXT))
    return "".join(lines)


@pytest.mark.parametrize("name", sorted(PARSERS))
@FUZZ
@given(text=_ANY_TEXT)
def test_arbitrary_text_gives_only_parse_errors(name: str, text: str) -> None:
    _only_parse_errors(PARSERS[name][0], text)


@pytest.mark.parametrize("name", sorted(PARSERS))
@FUZZ
@given(data=st.data())
def test_mutated_corpus_gives_only_parse_errors(name: str, data: st.DataObject) -> None:
    parser, samples = PARSERS[name]
    if not samples:
        pytest.skip(f"no corpus samples for {name}")
    _only_parse_errors(parser, data.draw(_mutated(samples)))


@pytest.mark.parametrize("parser", VALUE_PARSERS, ids=lambda parser: parser.__name__)
@FUZZ
@given(text=_ANY_TEXT)
def test_sysfs_values_give_only_parse_errors(parser: Callable[[str], Any], text: str) -> None:
    _only_parse_errors(parser, text)


@pytest.mark.parametrize("name", ["ibstat", "ibv_devinfo", "topo", "perfquery"])
@FUZZ
@given(data=st.data())
def test_tabs_expanded_to_spaces_parse_the_same(name: str, data: st.DataObject) -> None:
    """Pastes expand TABs to 1-8 spaces; the parse must not change."""
    parser, samples = PARSERS[name]
    if not samples:
        pytest.skip(f"no corpus samples for {name}")
    text = data.draw(st.sampled_from(samples))
    tab_size = data.draw(st.integers(min_value=1, max_value=8))
    expanded = "\n".join(line.expandtabs(tab_size) for line in text.splitlines())
    assert parser(expanded) == parser(text)
