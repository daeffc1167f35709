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
import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from netdoctor.fleet.model import NodeSummary
from netdoctor.util import natural_key


@dataclass(frozen=True)
class RailThresholds:
    min_majority: float = 0.5
    odd_fraction: float = 0.25


def _namer(nodes: Sequence[NodeSummary]) -> Callable[[str, int | None], str]:
    """The rail name of (port, gpu): the HCA name where the layout is alike on every node, else the GPU."""
    gpus_of: dict[str, set[int | None]] = {}
    two_ports = False
    for node in nodes:
        devices = [port.split(":")[0] for port, _, _ in node.rails]
        two_ports = two_ports or len(set(devices)) < len(devices)
        for port, _, gpu in node.rails:
            gpus_of.setdefault(port, set()).add(gpu)
    uniform = all(len(gpus) == 1 for gpus in gpus_of.values())

    def name(port: str, gpu: int | None) -> str:
        if uniform or gpu is None:
            return port if two_ports else port.split(":")[0]
        return f"GPU{gpu}"
    return name


def find_rails(nodes: Iterable[NodeSummary], thresholds: RailThresholds = RailThresholds()) -> list[dict[str, Any]]:
    """Per leaf switch: its rail, its port count, and the odd ports (rail -> nodes); odd leaves first."""
    wired = [node for node in nodes if node.neighbors and node.rails]
    name = functools.cache(_namer(wired))
    leaves: dict[str, tuple[str | None, str | None, list[tuple[str, str]]]] = {}
    for node in wired:
        neighbors = node.neighbors
        for port, _, gpu in node.rails:
            switch = neighbors.get(port)
            if switch is None:
                continue
            guid = switch["switch_guid"]
            key = guid or switch["switch_name"]
            leaf = leaves.get(key)   # type: ignore[arg-type]
            if leaf is None:
                leaf = leaves[key] = (guid, switch["switch_name"], [])   # type: ignore[index]
            leaf[2].append((name(port, gpu), node.host))
    entries = [_leaf_entry(guid, switch_name, ports, thresholds) for guid, switch_name, ports in leaves.values()]
    entries.sort(key=lambda entry: (not entry["odd"], natural_key(entry["leaf"])))
    return entries


def _leaf_entry(guid: str | None, switch_name: str | None, ports: list[tuple[str, str]],
                thresholds: RailThresholds) -> dict[str, Any]:
    counts = Counter(rail for rail, _ in ports)
    rail = min(counts, key=lambda name: (-counts[name], natural_key(name)))
    most = counts[rail]
    aligned = most >= thresholds.min_majority * len(ports)
    odd: dict[str, list[str]] = {}
    if aligned:
        for other, count in sorted(counts.items(), key=lambda item: natural_key(item[0])):
            if other != rail and count <= thresholds.odd_fraction * len(ports):
                odd[other] = sorted({host for name, host in ports if name == other}, key=natural_key)
    entry: dict[str, Any] = {"leaf": switch_name or guid or "?", "switch_guid": guid, "rail": rail,
                             "ports": len(ports), "odd": odd}
    if not aligned:
        entry["aligned"] = False
    return entry
