"""`ethtool -S NETDEV` parser: the driver's statistics, name -> value.

    NIC statistics:
         rx_packets: 845320277
         rx_corrected_bits_phy: 0
         rx_prio3_pause: 12

Every driver prints `name: value` lines under a `NIC statistics:` header; names are the
driver's own (mlx5: Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst)
and some drivers put a queue index before the name (`[0]: rx_ucast_packets: 1`), so the name
is everything before the last colon. Values are unsigned 64-bit counters since the driver
loaded (or the port's last reset). The parser keeps every counter; which ones mean what is
the inventory's and the checks' business.
"""

from __future__ import annotations

import re

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.common import is_paste_noise, numbered_lines, require_text, screen_tool_errors

SOURCE = "ethtool -S"
_HEADER = re.compile(r"^\s*NIC statistics:\s*$")
_COUNTER = re.compile(r"^\s*(?P<name>\S(?:.*\S)?)\s*:\s*(?P<value>[0-9]{1,20})\s*$")
_U64_MAX = (1 << 64) - 1


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """name -> value. A line that is not `name: unsigned integer` is a ParseError."""
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    counters: dict[str, int] = {}
    for number, line in numbered_lines(text):
        if is_paste_noise(line) or _HEADER.match(line):
            continue
        match = _COUNTER.match(line)
        if match is None:
            raise ParseError(SOURCE, "line is not 'name: value'", number, line)
        value = int(match.group("value"))
        if value > _U64_MAX:
            raise ParseError(SOURCE, f"value {value} exceeds a 64-bit counter", number, line)
        counters[match.group("name")] = value
    if not counters:
        raise NothingToParse(SOURCE, "no statistics in output")
    return counters
