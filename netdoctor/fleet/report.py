"""The `netdoctor.fleet/1` report: counts, nodes worst first, failing checks, outliers, version
drift, rail wiring and NVLink domains."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any

from netdoctor.fleet.domains import find_domains
from netdoctor.fleet.drift import drifted, find_drift
from netdoctor.fleet.model import GRADE_ORDER, NodeGrade, NodeSummary
from netdoctor.fleet.outliers import DEFAULT_THRESHOLD, Outlier, find_outliers
from netdoctor.fleet.rails import RailThresholds, find_rails
from netdoctor.records import record
from netdoctor.util import natural_key, utc_now_iso

FLEET_SCHEMA = "netdoctor.fleet/1"
# The most check columns the fleet shows (engineering default): five times the checks netdoctor
# has, room for third-party ones.
MAX_COLUMNS = 100


@record(frozen=True)
class CheckTally:
    check: str
    fail: int
    unknown: int
    warn: int

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "fail": self.fail, "unknown": self.unknown, "warn": self.warn}


@record
class FleetReport:
    generated_at: str
    nodes: list[NodeSummary]
    outliers: list[Outlier]
    outlier_threshold: float
    checks: list[str] = field(default_factory=list)
    # `fleet probe`'s pairs, suspects and rounds (CONTRACT 6.3); empty in a sweep or report.
    probe: dict[str, Any] = field(default_factory=lambda: {"pairs": [], "suspects": []})
    # The fleet judged against itself (CONTRACT 6.3): version drift per kind and like
    # hardware, and rail wiring per leaf switch (netdoctor.fleet.drift / .rails).
    drift: list[dict[str, Any]] = field(default_factory=list)
    rails: list[dict[str, Any]] = field(default_factory=list)
    # NVLink domains (CONTRACT 8): per cluster UUID its clique and the nodes in another, and
    # each chassis whose trays are in several domains (netdoctor.fleet.domains).
    nvlink_domains: list[dict[str, Any]] = field(default_factory=list)
    # `fleet report --since`: what changed against an earlier fleet report (netdoctor.fleet.since).
    changes: dict[str, Any] | None = None

    @property
    def counts(self) -> dict[str, int]:
        tally = Counter(node.grade for node in self.nodes)
        return {str(grade): tally.get(grade, 0) for grade in GRADE_ORDER}

    def check_tallies(self) -> list[CheckTally]:
        """Checks with any non-pass status, the most failing first."""
        fails: Counter[str] = Counter()
        unknowns: Counter[str] = Counter()
        warns: Counter[str] = Counter()
        for node in self.nodes:
            for check, status in node.check_statuses.items():
                if status == "fail":
                    fails[check] += 1
                elif status == "unknown":
                    unknowns[check] += 1
                elif status == "warn":
                    warns[check] += 1
        checks = set(fails) | set(unknowns) | set(warns)
        tallies = [CheckTally(check, fails[check], unknowns[check], warns[check]) for check in checks]
        tallies.sort(key=lambda tally: (-tally.fail, -tally.unknown, -tally.warn, tally.check))
        return tallies

    @property
    def exit_code(self) -> int:
        """0 all pass; 1 any warn, outlier, version drift, miswired rail or node in another NVLink
        domain or clique than its own; 3 any unknown; 2 any fail, unreachable or invalid.

        The order follows the node grade rule (fail > unknown > warn > pass): a node that
        did not answer or answered garbage cannot be trusted with a job, like a failing one. An
        `invalid` sender's own reports count too: a second report never makes the code better
        than the worst verdict a sender gave itself.
        """
        grades = {node.grade for node in self.nodes} | {grade for node in self.nodes for _, grade, _ in node.reports}
        if grades & {NodeGrade.FAIL, NodeGrade.UNREACHABLE, NodeGrade.INVALID}:
            return 2
        if NodeGrade.UNKNOWN in grades:
            return 3
        if (NodeGrade.WARN in grades or self.outliers or drifted(self.drift) or any(leaf["odd"] for leaf in self.rails)
                or any(domain["odd"] for domain in self.nvlink_domains)):
            return 1
        return 0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": FLEET_SCHEMA,
            "generated_at": self.generated_at,
            "counts": self.counts,
            "nodes": [node.to_json() for node in self.nodes],
            "checks": [tally.to_json() for tally in self.check_tallies()],
            "outliers": [outlier.to_json() for outlier in self.outliers],
            "outlier_threshold": self.outlier_threshold,
            "probe": self.probe,
            "drift": self.drift,
            "rails": self.rails,
            "nvlink_domains": self.nvlink_domains,
            **({"changes": self.changes} if self.changes is not None else {}),
        }


def build_fleet_report(
    nodes: Iterable[NodeSummary],
    outlier_threshold: float = DEFAULT_THRESHOLD,
    generated_at: str | None = None,
    minimum_versions: Mapping[str, str] | None = None,
    rail_thresholds: RailThresholds = RailThresholds(),
) -> FleetReport:
    # (The name last: `n01` and `n1` are alike in the natural order, and the nodes come in no fixed order.)
    ordered = sorted(nodes, key=lambda node: (-node.grade.severity, natural_key(node.host), node.host))
    # Columns in the order the nodes' reports list their checks (the engine's: the
    # contract's, then third-party ones), each at the earliest place any node gives it.
    earliest: dict[str, int] = {}
    for node in ordered:
        for position, check in enumerate(node.check_statuses):
            if check not in earliest or position < earliest[check]:
                earliest[check] = position
    checks = sorted(earliest, key=lambda check: (earliest[check], check))
    if len(checks) > MAX_COLUMNS:
        # Check ids no pack has (nodes each naming their own) would make the node x check grid
        # quadratic: the columns are the ones most nodes give, in the same order.
        given = Counter(check for node in ordered for check in node.check_statuses)
        kept = set(sorted(checks, key=lambda check: (-given[check], earliest[check], check))[:MAX_COLUMNS])
        checks = [check for check in checks if check in kept]
    return FleetReport(
        generated_at=generated_at or utc_now_iso(),
        nodes=ordered,
        outliers=find_outliers(ordered, threshold=outlier_threshold),
        outlier_threshold=outlier_threshold,
        checks=checks,
        drift=find_drift(ordered, minimum_versions),
        rails=find_rails(ordered, rail_thresholds),
        nvlink_domains=find_domains(ordered),
    )
