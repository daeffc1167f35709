"""Reading what nodes send within fixed bounds: line length, report size, JSON numbers and depth.

One node's output, however long its lines, large its report or deep its JSON, costs the
fleet report a bounded amount of memory and never an exception.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from typing import TextIO

# The most of one node's report that is read (a DGX-class report is ~0.3 MiB pretty-printed);
# also the longest line kept: a longer one is cut there (its rest read and dropped).
MAX_REPORT_CHARS = 16 << 20
# Reading a file goes in pieces of about this many characters, each ending at a line end.
CHUNK_CHARS = 1 << 22
# The most that the reports still open (pdsh interleaves hosts) may hold together, and what
# each line held costs beside its text (its str object), counted towards both bounds.
# Engineering default: four reports at the per-node limit.
PENDING_BUDGET_CHARS = 64 << 20
LINE_OVERHEAD = 64


class BadJson(ValueError):
    """JSON that is complete but not acceptable: non-finite numbers, too deep, too long a number."""


class TooLarge(BadJson):
    """JSON of more values than any report has: decoded, it would cost more memory than a node may."""


def _reject_constant(name: str) -> float:
    raise BadJson(f"non-finite number {name}")


# JSON's NaN/Infinity extensions are refused (they are not JSON, and break every renderer).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)

# A text longer than this is counted before it is decoded: decoded, a JSON value costs up to
# ~100 bytes per value (`[[],[],...]`: 64 bytes per 3 characters), so a 16 MiB report could
# take 400 MiB. A netdoctor report holds ~4,000 values (an 8-GPU node's is 60-100 KB); one
# over `MAX_JSON_VALUES` (counted as its `,`, `[` and `{`) is `TooLarge`, never decoded.
# Engineering defaults: the largest real report (hgx-b300, 98 KB pretty) is ~60x under both.
_COUNTED_FROM = 1 << 20
MAX_JSON_VALUES = 1 << 18

# msgspec, where installed, decodes the nodes' JSON ~2x faster than `json` (benchmarks/results/
# fleet.md). Only its successes are taken: whatever it refuses is decoded again by `json`, which
# says why or takes what msgspec would not (`1e400`, lone surrogates), so results and messages
# are `json`'s. It is called a few frames deeper than `json`'s scanner: both count nesting
# against the interpreter's recursion limit, so msgspec gives up first and `json` decides
# about deep nesting too (tests/test_fleet_report_decoder.py).
try:
    from msgspec.json import Decoder as _FastDecoder
except ImportError:                   # the standard library alone: same results, slower
    _FastDecoder = None
FAST_DECODER = "msgspec" if _FastDecoder is not None else None
_fast = _FastDecoder().decode if _FastDecoder is not None else None
_FAST_MARGIN_FRAMES = 4


def _deeper(decode: Callable[[str], object], text: str, frames: int = _FAST_MARGIN_FRAMES) -> object:
    """`decode(text)` called `frames` frames deeper than here (see above)."""
    return _deeper(decode, text, frames - 1) if frames else decode(text)


def _plain_decode(data: bytes) -> object:
    """Small JSON (a finding's raw `evidence`) as `decode_first` would take it; raises where it would not."""
    if _fast is not None:
        try:
            return _fast(data)
        except Exception:              # noqa: BLE001  (json decides)
            pass
    return _DECODER.decode(data.decode())


# A whole report, plain, decoded into typed Structs, its findings' evidence left unread
# (netdoctor.fleet.typed): 0.48 -> 0.25-0.30 s for 10,000 honest reports (benchmarks/results/fleet.md).
def _typed_decoder() -> Callable[[str], object] | None:
    if _FastDecoder is None:
        return None
    from netdoctor.fleet.model import METRIC_CHECKS
    from netdoctor.fleet.typed import typed_decoder
    return typed_decoder(_plain_decode, METRIC_CHECKS)


_typed = _typed_decoder()


def use_fast_decoder(enabled: bool) -> None:
    """Decode with msgspec (where installed) or with `json` alone (tests compare the two)."""
    global _fast, _typed
    _fast = _FastDecoder().decode if enabled and _FastDecoder is not None else None
    _typed = _typed_decoder() if enabled else None


def _count(text: str) -> None:
    if len(text) > _COUNTED_FROM:
        values = text.count(",") + text.count("[") + text.count("{")
        if values > MAX_JSON_VALUES:
            raise TooLarge(f"more than {MAX_JSON_VALUES:,} JSON values ({values:,})")


def decode_first(text: str, position: int = 0) -> tuple[object, str]:
    """The JSON value at `position` of `text` (after blanks) and the text after it.

    Raises `json.JSONDecodeError` for incomplete or broken JSON (more lines may still
    complete it), `BadJson` for JSON that no more text can make acceptable and `TooLarge`
    (a `BadJson`) for more values than a report has.
    """
    _count(text)
    if _fast is not None:
        try:
            return _deeper(_fast, text[position:] if position else text), ""  # type: ignore[arg-type]
        except Exception:              # noqa: BLE001  (`json` below says what is wrong, if anything)
            pass
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    try:
        data, end = _DECODER.raw_decode(text, position)
    except json.JSONDecodeError:
        raise
    except BadJson:
        raise
    except RecursionError as error:
        raise BadJson("JSON nested deeper than the fleet reader takes") from error
    except ValueError as error:       # an integer of more digits than Python converts
        raise BadJson(str(error)) from error
    return data, text[end:]


def decode_report(text: str, position: int = 0) -> tuple[object, str]:
    """`decode_first` for what should be a node's report, to be summarized
    (`model.summarize_report`): a plain one is decoded into typed Structs (netdoctor.fleet.typed),
    its findings' evidence left unread; anything else as `decode_first` decodes it."""
    if _typed is not None and len(text) <= _COUNTED_FROM:
        try:
            return _deeper(_typed, text[position:] if position else text), ""
        except Exception:              # noqa: BLE001  (not plain: decode_first says what it is)
            pass
    return decode_first(text, position)


def plain_report(data: bytes) -> object | None:
    """A report file's bytes decoded as `decode_report` takes a plain one (netdoctor.fleet.typed),
    without making text of them first; None where it would not (invalid UTF-8 too): the file is
    then read as text, as any other."""
    if _typed is None or len(data) > _COUNTED_FROM:
        return None
    try:
        return _deeper(_typed, data)       # type: ignore[arg-type]
    except Exception:                  # noqa: BLE001
        return None


def decode_whole(text: str, first: Callable[[str], tuple[object, str]] = decode_first) -> object:
    """`text` as exactly one JSON value; `json.JSONDecodeError` names what follows it.
    `first`: `decode_first`, or `decode_report` for a node's report."""
    data, rest = first(text)
    if rest.strip():
        end = len(text) - len(rest)
        raise json.JSONDecodeError("Extra data", text, end)
    return data


def refused_json(error: BadJson) -> str:
    """Why a node whose JSON is refused is `invalid`: too large, or not valid JSON."""
    return f"too large: {error}" if isinstance(error, TooLarge) else f"not valid JSON ({error})"


def describe_json_error(error: ValueError) -> str:
    """`Expecting value at line 1 column 1`: some of json's messages already end in
    "at" (`Invalid control character at`), meant to be followed by the position."""
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg.removesuffix(' at')} at line {error.lineno} column {error.colno}"
    return str(error)


def exact_lines(stream: TextIO) -> TextIO:
    """`stream` read with lines ending only at "\n", as pdsh and clush cut them.

    Python's text streams end lines at a lone "\r" too (universal newlines): a node that
    prints `x\rn2: {...}` would then start a line that seems to come from n2.
    """
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        return stream
    return io.TextIOWrapper(buffer, encoding="utf-8", errors="replace", newline="\n")


def bounded_lines(handle: TextIO, limit: int = MAX_REPORT_CHARS) -> Iterator[str]:
    """The lines of a stream, each ending in a newline; a longer line than `limit` is cut."""
    while True:
        line = handle.readline(limit)
        if not line:
            return
        if not line.endswith("\n"):
            if len(line) >= limit:
                _skip_to_line_end(handle, limit)
            line += "\n"
        yield line


def chunks(handle: TextIO, limit: int = MAX_REPORT_CHARS, head: str = "") -> Iterator[str]:
    """A file in pieces of about `CHUNK_CHARS`, each ending at a line end; a line longer
    than `limit` is cut there (as `bounded_lines` cuts it: wherever the pieces end, so that
    a file read in other pieces, `fleet.ahead`, reads the same). `head`: what was already read of it."""
    while True:
        chunk = head + handle.read(CHUNK_CHARS)
        head = ""
        if not chunk:
            return
        if not chunk.endswith("\n"):
            room = max(1, limit - (len(chunk) - 1 - chunk.rfind("\n")))   # what the line may still take
            tail = handle.readline(room)
            if not tail.endswith("\n") and len(tail) >= room:
                _skip_to_line_end(handle, limit)
            chunk += tail if tail.endswith("\n") else tail + "\n"
        yield chunk


def read_head(handle: TextIO, limit: int = MAX_REPORT_CHARS) -> tuple[str, bool]:
    """At most `limit` characters of a stream, and whether there was more."""
    text = handle.read(limit)
    return text, bool(handle.read(1))


def _skip_to_line_end(handle: TextIO, limit: int) -> None:
    while True:
        rest = handle.readline(limit)
        if not rest or rest.endswith("\n"):
            return


# A run is tried at its first `}` lines whatever its brackets (a report printed with indent=0
# closes an inner object at column 0 a few times); after these, as `Run.try_close` says.
# Engineering default.
FREE_CLOSE_TRIES = 8
# A JSON string, or the rest of its line where it does not end there (always a match, so that
# the search never starts again at each `"` of a long line); and what is not a bracket.
_STRING = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"?')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class Run:
    """The host whose JSON object is being reassembled from consecutive lines.

    A pretty-printed object closes with `}` at column 0, so `brace` (`host: }`, a line
    without its newline) and `close` (the same with it) are the only lines that can end it.
    Each such line is a try to decode the lines so far, where `try_close` says so.
    """

    __slots__ = ("host", "prefix", "brace", "close", "lines", "source", "blocks", "size",
                 "tries", "garbled", "depth", "scanned")

    def __init__(self, host: str, lines: list[str], source: str) -> None:
        self.host = host
        self.prefix = f"{host}: "
        self.brace = f"{host}: }}"
        self.close = f"{host}: }}\n"
        self.lines = lines
        self.source = source
        self.blocks = True             # False once interleaved: `feed_text` then goes line by line
        self.size = sum(map(len, lines)) + LINE_OVERHEAD * len(lines)
        self.tries = 0                 # decodes tried at its `}` lines
        self.garbled = False           # broken before its end: no line to come can mend it
        self.depth = 0                 # brackets open outside strings in `lines[:scanned]`
        self.scanned = 0

    def try_close(self) -> bool:
        """Whether to try to decode the lines so far (the try is counted): the first tries, then
        only where the first value's brackets outside strings may have closed; never once `garbled`.

        Every `}` line used to re-read the whole run: a node that printed `{`, then `"k": {`
        and `}` line after line, took hours to read at 16 MiB. The depth is exact for a valid
        beginning of JSON, which has no string across a line end; text that is not one is found
        `garbled` at a try, or at the end (what a skipped try would have said first, a
        `NaN` or a nesting too deep, may then be said by another reason: `invalid` either way).
        Lines end in "\n" (or none does, as some tests feed them); where a line without one is
        last, its string may go on in the next: a try is made.
        """
        if self.garbled:
            return False
        if self.tries >= FREE_CLOSE_TRIES and self.depth >= 0:
            new = self.lines[self.scanned:]
            newlines = self.lines[0].endswith("\n")     # (how the whole run's lines are joined)
            if not newlines or (new and new[-1].endswith("\n")):
                self.scanned = len(self.lines)
                if not self._may_have_closed(strip_prefix(new, self.prefix, newlines) if new else ""):
                    return False
        self.tries += 1
        return True

    def _may_have_closed(self, text: str) -> bool:
        """`text` follows `lines[:scanned]`: whether the brackets outside strings reach depth 0 in it."""
        brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
        closing = brackets.count("}") + brackets.count("]")
        if self.depth > closing:       # cannot reach 0 in these lines
            self.depth += len(brackets) - 2 * closing
            return False
        for bracket in brackets:
            self.depth += 1 if bracket in "{[" else -1
            if self.depth <= 0:
                self.depth = -1        # closed (or broken): every try from now on
                return True
        return False


def strip_prefix(lines: list[str], prefix: str, newlines: bool | None = None) -> str:
    """The text of `host: ` prefixed lines without the prefixes, in one C-speed pass.
    `newlines`: whether the lines end in "\n" (joined as they are) or not (joined with one);
    by default as the first line says.

    A real newline followed by the prefix only occurs at a line start: JSON escapes
    newlines inside strings.
    """
    joined = "".join(lines) if (lines[0].endswith("\n") if newlines is None else newlines) else "\n".join(lines)
    return joined[len(prefix):].replace("\n" + prefix, "\n")
