"""Saved fleet inputs: a directory, one node's report file, or a saved parallel-shell output.

Saved files (`fleet report FILE|DIR ...`) are of two kinds. One node's report file: a
file that starts with JSON; or a `*.json` file, or any file found in a directory given,
whose first line does not read as `host: line` output. Its node is the `host` of the
report inside; without a usable report it is listed under the file name less its last
suffix (`bad.json` -> `bad`): `invalid` when it holds anything else (garbage, broken
JSON), `unreachable` when it is empty (the node gave no answer). Otherwise parallel-shell
output, whose hosts are listed (an empty one names nobody): its first line is a `host: line`
or the shell's own message. A file given by name that is neither (a binary file, a log) is
the wrong file, not a node's answer: a usage error naming it. `*.err` files are stderr
captures: they explain nodes and never name one themselves (an empty `sweep.err` is the
normal case). Two files with reports for one host make it `invalid`, each file named with
its report's verdict beside (`refusal`): a second file never hides a failing node.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from netdoctor.errors import UsageError
from netdoctor.fleet.ahead import Taken, feed_in_halves
from netdoctor.fleet.bounded import (MAX_REPORT_CHARS, BadJson, chunks, decode_report, describe_json_error, plain_report,
                                      read_head, refused_json)
from netdoctor.fleet.model import NodeGrade, NodeSummary, SenderReport, no_report, summarize_report
from netdoctor.fleet.shell import MAX_LINE_CHARS as _MAX_NOISE_CHARS
from netdoctor.fleet.shell import SHELL_STARTS
from netdoctor.fleet.wire import Entry
from netdoctor.host.files import open_text, read_prefix
from netdoctor.logging import get_logger

log = get_logger(__name__)

# The first line of parallel-shell output in a file found in a directory: `node017: {`.
_HOST_LINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*: ")
# A `host: line` that carries a JSON report, compact or pretty-printed.
_REPORT_LINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*: *[{}\[\]\"]")
_STDERR_SUFFIX = ".err"
# How much of a file is read first to tell a JSON report from saved shell output.
_SNIFF_CHARS = 1 << 16
# What an `invalid` sender keeps of its own reports: the worst ones, each said in so many characters.
_KEPT_REPORTS = 8
_REPORT_WHY_CHARS = 200
_WHY_CHARS = 500
# How much of the first line of a file that is no fleet input is shown.
_SHOWN_CHARS = 60
MORE_THAN_ONE = "more than one report from this sender"


def refusal(summary: NodeSummary, why: str, *later: NodeSummary) -> NodeSummary:
    """The sender's entry made `invalid` for `why` (CONTRACT 6.4), keeping the name its report
    gave and, beside it, the verdict of each report it gave (`summary`'s, then `later`'s): a
    second report, or one naming another host, hides no failing one. Its `top` says why and
    names the reports worst first; the fleet's exit code counts their grades too."""
    kept = [entry for node in (summary, *later) for entry in (node.reports or (_sender_report(node),))]
    # Bounded whatever a sender repeats; the worst are kept (a stable sort keeps arrival order among equals).
    kept = sorted(kept, key=lambda entry: -entry[1].severity)[:_KEPT_REPORTS]
    several = len(kept) > 1
    shown = [entry for entry in kept if several or entry[1] is not NodeGrade.PASS]
    # Each report's detail gets its share of the characters left beside the verdicts and file
    # names, so that every file is named (two files claiming one host: both).
    named = sum(len(str(grade)) + len(Path(source).name) + 8 for source, grade, _ in shown)
    share = min(_REPORT_WHY_CHARS, max(40, (_WHY_CHARS - len(why) - named) // max(len(shown), 1)))
    said = [_said(entry, several, share) for entry in shown]
    text = why if not said else f"{why}: {'; '.join(said)}" if several else f"{why}; its report: {said[0]}"
    invalid = no_report(summary.host, NodeGrade.INVALID, text[:_WHY_CHARS], summary.source)
    return replace(invalid, reported_host=summary.reported_host, reports=tuple(kept))


def _sender_report(node: NodeSummary) -> SenderReport:
    return (node.source, node.grade, node.top)


def _said(entry: SenderReport, named: bool, detail_chars: int = _REPORT_WHY_CHARS) -> str:
    """`fail in a.json (port-state mlx5_1:1: port is Down)`; the file only where there are several."""
    source, grade, top = entry
    where = f" in {Path(source).name}" if named and source else ""
    detail = f" ({top.describe()[:detail_chars]})" if top is not None else ""
    return f"{grade}{where}{detail}"


class SavedInputs:
    """`FleetCollector`'s reading of saved files; the collector gives the methods below."""

    def feed_text(self, chunks: Iterable[str], source: str = "") -> None:
        raise NotImplementedError

    def feed_chunk(self, chunk: str, source: str = "", ahead: Mapping[int, Taken] | None = None) -> None:
        raise NotImplementedError

    def feed_taken(self, texts: list[str], taken: list[Entry], source: str) -> int | None:
        raise NotImplementedError

    def _store(self, summary: NodeSummary) -> None:
        raise NotImplementedError

    def _store_file_fallback(self, summary: NodeSummary) -> None:
        raise NotImplementedError

    def add_document(self, text: str, source: str, host_hint: str | None = None, *, cut: bool = False) -> None:
        """A file holding one JSON report (`cut`: only its head was read).

        The file is one sender: its node is the report's `host`; a file without a usable
        report still names one node, `host_hint`, else the file name without its last
        suffix. A second JSON value in the file makes that node `invalid`.
        """
        fallback_host = host_hint or Path(source).stem
        position = 0
        length = len(text)
        while position < length and text[position].isspace():
            position += 1
        if position >= length:
            self._store_file_fallback(no_report(fallback_host, NodeGrade.UNREACHABLE, f"{source}: empty report file", source))
            return
        if text[position] not in "{[":
            self._store_file_fallback(no_report(fallback_host, NodeGrade.INVALID, f"{source}: not a netdoctor report: {_first_line(text, position)!r}", source))
            return
        if cut:
            self._store_file_fallback(no_report(fallback_host, NodeGrade.INVALID, f"{source}: larger than {MAX_REPORT_CHARS >> 20} MiB", source))
            return
        try:
            data, rest = decode_report(text, position)
        except BadJson as error:
            self._store_file_fallback(no_report(fallback_host, NodeGrade.INVALID, f"{source}: {refused_json(error)}", source))
            return
        except ValueError as error:
            self._store_file_fallback(no_report(fallback_host, NodeGrade.INVALID, f"{source}: not valid JSON ({describe_json_error(error)})", source))
            return
        self._add_report(data, source, host_hint, more=bool(rest.strip()))

    def _add_report(self, data: object, source: str, host_hint: str | None, *, more: bool = False) -> None:
        """A report file's decoded report (`more`: another JSON value followed it)."""
        summary = summarize_report(data, source, None)
        if summary.host == "?":
            summary = summarize_report(data, source, host_hint or Path(source).stem)
        if more:
            summary = refusal(summary, f"{source}: more than one JSON value in one report file")
        self._store(summary)

    def add_path(self, path: Path, *, in_directory: bool = False) -> None:
        """A saved input: a directory of JSON reports, a JSON report file, or pdsh output.

        See the module docstring for which file is one node's report and which node a
        file without a usable report names.
        """
        if path.is_dir():
            # Named as Path(path) / name would name it (`bad.json`, not `./bad.json`), without a Path each.
            directory = str(path)
            for entry in sorted(os.scandir(path), key=lambda entry: entry.name):
                if entry.name.startswith("."):
                    continue
                try:
                    regular = entry.is_file()
                except OSError as error:   # a symlink loop in the directory
                    log.warning("fleet input skipped", path=entry.path, error=error.strerror or str(error))
                    continue
                if regular:
                    self._add_file(entry.name if directory == "." else os.path.join(directory, entry.name),
                                   in_directory=True)
            return
        self._add_file(path, in_directory=in_directory)

    def _add_file(self, path: Path | str, *, in_directory: bool) -> None:
        try:
            small, more = read_prefix(path, _SNIFF_CHARS)   # type: ignore[arg-type]
            # Most files of a directory are a plain report each, whole in the head: decoded from its
            # bytes (what is not plain, or not UTF-8, is read as text below: the same for it).
            report = plain_report(small) if not more else None
            # Lines end only at "\n", as the parallel shell cut them (`exact_lines`).
            handle = None if report is not None else open_text(Path(path)) if more else io.StringIO(
                small.decode("utf-8", "replace"), newline="\n")
        except OSError as error:
            raise UsageError(f"cannot read fleet input {path}: {error.strerror or error}") from error
        source = os.fspath(path)
        if handle is None:
            self._add_report(report, source, None)
            return
        suffix = _suffix(source)
        stderr_capture = suffix == _STDERR_SUFFIX
        with handle:
            # One read of the head tells a report from shell output (no readline and seek:
            # ten thousand small report files are read in one piece each).
            head = handle.read(_SNIFF_CHARS)
            whole = True                        # `head` is the file's start
            while head and head.isspace():     # leading blanks mean nothing to JSON or pdsh
                head, whole = handle.read(_SNIFF_CHARS), False
            first_line = _first_non_blank_line(head)
            first = first_line[:1]
            if not first:
                if (in_directory or suffix == ".json") and not stderr_capture:
                    self.add_document("", source)
                else:
                    log.warning("fleet input is empty", path=source)
                return
            # (A report file, the most common, is told by its first character alone.)
            shell_output = first not in "{[" and (
                _HOST_LINE.match(first_line) is not None
                or first_line.startswith(SHELL_STARTS)
                or stderr_capture
                # A login banner or a shell's warning may come before the first line of a report.
                or ("\x00" not in head and any(_REPORT_LINE.match(line) for line in head.splitlines()[1:]))
            )
            # A `.json` file may still be a saved pdsh sweep (`pdsh ... > sweep.json`).
            if first in "{[" or (not shell_output and (in_directory or suffix == ".json")):
                # A head shorter than asked for is the whole file (most report files).
                rest, cut = read_head(handle, MAX_REPORT_CHARS - len(head)) if len(head) == _SNIFF_CHARS else ("", False)
                self.add_document(head + rest, source, cut=cut)
                return
            if not shell_output:
                # Given by name, neither a report nor `host: line` output (a binary file, a log):
                # the wrong file, not a node's answer (a node's file is a `.json` or in a directory).
                raise UsageError(f"fleet input {path} is neither a netdoctor report nor parallel-shell output "
                                 f"(`host: line`); it starts {first_line.strip()[:_SHOWN_CHARS]!r} (a node's own "
                                 "output files, srun's --output=DIR/%N.out: give their directory)")
            # A large sweep: its second half's blocks taken by a child ahead, on another CPU.
            if not (more and whole and feed_in_halves(self, handle.fileno(), source)):
                self.feed_text(chunks(handle, head=head), source)


def _first_non_blank_line(text: str) -> str:
    """The first line of `text` that is not blank, without its leading blanks ("" when none)."""
    stripped = text.lstrip()
    end = stripped.find("\n")
    return stripped if end < 0 else stripped[:end + 1]


def _first_line(text: str, position: int) -> str:
    """The line of `text` starting at `position`, cut for a summary."""
    end = text.find("\n", position, position + _MAX_NOISE_CHARS + 1)
    return text[position:end if end >= 0 else position + _MAX_NOISE_CHARS].rstrip()


def _suffix(path: str) -> str:
    """`Path(path).suffix` without a Path: the last name's `.json` (`..json` too), not a leading dot's."""
    name = os.path.basename(path)
    dot = name.rfind(".")
    return name[dot:] if 0 < dot < len(name) - 1 else ""
