"""mtu: IB active MTU, RoCE and IPoIB netdev MTUs, consistency within a port class."""

from __future__ import annotations

import copy
from pathlib import Path

from inventory_factory import dgx_h100, only, port_of, roce_node, run_check, site_pack, sources
from netdoctor.inventory.model import Netdev, PhysState, PortState, SourceState
from netdoctor.report.model import Status
from netdoctor_plugins.mtu import mtu

CHECK = "mtu"


def run(inventory, **kwargs):
    return run_check(mtu, CHECK, inventory, **kwargs)


def test_healthy_dgx_passes_ib_ipoib_and_skips_the_storage_netdev() -> None:
    findings = run(dgx_h100(), pack_name="dgx-h100")
    assert {finding.status for finding in findings if finding.subject != "bond0"} == {Status.PASS}
    assert only(findings, "mlx5_0:1").summary == "IB active MTU 4096"
    assert only(findings, "ibp0s0").summary == "IPoIB netdev MTU 4092"
    storage = only(findings, "bond0")
    assert storage.status is Status.SKIP
    assert storage.summary == ("mlx5_bond_0:1: port class 'storage' is not a RoCE compute rail (role storage); "
                               "RoCE MTU not judged")
    assert len(findings) == 8 + 8 + 1
    # Without port classes (default pack) the same Ethernet RDMA port is assumed RoCE and judged.
    assert only(run(dgx_h100()), "bond0").summary == "RoCE netdev MTU 9000"


def test_ib_mtu_2048_warns_with_the_sm_remedy() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_3:1").active_mtu = 2048
    finding = only(run(inventory), "mlx5_3:1")
    assert finding.status is Status.WARN
    assert finding.summary == "IB active MTU is 2048, expected 4096"
    assert finding.rule == "ib_mtu"
    assert "partitions.conf" in (finding.remedy or "")


def test_ib_mtu_limited_by_the_hca_points_at_the_hca() -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_3:1")
    port.active_mtu, port.max_mtu = 2048, 2048
    finding = only(run(inventory, overrides={"ib_mtu_severity": "fail"}), "mlx5_3:1")
    assert finding.status is Status.FAIL
    assert (finding.remedy or "").startswith("the HCA port's max MTU is 2048")
    assert "`mlxconfig -d mlx5_3 q`" in (finding.remedy or "")


def test_roce_netdev_at_1500_warns() -> None:
    inventory = roce_node()
    netdev = inventory.netdev("ens3f0np0")
    assert netdev is not None
    netdev.mtu = 1500
    findings = run(inventory, pack_name="roce")
    finding = only(findings, "ens3f0np0")
    assert finding.status is Status.WARN
    assert finding.summary == ("RoCE netdev MTU is 1500, below 4200: the RoCE MTU drops below 4096 (1500 gives 1024)")
    assert finding.rule == "roce_mtu"
    # Only the offender: the other 7 pass (the consistency rule does not pile on).
    assert [item.status for item in findings].count(Status.PASS) == 7


def test_mismatched_mtus_in_one_class_warn_on_the_odd_one_out() -> None:
    inventory = roce_node()
    netdev = inventory.netdev("ens5f0np0")
    assert netdev is not None
    netdev.mtu = 4200                   # above the minimum, but unlike its 7 siblings at 9000
    finding = only(run(inventory, pack_name="roce"), "ens5f0np0")
    assert finding.status is Status.WARN
    assert finding.summary == "RoCE netdev MTU 4200 differs from the 9000 of the other 7 of port class 'compute'"
    assert finding.rule == "consistent_mtu"
    assert finding.evidence["mtus"] == {"4200": 1, "9000": 7}


def test_ipoib_below_the_pack_minimum_warns(tmp_path: Path) -> None:
    pack = site_pack(tmp_path, "dgx-h100", "[mtu]\nipoib_min_mtu = 4092\n")
    inventory = dgx_h100()
    for netdev in inventory.netdevs:
        if netdev.is_ipoib:
            netdev.mtu = 2044
    finding = only(run(inventory, rule_pack=pack), "ibp2s0")
    assert finding.status is Status.WARN
    assert finding.summary == "IPoIB netdev MTU is 2044, below 4092"
    assert finding.rule == "ipoib_mtu"


def test_ipoib_connected_mode_odd_one_out_warns() -> None:
    inventory = dgx_h100()
    netdev = inventory.netdev("ibp6s0")
    assert netdev is not None
    netdev.mtu = 65520
    finding = only(run(inventory), "ibp6s0")
    assert finding.status is Status.WARN
    assert finding.summary == "IPoIB netdev MTU 65520 differs from the 4092 of the other 7 of port class 'unclassed'"


def test_unknown_active_mtu_names_ibv_devinfo() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_1:1").active_mtu = None
    inventory.sources.update(sources("ibv_devinfo-v", state=SourceState.MISSING))
    finding = only(run(inventory), "mlx5_1:1")
    assert finding.status is Status.UNKNOWN
    assert finding.summary == "IB active MTU unknown: ibv_devinfo-v is not available"


def test_roce_port_without_a_known_netdev_is_unknown() -> None:
    inventory = roce_node()
    port_of(inventory, "mlx5_2:1").netdev = None
    inventory.sources.update(sources("ibdev2netdev", state=SourceState.MISSING))
    finding = only(run(inventory, pack_name="roce"), "mlx5_2:1")
    assert finding.status is Status.UNKNOWN
    assert finding.summary == "no netdev known for this RoCE port: ibdev2netdev is not available"


def test_down_ib_port_and_unused_class_are_skipped(tmp_path: Path) -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_4:1")
    port.state, port.phys_state = PortState.DOWN, PhysState.POLLING
    findings = run(inventory)
    assert only(findings, "mlx5_4:1").status is Status.SKIP
    assert only(findings, "mlx5_4:1").summary == "port not active; see port-state"
    pack = site_pack(tmp_path, "dgx-h100", '[port-classes.spare]\nhca_names = ["mlx5_7"]\nrole = "unused"\n')
    findings = run(dgx_h100(), rule_pack=pack)
    assert only(findings, "mlx5_7:1").status is Status.SKIP
    assert only(findings, "ibp7s0").status is Status.SKIP


def test_virtual_function_and_its_ipoib_netdev_are_skipped() -> None:
    inventory = dgx_h100()
    vf = copy.deepcopy(inventory.hca("mlx5_0"))
    vf.name, vf.pci_address, vf.physical_function = "mlx5_12", "0000:1a:00.1", inventory.hca("mlx5_0").pci_address
    vf.ports[1].hca, vf.ports[1].active_mtu, vf.ports[1].netdev = "mlx5_12", 1024, "ibp24s0v1"
    inventory.hcas.append(vf)
    inventory.netdevs.append(Netdev("ibp24s0v1", mtu=1500, arp_type=32, rdma_port="mlx5_12:1"))
    findings = run(inventory, pack_name="dgx-h100")
    assert only(findings, "mlx5_12:1").status is Status.SKIP
    assert "SR-IOV virtual function of" in only(findings, "mlx5_12:1").summary
    assert [finding for finding in findings if finding.subject == "ibp24s0v1"] == []
    assert {finding.status for finding in findings if finding.subject not in ("mlx5_12:1", "bond0")} == {Status.PASS}


def test_roce_frontend_port_is_skipped_by_the_roce_pack() -> None:
    inventory = roce_node()
    inventory.hcas[7].ca_type = "MT4127"          # a ConnectX-6 Lx frontend NIC at MTU 1500
    inventory.netdev("ens8f0np0").mtu = 1500
    finding = only(run(inventory, pack_name="roce"), "ens8f0np0")
    assert finding.status is Status.SKIP
    assert "port class 'frontend' is not a RoCE compute rail (role management)" in finding.summary
    assert only(run(inventory), "ens8f0np0").status is Status.WARN      # default: every RDMA Ethernet port
