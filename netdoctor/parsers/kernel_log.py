"""Kernel log parser: the events netdoctor judges, from `dmesg --time-format iso`, plain
`dmesg` or `journalctl -k -o short-iso`.

Only lines that can hold an event are looked at: one regular-expression scan over the
whole text finds them (a 100,000-line log costs milliseconds, benchmarks/results/kernel-log.md),
and each found line is read for its time and its event:

* GPU Xid:   `NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.`
             (older drivers: `NVRM: Xid (0000:03:00): 14, Channel 00000001`, NVIDIA's Xid catalog);
             Xid 154 names the driver's recovery action, which `recovery_action` reads:
             `NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)`;
             Blackwell's NVLink5 Xids (144-150) name the unit, `Fatal` or `Nonfatal`, and the link,
             which `fatal` and `nvlink5_fault` read (GB200 trays log PCI domains 0008, 0018, ...):
             `NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 ...)`
* driver:    `NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)`
             (proprietary: `NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.120  Fri Sep 13 ...`):
             the driver was (re)loaded; every GPU's earlier events are history
* NVSwitch:  `nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 LTSSM Fault Up`
             (the `..., Severity 1 Engine instance 60 ...` and `..., Data {...}` lines newer
             drivers log after it are details of that error, not errors of their own)
* link flap: `mlx5_core 0000:1a:00.0 ibp26s0: Link down` / `... Link up` (netdev carrier)
* PCIe AER:  `pcieport 0000:00:01.1: AER: Corrected error received: 0000:18:00.0`,
             `... AER: Uncorrected (Non-Fatal) error received: ...`, `(Fatal)`, `Multiple ...`

A log holds at most MAX_EVENT_LINES event lines that are read, the newest ones (the windows
count back from now); older ones are only counted, and the result says from when on it is
whole (`skipped`, `whole_from`), so a check can say what it could not judge: a storm of a
million lines costs one regular-expression scan, not a million events.

Times: ISO lines (dmesg `2026-11-23T22:58:18,238174+00:00`, journalctl
`2026-11-23T22:58:18+0000 host kernel:`) become aware UTC datetimes; plain dmesg lines keep
their seconds since boot, which the inventory places with /proc/uptime.
"""

from __future__ import annotations

import re
from collections import deque
from datetime import datetime, timezone

from netdoctor.errors import ParseError
from netdoctor.parsers.common import require_text
from netdoctor.records import record
from netdoctor.util import canonical_pci_address
from netdoctor.vocabulary import RECOVERY_ACTIONS, KernelEventKind

SOURCE = "dmesg"
MAX_MESSAGE_CHARS = 300
_HEAD = 512            # of a line: its time stamp and message start
_AROUND = 160          # characters read on either side of an event keyword
# Engineering default: the newest event lines read. A healthy boot logs a few dozen; a port
# flapping every minute for a week logs ~20,000; beyond that the log is a storm, judged by its
# newest lines (each one is ~1 KB of memory and ~10 us to read).
MAX_EVENT_LINES = 20_000

# A line that may hold an event; the scan looks for these words only.
_CANDIDATE = re.compile(r"Xid \((?:PCI:)?[0-9A-Fa-f]|Link (?:up|down)|NIC Link is (?:Up|Down)|AER: |NVRM: loading NVIDIA UNIX")
_ISO_DMESG = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[,.](\d+))?([+-]\d\d:?\d\d|Z)? ")
_JOURNAL_HOST = re.compile(r"\S+ kernel: ")
_PLAIN = re.compile(r"\[\s*(\d+\.\d+)\] ")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)")
_SXID = re.compile(r"SXid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)")
# NVLink5 Xids: `<unit> <Fatal|Nonfatal> XC<n> i<n> Link <nn>` after the Xid number (and any
# `pid=..., name=...`); the driver pads the unit and the word with spaces (`NETIR_LINK_EVT  Fatal   XC0`).
# XC is required: it tells the NVLink5 form from other lines with the word (Xid 158 "GPU Fatal Timeout").
_NVLINK5 = re.compile(r"(?<![\w:])([A-Z][A-Z0-9_]*(?:/[A-Z][A-Z0-9_]*)*) +(Fatal|Nonfatal|Non-fatal) +XC ?\d+\b"
                      r"(?: +i ?\d+)?(?: +Link +(-?\d+))?")
_DRIVER = re.compile(r"NVRM: loading NVIDIA UNIX (?:Open Kernel Module for \S+|\S+ Kernel Module) +(\d+(?:\.\d+)+)")
# Xid 154: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)" (NVIDIA's Xid
# catalog); the values are nvmlGpuRecoveryAction_t, named here as NVML (and nvml.json) name them.
_RECOVERY = re.compile(r"recovery action changed from (0x[0-9A-Fa-f]+|\d+) \(([^)]*)\) "
                       r"to (0x[0-9A-Fa-f]+|\d+) \(([^)]*)\)")
_RECOVERY_WORDS = {"none": "none", "gpu reset required": "gpu_reset", "node reboot required": "node_reboot",
                   "drain p2p": "drain_p2p", "drain and reset": "drain_and_reset"}
_LINK = re.compile(r"(?:mlx5_core|mlx4_core|ib_\w+|bnxt_en|ice|i40e)? ?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)?"
                   r" ?([\w.@-]+): (?:NIC )?Link (?:is )?(up|down|Up|Down)")
_AER = re.compile(r"AER: (?:Multiple )?(Corrected|Uncorrected \((?:Non-Fatal|Fatal)\)) errors? received: "
                  r"([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)")


@record(frozen=True)
class KernelLogLine:
    """One event line: its kind, what it is about, its time (UTC, or seconds since boot)."""

    kind: KernelEventKind
    subject: str                    # canonical PCI address, or a netdev name
    time: datetime | None           # ISO lines
    since_boot_s: float | None      # plain dmesg lines
    code: int | None = None         # Xid / SXid number
    fatal: bool | None = None       # SXid, NVLink5 Xid: Fatal vs Non-fatal/Nonfatal, as the line says
    message: str = ""


@record(frozen=True)
class RecoveryAction:
    """What an Xid 154 line says the driver's recovery action changed to."""

    action: str | None              # NVML's name (`gpu_reset`, `node_reboot`, ...); None: a value NVML does not name
    value: int                      # the number logged (`0x2`)
    words: str                      # the driver's own words (`Node Reboot Required`)


@record(frozen=True)
class Nvlink5Fault:
    """What a Blackwell NVLink5 Xid line (144-150) says: the unit, fatal or not, the link."""

    unit: str                       # `NETIR_LINK_EVT`, `RLW_SRC_TRACK`, ...
    fatal: bool
    link: int | None                # `Link 13`; -1 where the driver names no single link; None: not logged


@record(frozen=True)
class KernelLogLines:
    events: tuple[KernelLogLine, ...]
    first_time: datetime | None         # the earliest ISO line: how far back the log reaches
    first_since_boot_s: float | None
    skipped: int = 0                    # older event lines not read (past MAX_EVENT_LINES)
    whole_from: datetime | None = None  # with skipped: the time of the oldest line read (ISO)
    whole_from_since_boot_s: float | None = None   # ... (plain dmesg)


def parse_kernel_log(text: str) -> KernelLogLines:
    """The events of a kernel log; ParseError when no line carries a time in a known form."""
    require_text(SOURCE, text)
    start = len(text) - len(text.lstrip()) if text[:1].isspace() else 0
    end = text.find("\n", start)
    first_line = text[start:end if end >= 0 else len(text)][:_HEAD]
    first_time, first_boot, _ = _time_of(first_line)
    if first_time is None and first_boot is None:
        raise ParseError(SOURCE, "the first line has no dmesg or journal time stamp", 1, first_line[:200])
    # One scan finds every keyword; only the newest MAX_EVENT_LINES are read (a line with two
    # keywords counts twice here, and is read once below).
    found = 0
    newest: deque[int] = deque(maxlen=MAX_EVENT_LINES)
    for match in _CANDIDATE.finditer(text):
        newest.append(match.start())
        found += 1
    skipped = found - len(newest)
    whole_from: tuple[datetime | None, float | None, int] = (None, None, 0)
    if skipped:
        start = text.rfind("\n", 0, newest[0]) + 1
        whole_from = _time_of(text[start:start + _HEAD])
    events: list[KernelLogLine] = []
    position = 0
    for keyword in newest:
        if keyword < position:
            continue                     # a second keyword on a line already read
        match = _CANDIDATE.match(text, keyword)
        assert match is not None
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        position = end
        # The time stamp at the line's start and the words around the keyword: a hostile
        # megabyte line costs no more than a normal one.
        window_start = max(start, match.start() - _AROUND)
        around = text[window_start:min(end, match.end() + _AROUND)]
        event = _event(text[start:min(end, start + _HEAD)], around if window_start > start else None)
        if event is not None:
            events.append(event)
    return KernelLogLines(tuple(events), first_time, first_boot, skipped, whole_from[0], whole_from[1])


def _time_of(line: str) -> tuple[datetime | None, float | None, int]:
    """(UTC time, seconds since boot, where the message starts) of one log line."""
    match = _ISO_DMESG.match(line)
    if match is not None:
        moment = _iso(match.group(1), match.group(2), match.group(3))
        rest = match.end()
        journal = _JOURNAL_HOST.match(line, rest)
        return moment, None, journal.end() if journal else rest
    plain = _PLAIN.match(line)
    if plain is not None:
        return None, float(plain.group(1)), plain.end()
    return None, None, 0


def _iso(date_time: str, fraction: str | None, zone: str | None) -> datetime | None:
    try:   # YYYY-MM-DDTHH:MM:SS (the pattern's shape); not strptime, whose import is ~3 ms of every run
        moment = datetime(int(date_time[0:4]), int(date_time[5:7]), int(date_time[8:10]),
                          int(date_time[11:13]), int(date_time[14:16]), int(date_time[17:19]))
    except ValueError:
        return None
    if fraction:
        moment = moment.replace(microsecond=int(fraction[:6].ljust(6, "0")))
    if zone in (None, "Z", "+00:00", "+0000", "-00:00", "-0000"):
        return moment.replace(tzinfo=timezone.utc)
    sign = 1 if zone[0] == "+" else -1
    digits = zone[1:].replace(":", "")
    offset_s = sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)
    return datetime.fromtimestamp(moment.replace(tzinfo=timezone.utc).timestamp() - offset_s, timezone.utc)


def _event(head: str, around: str | None) -> KernelLogLine | None:
    """The event of a line from its `head` (time stamp and message start) and, for a long
    line, the words `around` its keyword."""
    moment, since_boot, start = _time_of(head)
    message = head[start:start + MAX_MESSAGE_CHARS].rstrip()
    body = head[start:] if around is None else around
    if (match := _XID.search(body)) is not None:
        address = _pci(match.group(1))
        if address is None:
            return None
        fault = nvlink5_fault(body[match.end():])
        return KernelLogLine(KernelEventKind.XID, address, moment, since_boot, int(match.group(2)),
                             fault.fatal if fault is not None else None, message)
    if (match := _SXID.search(body)) is not None:
        address = _pci(match.group(1))
        if address is None:
            return None
        after = body[match.end():match.end() + 40].lower()
        if after.lstrip(", ").startswith(("severity ", "data {")):
            return None      # a detail line of the SXid logged just before it (R535+ drivers), not another error
        fatal = True if "non-fatal" not in after and "fatal" in after else (False if "non-fatal" in after else None)
        return KernelLogLine(KernelEventKind.SXID, address, moment, since_boot, int(match.group(2)), fatal, message)
    if (match := _AER.search(body)) is not None:
        kind = KernelEventKind.AER_CORRECTED if match.group(1) == "Corrected" else KernelEventKind.AER_UNCORRECTED
        address = _pci(match.group(2))
        return KernelLogLine(kind, address, moment, since_boot, message=message) if address else None
    if (match := _DRIVER.search(body)) is not None:
        return KernelLogLine(KernelEventKind.DRIVER_LOAD, match.group(1), moment, since_boot, message=message)
    if (match := _LINK.search(body)) is not None:
        kind = KernelEventKind.LINK_DOWN if match.group(3).lower() == "down" else KernelEventKind.LINK_UP
        return KernelLogLine(kind, match.group(2), moment, since_boot, message=message)
    return None


def recovery_action(message: str) -> RecoveryAction | None:
    """The action an Xid 154 line changed to; None when the line does not say it in the
    driver's form. The number decides (nvmlGpuRecoveryAction_t); the words are kept as logged."""
    match = _RECOVERY.search(message)
    if match is None:
        return None
    number = match.group(3)
    value = int(number, 16) if number[:2] in ("0x", "0X") else int(number)
    words = match.group(4).strip()
    action = RECOVERY_ACTIONS.get(value)
    if action is None:
        action = _RECOVERY_WORDS.get(words.lower())
    return RecoveryAction(action, value, words)


def nvlink5_fault(message: str) -> Nvlink5Fault | None:
    """The unit, fatality and link an NVLink5 Xid line names; None where the line does not say
    `Fatal`/`Nonfatal` in the driver's `<unit> <word> XC<n> ...` form."""
    match = _NVLINK5.search(message)
    if match is None:
        return None
    link = match.group(3)
    return Nvlink5Fault(match.group(1), match.group(2) == "Fatal", int(link) if link is not None else None)


def _pci(text: str) -> str | None:
    """`0000:18:00` (Xid lines omit the function) or `0000:18:00.0` -> `0000:18:00.0`."""
    return canonical_pci_address(text if "." in text else f"{text}.0")
