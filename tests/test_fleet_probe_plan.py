"""fleet probe's schedule and localisation, on paper and in simulation: pairs that meet two
partners in two rounds, suspects only where every partner saw it slow, rails named in a third
round; 1,000 simulated nodes with a planted slow node and a planted slow rail localised in three
rounds (benchmarks/fleet_probe_sim.py prints the same run with timings)."""

from __future__ import annotations

import random

import pytest

from netdoctor.fleet.probe_plan import (
    Group, Measurement, NodeFabric, Thresholds, localise, node_grades, node_suspects, pair_round)

RAILS = tuple((f"mlx5_{index}:1", 400.0) for index in (0, 3, 4, 5, 6, 9, 10, 11))
FABRIC = NodeFabric(8, RAILS)


def test_rounds_give_every_node_two_different_partners() -> None:
    # An odd count: the node that sat a round out gets a top-up partner, never a group of three
    # (n05 and n06 used to share both their groups, so a slow n06 failed n05 too).
    hosts = [f"n{index:02d}" for index in range(7)]
    rounds: list[tuple[int, list[tuple[str, ...]]]] = []

    def measure(number: int, groups: list[Group]) -> list[Measurement]:
        rounds.append((number, [group.hosts for group in groups]))
        return [Measurement(group.hosts, number, 350.0) for group in groups]

    localise(hosts, {host: FABRIC for host in hosts}, Thresholds(), measure)
    assert rounds == [(1, [("n00", "n01"), ("n02", "n03"), ("n04", "n05")]),
                      (2, [("n01", "n02"), ("n03", "n04"), ("n05", "n06")]),
                      (2, [("n00", "n06")])]
    for host in hosts:
        partners = {other for _, groups in rounds for group in groups if host in group for other in group} - {host}
        assert len(partners) == 2, host
    assert [group.hosts for group in pair_round(hosts, {}, 0, 29400)] == rounds[0][1]


def test_one_slow_pair_alone_blames_neither() -> None:
    fabrics = {host: FABRIC for host in ("a", "b", "c", "d")}
    measurements = [Measurement(("a", "b"), 1, 100.0), Measurement(("c", "d"), 1, 350.0),
                    Measurement(("b", "c"), 2, 350.0), Measurement(("d", "a"), 2, 350.0)]
    assert node_suspects(measurements, fabrics, Thresholds()) == []
    assert node_grades(["a"], measurements, [], fabrics, Thresholds())["a"][0] == "pass"


class Fabric:
    """A simulated fleet: a node factor and per-rail factors; NCCL's all-reduce runs at the
    pace of its slowest rail, so one rail at half speed halves the pair."""

    def __init__(self, hosts: list[str], slow_node: str, slow_rail: tuple[str, str], seed: int = 7) -> None:
        self.node = {host: 1.0 for host in hosts}
        self.node[slow_node] = 0.45
        self.rail = {(slow_rail[0], slow_rail[1]): 0.5}
        self.random = random.Random(seed)
        self.rounds: list[int] = []

    def factor(self, host: str) -> float:
        return self.node[host] * min([self.rail.get((host, port), 1.0) for port, _ in RAILS])

    def measure(self, number: int, groups: list[Group]) -> list[Measurement]:
        self.rounds.append(number)
        out = []
        for group in groups:
            noise = self.random.uniform(0.97, 1.03)
            if group.rails:
                rails = {port: round(45.0 * noise * min(self.node[host] * self.rail.get((host, port), 1.0)
                                                        for host in group.hosts), 2) for port, _ in RAILS}
                out.append(Measurement(group.hosts, number, min(rails.values()) * 8, rails))
            else:
                out.append(Measurement(group.hosts, number, round(360.0 * noise * min(map(self.factor, group.hosts)), 1)))
        return out


@pytest.mark.parametrize("count", [8, 9, 1000])
def test_a_slow_node_and_a_slow_rail_are_named_in_three_rounds(count: int) -> None:
    hosts = [f"node{index:04d}" for index in range(count)]
    slow_node, slow_rail_host = hosts[count // 3], hosts[2 * count // 3]
    fleet = Fabric(hosts, slow_node, (slow_rail_host, "mlx5_4:1"))
    fabrics = {host: FABRIC for host in hosts}
    measurements, suspects = localise(hosts, fabrics, Thresholds(), fleet.measure)
    # An odd count adds a top-up (numbered 2) for the two nodes that each sat a round out.
    assert fleet.rounds == ([1, 2, 3] if count % 2 == 0 else [1, 2, 2, 3])
    assert sorted((suspect.kind, suspect.host, suspect.subject) for suspect in suspects) == sorted(
        [("node", slow_node, None), ("rail", slow_rail_host, "mlx5_4:1")])
    grades = {host: grade for host, (grade, _) in node_grades(hosts, measurements, suspects, fabrics, Thresholds()).items()}
    assert {host for host, grade in grades.items() if grade != "pass"} == {slow_node, slow_rail_host}
    assert grades[slow_node] == "fail" and grades[slow_rail_host] == "fail"


def test_without_rates_the_rounds_median_is_the_yardstick() -> None:
    hosts = [f"n{index}" for index in range(6)]
    fleet = Fabric(hosts, "n2", ("n5", "mlx5_0:1"))
    fleet.rail = {}
    measurements, suspects = localise(hosts, {host: NodeFabric(8) for host in hosts}, Thresholds(), fleet.measure)
    assert [(suspect.kind, suspect.host) for suspect in suspects] == [("node", "n2")]
    assert "every rail was slow" in suspects[0].why


def test_a_silent_node_is_unreachable_and_its_partners_are_not_blamed() -> None:
    fabrics = {host: FABRIC for host in "abcd"}
    measurements = [Measurement(("a", "b"), 1, None, status="unreachable", why="b: command timeout", silent=("b",)),
                    Measurement(("c", "d"), 1, 350.0), Measurement(("b", "c"), 2, None, status="unreachable",
                                                                  why="b: command timeout", silent=("b",)),
                    Measurement(("d", "a"), 2, 350.0)]
    assert node_suspects(measurements, fabrics, Thresholds()) == []
    assert node_grades(["b"], measurements, [], fabrics, Thresholds())["b"] == ("unreachable", "b: command timeout")
    assert node_grades(["a"], measurements, [], fabrics, Thresholds())["a"][0] == "pass"


def test_a_pair_on_tcp_sockets_is_never_a_pass() -> None:
    """NCCL fell back to sockets (an EFA node without aws-ofi-nccl, NCCL_NET=Socket): even where the
    yardstick is the round's median (every pair on sockets), the row warns and says why."""
    from netdoctor.fleet.probe_run import pair_rows

    fabrics = {host: NodeFabric(8) for host in "abcd"}
    why = "NCCL ran over TCP sockets (NET/Socket), not the GPU fabric"
    measurements = [Measurement(("a", "b"), 1, 11.0, transport="NET/Socket", why=why),
                    Measurement(("c", "d"), 1, 11.0, transport="NET/Libfabric/GDRDMA")]
    rows = pair_rows(measurements, fabrics, Thresholds(), sharp_expected=False)
    assert [(row["transport"], row["status"], row.get("why")) for row in rows] == [
        ("NET/Socket", "warn", why), ("NET/Libfabric/GDRDMA", "pass", None)]
