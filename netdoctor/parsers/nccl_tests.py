"""Parser for nccl-tests result tables (`all_reduce_perf` and friends).

Pure: text in, frozen dataclasses out. nccl-tests rows can be cut in pieces by NCCL INFO
lines printed in the middle of them, so the NCCL log lines are taken out first
(netdoctor.parsers.nccl.split_log_lines).
"""

from __future__ import annotations

import re

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.nccl import split_log_lines
from netdoctor.records import record


@record(frozen=True)
class Measurement:
    """One half of a result row: out-of-place or in-place."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None = None         # `#wrong` count; None for `N/A`
    error: float | None = None       # old format's `error` column (max error), None for `N/A`


@record(frozen=True)
class NcclTestsRow:
    size: int                        # bytes
    count: int | None
    data_type: str | None            # float, double, ...
    redop: str | None                # sum, ..., None where the column is absent or empty
    root: int | None
    out_of_place: Measurement
    in_place: Measurement | None
    line_number: int


@record(frozen=True)
class NcclTestsRun:
    collective: str | None           # all_reduce_perf (from `Collective test starting`), if printed
    threads: int | None
    gpus_per_thread: int | None
    ranks: int                       # `Rank N` lines under `Using devices`
    rows: tuple[NcclTestsRow, ...]
    avg_busbw_gbps: float | None     # nccl-tests' `Avg bus bandwidth` (mean over every size)
    out_of_bounds: int | None        # `Out of bounds values : N OK|FAILED`
    version: str | None = None       # `nccl-tests version 2.17.8`

    @property
    def largest(self) -> NcclTestsRow | None:
        return max(self.rows, key=lambda row: row.size) if self.rows else None

    @property
    def peak_busbw_gbps(self) -> float | None:
        return max((row.out_of_place.busbw_gbps for row in self.rows), default=None)

    @property
    def wrong(self) -> int:
        """Wrong elements over every row, plus out-of-bounds values: > 0 means a corrupt result."""
        total = self.out_of_bounds or 0
        for row in self.rows:
            for half in (row.out_of_place, row.in_place):
                if half is not None and half.wrong:
                    total += half.wrong
        return total


_HEADER = re.compile(r"^#?\s*nThread (\d+) nGpus (\d+)")
_STARTING = re.compile(r"^#\s*Collective test starting: (\S+)")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)")
_RANK = re.compile(r"^#?\s*Rank\s+\d+ ")
_COLUMNS = re.compile(r"^#?\s*size\s+(.*)$")
_OUT_OF_BOUNDS = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)")
_AVERAGE = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*([\d.eE+\-]+)")
# A row starts with size, count and data type (`8388608  2097152  float`).
_ROW_START = re.compile(r"^\s*(\d[\d_]*)\s+(\d+)\s+([a-z]\w*)\b")
_SIMPLE_ROW = re.compile(r"^\s*(\d[\d_]*)\s+[\d.]+\s")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:[eE][+\-]?\d+)?$")


def _measurement(tokens: list[str], has_wrong: bool, line_number: int) -> Measurement:
    try:
        time_us, algbw, busbw = (float(token) for token in tokens[:3])
    except ValueError as error:
        raise ParseError("nccl-tests", f"expected time, algbw, busbw numbers, got {tokens[:3]}", line_number) from error
    flag = tokens[3] if len(tokens) > 3 else "N/A"
    wrong = error = None
    if flag != "N/A":
        try:
            if has_wrong:
                wrong = int(float(flag))
            else:
                error = float(flag)
        except (ValueError, OverflowError) as failure:   # `inf` does not fit an int
            raise ParseError("nccl-tests", f"expected a #wrong count or error, got {flag!r}", line_number) from failure
    return Measurement(time_us, algbw, busbw, wrong, error)


class _RunBuilder:
    def __init__(self, collective: str | None, version: str | None) -> None:
        self.collective = collective
        self.version = version
        self.threads: int | None = None
        self.gpus: int | None = None
        self.ranks = 0
        self.columns: list[str] = []
        self.rows: list[NcclTestsRow] = []
        self.pending: list[str] = []
        self.pending_line = 0
        self.average: float | None = None
        self.out_of_bounds: int | None = None

    @property
    def simple(self) -> bool:
        """An author-trimmed table: `size time algbw busbw` only."""
        return bool(self.columns) and "count" not in self.columns

    def measurement_tokens(self) -> int:
        return 8 if not self.simple else 3

    def flush(self) -> None:
        if not self.pending:
            return
        tokens, self.pending = self.pending, []
        line = self.pending_line
        try:
            self._add_row(tokens, line)
        except (ValueError, OverflowError) as error:
            # Pieces of two rows glued together by paste damage: not a row we can trust.
            raise ParseError("nccl-tests", f"result row does not parse: {error}", line, " ".join(tokens)) from error

    def _add_row(self, tokens: list[str], line: int) -> None:
        if self.simple:
            # A row cut short by the end of a paste: _measurement reports it as a ParseError.
            self.rows.append(NcclTestsRow(int(tokens[0].replace("_", "")), None, None, None, None,
                                          _measurement(tokens[1:4], False, line), None, line))
            return
        if len(tokens) < 3 + 4:
            raise ParseError("nccl-tests", f"result row has {len(tokens)} fields, expected at least 7", line, " ".join(tokens))
        has_wrong = "#wrong" in self.columns
        size, count, data_type = int(tokens[0].replace("_", "")), int(tokens[1]), tokens[2]
        # The middle holds redop and/or root; old alltoall leaves redop empty.
        measured = tokens[-8:] if len(tokens) >= 11 else tokens[3:]
        middle = tokens[3:len(tokens) - len(measured)]
        redop = next((token for token in middle if not _NUMBER.match(token)), None)
        root_token = next((token for token in middle if _NUMBER.match(token)), None)
        root = int(root_token) if root_token is not None else None
        out_of_place = _measurement(measured[:4], has_wrong, line)
        in_place = _measurement(measured[4:8], has_wrong, line) if len(measured) >= 7 else None
        self.rows.append(NcclTestsRow(size, count, data_type, redop, root, out_of_place, in_place, line))

    def complete(self) -> bool:
        if not self.pending:
            return False
        needed = (1 + self.measurement_tokens()) if self.simple else None
        if needed is not None:
            return len(self.pending) >= needed
        return len(self.pending) >= len(self.columns) or len(self.pending) >= 13

    def build(self) -> NcclTestsRun:
        self.flush()
        return NcclTestsRun(self.collective, self.threads, self.gpus, self.ranks, tuple(self.rows), self.average,
                            self.out_of_bounds, self.version)


def parse_nccl_tests(text: str) -> list[NcclTestsRun]:
    """Every run (one per collective) in nccl-tests output, NCCL INFO lines and paste damage tolerated.

    Sample (nccl-tests 2.17.8, H100)::

        # nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902
        # Collective test starting: all_reduce_perf
        # nThread 1 nGpus 1 minBytes 33554432 maxBytes 68719476736 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
        #  Rank  0 Group  0 Pid 2627782 on cnode3-002 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
        #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
            33554432       4194304    double     sum      -1   798.52   42.02   83.06      0   788.24   42.57   84.15      0
        # Out of bounds values : 0 OK
        # Avg bus bandwidth    : 265.619
    """
    _, pieces = split_log_lines(text)
    runs: list[NcclTestsRun] = []
    current: _RunBuilder | None = None
    collective: str | None = None
    version: str | None = None
    for number, piece in pieces:
        stripped = piece.strip()
        if not stripped:
            continue
        if match := _TESTS_VERSION.match(stripped):
            version = match[1]
            continue
        if match := _STARTING.match(stripped):
            if current is not None:
                runs.append(current.build())
                current = None
            collective = match[1]
            continue
        if match := _HEADER.match(stripped):
            if current is not None:
                runs.append(current.build())
            current = _RunBuilder(collective, version)
            current.threads, current.gpus = int(match[1]), int(match[2])
            collective = None
            continue
        if match := _COLUMNS.match(stripped):
            if current is None:
                current = _RunBuilder(collective, version)
                collective = None
            current.flush()
            current.columns = ["size", *match[1].split()]
            continue
        if current is None:
            continue
        if _RANK.match(stripped):
            current.ranks += 1
            continue
        if match := _OUT_OF_BOUNDS.match(stripped):
            current.flush()
            current.out_of_bounds = int(match[1])
            continue
        if match := _AVERAGE.match(stripped):
            current.flush()
            try:
                current.average = float(match[1])
            except ValueError as error:      # the pattern admits `1.2.3` and `e-`
                raise ParseError("nccl-tests", f"average bus bandwidth {match[1]!r} is not a number", number, piece) from error
            continue
        if stripped.startswith("#") or not current.columns:
            continue
        starts_row = _ROW_START.match(piece) if not current.simple else _SIMPLE_ROW.match(piece)
        if starts_row:
            current.flush()
            current.pending = piece.split()
            current.pending_line = number
        elif current.pending and all(_NUMBER.match(token) or token == "N/A" for token in stripped.split()):
            # The rest of a row that an INFO line cut in two.
            current.pending.extend(stripped.split())
        else:
            continue
        if current.complete():
            current.flush()
    if current is not None:
        runs.append(current.build())
    runs = [run for run in runs if run.rows or run.avg_busbw_gbps is not None]
    if not runs:
        raise NothingToParse("nccl-tests", "no nccl-tests result table found")
    return runs
