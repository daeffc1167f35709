"""The source table: every row whole and consistent, and host importing nothing above it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import netdoctor.host
from netdoctor.checks.api import NEEDS
from netdoctor.host.sources import SOURCES, SOURCES_BY_NAME, Scope, Source
from netdoctor.inventory.from_tools import JOINERS, parser_of
from netdoctor.parsers.ibstat import parse_ibstat
from netdoctor.parsers.perfquery import parse_perfquery

CONTRACT_NAMES = {"nvidia-smi-topo-m", "ibstat", "ibv_devinfo-v", "iblinkinfo", "perfquery-x-{dev}-{port}",
                  "mlnx_qos-{netdev}", "ibdev2netdev",
                  # CONTRACT 6.2
                  "nvidia-smi-nvlink-s", "dmesg", "systemctl-show-nvidia-fabricmanager", "systemctl-show-nvidia-imex",
                  "lspci-vvv", "mlxlink-m-{dev}", "ethtool-m-{netdev}",
                  "ofed_info-s", "nv-fabricmanager-version", "smpquery-nodeinfo-{dev}-{port}",
                  "smpquery-nodedesc-{dev}-{port}", "lldpctl-json",
                  # Issue 14 (cloud fabrics), named in the style of section 6.2
                  "fi_info-p-efa", "fi_info-version",
                  # CONTRACT 7.2
                  "ip-j-addr",
                  # CONTRACT 9
                  "mlxlink-c-{dev}", "ethtool-S-{netdev}",
                  # CONTRACT 8
                  "nvidia-imex-ctl-N", "nvidia-smi-q"}
# What host may import: itself and the small shared modules every layer uses.
HOST_MAY_IMPORT = ("netdoctor.host", "netdoctor.util", "netdoctor.errors", "netdoctor.vocabulary", "netdoctor.logging",
                   "netdoctor.records")


def test_rows_are_unique_and_name_known_needs() -> None:
    assert len(SOURCES_BY_NAME) == len(SOURCES)
    for row in SOURCES:
        assert row.needs <= set(NEEDS), row.name


def test_every_contract_command_is_one_row_with_a_parser_and_a_joiner() -> None:
    commands = {row.name for row in SOURCES if row.is_command}
    assert commands == CONTRACT_NAMES
    for name in commands:
        row = SOURCES_BY_NAME[name]
        assert callable(parser_of(row)) and name in JOINERS
    assert set(JOINERS) == commands
    assert parser_of(SOURCES_BY_NAME["ibstat"]) is parse_ibstat


def test_readers_have_no_command() -> None:
    readers = {row.name for row in SOURCES if not row.is_command}
    assert readers == {"sysfs", "netdevs", "nvml", "nccl-env"}
    assert all(SOURCES_BY_NAME[name].parser is None for name in readers)


def test_template_fields_match_the_scope() -> None:
    fields = {Scope.NODE: set(), Scope.IB_PORT: {"dev", "port"}, Scope.ROCE_NETDEV: {"netdev"},
              Scope.RDMA_DEVICE: {"dev"}, Scope.EFA: set()}
    for row in SOURCES:
        used = set(re.findall(r"\{(\w+)\}", row.name + " ".join(row.argv)))
        assert used == fields[row.scope], row.name


def test_expand_fills_name_and_arguments() -> None:
    spec = SOURCES_BY_NAME["perfquery-x-{dev}-{port}"].expand(dev="mlx5_0", port=1)
    assert (spec.name, spec.argv, spec.timeout_s) == ("perfquery-x-mlx5_0-1", ("perfquery", "-x", "-C", "mlx5_0", "-P", "1"), 4.0)
    assert parser_of(SOURCES_BY_NAME["perfquery-x-{dev}-{port}"]) is parse_perfquery
    scan = SOURCES_BY_NAME["iblinkinfo"]
    assert scan.fabric and scan.expand().max_output_bytes == 24 * 1024 * 1024


def test_serves() -> None:
    qos = SOURCES_BY_NAME["mlnx_qos-{netdev}"]
    assert qos.serves(None) and qos.serves(frozenset({"roce"})) and not qos.serves(frozenset({"gpus"}))
    assert SOURCES_BY_NAME["sysfs"].serves(frozenset({"gpus"}))   # no needs: always read


def test_a_live_only_row_is_not_recorded() -> None:
    row = Source("dmesg", ("dmesg",), "netdoctor.parsers.ibstat:parse_ibstat", in_snapshot=False)
    assert row.expand().recorded is False and SOURCES_BY_NAME["ibstat"].expand().recorded


@pytest.mark.parametrize("parser", ["os:system", "netdoctor.inventory.build:build_inventory", "netdoctor.parsers.ibstat"])
def test_only_parsers_are_resolved(parser: str) -> None:
    with pytest.raises(ValueError, match="netdoctor.parsers"):
        parser_of(Source("x", ("x",), parser))


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_host_imports_nothing_above_it() -> None:
    for path in sorted(Path(netdoctor.host.__file__).parent.glob("*.py")):
        upward = [name for name in _imports(path)
                  if name.startswith("netdoctor") and not name.startswith(HOST_MAY_IMPORT)]
        assert upward == [], f"{path.name} imports {upward}"


def test_first_hop_queries_are_one_direct_route_smp_per_port_and_bounded() -> None:
    # CONTRACT 6.2: `smpquery -C DEV -P PORT -D nodeinfo 0,1`; the route's first hop must be the
    # port the SMP leaves by (the kernel's SMI drops `0,1` sent from port 2), so it is `0,PORT`.
    info = SOURCES_BY_NAME["smpquery-nodeinfo-{dev}-{port}"].expand(dev="mlx5_3", port=1)
    assert (info.name, info.argv) == ("smpquery-nodeinfo-mlx5_3-1",
                                      ("smpquery", "-C", "mlx5_3", "-P", "1", "-D", "nodeinfo", "0,1"))
    desc = SOURCES_BY_NAME["smpquery-nodedesc-{dev}-{port}"].expand(dev="mlx4_0", port=2)
    assert desc.argv == ("smpquery", "-C", "mlx4_0", "-P", "2", "-D", "nodedesc", "0,2")
    for name in ("smpquery-nodeinfo-{dev}-{port}", "smpquery-nodedesc-{dev}-{port}", "lldpctl-json", "ofed_info-s",
                 "nv-fabricmanager-version"):
        row = SOURCES_BY_NAME[name]
        assert row.timeout_s <= 3.0 and not row.fabric and row.in_snapshot, name
        assert row.needs in ({"neighbors"}, {"versions"}), name
    assert SOURCES_BY_NAME["smpquery-nodeinfo-{dev}-{port}"].scope is Scope.IB_PORT
    assert SOURCES_BY_NAME["ofed_info-s"].expand().argv == ("ofed_info", "-s")
    assert SOURCES_BY_NAME["nv-fabricmanager-version"].expand().argv == ("nv-fabricmanager", "--version")
    assert SOURCES_BY_NAME["lldpctl-json"].expand().argv == ("lldpctl", "-f", "json")
