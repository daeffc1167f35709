"""port-state: logical/physical state, LID, SM reachability and P_Keys of every RDMA port."""

from __future__ import annotations

from pathlib import Path

from inventory_factory import dgx_h100, only, port_of, roce_node, run_check, site_pack, sources, statuses
from netdoctor.inventory.model import PhysState, PortState, SourceState
from netdoctor.report.model import Status
from netdoctor_plugins.port_state import port_state

CHECK = "port-state"


def run(inventory, **kwargs):
    return run_check(port_state, CHECK, inventory, **kwargs)


def test_healthy_dgx_passes_every_port_the_sm_and_the_pkeys() -> None:
    findings = run(dgx_h100(), pack_name="dgx-h100")
    assert {finding.status for finding in findings} == {Status.PASS}
    assert only(findings, "mlx5_3:1").summary == "ACTIVE/LinkUp, 400 Gb/s (4X NDR), LID 0x14, SM LID 0x1"
    assert only(findings, "mlx5_bond_0:1").summary == "ACTIVE/LinkUp, 200 Gb/s (2X NDR)"   # Ethernet: no LID
    node = [finding.summary for finding in findings if finding.subject == "node"]
    assert node == ["all 8 active IB ports see SM LID 0x1", "P_Keys 0xffff on all 8 IB compute ports"]


def test_down_polling_port_fails_named_as_such() -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_4:1")
    port.state, port.phys_state = PortState.DOWN, PhysState.POLLING
    findings = run(inventory, pack_name="dgx-h100")
    finding = only(findings, "mlx5_4:1")
    assert finding.status is Status.FAIL
    assert finding.summary.startswith("DOWN/Polling: no link partner")
    assert "cable" in (finding.remedy or "")
    assert finding.rule == "not_active"
    assert finding.evidence["state"] == "DOWN" and finding.evidence["phys_state"] == "Polling"
    # The down port is left out of the SM comparison: the other 7 agree.
    node = [finding.summary for finding in findings if finding.subject == "node"]
    assert node[0] == "all 7 active IB ports see SM LID 0x1"


def test_init_with_link_up_means_no_subnet_manager() -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_1:1")
    port.state, port.lid = PortState.INIT, 0
    finding = only(run(inventory), "mlx5_1:1")
    assert finding.status is Status.FAIL
    assert finding.summary == "INIT/LinkUp: the link is up but no subnet manager configured the port"
    assert "opensm" in (finding.remedy or "") and "UFM" in (finding.remedy or "")


def test_armed_port_fails() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_2:1").state = PortState.ARMED
    finding = only(run(inventory), "mlx5_2:1")
    assert finding.status is Status.FAIL
    assert "has not activated it" in finding.summary


def test_disabled_compute_port_fails_but_an_unused_class_port_is_skipped(tmp_path: Path) -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_7:1")
    port.state, port.phys_state = PortState.DOWN, PhysState.DISABLED
    disabled = only(run(inventory, pack_name="dgx-h100"), "mlx5_7:1")
    assert disabled.status is Status.FAIL
    assert disabled.summary == "DOWN/Disabled: the port is administratively disabled"
    assert 'role "unused"' in (disabled.remedy or "")

    pack = site_pack(tmp_path, "dgx-h100", '[port-classes.spare]\nhca_names = ["mlx5_7"]\nrole = "unused"\n')
    skipped = only(run(inventory, rule_pack=pack), "mlx5_7:1")
    assert skipped.status is Status.SKIP
    assert skipped.summary == "DOWN/Disabled: down by design (port class 'spare' is unused)"
    assert skipped.evidence["role"] == "unused"


def test_not_active_severity_comes_from_the_pack() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_4:1").state = PortState.DOWN
    port_of(inventory, "mlx5_4:1").phys_state = PhysState.POLLING
    finding = only(run(inventory, overrides={"not_active_severity": "warn"}), "mlx5_4:1")
    assert finding.status is Status.WARN


def test_active_port_without_valid_lid_fails() -> None:
    for lid in (0, 0xFFFF):
        inventory = dgx_h100()
        port_of(inventory, "mlx5_0:1").lid = lid
        finding = only(run(inventory), "mlx5_0:1")
        assert finding.status is Status.FAIL
        assert finding.summary == f"ACTIVE without a valid LID (0x{lid:04x}): the subnet manager did not assign one"


def test_active_port_with_sm_lid_zero_fails() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_6:1").sm_lid = 0
    finding = only(run(inventory), "mlx5_6:1")
    assert finding.status is Status.FAIL
    assert "no subnet manager is reachable" in finding.summary


def test_active_but_retraining_warns() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_5:1").phys_state = PhysState.LINK_ERROR_RECOVERY
    finding = only(run(inventory), "mlx5_5:1")
    assert finding.status is Status.WARN
    assert finding.summary.startswith("ACTIVE/LinkErrorRecovery")
    assert finding.rule == "degraded_active"


def test_different_sm_lids_warn_on_the_node_with_the_ports() -> None:
    inventory = dgx_h100()
    for index in (4, 5):
        port_of(inventory, f"mlx5_{index}:1").sm_lid = 0x5
    finding = only(run(inventory), "node", Status.WARN)
    assert finding.summary == ("active IB ports see different subnet managers: SM LID 0x1 on mlx5_0:1, mlx5_1:1, "
                               "mlx5_2:1, mlx5_3:1, mlx5_6:1, mlx5_7:1; 0x5 on mlx5_4:1, mlx5_5:1")
    assert finding.rule == "sm_mismatch"
    assert finding.evidence["sm_lids"]["0x5"] == ["mlx5_4:1", "mlx5_5:1"]


def test_sm_scope_per_port_class_accepts_two_fabrics(tmp_path: Path) -> None:
    inventory = dgx_h100()
    for index in range(4, 8):
        port_of(inventory, f"mlx5_{index}:1").sm_lid = 0x5
    pack = site_pack(tmp_path, "dgx-h100", """
[port-state]
sm_scope = "port-class"
[port-classes.fabric-b]
hca_names = ["mlx5_[4-7]"]
role = "compute"
""")
    findings = run(inventory, rule_pack=pack)
    node = [finding for finding in findings if finding.subject == "node"]
    assert [finding.status for finding in node] == [Status.PASS, Status.PASS, Status.PASS]
    assert node[0].summary == "all 4 active IB ports of port class 'compute' see SM LID 0x1"
    assert node[1].summary == "all 4 active IB ports of port class 'fabric-b' see SM LID 0x5"


def test_pkey_table_differing_on_one_compute_port_warns() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_2:1").pkeys = ("0x8001",)
    finding = only(run(inventory), "mlx5_2:1", Status.WARN)
    assert finding.summary == ("P_Key table 0x8001 differs from the other compute ports' 0xffff "
                               "(missing 0xffff; extra 0x8001)")
    assert finding.rule == "pkey_mismatch"
    assert finding.evidence["ports_with_expected"] == 7


def test_unknown_state_names_the_failed_sources() -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_0:1")
    port.state, port.phys_state = None, None
    inventory.sources.update(sources("sysfs", state=SourceState.ERROR, detail="permission denied"))
    inventory.sources.update(sources("ibstat", state=SourceState.MISSING))
    finding = only(run(inventory), "mlx5_0:1")
    assert finding.status is Status.UNKNOWN
    assert finding.summary == ("port state unknown (unknown/unknown): sysfs failed: permission denied; "
                               "ibstat is not available")


def test_unknown_lid_is_unknown_not_pass() -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_1:1").lid = None
    finding = only(run(inventory), "mlx5_1:1")
    assert finding.status is Status.UNKNOWN
    assert "its LID is unknown: not reported by sysfs or ibstat" in finding.summary


def test_roce_ports_have_no_lid_or_sm_checks() -> None:
    findings = run(roce_node(), pack_name="roce")
    assert statuses(findings, "mlx5_0:1") == [Status.PASS]
    assert not [finding for finding in findings if finding.subject == "node"]


def test_unused_active_port_is_skipped_not_judged(tmp_path: Path) -> None:
    inventory = dgx_h100()
    port_of(inventory, "mlx5_7:1").lid = 0
    pack = site_pack(tmp_path, "dgx-h100", '[port-classes.spare]\nhca_names = ["mlx5_7"]\nrole = "unused"\n')
    finding = only(run(inventory, rule_pack=pack), "mlx5_7:1")
    assert finding.status is Status.SKIP
    assert "unused, not judged" in finding.summary
