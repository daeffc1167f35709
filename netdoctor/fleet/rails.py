"""Rail wiring, judged per leaf switch (CONTRACT 6.3 `rails`).

On a rail-optimised fabric every node's rail k (the NIC nearest GPU k) lands on a leaf of
rail k, so a rail-aligned job's traffic never crosses the spine. Each node reports its
compute rails (`fabric.rails`: port, nearest GPU) and each port's first-hop switch
(`neighbors`); per leaf, the rail most of its nodes put there is the leaf's rail, and the
ports of another rail that land there are `odd`: a miswired cable, or two rails of one node
on one leaf. Judged per leaf, it holds at any size (rail k of 1,024 nodes spans ~32 leaves).

Every count is of nodes, never of node layouts or ports, so that no node weighs more than
another (one lying node among a thousand honest ones moves nothing):

* a port sits by the GPU most nodes put it nearest (`placement`), and carries that GPU's rail.
  A node that puts it by another GPU carries the rail of the port most nodes have by that
  GPU (`GPU3` where no one port is: two NICs per GPU); a port whose GPU its node did not know
  sits where most nodes put it. A rail is shown by its HCA (`mlx5_3`), or by its GPU (`GPU3`)
  where some node lays its HCAs out otherwise: one node can change how rails are named,
  never which node is odd.
* on a leaf, each node has one vote, split evenly over the rails it puts there: a node listing
  16 ports on one leaf weighs what a node listing one does.
* a node whose GPU for some NIC was a guess (its report's `fabric.rails_guessed`: nvidia-smi
  topo -m did not place the NIC and its NUMA node holds several GPUs) votes on nothing; it is
  listed as `not_judged` on the leaves it named.

A leaf whose largest rail holds less than `min_majority` of its nodes is not rail-aligned (a
small fabric with every rail on one leaf): `aligned: false`, nothing odd. A rail is odd on an
aligned leaf only while it holds at most `odd_fraction` of its nodes, so a leaf designed for
two rails is not a wiring fault. Linear in the nodes: the nodes of one scalable unit are wired
alike, so each layout (a node's rails and their leaves, exactly) is judged once, weighing as many
votes as it has nodes (10,000 nodes, 32 per leaf: 0.109 -> 0.035 s, benchmarks/results/fleet.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import field
from fractions import Fraction
from typing import Any

from netdoctor.fleet.model import NodeSummary, Rail
from netdoctor.records import record
from netdoctor.util import natural_key


@record(frozen=True)
class RailThresholds:
    min_majority: float = 0.5
    odd_fraction: float = 0.25


# The nodes that share one layout, in the order given, each with its place there (ties of the
# natural order, `n01` and `n1`, keep it).
_Members = list[tuple[int, str]]


@record(slots=True)
class _Leaf:
    """One leaf switch as the judged nodes describe it."""

    guid: str | None
    names: dict[str, int] = field(default_factory=dict)     # switch name -> nodes giving it (one each)
    shares: dict[str, int | Fraction] = field(default_factory=dict)   # rail -> its votes (nodes)
    voters: dict[str, list[_Members]] = field(default_factory=dict)  # rail -> the layouts' nodes voting for it
    nodes: int = 0
    ports: int = 0
    not_judged: list[str] = field(default_factory=list)


def find_rails(nodes: Iterable[NodeSummary], thresholds: RailThresholds = RailThresholds()) -> list[dict[str, Any]]:
    """Per leaf switch: its rail, its port and node counts, the odd ports (rail -> nodes) and
    the nodes not judged there; odd leaves first."""
    with_rails = [node for node in nodes if node.rails]
    layouts: dict[tuple[Rail, ...], _Members] = {}     # a judged layout -> its nodes
    for place, node in enumerate(with_rails):
        if not node.rails_guessed:
            layouts.setdefault(node.rails, []).append((place, node.host))
    guessed = [node for node in with_rails if node.rails_guessed]
    names = _RailNames(layouts)
    keys = _leaf_keys([*layouts, *(node.rails for node in guessed)])
    leaves: dict[str, _Leaf] = {}
    for rails, members in layouts.items():
        _vote(rails, members, names, leaves, keys)
    for node in guessed:
        _not_judged(node, leaves, keys)
    labels = names.labels({rail for leaf in leaves.values() for rail in leaf.shares})
    entries = [_leaf_entry(key, leaf, labels, thresholds) for key, leaf in leaves.items()]
    entries.sort(key=lambda entry: (not entry["odd"], natural_key(entry["leaf"])))
    return entries


def _leaf_keys(layouts: list[tuple[Rail, ...]]) -> dict[str, str]:
    """Switch name -> the one GUID nodes give with it: a node that names a leaf without its GUID
    (a neighbour source that gives none) lands on the same leaf as the nodes giving both, so the
    leaf is one entry, not two. A name given with several GUIDs (two ASICs of one box, or a lie)
    stays its own key."""
    seen: dict[str, str | None] = {}
    for rails in layouts:
        for _, _, _, guid, switch_name in rails:
            if guid is None or switch_name is None:
                continue
            if switch_name not in seen:
                seen[switch_name] = guid
            elif seen[switch_name] != guid:
                seen[switch_name] = None
    return {name: guid for name, guid in seen.items() if guid is not None}


def _key(guid: str | None, switch_name: str | None, keys: dict[str, str]) -> str | None:
    return guid or (keys.get(switch_name, switch_name) if switch_name is not None else None)


def _merged_guid(key: str, switch_name: str | None) -> str | None:
    """The GUID a name-only port was keyed by (None where it kept its name as key)."""
    return key if switch_name is not None and key != switch_name else None


def _vote(rails_of_layout: tuple[Rail, ...], members: _Members, names: _RailNames, leaves: dict[str, _Leaf],
          keys: dict[str, str]) -> None:
    """Each member node's one vote on each leaf the layout names, split evenly over the rails it puts there."""
    # Leaf (by GUID, else name) -> (its GUID, its name as this layout gives it, the rails there, each once).
    on_leaf: dict[str, tuple[str | None, str | None, list[str]]] = {}
    for port, _, gpu, guid, switch_name in rails_of_layout:
        key = _key(guid, switch_name, keys)
        if key is None:
            continue
        guid = guid or _merged_guid(key, switch_name)
        rail = names.of(port, gpu)
        there = on_leaf.get(key)
        if there is None:
            on_leaf[key] = (guid, switch_name, [rail])
        elif rail not in there[2]:
            there[2].append(rail)
    votes = len(members)
    for key, (guid, switch_name, rails) in on_leaf.items():
        leaf = _leaf(leaves, key, guid)
        leaf.nodes += votes
        leaf.ports += len(rails) * votes
        if switch_name is not None:
            leaf.names[switch_name] = leaf.names.get(switch_name, 0) + votes
        # Exact shares, so that the thresholds compare without rounding.
        share: int | Fraction = votes if len(rails) == 1 else Fraction(votes, len(rails))
        shares, voters = leaf.shares, leaf.voters
        for rail in rails:
            if rail in shares:
                shares[rail] += share
                voters[rail].append(members)
            else:
                shares[rail] = share
                voters[rail] = [members]


def _not_judged(node: NodeSummary, leaves: dict[str, _Leaf], keys: dict[str, str]) -> None:
    """The node listed on each leaf it names, voting on nothing (not even the leaf's name, unless
    no judged node gives one)."""
    named: set[str] = set()
    for _, _, _, guid, switch_name in node.rails:
        key = _key(guid, switch_name, keys)
        if key is not None and key not in named:
            named.add(key)
            leaf = _leaf(leaves, key, guid or _merged_guid(key, switch_name))
            leaf.not_judged.append(node.host)
            if switch_name is not None and not leaf.nodes:
                leaf.names[switch_name] = leaf.names.get(switch_name, 0) + 1


def _leaf(leaves: dict[str, _Leaf], key: str, guid: str | None) -> _Leaf:
    leaf = leaves.get(key)
    if leaf is None:
        leaf = leaves[key] = _Leaf(guid)
    return leaf


class _RailNames:
    """Each node's rails named from where most nodes put each port (`of`), and shown (`labels`)."""

    def __init__(self, layouts: dict[tuple[Rail, ...], _Members]) -> None:
        placed: Counter[tuple[str, int]] = Counter()   # (port, GPU) -> nodes (a node lists a port once)
        for rails, members in layouts.items():
            for port, _, gpu, _, _ in rails:
                if gpu is not None:
                    placed[port, gpu] += len(members)
        # port -> (nodes, GPU): the GPU most nodes put it by (the lower GPU of a tie).
        self.placement: dict[str, tuple[int, int]] = {}
        for (port, gpu), count in placed.items():
            best = self.placement.get(port)
            if best is None or (count, -gpu) > (best[0], -best[1]):
                self.placement[port] = (count, gpu)
        # GPU -> (nodes, the port most nodes put there); None where two tie (two NICs per GPU).
        self.at_gpu: dict[int, tuple[int, str | None]] = {}
        for port, (count, gpu) in self.placement.items():
            best = self.at_gpu.get(gpu)
            if best is None or count > best[0]:
                self.at_gpu[gpu] = (count, port)
            elif count == best[0]:
                self.at_gpu[gpu] = (count, None)
        self.relaid = False   # some node puts a port by another GPU than most nodes do

    def of(self, port: str, gpu: int | None) -> str:
        """The rail a node's `port` carries, the node putting it by `gpu`."""
        usual = self.placement.get(port)
        if gpu is None or usual is None or usual[1] == gpu:
            return port
        # This node puts the port by another GPU: it carries the rail of that GPU's NIC.
        self.relaid = True
        there = self.at_gpu.get(gpu)
        return there[1] if there is not None and there[1] is not None else f"GPU{gpu}"

    def labels(self, rails: set[str]) -> dict[str, str]:
        """Each rail as shown: by its GPU (`GPU3`) where some node lays its HCAs out otherwise,
        else by its HCA (`mlx5_3`); with the port number where two rails would read alike."""
        short = {rail: rail.partition(":")[0] for rail in rails}
        if self.relaid:
            by_gpu = {rail: f"GPU{self.placement[rail][1]}" if rail in self.placement else short[rail] for rail in rails}
            if len(set(by_gpu.values())) == len(by_gpu):
                return by_gpu
        return short if len(set(short.values())) == len(short) else {rail: rail for rail in rails}


def _leaf_entry(key: str, leaf: _Leaf, labels: dict[str, str], thresholds: RailThresholds) -> dict[str, Any]:
    name = min(leaf.names, key=lambda name: (-leaf.names[name], natural_key(name))) if leaf.names else None
    entry: dict[str, Any] = {"leaf": name or leaf.guid or key, "switch_guid": leaf.guid, "rail": None,
                             "ports": leaf.ports, "nodes": leaf.nodes, "odd": {}}
    shares = leaf.shares
    if shares:
        rail = min(shares, key=lambda name: (-shares[name], natural_key(labels[name])))
        entry["rail"] = labels[rail]
        if shares[rail] < thresholds.min_majority * leaf.nodes:
            entry["aligned"] = False
        else:
            entry["odd"] = {labels[other]: sorted(_in_order(leaf.voters[other]), key=natural_key)
                            for other in sorted(shares, key=lambda name: natural_key(labels[name]))
                            if other != rail and shares[other] <= thresholds.odd_fraction * leaf.nodes}
    if leaf.not_judged:
        entry["not_judged"] = sorted(leaf.not_judged, key=natural_key)
    return entry


def _in_order(layouts: list[_Members]) -> list[str]:
    """The nodes of `layouts`, in the order the nodes were given."""
    return [host for _, host in sorted(member for members in layouts for member in members)]
