"""link-speed: rate and width against the port class, the node's peers and iblinkinfo hints."""

from __future__ import annotations

from pathlib import Path

from inventory_factory import HDR, dgx_h100, ib_hca, only, port_of, roce_node, run_check, site_pack, sources
from netdoctor.inventory.model import LinkRate, PhysState, PortState, SourceState
from netdoctor.report.model import Status
from netdoctor_plugins.link_speed import link_speed

CHECK = "link-speed"


def run(inventory, **kwargs):
    return run_check(link_speed, CHECK, inventory, **kwargs)


def test_ndr_ports_pass_against_the_port_class() -> None:
    findings = run(dgx_h100(), pack_name="dgx-h100")
    finding = only(findings, "mlx5_0:1")
    assert finding.status is Status.PASS
    assert finding.summary == "400 Gb/s (4X NDR) as expected (port class 'compute')"
    assert finding.evidence["expected_gbps"] == 400.0 and finding.evidence["expected_width"] == 4
    # The BlueField storage port has no class rate and no same-type peer: passes, saying so.
    bond = only(findings, "mlx5_bond_0:1")
    assert bond.status is Status.PASS and "no reference rate" in bond.summary


def test_hdr_on_an_ndr_class_fails_with_the_contract_wording() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_3:1").rate = HDR
    finding = only(run(inventory, pack_name="dgx-h100"), "mlx5_3:1")
    assert finding.status is Status.FAIL
    assert finding.summary == ("port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR) (port class 'compute')")
    assert finding.evidence["rate_gbps"] == 200 and finding.evidence["expected_gbps"] == 400.0
    assert finding.rule == "degraded"
    assert "cable" in (finding.remedy or "")


def test_without_a_class_rate_the_peer_majority_is_expected() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_3:1").rate = LinkRate(200, 2, "NDR", 106.25)
    finding = only(run(inventory, pack_name="default"), "mlx5_3:1")
    assert finding.status is Status.FAIL
    assert finding.summary == ("port runs at 200 Gb/s (2X NDR), expected 400 Gb/s (4X NDR) "
                               "(the rate and width most of the 8 active MT4129 ports run at)")
    assert finding.remedy is not None and finding.remedy.startswith("a lane is down")


def test_one_x_port_is_caught_by_width_alone() -> None:
    inventory = dgx_h100()
    # A pack that expects only the width: 4X. A 1X port at the "right" per-lane speed still fails.
    port_of(inventory, "mlx5_1:1").rate = LinkRate(100, 1, "NDR", 106.25)
    finding = only(run(inventory, pack_name="dgx-h100"), "mlx5_1:1")
    assert finding.status is Status.FAIL
    assert finding.evidence["width"] == 1 and finding.evidence["expected_width"] == 4


def test_could_be_hint_fails_even_without_other_expectations() -> None:
    inventory = dgx_h100(storage=None)
    for port in inventory.ports:
        port.rate = HDR                     # all peers agree: HDR
    port = port_of(inventory, "mlx5_5:1")
    port.could_be = LinkRate(None, 4, None, 106.25)
    finding = only(run(inventory), "mlx5_5:1")
    assert finding.status is Status.FAIL
    assert finding.summary == "port runs at 200 Gb/s (4X HDR), iblinkinfo says the link could run at 106.25 Gb/s per lane"
    assert finding.evidence["could_be"] == "unknown rate (4X)"
    assert only(run(inventory, overrides={"use_could_be": False}), "mlx5_5:1").status is Status.PASS


def test_degraded_severity_comes_from_the_pack() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_3:1").rate = HDR
    finding = only(run(inventory, pack_name="dgx-h100", overrides={"degraded_severity": "warn"}), "mlx5_3:1")
    assert finding.status is Status.WARN


def test_port_faster_than_its_class_warns(tmp_path: Path) -> None:
    pack = site_pack(tmp_path, "dgx-h100", "[port-classes.compute]\nexpected_rate_gbps = 200\n")
    finding = only(run(dgx_h100(), rule_pack=pack), "mlx5_0:1")
    assert finding.status is Status.WARN
    assert finding.summary.startswith("port runs at 400 Gb/s (4X NDR), faster than expected 200 Gb/s (4X HDR)")
    assert finding.rule == "faster"


def test_down_port_is_skipped_pointing_at_port_state() -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_4:1")
    port.state, port.phys_state, port.rate = PortState.DOWN, PhysState.POLLING, LinkRate(40, 4, "QDR")
    finding = only(run(inventory), "mlx5_4:1")
    assert finding.status is Status.SKIP
    assert finding.summary == "port not active; see port-state"


def test_unused_class_is_skipped(tmp_path: Path) -> None:
    pack = site_pack(tmp_path, "dgx-h100", '[port-classes.spare]\nhca_names = ["mlx5_7"]\nrole = "unused"\n')
    finding = only(run(dgx_h100(), rule_pack=pack), "mlx5_7:1")
    assert finding.status is Status.SKIP and "unused" in finding.summary


def test_unknown_rate_names_the_sources() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_2:1").rate = None
    inventory.sources.update(sources("ibstat", "ibv_devinfo-v", state=SourceState.MISSING))
    finding = only(run(inventory), "mlx5_2:1")
    assert finding.status is Status.UNKNOWN
    assert finding.summary == "rate unknown: ibstat is not available; ibv_devinfo-v is not available"


def test_roce_ports_against_the_roce_class_rate() -> None:
    inventory = roce_node()
    port_of(inventory, "mlx5_6:1").rate = LinkRate(200, 4)
    findings = run(inventory, pack_name="roce")
    assert only(findings, "mlx5_0:1").status is Status.PASS
    finding = only(findings, "mlx5_6:1")
    assert finding.status is Status.FAIL
    # Ethernet rates carry no IB speed name.
    assert finding.summary.startswith("port runs at 200 Gb/s (4X), expected 400 Gb/s (4X)")


def test_could_be_hint_reads_as_a_rate_and_the_remedy_names_the_device() -> None:
    inventory = dgx_h100(storage=None)
    for port in inventory.ports:
        port.rate = HDR
    port = port_of(inventory, "mlx5_5:1")
    port.could_be = LinkRate(400, 4, "NDR", 106.25)
    finding = only(run(inventory), "mlx5_5:1")
    assert finding.summary == "port runs at 200 Gb/s (4X HDR), iblinkinfo says the link could run at 400 Gb/s (4X NDR)"
    assert "(`mlxlink -d mlx5_5`)" in (finding.remedy or "") and "<hca>" not in (finding.remedy or "")
    narrow = dgx_h100()
    port_of(narrow, "mlx5_2:1").rate = LinkRate(100, 1, "NDR", 106.25)
    assert "`mlxlink -d mlx5_2 -m`" in (only(run(narrow, pack_name="dgx-h100"), "mlx5_2:1").remedy or "")


def ib_storage_node():
    """DGX H100 plus a dual-port ConnectX-7 storage card in IB mode at NDR200 2X (mlx5_8, mlx5_9);
    no `nvidia-smi topo -m` matrix, so GPU proximity falls back to NUMA nodes."""
    inventory = dgx_h100(storage=None, topology=None)
    for index in (8, 9):
        hca = ib_hca(index, rate=LinkRate(200, 2, "NDR", 106.25))
        hca.numa_node = 3                    # no GPU on that NUMA node: not next to a GPU
        inventory.hcas.append(hca)
    return inventory


def test_storage_ports_are_compared_only_with_their_own_class() -> None:
    inventory = ib_storage_node()
    findings = run(inventory, pack_name="dgx-h100")
    storage = only(findings, "mlx5_8:1")
    assert storage.status is Status.PASS and storage.evidence["port_class"] == "storage"
    assert storage.summary == ("200 Gb/s (2X NDR) as expected (the rate and width most of the 2 active MT4129 "
                               "'storage' ports run at)")
    assert storage.evidence["gpu_proximity"].startswith("no GPU on NUMA node 3 (NUMA fallback: ")
    assert {finding.status for finding in findings} == {Status.PASS}
    # Without port classes every MT4129 IB port is one peer group: the storage ports look degraded.
    assert only(run(inventory), "mlx5_8:1").status is Status.FAIL


def test_virtual_function_is_skipped_and_is_no_peer() -> None:
    inventory = dgx_h100(storage=None)
    for index in range(10, 19):             # 9 VFs at HDR would outvote the 8 NDR rails as peers
        vf = ib_hca(index, rate=HDR)
        vf.ca_type, vf.physical_function = "MT4129", inventory.hcas[0].pci_address
        inventory.hcas.append(vf)
    findings = run(inventory)
    assert only(findings, "mlx5_10:1").status is Status.SKIP
    assert only(findings, "mlx5_10:1").summary == ("SR-IOV virtual function of 0000:1a:00.0 (mlx5_0): judged "
                                                    "through its physical function")
    assert {finding.status for finding in findings if finding.subject in {f"mlx5_{i}:1" for i in range(8)}} == {
        Status.PASS}
