"""`iblinkinfo` (grouped and `-l` line form) parser.

Fabric-wide outputs run to ~80k lines on a 2,000-switch fabric, so each line is matched
by one precompiled, anchored regex without nested quantifiers.
"""

from __future__ import annotations

import re

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.records import record
from netdoctor.vocabulary import PhysState, PortState
from netdoctor.parsers.common import (
    is_paste_noise,
    phys_state_from_text,
    port_state_from_text,
    require_text,
    screen_tool_errors,
    strip_ansi,
)
from netdoctor.parsers.sysfs_values import IB_SPEED_LANE_GBPS, speed_name_from_lane

SOURCE = "iblinkinfo"


@record(frozen=True, slots=True)
class FabricLink:
    """One port of one fabric node and what it is cabled to.

    `node_kind` is "CA" or "Switch" (None in `iblinkinfo -l`, which does not say).
    `lane_gbps` is the per-lane signalling rate as printed (`25.78125`), `speed` its class
    (`EDR`). Down ports have width/speed None and no peer. `could_be_*` come from the
    `( Could be 4X Could be 25.78125 Gbps )` hint iblinkinfo prints for links running
    below what both ends support.
    """

    node_kind: str | None
    node_guid: str | None
    node_description: str
    lid: int | None
    port: int
    width: int | None = None
    lane_gbps: float | None = None
    speed: str | None = None
    state: PortState | None = None
    phys_state: PhysState | None = None
    peer_guid: str | None = None
    peer_lid: int | None = None
    peer_port: int | None = None
    peer_description: str | None = None
    could_be_width: int | None = None
    could_be_lane_gbps: float | None = None

    @property
    def connected(self) -> bool:
        return self.peer_port is not None


_CA_HEADER = re.compile(r"^CA:\s*(?P<desc>.*):\s*$")
_SWITCH_HEADER = re.compile(r"^Switch:\s*(?P<guid>0x[0-9a-fA-F]+)\s+(?P<desc>.*):\s*$")
# `      0xec0d9a03003d62be      4    1[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>       2   17[  ] "MF0;SB7700:MSB7700/U1" ( )`
# `           2    1[  ] ==(                Down/ Polling)==>             [  ] "" ( )`
# -l: `0x7cfe9003009ce5b0 "           ib-i1l1s01"   1719   10[  ] ==( 4X 25.78125 Gbps Active/  LinkUp)==>  0x7cfe9003003b4bde  134    1[  ] "o0001 HCA-1" ( )`
_PORT_LINE = re.compile(
    r"^\s*(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?:\"(?P<desc>[^\"]*)\"\s+)?"
    r"(?P<lid>\d+)\s+(?P<port>\d+)\[[^\]]*\]\s+==\((?P<link>.*?)\)==>\s*(?P<peer>.*)$"
)
_LINK = re.compile(
    r"^\s*(?:(?P<width>\d+)X\s+(?P<lane>\d+(?:\.\d+)?)\s+Gbps(?:\s+\((?P<speed>[A-Z0-9]+)\))?\s+)?"
    r"(?P<state>[A-Za-z]+)/\s*(?P<phys>[A-Za-z ]+?)\s*$"
)
_PEER_CONNECTED = re.compile(
    r"^(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?P<lid>\d+)\s+(?P<port>\d+)\[[^\]]*\]\s+\"(?P<desc>.*)\"\s*\((?P<hint>[^()]*)\)\s*$"
)
_PEER_NONE = re.compile(r"^\[[^\]]*\]\s+\"\"\s*\((?P<hint>[^()]*)\)\s*$")
# The whole well-formed port line in one match (the hot path: one match per port line);
# the piecewise regexes above only run to say what is wrong with a line this one refuses.
# `link` spans the `( 4X 106.25 Gbps Active/ LinkUp)` field inside its parentheses: the cache
# key of the values decoded from it (a fabric prints only a handful of distinct ones).
_FULL_PORT_LINE = re.compile(
    r"^\s*(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?:\"(?P<desc>[^\"]*)\"\s+)?"
    r"(?P<lid>\d+)\s+(?P<port>\d+)\[[^\]]*\]\s+==\((?P<link>\s*"
    r"(?:(?P<width>\d+)X\s+(?P<lane>\d+(?:\.\d+)?)\s+Gbps(?:\s+\((?P<speed>[A-Z0-9]+)\))?\s+)?"
    r"(?P<state>[A-Za-z]+)/\s*(?P<phys>[A-Za-z ]+?)\s*)\)==>\s*"
    r"(?:(?:(?P<peer_guid>0x[0-9a-fA-F]+)\s+)?(?P<peer_lid>\d+)\s+(?P<peer_port>\d+)\[[^\]]*\]\s+\"(?P<peer_desc>.*)\""
    r"|\[[^\]]*\]\s+\"\")\s*\((?P<hint>[^()]*)\)\s*$"
)
_COULD_BE_WIDTH = re.compile(r"Could be\s+(\d+)X")
_COULD_BE_SPEED = re.compile(r"Could be\s+(\d+(?:\.\d+)?)\s*Gbps")
# What a (stripped) header line starts with. Port lines start with a digit, `0x` or `"`, so
# lines with these prefixes never go through the port regexes and vice versa.
_HEADER_PREFIXES = ("Switch:", "CA:")


def _diagnose_port_line(match: re.Match[str], number: int, raw: str) -> ParseError:
    """Why a line that looks like a port line (`LID PORT[..] ==( ... )==> ...`) was refused."""
    if not _LINK.match(match.group("link")):
        return ParseError(SOURCE, "link field must look like '( 4X 25.78125 Gbps Active/ LinkUp)'", number, raw)
    if not (_PEER_CONNECTED.match(match.group("peer")) or _PEER_NONE.match(match.group("peer"))):
        return ParseError(SOURCE, "peer field not recognised", number, raw)
    return ParseError(SOURCE, "port line not recognised", number, raw)


# (width, lane_gbps, speed, state, phys_state) decoded from one link field.
_LinkValues = tuple[int | None, float | None, str | None, PortState, PhysState]


def _link_values(
    width: str | None, lane_text: str | None, speed_text: str | None, state_text: str, phys_text: str,
    number: int, raw: str,
) -> _LinkValues:
    """Decode the captures of a link field; ParseError (naming the line) for an unknown state."""
    lane = float(lane_text) if lane_text else None
    speed = speed_text if speed_text in IB_SPEED_LANE_GBPS else (speed_name_from_lane(lane) if lane is not None else None)
    return (
        int(width) if width else None,
        lane,
        speed,
        port_state_from_text(SOURCE, state_text, number, raw),
        phys_state_from_text(SOURCE, phys_text, number, raw),
    )


def _could_be(hint: str) -> tuple[int | None, float | None]:
    """(could_be_width, could_be_lane_gbps) from the `( Could be 4X Could be 25.78125 Gbps )` hint."""
    if "Could" not in hint:
        return None, None
    width = _COULD_BE_WIDTH.search(hint)
    speed = _COULD_BE_SPEED.search(hint)
    return int(width.group(1)) if width else None, float(speed.group(1)) if speed else None


def parse_iblinkinfo(text: str) -> list[FabricLink]:
    """Parse `iblinkinfo` (grouped by node) or `iblinkinfo -l` (one line per link).

    Sample (grouped)::

        CA: n02 HCA-1:
              0xec0d9a03003d62be      4    1[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>       2   17[  ] "MF0;SB7700:MSB7700/U1" ( )
        Switch: 0x506b4b0300820910 MF0;SB7700:MSB7700/U1:
                   2    1[  ] ==(                Down/ Polling)==>             [  ] "" ( )
                   2   17[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>       4    1[  ] "n02 HCA-1" ( )

    Hot path (a 2,000-switch fabric is 162k lines): one tool-error screen of the whole text,
    then per line one strip, a prefix test that sends header lines past the port regexes,
    and one `_FULL_PORT_LINE` match; link fields and hints are decoded once per distinct text.
    """
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    # The lines numbered_lines() gives, without its per-line generator step: splitlines()
    # leaves no CR to strip, and ANSI escapes are removed only where there are any.
    lines = (strip_ansi(text) if "\x1b" in text else text).splitlines()
    links = _parse_lines(lines)
    if not links:
        raise NothingToParse(SOURCE, "no links in output")
    return links


def _parse_lines(lines: list[str]) -> list[FabricLink]:
    links: list[FabricLink] = []
    append = links.append
    match_port_line = _FULL_PORT_LINE.match
    link_values: dict[str, _LinkValues] = {}                          # link field text -> decoded
    could_be_values: dict[str, tuple[int | None, float | None]] = {}  # hint text -> decoded
    node_kind: str | None = None
    node_guid: str | None = None
    node_description = ""
    in_group = False
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if line.startswith(_HEADER_PREFIXES):
            switch = _SWITCH_HEADER.match(line)
            if switch:
                node_kind, node_guid, node_description, in_group = "Switch", switch.group("guid").lower(), switch.group("desc").strip(), True
                continue
            ca = _CA_HEADER.match(line)
            if ca:
                node_kind, node_guid, node_description, in_group = "CA", None, ca.group("desc").strip(), True
                continue
        else:
            port_line = match_port_line(line)
            if port_line:
                (guid, description, lid, port, link_text, width, lane, speed, state, phys,
                 peer_guid, peer_lid, peer_port, peer_description, hint) = port_line.groups()
                if description is not None:  # `iblinkinfo -l`: the node is named on its line
                    kind, own_guid, own_description = None, guid.lower() if guid else None, description.strip()
                elif in_group:               # grouped: the node of the last header
                    kind, own_guid, own_description = node_kind, guid.lower() if guid else node_guid, node_description
                else:
                    raise ParseError(SOURCE, "port line before any 'CA:' or 'Switch:' header", number, raw)
                # Link fields and hints repeat across a fabric: each distinct text is decoded
                # once. Only successful decodes are cached, so a bad state raises on its line.
                decoded_link = link_values.get(link_text)
                if decoded_link is None:
                    decoded_link = link_values[link_text] = _link_values(width, lane, speed, state, phys, number, raw)
                decoded_hint = could_be_values.get(hint)
                if decoded_hint is None:
                    decoded_hint = could_be_values[hint] = _could_be(hint)
                link_width, lane_gbps, speed_name, link_state, phys_state = decoded_link
                link = FabricLink(
                    node_kind=kind, node_guid=own_guid, node_description=own_description,
                    lid=int(lid), port=int(port),
                    width=link_width, lane_gbps=lane_gbps, speed=speed_name, state=link_state, phys_state=phys_state,
                    peer_guid=peer_guid.lower() if peer_guid else None,
                    peer_lid=int(peer_lid) if peer_lid else None,
                    peer_port=int(peer_port) if peer_port else None,
                    peer_description=peer_description.strip() if peer_description is not None else None,
                    could_be_width=decoded_hint[0], could_be_lane_gbps=decoded_hint[1],
                )
                append(link)
                continue
            loose = _PORT_LINE.match(line)
            if loose:
                raise _diagnose_port_line(loose, number, raw)
        if is_paste_noise(raw):
            continue
        raise ParseError(SOURCE, "line not recognised as iblinkinfo output", number, raw)
    return links
