"""Reading what nodes send within fixed bounds: line length, report size, JSON numbers and depth.

One node's output, however long its lines, large its report or deep its JSON, costs the
fleet report a bounded amount of memory and never an exception.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import TextIO

# The most of one node's report that is read (a DGX-class report is ~0.3 MiB pretty-printed);
# also the longest line kept: a longer one is cut there (its rest read and dropped).
MAX_REPORT_CHARS = 16 << 20
# Reading a file goes in pieces of about this many characters, each ending at a line end.
CHUNK_CHARS = 1 << 22


class BadJson(ValueError):
    """JSON that is complete but not acceptable: non-finite numbers, too deep, too long a number."""


def _reject_constant(name: str) -> float:
    raise BadJson(f"non-finite number {name}")


# JSON's NaN/Infinity extensions are refused (they are not JSON, and break every renderer).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def raw_decode(text: str, position: int = 0) -> tuple[object, int]:
    """The JSON value starting at `position` (after blanks) and where it ends.

    Raises `json.JSONDecodeError` for incomplete or broken JSON (more lines may still
    complete it) and `BadJson` for JSON that no more text can make acceptable.
    """
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    try:
        return _DECODER.raw_decode(text, position)
    except json.JSONDecodeError:
        raise
    except BadJson:
        raise
    except RecursionError as error:
        raise BadJson("JSON nested deeper than the fleet reader takes") from error
    except ValueError as error:       # an integer of more digits than Python converts
        raise BadJson(str(error)) from error


def decode_whole(text: str) -> object:
    """`text` as exactly one JSON value; `json.JSONDecodeError` names what follows it."""
    data, end = raw_decode(text)
    rest = text[end:].strip()
    if rest:
        raise json.JSONDecodeError("Extra data", text, end)
    return data


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
    than `limit` is cut there. `head`: what was already read of it."""
    while True:
        chunk = head + handle.read(CHUNK_CHARS)
        head = ""
        if not chunk:
            return
        if not chunk.endswith("\n"):
            tail = handle.readline(limit)
            if not tail.endswith("\n") and len(tail) >= limit:
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
