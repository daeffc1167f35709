"""`--format text`: a compact table for a human at a terminal.

Grade first; then every fail, unknown and warn finding (status, check, subject,
summary, remedy); then one line per check with its status and counts, e.g.
`link-speed        fail     1 fail, 7 pass` (a wholly skipped check shows its reason).
"""

from __future__ import annotations

from collections import Counter

from netdoctor.report.model import STATUS_SEVERITY, Grade, Report, Status

_COLORS = {
    "pass": "\033[32m",      # green
    "warn": "\033[33m",      # yellow
    "fail": "\033[1;31m",    # bold red
    "unknown": "\033[35m",   # magenta
    "skip": "\033[2m",       # dim
}
_RESET = "\033[0m"
_COUNT_ORDER = (Status.FAIL, Status.UNKNOWN, Status.WARN, Status.PASS, Status.SKIP)


def _paint(text: str, status: str, color: bool, width: int = 0) -> str:
    padded = text.ljust(width)
    return f"{_COLORS[status]}{padded}{_RESET}" if color and status in _COLORS else padded


def render_text(report: Report, *, color: bool = False) -> str:
    from netdoctor.report.render import probe_busbw

    lines: list[str] = []
    grade = str(report.grade)
    head = f"{report.host}: {_paint(grade.upper(), grade, color)}"
    lines.append(f"{head}   rules {report.rules}   {report.duration_s:.2f} s   {report.started_at}")
    if report.snapshot:
        lines.append(f"snapshot: {report.snapshot}")

    # Skips are not problems: their reason goes on the check's own line below.
    notable = [finding for finding in report.findings if finding.status not in (Status.PASS, Status.SKIP)]
    notable.sort(key=lambda finding: -STATUS_SEVERITY[finding.status])  # stable: check order kept
    if notable:
        check_width = max(len(finding.check) for finding in notable)
        subject_width = max(len(finding.subject) for finding in notable)
        lines.append("")
        for finding in notable:
            status = str(finding.status)
            shadow = " (shadow)" if finding.shadow else ""
            lines.append(f"{_paint(status, status, color, 7)}  {finding.check.ljust(check_width)}  "
                         f"{finding.subject.ljust(subject_width)}  {finding.summary}{shadow}")
            if finding.remedy:
                lines.append(f"{' ' * (7 + 2 + check_width + 2 + subject_width + 2)}remedy: {finding.remedy}")

    if report.checks:
        counts: dict[str, Counter[Status]] = {}
        skip_reason: dict[str, str] = {}
        for finding in report.findings:
            counts.setdefault(finding.check, Counter())[finding.status] += 1
            if finding.status is Status.SKIP:
                skip_reason[finding.check] = finding.summary
        id_width = max(len(outcome.check) for outcome in report.checks)
        lines.append("")
        for outcome in report.checks:
            status = str(outcome.status)
            tally = counts.get(outcome.check, Counter())
            if outcome.status is Status.SKIP and sum(tally.values()) == 1 and skip_reason.get(outcome.check):
                text = skip_reason[outcome.check]
            else:
                text = ", ".join(f"{tally[key]} {key}" for key in _COUNT_ORDER if tally[key])
            required = "  (required)" if outcome.required and outcome.status is Status.UNKNOWN else ""
            lines.append(f"{outcome.check.ljust(id_width)}  {_paint(status, status, color, 7)}  {text}{required}")

    busbw = probe_busbw(report.probe)
    if busbw is not None:
        lines.append("")
        lines.append(f"NCCL probe: bus bandwidth {busbw:g} GB/s")
    if report.grade is Grade.UNKNOWN and not any(outcome.required for outcome in report.checks
                                                 if outcome.status is Status.UNKNOWN):
        lines.append("")
        lines.append("grade unknown: the node could not be judged (see the findings above)")
    return "\n".join(lines) + "\n"
