"""nvlink: active links against the pack, inactive links named, versions and speeds alike;
error counters as DCGM judges them: replay/recovery by any growth since the last reading
(history / --baseline; a warn) and a rate (a fail), CRC by rate per second, and with no earlier
reading the same rates over the uptime."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from inventory_factory import dgx_h100, gpu, run_check
from netdoctor_plugins.nvlink import nvlink

from netdoctor.checks.api import CounterHistory
from netdoctor.checks.history import counter_readings
from netdoctor.inventory.model import (
    Gpu,
    Inventory,
    KernelEvent,
    KernelEventKind,
    KernelLog,
    NvLink,
)
from netdoctor.report.model import Finding, Status

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
    assert result["GPU0"].status is Status.FAIL and result["GPU0"].rule == "replay_per_hour_fail"
    assert result["GPU0"].summary == ("NVLink errors past their rate limit: link 4 replay +2000 in 1.0 h, 2000/h "
                                      "(fails at 1000/h)")
    # The same counts an hour later: no growth, no finding (the CRC level of 2 is normal).
    assert len(judged(after, history=CounterHistory("2026-11-21T21:40:00Z", 3600, counter_readings(after)))["passed"]) == 8


def test_any_replay_or_recovery_growth_warns_as_dcgm_counts_it_and_a_rate_fails() -> None:
    before = node(linked(0, errors={4: {"replay": 100, "recovery": 1}}))
    history = CounterHistory("2026-11-21T21:40:00Z", 3600, counter_readings(before))
    slow = judged(node(linked(0, errors={4: {"replay": 103, "recovery": 1}})), history=history)["GPU0"]
    assert slow.status is Status.WARN and slow.rule == "replay_recovery_growth"
    assert slow.summary.startswith("NVLink errors grew since the last run: link 4 replay +3 in 1.0 h, 3/h; DCGM's")
    recovered = judged(node(linked(0, errors={4: {"replay": 100, "recovery": 2}})), history=history)["GPU0"]
    assert recovered.status is Status.WARN and "link 4 recovery +1 in 1.0 h, 1/h" in recovered.summary
    # Recovery (a link retrain) fails at a lower rate than replay.
    retrains = judged(node(linked(0, errors={4: {"replay": 100, "recovery": 21}})), history=history)["GPU0"]
    assert retrains.status is Status.FAIL and retrains.rule == "recovery_per_hour_fail"


def test_a_cleared_counter_counts_from_its_reset_within_the_interval() -> None:
    high = node(linked(0, errors={1: {"recovery": 50000}}))
    lower = node(linked(0, errors={1: {"recovery": 3}}))
    history = CounterHistory("2026-11-21T21:40:00Z", 3600, counter_readings(high))
    result = judged(lower, history=history)["GPU0"]
    assert result.status is Status.WARN and "link 1 recovery +3 in 1.0 h" in result.summary


def test_without_history_the_window_is_the_uptime() -> None:
    slow = node(linked(0, errors={9: {"replay": 20000}}))
    slow.uptime_s = 93784.0                                  # 26 h: 768/h, below the 1000/h fail rate
    assert len(judged(slow)["passed"]) == 8
    fast = node(linked(0, errors={9: {"replay": 20000}}))
    fast.uptime_s = 1800.0                                   # the same count 30 min after boot: 40,000/h
    finding = judged(fast)["GPU0"]
    assert finding.status is Status.FAIL and finding.rule == "replay_per_hour_fail"
    assert finding.summary == ("NVLink errors past their rate limit: link 9 replay 20000 since boot, 40000/h "
                               "(fails at 1000/h)")
    retrained = node(linked(0, errors={2: {"recovery": 3}}))
    retrained.uptime_s = 93784.0
    warned = judged(retrained)["GPU0"]                      # any recovery since boot warns
    assert warned.status is Status.WARN and warned.rule == "recovery_since_boot"
    assert warned.summary == "NVLink errors with no earlier reading to tell growth: link 2 recovery 3 since boot, 0/h"


def test_a_fresh_boot_gives_no_rate_only_a_large_count_fails() -> None:
    booted = node(linked(0, errors={9: {"replay": 50}}))
    booted.uptime_s = 120.0
    assert len(judged(booted)["passed"]) == 8
    storm = node(linked(0, errors={9: {"replay": 500}}))
    storm.uptime_s = 120.0
    assert judged(storm)["GPU0"].rule == "error_growth_count_fail"


def test_without_any_window_nothing_fails() -> None:
    high = node(linked(0, errors={1: {"replay": 50000}}))   # no earlier reading, uptime not read
    finding = judged(high)["GPU0"]
    assert finding.status is Status.WARN and finding.rule == "no_window"
    assert "no window known" in finding.summary


def test_crc_errors_fail_only_past_dcgms_rate_per_second() -> None:
    before = node(linked(0))
    history = CounterHistory("2026-11-21T22:30:00Z", 600, counter_readings(before))
    traffic = node(linked(0, errors={3: {"crc_data": 2 + 30000}}))       # 50/s: below DCGM's 100/s
    assert len(judged(traffic, history=history)["passed"]) == 8
    storm = node(linked(0, errors={3: {"crc_flit": 90000}}))              # 150/s
    finding = judged(storm, history=history)["GPU0"]
    assert finding.status is Status.FAIL and finding.rule == "crc_per_second_fail"
    assert "link 3 crc_flit +90000 in 10 min" in finding.summary and "150/s, fails at 100/s" in finding.summary
    # The same rule over the uptime on a first run.
    since_boot = node(linked(0, errors={3: {"crc_data": 400_000}}))
    since_boot.uptime_s = 3600.0                                           # 111/s
    assert judged(since_boot)["GPU0"].rule == "crc_per_second_fail"
    since_boot.uptime_s = 93784.0
    assert len(judged(since_boot)["passed"]) == 8


def test_pcie_gpus_skip_and_unreadable_links_are_unknown() -> None:
    pcie = replace(gpu(0), nvlink_active=0, nvlink_total=0)
    unread = replace(gpu(1), nvml_errors={"nvlink": "link 0: Unknown Error"})
    findings = run_check(nvlink, CHECK, dgx_h100(gpus=[pcie, unread]), pack_name="default")
    assert [(finding.status, finding.summary) for finding in findings] == [
        (Status.SKIP, "no NVLinks on this GPU (PCIe card)"),
        (Status.UNKNOWN, "NVLink state not known (link 0: Unknown Error)")]


def test_crc_growth_under_traffic_and_a_burst_between_close_runs() -> None:
    # Measured on the device tool's 2x H200: a 1 GiB all-reduce between two runs 4 s apart
    # added 1-29 CRC-data errors per link; replay and recovery stayed 0.
    before = node(*(linked(index) for index in range(2)))
    after = node(*(linked(index, errors={link: {"crc_data": 2 + (link * 7 + index * 5) % 28} for link in range(18)})
                   for index in range(2)))
    history = CounterHistory("2026-11-21T22:39:56Z", 4.0, counter_readings(before))
    assert len(judged(after, history=history)["passed"]) == 8
    # A few replays within seconds: no rate, but growth all the same (DCGM: any growth); a hundred fail at once.
    burst = node(linked(0, errors={2: {"replay": 5}}))
    assert judged(burst, history=history)["GPU0"].rule == "replay_recovery_growth"
    storm = node(linked(0, errors={2: {"replay": 500}}))
    assert judged(storm, history=history)["GPU0"].rule == "error_growth_count_fail"


def test_a_driver_reload_does_not_shorten_the_window() -> None:
    """Without history the window is the uptime, also when the log shows a later driver load:
    whether a reload clears the NVLink counters is not documented, and a window guessed too
    short would fail a healthy link (20,000 replays over 26 h are 768/h, below 1000/h)."""
    inventory = node(linked(0, errors={9: {"replay": 20000}}))
    inventory.uptime_s = 93784.0
    loaded = datetime(2026, 11, 21, 22, 10, tzinfo=UTC)                  # capture is 22:40
    inventory.kernel_log = KernelLog(events=(KernelEvent(KernelEventKind.DRIVER_LOAD, "580.95.05", loaded,
                                                         message="NVRM: loading NVIDIA UNIX"),))
    assert len(judged(inventory)["passed"]) == 8
    inventory.uptime_s = 1800.0                                           # 30 min after boot: 40,000/h
    finding = judged(inventory)["GPU0"]
    assert finding.status is Status.FAIL and "link 9 replay 20000 since boot, 40000/h" in finding.summary
