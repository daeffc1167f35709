"""Reassemble per-node reports from parallel-shell output or saved files, streaming.

pdsh and clush print `host: line`, interleaving hosts in no fixed order; one host's
report may be a single JSON line or pretty-printed over many. Lines are buffered per
host only until that host's JSON object closes, then reduced to a `NodeSummary`, so
memory holds summaries, not reports. Their stderr tells who timed out or failed (`shell`).

Saved files (`fleet report FILE|DIR ...`) are read by `saved`.

Attribution (CONTRACT 6.4): a line is its sender's, the host of its `host: ` prefix (or of
the file the sweep wrote for it), never the `host` a report names. Text after a report on
its line (pdsh glues a node's unterminated last line onto the next one), a second report
from one sender, or a report naming another host of the sweep make the sender `invalid`
and never touch another node's entry; each report's own verdict stays beside the `invalid`
(`saved.refusal`), so none hides a failing one. A name that is no other host (an alias, an
FQDN) is kept beside the sender's. What is kept per node is bounded (`bounded`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, TextIO

from netdoctor.fleet.blocks import BlockReader
from netdoctor.fleet.bounded import (
    LINE_OVERHEAD,
    MAX_REPORT_CHARS,
    PENDING_BUDGET_CHARS,
    BadJson,
    Run,
    bounded_lines,
    decode_report,
    describe_json_error,
    exact_lines,
    refused_json,
    strip_prefix,
)
from netdoctor.fleet.budget import BUDGET_ENV, NodeBudget, too_large
from netdoctor.fleet.model import NodeGrade, NodeSummary, no_report, summarize_report
from netdoctor.fleet.saved import MORE_THAN_ONE, SavedInputs, refusal
from netdoctor.fleet.shell import KEPT_LINES as _KEPT_NOISE_LINES
from netdoctor.fleet.shell import MAX_LINE_CHARS as _MAX_NOISE_CHARS
from netdoctor.fleet.shell import SHELL_STARTS, ShellMessages, relabelled
from netdoctor.logging import get_logger

if TYPE_CHECKING:
    from netdoctor.fleet.ahead import Taken
    from netdoctor.fleet.wire import Entry

log = get_logger(__name__)

# After the `}` that closes an object printed with indent=0, an inner one is followed by
# one of these; anything else after a `}` at column 0 may end the report.
_INNER_CLOSE = (",", "]", "}")


class CollectorObserver(Protocol):
    """Told of the collector's progress: a host settled (its grade so far), a shell line."""

    def settled(self, host: str, grade: NodeGrade) -> None: ...

    def shell_line(self, line: str) -> None: ...


class FleetCollector(SavedInputs):
    """Accumulates node summaries from any mix of inputs; `finish` gives one per host."""

    def __init__(self, command_timeout_s: float | None = None, hosts: Iterable[str] = (), *, labelled: bool = False,
                 observer: CollectorObserver | None = None, budget: NodeBudget | None = None) -> None:
        """`hosts`: the hosts asked, where known (a sweep); a shell message naming any
        other (`srun: error: _establish_config_source: ...`) is about no host. `labelled`:
        streams are srun's, whose lines are labelled with task numbers (`shell.relabelled`).
        `observer` hears of each host settled and each shell line (a sweep's progress).
        `budget`: the memory all nodes' summaries may take (netdoctor.fleet.budget)."""
        hosts = list(hosts)
        self.observer = observer
        self._budget = budget if budget is not None else NodeBudget()
        self._shell = ShellMessages(frozenset(hosts), command_timeout_s)
        self._task_hosts = hosts if labelled else None
        # Senders made `invalid` for what they sent -> the input they sent it in: anything more
        # from them there is dropped (another saved file is read: its report is kept beside).
        self._refused: dict[str, str] = {}
        self._summaries: dict[str, NodeSummary] = {}
        self._pending: dict[str, Run] = {}     # hosts whose JSON object is still open
        self._noise: dict[str, list[str]] = {}
        self._noise_count: dict[str, int] = {}
        self.unattributed_lines = 0
        # Hosts whose summary was made up for a report file without a usable report;
        # any real report for that host replaces it.
        self._file_fallbacks: set[str] = set()
        self._run: Run | None = None
        self._parked = 0         # characters of the open reports but `_run`'s
        self._blocks = BlockReader()

    # ---- inputs -------------------------------------------------------------------------

    def feed_line(self, line: str, source: str = "") -> None:
        """One line of pdsh/clush style output (stdout or stderr, `host: text`)."""
        # Fast path: the next line of the JSON object being reassembled for the host that
        # wrote the previous line. A saved sweep is mostly such runs, millions of lines
        # for a pretty-printed fleet, so this path does only a prefix test and an append.
        run = self._run
        if run is not None and line.startswith(run.prefix):
            self._append(run, line)
            if line.startswith(run.brace) and self._run is run:
                after = line[len(run.brace):].strip()
                if not after.startswith(_INNER_CLOSE):
                    self._close_run(run)
            return
        if line.startswith(SHELL_STARTS) and self._shell.take_shell_line(line):
            return
        host, separator, text = line.partition(": ")
        if not separator or not host or " " in host or not host.isprintable():
            # pdsh prints `sending signal 15 to n2 [bash] pid 8538` without a prefix; a name with
            # a control character in it (`\x00\x00Usage: ` of a binary) is no host's.
            if line.strip() and not line.startswith("sending signal"):
                self.unattributed_lines += 1
            return
        self._feed_host_text(host, text, source)

    def feed_lines(self, lines: Iterable[str], source: str = "") -> None:
        """Many lines of pdsh/clush style output; the same as `feed_line` on each, faster.

        The run of the host being reassembled is kept in locals here: a saved sweep of a
        pretty-printed fleet is millions of such lines and a call per line costs more
        than everything else.
        """
        run = self._run
        if run is not None:
            run_prefix, run_brace, run_append = run.prefix, run.brace, run.lines.append
        for line in lines:
            if run is not None and line.startswith(run_prefix) and not line.startswith(run_brace):
                run_append(line)
                run.size += len(line) + LINE_OVERHEAD
                if run.size > MAX_REPORT_CHARS:
                    self._overflow(run)
                    run = None
                continue
            # A `}` line (maybe the end of the object), another host, or a shell message.
            self.feed_line(line, source)
            run = self._run
            if run is not None:
                run_prefix, run_brace, run_append = run.prefix, run.brace, run.lines.append

    def feed_text(self, chunks: Iterable[str], source: str = "") -> None:
        """pdsh/clush output in chunks that end at line ends; the same as `feed_lines`.

        A saved sweep mostly holds each host's report as one contiguous block of lines.
        Such a block is found and decoded with C-speed string operations (`fleet.blocks`)
        and taken whole; anything else (interleaved hosts, shell messages) goes line by line.
        """
        for chunk in chunks:
            self.feed_chunk(chunk, source)

    def feed_taken(self, texts: list[str], taken: list[Entry], source: str) -> int | None:
        """A chunk another process read (`fleet.ahead`): the blocks it took whole, (position after
        the first line, first line, end, summary), each after its text in `texts` (one more: the
        chunk's end). The same as feeding the chunk, where each block's first line opens a new report
        of just that line here; else the position after that line, from where the chunk is to be fed."""
        for text, (line_end, line, _, summary) in zip(texts, taken):
            if text:                                   # (mostly none: blocks follow each other)
                self.feed_chunk(text, source)
            if (run := self._run) is not None:
                # Fed as text, the run is tried as a block from this line first: in vain where the
                # line is another host's; where it is the run's own host's, the line is appended to
                # it below, and the chunk fed from the next line: what a block taken there gives.
                run.blocks = False
            self.feed_line(line, source)
            run = self._run
            if run is None or run.lines != [line]:     # its host's report open here, the host refused, ...
                return line_end
            self._drop_run(run)
            self._store(summary)
        self.feed_chunk(texts[-1], source)
        return None

    def feed_chunk(self, chunk: str, source: str = "", ahead: Mapping[int, Taken] | None = None) -> None:
        """One chunk of `feed_text`; `ahead`: its blocks taken ahead by another process (`fleet.ahead`),
        by the position after their first line, each used where this collector's run is the one
        assumed there (the host's new run of just that line)."""
        blocks = self._blocks
        position = 0
        length = len(chunk)
        blocks.new_chunk(chunk)
        while position < length:
            run = self._run
            if run is not None and run.blocks:
                known = ahead.get(position) if ahead else None
                if known is not None and run.lines == [known[0]] and chunk.startswith(run.close, known[1] - len(run.close)):
                    position, summary = known[1], known[2]
                elif (taken := blocks.take(run, chunk, position)) is not None:
                    position, summary = taken[0], summarize_report(taken[1], run.source, run.host)
                else:
                    summary = None
                if summary is not None:
                    self._drop_run(run)
                    self._store(summary)
                    continue
                # Interleaved: this run goes line by line to its end (no rescans).
                run.blocks = False
            line_end = chunk.find("\n", position)
            line_end = length if line_end < 0 else line_end + 1
            line = chunk[position:line_end]
            position = line_end
            if run is not None and line.startswith(run.prefix) and not line.startswith(run.brace):
                self._append(run, line)
            else:
                self.feed_line(line, source)

    def feed_stream(self, stream: TextIO, source: str = "") -> None:
        """A live stream of pdsh/clush style output (a sweep's stdout, stdin), line by line
        as it arrives; a line longer than one report may be is cut."""
        self.feed_lines(relabelled(bounded_lines(exact_lines(stream)), self._task_hosts), source)

    def feed_stderr(self, stream: TextIO) -> None:
        """The parallel shell's stderr stream, to its end (what is kept of it is bounded)."""
        for line in relabelled(bounded_lines(exact_lines(stream)), self._task_hosts):
            self.feed_stderr_line(line)

    def feed_stderr_line(self, line: str) -> None:
        """One line of the parallel shell's stderr: shell messages, or the remote stderr."""
        if self.observer is not None:
            self.observer.shell_line(line)
        if self._shell.take_shell_line(line):
            return
        host, separator, text = line.rstrip("\r\n").partition(": ")
        if separator and host and " " not in host:
            self._shell.note_stderr(host, text)

    # ---- result -------------------------------------------------------------------------

    def finish(self, expected_hosts: Iterable[str] = ()) -> list[NodeSummary]:
        """One summary per host seen or expected; nothing is dropped."""
        for host, run in list(self._pending.items()):
            joined = strip_prefix(run.lines, run.prefix)
            try:
                data, rest = decode_report(joined)
            except BadJson as error:
                self._store(no_report(host, NodeGrade.INVALID, refused_json(error)))
            except ValueError as error:
                self._store(no_report(host, NodeGrade.INVALID, f"incomplete or garbled JSON report ({describe_json_error(error)})"))
            else:
                self._end_report(host, data, rest, "")
        self._pending.clear()
        self._run, self._parked = None, 0
        hosts = set(self._summaries) | set(self._noise) | self._shell.hosts()
        hosts.update(expected_hosts)
        result: list[NodeSummary] = []
        for host in hosts:
            summary = self._summaries.get(host)
            if summary is None:
                summary = self._explain_missing(host)
            elif summary.reported_host is not None and summary.reported_host in hosts:
                summary = refusal(summary, f"its report names another host of the sweep, {summary.reported_host!r}")
            result.append(summary)
        if self.unattributed_lines:
            log.warning("fleet input lines without a `host: ` prefix were ignored", lines=self.unattributed_lines)
        if self._budget.dropped:
            log.warning("nodes over their share of the report's memory are invalid (too large)", nodes=self._budget.dropped,
                        budget_mib=self._budget.budget >> 20, raise_with=BUDGET_ENV)
        return result

    # ---- internals ----------------------------------------------------------------------

    def _feed_host_text(self, host: str, text: str, source: str) -> None:
        if self._refused.get(host) == source:
            return
        run = self._pending.get(host)
        if run is not None:
            run.source, run.blocks = source, True
            self._switch(run, resumed=True)
            self._append(run, f"{host}: {text}")
            if text.startswith("}") and self._run is run and not text[1:].strip().startswith(_INNER_CLOSE):
                self._close_run(run)
            return
        stripped = text.strip()
        if not stripped:
            return
        if not stripped.startswith("{"):
            if stripped == "command timeout":
                self._shell.note_timeout(host)
                return
            self._note_noise(host, stripped)
            return
        if stripped.endswith("}"):
            # Maybe a whole report on one line (0.1 nodes print none, but `jq -c` does). The
            # first of a report's lines (pretty or `short_lines`) is not decoded in vain.
            try:
                data, rest = decode_report(stripped)
            except json.JSONDecodeError:
                pass
            except BadJson as error:
                self._refuse(host, refused_json(error), source)
                return
            else:
                self._end_report(host, data, rest, source)
                return
        run = self._pending[host] = Run(host, [f"{host}: {text}"], source)
        self._switch(run, resumed=False)
        if run.size > MAX_REPORT_CHARS:
            self._overflow(run)

    def _switch(self, run: Run, *, resumed: bool) -> None:
        """`run` is the one reassembled now; the one left keeps its size in `_parked` (the runs
        but the current one do not grow). Where the reports still open pass `PENDING_BUDGET_CHARS`
        together (many hosts interleaved, each sending much), the largest is dropped, `invalid`."""
        left = self._run
        if left is run:
            return
        self._parked += (left.size if left is not None else 0) - (run.size if resumed else 0)
        self._run = run
        while self._pending and self._parked + (self._run.size if self._run is not None else 0) > PENDING_BUDGET_CHARS:
            largest = max(self._pending.values(), key=lambda pending: pending.size)
            self._drop_run(largest)
            self._refuse(largest.host, f"too large: its unfinished report is the largest while those still open pass "
                                       f"{PENDING_BUDGET_CHARS >> 20} MiB together; not read further", largest.source)

    def _append(self, run: Run, line: str) -> None:
        run.lines.append(line)
        run.size += len(line) + LINE_OVERHEAD
        if run.size > MAX_REPORT_CHARS:
            self._overflow(run)

    def _overflow(self, run: Run) -> None:
        self._drop_run(run)
        self._refuse(run.host, f"output larger than {MAX_REPORT_CHARS >> 20} MiB; not read further", run.source)

    def _close_run(self, run: Run) -> None:
        """A `}` at column 0: the end of the run's object, unless it does not decode yet."""
        if not run.try_close():
            return
        text = strip_prefix(run.lines, run.prefix)
        try:
            data, rest = decode_report(text)
        except json.JSONDecodeError as error:
            # Not complete yet, or broken before its end for good where what comes next starts a
            # line (JSON has no token across a line end): then no later `}` line is tried. Read on.
            run.garbled = error.pos < len(text) and (text.endswith("\n") or not run.lines[0].endswith("\n"))
            return
        except BadJson as error:
            self._drop_run(run)
            self._refuse(run.host, refused_json(error), run.source)
            return
        self._drop_run(run)
        self._end_report(run.host, data, rest, run.source)

    def _drop_run(self, run: Run) -> None:
        if self._pending.get(run.host) is not run:
            return
        del self._pending[run.host]
        if self._run is run:
            self._run = None
        else:
            self._parked -= run.size

    def _end_report(self, host: str, data: object, rest: str, source: str) -> None:
        """A sender's report is complete; anything after it on its line is the sender's too."""
        rest = rest.strip()
        if rest:
            self._refuse(host, f"text after its report on the same line: {rest[:_MAX_NOISE_CHARS]!r}", source,
                         summarize_report(data, source, host))
        else:
            self._store(summarize_report(data, source, host))

    def _refuse(self, host: str, why: str, source: str = "", report: NodeSummary | None = None) -> None:
        """The sender is `invalid` for what it sent (`report`: the report in it, whose verdict is
        kept beside); the rest of its output is dropped. A report it gave before stays beside too."""
        refused = refusal(report, why) if report is not None else no_report(host, NodeGrade.INVALID, why, source)
        earlier = self._summaries.get(host) if host not in self._file_fallbacks else None
        self._file_fallbacks.discard(host)
        self._settle_invalid(host, refusal(earlier, MORE_THAN_ONE, refused) if earlier is not None else refused, source)

    def _settle_invalid(self, host: str, entry: NodeSummary, source: str) -> None:
        """The sender's entry is `invalid` (`entry`); the rest of what it sends in `source` is dropped."""
        self._refused[host] = source
        self._keep(entry)
        if self.observer is not None:
            self.observer.settled(host, NodeGrade.INVALID)

    def _keep(self, entry: NodeSummary) -> None:
        """`entry` is its host's, charged against the report's memory (`budget`): the nodes of
        the largest charge dropped to make room, this one perhaps among them, become `invalid`."""
        budget = self._budget
        budget.release(entry.host)
        self._summaries[entry.host] = entry
        for host, charge in budget.admit(entry):
            self._summaries[host] = too_large(self._summaries[host], charge, budget.budget)
            if self.observer is not None and host != entry.host:
                self.observer.settled(host, NodeGrade.INVALID)

    def _store(self, summary: NodeSummary) -> None:
        host = summary.host
        if host in self._file_fallbacks:
            self._file_fallbacks.discard(host)
        elif host in self._summaries:
            # A second report of one sender (or of one host, from saved files): `invalid`, each
            # report's own verdict kept beside, so that neither hides the other.
            self._settle_invalid(host, refusal(self._summaries[host], MORE_THAN_ONE, summary), summary.source)
            return
        self._keep(summary)
        if self.observer is not None:
            self.observer.settled(host, self._summaries[host].grade)

    def _store_file_fallback(self, summary: NodeSummary) -> None:
        """The node of a report file without a usable report; never replaces a real report."""
        if summary.host in self._summaries and summary.host not in self._file_fallbacks:
            log.warning("report file without a usable report for a host that has one; keeping the report",
                        host=summary.host, source=summary.source, reason=summary.top.summary if summary.top else "")
            return
        self._keep(summary)
        self._file_fallbacks.add(summary.host)

    def _note_noise(self, host: str, text: str) -> None:
        self._noise_count[host] = self._noise_count.get(host, 0) + 1
        kept = self._noise.setdefault(host, [])
        if len(kept) < _KEPT_NOISE_LINES:
            kept.append(text[:_MAX_NOISE_CHARS])

    def _explain_missing(self, host: str) -> NodeSummary:
        noise = self._noise.get(host)
        if noise:
            count = self._noise_count[host]
            more = f" (and {count - 1} more line{'s' if count > 2 else ''})" if count > 1 else ""
            return no_report(host, NodeGrade.INVALID, f"not a netdoctor report: {noise[0]!r}{more}")
        return self._shell.explain(host)

