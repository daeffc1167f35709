"""`smpquery nodeinfo` and `smpquery nodedesc` parsers: the node at the other end of a port.

netdoctor asks by direct route `0,PORT` from each IB port (`smpquery -C DEV -P PORT -D
nodeinfo 0,PORT`): one SMP, answered by the first-hop node itself, so it costs the subnet
manager nothing and works before the SM has assigned a LID. On a switch, NodeInfo's
`LocalPort` is the switch port the SMP arrived on: the port this node's cable lands on.

The format is libibmad's `mad_dump_nodeinfo`: `Field:` padded with dots to column 33, then
the value, under a `# Node info: ...` header (`Lid 4`, or `DR path slid 65535; dlid 65535;
0,1` for a direct route, from `portid2str`). NodeDesc is one line, `Node Description:`,
dots, the description, dots and description filling 32 characters (one dot when longer).
"""

from __future__ import annotations

import re

from netdoctor.errors import ParseError
from netdoctor.parsers.common import (
    is_paste_noise,
    normalize_guid,
    numbered_lines,
    require_text,
    screen_tool_errors,
)
from netdoctor.records import record

NODEINFO_SOURCE = "smpquery-nodeinfo"
NODEDESC_SOURCE = "smpquery-nodedesc"
# IBA node types by number (python-rdma's work-alike prints the number).
NODE_TYPES = {"1": "Channel Adapter", "2": "Switch", "3": "Router"}
_NODE_TYPE_NAMES = {name.lower(): name for name in NODE_TYPES.values()}
# NodeDescription is 64 bytes on the wire.
_MAX_DESCRIPTION = 64
_DESCRIPTION_FIELD = 32

_HEADER = re.compile(r"^#\s*Node info:\s*(?P<address>.*?)\s*$")
_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9]*):(?P<value>.*)$")
_NODEDESC = re.compile(r"^Node ?Description:(?P<rest>.*)$", re.IGNORECASE)
_NUMBER = re.compile(r"^\d{1,5}$")


@record(frozen=True)
class SmpNodeInfo:
    """NodeInfo of the node a query reached. GUIDs as `0x` + 16 lower-case hex digits."""

    node_type: str                   # Channel Adapter | Switch | Router (or the number, if another)
    node_guid: str
    port_guid: str | None = None
    system_guid: str | None = None
    num_ports: int | None = None
    local_port: int | None = None    # on a switch: the port the SMP entered by
    device_id: str | None = None
    vendor_id: str | None = None
    address: str | None = None       # the header's destination: `Lid 4`, `DR path slid 65535; dlid 65535; 0,1`

    @property
    def is_switch(self) -> bool:
        return self.node_type == "Switch"


def _node_type(value: str, number: int, line: str) -> str:
    value = value.strip()
    if value in NODE_TYPES:
        return NODE_TYPES[value]
    known = _NODE_TYPE_NAMES.get(value.lower())
    if known is None:
        raise ParseError(NODEINFO_SOURCE, f"unknown node type {value[:40]!r}", number, line)
    return known


def _small_number(value: str, number: int, line: str) -> int:
    value = value.strip()
    if not _NUMBER.match(value):
        raise ParseError(NODEINFO_SOURCE, f"expected a port number, got {value[:40]!r}", number, line)
    return int(value)


def parse_smpquery_nodeinfo(text: str) -> SmpNodeInfo:
    """`smpquery ... nodeinfo ...` -> SmpNodeInfo. NodeType and Guid are required.

    Sample (trimmed)::

        # Node info: Lid 1627
        NodeType:........................Switch
        NumPorts:........................30
        Guid:............................0xe41d2d03004bef70
        LocalPort:.......................17
    """
    require_text(NODEINFO_SOURCE, text)
    screen_tool_errors(NODEINFO_SOURCE, text)
    fields: dict[str, tuple[str, int, str]] = {}
    address = None
    for number, line in numbered_lines(text):
        stripped = line.strip()
        header = _HEADER.match(stripped)
        if header is not None:
            if address is not None or fields:
                raise ParseError(NODEINFO_SOURCE, "a second `# Node info:` block", number, line)
            address = header.group("address")[:200]
            continue
        field = _FIELD.match(stripped)
        if field is not None:
            fields.setdefault(field.group("key"), (field.group("value").lstrip(".").strip(), number, line))
            continue
        # libibmad warnings on a merged stream (`ibwarn: ... sim_connect: attached ...`) are not data.
        if is_paste_noise(line) or stripped.startswith("ibwarn:"):
            continue
        raise ParseError(NODEINFO_SOURCE, "line not recognised as smpquery NodeInfo output", number, line)
    if "NodeType" not in fields or "Guid" not in fields:
        raise ParseError(NODEINFO_SOURCE, "no NodeType and Guid fields: not NodeInfo output")

    def guid(key: str) -> str | None:
        if key not in fields:
            return None
        value, number, line = fields[key]
        return normalize_guid(NODEINFO_SOURCE, value, number, line)

    def text_field(key: str) -> str | None:
        return fields[key][0][:40] or None if key in fields else None

    node_guid = guid("Guid")
    if node_guid is None:
        raise ParseError(NODEINFO_SOURCE, "the node GUID is blank", fields["Guid"][1], fields["Guid"][2])
    return SmpNodeInfo(
        node_type=_node_type(*fields["NodeType"]),
        node_guid=node_guid,
        port_guid=guid("PortGuid"),
        system_guid=guid("SystemGuid"),
        num_ports=_small_number(*fields["NumPorts"]) if "NumPorts" in fields else None,
        local_port=_small_number(*fields["LocalPort"]) if "LocalPort" in fields else None,
        device_id=text_field("DevId"),
        vendor_id=text_field("VendorId"),
        address=address,
    )


def parse_smpquery_nodedesc(text: str) -> str:
    """`smpquery ... nodedesc ...` -> the node description, `MF0;leaf-r3-01:MQM9700/U1`.

    Sample::

        Node Description:.................b1nstcx02 HCA-1
    """
    require_text(NODEDESC_SOURCE, text)
    screen_tool_errors(NODEDESC_SOURCE, text)
    found: str | None = None
    for number, line in numbered_lines(text):
        match = _NODEDESC.match(line.lstrip())
        if match is not None:
            if found is not None:
                raise ParseError(NODEDESC_SOURCE, "a second `Node Description:` line", number, line)
            rest = match.group("rest")
            # Dots and name fill 32 characters; a name of 32 or more gets exactly one dot.
            found = rest[1:] if len(rest) > _DESCRIPTION_FIELD and rest.startswith(".") else rest.lstrip(".")
            found = found.strip()
            continue
        if is_paste_noise(line) or line.strip().startswith("ibwarn:"):
            continue
        raise ParseError(NODEDESC_SOURCE, "line not recognised as smpquery NodeDesc output", number, line)
    if found is None:
        raise ParseError(NODEDESC_SOURCE, "no `Node Description:` line")
    if len(found) > _MAX_DESCRIPTION:
        raise ParseError(NODEDESC_SOURCE, f"a node description longer than {_MAX_DESCRIPTION} characters")
    return found


# Mellanox/NVIDIA switches describe themselves as `MF0;<hostname>:<model>/U<n>`
# (MLNX-OS, Onyx, Cumulus on Quantum); the hostname is what an operator calls the switch.
_MLNX_SWITCH = re.compile(r"^MF0;(?P<host>[^:;]+):(?P<model>[^/]*)/U\d+$")


def switch_name(description: str) -> str:
    """`MF0;leaf-07:MQM9700/U1` -> `leaf-07`; any other description as it is."""
    match = _MLNX_SWITCH.match(description.strip())
    return match.group("host") if match else description.strip()
