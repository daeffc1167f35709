"""Text from nodes made safe to print: control characters shown, never sent to a terminal."""

from __future__ import annotations

import re

# C0 controls (ESC, BEL, CR, newline, ...), DEL, C1 controls (the 8-bit CSI is one), the
# bidirectional overrides that reorder what a reader sees, line/paragraph separators, and
# lone surrogates (a JSON `\ud800` escape), which no UTF-8 terminal or page can take.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with each unsafe character written as a `\\xNN` / `\\uNNNN` escape."""
    return _UNSAFE.sub(_escape, text)
