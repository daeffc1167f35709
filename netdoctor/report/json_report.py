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


# srun splits a labelled output line longer than 1024 bytes into two lines (seen with
# Slurm 23.11): a JSON report printed for a parallel shell keeps its lines shorter.
LINE_CHARS = 1000
_ENCODER = json.JSONEncoder(default=str)


def render_json(report: Report, *, pretty: bool = False) -> str:
    """The report as one JSON object (plus the extra keys "checks", "netdoctor", "probe").

    `pretty`: indented, for a person at a terminal. Otherwise in `short_lines`: what a fleet
    sweep carries from every node (10,000 of them read in 1.42 s where the indented form
    takes 2.0 s, benchmarks/results/fleet.md)."""
    data = _valid_text(report.to_json())
    return json.dumps(data, indent=2, default=str) + "\n" if pretty else short_lines(data)


def short_lines(data: dict[str, Any]) -> str:
    """`data` as compact JSON broken between tokens into lines of at most `LINE_CHARS`
    characters (one longer token, a very long string, stays whole), the closing brace
    alone on the last line: the end of the object as the fleet reader finds it."""
    lines: list[str] = []
    line: list[str] = []
    width = 0
    chunks = list(_ENCODER.iterencode(data))
    for chunk in chunks[:-1]:
        if width + len(chunk) > LINE_CHARS and line:
            lines.append("".join(line))
            line, width = [], 0
        line.append(chunk)
        width += len(chunk)
    lines.append("".join(line))
    lines.append(chunks[-1])
    return "\n".join(lines) + "\n"
