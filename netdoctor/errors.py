"""Error types. Every error netdoctor raises on purpose carries enough context to act on.

The CLI turns any `NetdoctorError` into a one-line message on stderr and exit code 3;
anything else is an internal error (also exit 3, with the traceback only under --debug).
"""

from __future__ import annotations


class NetdoctorError(Exception):
    """Base of all expected errors (bad input, unreadable snapshot, bad usage)."""


class UsageError(NetdoctorError):
    """The command line or a configuration file asks for something impossible."""


class SnapshotError(NetdoctorError):
    """A snapshot cannot be read or written safely (bad JSON, hostile archive, ...)."""


class RulesError(NetdoctorError):
    """A rule pack or site override is malformed or names an unknown setting."""


class PluginError(NetdoctorError):
    """A check plugin cannot be loaded (bad file, unsafe permissions, duplicate id)."""


class ParseError(NetdoctorError):
    """Tool output whose format is not recognised.

    `source` names the tool or file kind, `line_number` is 1-based (0 when the problem
    is not tied to one line), `line` is the offending text.
    """

    def __init__(self, source: str, message: str, line_number: int = 0, line: str = "") -> None:
        self.source = source
        self.message = message
        self.line_number = line_number
        self.line = line
        where = f" at line {line_number}: {line.strip()[:120]!r}" if line_number else ""
        super().__init__(f"{source}: {message}{where}")


class NothingToParse(ParseError):
    """The input holds no records at all (empty output, only noise)."""

    def __init__(self, source: str, message: str = "no records in output") -> None:
        super().__init__(source, message)
