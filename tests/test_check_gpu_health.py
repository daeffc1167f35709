"""gpu-health: each GPU's memory, recovery action, clock slowdowns and PCIe replays (NVML)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from inventory_factory import by_subject, dgx_h100, gpu, run_check
from netdoctor_plugins.gpu_health import gpu_health

from netdoctor.checks.api import CounterHistory
from netdoctor.checks.history import counter_readings, gpu_key
from netdoctor.errors import RulesError
from netdoctor.inventory.model import (
    Gpu,
    GpuMemoryHealth,
    Inventory,
    SourceState,
    SourceStatus,
)
from netdoctor.report.model import Finding, Status

CHECK = "gpu-health"
HEALTHY_MEMORY = GpuMemoryHealth(ecc_mode="enabled", volatile_uncorrected=0, aggregate_uncorrected=0,
                                 remapped_correctable=0, remapped_uncorrectable=0, remap_pending=False,
                                 remap_failure=False, retired_sbe=None, retired_dbe=None, retired_pending=None)


def healthy(index: int, **changes: Any) -> Gpu:
    """An idle H100 as NVML reports it (row remapping; no page retirement on Hopper)."""
    item = gpu(index)
    item.memory = HEALTHY_MEMORY
    item.recovery_action, item.clocks_event_reasons = "none", ("gpu_idle",)
    item.utilization_gpu, item.pcie_replay_counter = 0, 0
    for name, value in changes.items():
        setattr(item, name, value)
    return item


def memory(**changes: Any) -> GpuMemoryHealth:
    return replace(HEALTHY_MEMORY, **changes)


def node(*gpus: Gpu) -> Inventory:
    return dgx_h100(storage="cx7-ib", gpus=list(gpus) or [healthy(index) for index in range(8)])


def run(inventory: Inventory, pack: str = "default", history: CounterHistory | None = None,
        **overrides: object) -> dict[str, list[Finding]]:
    return by_subject(run_check(gpu_health, CHECK, inventory, pack_name=pack, history=history, overrides=overrides))


def one(findings: dict[str, list[Finding]], subject: str) -> Finding:
    assert len(findings[subject]) == 1, findings[subject]
    return findings[subject][0]


def previous(inventory: Inventory, elapsed_s: float = 3600.0, **per_gpu: dict[str, int | None]) -> CounterHistory:
    """An earlier run's history: this node's readings, with `per_gpu` (GPU label -> values) in place."""
    ports = {key: dict(values) for key, values in counter_readings(inventory).items()}
    for gpu_item in inventory.gpus:
        if gpu_item.label in per_gpu:
            ports[gpu_key(gpu_item)] = per_gpu[gpu_item.label]
    return CounterHistory(taken_at="2026-11-21T21:40:00Z", elapsed_s=elapsed_s, ports=ports)


def test_a_healthy_gpu_is_one_pass_that_says_what_was_read() -> None:
    findings = run(node())
    assert set(findings) == {f"GPU{index}" for index in range(8)}
    finding = one(findings, "GPU0")
    assert finding.status is Status.PASS
    assert finding.summary == ("ECC on, 0 uncorrectable, no remap pending, recovery none, no clock slowdown, "
                               "0 PCIe replays")
    assert finding.evidence["memory"]["remap_pending"] is False and finding.evidence["recovery_action"] == "none"
    assert finding.evidence["not_reported"] == []


def test_row_remap_pending_warns_with_a_reset_when_idle() -> None:
    finding = one(run(node(healthy(3, memory=memory(remap_pending=True, remapped_correctable=1)))), "GPU3")
    assert finding.status is Status.WARN and finding.rule == "remap_pending_severity"
    assert "next GPU reset" in finding.summary
    assert finding.remedy == "reset the GPU when idle (`nvidia-smi -r -i 3`), or reboot the node"
    assert finding.evidence["remap_pending"] is True and finding.evidence["pci_address"] == "0000:5d:00.0"


def test_row_remap_failure_fails_for_rma_and_past_errors_warn() -> None:
    failed = healthy(5, memory=memory(remap_failure=True, remapped_uncorrectable=8, aggregate_uncorrected=9))
    findings = run(node(failed))["GPU5"]
    assert [(item.status, item.rule) for item in findings] == [
        (Status.WARN, "aggregate_uncorrectable_severity"), (Status.FAIL, "remap_failure_severity")]
    assert "RMA" in findings[1].summary and "`dcgmi diag -r 3 -i 5`" in findings[1].remedy
    assert findings[0].summary == "9 uncorrectable ECC error(s) in the GPU's life, none since the driver loaded"


def test_volatile_uncorrectable_errors_fail() -> None:
    finding = one(run(node(healthy(1, memory=memory(volatile_uncorrected=2, aggregate_uncorrected=2)))), "GPU1")
    assert finding.status is Status.FAIL and finding.rule == "volatile_uncorrectable_severity"
    assert finding.summary == "2 uncorrectable ECC error(s) since the driver loaded (2 in the GPU's life)"
    assert "`nvidia-smi -r -i 1`" in finding.remedy


def test_a_contained_error_with_its_remap_pending_warns_once_with_a_reset_when_idle() -> None:
    # Xid 94 (catalog RESTART_APP): the error's row is marked for remapping, applied at the next reset.
    contained = memory(volatile_uncorrected=1, aggregate_uncorrected=1, remapped_uncorrectable=1, remap_pending=True)
    finding = one(run(node(healthy(1, memory=contained))), "GPU1")
    assert finding.status is Status.WARN and finding.rule == "contained_uncorrectable_severity"
    assert finding.summary.startswith("1 uncorrectable ECC error(s) since the driver loaded, contained: their row "
                                      "remap is pending (1 row(s) remapped")
    assert finding.remedy.startswith("reset the GPU when idle (`nvidia-smi -r -i 1`) to complete the remap")
    assert one(run(node(healthy(1, memory=contained)), contained_uncorrectable_severity="fail"), "GPU1").status \
        is Status.FAIL
    # Not accounted for by a pending remap: no remap pending, a remap failure, only correctable remaps, or unknown.
    for unaccounted in (replace(contained, remap_pending=False), replace(contained, remapped_uncorrectable=0),
                        replace(contained, remapped_uncorrectable=None), replace(contained, remap_failure=None)):
        findings = run(node(healthy(1, memory=unaccounted)))["GPU1"]
        assert findings[0].status is Status.FAIL and findings[0].rule == "volatile_uncorrectable_severity", unaccounted
    failed = run(node(healthy(1, memory=replace(contained, remap_failure=True))))["GPU1"]
    assert [item.rule for item in failed] == ["volatile_uncorrectable_severity", "remap_failure_severity",
                                              "remap_pending_severity"]


def test_ecc_disabled_warns_and_ecc_unsupported_is_only_not_reported() -> None:
    disabled = healthy(2, memory=memory(ecc_mode="disabled", volatile_uncorrected=None, aggregate_uncorrected=None))
    finding = one(run(node(disabled)), "GPU2")
    assert finding.status is Status.WARN and finding.rule == "ecc_disabled_severity"
    assert "`nvidia-smi -e 1 -i 2`" in finding.remedy
    unsupported = healthy(2, memory=memory(ecc_mode=None, volatile_uncorrected=None, aggregate_uncorrected=None))
    passed = one(run(node(unsupported)), "GPU2")
    assert passed.status is Status.PASS
    assert passed.summary.endswith("; not reported: ECC mode, uncorrectable ECC counts")


def test_retired_pages_pending_warns_and_the_dcgm_limit_fails() -> None:
    pending = healthy(0, memory=memory(retired_sbe=3, retired_dbe=1, retired_pending=True))
    finding = one(run(node(pending)), "GPU0")
    assert finding.status is Status.WARN and finding.rule == "retired_pending_severity"
    at_limit = healthy(0, memory=memory(retired_sbe=40, retired_dbe=23, retired_pending=False))
    finding = one(run(node(at_limit)), "GPU0")
    assert finding.status is Status.FAIL and finding.rule == "retired_pages_severity"
    assert finding.summary.startswith("63 retired pages (40 single-bit, 23 double-bit ECC)")
    below = healthy(0, memory=memory(retired_sbe=40, retired_dbe=22, retired_pending=False))
    assert "62 retired pages" in one(run(node(below)), "GPU0").summary


def test_a_hostile_recovery_action_is_an_unknown_action_shown_cut_and_safe() -> None:
    for action, shown in (("x" * 500, "x" * 40 + "..."), ("gpu_reset\n\x1b[31mok", "gpu_reset???31mok"),
                          ("GPU_RESET", "GPU_RESET")):
        finding = one(run(node(healthy(4, recovery_action=action))), "GPU4")
        assert finding.status is Status.FAIL and finding.rule == "recovery_action_severity"
        assert finding.summary == (f"the driver's recovery action is {shown}: an action this netdoctor does not "
                                   f"know ({shown})")
        assert finding.evidence["recovery_action"] == shown
        assert "`nvidia-smi -q -i 4 | grep -i 'recovery action'`" in finding.remedy


@pytest.mark.parametrize(("action", "command"), [
    ("gpu_reset", "`nvidia-smi -r -i 4`"),
    ("node_reboot", "reboot"),
    ("drain_p2p", "peer-to-peer"),
    ("drain_and_reset", "`nvidia-smi -r -i 4`"),
    ("recover_imex_domain", "`nvidia-imex-ctl -N`"),
    ("unknown_9", "`nvidia-smi -q -i 4 | grep -i 'recovery action'`"),
])
def test_any_recovery_action_but_none_fails_and_names_its_command(action: str, command: str) -> None:
    finding = one(run(node(healthy(4, recovery_action=action))), "GPU4")
    assert finding.status is Status.FAIL and finding.rule == "recovery_action_severity"
    assert finding.summary.startswith(f"the driver's recovery action is {action}: ")
    assert command in finding.remedy


def test_hw_slowdown_on_an_idle_gpu_warns_and_benign_reasons_pass() -> None:
    slowed = healthy(6, clocks_event_reasons=("gpu_idle", "hw_slowdown"))
    finding = one(run(node(slowed)), "GPU6")
    assert finding.status is Status.WARN and finding.rule == "slowdown_severity"
    assert finding.summary == "clocks slowed by hw_slowdown on an idle GPU (0 % utilization)"
    assert "`nvidia-smi -q -d PERFORMANCE -i 6`" in finding.remedy and finding.evidence["idle"] is True
    # Idle by utilization alone (at or below idle_max_utilization), without gpu_idle.
    low = healthy(6, clocks_event_reasons=("hw_slowdown",), utilization_gpu=10)
    assert one(run(node(low)), "GPU6").status is Status.WARN
    # A busy GPU at its power cap, or held under its temperature by the driver, is what load does.
    for benign in ("sw_power_cap", "sw_thermal_slowdown"):
        capped = healthy(6, clocks_event_reasons=(benign,), utilization_gpu=100)
        assert one(run(node(capped)), "GPU6").status is Status.PASS
    assert one(run(node(slowed), slowdown_reasons=["hw_thermal_slowdown"]), "GPU6").status is Status.PASS


def test_hw_slowdown_once_under_load_is_evidence_but_a_named_cause_warns() -> None:
    busy = healthy(6, clocks_event_reasons=("hw_slowdown",), utilization_gpu=95)
    finding = one(run(node(busy)), "GPU6")
    assert finding.status is Status.PASS
    assert "hw_slowdown seen once under load (95 % utilization): not judged" in finding.summary
    assert finding.evidence["slowdown"] == ["hw_slowdown"]
    unknown_load = healthy(6, clocks_event_reasons=("hw_slowdown",), utilization_gpu=None)
    assert one(run(node(unknown_load)), "GPU6").status is Status.PASS
    assert one(run(node(healthy(6, clocks_event_reasons=("hw_slowdown",), utilization_gpu=11))), "GPU6").status \
        is Status.PASS
    # The power brake and HW thermal slowdown name their cause: one sighting under load warns.
    brake = healthy(6, clocks_event_reasons=("hw_slowdown", "hw_power_brake_slowdown"), utilization_gpu=100)
    finding = one(run(node(brake)), "GPU6")
    assert finding.status is Status.WARN and finding.rule == "slowdown_severity"
    assert finding.summary == "clocks slowed by hw_slowdown, hw_power_brake_slowdown under load (100 % utilization)"
    assert "ipmitool sel list" in finding.remedy
    assert one(run(node(brake), busy_slowdown_reasons=[]), "GPU6").status is Status.PASS


def test_a_slowdown_seen_at_the_previous_run_is_persistent_and_the_pack_grades_it() -> None:
    slowed = node(healthy(6, clocks_event_reasons=("gpu_idle", "hw_slowdown")))
    before = previous(slowed)          # the same reading an hour earlier
    finding = one(run(slowed, "dgx-h100", history=before), "GPU6")
    assert finding.status is Status.FAIL and finding.rule == "persistent_slowdown_severity"
    assert finding.summary.endswith("hw_slowdown also at the previous run 1.0 h ago, idle both times: persistent"), \
        finding.summary
    assert finding.evidence["persistent"] == ["hw_slowdown"] and finding.evidence["previous_idle"] is True
    assert one(run(slowed, "default", history=before), "GPU6").status is Status.WARN
    # Idle by utilization at the previous run (a state file has it) counts too.
    by_utilization = previous(slowed, GPU6={"utilization_gpu": 3, "clocks_event_reasons/hw_slowdown": 1})
    assert one(run(slowed, "dgx-h100", history=by_utilization), "GPU6").rule == "persistent_slowdown_severity"
    # Not set at the previous run, or a previous run older than persistent_max_age_s: one sighting.
    cleared = previous(slowed, GPU6={"pcie_replay_counter": 0, "clocks_event_reasons/gpu_idle": 1})
    assert one(run(slowed, "dgx-h100", history=cleared), "GPU6").rule == "slowdown_severity"
    stale = previous(slowed, elapsed_s=3601)
    finding = one(run(slowed, "dgx-h100", history=stale), "GPU6")
    assert finding.status is Status.WARN and finding.rule == "slowdown_severity"
    assert one(run(slowed, "dgx-h100", history=stale, persistent_max_age_s=7200), "GPU6").status is Status.FAIL
    # Busy at the previous run: the slowdown is not an idle GPU's twice, it warns.
    was_busy = previous(slowed, GPU6={"utilization_gpu": 90, "clocks_event_reasons/hw_slowdown": 1})
    finding = one(run(slowed, "dgx-h100", history=was_busy), "GPU6")
    assert finding.status is Status.WARN and finding.summary.endswith("1.0 h ago, not idle both times")


def test_a_busy_gpu_slowed_at_two_runs_warns_and_is_never_drained_by_the_pack() -> None:
    # The false drain: a healthy GPU under load seen with HW slowdown on two runs.
    busy = node(healthy(6, clocks_event_reasons=("hw_slowdown",), utilization_gpu=97))
    finding = one(run(busy, "dgx-h100", history=previous(busy, elapsed_s=1800)), "GPU6")
    assert finding.status is Status.WARN and finding.rule == "slowdown_severity"
    assert finding.summary == ("clocks slowed by hw_slowdown under load (97 % utilization); hw_slowdown also at "
                               "the previous run 30 min ago, not idle both times")
    # 24 h apart is not persistent: the busy GPU is back to evidence only.
    assert one(run(busy, "dgx-h100", history=previous(busy, elapsed_s=86000)), "GPU6").status is Status.PASS
    # SW thermal slowdown is no slowdown reason at all, whatever the history.
    warm = node(healthy(6, clocks_event_reasons=("sw_thermal_slowdown",), utilization_gpu=100))
    assert one(run(warm, "dgx-h100", history=previous(warm)), "GPU6").status is Status.PASS


def test_clock_reasons_nvml_does_not_name_are_ignored_and_listed_cut() -> None:
    hostile = ("gpu_idle",) + tuple(f"evil_{index}_" + "z" * 100 for index in range(6)) + ("hw\x1bslowdown",)
    finding = one(run(node(healthy(6, clocks_event_reasons=hostile))), "GPU6")
    assert finding.status is Status.PASS and "no clock slowdown" in finding.summary
    assert "evil" not in finding.summary
    assert finding.evidence["clocks_event_reasons"] == ["gpu_idle"]
    listed = finding.evidence["unknown_clocks_event_reasons"]
    assert len(listed) == 4 and all(len(name) <= 43 for name in listed) and listed[0].endswith("...")
    assert finding.evidence["unknown_clocks_event_reasons_count"] == 7
    # The history keeps only NVML's names.
    assert counter_readings(node(healthy(6, clocks_event_reasons=hostile)))["gpu 0000:ba:00.0"] == {
        "pcie_replay_counter": 0, "utilization_gpu": 0, "clocks_event_reasons/gpu_idle": 1}


def test_pcie_replays_are_judged_by_growth_with_history_else_by_level() -> None:
    inventory = node(healthy(2, pcie_replay_counter=1500))
    grown = one(run(inventory, history=previous(inventory, elapsed_s=600, GPU2={"pcie_replay_counter": 1000})), "GPU2")
    assert grown.status is Status.WARN and grown.rule == "pcie_replay_severity"
    assert grown.summary == "PCIe replays rose by 500 in 10 min (50.0/min; limit 8/min)"
    assert grown.evidence["allowed"] == 80.0
    slow = one(run(inventory, history=previous(inventory, elapsed_s=600, GPU2={"pcie_replay_counter": 1450})), "GPU2")
    assert slow.status is Status.PASS and "1500 PCIe replays (+50 in 10 min)" in slow.summary
    # No history: only the level, against the engineering default.
    level = one(run(inventory), "GPU2")
    assert level.status is Status.WARN and "no rate to judge (there is no earlier reading)" in level.summary
    assert one(run(node(healthy(2, pcie_replay_counter=1000))), "GPU2").status is Status.PASS
    # A counter that went down was reset (driver reload): judged by level, and said so.
    reset = one(run(inventory, history=previous(inventory, GPU2={"pcie_replay_counter": 4000})), "GPU2")
    assert reset.status is Status.WARN and "went down since the last run (4000 -> 1500: reset)" in reset.summary


def test_a_gpu_with_no_health_fields_is_one_unknown_with_why() -> None:
    bare = gpu(7)
    bare.nvml_errors = {"memory.ecc_mode": "Unknown Error"}
    findings = run(node(healthy(0), bare))
    assert one(findings, "GPU0").status is Status.PASS
    unknown = one(findings, "GPU7")
    assert unknown.status is Status.UNKNOWN
    assert unknown.summary == "no health fields from NVML for GPU7: NVML failed: memory.ecc_mode: Unknown Error"


def test_no_gpu_with_health_fields_is_one_node_unknown() -> None:
    inventory = node(gpu(0), gpu(1))              # nvml.json written before the health fields existed
    inventory.gpus[1].memory = GpuMemoryHealth()  # a memory object whose every field is null counts as none
    findings = run(inventory)
    assert list(findings) == ["node"]
    assert "nvml.json has none of the health fields" in one(findings, "node").summary
    vgpu = node(gpu(0))
    vgpu.gpus[0].virtualization_mode = "vgpu"
    assert "vGPU guest" in one(run(vgpu), "node").summary
    failed = node(gpu(0))
    failed.sources["nvml"] = SourceStatus("nvml", SourceState.TIMEOUT, "no answer in 3 s")
    assert one(run(failed), "node").status is Status.UNKNOWN


def test_partial_data_is_judged_and_what_was_not_read_is_said() -> None:
    partial = healthy(3, memory=None, recovery_action=None, pcie_replay_counter=None)
    finding = one(run(node(partial)), "GPU3")
    assert finding.status is Status.PASS
    assert finding.summary == ("no clock slowdown; not reported: memory health (ECC, row remapping), recovery "
                               "action (driver before R575), PCIe replay counter")
    problem = healthy(3, memory=None, clocks_event_reasons=("hw_thermal_slowdown",), utilization_gpu=None)
    assert one(run(node(problem)), "GPU3").summary == "clocks slowed by hw_thermal_slowdown (utilization unknown)"


def test_neither_repair_mechanism_reported_is_said_once() -> None:
    unread = healthy(1, memory=memory(remap_pending=None, remap_failure=None))
    assert one(run(node(unread)), "GPU1").summary.endswith("; not reported: row remapping and page retirement")


def test_the_history_keeps_each_gpus_replays_and_clock_reasons() -> None:
    inventory = node(healthy(0, clocks_event_reasons=("gpu_idle", "hw_slowdown"), pcie_replay_counter=7))
    assert counter_readings(inventory)["gpu 0000:18:00.0"] == {
        "pcie_replay_counter": 7, "utilization_gpu": 0, "clocks_event_reasons/gpu_idle": 1,
        "clocks_event_reasons/hw_slowdown": 1}
    assert gpu_key(gpu(9, address="0000:99:00.0")) == "gpu 0000:99:00.0"


def test_a_bad_pack_value_is_a_rules_error() -> None:
    with pytest.raises(RulesError, match="remap_pending_severity"):
        run(node(healthy(3, memory=memory(remap_pending=True))), remap_pending_severity="critical")
