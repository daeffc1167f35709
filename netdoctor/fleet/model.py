"""Per-node summaries: the only thing the fleet view keeps of each node's report."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from netdoctor.fleet.domains import Domain, bounded_domain
from netdoctor.fleet.kept import (
    MAX_KEPT_CHARS,
    PROBE_KEYS,
    bounded_fabric,
    bounded_facts,
    bounded_versions,
    finite,
    kept_text,
    shown,
)
from netdoctor.fleet.metrics import counter_growth, worst_pre_fec_ber_log10
from netdoctor.fleet.platform import bounded_platform
from netdoctor.records import record
from netdoctor.report.model import STATUS_SEVERITY
from netdoctor.vocabulary import StrEnum

REPORT_SCHEMA_PREFIX = "netdoctor.report/"

# Metric names as they appear in the fleet report's `outliers`.
BUSBW_METRIC = "nccl_busbw_gbps"
ERROR_GROWTH_METRIC = "error_counter_growth"
PHY_BER_METRIC = "pre_fec_ber_log10"       # netdoctor.fleet.metrics says how it is derived

# The report's status order (fail > unknown > warn > pass > skip), keyed by plain str: a
# dict of exact-str keys takes CPython's fast lookup, which the summary loop does per finding.
_STATUS_SEVERITY = {str(status): severity for status, severity in STATUS_SEVERITY.items()}
_WARN_SEVERITY = _STATUS_SEVERITY["warn"]
_JUDGED_STATUSES = frozenset(_STATUS_SEVERITY) - {"pass"}   # what a finding that does not pass may say

# More check ids than any pack has is not a netdoctor report (and would widen every node's row
# of the HTML grid).
_MAX_CHECKS = 200
_MAX_CHECK_ID_CHARS = 64
# No bus bandwidth is above this (GB/s); beyond it a number is not a measurement.
_MAX_BUSBW_GBPS = 1e6
# The checks whose findings' evidence gives the fleet a number (netdoctor.fleet.metrics).
_ERROR_COUNTERS, _PHY = "error-counters", "phy"
METRIC_CHECKS = (_ERROR_COUNTERS, _PHY)   # a tuple: `in` compares, so a check id that is a list is no error


class NodeGrade(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"
    UNREACHABLE = "unreachable"   # no answer: timeout, ssh failure, empty output
    INVALID = "invalid"           # answered, but not with a netdoctor report

    @property
    def severity(self) -> int:
        return _GRADE_SEVERITY[self]


# Worst first when sorting. A node that did not answer cannot take a job either.
_GRADE_SEVERITY = {
    NodeGrade.FAIL: 6,
    NodeGrade.UNREACHABLE: 5,
    NodeGrade.INVALID: 4,
    NodeGrade.UNKNOWN: 3,
    NodeGrade.WARN: 2,
    NodeGrade.PASS: 1,
}



def grade_severity(grade: object) -> int:
    """The severity of a grade given as text (a saved report's, a change's); 0 for anything else."""
    return _GRADE_SEVERITY.get(grade, 0) if isinstance(grade, str) else 0   # type: ignore[call-overload]


GRADE_ORDER = (
    NodeGrade.PASS,
    NodeGrade.WARN,
    NodeGrade.FAIL,
    NodeGrade.UNKNOWN,
    NodeGrade.UNREACHABLE,
    NodeGrade.INVALID,
)


# One compute rail of a node's report (`fabric.rails`) with its first-hop switch (the report's
# `neighbors`): (port, rate in Gb/s, nearest GPU, switch GUID, switch name). A plain tuple:
# ten thousand nodes make 80,000 of them.
Rail = tuple[str, float | None, int | None, str | None, str | None]


@record(frozen=True, slots=True)
class TopFinding:
    """The node's worst finding (or, for unreachable/invalid nodes, why there is no report)."""

    summary: str
    check: str | None = None
    subject: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.check is not None:
            data["check"] = self.check
        if self.subject is not None:
            data["subject"] = self.subject
        data["summary"] = self.summary
        return data

    def describe(self) -> str:
        where = " ".join(part for part in (self.check, self.subject) if part)
        return f"{where}: {self.summary}" if where else self.summary


# One report of a sender that gave several (or named another host): where it came from, the
# grade it gave itself and its top finding (CONTRACT 6.4: no second report hides a first).
SenderReport = tuple[str, NodeGrade, TopFinding | None]


@record(frozen=True, slots=True)
class NodeSummary:
    """What the fleet keeps of one node: grade, top finding, per-check status, metrics.

    `check_statuses` maps check id -> the worst status of that check on the node;
    `check_summaries` holds the first non-pass summary of each check (for the HTML
    tooltips); `metrics` holds numbers compared across the fleet.
    """

    host: str
    grade: NodeGrade
    top: TopFinding | None = None
    check_statuses: Mapping[str, str] = field(default_factory=dict)
    check_summaries: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    source: str = ""
    # The `host` the report names where that is not the sender (an alias, an FQDN).
    reported_host: str | None = None
    # How many more findings of the node are warn or worse, besides the top one.
    other_findings: int = 0
    # The report's `fabric`: GPU count and compute rails (`fleet probe`'s expectation, the
    # rail wiring's ports); and a probe-node report's `probe` (its part of a group's
    # measurement), bounded as read (`bounded_facts`).
    gpus: int | None = None
    rails: tuple[Rail, ...] = ()
    rails_guessed: bool = False   # `fabric.rails_guessed`: a rail's nearest GPU was a guess, wiring not judged
    platform: tuple[str, int | None] | None = None   # `fabric.product`, `.gpus_on_bus` (fleet.platform)
    nvlink_domain: Domain | None = None   # `fabric.nvlink_domain`: cluster UUID, clique, chassis, tray (fleet.domains)
    probe: Mapping[str, Any] = field(default_factory=dict)
    # The fleet judged against itself: the report's `versions` (CONTRACT 6.3; its
    # `neighbors` are in `rails`), and its warn-or-worse findings (check, subject, status, summary) for `--since`.
    versions: Mapping[str, Any] = field(default_factory=dict)
    findings: tuple[tuple[str, str | None, str, str], ...] = ()
    reports: tuple[SenderReport, ...] = ()   # an `invalid` sender's own reports, each with its verdict

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "host": self.host,
            "grade": str(self.grade),
            "top": self.top.to_json() if self.top else None,
        }
        if self.reported_host is not None:
            data["reported_host"] = self.reported_host
        if self.other_findings:
            data["other_findings"] = self.other_findings
        if self.check_statuses:
            data["checks"] = dict(self.check_statuses)
        if self.metrics:
            data["metrics"] = dict(self.metrics)
        if self.versions:
            data["versions"] = dict(self.versions)   # (nodes alike may share one: `fleet.wire`)
        if self.findings:
            data["findings"] = [finding_json(finding) for finding in self.findings]
        if self.reports:
            data["reports"] = [{**({"file": source} if source else {}), "grade": str(grade),
                                "top": top.to_json() if top else None} for source, grade, top in self.reports]
        return data

    def headline(self) -> str:
        """The top finding, and how many more there are, on one line."""
        if self.top is None:
            return ""
        others = self.other_findings
        more = f" (and {others} other finding{'s' if others != 1 else ''})" if others else ""
        return self.top.describe() + more

    def label(self) -> str:
        """The sender's name, with the name its report gave where that differs."""
        return f"{self.host} (reports as {self.reported_host})" if self.reported_host is not None else self.host


def no_report(host: str, grade: NodeGrade, reason: str, source: str = "") -> NodeSummary:
    return NodeSummary(host=host, grade=grade, top=TopFinding(summary=reason), source=source)


def summarize_report(data: Any, source: str = "", host_hint: str | None = None) -> NodeSummary:
    """Reduce one parsed `netdoctor.report/1` object to a `NodeSummary`.

    Anything that is not such a report becomes an `invalid` summary saying why, under
    `host_hint` (the pdsh host or file name) when the object names no host.
    """
    if not isinstance(data, dict):
        return no_report(host_hint or "?", NodeGrade.INVALID, f"not a netdoctor report: JSON {type(data).__name__}", source)
    reported_host = data.get("host")
    named = reported_host[:MAX_KEPT_CHARS] if isinstance(reported_host, str) and reported_host else None
    host = host_hint or named or "?"
    alias = named if named is not None and named != host else None
    schema = data.get("schema")
    if not isinstance(schema, str) or not schema.startswith(REPORT_SCHEMA_PREFIX):
        return no_report(host, NodeGrade.INVALID, f"not a netdoctor report: schema {shown(schema)}", source)
    try:
        grade = NodeGrade(data.get("grade"))
    except ValueError:
        return no_report(host, NodeGrade.INVALID, f"report has no valid grade: {shown(data.get('grade'))}", source)
    if grade in (NodeGrade.UNREACHABLE, NodeGrade.INVALID):
        return no_report(host, NodeGrade.INVALID, f"report has no valid grade: {shown(data.get('grade'))}", source)
    findings = data.get("findings")
    if not isinstance(findings, list):
        return no_report(host, NodeGrade.INVALID, "report has no findings list", source)

    # The report lists its checks in the engine's order (the contract's, then third-party
    # ones): ties of the top finding go by it, and the fleet's columns follow it.
    check_statuses: dict[str, str] = {}
    required: set[str] = set()
    checks = data.get("checks")
    intern = sys.intern
    for outcome in checks if checks.__class__ is list else ():
        if outcome.__class__ is dict and outcome.get("check").__class__ is str \
                and outcome.get("status").__class__ is str and outcome["status"] in _STATUS_SEVERITY:
            check_statuses[intern(outcome["check"])] = intern(outcome["status"])
            if outcome.get("required") is True:
                required.add(outcome["check"])
    positions = {check: position for position, check in enumerate(check_statuses)}
    check_summaries: dict[str, str] = {}
    # The top finding is the best ranked non-pass, non-shadow one (`_top_rank`); the
    # first in report order among equals.
    top: dict[str, Any] | None = None
    top_rank: tuple[int, int, int, str] | None = None
    grade_status = str(grade)
    flagged = 0
    kept_findings: list[tuple[str, str | None, str, str]] = []
    # Two looks at each finding: a check's status is the worst of its outcome and its non-shadow
    # findings, whatever their order, so the passes (nearly every finding of a healthy fleet)
    # are taken as a set of checks in one comprehension; the rest, with the findings of the
    # checks that give metrics (shadow ones too: measurements, not verdicts), in another.
    # (Findings decoded typed, `netdoctor.fleet.typed`, are split alike by their own code: the
    # findings that do not pass, and those of the metric checks apart.)
    split = getattr(data, "summary_split", None)
    if split is not None:
        passed, rest, measured = split(findings, _JUDGED_STATUSES)
    else:
        passed = _passed(findings)
        rest = measured = [finding for finding in findings if finding.__class__ is dict
                           and (finding.get("status") != "pass" or finding.get("check") in METRIC_CHECKS)]
    for check in passed:
        if check_statuses.get(check) in (None, "skip"):
            check_statuses[intern(check)] = "pass"
    for finding in rest:
        check = finding.get("check")
        status = finding.get("status")
        if check.__class__ is not str or status.__class__ is not str or status not in _STATUS_SEVERITY \
                or status == "pass" or finding.get("shadow"):
            continue
        known = check_statuses.get(check)
        severity = _STATUS_SEVERITY[status]
        if known is None or severity > _STATUS_SEVERITY[known]:
            # Interned: ten thousand nodes share one copy of each check id and status.
            check_statuses[intern(check)] = intern(status)
        if severity >= _WARN_SEVERITY:
            flagged += 1
            summary = kept_text(finding.get("summary") or "")[:_MAX_FINDING_CHARS]
            if len(kept_findings) < _MAX_KEPT_FINDINGS:
                subject = finding.get("subject")
                kept_findings.append((intern(check), kept_text(subject)[:_MAX_ID_CHARS] if subject is not None else None,
                                      intern(status), summary))
            if check not in check_summaries:
                check_summaries[intern(check)] = summary
            rank = _top_rank(check, status, severity, grade_status, required, positions)
            if top_rank is None or rank < top_rank:
                top, top_rank = finding, rank
    if len(check_statuses) > _MAX_CHECKS or max(map(len, check_statuses), default=0) > _MAX_CHECK_ID_CHARS:
        return no_report(host, NodeGrade.INVALID, f"not a netdoctor report: more than {_MAX_CHECKS} check ids, or one"
                         f" longer than {_MAX_CHECK_ID_CHARS} characters", source)
    top_finding: TopFinding | None = None
    if top is not None and grade is not NodeGrade.PASS:
        top_finding = TopFinding(
            summary=kept_text(top.get("summary") or top.get("status")),
            check=kept_text(top["check"]),
            subject=kept_text(top.get("subject")) if top.get("subject") is not None else None,
        )
    metrics: dict[str, float] = {}
    worst_ber = worst_pre_fec_ber_log10([finding for finding in measured if finding.get("check") == _PHY])
    if worst_ber is not None:
        metrics[PHY_BER_METRIC] = worst_ber
    probe = data.get("probe")
    if isinstance(probe, dict):
        busbw = probe.get("busbw_gbps")
        if isinstance(busbw, (int, float)) and not isinstance(busbw, bool):
            if not finite(busbw) or not 0 <= busbw <= _MAX_BUSBW_GBPS:
                return no_report(host, NodeGrade.INVALID, "report's probe busbw_gbps is not a bus bandwidth: "
                                 f"{shown(busbw)[:40]}", source)
            metrics[BUSBW_METRIC] = float(busbw)
    # (`counter_growth` looks each status up: one that is a list or an object is no status.)
    counters = [finding for finding in measured
                if finding.get("check") == _ERROR_COUNTERS and finding.get("status").__class__ not in (list, dict)]
    error_growth = counter_growth(counters, _STATUS_SEVERITY)
    if error_growth is not None:
        if not math.isfinite(error_growth):
            return no_report(host, NodeGrade.INVALID, "report's error counter growth is not a finite number", source)
        metrics[ERROR_GROWTH_METRIC] = error_growth
    return NodeSummary(
        host=host,
        grade=grade,
        top=top_finding,
        check_statuses=check_statuses,
        check_summaries=check_summaries,
        metrics=metrics,
        source=source,
        reported_host=alias,
        other_findings=flagged - 1 if top_finding is not None else 0,
        **bounded_fabric(data.get("fabric"), data.get("neighbors")), platform=bounded_platform(data.get("fabric")),
        nvlink_domain=bounded_domain(data.get("fabric")),
        probe=bounded_facts(probe, PROBE_KEYS),
        versions=bounded_versions(data.get("versions")),
        findings=tuple(kept_findings),
    )


_MAX_ID_CHARS = 128
_MAX_FINDING_CHARS = 200
_MAX_KEPT_FINDINGS = 32


def finding_json(finding: tuple[str, str | None, str, str]) -> dict[str, Any]:
    check, subject, status, summary = finding
    return {"check": check, "subject": subject, "status": status, "summary": summary}


def _passed(findings: list[Any]) -> set[str]:
    """The checks of the report's non-shadow findings that pass."""
    try:
        passed = {finding.get("check") for finding in findings
                  if finding.__class__ is dict and finding.get("status") == "pass" and not finding.get("shadow")}
    except TypeError:                  # a check id that is a list or an object
        passed = {finding.get("check") for finding in findings if finding.__class__ is dict
                  and finding.get("check").__class__ is str and finding.get("status") == "pass" and not finding.get("shadow")}
    passed.discard(None)
    return passed if all(check.__class__ is str for check in passed) else {check for check in passed if check.__class__ is str}

def _top_rank(check: str, status: str, severity: int, grade: str, required: set[str],
              positions: Mapping[str, int]) -> tuple[int, int, int, str]:
    """Sort key of a candidate top finding (non-pass, non-shadow), best first.

    First the findings that explain the grade: status equal to it, and for `unknown` a
    check the pack requires (any unknown when the report lists no required checks: a
    non-required unknown does not set the grade). Then, should a report's findings not
    explain its grade, the worst status. Ties: the contract's check order, then others
    alphabetically; the caller keeps the first in report order among equals.
    """
    explains_grade = status == grade and (status != "unknown" or not required or check in required)
    return (0 if explains_grade else 1, -severity, positions.get(check, len(positions)), check)
