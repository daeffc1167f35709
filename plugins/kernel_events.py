"""`kernel-events`: what the kernel logged about the GPUs, NVSwitches, NICs and their PCIe
links in this boot, within a window per event class.

Each class has its own window in the pack (an Xid 79 two hours ago still matters; a link
that flapped yesterday and has held since does not). Events from before this boot are
never in the log read (`dmesg` is this boot's ring buffer). The window is counted back from
the capture time, never "since the last run": a HealthCheck run must not consume the event
the next prolog needs.

GPU Xids are judged by the pack's `xid_severity` table, kept from NVIDIA's Xid catalog
(docs.nvidia.com/deploy/xid-errors): the ones that mean the GPU or its memory or NVLink is
broken fail; application Xids (13 graphics exception, 31 MMU fault, 43 GPU stopped
processing, 45 preemptive cleanup) are the job's, not the node's, unless they repeat past
`application_xid_repeat` in the window.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.inventory.model import Inventory, KernelEvent, KernelEventKind, KernelLog
from netdoctor.util import iso_utc, parse_iso_utc

CHECK_ID = "kernel-events"
REMEDY_XID = ("look the Xid up in NVIDIA's catalog (docs.nvidia.com/deploy/xid-errors); drain the node, reset "
              "the GPU (`nvidia-smi -r`) or reboot, and run `dcgmi diag -r 3`; a repeated Xid 79/48/94/95 is an RMA")
REMEDY_SXID = "read the fabric manager log; a fatal SXid needs the GPUs reset (or a reboot) before the fabric is usable"
REMEDY_FLAP = "reseat or replace the cable/transceiver of this port; check the switch port's error counters"
REMEDY_AER = ("reseat the card; check the slot and riser; uncorrected AER errors on a GPU/NIC path end in a "
              "fallen-off device")


@dataclass
class _Tally:
    """Events of one kind about one subject, within the window."""

    count: int = 0
    first: datetime | None = None
    last: datetime | None = None
    codes: dict[int, int] = field(default_factory=dict)
    fatal: bool = False
    sample: str = ""

    def add(self, event: KernelEvent) -> None:
        self.count += 1
        if event.time is not None:
            self.first = min(self.first, event.time) if self.first else event.time
            self.last = max(self.last, event.time) if self.last else event.time
        if event.code is not None:
            self.codes[event.code] = self.codes.get(event.code, 0) + 1
        self.fatal = self.fatal or bool(event.fatal)
        self.sample = self.sample or event.message

    def evidence(self) -> dict[str, Any]:
        return {"count": self.count, "first": _iso(self.first), "last": _iso(self.last),
                "codes": {str(code): count for code, count in sorted(self.codes.items())} or None,
                "message": self.sample}

    def when(self) -> str:
        if self.first is None:
            return "time not known"
        return _iso(self.first) if self.first == self.last else f"{_iso(self.first)} .. {_iso(self.last)}"


@check(CHECK_ID, "Kernel log of this boot: GPU Xids by catalog severity, NVSwitch SXids, link flaps, PCIe AER errors "
       "on GPU/NIC paths, each within its window", needs=("kernel-log",), order=95)
def kernel_events(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    log = inventory.kernel_log
    if log is None:                    # the `kernel-log` need gate runs first; never judged blind
        yield ctx.unknown("node", "the kernel log was not read")
        return
    now = parse_iso_utc(inventory.captured_at)
    windows = {kind: float(ctx.rule(key)) for kind, key in (
        (KernelEventKind.XID, "xid_window_s"), (KernelEventKind.SXID, "sxid_window_s"),
        (KernelEventKind.LINK_DOWN, "flap_window_s"), (KernelEventKind.AER_CORRECTED, "aer_window_s"),
        (KernelEventKind.AER_UNCORRECTED, "aer_window_s"))}
    tallies: dict[tuple[KernelEventKind, str], _Tally] = {}
    for event in log.events:
        window = windows.get(event.kind)
        if window is None or (event.time is not None and event.time < now - timedelta(seconds=window)):
            continue
        if event.time is not None and log.boot_time is not None and event.time < log.boot_time:
            continue                   # a journal spanning reboots: another boot's event
        tallies.setdefault((event.kind, event.subject), _Tally()).add(event)
    names = _subject_names(inventory)
    problems = 0
    for (kind, subject), tally in sorted(tallies.items(), key=lambda item: (item[0][0].value, item[0][1])):
        finding = _judge(ctx, kind, names.get(subject, subject), tally, subject in names)
        if finding is not None:
            problems += 1
            yield finding
    unread = _unread(ctx, log, now, windows)
    if unread is not None:
        yield unread
    elif not problems:
        reach = f"; the log reaches back to {_iso(log.first_time)}" if log.first_time else ""
        yield ctx.passed("node", f"no GPU, NVSwitch, link or PCIe fault in this boot's kernel log{reach}",
                         evidence={"events_read": len(log.events)})


def _judge(ctx: CheckContext, kind: KernelEventKind, subject: str, tally: _Tally, ours: bool) -> Finding | None:
    times = f"{tally.count}x, {tally.when()}"
    if kind is KernelEventKind.XID:
        return _judge_xids(ctx, subject, tally, times)
    if kind is KernelEventKind.SXID:
        status = Status.FAIL if tally.fatal else (Status.WARN if tally.count >= int(ctx.rule("sxid_nonfatal_repeat"))
                                                  else None)
        if status is None:
            return None
        codes = ", ".join(map(str, sorted(tally.codes)))
        return ctx.finding(status, subject, f"NVSwitch SXid {codes} ({'fatal' if tally.fatal else 'non-fatal'}; "
                           f"{times})", evidence=tally.evidence(), remedy=REMEDY_SXID)
    if kind is KernelEventKind.LINK_DOWN:
        if tally.count >= int(ctx.rule("flap_count_fail")):
            status, rule = Status.FAIL, "flap_count_fail"
        elif tally.count >= int(ctx.rule("flap_count_warn")):
            status, rule = Status.WARN, "flap_count_warn"
        else:
            return None
        window = float(ctx.rule("flap_window_s")) / 3600
        return ctx.finding(status, subject, f"link went down {tally.count} times in the last {window:g} h "
                           f"({tally.when()})", evidence=tally.evidence(), remedy=REMEDY_FLAP, rule=rule)
    if not ours:
        return None                    # AER on a device that is no GPU or NIC of this node's fabric
    if kind is KernelEventKind.AER_UNCORRECTED:
        return ctx.fail(subject, f"PCIe AER uncorrected errors ({times})", evidence=tally.evidence(), remedy=REMEDY_AER)
    if tally.count >= int(ctx.rule("aer_corrected_warn")):
        return ctx.warn(subject, f"PCIe AER corrected errors ({times})", evidence=tally.evidence(), remedy=REMEDY_AER,
                        rule="aer_corrected_warn")
    return None


def _judge_xids(ctx: CheckContext, subject: str, tally: _Tally, times: str) -> Finding | None:
    severity: dict[str, str] = ctx.rule("xid_severity")
    repeat = int(ctx.rule("application_xid_repeat"))
    worst: Status | None = None
    named: list[str] = []
    for code, count in sorted(tally.codes.items()):
        level = severity.get(str(code), "warn")
        if level == "application":
            status = Status.WARN if count >= repeat else None
        else:
            status = Status(level)
        if status is None:
            continue
        named.append(f"Xid {code}" + (f" x{count}" if count > 1 else ""))
        if worst is None or (status is Status.FAIL):
            worst = status
    if worst is None:
        return None
    # The driver's own words say what the Xid means ("GPU has fallen off the bus").
    said = tally.sample.split("): ", 1)[-1][:160]
    return ctx.finding(worst, subject, f"{', '.join(named)} ({times}): {said}", evidence=tally.evidence(),
                       remedy=REMEDY_XID, rule="xid_severity")


_KIND_WORDS = {KernelEventKind.XID: "GPU Xids", KernelEventKind.SXID: "NVSwitch SXids",
               KernelEventKind.LINK_DOWN: "link flaps", KernelEventKind.AER_CORRECTED: "PCIe AER errors",
               KernelEventKind.AER_UNCORRECTED: "PCIe AER errors"}


def _unread(ctx: CheckContext, log: KernelLog, now: datetime, windows: dict[KernelEventKind, float]) -> Finding | None:
    """A log with more event lines than its parser reads (a storm) was read from its newest end:
    what fell in a window but before the oldest line read was not judged, and the report says so."""
    if not log.skipped:
        return None
    partial = sorted({_KIND_WORDS[kind] for kind, window in windows.items()
                      if log.whole_from is None or now - timedelta(seconds=window) < log.whole_from})
    if not partial:
        return None                    # every window starts after the oldest line read: all judged
    since = f"before {_iso(log.whole_from)} " if log.whole_from else ""
    return ctx.unknown("node", f"the kernel log holds more event lines than netdoctor reads: the oldest "
                       f"{log.skipped:,} were not read, so {', '.join(partial)} {since}within their windows "
                       f"were not judged (the newest {len(log.events):,} events were)",
                       evidence={"skipped_lines": log.skipped, "whole_from": _iso(log.whole_from),
                                 "events_read": len(log.events)},
                       remedy="look at what floods the kernel log (`dmesg | tail`): an Xid storm or a flapping link")


def _subject_names(inventory: Inventory) -> dict[str, str]:
    """PCI addresses and netdevs of this node's GPUs and NICs, as findings name them."""
    names: dict[str, str] = {}
    for gpu in inventory.gpus:
        if gpu.pci_address:
            names[gpu.pci_address] = f"{gpu.label} {gpu.pci_address}"
    for hca in inventory.hcas:
        if hca.pci_address:
            names[hca.pci_address] = f"{hca.name} {hca.pci_address}"
        for port in hca.ports.values():
            if port.netdev:
                names[port.netdev] = f"{port.name} ({port.netdev})"
    return names


def _iso(moment: datetime | None) -> str | None:
    return iso_utc(moment) if moment is not None else None
