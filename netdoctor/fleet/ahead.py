"""A large saved sweep read in two halves: the second half's blocks taken by a forked child ahead.

Most of `fleet report sweep.out` goes to taking each host's block whole (`fleet.blocks`: the
prefixes stripped, the report decoded and summarized), ~70 % of 1.9 s for 10,000 pretty-printed
nodes on the 2-core VM. A child forked at the start takes the blocks of the file's second half
while the parent reads the first, and sends each block's summary, with the block's first line
and end, per chunk (`fleet.wire`). The parent then reads the second half as ever, line by line and block by
block; where its run at a block is the one the child assumed there (the host's fresh run of just
that first line), it takes the child's summary instead of doing the same work on the same text
again. Verdicts, order and the report's memory budget are the parent's, the same as read whole.
Wherever the child is not there yet (a loaded machine) or gone, the parent does the work itself,
and ends the child. (A file rewritten in place while it is read gives a mix of its versions,
read whole or in halves.)
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from netdoctor.fleet.blocks import BlockReader
from netdoctor.fleet.bounded import Run, chunks
from netdoctor.fleet.model import NodeSummary, summarize_report
from netdoctor.fleet.wire import decode_summaries, encode_summaries
from netdoctor.host.files import open_span, read_at, regular_size
from netdoctor.host.forked import ForkedWork, fork_work

# Smaller sweeps are read in one piece: a fork costs ~10 ms and 10,000 one-line reports are ~100 MB
# (engineering default).
MIN_SPLIT_BYTES = 32 << 20
# The parent's share of the file: it reads the rest too, at about a quarter of the cost where the
# child took the blocks, so it reaches the second half about when the child is done (measured on
# the 2-core VM: benchmarks/results/fleet.md). Where the second half starts is looked for in
# `_WINDOW_BYTES` there. Engineering defaults.
PARENT_SHARE = 0.45
_WINDOW_BYTES = 1 << 16
# A line start after a host's `}` line and before another's `{...` line: where one report most
# likely ended and another begins (other hosts' reports may still be open: the parent's check
# at each block makes that safe).
_BETWEEN_REPORTS = re.compile(rb"\n[^\s:]+: \}\n(?=[^\s:]+: \{)")
_CHUNK_INDEX = struct.Struct("<I")

# One block the child took: its first line (the parent's run must be just that line), where it
# ends in the chunk, and its summary; by the position of the line after the first.
Taken = tuple[str, int, NodeSummary]


class _Collector(Protocol):
    def feed_text(self, chunks: Iterable[str], source: str = "",
                  taken_ahead: Callable[[int], Mapping[int, Taken] | None] | None = None) -> None: ...


def feed_in_halves(collector: _Collector, descriptor: int, source: str) -> bool:
    """The open file `descriptor` fed to `collector` from its start, the second half's blocks
    taken ahead by a child; False (nothing fed) where it is not worth it or no fork is made."""
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
        with open_span(descriptor, split) as second:
            collector.feed_text(chunks(second), source, _Ahead(work).blocks)
    finally:
        work.close()
    return True


def _blocks_in(chunk: str, source: str, reader: BlockReader) -> list[tuple[int, str, int, NodeSummary]]:
    """The blocks of `chunk` that `reader` takes whole after a line that opens a report, each by the
    position after that line. Where none is taken, the host's next lines are skipped, as the parent
    appends them to its run."""
    taken: list[tuple[int, str, int, NodeSummary]] = []
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


def _take_ahead(descriptor: int, start: int, source: str, send: Callable[[bytes], None]) -> None:
    """The child's work: each chunk's blocks from `start`, chunked as the parent will."""
    reader = BlockReader()
    with open_span(descriptor, start) as handle:
        for index, chunk in enumerate(chunks(handle)):
            send(_CHUNK_INDEX.pack(index) + encode_summaries(_blocks_in(chunk, source, reader)))


class _Ahead:
    """The parent's side: the child's blocks of each chunk, while it keeps ahead."""

    def __init__(self, work: ForkedWork) -> None:
        self._work = work

    def blocks(self, index: int) -> dict[int, Taken] | None:
        """The blocks of the second half's chunk `index`, asked in order; None once the child
        falls behind (it is then ended: the parent, there first, does the rest itself)."""
        while (message := self._work.next_message()) is not None:
            (sent,) = _CHUNK_INDEX.unpack_from(message)
            if sent == index:
                return decode_summaries(memoryview(message)[_CHUNK_INDEX.size:])
        self._work.close()
        return None
