"""Every corpus file of every kind, parsed by its parser, with assertions on real values.

Each file needs an entry in its kind's EXPECTATIONS dict; a new corpus file without one
fails `test_every_corpus_file_has_expectations`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corpus_util import CORPUS, corpus_dir, corpus_files, read_gcm_json, read_ttar
from test_parsers_imex import IMEX_EXPECTATIONS
from test_parsers_phy import ETHTOOL_S_EXPECTATIONS, MLXLINK_C_EXPECTATIONS
from test_parsers_smi_q import SMI_Q_EXPECTATIONS
from netdoctor.errors import ParseError
from netdoctor.inventory.model import LinkLayer, LinkRate, PhysState, PortState
from netdoctor.parsers import (
    counters_as_sysfs,
    parse_ibdev2netdev,
    parse_iblinkinfo,
    parse_ibstat_output,
    parse_ibv_devinfo,
    parse_mlnx_qos,
    parse_mlnx_qos_all,
    parse_nvidia_smi_topo,
    parse_nvidia_smi_topo_matrix,
    parse_perfquery,
)
from netdoctor.parsers.fi_info import FiProvider, parse_fi_info, parse_fi_info_version
from netdoctor.parsers.sysfs_values import (
    parse_counter,
    parse_hex_or_int,
    parse_int,
    parse_link_width,
    parse_pcie_speed,
    parse_phys_state,
    parse_port_state,
    parse_rate,
    pcie_generation,
)

ACTIVE, DOWN, INIT = PortState.ACTIVE, PortState.DOWN, PortState.INIT
LINK_UP, DISABLED, POLLING = PhysState.LINK_UP, PhysState.DISABLED, PhysState.POLLING
IB, ETH, UNSPECIFIED = LinkLayer.INFINIBAND, LinkLayer.ETHERNET, LinkLayer.UNSPECIFIED


def _read(path: Path) -> str:
    return path.read_text()


# --- ibstat ------------------------------------------------------------------------------

def _ibstat_ports(text: str) -> dict[str, Any]:
    output = parse_ibstat_output(text)
    return {f"{ca.name}:{port.number}": port for ca in output.cas for port in ca.ports}


def _check_ibstat_mt4115(text: str) -> None:
    output = parse_ibstat_output(text)
    (ca,) = output.cas
    assert (ca.name, ca.ca_type, ca.firmware, ca.node_guid) == ("mlx5_0", "MT4115", "12.23.1020", "0xec0d9a03003d677a")
    (port,) = ca.ports
    assert (port.state, port.phys_state, port.rate_gbps, port.base_lid, port.sm_lid) == (ACTIVE, LINK_UP, 100.0, 1, 1)
    assert port.capability_mask == 0x2651E84A
    assert port.link_layer is None   # this capture ends at `Port GUID`


def _check_ibstat_dev_port(text: str) -> None:
    (ca,) = parse_ibstat_output(text).cas
    assert ca.name == "mlx4_0" and ca.ca_type is None
    (port,) = ca.ports
    assert (port.number, port.state, port.rate_gbps, port.base_lid, port.sm_lid, port.link_layer) == (2, ACTIVE, 56.0, 12, 9, IB)
    assert port.port_guid == "0xec0d9a03000c8982"


def _check_ibstat_short(text: str) -> None:
    cas = parse_ibstat_output(text).cas
    assert [(ca.name, ca.number_of_ports, ca.ports) for ca in cas] == [("mlx4_0", 2, ()), ("mlx4_1", 2, ())]
    assert cas[1].sys_image_guid == "0xf45214030033b853"


def _check_ibstat_two_dual_port(text: str) -> None:
    ports = _ibstat_ports(text)
    assert sorted(ports) == ["mlx4_0:1", "mlx4_0:2", "mlx4_1:1", "mlx4_1:2"]
    assert {port.rate_gbps for port in ports.values()} == {56.0}
    assert [ports[name].base_lid for name in sorted(ports)] == [10, 12, 1, 4]
    assert ports["mlx4_1:1"].sm_lid == 7


def _check_ibstat_own_sm(text: str) -> None:
    ports = _ibstat_ports(text)
    assert (ports["mlx4_0:1"].base_lid, ports["mlx4_0:1"].sm_lid) == (3, 3)
    assert (ports["mlx4_0:2"].base_lid, ports["mlx4_0:2"].sm_lid) == (2, 2)
    assert ports["mlx4_0:1"].capability_mask == 0x0251486A


def _check_ibstat_no_sm(text: str) -> None:
    output = parse_ibstat_output(text)
    port = output.cas[0].ports[0]
    assert (port.state, port.phys_state, port.rate_gbps, port.base_lid, port.sm_lid) == (INIT, LINK_UP, 40.0, 0, 0)
    assert output.ignored == ("0x0002c90300048ca1 0x0002c90300048ca2",)
    assert output.errors == ()


def _check_ibstat_ibpanic(text: str) -> None:
    output = parse_ibstat_output(text)
    assert [ca.name for ca in output.cas] == [f"mlx5_{index}" for index in range(8)]
    assert {ca.ca_type for ca in output.cas} == {"MT4124"}
    assert output.cas[7].ports[0].base_lid == 13305
    assert len(output.errors) == 1 and "stat of IB device 'mlx5_8' failed" in output.errors[0]


def _check_ibstat_a100_vf(text: str) -> None:
    output = parse_ibstat_output(text)
    cas = {ca.name: ca for ca in output.cas}
    assert len(cas) == 9 and {ca.ca_type for ca in cas.values()} == {"MT4126"}
    assert (cas["mlx5_0"].firmware, cas["mlx5_0"].ports[0].link_layer) == ("22.35.2302", ETH)
    assert (cas["mlx5_1"].firmware, cas["mlx5_1"].ports[0].link_layer, cas["mlx5_1"].ports[0].sm_lid) == ("28.37.1014", IB, 83)
    assert {ca.ports[0].rate_gbps for ca in cas.values()} == {200.0}


def _check_ibstat_h100_roce(text: str) -> None:
    cas = parse_ibstat_output(text).cas
    assert [ca.name for ca in cas][:4] == ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11"]   # lexical order
    assert {ca.ports[0].link_layer for ca in cas} == {ETH}
    types = {ca.name: ca.ca_type for ca in cas}
    assert sorted(name for name, kind in types.items() if kind == "MT4125") == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]
    assert {ca.ports[0].port_guid for ca in cas if ca.ca_type == "MT4125"} == {"0x0000000000000000"}
    assert {ca.ports[0].rate_gbps for ca in cas if ca.ca_type == "MT4129"} == {400.0}


def _check_ibstat_h100_bond(text: str) -> None:
    cas = {ca.name: ca for ca in parse_ibstat_output(text).cas}
    assert sorted(cas) == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_bond_0"]
    bond = cas["mlx5_bond_0"]
    assert (bond.ca_type, bond.hardware_version, bond.ports[0].rate_gbps, bond.ports[0].link_layer) == ("MT41692", "1", 200.0, ETH)
    assert cas["mlx5_0"].ports[0].base_lid == 128 and cas["mlx5_0"].ports[0].link_layer is IB


def _check_ibstat_b300_bridge(text: str) -> None:
    """Dell HGX B300: 7 ConnectX-8 down (their GPU missing), the 4 ConnectX-7 NVSwitch bridge
    functions Active at 100 Gb/s, LIDs 1/4/5/6, seeing the host's own NVLink SM at LID 1."""
    cas = {ca.name: ca for ca in parse_ibstat_output(text).cas}
    cx8 = sorted(name for name, ca in cas.items() if ca.ca_type == "MT4131")
    assert cx8 == ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    assert {(cas[name].firmware, cas[name].ports[0].state, cas[name].ports[0].rate_gbps) for name in cx8} == {
        ("40.46.5500", DOWN, 10.0)}
    bridge = [cas[f"mlx5_{index}"] for index in (2, 3, 4, 5)]
    assert {(ca.ca_type, ca.firmware, ca.ports[0].state, ca.ports[0].rate_gbps, ca.ports[0].sm_lid) for ca in bridge} == {
        ("MT4129", "28.47.2526", ACTIVE, 100.0, 1)}
    assert [ca.ports[0].base_lid for ca in bridge] == [1, 4, 5, 6]


def _down_ports(text: str) -> dict[str, tuple[Any, ...]]:
    ports = _ibstat_ports(text)
    return {name: (port.state, port.phys_state, port.rate_gbps) for name, port in ports.items() if port.state is not ACTIVE}


def _check_ibstat_some_down_0(text: str) -> None:
    assert _down_ports(text) == {name: (DOWN, DISABLED, 40.0) for name in ("mlx5_2:1", "mlx5_7:1", "mlx5_8:1")}
    ports = _ibstat_ports(text)
    assert (ports["mlx5_0:1"].link_layer, ports["mlx5_0:1"].sm_lid) == (IB, 334)


def _check_ibstat_some_down_1(text: str) -> None:
    assert _down_ports(text) == {"mlx5_11:1": (DOWN, DISABLED, 40.0), "mlx5_5:1": (DOWN, DISABLED, 40.0)}


def _check_ibstat_some_down_polling(text: str) -> None:
    assert _down_ports(text) == {"mlx5_11:1": (DOWN, POLLING, 40.0), "mlx5_5:1": (DOWN, DISABLED, 40.0)}


def _check_ibstat_sparticlesteve(text: str) -> None:
    ports = _ibstat_ports(text)
    assert {name for name, port in ports.items() if port.rate_gbps == 56.0} == {"mlx5_1:1", "mlx5_5:1", "mlx5_7:1"}
    assert (ports["mlx4_0:1"].rate_gbps, ports["mlx4_0:1"].link_layer) == (10.0, ETH)
    assert (ports["mlx5_3:1"].rate_gbps, ports["mlx5_3:1"].link_layer) == (100.0, ETH)
    assert ports["mlx5_0:1"].rate_gbps == 100.0 and ports["mlx5_0:1"].link_layer is IB


def _check_ibstat_efa(text: str) -> None:
    """AWS EFA: ibstat prints empty CA type / firmware / hardware version, `Link layer: Unknown`."""
    output = parse_ibstat_output(text)
    (ca,) = output.cas
    assert (ca.name, ca.ca_type, ca.firmware, ca.hardware_version, ca.number_of_ports) == ("efa_0", None, None, None, 1)
    assert (ca.node_guid, ca.sys_image_guid) == ("0x0000000000000000", "0x0000000000000000")
    (port,) = ca.ports
    assert (port.state, port.phys_state, port.rate_gbps, port.link_layer) == (ACTIVE, LINK_UP, 100.0, UNSPECIFIED)
    assert (port.base_lid, port.lmc, port.sm_lid, port.capability_mask) == (0, 1, 0, 0)
    assert port.port_guid == "0x100bf5fffe02e2b0"
    assert output.errors == () and output.ignored == ()


IBSTAT_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    "amzn-drivers-issue-114__ibstat-efa_0-link-layer-unknown.txt": _check_ibstat_efa,
    "824380210-Linpack__19A_linpack_ibstat_MT4115.txt": _check_ibstat_mt4115,
    "Heioy-Books__ibstat.md_ibstat-dev-port.txt": _check_ibstat_dev_port,
    "Heioy-Books__ibstat.md_ibstat-s.txt": _check_ibstat_short,
    "Heioy-Books__ibstat.md_ibstat.txt": _check_ibstat_two_dual_port,
    "Heioy-Books__jian-cha-wang-ka-zhuang-tai_ibstat.txt": _check_ibstat_own_sm,
    "NiCkWKT-Cluster-ansible__ibstat.txt": _check_ibstat_no_sm,
    "leptonai-gpud__ibstat.39.0.a100.failed.ibpanic.exit-255.0.txt": _check_ibstat_ibpanic,
    "leptonai-gpud__ibstat.47.0.a100.all.active.0.txt": _check_ibstat_a100_vf,
    "leptonai-gpud__ibstat.47.0.h100.all.active.0.txt": _check_ibstat_h100_roce,
    "leptonai-gpud__ibstat.47.0.h100.all.active.2.txt": _check_ibstat_h100_bond,
    "dell-b300-notes__ibstat-7xMT4131-cx8-disabled-4xMT4129-nvswitch-bridge-active-rate100.txt": _check_ibstat_b300_bridge,
    "leptonai-gpud__ibstat.47.0.h100.some.down.0.txt": _check_ibstat_some_down_0,
    "leptonai-gpud__ibstat.47.0.h100.some.down.1.txt": _check_ibstat_some_down_1,
    "leptonai-gpud__ibstat.47.0.h100.some.down.with.polling.1.txt": _check_ibstat_some_down_polling,
    "sparticlesteve-pytorch-cuda-mpi-error__ibstat.txt": _check_ibstat_sparticlesteve,
}


# --- ibv_devinfo ------------------------------------------------------------------------

def _check_ibv_e3sm(text: str) -> None:
    devices = {device.hca_id: device for device in parse_ibv_devinfo(text)}
    assert sorted(devices) == ["mlx5_0", "mlx5_1", "mlx5_2"]
    cx6 = devices["mlx5_0"]
    assert (cx6.vendor_part_id, cx6.firmware, cx6.vendor_id, cx6.board_id) == (4123, "20.29.2002", 0x02C9, "MT_0000000223")
    assert cx6.node_guid == "0x0c42a1030065d6b6" and cx6.transport == "InfiniBand"
    (port,) = cx6.ports
    assert (port.state, port.phys_state, port.active_mtu, port.port_lid, port.sm_lid) == (ACTIVE, LINK_UP, 4096, 62, 3)
    assert (port.active_width, port.active_speed_gbps, port.active_speed) == (4, 50.0, "HDR")
    assert port.rate == LinkRate(200.0, 4, "HDR", 53.125)
    roce = devices["mlx5_1"].ports[0]
    assert (roce.link_layer, roce.active_mtu, roce.max_mtu, roce.rate) == (ETH, 1024, 4096, LinkRate(100.0, 4, "EDR", 25.78125))
    assert roce.gids[3] == (3, "::ffff:140.221.60.11", "RoCE v2")
    assert devices["mlx5_1"].sys_image_guid == "0x0c42a103002b07a4"


def _check_ibv_verbose_down(text: str) -> None:
    (device,) = parse_ibv_devinfo(text)
    assert (device.hca_id, device.vendor_part_id, device.phys_port_cnt) == ("mlx4_1", 4099, 2)
    (port,) = device.ports   # the excerpt shows port 2 only
    assert (port.number, port.state, port.phys_state) == (2, DOWN, POLLING)
    assert port.rate == LinkRate(10.0, 4, "SDR", 2.5)
    assert port.gids == ((0, "fe80:0000:0000:0000:7cfe:9003:00a5:95c2", None),)


def _check_ibv_plain(text: str) -> None:
    devices = parse_ibv_devinfo(text)
    assert [device.hca_id for device in devices] == ["mlx4_1", "mlx4_0"]
    states = {(device.hca_id, port.number): (port.state, port.port_lid, port.sm_lid) for device in devices for port in device.ports}
    assert states == {
        ("mlx4_1", 1): (ACTIVE, 22, 1), ("mlx4_1", 2): (DOWN, 0, 0),
        ("mlx4_0", 1): (ACTIVE, 32, 18), ("mlx4_0", 2): (DOWN, 0, 0),
    }
    assert all(port.rate is None and port.phys_state is None for device in devices for port in device.ports)


def _check_ibv_efa(name: str, link_layer: LinkLayer) -> Callable[[str], None]:
    """AWS EFA: transport `unspecified (4)`, fw 0.0.0.0, vendor 0x1d0f part 61344 (0xefa0)."""
    def check(text: str) -> None:
        (device,) = parse_ibv_devinfo(text)
        assert (device.hca_id, device.transport, device.firmware, device.hardware_version) == (
            name, "unspecified", "0.0.0.0", "0xEFA0")
        assert (device.vendor_id, device.vendor_part_id, device.phys_port_cnt, device.board_id) == (0x1D0F, 0xEFA0, 1, None)
        assert device.node_guid == device.sys_image_guid == "0x0000000000000000"
        (port,) = device.ports
        assert (port.number, port.state, port.max_mtu, port.active_mtu) == (1, ACTIVE, 4096, 4096)
        assert (port.sm_lid, port.port_lid, port.lmc, port.link_layer) == (0, 0, 1, link_layer)
        assert (port.phys_state, port.rate, port.gids) == (None, None, ())
    return check


IBV_DEVINFO_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    # Old rdma-core printed InfiniBand for EFA (sysfs said Unknown); newer prints Unspecified.
    "rdma-core-pr-884__ibv_devinfo-efa_0-transport-unspecified.txt": _check_ibv_efa("efa_0", IB),
    "uccl-issue-163__ibv_devinfo-rdmap16s27-link-layer-unspecified.txt": _check_ibv_efa("rdmap16s27", UNSPECIFIED),
    "E3SM-Project-scorpio__ibv_devinfo.txt": _check_ibv_e3sm,
    "Heioy-Books__ibv_devinfo.md_ibv_devinfo-v-port2-down.txt": _check_ibv_verbose_down,
    "Heioy-Books__ibv_devinfo.md_ibv_devinfo.txt": _check_ibv_plain,
}


# --- ibdev2netdev -------------------------------------------------------------------------

def _mapping_tuples(text: str) -> list[tuple[Any, ...]]:
    return [(m.hca, m.port, m.netdev, m.netdev_up, m.port_state, m.physical_state) for m in parse_ibdev2netdev(text)]


IBDEV2NETDEV_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    "824380210-Linpack__MS_Gen6_basic_step_ibdev2netdev.txt": lambda text: _assert_equal(
        _mapping_tuples(text), [("mlx4_0", 1, "eth6", True, None, None), ("mlx4_0", 2, "eth7", False, None, None)]),
    "Heioy-Books__jian-cha-wang-ka-zhuang-tai_ibdev2netdev.txt": lambda text: _assert_equal(
        _mapping_tuples(text), [("mlx4_0", 1, "ib0", True, None, None), ("mlx4_0", 2, "ib1", True, None, None)]),
    "spidernet-io-spiderpool__ai-index.md_rdma-link-host.txt": lambda text: _assert_equal(
        _mapping_tuples(text),
        [("mlx5_0", 1, "ens6f0np0", None, "ACTIVE", "LINK_UP"), ("mlx5_1", 1, "ens6f1np1", None, "ACTIVE", "LINK_UP")]),
    "spidernet-io-spiderpool__get-started-macvlan_rdma-link-in-pod.txt": lambda text: _assert_equal(
        [(m[0], m[2]) for m in _mapping_tuples(text)],
        [("mlx5_27", "net2"), ("mlx5_54", "net1"), ("mlx5_67", "net4"), ("mlx5_98", "net3")]),
}


def _assert_equal(actual: object, expected: object) -> None:
    assert actual == expected


# --- iblinkinfo ---------------------------------------------------------

def _check_iblinkinfo_edr(text: str) -> None:
    links = parse_iblinkinfo(text)
    assert len(links) == 20
    cas = [link for link in links if link.node_kind == "CA"]
    assert [(link.node_description, link.node_guid, link.lid, link.peer_lid, link.peer_port) for link in cas] == [
        ("n02 HCA-1", "0xec0d9a03003d62be", 4, 2, 17), ("mgt mlx5_0", "0x248a070300928186", 3, 2, 36)]
    switch = [link for link in links if link.node_kind == "Switch"]
    assert {link.node_guid for link in switch} == {"0x506b4b0300820910"}
    down = [link.port for link in switch if link.state is DOWN]
    assert down == list(range(1, 17)) and {link.phys_state for link in switch if link.state is DOWN} == {POLLING}
    up = [link for link in switch if link.state is ACTIVE]
    assert [(link.port, link.width, link.lane_gbps, link.speed, link.peer_description) for link in up] == [
        (17, 4, 25.78125, "EDR", "n02 HCA-1"), (18, 4, 25.78125, "EDR", "n01 HCA-1")]


IBLINKINFO_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    "824380210-Linpack__edr76_linpack_WI_iblinkinfo.txt": _check_iblinkinfo_edr,
}


# --- perfquery ------------------------------------------------------------------------------

def _check_rcv_error(lid: int, port: int) -> Callable[[str], None]:
    def check(text: str) -> None:
        (block,) = parse_perfquery(text)
        assert (block.kind, block.lid, block.port) == ("rcv-error", lid, port)
        assert block.counters == dict.fromkeys(
            ("PortLocalPhysicalErrors", "PortMalformedPktErrors", "PortBufferOverrunErrors",
             "PortDLIDMappingErrors", "PortVLMappingErrors", "PortLoopingErrors"), 0)
        assert counters_as_sysfs(block) == {}
    return check


def _check_perfquery_errors(text: str) -> None:
    (block,) = parse_perfquery(text)
    assert (block.kind, block.lid, block.port, block.cap_mask, block.cap_mask2) == ("extended", 2052, 1, 0x5300, 0x2)
    sysfs = counters_as_sysfs(block)
    assert (sysfs["link_downed"], sysfs["port_rcv_switch_relay_errors"], sysfs["port_xmit_discards"]) == (1, 7, 20046)
    assert sysfs["port_xmit_wait"] == 41864608 and sysfs["port_xmit_data"] == 178791657177235
    assert block.counters["QP1Dropped"] == 0 and "QP1Dropped" not in sysfs and "PortSelect" not in block.counters


def _check_perfquery_clean(lid: int, xmit_data: int) -> Callable[[str], None]:
    def check(text: str) -> None:
        (block,) = parse_perfquery(text)
        assert (block.kind, block.lid, block.port, block.cap_mask, block.cap_mask2) == ("extended", lid, 1, 0x5A00, 0)
        assert block.counters["PortXmitData"] == xmit_data
        errors = {name: value for name, value in counters_as_sysfs(block).items() if "data" not in name and "packets" not in name}
        assert set(errors.values()) == {0} and len(errors) == 13
    return check


def _check_perfquery_two_ports(text: str) -> None:
    blocks = parse_perfquery(text)
    assert [(block.lid, block.port) for block in blocks] == [(1719, 1), (1719, 2)]
    assert [block.counters["PortXmitWait"] for block in blocks] == [22730501, 36510964]
    assert blocks[1].counters["PortMulticastXmitPkts"] == 0


PERFQUERY_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    "treydock-infiniband_exporter__perfquery-E_rcv-error_0x506b4b03005c2740-1.txt": _check_rcv_error(2052, 1),
    "treydock-infiniband_exporter__perfquery-E_rcv-error_0x7cfe9003009ce5b0-2.txt": _check_rcv_error(1719, 2),
    "treydock-infiniband_exporter__perfquery-x_0x506b4b03005c2740.txt": _check_perfquery_errors,
    "treydock-infiniband_exporter__perfquery-x_0x7cfe9003003b4b96.txt": _check_perfquery_clean(133, 37108676853855),
    "treydock-infiniband_exporter__perfquery-x_0x7cfe9003003b4bde.txt": _check_perfquery_clean(134, 9049592493976),
    "treydock-infiniband_exporter__perfquery-x_0x7cfe9003009ce5b0.txt": _check_perfquery_two_ports,
}


# --- mlnx_qos ----------------------------------------------------------------

def _check_qos_netarbiter(text: str) -> None:
    outputs = parse_mlnx_qos_all(text)
    assert len(outputs) == 2
    qos = parse_mlnx_qos(text)
    assert (qos.dcbx_mode, qos.trust, qos.pfc_enabled, qos.pfc_buffer, qos.cable_length) == ("OS controlled", "dscp", (3,), None, 7)
    assert len(qos.dscp_to_priority) == 64 and qos.dscp_to_priority[26] == 3 and qos.dscp_to_priority[48] == 6
    assert [(tc.tc, tc.priorities, tc.tsa) for tc in qos.traffic_classes[:2]] == [(0, (1,), "vendor"), (1, (0,), "vendor")]
    assert qos.ecn_enabled_priorities == ()


def _check_qos_spiderpool(text: str) -> None:
    qos = parse_mlnx_qos(text)
    assert (qos.dcbx_mode, qos.trust, qos.pfc_enabled, qos.pfc_buffer) == (None, "dscp", (5,), (0, 0, 0, 0, 0, 1, 0, 0))
    assert qos.ecn_enabled_priorities == tuple(range(8))
    assert (qos.roce_tos, qos.cnp_dscp) == (160, 48)


MLNX_QOS_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    "att-netarbiter__OUTPUTSAMPLE.setup-nic-lossless-layer3.sh.txt": _check_qos_netarbiter,
    "spidernet-io-spiderpool__roce-qos.md_set-rdma-qos-q.txt": _check_qos_spiderpool,
}


# --- nvidia-smi topo ------------------------------------------------------------------------

def _check_topo_glm(text: str) -> None:
    matrix = parse_nvidia_smi_topo_matrix(text)
    topo = matrix.topology
    assert topo.gpus == tuple(f"GPU{index}" for index in range(8)) and topo.nics == tuple(f"NIC{index}" for index in range(10))
    assert len(topo.links) == 18 * 18
    assert [nic for nic in topo.nics if topo.link("GPU3", nic) == "PIX"] == ["NIC0", "NIC1", "NIC2"]
    pix = {gpu: [nic for nic in topo.nics if topo.link(gpu, nic) == "PIX"] for gpu in topo.gpus if gpu != "GPU3"}
    assert pix == {"GPU0": ["NIC3"], "GPU1": ["NIC5"], "GPU2": ["NIC4"], "GPU4": ["NIC7"],
                   "GPU5": ["NIC9"], "GPU6": ["NIC8"], "GPU7": ["NIC6"]}
    assert topo.link("NIC0", "NIC1") == "PIX" and topo.link("GPU0", "GPU1") == "NV18" and topo.link("NIC9", "NIC9") == "X"
    assert topo.nic_names["NIC9"] == "mlx5_9" and topo.nic_label("mlx5_3") == "NIC3"
    assert topo.cpu_affinity["GPU4"] == "64-127,192-255" and topo.numa_affinity["GPU4"] == 1
    assert matrix.gpu_numa_id == dict.fromkeys(topo.gpus)


def _check_topo_two(link: str, cpus: str) -> Callable[[str], None]:
    def check(text: str) -> None:
        topo = parse_nvidia_smi_topo(text)
        assert (topo.gpus, topo.nics, topo.nic_names) == (("GPU0", "GPU1"), (), {})
        assert topo.link("GPU0", "GPU1") == link == topo.link("GPU1", "GPU0")
        assert topo.cpu_affinity == {"GPU0": cpus, "GPU1": cpus} and topo.numa_affinity == {"GPU0": None, "GPU1": None}
    return check


def _check_topo_eight(link: str, first_half: str, second_half: str) -> Callable[[str], None]:
    def check(text: str) -> None:
        topo = parse_nvidia_smi_topo(text)
        assert len(topo.gpus) == 8 and topo.nics == ()
        assert {cell for (row, column), cell in topo.links.items() if row != column} == {link}
        assert topo.cpu_affinity["GPU3"] == first_half and topo.cpu_affinity["GPU4"] == second_half
        assert [topo.numa_affinity[gpu] for gpu in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    return check


def _check_topo_gb200(text: str) -> None:
    # A GB200 tray: the command echoed above the matrix, NUMA Affinity lists (the CPU's node and
    # GPU memory nodes), GPU NUMA IDs 2/10/18/26, every GPU SYS to every NIC (NVLink-C2C).
    matrix = parse_nvidia_smi_topo_matrix(text)
    topo = matrix.topology
    assert topo.gpus == ("GPU0", "GPU1", "GPU2", "GPU3") and topo.nics == tuple(f"NIC{index}" for index in range(8))
    assert topo.nic_names == {f"NIC{index}": f"mlx5_{index}" for index in range(8)} and len(topo.links) == 12 * 12
    assert {topo.link(gpu, nic) for gpu in topo.gpus for nic in topo.nics} == {"SYS"}
    assert {topo.link(gpu, other) for gpu in topo.gpus for other in topo.gpus if gpu != other} == {"NV18"}
    assert [pair for pair, cell in topo.links.items() if cell == "PIX"] == [
        ("NIC2", "NIC3"), ("NIC3", "NIC2"), ("NIC6", "NIC7"), ("NIC7", "NIC6")]
    assert topo.cpu_affinity == {"GPU0": "0-71", "GPU1": "0-71", "GPU2": "72-143", "GPU3": "72-143"}
    assert matrix.gpu_numa_id == {"GPU0": 2, "GPU1": 10, "GPU2": 18, "GPU3": 26}
    assert matrix.numa_affinity_nodes["GPU1"] == (0, *range(3, 10), *range(11, 18))
    assert matrix.numa_affinity_nodes["GPU2"] == (1, *range(19, 26), *range(27, 34))
    assert topo.numa_affinity == {"GPU0": 0, "GPU1": 0, "GPU2": 1, "GPU3": 1}      # the CPU's node of each list


def _check_topo_b300_seven(text: str) -> None:
    # A B300 HGX with one GPU absent (7 of 8), no NIC columns, GPU NUMA ID N/A.
    matrix = parse_nvidia_smi_topo_matrix(text)
    topo = matrix.topology
    assert topo.gpus == tuple(f"GPU{index}" for index in range(7)) and topo.nics == () and topo.nic_names == {}
    assert {cell for (row, column), cell in topo.links.items() if row != column} == {"NV18"}
    assert topo.cpu_affinity["GPU2"] == "0,2,4,6,8,10" and topo.cpu_affinity["GPU3"] == "1,3,5,7,9,11"
    assert [topo.numa_affinity[gpu] for gpu in topo.gpus] == [0, 0, 0, 1, 1, 1, 1]
    assert matrix.gpu_numa_id == dict.fromkeys(topo.gpus) and matrix.numa_affinity_nodes["GPU6"] == (1,)


def _check_p2p_refused(text: str) -> None:
    # A `topo -p2p` matrix pasted where `topo -m` belongs is named as such, not misread.
    with pytest.raises(ParseError, match="-p2p"):
        parse_nvidia_smi_topo(text)


TOPO_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    "dw-flyingw-GLM-5.2-FP8__topo.txt": _check_topo_glm,
    "indexed-doc-61093033028__gb200-tray_topo-m_4gpu-8nic.txt": _check_topo_gb200,
    "dell-xe9780-doc-63125688786__b300-sxm6-ac_7gpu_topo-m.txt": _check_topo_b300_seven,
    "stas00-ml-engineering__network-README_topo-m_2gpu-NV2.txt": _check_topo_two("NV2", "0-23"),
    "stas00-ml-engineering__network-README_topo-m_2gpu-PHB.txt": _check_topo_two("PHB", "0-11"),
    "stas00-ml-engineering__network-README_topo-m_8xA100-NV12.txt": _check_topo_eight("NV12", "0-23", "24-47"),
    "stas00-ml-engineering__network-README_topo-m_8xH100-NV18.txt": _check_topo_eight("NV18", "0-51", "52-103"),
    "stas00-ml-engineering__topo-p2p-r_2xL4.txt": _check_p2p_refused,
    "stas00-ml-engineering__topo-p2p-r_8xH100.txt": _check_p2p_refused,
}


# --- fi_info ---------------------------------------------------------------------------------

def _efa_rdm(domain: str, version: str, fabric: str = "efa") -> FiProvider:
    return FiProvider("efa", fabric, domain, version, "FI_EP_RDM", "FI_PROTO_EFA")


def _check_fi_info_p4d_docs(text: str) -> None:
    providers = parse_fi_info(text)
    assert [provider.domain for provider in providers] == [f"efa_{index}-rdm" for index in range(4)]
    assert [provider.fabric for provider in providers] == [
        "EFA-fe80::c6e:8fff:fef6:e7ff", "EFA-fe80::c34:3eff:feb2:3c35", "EFA-fe80::c0f:7bff:fe68:a775",
        "EFA-fe80::ca7:b0ff:fea6:5e99"]
    assert {(provider.provider, provider.version, provider.ep_type, provider.protocol) for provider in providers} == {
        ("efa", "111.0", "FI_EP_RDM", "FI_PROTO_EFA")}


def _check_fi_info_p4d_rdmap(text: str) -> None:
    providers = parse_fi_info(text)
    assert [provider.domain for provider in providers] == [
        "rdmap16s27-rdm", "rdmap32s27-rdm", "rdmap144s27-rdm", "rdmap160s27-rdm"]
    assert providers[0] == _efa_rdm("rdmap16s27-rdm", "111.20", "EFA-fe80::10d8:baff:fec9:6c1")
    assert {provider.version for provider in providers} == {"111.20"}


FI_INFO_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    "awsdocs-amazon-ec2-user-guide__fi_info-p-efa-t-rdm_p3dn-one-device.txt": lambda text: _assert_equal(
        parse_fi_info(text), [_efa_rdm("efa_0-rdm", "2.0", "EFA-fe80::94:3dff:fe89:1b70")]),
    "awsdocs-amazon-ec2-user-guide__fi_info-p-efa-t-rdm_p4d-four-devices.txt": _check_fi_info_p4d_docs,
    "pbelevich-fair_seq_fsdp_slurm__fi_info-p-efa-t-rdm_p4d-rdmap.txt": _check_fi_info_p4d_rdmap,
    "gnosia93-training-on-eks__fi_info-p-efa_efa-direct-rdm-dgrm.txt": lambda text: _assert_equal(
        parse_fi_info(text), [_efa_rdm("rdmap47s0-rdm", "201.0", "efa-direct"), _efa_rdm("rdmap47s0-rdm", "201.0"),
                              FiProvider("efa", "efa", "rdmap47s0-dgrm", "201.0", "FI_EP_DGRAM", "FI_PROTO_EFA")]),
    "eth-cscs-cscs-docs__fi_info-p-cxi-working.txt": lambda text: _assert_equal(
        parse_fi_info(text), [FiProvider("cxi", "cxi", "cxi0", "0.1", "FI_EP_RDM", "FI_PROTO_CXI")]),
    # fi_getinfo's -FI_ENODATA: no provider, an answer rather than a failure.
    "pbelevich-fair_seq_fsdp_slurm__fi_getinfo-61-no-efa.txt": lambda text: _assert_equal(parse_fi_info(text), []),
    "eth-cscs-cscs-docs__fi_info-p-cxi-fi_getinfo-61-no-data-available.txt": lambda text: _assert_equal(
        parse_fi_info(text), []),
    "telescope-proj-lgproxy__fi_info-version-1.21.0a1.txt": lambda text: _assert_equal(
        parse_fi_info_version(text), "1.21.0a1"),
}


# --- sysfs ----------------------------------------------------------------------------------

def _port_values(files: dict[str, str], marker: str = "/infiniband/") -> dict[str, dict[str, Any]]:
    """Parse every state/phys_state/rate/link_layer/counter file of a sysfs map: port -> facts.

    Keys are `hca:port`. A phys_state that does not parse is recorded as the ParseError.
    """
    ports: dict[str, dict[str, Any]] = {}
    for path, content in files.items():
        if marker not in path or "/ports/" not in path:
            continue
        hca = path.split(marker, 1)[1].split("/", 1)[0]
        after = path.split("/ports/", 1)[1].split("/")
        name = f"{hca}:{after[0]}"
        facts = ports.setdefault(name, {"counters": {}, "hw_counters": {}})
        leaf = after[-1]
        if len(after) == 3 and after[1] in ("counters", "hw_counters", "counters_ext"):
            facts.setdefault(after[1], {})[leaf] = parse_counter(content)
        elif leaf == "state":
            facts["state"] = parse_port_state(content)
        elif leaf == "phys_state":
            try:
                facts["phys_state"] = parse_phys_state(content)
            except ParseError as error:
                facts["phys_state"] = error
        elif leaf == "rate":
            facts["rate"] = parse_rate(content)
        elif leaf in ("lid", "sm_lid"):
            try:
                facts[leaf] = parse_hex_or_int(content)
            except ParseError as error:
                facts[leaf] = error
    return ports


def _check_gpud_tree(path: Path) -> None:
    files = {str(file.relative_to(path)): file.read_text() for file in path.rglob("*") if file.is_file()}
    ports = _port_values({f"/sys/class/infiniband/{name}": content for name, content in files.items()})
    assert len(ports) == 9
    assert {name for name, facts in ports.items() if facts["rate"] == LinkRate(400.0, 4, "NDR", 106.25)} == {
        f"mlx5_{index}:1" for index in (0, 1, 4, 5, 6, 7, 8, 9)}
    assert ports["mlx5_bond_0:1"]["rate"] == LinkRate(200.0, 2, "NDR", 106.25)
    assert {facts["state"] for facts in ports.values()} == {ACTIVE}
    assert {facts["phys_state"] for facts in ports.values()} == {LINK_UP}
    assert ports["mlx5_1:1"]["counters"]["link_downed"] == 255
    assert {facts["counters"]["link_downed"] for name, facts in ports.items() if name != "mlx5_1:1"} == {0}
    assert all(value is not None for facts in ports.values() for value in facts["counters"].values())
    assert len(ports["mlx5_0:1"]["hw_counters"]) >= 20


def _check_procfs_ttar(path: Path) -> None:
    ports = _port_values(read_ttar(path))
    assert sorted(ports) == ["hfi1_0:1", "mlx4_0:1", "mlx4_0:2", "mlx5_0:1"]
    assert ports["hfi1_0:1"]["rate"] == LinkRate(100.0, 4, "EDR", 25.78125)
    assert ports["mlx4_0:2"]["rate"] == LinkRate(40.0, 4, "QDR", 10.0)
    assert ports["mlx5_0:1"]["rate"] == LinkRate(25.0, 1, "EDR", 25.78125)
    # The fixture's mlx5_0 phys_state holds `4: ACTIVE`, a logical state: refused.
    assert isinstance(ports["mlx5_0:1"]["phys_state"], ParseError)
    assert ports["mlx4_0:1"]["phys_state"] is LINK_UP
    hw = ports["mlx5_0:1"]["hw_counters"]
    assert (hw["req_cqe_error"], hw["local_ack_timeout_err"], hw["roce_adp_retrans"]) == (3481, 131, 99)


def _check_node_exporter_ttar(path: Path) -> None:
    ports = _port_values(read_ttar(path))
    assert sorted(ports) == ["i40iw0:1", "mlx4_0:1", "mlx4_0:2"]
    iwarp = ports["i40iw0:1"]
    assert iwarp["rate"] == LinkRate(10.0, 4, None, None)
    assert len(iwarp["counters"]) == 17 and set(iwarp["counters"].values()) == {None}   # `N/A (no PMA)`
    assert ports["mlx4_0:1"]["counters"]["port_xmit_wait"] == 4294967295
    assert ports["mlx4_0:1"]["counters"]["port_xmit_discards"] == 5
    assert ports["mlx4_0:1"]["counters_ext"]["port_rcv_data_64"] == 4631917
    assert len(ports["mlx4_0:2"]["counters"]) == 8


def _gcm(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    files = read_gcm_json(path)
    return _port_values(files), files


def _netdev_values(files: dict[str, str], leaf: str) -> dict[str, str]:
    return {path.split("/net/")[1].split("/")[0]: content for path, content in files.items()
            if "/net/" in path and path.endswith("/" + leaf)}


def _check_gcm_good(path: Path) -> None:
    ports, files = _gcm(path)
    assert len(ports) == 8
    assert {facts["rate"] for facts in ports.values()} == {LinkRate(200.0, 4, "HDR", 53.125)}
    assert {facts["state"] for facts in ports.values()} == {ACTIVE}
    # `lid`/`sm_lid` were anonymised to the word itself upstream: refused, not guessed.
    assert all(isinstance(facts["lid"], ParseError) for facts in ports.values())
    assert {parse_int(value) for value in _netdev_values(files, "mtu").values()} == {2044}
    assert {parse_int(value) for value in _netdev_values(files, "speed").values()} == {200000}
    speeds = {path: parse_pcie_speed(content) for path, content in files.items() if path.endswith("current_link_speed")}
    widths = [parse_link_width(content) for path, content in files.items() if path.endswith("current_link_width")]
    assert set(speeds.values()) == {2.5, 8.0, 16.0}
    assert {pcie_generation(speed) for speed in speeds.values()} == {1, 3, 4}
    assert widths.count(16) > 10 and 4 in widths


def _check_gcm_bad_rate(path: Path) -> None:
    ports, files = _gcm(path)
    assert {facts["rate"] for facts in ports.values()} == {LinkRate(100.0, 4, "EDR", 25.78125)}
    assert {parse_int(value) for value in _netdev_values(files, "speed").values()} == {200000}


def _check_gcm_operstate_down(path: Path) -> None:
    ports, files = _gcm(path)
    assert ports["mlx5_6:1"]["state"] is ACTIVE and ports["mlx5_6:1"]["phys_state"] is LINK_UP
    operstate = {name: value.strip() for name, value in _netdev_values(files, "operstate").items()}
    assert operstate["ib4"] == "down" and {value for name, value in operstate.items() if name != "ib4"} == {"up"}
    assert parse_int(_netdev_values(files, "carrier_changes")["ib4"]) == 98
    with pytest.raises(ParseError):
        parse_int(_netdev_values(files, "carrier")["ib4"])   # empty: the read failed


def _check_gcm_stuck(path: Path) -> None:
    ports, _ = _gcm(path)
    # PROVENANCE names mlx5_8 only; the file has mlx5_6 stuck in INIT as well.
    assert sorted(name for name, facts in ports.items() if facts["state"] is INIT) == ["mlx5_6:1", "mlx5_8:1"]
    assert ports["mlx5_8:1"]["phys_state"] is LINK_UP
    assert sum(facts["state"] is ACTIVE for facts in ports.values()) == 6


SYSFS_EXPECTATIONS: dict[str, Callable[[Path], None] | str] = {
    "leptonai-gpud__sys-class-infiniband-h100.0": _check_gpud_tree,
    "prometheus-procfs__fixtures.ttar": _check_procfs_ttar,
    "prometheus-node_exporter__sys.ttar": _check_node_exporter_ttar,
    "facebookresearch-gcm__learn_good.json": _check_gcm_good,
    "facebookresearch-gcm__learn_ib_intf_bad_rate.json": _check_gcm_bad_rate,
    "facebookresearch-gcm__learn_ib_intf_operstate_down.json": _check_gcm_operstate_down,
    "facebookresearch-gcm__learn_stuck_ib_intf.json": _check_gcm_stuck,
    # Not a sysfs value: GPUDirect module presence is read from /sys/module by the host layer.
    "spidernet-io-spiderpool__ai-index.md_lsmod-peermem-gdrdrv.txt": "lsmod transcript, not parsed here",
}


# --- the tests ------------------------------------------------------------------------------

TEXT_KINDS: dict[str, dict[str, Callable[[str], None]]] = {
    "ibstat": IBSTAT_EXPECTATIONS,
    "ibv_devinfo": IBV_DEVINFO_EXPECTATIONS,
    "ibdev2netdev": IBDEV2NETDEV_EXPECTATIONS,
    "iblinkinfo": IBLINKINFO_EXPECTATIONS,
    "perfquery": PERFQUERY_EXPECTATIONS,
    "mlnx_qos": MLNX_QOS_EXPECTATIONS,
    "nvidia-smi-topo": TOPO_EXPECTATIONS,
    "fi_info": FI_INFO_EXPECTATIONS,
    # Physical layer: the checks live with their edge cases in test_parsers_phy.py.
    "mlxlink-c": MLXLINK_C_EXPECTATIONS,
    "ethtool-S": ETHTOOL_S_EXPECTATIONS,
    # The NVLink domain (CONTRACT 8): checks in test_parsers_imex.py / test_parsers_smi_q.py.
    "nvidia-imex-ctl": IMEX_EXPECTATIONS,
    "nvidia-smi-q": SMI_Q_EXPECTATIONS,
}

TEXT_CASES = [
    pytest.param(kind, path, id=f"{kind}/{path.name}") for kind in TEXT_KINDS for path in corpus_files(kind)
]


@pytest.mark.parametrize(("kind", "path"), TEXT_CASES)
def test_corpus_file(kind: str, path: Path) -> None:
    expectations = TEXT_KINDS[kind]
    assert path.name in expectations, f"no expectation for new corpus file {kind}/{path.name}"
    expectations[path.name](_read(path))


SYSFS_CASES = [
    pytest.param(entry, id=f"sysfs/{entry.name}")
    for entry in (sorted((CORPUS / "sysfs").iterdir()) if (CORPUS / "sysfs").is_dir() else [])
]


@pytest.mark.parametrize("path", SYSFS_CASES)
def test_sysfs_corpus_entry(path: Path) -> None:
    expectation = SYSFS_EXPECTATIONS.get(path.name)
    assert expectation is not None, f"no expectation for new corpus entry sysfs/{path.name}"
    if isinstance(expectation, str):
        pytest.skip(expectation)
    expectation(path)


def test_every_corpus_file_has_expectations() -> None:
    root = corpus_dir()
    missing = [f"{kind}/{path.name}" for kind, table in TEXT_KINDS.items() for path in corpus_files(kind) if path.name not in table]
    missing += [f"sysfs/{entry.name}" for entry in sorted((root / "sysfs").iterdir()) if entry.name not in SYSFS_EXPECTATIONS]
    stale = [f"{kind}/{name}" for kind, table in TEXT_KINDS.items() for name in table if not (root / kind / name).exists()]
    stale += [f"sysfs/{name}" for name in SYSFS_EXPECTATIONS if not (root / "sysfs" / name).exists()]
    assert not missing, f"corpus files without expectations: {missing}"
    assert not stale, f"expectations for files no longer in the corpus: {stale}"
