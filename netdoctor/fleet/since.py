"""`fleet report --since PREVIOUS`: what changed since an earlier fleet report.

What an on-call engineer reads first in the morning: the nodes whose grade changed (worst
now first), the warn-or-worse findings that are new and those that cleared, the versions
that changed, the nodes that appeared or are gone. PREVIOUS is a `netdoctor.fleet/1` JSON
file, or a directory of them (the newest by its own `generated_at` is taken). Reports
written before nodes carried `findings` and `versions` give grade changes only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from netdoctor.errors import UsageError
from netdoctor.fleet.model import NodeGrade, finding_json, grade_severity
from netdoctor.fleet.report import FLEET_SCHEMA, FleetReport
from netdoctor.host.files import read_prefix
from netdoctor.util import natural_key

MAX_PREVIOUS_BYTES = 512 * 1024 * 1024
# A directory's files are looked at newest first (by modification time), this many at most.
MAX_CANDIDATES = 64
_FINDING_KEYS = ("check", "subject", "status", "summary")


def load_previous(path: Path) -> tuple[dict[str, Any], str]:
    """(the earlier fleet report, the file it came from); UsageError when there is none."""
    if path.is_dir():
        files = sorted((entry for entry in os.scandir(path) if entry.name.endswith(".json") and entry.is_file()),
                       key=lambda entry: entry.stat().st_mtime, reverse=True)[:MAX_CANDIDATES]
        # One report in memory at a time: only each one's time is kept, the newest read again.
        stamped = [(_stamp(report), entry.path) for entry in files if (report := _read(Path(entry.path), quiet=True))]
        if not stamped:
            raise UsageError(f"--since {path}: no {FLEET_SCHEMA} JSON file in the directory")
        newest = max(stamped)[1]
        report = _read(Path(newest), quiet=False)
        assert report is not None
        return report, newest
    report = _read(path, quiet=False)
    assert report is not None
    return report, str(path)


def _stamp(report: dict[str, Any]) -> str:
    """The report's own time, for picking the newest; one that gives none counts as oldest."""
    stamp = report.get("generated_at")
    return stamp if isinstance(stamp, str) else ""


def _read(path: Path, *, quiet: bool) -> dict[str, Any] | None:
    try:
        data, cut = read_prefix(path, MAX_PREVIOUS_BYTES)
        if cut:
            raise UsageError(f"--since {path}: larger than {MAX_PREVIOUS_BYTES >> 20} MiB")
        report = json.loads(data)
    except (OSError, ValueError, UsageError) as error:
        if quiet:
            return None
        raise UsageError(f"--since {path}: not readable as a fleet report: {error}") from error
    if not isinstance(report, dict) or report.get("schema") != FLEET_SCHEMA or not isinstance(report.get("nodes"), list):
        if quiet:
            return None
        raise UsageError(f"--since {path}: not a {FLEET_SCHEMA} report")
    return report


def _flat_versions(versions: Any) -> dict[str, str]:
    flat: dict[str, str] = {}
    for kind, value in versions.items() if isinstance(versions, dict) else ():
        if isinstance(value, str):
            flat[str(kind)] = value
        elif isinstance(value, dict):
            flat.update({f"{kind} {model}": version for model, version in value.items() if isinstance(version, str)})
    return flat


def _finding_key(finding: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(finding.get("check")), str(finding.get("subject")), str(finding.get("status")))


def changes_since(report: FleetReport, previous: dict[str, Any], source: str) -> dict[str, Any]:
    """The `changes` section of `report` against `previous` (a parsed fleet JSON)."""
    before = {str(node["host"]): node for node in previous["nodes"] if isinstance(node, dict) and "host" in node}
    now = {node.host: node for node in report.nodes}
    # Before this version nodes carried no findings or versions: only grades compare.
    detailed = "drift" in previous
    grades, new, cleared, versions = [], [], [], []
    for host in sorted(now.keys() & before.keys(), key=natural_key):
        node, old = now[host], before[host]
        if str(old.get("grade")) != str(node.grade):
            grades.append({"host": host, "was": str(old.get("grade")), "now": str(node.grade)})
        if not detailed or not _has_report(str(node.grade)) or not _has_report(str(old.get("grade"))):
            continue
        new += _finding_changes(host, [finding_json(finding) for finding in node.findings], old.get("findings"))
        cleared += _finding_changes(host, old.get("findings"), [finding_json(finding) for finding in node.findings])
        if node.versions and old.get("versions"):
            was, current = _flat_versions(old.get("versions")), _flat_versions(node.versions)
            versions += [{"host": host, "what": what, "was": was.get(what), "now": current.get(what)}
                         for what in sorted(was.keys() | current.keys()) if was.get(what) != current.get(what)]
    grades.sort(key=lambda change: (-grade_severity(change["now"]), natural_key(change["host"])))
    return {"previous": {"source": source, "generated_at": _stamp(previous) or None, "nodes": len(before)},
            "grades": grades, "new_findings": new, "cleared_findings": cleared, "versions": versions,
            "new_nodes": sorted(now.keys() - before.keys(), key=natural_key),
            "gone_nodes": sorted(before.keys() - now.keys(), key=natural_key)}


def _has_report(grade: str) -> bool:
    """Did the node answer with a report (an unreachable node's findings are not 'cleared')?"""
    return grade not in (NodeGrade.UNREACHABLE, NodeGrade.INVALID)


def _finding_changes(host: str, findings: Any, others: Any) -> list[dict[str, Any]]:
    """The findings of `findings` that `others` does not have (same check, subject and status)."""
    known = {_finding_key(finding) for finding in _findings(others)}
    return [{"host": host, **{key: finding.get(key) for key in _FINDING_KEYS}}
            for finding in _findings(findings) if _finding_key(finding) not in known]


def _findings(findings: Any) -> Iterable[dict[str, Any]]:
    return [finding for finding in findings if isinstance(finding, dict)] if isinstance(findings, list) else []
