"""`mlxlink -d DEV -c` parser: a port's physical layer (BER, FEC, per-lane errors) as the firmware counts it.

    Operational Info                                (the layout of MFT 4.24 on a ConnectX-6
    ----------------                                 HDR port; values from several samples)
    State                           : Active
    Speed                           : IB-HDR
    Width                           : 2x
    FEC                             : RS-FEC - (544,514) + PLR
    ...
    Troubleshooting Info
    --------------------
    Status Opcode                   : 0
    Recommendation                  : No issue was observed
    ...
    Physical Counters and BER Info
    ------------------------------
    Time Since Last Clear [Min]     : 2718.1
    Symbol Errors                   : 0               (InfiniBand only)
    Symbol BER                      : 15E-255         (InfiniBand only)
    Effective Physical Errors       : 0
    Effective Physical BER          : 15E-255
    Raw Physical Errors Per Lane    : 3183333,242074
    Raw Physical BER                : 1E-8
    Link Down Counter               : 0
    Link Error Recovery Counter     : 0

The format, from MFT 4.22-4.34 outputs and mstflint's mlxlink (`prepareBerInfo`, `showBer`):
the label column is 32 or 35 characters wide by MFT version, so a line is split at its first
colon; values are wrapped in colour escapes even when piped; a BER is `<coef>E-<magnitude>`
(a 4-bit coefficient and an 8-bit magnitude: `15E-255`, the smallest value the format holds,
is what the firmware reports when it counted no error); per-lane lists are comma-separated,
one entry per active lane; a link that is down prints `N/A`. Every counter runs since the
last clear (`mlxlink -pc`), whose age is `Time Since Last Clear [Min]`: the printed BERs are
averages over that window. Older ConnectX-4/5 print no Symbol lines; Ethernet ports print
none either; either Link counter may be missing: every field is optional.
"""

from __future__ import annotations

import re

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.common import numbered_lines, require_text, screen_tool_errors
from netdoctor.records import record

SOURCE = "mlxlink"
COUNTERS_SECTION = "Physical Counters and BER Info"
_BER = re.compile(r"(?P<coef>[0-9]{1,2}(?:\.[0-9]{1,6})?)E-(?P<magnitude>[0-9]{1,3})")
_COUNT = re.compile(r"[0-9]{1,20}")
_U64_MAX = (1 << 64) - 1
# The value the 4-bit coefficient and 8-bit magnitude give when nothing was counted.
_NOTHING_COUNTED = (15.0, 255)
_WIDTH = re.compile(r"(?P<lanes>[0-9]{1,2})x", re.IGNORECASE)
_MESSAGE = re.compile(r"^-[EWI]-\s")


@record(frozen=True)
class PhyCounters:
    """One port's physical layer. BERs are floats (0.0 where nothing was counted); None: not printed or N/A."""

    state: str | None = None                 # Active | Polling | ...
    speed: str | None = None                 # IB-NDR, 400G, 100G
    lanes: int | None = None                 # Width 4x -> 4
    fec: str | None = None                   # "Standard_RS-FEC - (544,514)", "No FEC"
    status_opcode: int | None = None         # firmware's troubleshooting verdict: 0 = no issue
    recommendation: str | None = None        # the firmware's text for that opcode
    since_clear_s: float | None = None       # Time Since Last Clear, in seconds
    symbol_errors: int | None = None
    symbol_ber: float | None = None
    effective_errors: int | None = None      # errors left after FEC
    effective_ber: float | None = None
    raw_errors_per_lane: tuple[int, ...] | None = None   # errors before FEC, per active lane
    raw_ber: float | None = None
    raw_ber_per_lane: tuple[float, ...] | None = None
    link_down: int | None = None
    link_error_recovery: int | None = None
    firmware: str | None = None
    source: str = SOURCE


def _ber(text: str) -> float:
    match = _BER.fullmatch(text)
    if match is None:
        raise ValueError(f"not a BER in mlxlink's <coef>E-<magnitude> form: {text[:40]!r}")
    coefficient, magnitude = float(match.group("coef")), int(match.group("magnitude"))
    if coefficient > 15 or magnitude > 255:
        # The register holds a 4-bit coefficient and an 8-bit magnitude.
        raise ValueError(f"BER {text[:40]!r} is outside what mlxlink can print (coefficient 0-15, magnitude 0-255)")
    if (coefficient, magnitude) == _NOTHING_COUNTED:
        return 0.0
    return coefficient * 10.0 ** -magnitude


def parse_ber(text: str) -> float:
    """`2E-9` -> 2e-09; `15E-255` (nothing counted) -> 0.0; ParseError otherwise."""
    try:
        return _ber(text)
    except ValueError as error:
        raise ParseError(SOURCE, str(error), 0, text[:200]) from None


def _integer(text: str) -> int:
    if not _COUNT.fullmatch(text) or int(text) > _U64_MAX:
        raise ValueError(f"not a 64-bit counter: {text[:40]!r}")
    return int(text)


def _lanes(text: str, read: type[int] | type[float]) -> tuple:
    values = text.split(",")
    return tuple(_integer(value) if read is int else _ber(value) for value in values)


def _minutes(text: str) -> float:
    if not re.fullmatch(r"[0-9]{1,12}(?:\.[0-9]{1,3})?", text):
        raise ValueError(f"not a time in minutes: {text[:40]!r}")
    minutes = float(text)
    if not minutes >= 0:
        raise ValueError(f"not a time in minutes: {text!r}")
    return minutes * 60.0


def _opcode(text: str) -> int:
    return _integer(text)


def _width(text: str) -> int | None:
    """`4x` -> 4; a width in another form is not known (no rule needs mlxlink's: sysfs gives it)."""
    match = _WIDTH.fullmatch(text)
    return int(match.group("lanes")) if match else None


# label -> (field, reader); the reader raises ValueError on a malformed value.
_FIELDS = {
    "State": ("state", str),
    "Speed": ("speed", str),
    "Width": ("lanes", _width),
    "FEC": ("fec", str),
    "Status Opcode": ("status_opcode", _opcode),
    "Recommendation": ("recommendation", str),
    "Firmware Version": ("firmware", str),
    "Time Since Last Clear [Min]": ("since_clear_s", _minutes),
    "Symbol Errors": ("symbol_errors", _integer),
    "Symbol BER": ("symbol_ber", _ber),
    "Effective Physical Errors": ("effective_errors", _integer),
    "Effective Physical BER": ("effective_ber", _ber),
    "Raw Physical Errors Per Lane": ("raw_errors_per_lane", lambda text: _lanes(text, int)),
    "Raw Physical BER": ("raw_ber", _ber),
    "Raw Physical BER Per Lane": ("raw_ber_per_lane", lambda text: _lanes(text, float)),
    "Link Down Counter": ("link_down", _integer),
    "Link Error Recovery Counter": ("link_error_recovery", _integer),
}
_COUNTER_FIELDS = frozenset({"since_clear_s", "symbol_errors", "symbol_ber", "effective_errors", "effective_ber",
                             "raw_errors_per_lane", "raw_ber", "raw_ber_per_lane", "link_down",
                             "link_error_recovery"})


def parse_mlxlink_counters(text: str) -> PhyCounters:
    """The Operational, Troubleshooting and Physical Counters sections of `mlxlink -c`.

    Other sections (Supported Info, Module Info with `-m`) are read past. A value that is
    present but malformed is a ParseError naming the line; `N/A` is None.
    """
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    values: dict[str, object] = {}
    labels: set[str] = set()
    seen_section = False
    errors: list[tuple[int, str]] = []
    for number, line in numbered_lines(text):
        stripped = line.strip()
        if stripped == COUNTERS_SECTION:
            seen_section = True
            continue
        if _MESSAGE.match(stripped):
            if stripped.startswith("-E-"):
                errors.append((number, stripped))
            continue
        key, colon, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not colon or key not in _FIELDS or key in labels:
            continue          # titles, dashes, other sections; the first reading of a label stands
        labels.add(key)
        name, read = _FIELDS[key]
        if not value or value == "N/A":
            continue
        try:
            values[name] = read(value)
        except ValueError as error:
            raise ParseError(SOURCE, f"{key}: {error}", number, line) from None
    if not seen_section and not any(name in _COUNTER_FIELDS for name in values):
        if errors:
            number, message = errors[0]
            raise ParseError(SOURCE, f"tool error: {message}", number, message)
        raise NothingToParse(SOURCE, f"no '{COUNTERS_SECTION}' section: not the output of mlxlink -c")
    return PhyCounters(**values)  # type: ignore[arg-type]
