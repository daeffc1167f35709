"""A host's report taken whole from a chunk of a saved sweep, with C-speed string operations.

A saved sweep mostly holds each host's report as one contiguous block of its own lines; the
collector (`FleetCollector.feed_text`) hands such a block here after its first line, and goes
line by line wherever the block is not plain. The line path is the reference: whatever a
block holds, taking it whole gives what the line path gives (tests/test_fleet_block_guess.py).
"""

from __future__ import annotations

from netdoctor.fleet.bounded import LINE_OVERHEAD, MAX_REPORT_CHARS, Run, decode_report, decode_whole, strip_prefix

# How far around the last block's length a block's close is looked for first (engineering default).
GUESS_SLACK = 2048
# The characters that block tries may look at, per character of the chunk: a block taken costs
# about 3 (found, stripped, counted) and a look around the guess; the rest of the chunk then goes
# line by line. Without a bound, hosts whose lines alternate made each line a look to the end of
# the chunk: a minute for 1 MB. Engineering default.
SCANS_PER_CHAR = 8


class BlockReader:
    """Takes blocks whole for one collector; knows the last block's length and the chunk's scan budget."""

    def __init__(self) -> None:
        self.last_chars = 0     # length of the last block taken whole
        self.scan_left = 0      # characters block tries may still look at in this chunk

    def new_chunk(self, chunk: str) -> None:
        self.scan_left = SCANS_PER_CHAR * len(chunk)

    def take(self, run: Run, chunk: str, position: int) -> tuple[int, object] | None:
        """The end of the run's block and its decoded report, where the block ends in this chunk,
        holds only this host's lines and completes its JSON object; else None (nothing taken: the
        caller goes line by line).

        The block is taken with the newline before it, so that one `str.replace` strips
        every prefix; the number of prefixes it removed, against the number of lines, shows
        that no other host's line is interleaved. Anything else that is not plain (an
        indent=0 object whose inner `}` line ended the block early, a glued `}n4: {` line)
        fails to decode and is left to the line-by-line path that handles it.
        """
        if run.garbled or self.scan_left <= 0:
            return None
        prefix, close = run.prefix, run.close
        if chunk.startswith(close, position):
            end = position + len(close)
        else:
            marker = "\n" + close
            found = -1
            guess = self.last_chars
            if guess:
                # Reports alike are alike in length: first look where the last block ended (a few KiB,
                # not ~20 KiB of pretty lines). A close there that is not the first makes a block that
                # fails to decode whole (two objects) and goes the line path, or one that decodes
                # whole: what the line path makes of it too (no earlier `}` line could end it).
                start = min(len(chunk), max(position, position + guess - GUESS_SLACK))
                stop = min(len(chunk), position + guess + GUESS_SLACK)
                found = chunk.find(marker, start, stop)
                self.scan_left -= (found if found >= 0 else stop) - start
            if found < 0:
                found = chunk.find(marker, position)
                self.scan_left -= (found if found >= 0 else len(chunk)) - position
                if found < 0:
                    return None
            end = found + 1 + len(close)
        # `position` is a line start: after the chunk's start or the previous line's "\n".
        block = chunk[position - 1:end] if position else "\n" + chunk[:end]
        self.scan_left -= 3 * len(block)
        body = block.replace("\n" + prefix, "\n")
        lines = body.count("\n") - 1  # (the shorter text: the same "\n"s)
        if len(block) - len(body) != lines * len(prefix):
            return None
        if run.size + len(block) - 1 + LINE_OVERHEAD * lines > MAX_REPORT_CHARS:   # as the line path counts them
            return None
        pending = strip_prefix(run.lines, prefix) if run.lines else ""
        self.scan_left -= len(pending)
        try:
            data = decode_whole(pending + body, decode_report)
        except ValueError:             # left to the line path, which says why
            return None
        self.last_chars = end - position
        return end, data
