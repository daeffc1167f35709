"""No node can sway `fleet probe`'s verdict on another (issue 21), tried as an attacker would:
a slow node at every place of an odd count (the last three used to share both their groups,
so a slow n7 failed n6), lies about a node's own fabric (one 1 Gb/s rail used to lower its
groups' expectation until a slow partner passed at "157500 %"; a huge one would fail healthy
partners), lies about a node's own measurement, and the schedule's one rule as a property:
no two nodes share every group."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from netdoctor.errors import RulesError
from netdoctor.fleet.model import NodeGrade, NodeSummary
from netdoctor.fleet.probe_plan import (
    ROUND_RAILS, Group, Measurement, NodeFabric, Thresholds, fleet_expectation, localise, majority_fabric, node_grades)
from netdoctor.fleet.probe_run import _group_measurement, pair_rows
from netdoctor.fleet.settings import fleet_settings
from test_fleet_probe import fleet_probe, lab, needs_pdsh

RAILS = tuple((f"mlx5_{index}:1", 400.0) for index in (0, 3, 4, 5, 6, 9, 10, 11))
FABRIC = NodeFabric(8, RAILS)
HEALTHY_GBPS = 350.0            # 97 % of 8 x 400 Gb/s / 8 x 0.9 = 360 GB/s


class Fleet:
    """Simulated traffic: a group runs at the pace of its slowest member (NCCL's all-reduce does);
    `reported` overrides what a lying node says its groups measured (the slower report counts,
    as in probe_run._group_measurement); `silent` nodes never answer."""

    def __init__(self, slow: dict[str, float] | None = None, reported: dict[str, float] | None = None,
                 silent: frozenset[str] = frozenset()) -> None:
        self.slow, self.reported, self.silent = slow or {}, reported or {}, silent
        self.rounds: list[tuple[int, list[tuple[str, ...]]]] = []

    def measure(self, number: int, groups: list[Group]) -> list[Measurement]:
        self.rounds.append((number, [group.hosts for group in groups]))
        out = []
        for group in groups:
            quiet = tuple(host for host in group.hosts if host in self.silent)
            if quiet:
                out.append(Measurement(group.hosts, number, status="unreachable", why="timeout", silent=quiet))
                continue
            true = HEALTHY_GBPS * min(self.slow.get(host, 1.0) for host in group.hosts)
            said = min([true] + [self.reported[host] for host in group.hosts if host in self.reported])
            rails = {port: said / 8 for port, _ in RAILS} if group.rails else {}
            out.append(Measurement(group.hosts, number, said, rails))
        return out


def probe(hosts: list[str], fleet: Fleet, fabrics: dict[str, NodeFabric] | None = None,
          ) -> tuple[list[Measurement], list[tuple[str, str | None]], dict[str, str]]:
    """Every round through `fleet`: the measurements, the suspects (kind, host), each node's grade."""
    fabrics = fabrics or {host: FABRIC for host in hosts}
    thresholds = Thresholds()
    measurements, suspects = localise(hosts, fabrics, thresholds, fleet.measure)
    grades = node_grades(hosts, measurements, suspects, fabrics, thresholds)
    return (measurements, sorted((suspect.kind, suspect.host) for suspect in suspects),
            {host: grade for host, (grade, _) in grades.items()})


def names(count: int) -> list[str]:
    return [f"n{index}" for index in range(1, count + 1)]


def test_seven_nodes_only_n7_slow_only_n7_fails() -> None:
    hosts = names(7)
    _, suspects, grades = probe(hosts, Fleet(slow={"n7": 0.45}))
    assert suspects == [("node", "n7")]
    assert grades == {**{host: "pass" for host in hosts}, "n7": "fail"}


@pytest.mark.parametrize("count", [3, 4, 5, 9, 11])
@pytest.mark.parametrize("where", ["first", "second", "middle", "second-last", "last"])
def test_one_slow_node_anywhere_is_the_only_suspect(count: int, where: str) -> None:
    hosts = names(count)
    slow = hosts[{"first": 0, "second": 1, "middle": count // 2, "second-last": -2, "last": -1}[where]]
    _, suspects, grades = probe(hosts, Fleet(slow={slow: 0.45}))
    assert suspects == [("node", slow)]
    assert grades == {**{host: "pass" for host in hosts}, slow: "fail"}


def test_two_nodes_cannot_be_told_apart_and_neither_is_accused() -> None:
    measurements, suspects, grades = probe(["a", "b"], Fleet(slow={"b": 0.45}))
    assert [m.hosts for m in measurements] == [("a", "b")]
    assert suspects == [] and grades == {"a": "warn", "b": "warn"}
    why = node_grades(["a", "b"], measurements, [], {"a": FABRIC, "b": FABRIC}, Thresholds())["a"][1]
    assert why == "44% of the expected bus bandwidth with b; its only measured partner: the two are not told apart"


def test_a_node_claiming_one_slow_rail_cannot_make_a_slow_partner_pass() -> None:
    # The red team's case: n2 says it has one 1 Gb/s rail, n3 really runs at 45 %.
    hosts = names(7)
    fabrics = {**{host: FABRIC for host in hosts}, "n2": NodeFabric(8, (("mlx5_0:1", 1.0),))}
    fleet = Fleet(slow={"n3": 0.45})
    measurements, suspects, grades = probe(hosts, fleet, fabrics)
    assert suspects == [("node", "n3")] and grades["n3"] == "fail" and grades["n2"] == "pass"
    rows = pair_rows(measurements, fabrics, Thresholds(), sharp_expected=False)
    assert {row["expected_gbps"] for row in rows} == {360.0}
    assert {row["status"] for row in rows if "n3" in row["hosts"] and row["round"] != ROUND_RAILS} == {"fail"}


def test_a_slow_node_cannot_excuse_itself_by_claiming_a_small_fabric() -> None:
    hosts = names(8)
    fabrics = {**{host: FABRIC for host in hosts}, "n5": NodeFabric(1, (("mlx5_0:1", 1.0),))}
    _, suspects, grades = probe(hosts, Fleet(slow={"n5": 0.3}), fabrics)
    assert suspects == [("node", "n5")] and grades["n5"] == "fail"


def test_a_node_claiming_a_huge_fabric_cannot_fail_healthy_partners() -> None:
    hosts = names(9)
    huge = NodeFabric(8, tuple((f"mlx5_{index}:1", 800.0) for index in range(64)))
    _, suspects, grades = probe(hosts, Fleet(), {**{host: FABRIC for host in hosts}, "n4": huge})
    assert suspects == [] and set(grades.values()) == {"pass"}
    # Two nodes that disagree hold no majority, so there is no expectation, and their one group is
    # alone in its round: judged against nothing (never against itself, nor the bigger claim).
    _, suspects, grades = probe(["a", "b"], Fleet(), {"a": FABRIC, "b": huge})
    assert suspects == [] and grades == {"a": "unknown", "b": "unknown"}


def test_the_expectation_is_the_pack_else_the_majority_else_none() -> None:
    fabrics = {"a": FABRIC, "b": FABRIC, "c": NodeFabric(8, (("mlx5_0:1", 1.0),))}
    assert fleet_expectation(fabrics, Thresholds()) == 360.0
    assert fleet_expectation(fabrics, Thresholds(expected_busbw_gbps=180.0)) == 180.0
    # Port names and order do not split like nodes; a tie is no majority.
    renamed = NodeFabric(8, tuple((f"ib{index}", rate) for index, (_, rate) in enumerate(reversed(RAILS))))
    assert majority_fabric({"a": FABRIC, "b": renamed, "c": fabrics["c"]}) == (8, (400.0,) * 8)
    assert majority_fabric({"a": FABRIC, "c": fabrics["c"]}) is None
    # Most nodes report no rate: a minority's rates set nothing.
    assert fleet_expectation({"a": NodeFabric(8), "b": NodeFabric(8), "c": FABRIC}, Thresholds()) is None


def test_the_pack_key_is_read_and_checked(tmp_path: Path) -> None:
    assert fleet_settings(None).probe.expected_busbw_gbps == 0.0
    pack = tmp_path / "site.toml"
    pack.write_text('[pack]\nname = "site"\nextends = "default"\n\n[fleet-probe]\nexpected_busbw_gbps = 200\n')
    assert fleet_settings(str(pack)).probe.expected_busbw_gbps == 200.0
    for bad in ("-1", '"fast"', "true"):
        pack.write_text(f'[pack]\nname = "site"\nextends = "default"\n\n[fleet-probe]\nexpected_busbw_gbps = {bad}\n')
        with pytest.raises(RulesError, match="expected_busbw_gbps"):
            fleet_settings(str(pack))


def test_a_node_reporting_a_false_low_number_only_accuses_itself() -> None:
    hosts = names(9)
    _, suspects, grades = probe(hosts, Fleet(reported={"n5": 1.0}))
    assert suspects == [("node", "n5")]
    assert grades == {**{host: "pass" for host in hosts}, "n5": "fail"}


def test_a_node_reporting_a_huge_number_cannot_hide_a_slow_partner() -> None:
    answers = {"a": NodeSummary("a", NodeGrade.PASS, probe={"status": "ok", "busbw_gbps": 1e9}),
               "b": NodeSummary("b", NodeGrade.PASS, probe={"status": "ok", "busbw_gbps": 100.0})}
    assert _group_measurement(1, Group(("a", "b"), 29400), answers).busbw_gbps == 100.0


def test_a_healthy_node_between_two_slow_ones_is_not_accused() -> None:
    # n3 meets only n2 and n4, both slow with every partner: the pairs cannot tell n3 from them.
    hosts = names(8)
    _, suspects, grades = probe(hosts, Fleet(slow={"n2": 0.45, "n4": 0.45}))
    assert suspects == [("node", "n2"), ("node", "n4")]
    assert grades["n3"] == "warn" and grades["n2"] == grades["n4"] == "fail"
    assert {host for host, grade in grades.items() if grade == "pass"} == set(hosts) - {"n2", "n3", "n4"}


def _groups_of(rounds: list[tuple[int, list[tuple[str, ...]]]], measurements: list[Measurement],
               ) -> dict[str, list[frozenset[str]]]:
    answered = {m.hosts for m in measurements if not m.silent and m.round != ROUND_RAILS}
    mine: dict[str, list[frozenset[str]]] = {}
    for _, groups in rounds:
        for group in groups:
            if group in answered:
                for host in group:
                    mine.setdefault(host, []).append(frozenset(group))
    return mine


@pytest.mark.parametrize("count", range(3, 41))
def test_no_two_nodes_share_every_group(count: int) -> None:
    hosts = names(count)
    fleet = Fleet()
    measurements, _, _ = probe(hosts, fleet)
    for _, groups in fleet.rounds:
        members = [host for group in groups for host in group]
        assert len(members) == len(set(members)), "a node in two groups of one round"
        assert all(len(group) == 2 for group in groups)
    mine = _groups_of(fleet.rounds, measurements)
    assert set(mine) == set(hosts)
    for host, groups in mine.items():
        partners = set().union(*groups) - {host}
        assert len(partners) >= 2, host
        for other in partners:
            assert not all(other in group for group in groups), (host, other)


@pytest.mark.parametrize("seed", range(40))
def test_silent_nodes_never_get_a_partner_accused(seed: int) -> None:
    """Nodes that never answer (at any round, also one first asked in round 2): their partners
    get fresh partners; a node left with one partner (two of its partners went silent, one
    top-up is all there is) is never accused, and no node but the slow one fails."""
    chooser = random.Random(seed)
    hosts = names(chooser.randrange(4, 30))
    silent = frozenset(chooser.sample(hosts, chooser.randrange(1, max(2, len(hosts) // 4))))
    slow = chooser.choice([host for host in hosts if host not in silent])
    fleet = Fleet(slow={slow: 0.45}, silent=silent)
    measurements, suspects, grades = probe(hosts, fleet)
    mine = _groups_of(fleet.rounds, measurements)
    silenced = {host for m in measurements if m.silent for host in m.hosts}
    for host, groups in mine.items():
        partners = set().union(*groups) - {host}
        if len(partners) < 2:
            assert host in silenced and (("node", host) not in suspects), host
    assert {grades[host] for host in silent} == {"unreachable"}
    assert {host for host, grade in grades.items() if grade == "fail"} <= {slow}
    assert suspects in ([], [("node", slow)])
    if len(mine.get(slow, [])) >= 2:
        assert suspects == [("node", slow)] and grades[slow] == "fail"


@needs_pdsh
def test_seven_nodes_end_to_end_a_slow_last_node_fails_alone(tmp_path: Path) -> None:
    # n8 fails its check and is left out: 7 nodes in the pairs, the last one slow.
    commands = lab(tmp_path, {"pair_busbw_gbps": 350.0, "nodes": {"n7": {"factor": 0.45}}}, failing=("n8",))
    fleet, code, stderr = fleet_probe(commands, "--round-timeout", "60")
    grades = {node["host"]: node["grade"] for node in fleet["nodes"]}
    assert grades == {**{f"n{index}": "pass" for index in range(1, 7)}, "n7": "fail", "n8": "fail"}, stderr
    assert [(item["kind"], item["host"]) for item in fleet["probe"]["suspects"]] == [("node", "n7")]
    assert all(len(pair["hosts"]) == 2 for pair in fleet["probe"]["pairs"])
    assert {pair["expected_gbps"] for pair in fleet["probe"]["pairs"]} == {360.0}
    assert json.dumps(fleet["probe"]["rounds"]) == json.dumps(
        [{"round": 1, "groups": 3}, {"round": 2, "groups": 3}, {"round": 2, "groups": 1}, {"round": 3, "groups": 1}])
    assert code == 2
