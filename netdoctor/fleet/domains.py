"""NVLink domains across the fleet (CONTRACT 8 `nvlink_domains`).

A GB200/GB300 NVL72 rack is one multi-node NVLink domain: NVML gives each GPU of its compute
trays the domain's cluster UUID and the clique (the NVLink partition within the domain) it
was placed in, and its place in the rack (platform info: chassis serial, tray index). Each
node's report carries what most of its GPUs say (`fabric.nvlink_domain`, netdoctor.traffic);
a tray alone cannot tell that it sits in another clique than its rack, the fleet can:

* per **cluster UUID**: the clique most of its nodes are in (`clique_id`), and each node in
  another clique (`odd`: host -> `clique 3`). A node whose own GPUs are in several cliques
  (its report's `mixed: true`) is odd too, whatever its majority. Where no clique holds more
  than half of the domain's nodes the domain is partitioned on purpose (NVLink partitions
  get a clique each: a rack split 9/9): `split` lists each clique's nodes, nothing is odd.
* per **chassis** (platform `chassis_serial_number`): a chassis whose trays are in different
  cluster UUIDs, or some in none (`no NVLink domain`), is one more entry, with `chassis`:
  the majority's UUID and clique, and the trays elsewhere as `odd`. Only trays in a domain
  vote: a tray in none is always odd, never the majority nor a `split` group (a tray that
  failed to join is the fault, whatever the count); a chassis none of whose trays is in a
  domain has no entry. A clique split inside one UUID is that UUID's entry, never listed twice.

Every count is of nodes: each node in a domain is one vote, in its UUID and its chassis. What a node
sends is read within bounds (`bounded_domain`): strings of a UUID's or serial's length,
interned; numbers only as plausible ints; a zero UUID is no domain. A node cannot change
another's grade here; it can only list itself as odd, or outvote a domain it outnumbers.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from netdoctor.util import natural_key

if TYPE_CHECKING:
    from netdoctor.fleet.model import NodeSummary

# (cluster UUID or None, clique or None, chassis serial or None, tray index or None, mixed):
# what the fleet keeps of a node's `fabric.nvlink_domain`. A plain tuple, interned strings.
Domain = tuple[str | None, int | None, str | None, int | None, bool]

_MAX_ID_CHARS = 64          # a UUID is 36 characters, a chassis serial 13 (GB200); longer is not one
_MAX_CLIQUE = 1 << 32       # NVML's cliqueId is an unsigned int
_MAX_TRAY = 1 << 16
_MAX_RACKS = 8              # chassis listed per cluster (an NVL576 domain spans 8 racks)
MIXED = "its GPUs in several cliques"
NO_DOMAIN = "no NVLink domain"


def bounded_domain(fabric: Any) -> Domain | None:
    """The report's `fabric.nvlink_domain` as the fleet keeps it; None where it names neither a
    (non-zero) cluster UUID nor a chassis, or is not an object."""
    data = fabric.get("nvlink_domain") if fabric.__class__ is dict else None
    if data.__class__ is not dict:
        return None
    uuid = _identifier(data.get("cluster_uuid"))
    if uuid is not None and not uuid.replace("-", "").strip("0"):
        uuid = None
    clique, tray = data.get("clique_id"), data.get("tray_index")
    serial = _identifier(data.get("chassis_serial_number"))
    if uuid is None and serial is None:
        return None
    return (uuid, clique if uuid is not None and clique.__class__ is int and 0 <= clique < _MAX_CLIQUE else None,
            serial, tray if serial is not None and tray.__class__ is int and 0 <= tray < _MAX_TRAY else None,
            uuid is not None and data.get("mixed") is True)


def _identifier(value: Any) -> str | None:
    if value.__class__ is not str:
        return None
    value = value.strip()
    return sys.intern(value) if value and len(value) <= _MAX_ID_CHARS else None


def find_domains(nodes: Iterable[NodeSummary]) -> list[dict[str, Any]]:
    """One entry per cluster UUID, and per chassis whose trays are in several; those with odd
    nodes first, then by UUID or serial."""
    clusters: dict[str, list[tuple[str, Domain]]] = {}
    chassis: dict[str, list[tuple[str, Domain]]] = {}
    for node in nodes:
        domain = node.nvlink_domain
        if domain is None:
            continue
        if domain[0] is not None:
            clusters.setdefault(domain[0], []).append((node.host, domain))
        if domain[2] is not None:
            chassis.setdefault(domain[2], []).append((node.host, domain))
    entries = [{"cluster_uuid": uuid, **_judged(members, _clique_of, _clique, _clique), **_racks(members)}
               for uuid, members in clusters.items()]
    for serial, members in chassis.items():
        if len({domain[0] for _, domain in members}) > 1 and any(domain[0] is not None for _, domain in members):
            entry = _judged(members, _cluster_of, _cluster, _elsewhere)
            uuid = entry.pop("majority")
            cliques = Counter(domain[1] for _, domain in members if domain[0] == uuid)
            clique = min(cliques, key=lambda clique: (-cliques[clique], clique is None, clique or 0))
            entries.append({"chassis": serial, "cluster_uuid": uuid, "clique_id": clique, **entry})
    entries.sort(key=lambda entry: (not entry["odd"], "chassis" in entry,
                                    natural_key(entry.get("chassis") or entry["cluster_uuid"] or "")))
    return entries


def _racks(members: list[tuple[str, Domain]]) -> dict[str, Any]:
    """`chassis_serials`: the chassis a cluster's nodes name (what is written on the rack), up to 8."""
    serials = sorted({domain[2] for _, domain in members if domain[2] is not None}, key=natural_key)
    return {"chassis_serials": serials[:_MAX_RACKS]} if serials else {}


def _clique_of(domain: Domain) -> Any:
    return domain[1]


def _cluster_of(domain: Domain) -> Any:
    return domain[0]


def _clique(clique: Any) -> str:
    return "no clique" if clique is None else f"clique {clique}"


def _cluster(uuid: Any) -> str:
    return NO_DOMAIN if uuid is None else f"cluster {uuid}"


def _elsewhere(domain: Domain) -> str:
    """Where a tray of a chassis is, whose trays are in several clusters."""
    return NO_DOMAIN if domain[0] is None else f"cluster {domain[0]} {_clique(domain[1])}"


def _judged(members: list[tuple[str, Domain]], key_of: Callable[[Domain], Any], label: Callable[[Any], str],
            where: Callable[[Any], str]) -> dict[str, Any]:
    """The majority (`clique_id` per cluster; `majority` for the caller per chassis), nodes,
    hosts, the odd nodes (host -> where it is), their trays; `split` (each group's hosts) where
    no group holds more than half of the votes. A cluster's node whose GPUs are in several
    cliques is odd. In a chassis a tray in no domain has no vote: it is always odd, never the
    majority nor a split group (the caller gives at least one tray in a domain)."""
    per_cluster = key_of is _clique_of
    groups: dict[Any, list[str]] = {}
    for host, domain in members:
        if per_cluster or key_of(domain) is not None:
            groups.setdefault(key_of(domain), []).append(host)
    # The largest group; among equals the first by label, so that the entry does not depend on node order.
    majority = min(groups, key=lambda key: (-len(groups[key]), natural_key(label(key))))
    hosts = sorted((host for host, _ in members), key=natural_key)
    entry: dict[str, Any] = {"clique_id" if per_cluster else "majority": majority, "nodes": len(hosts),
                             "hosts": hosts, "odd": {}}
    split = len(groups[majority]) * 2 <= sum(len(group) for group in groups.values())
    if split:
        entry["split"] = {label(key): sorted(group, key=natural_key)
                          for key, group in sorted(groups.items(), key=lambda item: natural_key(label(item[0])))}
    trays: dict[str, int] = {}
    for host, domain in sorted(members, key=lambda member: natural_key(member[0])):
        mixed = per_cluster and domain[4]
        voted = per_cluster or key_of(domain) is not None
        if (not voted) or (not split and (key_of(domain) != majority or mixed)):
            entry["odd"][host] = where(domain if not per_cluster else domain[1]) + (f" ({MIXED})" if mixed else "")
            if domain[3] is not None:
                trays[host] = domain[3]
    if trays:
        entry["trays"] = trays
    return entry
