"""Make text from a node safe to print: no byte of it may drive a terminal or break a line.

Device names, netdev names, hostnames and tool output come from the node (or from a
snapshot someone sent). An ESC sequence in one can retitle or clear the operator's
terminal, a CR can overwrite a line, a newline can forge a report line. `safe_text`
spells every such character out (`\\x1b`, `\\n`, `\\u202e`) and leaves everything else
as it is, so ordinary text prints unchanged. Pure: no I/O, no state.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls; lone surrogates (undecodable bytes kept by
# surrogateescape); line/paragraph separators and the bidirectional overrides that
# marks and overrides that reorder what a terminal shows ("Trojan Source").
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _spell(match: re.Match[str]) -> str:
    character = match.group()
    code = ord(character)
    if character in _NAMED:
        return _NAMED[character]
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:   # a byte surrogateescape could not decode: show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def safe_text(value: object) -> str:
    """`value` as text with every control, separator, bidi-override or undecodable
    character written out as an escape. Idempotent: safe text stays as it is."""
    return _UNSAFE.sub(_spell, value if isinstance(value, str) else str(value))
