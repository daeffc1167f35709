"""The progress line of long fleet work, on the operator's terminal only.

    sweep: 412/1000 answered, 3 failed, about 0:41 left
    round 2: 0/996 answered, 0 failed, at most 0:50 left

While a sweep's parallel shell runs (`fleet sweep`; `fleet probe`'s check sweep and each of
its rounds) one line on stderr says how many hosts answered of those asked, how many of them
failed so far, and the time left: an estimate from the rate of answers so far (`about`),
else, before the first answer or where the estimate is longer, what the sweep's own bound
leaves (`at most`: the per-node timeout x fan-out waves + margin, after which the sweep is
killed). It is redrawn in place with `\\r`, at most `MAX_REDRAWS_PER_S` times a second
(and every `TICK_S` while nothing arrives, so the time moves on), and erased when the sweep
ends: what stays on the screen is the logs and the report.

Only on a terminal: not when stderr is a pipe or a file, nor with `NETDOCTOR_NO_PROGRESS`
set or `TERM=dumb`. stdout is never touched.

Logs stay whole: netdoctor's logs (netdoctor.logging) are written to whatever `sys.stderr`
is at write time, so while the line shows `sys.stderr` is a stand-in that erases it before
any text goes to the terminal; the line comes back at the next redraw, never in the middle
of someone's unfinished line.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

from netdoctor.fleet.model import NodeGrade
from netdoctor.fleet.shell import host_done
from netdoctor.util import is_terminal

MAX_REDRAWS_PER_S = 10
# While nothing arrives (nodes that hang until their timeout), redraw this often anyway.
TICK_S = 0.5
# A new pseudo-terminal reports 0 columns until someone sets its size.
FALLBACK_COLUMNS = 80
DISABLE_VARIABLE = "NETDOCTOR_NO_PROGRESS"
# Grades the line counts as failed: those that make the fleet exit 2.
_FAILED = frozenset((NodeGrade.FAIL, NodeGrade.UNREACHABLE, NodeGrade.INVALID))


def wanted(stream: Any, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether to draw progress on `stream`: a terminal, and nobody said no."""
    if environ.get(DISABLE_VARIABLE) or environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


def clock_text(seconds: float) -> str:
    """`0:41`, `32:29`, `1:02:03` (whole seconds, rounded up: "0:00 left" means done)."""
    whole = max(0, math.ceil(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def time_left(answered: int, total: int, elapsed_s: float, bound_s: float) -> str:
    """`about 0:41 left` from the rate of answers so far; `at most 32:29 left` (what the
    sweep's bound leaves) before the first answer or where the rate promises no better."""
    bound_left = max(0.0, bound_s - elapsed_s)
    if answered:
        estimate = elapsed_s * max(0, total - answered) / answered
        if estimate < bound_left:
            return f"about {clock_text(estimate)} left"
    return f"at most {clock_text(bound_left)} left"


def progress_text(label: str, answered: int, total: int, failures: int, elapsed_s: float, bound_s: float) -> str:
    return f"{label}: {answered}/{total} answered, {failures} failed, {time_left(answered, total, elapsed_s, bound_s)}"


class Tally:
    """The hosts asked that are done, and how many of those failed. A host's own report
    outranks what the shell said of it (`exited with exit code 1` may come before a
    `warn` report: the shell's stderr and stdout are read apart)."""

    def __init__(self, asked: Iterable[str]) -> None:
        self._asked = frozenset(asked)
        self._failed: dict[str, bool] = {}
        self._reported: set[str] = set()
        self.failures = 0

    @property
    def total(self) -> int:
        return len(self._asked)

    @property
    def answered(self) -> int:
        return len(self._failed)

    def report(self, host: str, failed: bool) -> None:
        """The host's output was attributed: a report (`failed`: graded fail) or `invalid`."""
        if host in self._asked:
            self._reported.add(host)
            self._set(host, failed)

    def shell(self, host: str, failed: bool) -> None:
        """The shell said the host is done (exit code, timeout), as far as no report says otherwise."""
        if host in self._asked and host not in self._reported:
            self._set(host, failed)

    def _set(self, host: str, failed: bool) -> None:
        self.failures += int(failed) - int(self._failed.get(host, False))
        self._failed[host] = failed


class ProgressLine:
    """One progress line on `stream`: a `Tally` drawn with `\\r`, throttled, erasable.

    Called from the thread reading the shell's stdout, the one reading its stderr, the
    ticker and whoever logs: one lock orders them. `clock` and `columns` are injectable.
    """

    def __init__(self, label: str, asked: Iterable[str], bound_s: float, stream: TextIO, *,
                 clock: Callable[[], float] = time.monotonic, columns: Callable[[], int] | None = None,
                 interval_s: float = 1.0 / MAX_REDRAWS_PER_S) -> None:
        self.tally = Tally(asked)
        self.label = label
        self.redraws = 0
        self._bound_s = bound_s
        self._stream = stream
        self._clock = clock
        self._columns = columns if columns is not None else (lambda: terminal_columns(stream))
        self._interval_s = interval_s
        self._started = clock()
        self._lock = threading.RLock()
        self._shown = ""                   # what the line shows now; "" when erased
        self._drawn_at: float | None = None
        self._mid_line = False             # someone else's text ends without a newline
        self._closed = False

    def text(self) -> str:
        tally = self.tally
        return progress_text(self.label, tally.answered, tally.total, tally.failures,
                             self._clock() - self._started, self._bound_s)

    def report(self, host: str, failed: bool) -> None:
        with self._lock:
            self.tally.report(host, failed)
            self._draw_if_due()

    # The collector's observer (netdoctor.fleet.collect.CollectorObserver).
    def settled(self, host: str, grade: NodeGrade) -> None:
        self.report(host, grade in _FAILED)

    def shell_line(self, line: str) -> None:
        done = host_done(line)
        if done is not None:
            self.shell(*done)

    def shell(self, host: str, failed: bool) -> None:
        with self._lock:
            self.tally.shell(host, failed)
            self._draw_if_due()

    def tick(self) -> None:
        with self._lock:
            self._draw_if_due()

    def write_around(self, text: str) -> int:
        """Write another's `text` to the stream with the line out of its way."""
        with self._lock:
            self._erase()
            written = self._stream.write(text)
            if text:
                self._mid_line = not text.endswith("\n")
            return written

    def close(self) -> None:
        """Erase the line for good."""
        with self._lock:
            self._erase()
            self._closed = True

    def _draw_if_due(self) -> None:
        if self._closed or self._mid_line:
            return
        now = self._clock()
        if self._drawn_at is not None and now - self._drawn_at < self._interval_s:
            return
        self._drawn_at = now
        # One column short of the width: a full line leaves the cursor pending a wrap, and
        # a wrapped line cannot be taken back with `\r`.
        text = self.text()[:max(1, self._columns() - 1)]
        if text == self._shown:
            return
        self._put("\r" + text + " " * max(0, len(self._shown) - len(text)))
        self._shown = text
        self.redraws += 1

    def _erase(self) -> None:
        if self._shown:
            self._put("\r" + " " * len(self._shown) + "\r")
            self._shown = ""

    def _put(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):      # the terminal went away: the sweep goes on without
            self._closed = True


class ClearingStream:
    """Stands in for sys.stderr while a progress line shows: every write erases it first."""

    def __init__(self, stream: TextIO, line: ProgressLine) -> None:
        self._stream = stream
        self._line = line

    def write(self, text: str) -> int:
        return self._line.write_around(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for text in lines:
            self.write(text)

    def __getattr__(self, name: str) -> Any:   # flush, fileno, isatty, encoding, buffer...
        return getattr(self._stream, name)


def terminal_columns(stream: Any) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return FALLBACK_COLUMNS
    return columns or FALLBACK_COLUMNS


@contextmanager
def progress_line(label: str, asked: Iterable[str], bound_s: float) -> Iterator[ProgressLine | None]:
    """A progress line on sys.stderr for the block's duration where `wanted`, else None."""
    stream = sys.stderr
    if not wanted(stream):
        yield None
        return
    line = ProgressLine(label, asked, bound_s, stream)
    standin = ClearingStream(stream, line)
    stop = threading.Event()
    ticker = threading.Thread(target=_tick, args=(line, stop), name="netdoctor-progress", daemon=True)
    sys.stderr = standin  # type: ignore[assignment]
    try:
        line.tick()
        ticker.start()
        yield line
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join()
        line.close()
        if sys.stderr is standin:
            sys.stderr = stream


def _tick(line: ProgressLine, stop: threading.Event) -> None:
    while not stop.wait(TICK_S):
        line.tick()
