"""Findings, statuses and the graded report: the vocabulary every layer above checks shares."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from netdoctor.records import record
from netdoctor.vocabulary import StrEnum


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"
    SKIP = "skip"


class Grade(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self]


_EXIT_CODES = {Grade.PASS: 0, Grade.WARN: 1, Grade.FAIL: 2, Grade.UNKNOWN: 3}

# Display/sort order, worst first. `unknown` sits between fail and warn as in the grade rule.
STATUS_SEVERITY = {Status.FAIL: 4, Status.UNKNOWN: 3, Status.WARN: 2, Status.PASS: 1, Status.SKIP: 0}


@record(frozen=True)
class Finding:
    """One judgement of one subject by one check.

    `subject` is the name an operator types: `mlx5_3:1`, `GPU3`, `ens1f0np0`, a PCI
    address, or `node`. `evidence` holds the measured facts (JSON-serialisable) apart
    from the sentence for humans. `rule` names the rule-pack setting that decided the
    status (used for shadow mode); `shadow` findings never change the grade.
    `internal` marks a finding that exists because netdoctor itself failed (a check or
    plugin raised, a plugin did not load): "could not judge" is not a verdict on the node.
    """

    check: str
    status: Status
    subject: str
    summary: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    remedy: str | None = None
    rule: str | None = None
    shadow: bool = False
    internal: bool = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "check": self.check,
            "status": str(self.status),
            "subject": self.subject,
            "summary": self.summary,
            "evidence": self.evidence,
        }
        if self.remedy:
            data["remedy"] = self.remedy
        if self.rule:
            data["rule"] = self.rule
        if self.shadow:
            data["shadow"] = True
        if self.internal:
            data["internal"] = True
        return data


def grade_of(findings: list[Finding], required_checks: frozenset[str] | set[str]) -> Grade:
    """The node grade: fail > unknown (of a required check) > warn > pass. Shadow findings never count."""
    grade = Grade.PASS
    for finding in findings:
        if finding.shadow:
            continue
        if finding.status is Status.FAIL:
            return Grade.FAIL
        if finding.status is Status.UNKNOWN and finding.check in required_checks:
            grade = Grade.UNKNOWN
        elif finding.status is Status.WARN and grade is Grade.PASS:
            grade = Grade.WARN
    return grade


@record(frozen=True)
class CheckOutcome:
    """How one check ran: its worst status, how long it took, whether the pack requires it."""

    check: str
    status: Status
    duration_s: float
    required: bool
    error: str | None = None


@record(frozen=True)
class MetricSample:
    """One measured value for dashboards (`--format prometheus`): a metric family's name, its
    bounded labels (device, port, lane, counter; never a sentence) and the value in the
    family's unit. Made by netdoctor.checks.metrics from the inventory and counter history."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@record
class Report:
    host: str
    grade: Grade
    started_at: str
    duration_s: float
    rules: str
    findings: list[Finding]
    checks: list[CheckOutcome] = field(default_factory=list)
    probe: dict[str, Any] | None = None
    netdoctor_version: str = ""
    snapshot: str | None = None
    captured_at: str | None = None           # a snapshot's own capture time (snapshot.json)
    required_not_run: tuple[str, ...] = ()   # checks the pack requires that --only/--skip left out
    versions: dict[str, Any] = field(default_factory=dict)   # CONTRACT 6.3: what the node runs
    neighbors: dict[str, Any] = field(default_factory=dict)  # CONTRACT 6.3: port -> its first-hop switch
    # GPUs and compute rails (port, Gb/s): what `fleet probe` expects a node's traffic to reach.
    fabric: dict[str, Any] = field(default_factory=dict)
    # Port rates, counters, module readings, NVLink errors (netdoctor.checks.metrics): the
    # Prometheus output's values; not in the JSON, whose findings carry the judged facts.
    metrics: tuple[MetricSample, ...] = ()

    SCHEMA = "netdoctor.report/1"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": self.SCHEMA,
            "host": self.host,
            "grade": str(self.grade),
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "rules": self.rules,
            "findings": [finding.to_json() for finding in self.findings],
            "checks": [
                {
                    "check": outcome.check,
                    "status": str(outcome.status),
                    "duration_s": round(outcome.duration_s, 4),
                    "required": outcome.required,
                    **({"error": outcome.error} if outcome.error else {}),
                }
                for outcome in self.checks
            ],
            "netdoctor": self.netdoctor_version,
        }
        if self.probe is not None:
            data["probe"] = self.probe
        if self.snapshot:
            data["snapshot"] = self.snapshot
        if self.captured_at:
            data["snapshot_captured_at"] = self.captured_at
        if self.required_not_run:
            data["required_not_run"] = list(self.required_not_run)
        if self.versions:
            data["versions"] = self.versions
        if self.neighbors:
            data["neighbors"] = self.neighbors
        if self.fabric:
            data["fabric"] = self.fabric
        return data
