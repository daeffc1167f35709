"""`lldpctl -f json` parser: the LLDP neighbour heard on each Ethernet interface.

On a RoCE fabric the switch a port is cabled to is known only from LLDP (lldpd on the
host). lldpd's `json` format changes shape with the number of things it holds (its man
page recommends `json0` for that reason, but `-f json` is what sites and CONTRACT 6.2
use): one interface is an object keyed by its name, several are a list of one-key objects;
a chassis is keyed by its system name, or holds `id` directly when the neighbour sends
none; `{"lldp": {}}` means no neighbour. `json0`'s everything-is-a-list shape is read too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from netdoctor.errors import ParseError
from netdoctor.parsers.common import require_text
from netdoctor.records import record

SOURCE = "lldpctl-json"
_MAX_CHARS = 128
_MAX_INTERFACES = 4096


@record(frozen=True)
class LldpNeighbor:
    """The first neighbour lldpd lists on one local interface."""

    interface: str                     # the local netdev, `ens1np0`
    chassis_name: str | None = None    # SysName, `leaf-r3`
    chassis_id: str | None = None      # a MAC (lower case) for most switches
    chassis_id_type: str | None = None  # mac | local | ip | ifname ...
    port_id: str | None = None         # the switch's port: `Ethernet12`, `swp1`, `ge-1/1/28`
    port_id_type: str | None = None    # ifname | local | mac ...
    port_descr: str | None = None


def _first(value: Any) -> Any:
    """json0 wraps every value in a list; `json` does so only for repeated ones."""
    return value[0] if isinstance(value, list) and value else value


def _text(value: Any) -> str | None:
    """A string field, as `json` (`"x"`) or `json0` (`[{"value": "x"}]`) writes it; blank is None."""
    value = _first(value)
    if isinstance(value, dict):
        value = value.get("value")
    if not isinstance(value, str):
        return None
    value = value.strip()[:_MAX_CHARS]
    return value or None


def _typed(value: Any) -> tuple[str | None, str | None]:
    """(value, type) of an `id` field: `{"type": "mac", "value": "..."}`."""
    value = _first(value)
    if not isinstance(value, dict):
        return _text(value), None
    kind = value.get("type")
    text = _text(value.get("value"))
    kind = kind[:32] if isinstance(kind, str) else None
    if text is not None and kind == "mac":
        text = text.lower()
    return text, kind


def _interfaces(interface: Any) -> Iterator[tuple[str, Any]]:
    """(local name, entry) in the order lldpd lists them, whatever the shape."""
    if isinstance(interface, dict):
        if isinstance(interface.get("name"), (str, list)) and "chassis" in interface:
            yield _text(interface["name"]) or "", interface        # json0-like entry
            return
        yield from interface.items()
        return
    if not isinstance(interface, list):
        raise ParseError(SOURCE, f"`interface` is a {type(interface).__name__}, not an object or a list")
    for item in interface:
        if isinstance(item, dict):
            yield from _interfaces(item)


def _chassis(chassis: Any) -> tuple[str | None, dict[str, Any]]:
    """(system name, the chassis' fields): keyed by the name, or the fields themselves."""
    chassis = _first(chassis)
    if not isinstance(chassis, dict):
        return None, {}
    if "id" in chassis or "name" in chassis:
        return _text(chassis.get("name")), chassis
    for name, fields in chassis.items():
        if isinstance(fields, dict):
            return str(name).strip()[:_MAX_CHARS] or None, fields
    return None, {}


def _neighbor(name: str, entry: Any) -> LldpNeighbor | None:
    entry = _first(entry)
    if not isinstance(entry, dict) or not name:
        return None
    chassis_name, chassis = _chassis(entry.get("chassis"))
    chassis_id, chassis_id_type = _typed(chassis.get("id"))
    port = _first(entry.get("port"))
    port = port if isinstance(port, dict) else {}
    port_id, port_id_type = _typed(port.get("id"))
    if chassis_name is None and chassis_id is None and port_id is None:
        return None
    return LldpNeighbor(name[:_MAX_CHARS], chassis_name, chassis_id, chassis_id_type, port_id, port_id_type,
                        _text(port.get("descr")))


def parse_lldpctl_json(text: str) -> dict[str, LldpNeighbor]:
    """`lldpctl -f json` -> local interface -> its (first) neighbour; {} where lldpd heard none.

    Sample (one interface, trimmed)::

        { "lldp": { "interface": { "eth0": { "via": "LLDP", "chassis": { "B2-Tor": {
            "id": { "type": "mac", "value": "cc:37:ab:60:cd:c1" } } },
          "port": { "id": { "type": "ifname", "value": "ge-1/1/28" }, "descr": "ge-1/1/28" } } } } }
    """
    require_text(SOURCE, text)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ParseError(SOURCE, f"not JSON: {str(error)[:120]}") from None
    lldp = data.get("lldp") if isinstance(data, dict) else None
    lldp = _first(lldp) if isinstance(lldp, list) else lldp
    if lldp == [] or (isinstance(lldp, dict) and "interface" not in lldp):
        return {}
    if not isinstance(lldp, dict):
        raise ParseError(SOURCE, "no `lldp` object: not `lldpctl -f json` output")
    neighbors: dict[str, LldpNeighbor] = {}
    for index, (name, entry) in enumerate(_interfaces(lldp["interface"])):
        if index >= _MAX_INTERFACES:
            break
        neighbor = _neighbor(str(name).strip(), entry)
        if neighbor is not None:
            neighbors.setdefault(neighbor.interface, neighbor)   # several neighbours on one port: the first
    return neighbors
