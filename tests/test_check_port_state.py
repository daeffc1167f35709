"""port-state: logical/physical state, LID, SM reachability and P_Keys of every RDMA port."""

from __future__ import annotations

import copy
from pathlib import Path

from inventory_factory import dgx_h100, ib_hca, only, port_of, roce_node, run_check, site_pack, sources, statuses
from netdoctor.packs import load_rules
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


# -- ports down by design --------------------------------------------------------------------

def never_linked(inventory, name: str) -> None:
    """The port went DOWN/Polling with no link transition and no data since the counters were cleared."""
    port = port_of(inventory, name)
    port.state, port.phys_state = PortState.DOWN, PhysState.POLLING
    port.counters.update(link_downed=0, port_xmit_data=0, port_rcv_data=0)


def dual_port_storage(inventory) -> None:
    """mlx5_bond_0 becomes a dual-port card: port 2 next to the ACTIVE port 1."""
    storage = inventory.hca("mlx5_bond_0")
    second = copy.deepcopy(storage.ports[1])
    second.number = 2
    storage.ports[2] = second


def test_disabled_port_that_is_not_a_required_rail_is_skipped() -> None:
    inventory = dgx_h100()
    storage = port_of(inventory, "mlx5_bond_0:1")
    storage.state, storage.phys_state = PortState.DOWN, PhysState.DISABLED
    skipped = only(run(inventory, pack_name="dgx-h100"), "mlx5_bond_0:1")
    assert skipped.status is Status.SKIP
    assert skipped.summary == "DOWN/Disabled: administratively disabled (phys state Disabled)"
    assert skipped.evidence["port_class"] == "storage" and skipped.evidence["role"] == "storage"
    # The default pack requires no rail up: a disabled port is down by design there too.
    rail = dgx_h100()
    port = port_of(rail, "mlx5_7:1")
    port.state, port.phys_state = PortState.DOWN, PhysState.DISABLED
    assert only(run(rail), "mlx5_7:1").status is Status.SKIP
    assert only(run(rail, pack_name="dgx-h100"), "mlx5_7:1").status is Status.FAIL


def test_never_linked_port_next_to_an_active_sibling_is_not_cabled_by_design() -> None:
    inventory = dgx_h100()
    dual_port_storage(inventory)
    never_linked(inventory, "mlx5_bond_0:2")
    skipped = only(run(inventory, pack_name="dgx-h100"), "mlx5_bond_0:2")
    assert skipped.status is Status.SKIP
    assert skipped.summary == ("DOWN/Polling: never linked since counters were cleared: not cabled by design "
                               "(sibling port mlx5_bond_0:1 is ACTIVE)")
    assert skipped.evidence["active_sibling_ports"] == ["mlx5_bond_0:1"]
    assert skipped.evidence["port_rcv_data"] == 0 and skipped.evidence["link_downed"] == 0


def test_sibling_on_another_pci_function_of_the_same_card_counts() -> None:
    # mlx5 gives each port of a dual-port card its own device: mlx5_8 (c0:00.0) and mlx5_9 (c0:00.1).
    inventory = dgx_h100(storage=None)
    for index, function in ((8, "0"), (9, "1")):
        hca = ib_hca(index)
        hca.pci_address, hca.sys_image_guid = f"0000:c0:00.{function}", None
        inventory.hcas.append(hca)
    never_linked(inventory, "mlx5_9:1")
    default = load_rules("default", env={})
    required = only(run(inventory, rule_pack=default, overrides={"compute_ports_must_be_up": True}), "mlx5_9:1")
    # A compute port (no classes in the default pack) of a pack requiring rails up still fails...
    assert required.status is Status.FAIL
    # ...and where rails need not be up, the sibling on c0:00.0 makes it "not cabled by design".
    finding = only(run(inventory), "mlx5_9:1")
    assert finding.status is Status.SKIP and finding.evidence["active_sibling_ports"] == ["mlx5_8:1"]


def test_never_linked_storage_port_without_an_active_sibling_fails_where_rails_must_be_up() -> None:
    inventory = dgx_h100()
    never_linked(inventory, "mlx5_bond_0:1")
    assert only(run(inventory, pack_name="dgx-h100"), "mlx5_bond_0:1").status is Status.FAIL
    # Without that requirement (default pack) any never-linked port is skipped...
    assert only(run(inventory), "mlx5_bond_0:1").status is Status.SKIP


def test_never_linked_is_not_by_design_when_no_port_of_the_node_is_up() -> None:
    inventory = dgx_h100(storage=None)
    for port in inventory.ports:
        port.state, port.phys_state = PortState.DOWN, PhysState.POLLING
        port.counters.update(link_downed=0, port_xmit_data=0, port_rcv_data=0)
    assert {finding.status for finding in run(inventory) if finding.subject != "node"} == {Status.FAIL}


def test_port_that_had_a_link_is_not_down_by_design() -> None:
    inventory = dgx_h100()
    dual_port_storage(inventory)
    never_linked(inventory, "mlx5_bond_0:2")
    port_of(inventory, "mlx5_bond_0:2").counters["link_downed"] = 1     # it was up, then went down
    assert only(run(inventory), "mlx5_bond_0:2").status is Status.FAIL
    port_of(inventory, "mlx5_bond_0:2").counters["link_downed"] = None  # unknown: not proven never linked
    assert only(run(inventory), "mlx5_bond_0:2").status is Status.FAIL


def test_compute_rail_down_on_a_rail_pack_fails_even_never_linked_with_a_sibling() -> None:
    inventory = dgx_h100()
    rail = inventory.hca("mlx5_4")
    second = copy.deepcopy(rail.ports[1])
    second.number = 2
    rail.ports[2] = second
    never_linked(inventory, "mlx5_4:1")
    finding = only(run(inventory, pack_name="dgx-h100"), "mlx5_4:1")
    assert finding.status is Status.FAIL and finding.evidence["port_class"] == "compute"
    assert "mlxlink -d mlx5_4" in (finding.remedy or "")


def test_remedies_name_the_real_device() -> None:
    inventory = dgx_h100()
    port = port_of(inventory, "mlx5_6:1")
    port.state, port.lid = PortState.INIT, 0
    finding = only(run(inventory), "mlx5_6:1")
    assert "`sminfo -C mlx5_6 -P 1`" in (finding.remedy or "") and "<hca>" not in (finding.remedy or "")
    port.state, port.phys_state = PortState.DOWN, PhysState.TRAINING
    assert "`mlxlink -d mlx5_6`" in (only(run(inventory), "mlx5_6:1").remedy or "")


def test_virtual_function_is_skipped_when_its_physical_function_is_here() -> None:
    inventory = dgx_h100()
    vf = ib_hca(12)
    vf.ca_type, vf.pci_address, vf.physical_function = "MT4126", "0000:1a:00.1", inventory.hcas[0].pci_address
    vf.ports[1].state = PortState.DOWN
    inventory.hcas.append(vf)
    finding = only(run(inventory, pack_name="dgx-h100"), "mlx5_12:1")
    assert finding.status is Status.SKIP
    assert finding.summary == ("DOWN/LinkUp; SR-IOV virtual function of 0000:1a:00.0 (mlx5_0): judged through its "
                               "physical function")
    assert finding.evidence["physical_function"] == "0000:1a:00.0"
    # A cloud VM sees VFs without their PF: they are the node's ports and are judged.
    inventory.hcas = [hca for hca in inventory.hcas if hca.name != "mlx5_0"]
    assert only(run(inventory, pack_name="dgx-h100"), "mlx5_12:1").status is Status.FAIL
