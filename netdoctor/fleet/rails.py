"""Rail wiring, judged per leaf switch (CONTRACT 6.3 `rails`).

On a rail-optimised fabric every node's rail k (the NIC nearest GPU k) lands on a leaf of
rail k, so a rail-aligned job's traffic never crosses the spine. Each node reports its
compute rails (`fabric.rails`: port, nearest GPU) and each port's first-hop switch
(`neighbors`); per leaf, the rail most of its ports belong to is the leaf's rail, and
the ports of another rail that land there are `odd`: a miswired cable, or two rails of one
node on one leaf. Judged per leaf, it holds at any size (rail k of 1,024 nodes spans ~32
leaves).

A rail's name is the HCA's (`mlx5_3`) where every node puts that HCA nearest the same GPU;
otherwise `GPU3` (the NIC nearest GPU 3), so nodes that name their NICs differently still
compare. A leaf whose largest rail holds less than `min_majority` of its ports is not
rail-aligned (a small fabric with every rail on one leaf): `aligned: false`, nothing odd.
A rail is odd on an aligned leaf only while it holds at most `odd_fraction` of its ports,
so a leaf designed for two rails is not a wiring fault.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from netdoctor.fleet.model import NodeSummary
from netdoctor.util import natural_key


@dataclass(frozen=True)
class RailThresholds:
    min_majority: float = 0.5
    odd_fraction: float = 0.25


def find_rails(nodes: Iterable[NodeSummary], thresholds: RailThresholds = RailThresholds()) -> list[dict[str, Any]]:
    """Per leaf switch: its rail, its port count, and the odd ports (rail -> nodes); odd leaves first."""
    # Per leaf (by GUID, else name): its GUID, its name, and (port, nearest GPU, host) of every port on it.
    leaves: dict[str, tuple[str | None, str | None, list[tuple[str, int | None, str]]]] = {}
    layouts: set[tuple[tuple[str, int | None], ...]] = set()   # each node's (port, nearest GPU) pairs
    for node in nodes:
        host = node.host
        if not node.rails:
            continue
        layouts.add(tuple([rail[:3:2] for rail in node.rails]))
        for port, _, gpu, guid, switch_name in node.rails:
            key = guid or switch_name
            if key is None:
                continue
            leaf = leaves.get(key)
            if leaf is None:
                leaf = leaves[key] = (guid, switch_name, [])
            leaf[2].append((port, gpu, host))
    # A rail's name: the HCA's where every node puts each port nearest the same GPU, else the
    # GPU's; a port whose GPU a node did not know is named as most nodes place that port.
    pairs = {pair for layout in layouts for pair in layout}
    placed = Counter(pair for layout in layouts for pair in layout if pair[1] is not None)
    uniform = len({port for port, _ in placed}) == len(placed)
    usual = {port: gpu for (port, gpu), _ in sorted(placed.items(), key=lambda item: item[1])}
    two_ports = any(len({port.partition(":")[0] for port, _ in layout}) < len(layout) for layout in layouts)
    names = {(port, gpu): _rail_name(port, gpu if gpu is not None else usual.get(port), uniform, two_ports)
             for port, gpu in pairs}
    entries = [_leaf_entry(guid, switch_name, [(names[(port, gpu)], host) for port, gpu, host in ports], thresholds)
               for guid, switch_name, ports in leaves.values()]
    entries.sort(key=lambda entry: (not entry["odd"], natural_key(entry["leaf"])))
    return entries


def _rail_name(port: str, gpu: int | None, uniform: bool, two_ports: bool) -> str:
    if uniform or gpu is None:
        return port if two_ports else port.partition(":")[0]
    return f"GPU{gpu}"


def _leaf_entry(guid: str | None, switch_name: str | None, ports: list[tuple[str, str]],
                thresholds: RailThresholds) -> dict[str, Any]:
    # A node counts once per rail on a leaf: one node listing a port many times outvotes nobody.
    ports = list(dict.fromkeys(ports))
    counts = Counter([rail for rail, _ in ports])
    rail = min(counts, key=lambda name: (-counts[name], natural_key(name))) if len(counts) > 1 else next(iter(counts))
    aligned = counts[rail] >= thresholds.min_majority * len(ports)
    odd: dict[str, list[str]] = {}
    if aligned and len(counts) > 1:
        for other, count in sorted(counts.items(), key=lambda item: natural_key(item[0])):
            if other != rail and count <= thresholds.odd_fraction * len(ports):
                odd[other] = sorted({host for name, host in ports if name == other}, key=natural_key)
    entry: dict[str, Any] = {"leaf": switch_name or guid or "?", "switch_guid": guid, "rail": rail,
                             "ports": len(ports), "odd": odd}
    if not aligned:
        entry["aligned"] = False
    return entry
