"""`perfquery` (basic, `-x` extended, `--rcvErr` details) parser."""

from __future__ import annotations

import re
from dataclasses import field

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.common import is_paste_noise, numbered_lines, require_text, screen_tool_errors
from netdoctor.records import record

SOURCE = "perfquery"


@record(frozen=True)
class PerfqueryBlock:
    """One counter block: `kind` is "basic", "extended", "rcv-error" or, for other
    perfquery selections, the header's name in lower case with dashes
    (`PortXmitDiscardDetails` -> "xmit-discard-details").

    `counters` holds the counters under perfquery's names (`SymbolErrorCounter`);
    PortSelect/CounterSelect* (selectors, not counters) are left out. Data counters
    (PortXmitData/PortRcvData) are in 4-byte words, as in sysfs.
    """

    kind: str
    lid: int
    port: int
    cap_mask: int | None = None
    cap_mask2: int | None = None
    counters: dict[str, int] = field(default_factory=dict)


# perfquery counter name -> sysfs `ports/N/counters/` file name.
PERFQUERY_TO_SYSFS: dict[str, str] = {
    "SymbolErrorCounter": "symbol_error",
    "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed",
    "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "VL15_dropped",
    "PortXmitData": "port_xmit_data",
    "PortRcvData": "port_rcv_data",
    "PortXmitPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets",
    "PortXmitWait": "port_xmit_wait",
    "PortUnicastXmitPkts": "unicast_xmit_packets",
    "PortUnicastRcvPkts": "unicast_rcv_packets",
    "PortMulticastXmitPkts": "multicast_xmit_packets",
    "PortMulticastRcvPkts": "multicast_rcv_packets",
}

_KINDS = {"Port": "basic", "Port extended": "extended", "PortRcvErrorDetails": "rcv-error"}
_HEADER = re.compile(
    r"^#\s*(?P<name>[A-Za-z][A-Za-z ]*?)\s+counters:\s*Lid\s+(?P<lid>\d+)\s+port\s+(?P<port>\d+)"
    r"(?:\s*\((?P<caps>[^)]*)\))?\s*$"
)
_CAP_MASK = re.compile(r"CapMask:\s*(0x[0-9a-fA-F]+)")
_CAP_MASK2 = re.compile(r"CapMask2:\s*(0x[0-9a-fA-F]+)")
_COUNTER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9]*):\.*\s*(?P<value>\S+)\s*$")
_SELECTORS = ("PortSelect", "CounterSelect", "CounterSelect2")


def _kind(name: str) -> str:
    if name in _KINDS:
        return _KINDS[name]
    slug = re.sub(r"(?<!^)([A-Z])", r"-\1", name.removeprefix("Port")).replace(" ", "-").lower()
    return re.sub(r"-+", "-", slug).strip("-") or "basic"


def parse_perfquery(text: str) -> list[PerfqueryBlock]:
    """Parse one or more perfquery blocks.

    Sample (`perfquery -x`)::

        # Port extended counters: Lid 2052 port 1 (CapMask: 0x5300 CapMask2: 0x0000002)
        PortSelect:......................1
        CounterSelect:...................0x0000
        PortXmitData:....................178791657177235
        ...
        LinkDownedCounter:...............1
        PortXmitDiscards:................20046
        PortXmitWait:....................41864608
        QP1Dropped:......................0
    """
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    blocks: list[PerfqueryBlock] = []
    current: PerfqueryBlock | None = None
    for number, raw in numbered_lines(text):
        line = raw.strip()
        if is_paste_noise(raw):
            continue
        header = _HEADER.match(line)
        if header:
            caps = header.group("caps") or ""
            mask = _CAP_MASK.search(caps)
            mask2 = _CAP_MASK2.search(caps)
            current = PerfqueryBlock(
                kind=_kind(header.group("name")),
                lid=int(header.group("lid")),
                port=int(header.group("port")),
                cap_mask=int(mask.group(1), 16) if mask else None,
                cap_mask2=int(mask2.group(1), 16) if mask2 else None,
            )
            blocks.append(current)
            continue
        counter = _COUNTER.match(line)
        if counter and current is not None:
            name, value = counter.group("name"), counter.group("value")
            if name in _SELECTORS:
                continue
            if not re.fullmatch(r"\d{1,20}", value):
                raise ParseError(SOURCE, f"counter {name} must be a decimal number, got {value[:40]!r}", number, raw)
            current.counters[name] = int(value)
            continue
        if counter:
            raise ParseError(SOURCE, "counter line before any '# ... counters: Lid L port P' header", number, raw)
        raise ParseError(SOURCE, "line not recognised as perfquery output", number, raw)
    if not blocks:
        raise NothingToParse(SOURCE, "no counter blocks in output")
    return blocks


def counters_as_sysfs(block: PerfqueryBlock) -> dict[str, int]:
    """The block's counters under their sysfs names (counters sysfs lacks, e.g. QP1Dropped, are left out)."""
    return {PERFQUERY_TO_SYSFS[name]: value for name, value in block.counters.items() if name in PERFQUERY_TO_SYSFS}
