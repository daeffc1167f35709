"""pfc-ecn: PFC on the RDMA priority only, ECN on for it, the expected trust mode; skip on pure IB."""

from __future__ import annotations

import dataclasses

import pytest

from netdoctor.errors import RulesError
from netdoctor.inventory.model import Inventory, SourceState, SourceStatus
from netdoctor.report.model import Status
from netdoctor_plugins.pfc_ecn import pfc_ecn
from inventory_factory import (
    NIC_ADDRESSES,
    STORAGE_NIC_ADDRESS,
    by_subject,
    dgx_h100,
    gpu,
    nccl_settings,
    ib_hca,
    roce_hca,
    roce_netdev,
    run_check,
    sources,
)

CHECK = "pfc-ecn"


def roce_inventory(*netdevs) -> Inventory:
    hcas = [roce_hca("mlx5_0", "ens1f0np0", "0000:17:00.0"), roce_hca("mlx5_1", "ens1f1np1", "0000:17:00.1")]
    inventory = dgx_h100(storage="cx7-ib", gpus=[], hcas=hcas, topology=None)
    inventory.netdevs = list(netdevs) or [roce_netdev("ens1f0np0", "mlx5_0:1"), roce_netdev("ens1f1np1", "mlx5_1:1")]
    inventory.sources.update(sources("ibdev2netdev", "mlnx_qos-ens1f0np0", "mlnx_qos-ens1f1np1"))
    return inventory


def run(inventory: Inventory, pack: str = "default", **overrides: object) -> dict[str, list]:
    return by_subject(run_check(pfc_ecn, CHECK, inventory, pack_name=pack, overrides=overrides))


def test_lossless_roce_passes() -> None:
    findings = run(roce_inventory())
    assert set(findings) == {"ens1f0np0", "ens1f1np1"}
    finding = findings["ens1f0np0"][0]
    assert len(findings["ens1f0np0"]) == 1
    assert finding.status is Status.PASS
    assert finding.summary == ("PFC on priority 3, ECN np/rp on, trust dscp, NCCL traffic: mlx5_0 tc/1/traffic_class "
                               "106 (overrides NCCL_IB_TC) → ToS 106 → DSCP 26 → priority 3")
    assert finding.evidence["pfc_enabled"] == [3] and finding.evidence["ecn_np"] is True


def test_pure_infiniband_node_is_skipped() -> None:
    findings = run(dgx_h100(storage="cx7-ib"))
    assert list(findings) == ["node"]
    assert findings["node"][0].status is Status.SKIP
    assert "no RoCE ports" in findings["node"][0].summary


def test_pfc_off_on_rdma_priority_fails_with_exact_remedy() -> None:
    inventory = roce_inventory(roce_netdev("ens1f0np0", "mlx5_0:1", pfc=()),
                               roce_netdev("ens1f1np1", "mlx5_1:1"))
    findings = run(inventory)
    [finding] = findings["ens1f0np0"]
    assert finding.status is Status.FAIL and finding.rule == "rdma_priority"
    assert "PFC is off on RDMA priority 3" in finding.summary and "none" in finding.summary
    assert finding.remedy.startswith("mlnx_qos -i ens1f0np0 --pfc 0,0,0,1,0,0,0,0")
    assert findings["ens1f1np1"][0].status is Status.PASS


def test_pack_priority_is_honoured() -> None:
    inventory = roce_inventory(roce_netdev("ens1f0np0", "mlx5_0:1", pfc=(5,), ecn_np={5: True}, ecn_rp={5: True}),
                               roce_netdev("ens1f1np1", "mlx5_1:1", pfc=(5,), ecn_np={5: True}, ecn_rp={5: True}))
    for port in inventory.ports:
        port.traffic_class_override = 160      # DSCP 40 -> priority 5
    findings = run(inventory, rdma_priority=5)
    assert all(items[0].status is Status.PASS for items in findings.values())
    assert run(inventory)["ens1f0np0"][0].status is Status.FAIL


def test_pfc_on_other_priorities_warns_unless_allowed() -> None:
    inventory = roce_inventory(roce_netdev("ens1f0np0", "mlx5_0:1", pfc=(3, 4)),
                               roce_netdev("ens1f1np1", "mlx5_1:1"))
    [finding] = run(inventory)["ens1f0np0"]
    assert finding.status is Status.WARN and finding.rule == "allow_pfc_on_other_priorities"
    assert "priorities 4" in finding.summary
    allowed = run(inventory, allow_pfc_on_other_priorities=True)["ens1f0np0"]
    assert [f.status for f in allowed] == [Status.PASS]


def test_trust_mismatch_warns_by_default_and_fails_on_roce_pack() -> None:
    inventory = roce_inventory(roce_netdev("ens1f0np0", "mlx5_0:1", trust="pcp"),
                               roce_netdev("ens1f1np1", "mlx5_1:1"))
    [finding] = run(inventory)["ens1f0np0"]
    assert finding.status is Status.WARN and finding.rule == "expected_trust"
    assert finding.remedy == "mlnx_qos -i ens1f0np0 --trust dscp"
    assert run(inventory, "roce")["ens1f0np0"][0].status is Status.FAIL
    assert run(inventory, expected_trust="")["ens1f0np0"][0].status is Status.PASS


def test_ecn_off_is_reported_per_point() -> None:
    inventory = roce_inventory(roce_netdev("ens1f0np0", "mlx5_0:1", ecn_rp={3: False}),
                               roce_netdev("ens1f1np1", "mlx5_1:1"))
    [finding] = run(inventory)["ens1f0np0"]
    assert finding.status is Status.WARN and finding.rule == "require_ecn"
    assert "ECN (rp) is off on priority 3" in finding.summary
    assert finding.remedy == "echo 1 > /sys/class/net/ens1f0np0/ecn/roce_rp/enable/3"
    assert run(inventory, ecn_missing_severity="fail")["ens1f0np0"][0].status is Status.FAIL


def test_several_problems_give_several_findings() -> None:
    inventory = roce_inventory(roce_netdev("ens1f0np0", "mlx5_0:1", pfc=(0,), trust="pcp", ecn_np={3: False}),
                               roce_netdev("ens1f1np1", "mlx5_1:1"))
    statuses = sorted((f.rule, f.status) for f in run(inventory)["ens1f0np0"])
    assert statuses == [("allow_pfc_on_other_priorities", Status.WARN), ("expected_trust", Status.WARN),
                        ("rdma_priority", Status.FAIL), ("require_ecn", Status.WARN)]


def test_missing_mlnx_qos_is_unknown_with_reason() -> None:
    inventory = roce_inventory(roce_netdev("ens1f0np0", "mlx5_0:1", qos=False),
                               roce_netdev("ens1f1np1", "mlx5_1:1"))
    inventory.sources["mlnx_qos-ens1f0np0"] = SourceStatus("mlnx_qos-ens1f0np0", SourceState.MISSING,
                                                           "mlnx_qos is not installed")
    [finding] = run(inventory)["ens1f0np0"]
    assert finding.status is Status.UNKNOWN
    assert finding.summary == ("PFC and trust mode of ens1f0np0 unknown: mlnx_qos-ens1f0np0 is not available: "
                               "mlnx_qos is not installed")


def test_missing_ecn_files_are_unknown() -> None:
    inventory = roce_inventory(roce_netdev("ens1f0np0", "mlx5_0:1", ecn_np={}, ecn_rp={}),
                               roce_netdev("ens1f1np1", "mlx5_1:1"))
    [finding] = run(inventory)["ens1f0np0"]
    assert finding.status is Status.UNKNOWN
    assert "ECN state (np/rp) for priority 3 of ens1f0np0 unknown" in finding.summary


def test_roce_port_without_netdev_is_unknown() -> None:
    inventory = roce_inventory(roce_netdev("ens1f1np1", "mlx5_1:1"))
    inventory.hcas[0].ports[1].netdev = None
    inventory.sources["ibdev2netdev"] = SourceStatus("ibdev2netdev", SourceState.TIMEOUT, "after 5.0 s")
    findings = run(inventory)
    assert findings["mlx5_0:1"][0].status is Status.UNKNOWN
    assert "ibdev2netdev timed out: after 5.0 s" in findings["mlx5_0:1"][0].summary
    assert findings["ens1f1np1"][0].status is Status.PASS


def test_netdev_found_through_rdma_port_when_port_lacks_netdev() -> None:
    inventory = roce_inventory()
    inventory.hcas[0].ports[1].netdev = None
    assert run(inventory)["ens1f0np0"][0].status is Status.PASS


def test_bad_priority_is_a_rules_error() -> None:
    with pytest.raises(RulesError, match="rdma_priority"):
        run(roce_inventory(), rdma_priority=9)


def test_ethernet_ports_of_a_non_compute_class_are_skipped_with_the_class_named() -> None:
    # A DGX: 8 IB rails and one Ethernet storage port without PFC. dgx-h100 classes it storage.
    storage = roce_hca("mlx5_8", "enp41s0f0np0", STORAGE_NIC_ADDRESS, numa_node=1)
    inventory = dgx_h100(storage="cx7-ib", hcas=[*(ib_hca(index) for index in range(8)), storage])
    inventory.netdevs = [roce_netdev("enp41s0f0np0", "mlx5_8:1", pfc=(), trust="pcp")]
    findings = by_subject(run_check(pfc_ecn, CHECK, inventory, pack_name="dgx-h100"))
    [skipped] = findings["enp41s0f0np0"]
    assert skipped.status is Status.SKIP
    assert skipped.summary == ("mlx5_8:1: port class 'storage' is not a RoCE compute rail (role storage); "
                               "PFC/ECN not judged")
    assert skipped.evidence == {"rdma_ports": ["mlx5_8:1"], "port_class": "storage", "role": "storage"}
    # No classes (default pack): an RDMA Ethernet port is assumed RoCE and judged.
    plain = by_subject(run_check(pfc_ecn, CHECK, inventory, pack_name="default"))
    assert Status.FAIL in {finding.status for finding in plain["enp41s0f0np0"]}


def test_roce_pack_judges_rails_and_skips_the_frontend_nic() -> None:
    rails = [roce_hca(f"mlx5_{index}", f"ens{index + 1}np0", NIC_ADDRESSES[index]) for index in range(2)]
    frontend = roce_hca("mlx5_2", "eno1", STORAGE_NIC_ADDRESS, numa_node=1)
    frontend.ca_type = "MT4127"              # ConnectX-6 Lx 25GbE
    inventory = dgx_h100(storage="cx7-ib", gpus=[gpu(0), gpu(1)], hcas=[*rails, frontend], topology=None)
    inventory.netdevs = [roce_netdev("ens1np0", "mlx5_0:1"), roce_netdev("ens2np0", "mlx5_1:1"),
                         roce_netdev("eno1", "mlx5_2:1", pfc=(), qos=False)]
    findings = by_subject(run_check(pfc_ecn, CHECK, inventory, pack_name="roce"))
    assert [finding.status for finding in findings["ens1np0"]] == [Status.PASS]
    assert [finding.status for finding in findings["ens2np0"]] == [Status.PASS]
    assert [finding.status for finding in findings["eno1"]] == [Status.SKIP]
    assert "port class 'frontend' is not a RoCE compute rail (role management)" in findings["eno1"][0].summary


def test_virtual_function_netdev_is_skipped() -> None:
    inventory = roce_inventory()
    vf = roce_hca("mlx5_2", "ens1f0v0", "0000:17:00.2")
    vf.physical_function = "0000:17:00.0"
    inventory.hcas.append(vf)
    inventory.netdevs.append(roce_netdev("ens1f0v0", "mlx5_2:1", pfc=(), qos=False))
    [finding] = run(inventory)["ens1f0v0"]
    assert finding.status is Status.SKIP
    assert finding.summary == ("mlx5_2:1: SR-IOV virtual function of 0000:17:00.0 (mlx5_0): judged through its "
                               "physical function")


# -- NCCL's traffic followed to a priority (CONTRACT 9) ----------------------------------------------

def _untagged(environ: dict[str, str] | None = None) -> Inventory:
    """roce_inventory without the tc/1/traffic_class override: NCCL's own ToS decides."""
    inventory = roce_inventory()
    for port in inventory.ports:
        port.traffic_class_override = None
    if environ is not None:
        inventory.nccl = nccl_settings(environ, {})
    return inventory


def test_unread_nccl_settings_leave_the_chain_unknown() -> None:
    [finding] = run(_untagged())["ens1f0np0"]
    assert finding.status is Status.UNKNOWN and "NCCL's settings were not read" in finding.summary


def test_unset_nccl_ib_tc_lands_on_priority_0_and_warns() -> None:
    # Unset where netdoctor looks is NCCL's default, which a job's own environment may override.
    inventory = _untagged({})
    [finding] = [f for f in run(inventory)["ens1f0np0"] if f.status is not Status.PASS]
    assert finding.status is Status.WARN and finding.rule == "unset_traffic_severity"
    assert finding.summary == ("NCCL's RoCE traffic on ens1f0np0 lands on a lossy priority (unless each job sets "
                               "NCCL_IB_TC itself): NCCL_IB_TC unset → ToS 0 → DSCP 0 → priority 0; PFC is on 3")
    assert "NCCL_IB_TC=106" in finding.remedy and "/sys/class/infiniband/mlx5_0/tc/1/traffic_class" in finding.remedy
    assert finding.evidence["nccl_priority"] == 0
    assert run(inventory, unset_traffic_severity="fail")["ens1f0np0"][-1].status is Status.FAIL


def test_a_class_set_in_nccl_s_files_that_lands_lossy_fails() -> None:
    # The classic slip: the priority's number where NCCL wants the ToS byte.
    inventory = _untagged({})
    inventory.nccl = nccl_settings({}, {"/etc/nccl.conf": "NCCL_IB_TC=3\n"})
    [finding] = [f for f in run(inventory)["ens1f0np0"] if f.status is not Status.PASS]
    assert finding.status is Status.FAIL and finding.rule == "lossy_traffic_severity"
    assert "NCCL_IB_TC=3 (/etc/nccl.conf) → ToS 3 → DSCP 0 → priority 0; PFC is on 3" in finding.summary


def test_pfc_off_everywhere_is_one_finding_not_two() -> None:
    inventory = _untagged({"NCCL_IB_TC": "3"})
    for netdev in inventory.netdevs:
        netdev.qos = dataclasses.replace(netdev.qos, pfc_enabled=())
    findings = [f for f in run(inventory)["ens1f0np0"] if f.status is not Status.PASS]
    assert [f.rule for f in findings] == ["rdma_priority"]


@pytest.mark.parametrize(("value", "status"), [("106", Status.PASS), ("0x6a", Status.PASS), ("98", Status.PASS),
                                                ("-1", Status.WARN), ("0", Status.FAIL), ("362", Status.PASS)])
def test_nccl_ib_tc_is_read_as_nccl_reads_it(value: str, status: Status) -> None:
    # 0x6a = 106; 98 = DSCP 24 (priority 3 too); -1 is NCCL 2.28's "unset" (0, NCCL's default); 362 & 0xFF = 106.
    findings = run(_untagged({"NCCL_IB_TC": value}))["ens1f0np0"]
    order = [Status.PASS, Status.WARN, Status.FAIL]
    assert max((f.status for f in findings), key=order.index) is status


def test_the_port_override_wins_over_nccl_ib_tc() -> None:
    inventory = _untagged({"NCCL_IB_TC": "0"})
    inventory.port("mlx5_0:1").traffic_class_override = 106
    assert [f.status for f in run(inventory)["ens1f0np0"]] == [Status.PASS]
    assert Status.FAIL in [f.status for f in run(inventory)["ens1f1np1"]]


def test_rdma_cm_default_tos_does_not_reach_nccl() -> None:
    inventory = _untagged({})
    for port in inventory.ports:
        port.default_roce_tos = 106
    finding = next(f for f in run(inventory)["ens1f0np0"] if f.status is Status.WARN)
    assert finding.evidence["default_roce_tos"] == 106 and finding.evidence["nccl_tos"] == 0


def test_cnps_on_a_lossy_priority_outside_the_pack_warn() -> None:
    inventory = roce_inventory()
    inventory.netdev("ens1f0np0").cnp_dscp = 48     # priority 6: NVIDIA's CNP class
    inventory.netdev("ens1f1np1").cnp_dscp = 4      # priority 0: with the bulk traffic
    findings = run(inventory)
    assert [f.status for f in findings["ens1f0np0"]] == [Status.PASS]
    assert findings["ens1f0np0"][0].evidence["cnp_chain"] == "cnp_dscp 48 → priority 6"
    [cnp] = findings["ens1f1np1"]
    assert cnp.status is Status.WARN and cnp.rule == "cnp_priorities" and "priority 0" in cnp.summary


def test_trust_dscp_without_a_printed_map_is_unknown_for_the_chain() -> None:
    inventory = roce_inventory()
    netdev = inventory.netdev("ens1f0np0")
    netdev.qos = dataclasses.replace(netdev.qos, dscp_to_priority=())
    [finding] = run(inventory)["ens1f0np0"]
    assert finding.status is Status.UNKNOWN and "dscp2prio" in finding.summary


def test_pcp_trust_has_no_dscp_chain() -> None:
    inventory = roce_inventory(roce_netdev("ens1f0np0", "mlx5_0:1", trust="pcp"), roce_netdev("ens1f1np1", "mlx5_1:1"))
    findings = run(inventory, expected_trust="")["ens1f0np0"]
    assert [f.status for f in findings] == [Status.PASS] and "traffic_chain" not in findings[0].evidence
