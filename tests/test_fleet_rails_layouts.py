"""Rail wiring judges each layout once (nodes of one scalable unit are wired alike), weighing its
nodes: the verdict must be the one of judging node by node.

Metamorphic: to each node of a random fleet, add one port on a leaf of its own. Then no two
nodes share a layout, so every layout is one node and the judgement is node by node; the
shared leaves must be judged exactly as in the fleet itself (the private leaves are only added).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from netdoctor.fleet.model import NodeGrade, NodeSummary, Rail
from netdoctor.fleet.rails import find_rails
from netdoctor.fleet.report import build_fleet_report

_PRIVATE = "private-"


def _layout(rng: random.Random, group: int, miswired: dict[int, int]) -> tuple[Rail, ...]:
    """Eight ports by GPU, on the leaves of their rails in `group` (or of rail miswired[port]):
    some GPUs laid out otherwise, some neighbours without a GUID or a name."""
    rails: list[Rail] = []
    for port in range(8):
        wired = miswired.get(port, port)
        gpu: int | None = rng.choice([None, (port + 1) % 8, port // 2 * 2]) if rng.random() < 0.1 else port
        name: str | None = f"leaf-r{wired}-{group}"
        guid: str | None = f"0x{group:04x}{wired:02x}"
        if rng.random() < 0.04:
            guid = None
        elif rng.random() < 0.04:
            name = None
        elif rng.random() < 0.02:
            guid = f"0xdead{rng.randrange(3):02x}"     # one name with several GUIDs
        rails.append((f"mlx5_{port}:1", 400.0, gpu, guid, name))
    return tuple(rails)


def _fleet(seed: int) -> list[NodeSummary]:
    """Nodes of a few layouts, alike but for a few ports (so that nodes of several layouts are odd
    on one leaf); `n7` and `n07` next to each other, tied in the natural order."""
    rng = random.Random(seed)
    miswired = {rng.randrange(8): rng.randrange(8) for _ in range(rng.randrange(3))}
    pool = [_layout(rng, rng.randrange(3), miswired if rng.random() < 0.7 else {}) for _ in range(rng.randrange(1, 8))]
    return [NodeSummary(host=f"n{index // 2}" if index % 2 else f"n0{index // 2}", grade=NodeGrade.PASS,
                        rails=rng.choice(pool), rails_guessed=rng.random() < 0.05)
            for index in range(rng.randrange(1, 120))]


def _alone(node: NodeSummary) -> NodeSummary:
    private: Rail = ("mlx5_99:1", 400.0, None, f"0x{_PRIVATE}{node.host}", f"{_PRIVATE}{node.host}")
    return NodeSummary(host=node.host, grade=node.grade, rails=(*node.rails, private), rails_guessed=node.rails_guessed)


def _shared(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry for entry in entries if not entry["leaf"].startswith(_PRIVATE)]


@pytest.mark.parametrize("seed", range(300))
def test_judging_each_layout_once_gives_the_node_by_node_verdict(seed: int) -> None:
    nodes = _fleet(seed)
    assert find_rails(nodes) == _shared(find_rails([_alone(node) for node in nodes]))


def test_the_fleets_share_layouts_and_find_odd_ports() -> None:
    """The random fleets exercise what they must: shared layouts, odd ports, odd nodes of several
    layouts tied in the natural order."""
    shared = odd = ties = 0
    for seed in range(300):
        nodes = _fleet(seed)
        shared += len({node.rails for node in nodes}) < len(nodes)
        layout = {node.host: node.rails for node in nodes}
        for entry in find_rails(nodes):
            odd += bool(entry["odd"])
            for hosts in entry["odd"].values():
                numbers = [host.removeprefix("n").lstrip("0") for host in hosts]
                ties += any(numbers[i] == numbers[i + 1] and layout[hosts[i]] != layout[hosts[i + 1]]
                            for i in range(len(hosts) - 1))
    assert shared > 250 and odd > 100 and ties >= 5, (shared, odd, ties)


def test_a_host_named_with_more_digits_than_int_converts_sorts_after_every_other(tmp_path: Path) -> None:
    """A hostile sender's name: the natural order puts it last, never raises (Python's 4,300-digit limit)."""
    from netdoctor.fleet.collect import FleetCollector
    from netdoctor.util import natural_key
    huge = "n" + "7" * 5000
    assert sorted([huge, "n10", "n9"], key=natural_key) == ["n9", "n10", huge]
    collector = FleetCollector()
    collector.feed_lines([f"{huge}: not a report\n", "n1: not a report\n"])
    assert [node.host for node in build_fleet_report(collector.finish()).nodes] == ["n1", huge]


def test_nodes_alike_in_the_natural_order_are_listed_in_one_order_whatever_order_they_come_in() -> None:
    """`n01` and `n1` (or two names of more digits than int() converts) tie in the natural order;
    the collector gives its nodes in the order of a set, which changes with the hash seed."""
    hosts = ["n01", "n1", "n001", "n" + "7" * 5000, "n" + "07" * 2500]
    nodes = [NodeSummary(host=host, grade=NodeGrade.PASS) for host in hosts]
    orders = {tuple(node.host for node in build_fleet_report(shuffled).nodes)
              for shuffled in (nodes, nodes[::-1], nodes[2:] + nodes[:2])}
    assert len(orders) == 1
