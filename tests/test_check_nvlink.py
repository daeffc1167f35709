"""nvlink: active links against the pack, inactive links named, versions and speeds alike,
error counters by growth since the last reading (history / --baseline) and by level."""

from __future__ import annotations

from dataclasses import replace

from netdoctor.checks.api import CounterHistory
from netdoctor.checks.history import counter_readings
from netdoctor.inventory.model import Gpu, Inventory, NvLink
from netdoctor.report.model import Finding, Status
from netdoctor_plugins.nvlink import nvlink
from inventory_factory import dgx_h100, gpu, run_check

CHECK = "nvlink"


def linked(index: int, *, inactive: tuple[int, ...] = (), version: int = 6, speed: int = 26562,
           errors: dict[int, dict[str, int]] | None = None) -> Gpu:
    links = tuple(NvLink(link, active=link not in inactive, speed_mbps=speed if link not in inactive else None,
                         version=version, errors={"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 2,
                                                  **(errors or {}).get(link, {})})
                  for link in range(18))
    return replace(gpu(index), nvlink_active=18 - len(inactive), nvlink_total=18, nvlink_version=version, nvlinks=links)


def node(*gpus: Gpu) -> Inventory:
    rest = [linked(index) for index in range(len(gpus), 8)]
    return dgx_h100(gpus=[*gpus, *rest])


def judged(inventory: Inventory, pack: str = "dgx-h100", history: CounterHistory | None = None) -> dict[str, Finding]:
    findings = run_check(nvlink, CHECK, inventory, pack_name=pack, history=history)
    return {finding.subject.split()[0]: finding for finding in findings if finding.status is not Status.PASS} | {
        "passed": [finding for finding in findings if finding.status is Status.PASS]}  # type: ignore[dict-item]


def test_healthy_h100_node_passes_with_version_and_speed_named() -> None:
    findings = run_check(nvlink, CHECK, node(), pack_name="dgx-h100")
    assert [finding.status for finding in findings] == [Status.PASS] * 8
    assert findings[0].subject == "GPU0 0000:18:00.0"
    assert findings[0].summary == "18/18 NVLinks active (NVLink 4.0, 26.562 GB/s each)"


def test_two_inactive_links_on_one_gpu_fail_naming_them() -> None:
    result = judged(node(linked(0), linked(1), linked(2, inactive=(3, 11))))
    assert result["GPU2"].status is Status.FAIL and result["GPU2"].rule == "expected_links"
    assert result["GPU2"].summary.startswith("16 of 18 NVLinks active: links 3, 11 inactive")
    assert len(result["passed"]) == 7


def test_without_a_pack_count_the_nodes_majority_is_expected() -> None:
    result = judged(node(linked(0, inactive=(5,))), pack="default")
    assert result["GPU0"].status is Status.FAIL and "17 of 18" in result["GPU0"].summary


def test_a_gpu_on_another_version_or_a_slower_link_warns() -> None:
    slow = linked(3)
    slow = replace(slow, nvlinks=tuple(replace(link, speed_mbps=13281) if link.link == 7 else link for link in slow.nvlinks))
    result = judged(node(linked(0, version=5), linked(1), linked(2), slow))
    assert result["GPU0"].status is Status.WARN and "NVLink 3.1 where the node's other GPUs run NVLink 4.0" in result["GPU0"].summary
    assert result["GPU3"].status is Status.WARN and result["GPU3"].summary.startswith("NVLink 7 at 13281 MB/s")


def test_replay_errors_growing_between_two_readings_fail_and_a_constant_level_passes() -> None:
    before = node(linked(0, errors={4: {"replay": 100}}))
    after = node(linked(0, errors={4: {"replay": 2100}}))
    history = CounterHistory(taken_at="2026-11-21T21:40:00Z", elapsed_s=3600, ports=counter_readings(before))
    result = judged(after, history=history)
    assert result["GPU0"].status is Status.FAIL and result["GPU0"].rule == "error_growth_per_hour_fail"
    assert "link 4 replay +2000" in result["GPU0"].summary
    # The same counts an hour later: no growth, no finding (the CRC level of 2 is normal).
    assert len(judged(after, history=CounterHistory("2026-11-21T21:40:00Z", 3600, counter_readings(after)))["passed"]) == 8


def test_a_high_level_without_history_warns_and_a_cleared_counter_is_judged_by_level() -> None:
    high = node(linked(0, errors={1: {"recovery": 50000}}))
    assert judged(high)["GPU0"].status is Status.WARN and judged(high)["GPU0"].rule == "error_level_warn"
    lower = node(linked(0, errors={1: {"recovery": 3}}))
    history = CounterHistory("2026-11-21T21:40:00Z", 3600, counter_readings(high))
    assert len(judged(lower, history=history)["passed"]) == 8


def test_pcie_gpus_skip_and_unreadable_links_are_unknown() -> None:
    pcie = replace(gpu(0), nvlink_active=0, nvlink_total=0)
    unread = replace(gpu(1), nvml_errors={"nvlink": "link 0: Unknown Error"})
    findings = run_check(nvlink, CHECK, dgx_h100(gpus=[pcie, unread]), pack_name="default")
    assert [(finding.status, finding.summary) for finding in findings] == [
        (Status.SKIP, "no NVLinks on this GPU (PCIe card)"),
        (Status.UNKNOWN, "NVLink state not known (link 0: Unknown Error)")]


def test_crc_growth_under_traffic_and_a_burst_between_close_runs_are_no_fault() -> None:
    # Measured on the device tool's 2x H200: a 1 GiB all-reduce between two runs 4 s apart
    # added 1-29 CRC-data errors per link; replay and recovery stayed 0.
    before = node(*(linked(index) for index in range(2)))
    after = node(*(linked(index, errors={link: {"crc_data": 2 + (link * 7 + index * 5) % 28} for link in range(18)})
                   for index in range(2)))
    history = CounterHistory("2026-11-21T22:39:56Z", 4.0, counter_readings(before))
    assert len(judged(after, history=history)["passed"]) == 8
    # A few replays within seconds are a burst, not a rate; a hundred fail at once.
    burst = node(linked(0, errors={2: {"replay": 5}}))
    assert len(judged(burst, history=history)["passed"]) == 8
    storm = node(linked(0, errors={2: {"replay": 500}}))
    assert judged(storm, history=history)["GPU0"].rule == "error_growth_count_fail"
