"""The fleet's own judgements shaped for people: host lists folded, drift and rail rows in the
order an engineer reads them, what changed since the last report grouped by change.

Shared by the text and HTML renderers. Pure: data in, plain (unescaped) strings and tuples
out; every renderer escapes what it prints. The dicts come from other modules (drift, rails,
since) but their strings are the nodes' words (versions, hosts, switch names), so nothing
here trusts a key to be there or a value to have a type.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from ClusterShell.NodeSet import NodeSet

from netdoctor.fleet.model import grade_severity
from netdoctor.records import record
from netdoctor.util import natural_key

# Names NodeSet reads as one node. Anything else (`n[1-3]`, `a,b`, `@group`, `x!y`) would be
# read as a range or an operator, so a node could pass for several, or for another node:
# such names are listed as they are.
_FOLDABLE = re.compile(r"[A-Za-z0-9_.-]{1,200}\Z")
# Host counts are spelled out from this many hosts on: `node[017-018]` needs none.
_COUNT_FROM = 3
_STATUS_ORDER = {"fail": 0, "unreachable": 1, "invalid": 2, "unknown": 3, "warn": 4, "pass": 5, "skip": 6}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _hosts(value: Any) -> list[str]:
    return [_text(host) for host in value] if isinstance(value, (list, tuple)) else []


def fold_hosts(hosts: Iterable[str]) -> str:
    """The hosts as a folded host list (`node[001-128]`), names NodeSet would misread listed as they are."""
    foldable, odd = [], []
    for host in hosts:
        (foldable if _FOLDABLE.match(host) else odd).append(host)
    folded = ""
    if foldable:
        try:
            folded = str(NodeSet.fromlist(foldable))
        except Exception:  # ClusterShell refuses some names still; a plain list loses nothing.
            folded = ",".join(foldable)
    return ",".join(filter(None, [folded, *odd]))


def hosts_phrase(hosts: list[str], folded: str | None = None, noun: str = "nodes") -> str:
    """`node017`, `node[017-018]`, `40 nodes: node[001-040]`; `folded`: `fold_hosts(hosts)` if known."""
    folded = fold_hosts(hosts) if folded is None else folded
    return f"{len(hosts):,} {noun}: {folded}" if len(hosts) >= _COUNT_FROM else folded


def contiguous_ranges(hosts: list[str]) -> list[tuple[str, int, str]]:
    """(folded name, count, first host) per run of consecutive names (`node[0001-0099]`);
    names that do not fold come one by one."""
    foldable = [host for host in hosts if _FOLDABLE.match(host)]
    ranges: list[tuple[str, int, str]] = [(host, 1, host) for host in hosts if not _FOLDABLE.match(host)]
    try:
        parts = list(NodeSet.fromlist(foldable).contiguous()) if foldable else []
    except Exception:
        return [(host, 1, host) for host in hosts]
    ranges += [(str(part), len(part), part[0]) for part in parts]
    return ranges


# ---- version drift -------------------------------------------------------------------------

@record(frozen=True)
class DriftRow:
    what: str
    among: str
    majority: str
    majority_nodes: int | None          # None where the entry does not say how many nodes it covers
    minority: list[tuple[str, list[str]]]   # version -> hosts, the largest group first
    minimum: str
    below_minimum: list[str]

    @property
    def differs(self) -> bool:
        return bool(self.minority or self.below_minimum)

    @property
    def minority_nodes(self) -> int:
        return sum(len(hosts) for _, hosts in self.minority)

    def label(self) -> str:
        return f"{self.what} among {self.among}" if self.among else self.what


def drift_rows(entries: Iterable[Any], only_differing: bool = True) -> list[DriftRow]:
    """Entries with a minority first (the largest minority first), then those with only nodes
    below the minimum, then (unless `only_differing`) the kinds alike everywhere."""
    rows = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        minority_map = entry.get("minority")
        minority = [(_text(version), _hosts(hosts)) for version, hosts in minority_map.items()] \
            if isinstance(minority_map, Mapping) else []
        minority = [(version, hosts) for version, hosts in minority if hosts]
        minority.sort(key=lambda item: (-len(item[1]), natural_key(item[0])))
        total = entry.get("nodes")
        counted = sum(len(hosts) for _, hosts in minority)
        rows.append(DriftRow(
            what=_text(entry.get("what")), among=_text(entry.get("among")), majority=_text(entry.get("majority")),
            majority_nodes=total - counted if isinstance(total, int) and not isinstance(total, bool) else None,
            minority=minority, minimum=_text(entry.get("minimum")), below_minimum=_hosts(entry.get("below_minimum"))))
    if only_differing:
        rows = [row for row in rows if row.differs]
    order = {id(row): position for position, row in enumerate(rows)}
    rows.sort(key=lambda row: (0 if row.minority else 1 if row.below_minimum else 2, -row.minority_nodes, order[id(row)]))
    return rows


def drift_text(row: DriftRow) -> str:
    """`hca_firmware among MT4129 MT_0000000838: 28.39.1002 on 1,021 nodes; 28.37.1014 on node[017-018]`;
    the GPU count: `gpus among DGXH100: node044 has 7 GPUs where 127 DGXH100 have 8`."""
    if row.what == "gpus" and row.minority:
        peers = f"{row.majority_nodes:,} " if row.majority_nodes is not None else ""
        return f"{row.label()}: " + "; ".join(
            f"{hosts_phrase(hosts)} {'has' if len(hosts) == 1 else 'have'} {count} GPUs where {peers}{row.among} "
            f"{'has' if row.majority_nodes == 1 else 'have'} {row.majority or '?'}" for count, hosts in row.minority)
    nodes = f" on {row.majority_nodes:,} nodes" if row.majority_nodes is not None else ""
    parts = [f"{row.majority or '?'}{nodes}"]
    parts += [f"{version} on {hosts_phrase(hosts)}" for version, hosts in row.minority]
    if row.below_minimum:
        parts.append(f"below the minimum {row.minimum or '?'}: {hosts_phrase(row.below_minimum)}")
    return f"{row.label()}: " + "; ".join(parts)


def alike_text(row: DriftRow) -> str:
    """A kind alike on every node, in one line: `driver 580.95.05 on all 12 nodes (8x NVIDIA H100 80GB HBM3)`."""
    nodes = f"all {row.majority_nodes:,} nodes" if row.majority_nodes is not None else "every node"
    return f"{row.what} {row.majority or '?'} on {nodes}" + (f" ({row.among})" if row.among else "")


# ---- rail wiring ---------------------------------------------------------------------------

@record(frozen=True)
class RailRow:
    leaf: str
    switch_guid: str
    rail: str
    ports: int | None
    odd: list[tuple[str, list[str]]]   # other rail -> hosts whose port of it lands on this leaf
    aligned: bool = True                # False: no rail holds most of the leaf's nodes
    not_judged: tuple[str, ...] = ()    # hosts naming this leaf whose NICs' GPUs were guessed


# Why a node's rails are not judged (`not_judged` of a leaf), as the text and HTML say it.
NOT_JUDGED_WHY = "the GPU nearest a NIC was guessed: nvidia-smi topo -m did not place it"


def rail_rows(entries: Iterable[Any]) -> tuple[list[RailRow], list[RailRow]]:
    """(leaves with ports of another rail, most odd ports first; leaves wired as expected)."""
    odd_rows, clean = [], []
    entries = [entry for entry in entries if isinstance(entry, Mapping)]
    # A name two leaves give (the ASICs of one box, a switch left with its default name) is
    # told apart by GUID, so that each name shown is one leaf.
    named = Counter(_text(entry.get("leaf")) for entry in entries)
    for entry in entries:
        odd_map = entry.get("odd")
        odd = [(_text(rail), _hosts(hosts)) for rail, hosts in odd_map.items()] if isinstance(odd_map, Mapping) else []
        odd = sorted(((rail, hosts) for rail, hosts in odd if hosts), key=lambda item: natural_key(item[0]))
        ports = entry.get("ports")
        leaf = _text(entry.get("leaf"))
        if leaf and named[leaf] > 1:
            leaf = f"{leaf} ({_text(entry.get('switch_guid')) or 'no GUID'})"
        row = RailRow(leaf=leaf or _text(entry.get("switch_guid")) or "?",
                      switch_guid=_text(entry.get("switch_guid")), rail=_text(entry.get("rail")),
                      ports=ports if isinstance(ports, int) and not isinstance(ports, bool) else None, odd=odd,
                      aligned=entry.get("aligned") is not False, not_judged=tuple(_hosts(entry.get("not_judged"))))
        (odd_rows if odd else clean).append(row)
    odd_rows.sort(key=lambda row: (-sum(len(hosts) for _, hosts in row.odd), natural_key(row.leaf)))
    return odd_rows, clean


def rail_text(row: RailRow) -> str:
    """`leaf-07 (rail mlx5_3): mlx5_2 of node044`."""
    return f"{row.leaf} (rail {row.rail or '?'}): " + "; ".join(f"{rail} of {hosts_phrase(hosts)}" for rail, hosts in row.odd)


def not_judged_hosts(rows: Iterable[RailRow]) -> list[str]:
    """Every host some leaf lists as not judged, once each, in name order."""
    return sorted({host for row in rows for host in row.not_judged}, key=natural_key)


def clean_leaves_by_rail(rows: list[RailRow]) -> list[tuple[str, list[str], int]]:
    """Leaves wired as expected, grouped by their rail: (rail, leaves, ports); leaves of no
    one rail (a small fabric) last, as `not rail-aligned`, then those no judged node named."""
    groups: dict[tuple[int, str], tuple[list[str], list[int]]] = {}
    for row in rows:
        # 0: aligned on its rail; 1: no rail holds most of its nodes; 2: no judged node named it.
        kind = 0 if row.aligned and row.rail else 1 if row.rail else 2
        leaves, ports = groups.setdefault((kind, row.rail if kind == 0 else ""), ([], []))
        leaves.append(row.leaf)
        ports.append(row.ports or 0)
    return [(rail if kind == 0 else "not rail-aligned" if kind == 1 else "not judged", leaves, sum(ports))
            for (kind, rail), (leaves, ports) in sorted(groups.items(), key=lambda item: (item[0][0], natural_key(item[0][1])))]


# ---- NVLink domains ------------------------------------------------------------------------

@record(frozen=True)
class DomainRow:
    what: str                                # `cluster 00000001-... (chassis 1820000000001)` or `chassis 1820000000001`
    majority: str                            # `clique 2` (a cluster's); `cluster 00000001-...`, `no NVLink domain`
    nodes: int | None
    odd: list[tuple[str, list[str]]]         # where -> the hosts there, by name
    trays: Mapping[str, int]                 # odd host -> its tray index, where known
    split: list[tuple[str, list[str]]]       # no group holds most nodes: each group's hosts

    @property
    def odd_nodes(self) -> int:
        return sum(len(hosts) for _, hosts in self.odd)


def domain_rows(entries: Iterable[Any]) -> tuple[list[DomainRow], list[DomainRow]]:
    """(domains and chassis with nodes elsewhere, the most first; the others)."""
    odd_rows, clean = [], []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        uuid, clique = _text(entry.get("cluster_uuid")), entry.get("clique_id")
        where = f"clique {clique}" if isinstance(clique, int) and not isinstance(clique, bool) else "no clique"
        chassis, racks = entry.get("chassis"), entry.get("chassis_serials")
        majority = ("no NVLink domain" if not uuid else f"cluster {uuid}") if chassis is not None else where
        racks = ", ".join(_hosts(racks)) if chassis is None and isinstance(racks, list) else ""
        odd_map, split_map, trays = entry.get("odd"), entry.get("split"), entry.get("trays")
        groups: dict[str, list[str]] = {}
        for host, there in odd_map.items() if isinstance(odd_map, Mapping) else ():
            groups.setdefault(_text(there), []).append(_text(host))
        nodes = entry.get("nodes")
        row = DomainRow(
            what=f"chassis {_text(chassis)}" if chassis is not None
            else f"cluster {uuid or '?'}" + (f" (chassis {racks})" if racks else ""), majority=majority,
            nodes=nodes if isinstance(nodes, int) and not isinstance(nodes, bool) else None,
            odd=sorted(((there, sorted(hosts, key=natural_key)) for there, hosts in groups.items()),
                       key=lambda item: natural_key(item[0])),
            trays={_text(host): tray for host, tray in trays.items() if isinstance(tray, int) and not isinstance(tray, bool)}
            if isinstance(trays, Mapping) else {},
            split=[(_text(there), _hosts(hosts)) for there, hosts in split_map.items()] if isinstance(split_map, Mapping) else [])
        (odd_rows if row.odd else clean).append(row)
    odd_rows.sort(key=lambda row: (-row.odd_nodes, natural_key(row.what)))
    return odd_rows, clean


def trays_phrase(hosts: list[str], trays: Mapping[str, int]) -> str:
    """`tray 12 (node17)`, `trays 3, 12 (node[05,17])`; the hosts alone where a tray is not known
    or they are many."""
    if not hosts or len(hosts) > 8 or any(host not in trays for host in hosts):
        return hosts_phrase(hosts)
    return f"tray{'s' if len(hosts) > 1 else ''} {', '.join(str(trays[host]) for host in hosts)} ({fold_hosts(hosts)})"


def domain_text(row: DomainRow) -> str:
    """`chassis 1820000000001: tray 12 (node17) in clique 3, the other 17 in clique 2`."""
    parts = "; ".join(f"{trays_phrase(hosts, row.trays)} in {there}" for there, hosts in row.odd)
    others = f", the other {row.nodes - row.odd_nodes:,} in {row.majority}" if row.nodes is not None else ""
    return f"{row.what}: {parts}{others}"


def split_text(row: DomainRow) -> str:
    """`cluster 00000001-...: clique 2 on node[01-09]; clique 3 on node[10-18]`."""
    return f"{row.what}: " + "; ".join(f"{there} on {hosts_phrase(hosts)}" for there, hosts in row.split)


# ---- changes since the previous report -----------------------------------------------------

def grade_groups(grades: Any) -> list[tuple[str, str, list[str]]]:
    """(was, now, hosts) per grade change, the worst `now` first, then the best `was` (news first)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for change in grades if isinstance(grades, list) else ():
        if isinstance(change, Mapping):
            groups.setdefault((_text(change.get("was")), _text(change.get("now"))), []).append(_text(change.get("host")))
    return [(was, now, hosts) for (was, now), hosts in
            sorted(groups.items(), key=lambda item: (-grade_severity(item[0][1]), grade_severity(item[0][0]), item[0]))]


def finding_groups(findings: Any) -> list[tuple[str, str, list[str]]]:
    """(status, what: `check subject: summary`, hosts) per finding alike across hosts, the worst first."""
    groups: dict[tuple[str, str], list[str]] = {}
    for finding in findings if isinstance(findings, list) else ():
        if not isinstance(finding, Mapping):
            continue
        where = " ".join(filter(None, (_text(finding.get("check")), _text(finding.get("subject")))))
        summary = _text(finding.get("summary"))
        what = f"{where}: {summary}" if where and summary else where or summary
        groups.setdefault((_text(finding.get("status")), what), []).append(_text(finding.get("host")))
    return [(status, what, hosts) for (status, what), hosts in
            sorted(groups.items(), key=lambda item: (_STATUS_ORDER.get(item[0][0], 7), -len(item[1]), item[0][1]))]


def version_groups(versions: Any) -> list[tuple[str, str, str, list[str]]]:
    """(what, was, now, hosts) per version change alike across hosts, the most hosts first."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for change in versions if isinstance(versions, list) else ():
        if isinstance(change, Mapping):
            key = (_text(change.get("what")), _text(change.get("was")) or "none", _text(change.get("now")) or "none")
            groups.setdefault(key, []).append(_text(change.get("host")))
    return [(*key, hosts) for key, hosts in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))]


def changes_heading(changes: Mapping[str, Any]) -> str:
    """`What changed since 2026-11-24T06:00:00Z (sweep-2026-11-24.json, 1,024 nodes)`."""
    previous = changes.get("previous") if isinstance(changes.get("previous"), Mapping) else {}
    when = _text(previous.get("generated_at")) or "the previous report"
    nodes = previous.get("nodes")
    about = ", ".join(filter(None, (_text(previous.get("source")),
                                    f"{nodes:,} nodes" if isinstance(nodes, int) and not isinstance(nodes, bool) else "")))
    return f"What changed since {when}" + (f" ({about})" if about else "")


def host_list(changes: Mapping[str, Any], key: str) -> list[str]:
    return sorted(_hosts(changes.get(key)), key=natural_key)
