"""`--format json`: the contract's report object (netdoctor.report/1), one object, nothing else."""

from __future__ import annotations

import json
from typing import Any

from netdoctor.report.model import Report


def _valid_text(value: Any) -> Any:
    """`value` with every string valid Unicode. A name read from sysfs with bytes that are not
    UTF-8 keeps them as lone surrogates (surrogateescape); JSON would carry them as `\\udcff`,
    which strict readers (jq, Go) refuse or replace: such a byte is spelled `\\xff`, as the text
    report spells it."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:      # a surrogate that is no escaped byte
            return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_valid_text(key): _valid_text(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_valid_text(item) for item in value]
    return value


def render_json(report: Report) -> str:
    """The report as one JSON object (plus the extra keys "checks", "netdoctor", "probe")."""
    return json.dumps(_valid_text(report.to_json()), indent=2, sort_keys=False, default=str) + "\n"
