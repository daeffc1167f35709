"""Each port's first-hop switch (`Port.neighbor`), from three sources in this order of trust.

1. `smpquery` by direct route from the port itself (`smpquery-nodeinfo/-nodedesc-DEV-PORT`):
   the switch answers for itself, so it is right even where a recorded fabric scan is stale.
2. A fabric scan (`iblinkinfo`, live with `--fabric-scan` or recorded in a snapshot): the
   port's own line, found by its port GUID or LID as the link facts are, names the peer.
3. LLDP (`lldpctl -f json`) for Ethernet (RoCE) ports, by the port's netdev name.

A later, more trusted source replaces an earlier one; where they name different switches
or ports the disagreement is kept as a `Conflict`, as for every other fact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from netdoctor.inventory.merge import Draft, seen_by
from netdoctor.inventory.model import Conflict, FirstHop, Inventory, LinkLayer, Port
from netdoctor.parsers.iblinkinfo import FabricLink
from netdoctor.parsers.lldpctl import LldpNeighbor
from netdoctor.parsers.smpquery import SmpNodeInfo, switch_name


def _port(draft: Draft, fields: Mapping[str, str]) -> Port | None:
    return draft.inventory.port(f"{fields['dev']}:{fields['port']}")


def join_smpquery_nodeinfo(draft: Draft, info: SmpNodeInfo, fields: Mapping[str, str]) -> None:
    """The switch that answered the port's one-hop SMP; a cable to another HCA (or a router) is no switch."""
    port = _port(draft, fields)
    if port is None or not info.is_switch:
        return
    earlier = port.neighbor
    same_switch = earlier is not None and earlier.switch_guid == info.node_guid
    hop = FirstHop(info.node_guid, earlier.switch_name if same_switch and earlier else None, info.local_port,
                   "smpquery", description=earlier.description if same_switch and earlier else None)
    if earlier is not None and (earlier.switch_guid, earlier.switch_port) != (hop.switch_guid, hop.switch_port):
        draft.inventory.conflicts.append(Conflict(port.name, "neighbor", {
            earlier.source: f"{earlier.switch_guid} port {earlier.switch_port}",
            "smpquery": f"{hop.switch_guid} port {hop.switch_port}"}, chosen="smpquery"))
    port.neighbor = hop
    seen_by(port, "smpquery")


def join_smpquery_nodedesc(draft: Draft, description: str, fields: Mapping[str, str]) -> None:
    """The name of the switch NodeInfo found (NodeInfo is joined first: its row comes first)."""
    port = _port(draft, fields)
    if port is None or port.neighbor is None or port.neighbor.source != "smpquery" or not description:
        return
    port.neighbor = replace(port.neighbor, switch_name=switch_name(description) or None, description=description)


def iblinkinfo_neighbor(link: FabricLink, switch_guids: Mapping[int, str]) -> FirstHop | None:
    """The switch a CA's line of a fabric scan is cabled to. The grouped form names the peer
    by LID (its GUID is the switch block's with that LID); `-l` names its GUID."""
    guid = link.peer_guid or (switch_guids.get(link.peer_lid) if link.peer_lid is not None else None)
    if guid is None or link.peer_port is None:
        return None
    description = link.peer_description or None
    return FirstHop(guid, switch_name(description) if description else None, link.peer_port, "iblinkinfo",
                    description=description)


def switch_guids_by_lid(links: list[FabricLink]) -> dict[int, str]:
    return {link.lid: link.node_guid for link in links
            if link.node_kind == "Switch" and link.node_guid and link.lid is not None}


def place_lldp_neighbors(inventory: Inventory) -> None:
    """Ethernet ports whose netdev (or, for a RoCE LAG bond, a slave) heard a switch over LLDP."""
    if not inventory.lldp:
        return
    for port in inventory.ports:
        if port.link_layer is not LinkLayer.ETHERNET or port.neighbor is not None or not port.netdev:
            continue
        heard = inventory.lldp.get(port.netdev)
        netdev = inventory.netdev(port.netdev)
        if heard is None and netdev is not None:
            # lldpd speaks on the slaves of a bond: the first slave that heard a switch.
            heard = next((inventory.lldp[slave] for slave in sorted(netdev.bond_slaves) if slave in inventory.lldp), None)
        if heard is not None:
            port.neighbor = lldp_hop(heard)
            seen_by(port, "lldp")


def lldp_hop(heard: LldpNeighbor) -> FirstHop:
    number = int(heard.port_id) if heard.port_id and heard.port_id.isascii() and heard.port_id.isdigit() and len(heard.port_id) < 6 else None
    return FirstHop(heard.chassis_id, heard.chassis_name, number, "lldp", description=heard.port_descr,
                    port_id=heard.port_id)
