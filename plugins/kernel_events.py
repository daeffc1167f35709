"""`kernel-events`: what the kernel logged about the GPUs, NVSwitches, NICs and their PCIe
links in this boot, within a window per event class.

Each class has its own window in the pack (an Xid 79 two hours ago still matters; a link
that flapped yesterday and has held since does not). Events from before this boot are
never in the log read (`dmesg` is this boot's ring buffer). The window is counted back from
the capture time, never "since the last run": a HealthCheck run must not consume the event
the next prolog needs.

GPU Xids are graded by NVIDIA's Xid catalog, its immediate resolution per Xid (xid_catalog.py):
RESET_GPU, RESTART_BM, CONTACT_SUPPORT and the ECC/NVLink workflows fail; RESTART_APP and
IGNORE are the job's or nothing, a warning only when one GPU repeats them past
`application_xid_repeat`; Xid 154 by the recovery action it names; Blackwell's NVLink5 Xids
(144-150) by the `Fatal`/`Nonfatal` their lines carry (fatal fail; non-fatal warn until one GPU
repeats them `nvlink5_nonfatal_repeat` times). An Xid older than the
newest load of the NVIDIA driver (`NVRM: loading NVIDIA UNIX ... Kernel Module`) is history:
the reload reinitialised every GPU, so it is shown and not graded. A reset of one GPU
(`nvidia-smi -r`) logs no kernel line that says so, and is not seen here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import field
from datetime import datetime, timedelta
from typing import Any

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.inventory.model import Inventory, KernelEvent, KernelEventKind, KernelLog
from netdoctor.records import record
from netdoctor.util import iso_utc, parse_iso_utc
from netdoctor_plugins.remedy_words import gpu_index, netdev_of
from netdoctor_plugins.xid_catalog import (RECOVERY_BUCKET, RECOVERY_XID, UNLISTED, XidRules, XidVerdict, judge_gpu,
                                           remedy_of)

CHECK_ID = "kernel-events"
_CODE = re.compile(r"^\d+,\s*")     # the Xid number that opens the driver's words
REMEDY_SXID = ("read the fabric manager log (/var/log/fabricmanager.log); a fatal SXid needs the GPUs reset (or a "
               "reboot) before the fabric is usable")
REMEDY_AER = ("reseat the card; check the slot and riser (`lspci -vv -s {address}` shows its AER status); uncorrected "
              "AER errors on a GPU/NIC path end in a fallen-off device")


@record
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


@check(CHECK_ID, "Kernel log of this boot: GPU Xids by NVIDIA's Xid catalog (since the driver's last load), NVSwitch "
       "SXids, link flaps, PCIe AER errors on GPU/NIC paths, each within its window", needs=("kernel-log",), order=95)
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
    xids = XidRules(ctx)
    loaded = _driver_loaded(log)
    tallies: dict[tuple[KernelEventKind, str], _Tally] = {}
    current: dict[str, list[KernelEvent]] = {}
    history: dict[str, list[KernelEvent]] = {}
    for event in log.events:
        window = windows.get(event.kind)
        if window is None or (event.time is not None and event.time < now - timedelta(seconds=window)):
            continue
        if event.time is not None and log.boot_time is not None and event.time < log.boot_time:
            continue                   # a journal spanning reboots: another boot's event
        if event.kind is KernelEventKind.XID:
            older = loaded is not None and event.time is not None and event.time < loaded[0]
            (history if older else current).setdefault(event.subject, []).append(event)
            continue
        tallies.setdefault((event.kind, event.subject), _Tally()).add(event)
    names = _subject_names(inventory)
    findings: list[tuple[str, str, Finding]] = []
    for (kind, subject), tally in tallies.items():
        finding = _judge(ctx, kind, subject, names.get(subject, subject), tally, subject in names)
        if finding is not None:
            findings.append((kind.value, subject, finding))
    for subject in set(current) | set(history):
        findings.append((KernelEventKind.XID.value, subject, _judge_xids(
            ctx, xids, subject, names.get(subject, subject), current.get(subject, []), history.get(subject, []),
            loaded)))
    problems = 0
    for _, _, finding in sorted(findings, key=lambda item: (item[0], item[1])):
        problems += finding.status is not Status.PASS
        yield finding
    unread = _unread(ctx, log, now, windows)
    if unread is not None:
        yield unread
    elif not problems:
        reach = f"; the log reaches back to {_iso(log.first_time)}" if log.first_time else ""
        evidence: dict[str, Any] = {"events_read": len(log.events)}
        if loaded is not None:
            evidence.update(driver_loaded=_iso(loaded[0]), driver_version=loaded[1])
        yield ctx.passed("node", f"nothing in this boot's kernel log needs action: no GPU, NVSwitch, link or PCIe "
                         f"fault{reach}", evidence=evidence)


def _driver_loaded(log: KernelLog) -> tuple[datetime, str] | None:
    """The newest load of the NVIDIA driver this boot (its time and version), where placed in time."""
    loads = [(event.time, event.subject) for event in log.events
             if event.kind is KernelEventKind.DRIVER_LOAD and event.time is not None
             and (log.boot_time is None or event.time >= log.boot_time)]
    return max(loads) if loads else None


def _judge(ctx: CheckContext, kind: KernelEventKind, logged: str, subject: str, tally: _Tally,
           ours: bool) -> Finding | None:
    """One tally's finding; `logged` is the netdev or PCI address as the kernel wrote it, `subject` its name here."""
    times = f"{tally.count}x, {tally.when()}"
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
                           f"({tally.when()})", evidence=tally.evidence(), remedy=_flap_remedy(ctx.inventory, logged),
                           rule=rule)
    if not ours:
        return None                    # AER on a device that is no GPU or NIC of this node's fabric
    if kind is KernelEventKind.AER_UNCORRECTED:
        return ctx.fail(subject, f"PCIe AER uncorrected errors ({times})", evidence=tally.evidence(),
                        remedy=REMEDY_AER.format(address=logged))
    if tally.count >= int(ctx.rule("aer_corrected_warn")):
        return ctx.warn(subject, f"PCIe AER corrected errors ({times})", evidence=tally.evidence(),
                        remedy=REMEDY_AER.format(address=logged),
                        rule="aer_corrected_warn")
    return None


def _judge_xids(ctx: CheckContext, xids: XidRules, pci: str, subject: str, current: list[KernelEvent],
                history: list[KernelEvent], loaded: tuple[datetime, str] | None) -> Finding:
    """One GPU's Xids: graded by the catalog where they happened since the driver's last load;
    shown, not graded, where they are older (history) or the job's and not repeated."""
    verdicts = judge_gpu(xids, current, pci, gpu_index(ctx.inventory, pci)) if current else []
    evidence: dict[str, Any] = {}
    if current:
        tally = _Tally()
        for event in current:
            tally.add(event)
        evidence = tally.evidence()
        evidence["codes"] = {str(verdict.code): {"count": verdict.count, "resolution": verdict.resolution,
                                                 "grade": verdict.grade, **(verdict.detail or {})}
                             for verdict in verdicts}
    before = ""
    if history:
        past = _Tally()
        for event in history:
            past.add(event)
        assert loaded is not None          # an event is history only against a driver load
        evidence["history"] = {**past.evidence(), "driver_loaded": _iso(loaded[0]), "driver_version": loaded[1]}
        codes = ", ".join(f"Xid {code}" + (f" x{count}" if count > 1 else "")
                          for code, count in sorted(past.codes.items()))
        before = (f"{codes} ({past.when()}) came before the NVIDIA driver was loaded again at {_iso(loaded[0])} "
                  f"({loaded[1]}): history, not graded")
    graded = [verdict for verdict in verdicts if verdict.status is not None]
    if not graded:
        parts = []
        if verdicts:
            shown = ", ".join(_named(verdict) for verdict in verdicts)
            parts.append(f"{shown} ({_times(current)}): the job's or nothing by NVIDIA's catalog, fewer than "
                         f"{xids.repeat} of one Xid in the window")
        if before:
            parts.append(before)
        return ctx.passed(subject, "; ".join(parts), evidence=evidence)
    status = Status.FAIL if any(verdict.status is Status.FAIL for verdict in graded) else Status.WARN
    worst = [verdict for verdict in graded if verdict.status is status]
    newest = [event for event in current if event.code in {verdict.code for verdict in worst}][-1]
    # The driver's own words say what the Xid means ("GPU has fallen off the bus").
    said = _CODE.sub("", newest.message.split("): ", 1)[-1], count=1)[:160]
    codes = {verdict.code for verdict in graded}
    times = _times([event for event in current if event.code in codes])
    summary = f"{', '.join(_named(verdict) for verdict in graded)} ({times}): {said}"
    if before:
        summary += f"; {before}"
    return ctx.finding(status, subject, summary, evidence=evidence, remedy=remedy_of(verdicts),
                       rule=_rule_of(xids, worst[0]))


def _times(events: list[KernelEvent]) -> str:
    tally = _Tally()
    for event in events:
        tally.add(event)
    return f"{tally.count}x, {tally.when()}"


def _named(verdict: XidVerdict) -> str:
    times = f" x{verdict.count}" if verdict.count > 1 else ""
    return f"Xid {verdict.code}{times} ({verdict.said or verdict.resolution})"


def _rule_of(xids: XidRules, verdict: XidVerdict) -> str:
    """The pack key that set this grade."""
    if str(verdict.code) in xids.overrides:
        return "xid_severity"
    if verdict.rule:
        return verdict.rule
    if verdict.grade == "repeat":
        return "application_xid_repeat"
    if verdict.code == RECOVERY_XID and verdict.resolution != RECOVERY_BUCKET:
        return "recovery_action_grade"
    return "unlisted_xid_severity" if verdict.resolution == UNLISTED else "resolution_grade"


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


def _flap_remedy(inventory: Inventory, netdev: str) -> str:
    """Reseat the cable of the port whose netdev flapped, and the commands that read that link."""
    port = next((port for port in inventory.ports if netdev_of(inventory, port) == netdev), None)
    if port is None and inventory.netdev(netdev) is None:
        return ("reseat or replace the cable/transceiver of this port (the name the kernel logged is no interface of "
                "this node now: `ip -br link` lists them); check the switch port's error counters")
    if port is None:
        return (f"reseat or replace the cable/transceiver of {netdev} (`ethtool -m {netdev}` reads its module, "
                f"`ethtool -S {netdev}` its counters); check the switch port's error counters")
    return (f"reseat or replace the cable/transceiver of {port.name} ({netdev}): `mlxlink -d {port.hca} -m` reads "
            f"the module and its BER, `mlxlink -d {port.hca} -c` the link's error counters; check the switch port's "
            "error counters")


def _iso(moment: datetime | None) -> str | None:
    return iso_utc(moment) if moment is not None else None
