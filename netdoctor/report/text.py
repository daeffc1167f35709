"""`--format text`: a compact report a person on call reads in ten seconds.

Grade first (with any required check left out by `--only`/`--skip`, and how many checks
judged when most could not), then the snapshot and its capture time; then the fail,
unknown and warn findings, where findings that say the same thing about like subjects
share one line (`mtu  mlx5_[0,3-6]:1  IB active MTU is 2048, expected 4096`) and one
remedy; then one line per check with its status and counts, e.g. `link-speed  fail  1 fail,
7 pass`. Wholly skipped checks fold into one line (`skipped: 12 checks, nothing to judge on
this node`) unless `verbose`, which lists each with its reason. Lines are wrapped to the
terminal. Everything that came from the node is escaped (netdoctor.textsafe). The JSON
report keeps one finding per subject.
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from collections import Counter
from dataclasses import field

from netdoctor.records import record
from netdoctor.report.model import STATUS_SEVERITY, Finding, Grade, Report, Status
from netdoctor.textsafe import safe_text

_COLORS = {
    "pass": "\033[32m",      # green
    "warn": "\033[33m",      # yellow
    "fail": "\033[1;31m",    # bold red
    "unknown": "\033[35m",   # magenta
    "skip": "\033[2m",       # dim
}
_RESET = "\033[0m"
_COUNT_ORDER = (Status.FAIL, Status.UNKNOWN, Status.WARN, Status.PASS, Status.SKIP)
DEFAULT_WIDTH = 100        # when the output is no terminal
MIN_WIDTH = 40
_STATUS_WIDTH = 7
_INDENT = " " * (_STATUS_WIDTH + 2)
_SUBJECT_COLUMN_MAX = 24   # a longer subject (a folded list) does not push every summary right
# Placeholders for a group's subjects inside its shared summary/remedy text.
_SUBJECT, _DEVICE = "\x00subject\x00", "\x00device\x00"
_NUMBER = re.compile(r"(\d+)")


def _paint(text: str, status: str, color: bool, width: int = 0) -> str:
    padded = text.ljust(width)
    return f"{_COLORS[status]}{padded}{_RESET}" if color and status in _COLORS else padded


def terminal_width() -> int:
    """$COLUMNS or the terminal's width; DEFAULT_WIDTH when the output is no terminal."""
    return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


# -- folding subjects ------------------------------------------------------------------
def _ranges(numbers: list[str]) -> str:
    """["0", "3", "4", "5", "9"] -> "0,3-5,9" (zero-padded numbers fold only with their own width)."""
    values = sorted(set(numbers), key=lambda text: (int(text), len(text)))
    parts: list[str] = []
    start = previous = values[0]
    for value in values[1:]:
        padded = len(value) > 1 and value.startswith("0")
        if int(value) == int(previous) + 1 and (len(value) == len(previous) or not padded):
            previous = value
            continue
        parts.append(start if start == previous else f"{start}-{previous}")
        start = previous = value
    parts.append(start if start == previous else f"{start}-{previous}")
    return ",".join(parts)


def fold_subjects(subjects: list[str]) -> list[str]:
    """Subjects that differ only in one number fold into ClusterShell-like ranges:
    mlx5_0:1, mlx5_1:1, mlx5_3:1 -> mlx5_[0-1,3]:1; GPU0..GPU7 -> GPU[0-7]. Order kept."""
    shapes: dict[tuple[str, ...], list[list[str]]] = {}
    for subject in dict.fromkeys(subjects):
        pieces = _NUMBER.split(subject)
        shapes.setdefault(tuple(pieces[0::2]), []).append(pieces)
    folded: list[str] = []
    for members in shapes.values():
        folded += _fold_shape(members)
    return folded


def _fold_shape(members: list[list[str]]) -> list[str]:
    """Subjects of one shape (same text between their numbers): fold on the number whose
    ranges leave the fewest lines (the later one on a tie), grouping by the others."""
    varying = [index for index in range(1, len(members[0]), 2) if len({pieces[index] for pieces in members}) > 1]
    if not varying:
        return ["".join(members[0])]

    def groups_at(position: int) -> dict[tuple[str, ...], list[list[str]]]:
        groups: dict[tuple[str, ...], list[list[str]]] = {}
        for pieces in members:
            groups.setdefault(tuple(pieces[:position] + pieces[position + 1:]), []).append(pieces)
        return groups

    position = min(reversed(varying), key=lambda index: len(groups_at(index)))
    folded = []
    for group in groups_at(position).values():
        numbers = [pieces[position] for pieces in group]
        shown = numbers[0] if len(set(numbers)) == 1 else f"[{_ranges(numbers)}]"
        folded.append("".join(group[0][:position]) + shown + "".join(group[0][position + 1:]))
    return folded


# -- grouping findings -----------------------------------------------------------------
def _template(text: str, subject: str) -> str:
    """`text` with the subject (and a port's device, `mlx5_3` of `mlx5_3:1`) factored out."""
    if not text or not subject or subject == "node":
        return text
    # Not inside a longer name (`mlx5_3` of `mlx5_3:1`), but before a colon that ends a clause.
    text = re.sub(rf"(?<![\w.:-]){re.escape(subject)}(?![\w.-]|:\w)", _SUBJECT, text)
    device = subject.partition(":")[0]
    if device != subject:
        text = re.sub(rf"(?<![\w.:-]){re.escape(device)}(?![\w.-])", _DEVICE, text)
    return text


@record
class _Group:
    status: Status
    check: str
    summary: str
    remedy: str
    shadow: bool
    internal: bool
    findings: list[Finding] = field(default_factory=list)

    def subject(self) -> str:
        return ", ".join(fold_subjects([finding.subject for finding in self.findings]))

    def fill(self, template: str) -> str:
        """A shared text for the group; one subject's own text when it is alone."""
        if len(self.findings) == 1:
            only = self.findings[0]
            return template.replace(_SUBJECT, only.subject).replace(_DEVICE, only.subject.partition(":")[0])
        devices = fold_subjects([finding.subject.partition(":")[0] for finding in self.findings])
        return template.replace(_SUBJECT, self.subject()).replace(_DEVICE, ", ".join(devices))

    def remedies(self) -> list[str]:
        """The group's remedy; where it names its subject, each subject's own command, so a
        user can paste it (a folded `ens[1-8]np0` is no interface), and the words they share
        after it once."""
        if len(self.findings) == 1 or (_SUBJECT not in self.remedy and _DEVICE not in self.remedy):
            return [self.fill(self.remedy)]
        own = list(dict.fromkeys(finding.remedy or "" for finding in self.findings))
        shared = _shared_tail(own)
        return [text[:len(text) - len(shared)] for text in own] + ([shared.strip()] if shared else [])


def _shared_tail(texts: list[str]) -> str:
    """The longest end all `texts` share that starts a clause (` (`, `; `, `. `), else ""."""
    tail = os.path.commonprefix([text[::-1] for text in texts])[::-1]
    for position in range(len(tail)):
        if tail.startswith((" (", "; ", ". "), position) and all(len(text) > len(tail) - position for text in texts):
            return tail[position:]
    return ""


def group_findings(findings: list[Finding]) -> list[_Group]:
    """Fail, unknown and warn findings, worst first, grouped by what they say: same check,
    status, summary and remedy once the subject is factored out. Check order is kept."""
    notable = [finding for finding in findings if finding.status not in (Status.PASS, Status.SKIP)]
    notable.sort(key=lambda finding: -STATUS_SEVERITY[finding.status])  # stable: check order kept
    groups: dict[tuple[object, ...], _Group] = {}
    for finding in notable:
        summary = _template(finding.summary, finding.subject)
        remedy = _template(finding.remedy or "", finding.subject)
        key = (finding.check, finding.status, summary, remedy, finding.shadow, finding.internal)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(finding.status, finding.check, summary, remedy, finding.shadow, finding.internal)
        group.findings.append(finding)
    return list(groups.values())


# -- checks that did not judge -----------------------------------------------------------
# Needs whose skip means "not run" (netdoctor.checks.needs.need_probe: `--no-probe`, a
# snapshot), not "nothing to judge on this node": the traffic checks run only when asked.
_NOT_RUN_NEEDS = frozenset({"probe", "loopback"})


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


@record
class _Unjudged:
    """The checks that gave no verdict, by why: nothing to judge here, not run, could not judge."""

    nothing: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, report: Report) -> _Unjudged:
        needs: dict[str, set[object]] = {}
        for finding in report.findings:
            if finding.status is Status.SKIP:
                needs.setdefault(finding.check, set()).add(finding.evidence.get("need"))
        unjudged = cls()
        for outcome in report.checks:
            if outcome.status is Status.UNKNOWN:
                unjudged.unknown.append(outcome.check)
            elif outcome.status is Status.SKIP:
                not_run = bool(needs.get(outcome.check)) and needs[outcome.check] <= _NOT_RUN_NEEDS
                (unjudged.not_run if not_run else unjudged.nothing).append(outcome.check)
        return unjudged

    @property
    def skipped(self) -> int:
        return len(self.nothing) + len(self.not_run)

    def grade_note(self, report: Report) -> str:
        """`6 of 18 checks judged` for a pass where most checks did not judge (a bare PASS
        would claim more than was looked at; the fold line or -v says why); else ''."""
        total = len(report.checks)
        judged = total - self.skipped - len(self.unknown)
        if report.grade is not Grade.PASS or judged * 2 >= total:
            return ""
        return f"{judged} of {_plural(total, 'check')} judged"

    def fold_line(self) -> str:
        """One line for the wholly skipped checks: how many had nothing to judge, which were
        not run (few, and asked for: `--no-probe`); `-v` lists them with their reasons."""
        parts = [f"skipped: {_plural(len(self.nothing), 'check')}, nothing to judge on this node"] * bool(self.nothing)
        parts += [f"not run: {', '.join(map(safe_text, self.not_run))}"] * bool(self.not_run)
        return "; ".join(parts) + " (-v lists them)"


# -- rendering -------------------------------------------------------------------------
def _wrapped(text: str, width: int, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False, break_long_words=True) or [first.rstrip()]


def _header(report: Report, color: bool, width: int, judged: str) -> list[str]:
    """`host: GRADE   rules NAME   0.41 s   START TIME`, then `snapshot captured TIME: PATH`.
    A required check that --only/--skip left out, and how many checks judged (`judged`),
    are said on the grade line: a pass without them is not the pack's pass. The capture
    time comes before the path, so however long the path, it stays on the line of the word
    `captured`: where the header breaks depends on the width, never on where the snapshot is."""
    grade = str(report.grade)
    graded = f"{safe_text(report.host)}: {grade.upper()}"
    notes = []
    if report.required_not_run:
        notes.append(f"required check not run: {', '.join(map(safe_text, report.required_not_run))}")
    if judged:
        notes.append(judged)
    head = graded + (f" ({'; '.join(notes)})" if notes else "")
    lines = _wrapped(f"{head}   rules {safe_text(report.rules)}   {report.duration_s:.2f} s   {report.started_at}",
                     width, "", "  ")
    if lines[0].startswith(graded):   # a host name too long for one line is wrapped, and shown uncolored
        lines[0] = graded[:-len(grade)] + _paint(grade.upper(), grade, color) + lines[0][len(graded):]
    if report.snapshot:
        lines += _snapshot_lines(report, width)
    return lines


def _snapshot_lines(report: Report, width: int) -> list[str]:
    """`snapshot captured TIME: PATH` on one line where it fits; else the label, then the
    path on lines of its own (cut at the width: a path has no spaces to break at)."""
    label = f"snapshot captured {safe_text(report.captured_at)}:" if report.captured_at else "snapshot:"
    path = safe_text(report.snapshot or "")
    if len(label) + 1 + len(path) <= width:
        return [f"{label} {path}"]
    room = width - 2
    return _wrapped(label, width, "", "  ") + ["  " + path[start:start + room] for start in range(0, len(path), room)]


def render_text(report: Report, *, color: bool = False, width: int | None = None, verbose: bool = False) -> str:
    """The text report; `verbose` (the global `-v`) lists each skipped check instead of one line."""
    from netdoctor.report.render import probe_busbw

    width = terminal_width() if width is None else max(MIN_WIDTH, width)
    unjudged = _Unjudged.of(report)
    lines = _header(report, color, width, unjudged.grade_note(report))
    lines += _problems(report, color, width)
    lines += _check_lines(report, color, width, unjudged, verbose)

    busbw = probe_busbw(report.probe)
    if busbw is not None:
        lines.append("")
        lines.append(f"NCCL probe: bus bandwidth {busbw:g} GB/s")
    if report.grade is Grade.UNKNOWN and not any(outcome.required for outcome in report.checks
                                                 if outcome.status is Status.UNKNOWN):
        lines.append("")
        lines.append("grade unknown: the node could not be judged (see the findings above)")
    return "\n".join(lines) + "\n"


def _problems(report: Report, color: bool, width: int) -> list[str]:
    """The fail, unknown and warn findings, grouped, each group with its remedy."""
    groups = group_findings(report.findings)
    if not groups:
        return []
    check_width = max(len(safe_text(group.check)) for group in groups)
    subject_width = min(_SUBJECT_COLUMN_MAX, max(len(safe_text(group.subject())) for group in groups))
    lines = [""]
    for group in groups:
        status = str(group.status)
        notes = " (shadow)" * group.shadow + " (netdoctor internal error)" * group.internal
        subject = safe_text(group.subject())
        prefix = f"{status.ljust(_STATUS_WIDTH)}  {safe_text(group.check).ljust(check_width)}  "
        text = f"{subject.ljust(subject_width)}  {safe_text(group.fill(group.summary))}{notes}"
        block = _wrapped(text, width, prefix, _INDENT + "  ")
        block[0] = _paint(status, status, color, _STATUS_WIDTH) + block[0][_STATUS_WIDTH:]
        lines += block
        if group.remedy:
            for number, remedy in enumerate(group.remedies()):
                lead = _INDENT + ("remedy: " if number == 0 else " " * len("remedy: "))
                lines += _wrapped(safe_text(remedy), width, lead, _INDENT + " " * len("remedy: ") + "  ")
    return lines


def _check_lines(report: Report, color: bool, width: int, unjudged: _Unjudged, verbose: bool) -> list[str]:
    """One line per check (status and counts, or a skipped check's reason); two or more
    wholly skipped checks fold into one line unless `verbose`."""
    if not report.checks:
        return []
    counts: dict[str, Counter[Status]] = {}
    skip_reason: dict[str, str] = {}
    for finding in report.findings:
        counts.setdefault(finding.check, Counter())[finding.status] += 1
        if finding.status is Status.SKIP:
            skip_reason[finding.check] = finding.summary
    fold = not verbose and unjudged.skipped >= 2
    shown = [outcome for outcome in report.checks if not (fold and outcome.status is Status.SKIP)]
    id_width = max(len(safe_text(outcome.check)) for outcome in shown or report.checks)
    lines = [""]
    for outcome in shown:
        status = str(outcome.status)
        tally = counts.get(outcome.check, Counter())
        if outcome.status is Status.SKIP and sum(tally.values()) == 1 and skip_reason.get(outcome.check):
            text = safe_text(skip_reason[outcome.check])
        else:
            text = ", ".join(f"{tally[key]} {key}" for key in _COUNT_ORDER if tally[key])
        required = "  (required)" if outcome.required and outcome.status is Status.UNKNOWN else ""
        prefix = f"{safe_text(outcome.check).ljust(id_width)}  {status.ljust(_STATUS_WIDTH)}  "
        block = _wrapped(text + required, width, prefix, " " * len(prefix))
        block[0] = block[0][:id_width + 2] + _paint(status, status, color, _STATUS_WIDTH) + block[0][id_width + 2 + _STATUS_WIDTH:]
        lines += block
    if fold:
        lines += [_paint(line, "skip", color) for line in _wrapped(unjudged.fold_line(), width, "", "  ")]
    return lines
