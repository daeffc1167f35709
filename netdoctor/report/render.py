"""One findings list, several renderers; and the atomic `-o FILE` write."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from netdoctor.errors import UsageError
from netdoctor.host.files import atomic_write
from netdoctor.report.model import Report
from netdoctor.util import is_terminal

FORMATS = ("text", "json", "prometheus", "junit")


def render(report: Report, output_format: str, *, color: bool = False, terminal: bool = False,
           verbose: bool = False) -> str:
    """The report in `output_format` (one of FORMATS); `terminal`: for a person at one
    (colors where `color`, JSON indented); `verbose` (the global -v): the text lists each
    skipped check (the other formats always hold everything)."""
    if output_format == "text":
        from netdoctor.report.text import render_text
        return render_text(report, color=color, verbose=verbose)
    if output_format == "json":
        from netdoctor.report.json_report import render_json
        return render_json(report, pretty=terminal)
    if output_format == "prometheus":
        from netdoctor.report.prometheus import render_prometheus
        return render_prometheus(report)
    if output_format == "junit":
        from netdoctor.report.junit import render_junit
        return render_junit(report)
    raise UsageError(f"unknown output format {output_format!r}; choose one of {', '.join(FORMATS)}")


def use_color(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """ANSI colors only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    env = os.environ if environ is None else environ
    return "NO_COLOR" not in env and is_terminal(stream)


def write_report_file(path: Path, text: str, *, deadline: float | None = None) -> None:
    """Write the report atomically (mode 0644): node_exporter's textfile collector and
    monitoring readers must never see half a file. A FIFO's reader is waited for until
    `deadline` (monotonic); a path an attacker could have redirected is refused (exit 3)."""
    try:
        atomic_write(path, text, mode=0o644, deadline=deadline)
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from error


def emit(text: str, output: Path | None, stream: TextIO | None = None, *, deadline: float | None = None) -> None:
    """The report goes to `output` (atomically; stdout stays empty) or to stdout."""
    if output is not None:
        write_report_file(output, text, deadline=deadline)
        return
    target = stream if stream is not None else sys.stdout
    target.write(text)
    target.flush()


def probe_busbw(probe: Mapping[str, Any] | None) -> float | None:
    """The probe's bus bandwidth in GB/s, when the probe ran and measured one."""
    if not probe:
        return None
    for key in ("busbw_gbps", "nccl_busbw_gbps"):
        value = probe.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
