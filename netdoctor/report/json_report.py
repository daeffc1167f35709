"""`--format json`: the contract's report object (netdoctor.report/1), one object, nothing else."""

from __future__ import annotations

import json

from netdoctor.report.model import Report


def render_json(report: Report) -> str:
    """The report as one JSON object (plus the extra keys "checks", "netdoctor", "probe")."""
    return json.dumps(report.to_json(), indent=2, sort_keys=False, default=str) + "\n"
