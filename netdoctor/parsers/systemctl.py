"""`systemctl show UNIT -p ActiveState,SubState,Result,NRestarts,ActiveEnterTimestamp,UnitFileState` parser.

systemctl prints `Key=value` lines in its own order, not the order asked. A unit systemd
does not know still prints `ActiveState=inactive`, `SubState=dead` and an empty timestamp
(and `NRestarts` only from systemd 235 on): the caller tells "not installed" from "stopped"
by what it asked for, never by an error here. `UnitFileState` (enabled, disabled, masked, ...;
empty for a unit that is not installed) was added in netdoctor 0.3: older captures lack it (None).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from netdoctor.errors import ParseError
from netdoctor.parsers.common import numbered_lines, require_text
from netdoctor.records import record

SOURCE = "systemctl-show"
_KEYS = ("ActiveState", "SubState", "Result", "NRestarts", "ActiveEnterTimestamp", "UnitFileState")


@record(frozen=True)
class UnitState:
    active_state: str | None
    sub_state: str | None
    result: str | None
    restarts: int | None
    active_since: datetime | None     # UTC; None when never active (empty timestamp)
    unit_file_state: str | None = None   # enabled | disabled | masked | ...; None: not installed, or not asked


def parse_systemctl_show(text: str) -> UnitState:
    """`ActiveState=active` ... -> UnitState. ParseError when no asked-for key is present."""
    require_text(SOURCE, text)
    values: dict[str, str] = {}
    for number, line in numbered_lines(text):
        key, separator, value = line.strip().partition("=")
        if not separator:
            if line.strip():
                raise ParseError(SOURCE, "not a `Key=value` line", number, line)
            continue
        if key in _KEYS:
            values[key] = value.strip()
    if not values:
        raise ParseError(SOURCE, f"none of {', '.join(_KEYS)} in the output")
    restarts = values.get("NRestarts", "")
    return UnitState(
        active_state=values.get("ActiveState") or None,
        sub_state=values.get("SubState") or None,
        result=values.get("Result") or None,
        restarts=int(restarts) if restarts.isdigit() else None,
        active_since=_timestamp(values.get("ActiveEnterTimestamp", "")),
        unit_file_state=values.get("UnitFileState") or None,
    )


# What strptime's "%Y-%m-%d %H:%M:%S %z" took, in ASCII digits: 1-2 digit fields; an offset of
# hours, minutes 00-59 and maybe seconds, under a day.
_DATE_TIME = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2}) ([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})")
_OFFSET = re.compile(r"([+-])([0-9]{2}):?([0-5][0-9])(?::?([0-5][0-9]))?")


def _timestamp(text: str) -> datetime | None:
    """`Mon 2026-11-23 10:01:02 UTC` (systemd's format_timestamp: weekday, date, time, zone).

    Only UTC and numeric zones can be placed without the system's zone database; other zone
    names (`CET`) leave the time unknown, which no check needs more than approximately.
    """
    parts = text.split()
    if len(parts) < 3:
        return None
    # Read here, not by strptime (whose import is ~3 ms of every run), as its pattern read them.
    moment_match = _DATE_TIME.fullmatch(" ".join(parts[1:3]))
    zone = parts[3] if len(parts) > 3 else "UTC"
    zone_match = _OFFSET.fullmatch(zone)
    if moment_match is None or (zone not in ("UTC", "GMT", "Z") and zone_match is None):
        return None
    try:
        moment = datetime(*(int(field) for field in moment_match.groups()), tzinfo=timezone.utc)
    except ValueError:        # month 13, hour 25
        return None
    if zone_match is None:
        return moment
    sign, hours, minutes, seconds = zone_match.groups()
    offset = timedelta(hours=int(hours), minutes=int(minutes), seconds=int(seconds or 0))
    if offset >= timedelta(days=1):
        return None
    return moment - offset if sign == "+" else moment + offset
