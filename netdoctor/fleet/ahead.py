"""A large saved sweep read in two halves: the second half read and its blocks taken by a forked child ahead.

Most of `fleet report sweep.out` goes to taking each host's block whole (`fleet.blocks`: the
prefixes stripped, the report decoded and summarized), ~70 % of 1.9 s for 10,000 pretty-printed
nodes on the 2-core VM. A child forked at the start reads the file's second half while the parent
reads the first. Per chunk it sends the blocks it took (each one's summary, first line and place)
and the text around them (`fleet.wire`), and the chunk's end in the file. The parent then feeds
each chunk from that (`FleetCollector.feed_taken`): the text around as ever, each block by its
first line and summary where its run there is the one the child assumed (the host's fresh run of
just that first line); where it is not, it reads the chunk from the file and goes on from that
block as ever. Verdicts, order and the report's memory budget are the parent's, the same as read
whole. Where the child is not there yet (a slower or busier CPU under it), the parent takes the
last half of what the child has left, reads it as the child does, and feeds it after the child's
chunks (`_SecondPart`); where the child is gone, the parent reads the rest itself. (A file
rewritten in place while it is read gives a mix of its versions, read whole or in halves.)
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from netdoctor.fleet.blocks import BlockReader
from netdoctor.fleet.bounded import CHUNK_CHARS, Run, chunks
from netdoctor.fleet.model import NodeSummary, summarize_report
from netdoctor.fleet.wire import Entry, decode_chunk, encode_chunk
from netdoctor.host.files import open_span, read_at, regular_size
from netdoctor.host.forked import ForkedWork, fork_work

# Smaller sweeps are read in one piece: a fork costs ~10 ms and 10,000 one-line reports are ~100 MB
# (engineering default).
MIN_SPLIT_BYTES = 32 << 20
# The parent's share of the file: it feeds the rest from the child's messages at about a tenth of
# the cost of reading it, so it needs them about when the child is done (measured on the 2-core VM:
# benchmarks/results/fleet.md). Where the second half starts is looked for in `_WINDOW_BYTES` there.
# Engineering defaults.
PARENT_SHARE = 0.47
_WINDOW_BYTES = 1 << 16
# A line start after a host's `}` line and before another's `{...` line: where one report most
# likely ended and another begins (other hosts' reports may still be open: the parent's check
# at each block makes that safe).
_BETWEEN_REPORTS = re.compile(rb"\n[^\s:]+: \}\n(?=[^\s:]+: \{)")
# Each message: the chunk's number and the file offset of its end (the last, after the last chunk: none).
_CHUNK_HEAD = struct.Struct("<IQ")
# The text around a chunk's blocks is sent where it is at most this part of the chunk; else the
# parent reads the chunk from the file (a sweep of interleaved hosts: the spool stays small).
_TEXT_PART = 8
# Where the child is behind, the parent takes over the last half of what it has left, if that is
# at least two chunks (less, it reads the rest itself), up to four chunks in all: their summaries
# wait in memory until fed, outside the report's budget (at the per-node limits, ~14 MB). Past that,
# it waits for the child's next chunk while the child lives and sends one in `_PATIENCE_S`.
# Engineering defaults.
_MIN_TAKEN_BYTES = 2 * CHUNK_CHARS
_MAX_TAKEN_BYTES = 4 * CHUNK_CHARS
_PATIENCE_S = 2.0

# One block the child took: its first line (the parent's run must be just that line), where it
# ends in the chunk, and its summary; by the position of the line after the first.
Taken = tuple[str, int, NodeSummary]


class _Collector(Protocol):
    def feed_text(self, chunks: Iterable[str], source: str = "") -> None: ...

    def feed_chunk(self, chunk: str, source: str = "", ahead: Mapping[int, Taken] | None = None) -> None: ...

    def feed_taken(self, texts: list[str], taken: list[Entry], source: str) -> int | None: ...


def feed_in_halves(collector: _Collector, descriptor: int, source: str) -> bool:
    """The open file `descriptor` fed to `collector` from its start, the second half read and its
    blocks taken ahead by a child; False (nothing fed) where it is not worth it or no fork is made."""
    size = regular_size(descriptor)
    if size < MIN_SPLIT_BYTES:
        return False
    middle = int(size * PARENT_SHARE)
    between = _BETWEEN_REPORTS.search(read_at(descriptor, middle, _WINDOW_BYTES))
    if between is None:
        return False
    split = middle + between.end()
    work = fork_work(lambda send: _take_ahead(descriptor, split, source, send))
    if work is None:
        return False
    try:
        _feed_span(collector, descriptor, 0, split, source)
        _SecondPart(collector, descriptor, source, work).feed(split, size)
    finally:
        work.close()
    return True


class _SecondPart:
    """The parent's side of the part from the split: each chunk the child sent fed in order. Where
    the child is not there yet (a slower or loaded CPU under it), this process takes the last half
    of what the child has left (up to `_MAX_TAKEN_BYTES` in all), its blocks taken as the child takes
    them, to feed after the child's; and so on, until the two meet: both CPUs work to the end."""

    def __init__(self, collector: _Collector, descriptor: int, source: str, work: ForkedWork) -> None:
        self._collector, self._descriptor, self._source, self._work = collector, descriptor, source, work
        # The chunks this process took, each (start, end, texts around, blocks), in order: from `_bound`
        # to `_limit`, the last line end the file had when its reading began.
        self._taken_here: list[tuple[int, int, list[str] | None, list[Entry]]] = []
        self._bound: int | None = None
        self._limit = 0

    def feed(self, start: int, size: int) -> None:
        """The file from `start` (a line start), `size` its size when read began, fed to its end."""
        offset, index = start, 0            # where the child's next chunk begins, and its number
        self._limit = _line_end_before(self._descriptor, start, size)
        while self._bound is None or offset < self._bound:
            message = self._work.next_message()
            if message is None:
                if self._child_part_end() - offset < _MIN_TAKEN_BYTES:
                    break                   # little left: read here
                if self._take_last_half(offset):
                    continue
                message = self._next_from_child()     # (taken all it may)
                if message is None:         # the child is gone, or silent too long
                    break
            sent, end = _CHUNK_HEAD.unpack_from(message)
            if sent != index or len(message) == _CHUNK_HEAD.size:   # (the child's last word: no chunk left)
                break
            texts, taken = decode_chunk(memoryview(message)[_CHUNK_HEAD.size:])
            if self._bound is not None and end > self._bound:
                # Across where this process's chunks begin: fed to there from the file, its blocks used where they fit.
                end, texts = self._bound, None
            self._feed(offset, end, texts, taken)
            offset, index = end, index + 1
        self._work.close()
        if self._bound is None:
            _feed_span(self._collector, self._descriptor, offset, None, self._source)
            return
        _feed_span(self._collector, self._descriptor, offset, self._bound, self._source)     # what neither has taken
        for chunk_start, end, texts, taken in self._taken_here:
            self._feed(chunk_start, end, texts, taken)
        _feed_span(self._collector, self._descriptor, self._limit, None, self._source)       # (a file still growing)

    def _feed(self, start: int, end: int, texts: list[str] | None, taken: list[Entry]) -> None:
        """The chunk of bytes `start` to `end`: from its blocks and the text around them where it
        can (`FleetCollector.feed_taken`); from the file from where it cannot, its blocks used where
        they fit (`FleetCollector.feed_chunk`)."""
        resume = self._collector.feed_taken(texts, taken, self._source) if texts is not None else 0
        if resume is None:
            return
        with open_span(self._descriptor, start, end) as handle:
            chunk = "".join(chunks(handle))[resume:]
        ahead = {position - resume: (line, block_end - resume, summary)
                 for position, line, block_end, summary in taken if position >= resume}
        self._collector.feed_chunk(chunk, self._source, ahead)

    def _child_part_end(self) -> int:
        """Where the part left to the child ends: where the chunks taken here begin, or the file's last line end."""
        return self._limit if self._bound is None else self._bound

    def _take_last_half(self, offset: int) -> bool:
        """Takes the chunks from a line start about half-way between `offset` and the end of the
        child's part to that end (within `_MAX_TAKEN_BYTES` in all), to be fed after those before;
        False where it has taken all it may, or no line starts there."""
        bound = self._child_part_end()
        allowed = _MAX_TAKEN_BYTES - (self._limit - bound)
        if allowed <= 0:
            return False
        middle = _line_start(self._descriptor, offset, max(offset + (bound - offset) // 2, bound - allowed), bound)
        if middle is None:
            return False
        try:
            self._taken_here[:0] = _chunks_taken(self._descriptor, middle, bound, self._source)
        except _NoOffset:
            return False
        self._bound = middle
        return True

    def _next_from_child(self) -> bytes | None:
        """The child's next message, waited for while it lives and sends one within `_PATIENCE_S`."""
        deadline = time.monotonic() + _PATIENCE_S
        while (message := self._work.next_message()) is None:
            if not self._work.alive():
                return self._work.next_message()      # (what it sent before it ended, if anything)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.001)
        return message


def _line_start(descriptor: int, offset: int, target: int, bound: int) -> int | None:
    """A line start after `target` and before `bound`, between two reports where there is one within
    `_WINDOW_BYTES`, else the next one; else the last one after `offset` before `target`; None where none."""
    window = read_at(descriptor, target, min(_WINDOW_BYTES, bound - target))
    between = _BETWEEN_REPORTS.search(window)
    if between is not None:
        return target + between.end()
    newline = window.find(b"\n")
    if 0 <= newline < len(window) - 1:
        return target + newline + 1
    return _last_line_start(descriptor, offset, target)


def _line_end_before(descriptor: int, start: int, size: int) -> int:
    """The end of the last line that ends by `size` (from `start`, a line start, within `_WINDOW_BYTES`); `start` where none."""
    return _last_line_start(descriptor, start, size) or start


def _last_line_start(descriptor: int, low: int, high: int) -> int | None:
    """The last line start after `low` and at most `high`, within `_WINDOW_BYTES` before `high`; None where none."""
    before = max(low, high - _WINDOW_BYTES)
    newline = read_at(descriptor, before, high - before).rfind(b"\n")
    return before + newline + 1 if newline >= 0 else None


def _feed_span(collector: _Collector, descriptor: int, start: int, stop: int | None, source: str) -> None:
    """Bytes `start` (a line start) to `stop` of the file, read and fed here."""
    with open_span(descriptor, start, stop) as span:
        collector.feed_text(chunks(span), source)


def _blocks_in(chunk: str, source: str, reader: BlockReader) -> list[Entry]:
    """The blocks of `chunk` that `reader` takes whole after a line that opens a report, each by the
    position after that line. Where none is taken, the host's next lines are skipped, as the parent
    appends them to its run."""
    taken: list[Entry] = []
    reader.new_chunk(chunk)
    position, length = 0, len(chunk)
    while position < length:
        line_end = chunk.find("\n", position) + 1 or length
        host, separator, text = chunk[position:min(line_end, position + 256)].partition(": ")
        line = chunk[position:line_end] if separator and text.startswith("{") else ""
        # (A line that ends in `}` is decoded alone by the parent first: mostly a whole report.)
        if line and host and " " not in host and not line.rstrip().endswith("}"):
            block = reader.take(Run(host, [line], source), chunk, line_end)
            if block is not None:
                end, data = block
                taken.append((line_end, line, end, summarize_report(data, source, host)))
                position = end
                continue
            prefix = host + separator
            while chunk.startswith(prefix, line_end):
                line_end = chunk.find("\n", line_end) + 1 or length
        position = line_end
    return taken


def _around(chunk: str, taken: list[Entry]) -> list[str] | None:
    """The text of `chunk` before each block and after the last; None where it is too much to send."""
    texts: list[str] = []
    position = 0
    for line_end, line, end, _ in taken:
        texts.append(chunk[position:line_end - len(line)])
        position = end
    texts.append(chunk[position:])
    return texts if sum(map(len, texts)) <= len(chunk) // _TEXT_PART else None


class _NoOffset(Exception):
    """A chunk's end is no plain file offset (`TextIOWrapper.tell` with a decoder's state in it)."""


def _chunks_taken(descriptor: int, start: int, stop: int | None, source: str) -> Iterator[tuple[int, int, list[str] | None, list[Entry]]]:
    """Each chunk from `start` (a line start) to `stop`, chunked as the parent would: its start and end
    in the file, the text around its blocks (`_around`) and its blocks (`_blocks_in`)."""
    reader = BlockReader()
    with open_span(descriptor, start, stop, telling=True) as handle:
        for chunk in chunks(handle):
            end = handle.tell()
            if end >> 64:              # (a decoder's state in it: never at a line end)
                raise _NoOffset(f"no file offset after a chunk ending {chunk[-40:]!r}")
            taken = _blocks_in(chunk, source, reader)
            yield start, end, _around(chunk, taken), taken
            start = end


def _take_ahead(descriptor: int, start: int, source: str, send: Callable[[bytes], None]) -> None:
    """The child's work: each chunk from `start`, its blocks and the text around, then a last word."""
    for index, (_, end, texts, taken) in enumerate(_chunks_taken(descriptor, start, None, source)):
        send(_CHUNK_HEAD.pack(index, end) + encode_chunk(texts, taken))
    send(_CHUNK_HEAD.pack(0, 0))
