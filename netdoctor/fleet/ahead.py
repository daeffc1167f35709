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
whole. Where the child is not there yet (a loaded machine) or gone, the parent reads the rest
itself, from the end of the last chunk it had, and ends the child. (A file rewritten in place
while it is read gives a mix of its versions, read whole or in halves.)
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Mapping
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
# at least two chunks (less, it reads the rest itself), and at most eight chunks at a time (their
# summaries wait in memory until fed). Engineering defaults.
_MIN_TAKEN_BYTES = 2 * CHUNK_CHARS
_MAX_TAKEN_BYTES = 8 * CHUNK_CHARS

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
        with open_span(descriptor, 0, split) as first:
            collector.feed_text(chunks(first), source)
        _SecondPart(collector, descriptor, source, work).feed(split, size)
    finally:
        work.close()
    return True


class _SecondPart:
    """The parent's side of the part from the split: each chunk the child sent fed in order. Where
    the child is not there yet (a slower or loaded CPU under it), this process takes the last half
    of what the child has left (up to `_MAX_TAKEN_BYTES`), its blocks taken as the child takes
    them, to feed after the child's; and so on, until the two meet: both CPUs work to the end."""

    def __init__(self, collector: _Collector, descriptor: int, source: str, work: ForkedWork) -> None:
        self._collector, self._descriptor, self._source, self._work = collector, descriptor, source, work
        # The chunks this process took from the end, each (start, end, texts around, blocks), in order.
        self._taken_here: list[tuple[int, int, list[str] | None, list[Entry]]] = []

    def feed(self, start: int, size: int) -> None:
        """The file from `start` (a line start), `size` its size when read began, fed to its end."""
        offset, bound, index = start, size, 0     # the child's next chunk; where those taken here begin
        while offset < bound:
            message = self._work.next_message()
            if message is None:
                middle = self._take_last_half(offset, bound)
                if middle is None:
                    break
                bound = middle
                continue
            sent, end = _CHUNK_HEAD.unpack_from(message)
            if sent != index or len(message) == _CHUNK_HEAD.size:   # (the child's last word: no chunk left)
                break
            texts, taken = decode_chunk(memoryview(message)[_CHUNK_HEAD.size:])
            # A chunk across `bound` is fed to it from the file, its blocks there used where they fit.
            self._feed(offset, min(end, bound), texts if end <= bound else None, taken)
            offset, index = min(end, bound), index + 1
        self._work.close()
        with open_span(self._descriptor, offset, bound) as rest:      # what neither has taken
            self._collector.feed_text(chunks(rest), self._source)
        for chunk_start, end, texts, taken in self._taken_here:
            self._feed(chunk_start, end, texts, taken)
        with open_span(self._descriptor, size) as grown:              # (a file still growing)
            self._collector.feed_text(chunks(grown), self._source)

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

    def _take_last_half(self, offset: int, bound: int) -> int | None:
        """Takes the chunks from a line start about half-way from `offset` to `bound` (at most
        `_MAX_TAKEN_BYTES` before `bound`) to `bound`, to be fed after those before; that line
        start, or None where too little is left (or no line starts there)."""
        if bound - offset < _MIN_TAKEN_BYTES:
            return None
        middle = _line_start(self._descriptor, max(offset + (bound - offset) // 2, bound - _MAX_TAKEN_BYTES))
        if middle is None or middle >= bound:
            return None
        reader, taken_here, start = BlockReader(), [], middle
        with open_span(self._descriptor, middle, bound, telling=True) as handle:
            for chunk in chunks(handle):
                end = handle.tell()
                if end >> 64:          # (never at a line end, as `_take_ahead` says)
                    return None
                taken = _blocks_in(chunk, self._source, reader)
                taken_here.append((start, end, _around(chunk, taken), taken))
                start = end
        self._taken_here[:0] = taken_here
        return middle


def _line_start(descriptor: int, offset: int) -> int | None:
    """A line start at or after `offset`, between two reports where there is one in `_WINDOW_BYTES`;
    None where no line starts there."""
    window = read_at(descriptor, offset, _WINDOW_BYTES)
    between = _BETWEEN_REPORTS.search(window)
    if between is not None:
        return offset + between.end()
    newline = window.find(b"\n")
    return offset + newline + 1 if newline >= 0 else None


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


def _take_ahead(descriptor: int, start: int, source: str, send: Callable[[bytes], None]) -> None:
    """The child's work: each chunk from `start`, chunked as the parent would, its blocks and the text around."""
    reader = BlockReader()
    with open_span(descriptor, start, telling=True) as handle:
        for index, chunk in enumerate(chunks(handle)):
            end = handle.tell()
            if end >> 64:              # (a decoder's state in it: not at a line end; the parent reads on itself)
                return
            taken = _blocks_in(chunk, source, reader)
            send(_CHUNK_HEAD.pack(index, end) + encode_chunk(_around(chunk, taken), taken))
    send(_CHUNK_HEAD.pack(0, 0))
