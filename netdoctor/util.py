"""Small helpers shared by every layer: UTC timestamps, PCI addresses, imports."""

from __future__ import annotations

import datetime as dt
import importlib
import math
import re
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")

# A PCI function address as sysfs spells it: domain:bus:device.function, lower-case hex.
PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def utc_now_iso() -> str:
    """Now, in UTC, to the second: `2026-11-21T22:40:00Z` (the report and snapshot form)."""
    return iso_utc(dt.datetime.now(dt.timezone.utc))


def iso_utc(moment: dt.datetime) -> str:
    """An aware time in the report and snapshot form, to the second: `2026-11-21T22:40:00Z`."""
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ISO 8601's extended form, parsed here rather than by datetime.fromisoformat so that every
# Python reads the same times: 3.10's refuses `Z` and fractions other than 3 or 6 digits.
# Compiled on first use (re's cache), not at import.
_ISO_TIME = (r"(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2})(?::(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?)?"
             r"(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_iso_utc(text: str) -> dt.datetime:
    """Parse an ISO 8601 time (`2026-11-21T22:40:00Z`, `...T23:40:00.5+01:00`); a time without
    zone is taken as UTC.

    Raises ValueError with the offending text when it does not parse.
    """
    found = re.fullmatch(_ISO_TIME, text.strip(), re.ASCII | re.IGNORECASE) if isinstance(text, str) else None
    try:
        if found is None:
            raise ValueError("not the extended ISO 8601 form")
        year, month, day, hour, minute, second, fraction, zone = found.groups()
        offset = dt.timedelta()
        if zone and zone.upper() != "Z":
            digits = zone[1:].replace(":", "")
            offset = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0)) * (-1 if zone[0] == "-" else 1)
        return dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                           int((fraction or "")[:6].ljust(6, "0")), dt.timezone(offset)).astimezone(dt.timezone.utc)
    except (ValueError, OverflowError) as error:     # OverflowError: out of range once in UTC
        raise ValueError(f"not an ISO 8601 time: {text!r}") from error


def canonical_pci_address(text: str) -> str | None:
    """`00000000:18:00.0` (NVML) or `0000:18:00.0` or `18:00.0` -> `0000:18:00.0`; None if not one.

    NVML pads the domain to 8 hex digits, sysfs and lspci use 4; the domain is 16 bits
    on every platform netdoctor cares about, so the extra leading zeros are dropped.
    """
    value = text.strip().lower()
    if re.fullmatch(r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", value):
        value = "0000:" + value
    if not PCI_ADDRESS_RE.match(value):
        return None
    domain, rest = value.split(":", 1)
    domain_number = int(domain, 16)
    if domain_number > 0xFFFF:
        return f"{domain_number:08x}:{rest}"
    return f"{domain_number:04x}:{rest}"


def import_without_rich(name: str) -> ModuleType:
    """Import `name` while `rich` looks absent, so the module takes its plain fallback.

    typer (help screens) and structlog (tracebacks) import rich, and with it pygments, at
    import time: ~50 ms of every run, for output netdoctor does not print. A None entry in
    sys.modules makes `import rich` raise ImportError; it is removed again at once.
    """
    if name in sys.modules or "rich" in sys.modules:
        return importlib.import_module(name)
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        return importlib.import_module(name)
    finally:
        del sys.modules["rich"]


# `\d` is a decimal digit (Unicode Nd), as int() takes them; not `²`, a digit int() refuses (a
# node's version string may hold one).
_SPLIT_NUMBERS = re.compile(r"(\d+)").split


def natural_key(name: str) -> tuple[int | float | str, ...]:
    """Sort key that puts `mlx5_10` after `mlx5_9`, not between `mlx5_1` and `mlx5_2` as tools list them."""
    parts: list[int | float | str] = _SPLIT_NUMBERS(name)   # text, number, text, ..., text
    try:
        parts[1::2] = map(int, parts[1::2])
    except ValueError:
        # More digits than int() converts (`sys.get_int_max_str_digits()`, 4,300 by default; a
        # hostile node's name): such a number sorts after every other.
        limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
        parts[1::2] = [int(part) if not limit or len(part) <= limit else math.inf for part in parts[1::2]]
    return tuple(parts)


def cut_text(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and how many more there were: what a finding may
    quote of a value from the node, however long that value is."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def listed(items: list[str], limit: int, *, total: int | None = None) -> str:
    """`a, b, c` or `a, b, c and 9,997 more`: the first `limit` of `items` (`total`: their
    number, where not all were kept)."""
    count = len(items) if total is None else total
    shown = items[:limit]
    text = ", ".join(shown)
    return f"{text} and {count - len(shown):,} more" if count > len(shown) else text


def duration_text(seconds: float) -> str:
    """A span for people: 45 s, 10 min, 1.5 h."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 90:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


class DeadlineExceeded(Exception):
    """The caller stopped waiting for a `Background` (call_with_deadline)."""


class Background:
    """`function` running in a daemon thread from now on; `result` waits for it.

    A daemon thread because a hung NVML call or tool read cannot be interrupted: the caller
    stops waiting for it, and the process exits without joining it.
    """

    def __init__(self, name: str, function: Callable[[], Any]) -> None:
        self._box: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(function,), name=name, daemon=True)
        self._thread.start()

    def _run(self, function: Callable[[], Any]) -> None:
        try:
            self._box["value"] = function()
        except BaseException as error:  # handed to the caller's thread in `result`
            self._box["error"] = error

    def result(self, wait_until: float | None) -> Any:
        """What `function` returned or raised; DeadlineExceeded when it had not ended by
        `wait_until` (monotonic; None: wait for it)."""
        self._thread.join(None if wait_until is None else max(0.0, wait_until - time.monotonic()))
        if self._thread.is_alive():
            raise DeadlineExceeded(self._thread.name)
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


def call_with_deadline(name: str, function: Callable[[], T], wait_until: float) -> T:
    """Run `function` in a daemon thread; give up waiting at `wait_until` (monotonic)."""
    return Background(name, function).result(wait_until)

def is_terminal(stream: Any) -> bool:
    """Is `stream` a terminal? A stream without isatty, or a closed one, is not."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
