"""kernel-events: Xids by the pack's catalog table, SXids, link flaps and AER, each in its
window back from the capture time; events of another boot never count."""

from __future__ import annotations

from datetime import datetime, timedelta

from netdoctor.inventory.model import Inventory, KernelEvent, KernelEventKind, KernelLog
from netdoctor.report.model import Finding, Status
from netdoctor_plugins.kernel_events import kernel_events
from inventory_factory import CAPTURED_AT, dgx_h100, run_check

CHECK = "kernel-events"
NOW = datetime.fromisoformat(CAPTURED_AT.replace("Z", "+00:00"))
BOOT = NOW - timedelta(days=1)


def event(kind: KernelEventKind, subject: str, minutes_ago: float, code: int | None = None,
          fatal: bool | None = None) -> KernelEvent:
    return KernelEvent(kind, subject, NOW - timedelta(minutes=minutes_ago), code, f"{kind} {subject} {code}", fatal)


def judged(*events: KernelEvent) -> list[Finding]:
    inventory: Inventory = dgx_h100()
    inventory.hcas[0].ports[1].netdev = "ibp24s0"
    inventory.kernel_log = KernelLog(tuple(events), BOOT, BOOT)
    return run_check(kernel_events, CHECK, inventory, pack_name="dgx-h100")


def test_a_clean_log_passes_and_says_how_far_back_it_reaches() -> None:
    [finding] = judged(event(KernelEventKind.LINK_UP, "ibp24s0", 600))
    assert finding.status is Status.PASS and finding.subject == "node"
    assert finding.summary.endswith("the log reaches back to 2026-11-20T22:40:00Z")


def test_xid_79_an_hour_ago_fails_naming_the_gpu_and_times() -> None:
    [finding] = judged(event(KernelEventKind.XID, "0000:3a:00.0", 60, 79))
    assert finding.status is Status.FAIL and finding.subject == "GPU2 0000:3a:00.0"
    assert finding.summary.startswith("Xid 79 (1x, 2026-11-21T21:40:00Z)")
    assert finding.evidence["count"] == 1 and finding.rule == "xid_severity"


def test_application_xids_are_the_jobs_unless_they_repeat() -> None:
    once = judged(event(KernelEventKind.XID, "0000:18:00.0", 30, 13), event(KernelEventKind.XID, "0000:18:00.0", 30, 43))
    assert [finding.status for finding in once] == [Status.PASS]
    many = judged(*(event(KernelEventKind.XID, "0000:18:00.0", minutes, 13) for minutes in range(10, 20)))
    assert many[0].status is Status.WARN and "Xid 13 x10" in many[0].summary


def test_events_outside_their_window_or_before_this_boot_do_not_count() -> None:
    old = event(KernelEventKind.XID, "0000:18:00.0", 60 * 30, 79)                 # 30 h ago, window 24 h
    previous_boot = KernelEvent(KernelEventKind.XID, "0000:18:00.0", BOOT - timedelta(minutes=5), 79)
    assert [finding.status for finding in judged(old, previous_boot)] == [Status.PASS]


def test_a_link_flapping_six_times_in_an_hour_fails_and_twice_warns() -> None:
    flaps = [event(KernelEventKind.LINK_DOWN, "ibp24s0", minutes) for minutes in (5, 15, 25, 35, 45, 55)]
    [finding] = judged(*flaps)
    assert finding.status is Status.FAIL and finding.subject == "mlx5_0:1 (ibp24s0)"
    assert finding.summary.startswith("link went down 6 times in the last 1 h")
    assert judged(*flaps[:2])[0].status is Status.WARN


def test_fatal_sxid_fails_and_uncorrected_aer_on_a_gpu_fails_but_not_on_other_devices() -> None:
    findings = judged(event(KernelEventKind.SXID, "0000:07:00.0", 10, 20034, fatal=True),
                      event(KernelEventKind.AER_UNCORRECTED, "0000:18:00.0", 10),
                      event(KernelEventKind.AER_UNCORRECTED, "0000:e3:00.0", 10))
    assert [(finding.status, finding.subject) for finding in findings] == [
        (Status.FAIL, "GPU0 0000:18:00.0"), (Status.FAIL, "0000:07:00.0")]
