"""structlog setup: logs go to stderr only, so stdout carries nothing but the report.

Human-readable lines (ConsoleRenderer) by default, colored only on a TTY; one JSON
object per line with `--log-json` (for journald / log shippers). Verbosity: warnings by
default, `-v` info, `-vv` debug, `-q` errors only, `-qq` critical only.
"""

from __future__ import annotations

import logging as stdlib_logging
import os
import sys
from typing import TextIO

from netdoctor.util import import_without_rich, is_terminal

# netdoctor logs one line per event: structlog's rich tracebacks are not needed.
structlog = import_without_rich("structlog")

_LEVELS = [
    stdlib_logging.CRITICAL,
    stdlib_logging.ERROR,
    stdlib_logging.WARNING,
    stdlib_logging.INFO,
    stdlib_logging.DEBUG,
]
_DEFAULT_INDEX = 2  # WARNING


def level_for(verbose: int, quiet: int) -> int:
    """The stdlib level number for `-v` / `-q` counts (clamped to the known levels)."""
    index = min(max(_DEFAULT_INDEX + verbose - quiet, 0), len(_LEVELS) - 1)
    return _LEVELS[index]


def configure_logging(verbose: int = 0, quiet: int = 0, *, json_logs: bool = False,
                      stream: TextIO | None = None) -> None:
    """Route every structlog logger to `stream` (default: the current sys.stderr).

    Called at the start of every CLI run; structlog's own default would print to
    stdout, which would corrupt `--format json` output.
    """
    output: TextIO = stream if stream is not None else _CurrentStderr()  # type: ignore[assignment]
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json_logs:
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        colors = is_terminal(output) and "NO_COLOR" not in os.environ
        processors.append(structlog.dev.ConsoleRenderer(colors=colors))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level_for(verbose, quiet)),
        logger_factory=structlog.PrintLoggerFactory(file=output),
        # Not cached: tests and repeated CLI runs in one process reconfigure the stream.
        cache_logger_on_first_use=False,
    )


class _CurrentStderr:
    """Whatever sys.stderr is at write time: test runners and embedders swap it (and close
    the old one), and a logger bound to a closed stream would crash the run."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()

