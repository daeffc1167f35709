"""The `nccl-probe` check: grading real device results and every failure shape."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from netdoctor.checks.engine import run_checks
from netdoctor.checks.registry import Registry
from netdoctor.inventory.model import Gpu, Inventory, PcieLink, ProcessVisibility, Topology
from netdoctor.probe.result import ProbeNotRun, ProbeResult
from netdoctor.report.model import Finding, Status
from netdoctor_plugins.nccl_probe import gpu_links, nccl_probe
from tests.inventory_factory import CAPTURED_AT, h100_gpus, pack, run_check, sources

DEVICE = Path(__file__).parent / "data" / "device" / "nvidia-h200-x2"


def recorded(name: str) -> dict[str, Any]:
    return json.loads((DEVICE / name).read_text(encoding="utf-8"))["probe"]


def h200_inventory(*, active: int = 18, topology: Topology | None = None) -> Inventory:
    gpus = [Gpu(index, name="NVIDIA H200", nvlink_active=active, nvlink_total=18,
                pcie=PcieLink(f"0000:00:0{6 + index}.0", 5, 5, 16, 16, source="nvml")) for index in range(2)]
    return Inventory(host="vm", captured_at=CAPTURED_AT, gpus=gpus, topology=topology, sources=sources("nvml"))


def typed(probe: dict[str, Any] | None) -> ProbeResult | ProbeNotRun | None:
    """The pipeline's typed probe input from its JSON form (the report's `probe` section)."""
    if probe is None:
        return None
    if "skipped" in probe or "error" in probe:
        return ProbeNotRun(probe.get("skipped") or probe["error"], unknown="error" in probe)
    return ProbeResult.from_json(probe)


def judge(probe: dict[str, Any] | None, inventory: Inventory | None = None, pack_name: str = "default",
          overrides: dict[str, Any] | None = None) -> list[Finding]:
    return run_check(nccl_probe, "nccl-probe", inventory or h200_inventory(), pack_name=pack_name,
                     overrides=overrides, probe=typed(probe))


def test_healthy_two_h200_pass() -> None:
    findings = judge(recorded("probe-report.json"))
    assert len(findings) == 1
    finding = findings[0]
    assert finding.status is Status.PASS and finding.subject == "node"
    assert finding.evidence["nccl_busbw_gbps"] == pytest.approx(326.4, abs=0.1)
    assert finding.evidence["expected_gbps"] == pytest.approx(331.8, abs=0.1)
    assert finding.evidence["transport"] == "P2P/NVLink"
    assert finding.evidence["channels"] == 24
    assert finding.evidence["bytes"] == 1 << 30
    assert "via P2P/NVLink" in finding.summary


def test_p2p_disabled_fails_against_the_nvlink_expectation() -> None:
    findings = judge(recorded("probe-report-p2p-disabled.json"))
    finding = findings[0]
    assert finding.status is Status.FAIL
    assert finding.evidence["transport"] == "SHM"
    assert finding.evidence["fraction"] < 0.1
    assert "NCCL used SHM" in finding.summary
    assert finding.remedy and "NCCL_P2P_DISABLE" in finding.remedy


def test_transport_mismatch_alone_warns_by_default_and_fails_on_dgx() -> None:
    probe = copy.deepcopy(recorded("probe-report.json"))
    probe["transport"]["kind"] = "P2P"        # bandwidth fine, but not over NVLink
    assert judge(probe)[0].status is Status.WARN
    assert judge(probe, pack_name="dgx-h100")[0].status is Status.FAIL
    assert judge(probe, pack_name="dgx-h100")[0].rule == "transport_mismatch_status"


@pytest.mark.parametrize(("busbw", "expected"), [(300.0, Status.PASS), (200.0, Status.WARN), (100.0, Status.FAIL)])
def test_fractions_decide(busbw: float, expected: Status) -> None:
    probe = copy.deepcopy(recorded("probe-report.json"))
    probe["sizes"][-1]["busbw_gbps"] = busbw
    assert judge(probe)[0].status is expected


def test_judged_on_largest_size_not_the_average() -> None:
    probe = copy.deepcopy(recorded("probe-report.json"))
    probe["sizes"].reverse()               # order must not matter
    assert judge(probe)[0].evidence["bytes"] == 1 << 30


def test_largest_size_too_small_is_unknown() -> None:
    probe = copy.deepcopy(recorded("probe-report.json"))
    probe["sizes"] = probe["sizes"][:3]    # up to 16 MiB
    finding = judge(probe)[0]
    assert finding.status is Status.UNKNOWN and "too small" in finding.summary


def test_pack_override_of_expected_level() -> None:
    finding = judge(recorded("probe-report.json"), overrides={"expected_busbw_gbps": 500})[0]
    assert finding.status is Status.WARN          # 326.4 / 500 = 65 %
    assert finding.evidence["expected_gbps"] == 500


def test_inventory_links_and_topology_peers_are_used() -> None:
    probe = copy.deepcopy(recorded("probe-report.json"))
    topology = Topology(gpus=("GPU0", "GPU1"), nics=(), links={("GPU0", "GPU1"): "NV4", ("GPU1", "GPU0"): "NV4"})
    links = gpu_links(ProbeResult.from_json(probe), h200_inventory(topology=topology))
    assert [link.nvlink_peers for link in links] == [4, 4]
    finding = judge(probe, h200_inventory(topology=topology))[0]
    assert finding.evidence["expected_gbps"] == pytest.approx(100 * 0.764 * 0.965, abs=0.2)


def judge_gated(probe: dict[str, Any] | None) -> list[Finding]:
    """Through the check engine: the needs gate first, as in a real run."""
    registry = Registry()
    registry.load_builtins()
    findings, _ = run_checks(h200_inventory(), pack("default"), registry, only=["nccl-probe"], probe=typed(probe),
                             deadline=time.monotonic() + 10.0)
    return findings


def test_not_run_and_runner_shapes_are_judged_by_the_needs_gate() -> None:
    # The check itself never sees these: need_probe answers for it.
    [not_run] = judge_gated(None)
    assert not_run.status is Status.SKIP and not_run.summary == "the NCCL probe was not run"
    [skipped] = judge_gated({"skipped": "--no-probe"})
    assert skipped.status is Status.SKIP and "--no-probe" in skipped.summary
    [error] = judge_gated({"error": "the probe did not finish within 9.0 s"})
    assert error.status is Status.UNKNOWN and "9.0 s" in error.summary
    [passed] = judge_gated(recorded("probe-report.json"))
    assert passed.status is Status.PASS


@pytest.mark.parametrize(("device_nodes", "status"), [
    (None, Status.UNKNOWN),                                         # nothing recorded: never a pass
    ({"0000:00:06.0": "ok", "0000:00:07.0": "ok"}, Status.UNKNOWN),  # opened here: CUDA should see them
    ({"0000:00:06.0": "absent", "0000:00:07.0": "denied"}, Status.SKIP),   # hidden on purpose
    ({"0000:00:06.0": "absent", "0000:00:07.0": "ok"}, Status.UNKNOWN),
])
def test_gpus_cuda_cannot_open(device_nodes: dict[str, str] | None, status: Status) -> None:
    """The node's GPUs were discovered, CUDA finds no driver: unknown (the remedy names the real
    GPU to look at), a skip only where this process is denied every GPU on purpose."""
    inventory = h200_inventory()
    for gpu in inventory.gpus:
        gpu.pci_address = gpu.pcie.address if gpu.pcie else None
    inventory.visibility = ProcessVisibility(device_nodes=device_nodes)
    [finding] = judge({"status": "skipped", "reason_code": "no-driver", "gpus": [], "gpu_count": 0,
                       "reason": "no NVIDIA driver (libcuda.so.1 cannot be loaded)"}, inventory)
    assert finding.status is status
    if status is Status.UNKNOWN:
        assert finding.summary == ("2 NVIDIA GPU(s) on this node, but CUDA cannot use them: "
                                   "no NVIDIA driver (libcuda.so.1 cannot be loaded)")
        assert finding.remedy and "`lspci -k -s 0000:00:06.0`" in finding.remedy
    else:
        assert "hidden from this process" in finding.summary and "not in this process's /dev" in finding.summary


def test_result_without_a_status_is_unknown() -> None:
    [finding] = judge({})
    assert finding.status is Status.UNKNOWN and "no status" in finding.summary


def test_skips_and_unknowns_carry_the_reason() -> None:
    single = judge({"status": "skipped", "reason": "1 GPU(s) selected: an all-reduce needs at least 2",
                    "reason_code": "single-gpu"})[0]
    assert single.status is Status.SKIP and "at least 2" in single.summary
    no_nccl = judge({"status": "skipped", "reason": "NCCL not found", "reason_code": "no-nccl"})[0]
    assert no_nccl.status is Status.UNKNOWN and no_nccl.remedy and "netdoctor[probe]" in no_nccl.remedy
    failed = judge({"status": "error", "reason": "NCCL ncclCommInitAll failed: unhandled cuda error"})[0]
    assert failed.status is Status.UNKNOWN and "ncclCommInitAll" in failed.summary


def test_timeout_and_wrong_result_fail() -> None:
    timeout = judge({"status": "timeout", "reason": "probe timed out: killed at the 5 s deadline"})[0]
    assert timeout.status is Status.FAIL and timeout.summary == "probe timed out: killed at the 5 s deadline"
    wrong = judge({"status": "wrong-result", "reason": "all-reduce of 1048576 B gave 7 wrong element(s)",
                   "sizes": []})[0]
    assert wrong.status is Status.FAIL and "7 wrong" in wrong.summary


def test_localisation_names_the_slow_gpu() -> None:
    probe = copy.deepcopy(recorded("probe-report.json"))
    probe["sizes"][-1]["busbw_gbps"] = 200.0
    probe["gpus"] = list(range(8))
    probe["gpu_links"] = [dict(probe["gpu_links"][0], index=index) for index in range(8)]
    copies = [{"kind": "copy", "direction": "host-to-device", "gpus": [index], "bytes": 1 << 26,
               "gbps": 12.0 if index == 5 else 55.0} for index in range(8)]
    pairs = [{"kind": "pair", "gpus": [index, (index + 1) % 8], "bytes": 1 << 26,
              "busbw_gbps": 90.0 if 5 in (index, (index + 1) % 8) else 280.0, "verified": True} for index in range(8)]
    probe["localisation"] = copies + pairs
    inventory = Inventory(host="n", captured_at=CAPTURED_AT, gpus=h100_gpus(), sources=sources("nvml"))
    findings = judge(probe, inventory)
    assert findings[0].status is Status.WARN and findings[0].subject == "node"
    named = [finding for finding in findings[1:]]
    assert {finding.subject for finding in named} == {"GPU5"}
    assert any("host-to-device copy 12.0 GB/s" in finding.summary for finding in named)
    assert any("both neighbour pairs" in finding.summary for finding in named)


def test_a_budget_too_short_or_a_kill_during_init_is_unknown_not_a_hang() -> None:
    short = judge({"status": "error", "reason_code": "budget-too-short", "budget_s": 1.27, "min_budget_s": 3.0,
                   "reason": "the probe needs at least 3 s; it got 1.3 s: raise --deadline/--budget"})[0]
    assert short.status is Status.UNKNOWN
    assert short.summary == "the probe needs at least 3 s; it got 1.3 s: raise --deadline/--budget"
    assert short.remedy and "--deadline" in short.remedy and short.evidence["min_budget_s"] == 3.0
    during_init = judge({"status": "timeout", "reason_code": "init-timeout", "timeout_phase": "nccl-init",
                         "reason": "timeout during NCCL init: killed at the 3 s deadline before NCCL init finished"})[0]
    assert during_init.status is Status.UNKNOWN and during_init.summary.startswith("timeout during NCCL init")
    # After init, a kill is a hang: fail, as before.
    hang = judge({"status": "timeout", "reason_code": "timeout", "timeout_phase": "all-reduce",
                  "reason": "probe timed out: killed at the 5 s deadline after NCCL init, during the all-reduces"})[0]
    assert hang.status is Status.FAIL and hang.summary.startswith("probe timed out")


def test_no_measurements_because_the_budget_ran_out_says_so() -> None:
    [finding] = judge({"status": "ok", "sizes": [], "truncated": "budget spent before 8192 B"})
    assert finding.status is Status.UNKNOWN and "budget spent before 8192 B" in finding.summary
    assert finding.remedy and "--budget" in finding.remedy


def test_missing_nccl_tests_has_its_own_remedy() -> None:
    [finding] = judge({"status": "skipped", "reason": "all_reduce_perf (nccl-tests) is not installed",
                       "reason_code": "no-nccl-tests"})
    assert finding.status is Status.UNKNOWN and finding.remedy and "all_reduce_perf" in finding.remedy
