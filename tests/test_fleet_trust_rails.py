"""Issue 21: no node can sway the fleet's verdict on another, in rail wiring or attribution.

Built as an attacker would: hostile node reports beside honest ones. Rail wiring counts nodes
(one vote per node per leaf, split over the rails it puts there; where a port sits from the
GPU most nodes put it by); a node whose GPU for a NIC was a guess is not judged. A sender
made `invalid` keeps each of its reports' verdicts beside, so no second report or file hides
a failing node, nor makes the exit code better than its worst verdict.
"""

from __future__ import annotations

import json
import time
import zlib
from pathlib import Path
from typing import Any

from netdoctor.fleet.cli import main as fleet_main
from netdoctor.fleet.collect import FleetCollector
from netdoctor.fleet.model import NodeGrade, NodeSummary, summarize_report
from netdoctor.fleet.rails import find_rails
from netdoctor.fleet.render import render_html, render_json, render_text
from netdoctor.fleet.report import build_fleet_report
from netdoctor.run import CheckOptions, run_check
from test_fleet_collect import LINK_FAIL, make_report, prefixed
from test_fleet_drift import report as node_report
from test_fleet_fixtures import NODES, _node, _reports

PORT_DOWN = {"check": "port-state", "status": "fail", "subject": "mlx5_4:1",
             "summary": "port is Down (physical state Disabled)", "evidence": {}}
# The hgx-a100 layout: two NICs by each even GPU.
A100_GPUS = (0, 0, 2, 2, 4, 4, 6, 6)


def _switch(leaf: str, host: str) -> dict[str, Any]:
    return {"switch_guid": f"0xfc6a1c0300{zlib.crc32(leaf.encode()) % 16**6:06x}", "switch_name": leaf,
            "switch_port": 1 + zlib.crc32(host.encode()) % 64}


def fabric_report(host: str, layout: list[tuple[str, int | None, str]], **fabric: Any) -> dict[str, Any]:
    """A passing node report whose rails are `layout`: (port, nearest GPU, leaf it lands on)."""
    item = {**node_report("x000"), "host": host}
    item["fabric"] = {"gpus": 8, "rails": [{"port": port, "rate_gbps": 400.0, "gpu": gpu} for port, gpu, _ in layout],
                      **fabric}
    item["neighbors"] = {port: _switch(leaf, host) for port, _, leaf in layout}
    return item


def honest(host: str, group: int, *, gpus: tuple[int | None, ...] = tuple(range(8)),
           wired: dict[int, int] | None = None) -> dict[str, Any]:
    """Port mlx5_k:1 by GPU gpus[k], on the leaf of rail k of its group (or of rail wired[k])."""
    wired = wired or {}
    return fabric_report(host, [(f"mlx5_{k}:1", gpus[k], f"leaf-r{wired.get(k, k)}-{group:02d}") for k in range(8)])


def summaries(reports: list[dict[str, Any]]) -> list[NodeSummary]:
    return [summarize_report(item, host_hint=item["host"]) for item in reports]


def odd_hosts(leaves: list[dict[str, Any]]) -> set[str]:
    return {host for leaf in leaves for hosts in leaf["odd"].values() for host in hosts}


# ---- rail wiring -----------------------------------------------------------------------------

def test_two_hostile_nodes_cannot_get_a_thousand_honest_ones_listed_as_miswired() -> None:
    # 1,000 honest nodes wired right, 32 per leaf; 100 of them did not know their mlx5_3's GPU.
    # Two hostile nodes claim mlx5_3 sits by GPU 5 (and say it lands on a rail-3 leaf): once
    # each distinct layout voted once, so they decided where every unknown mlx5_3 sits.
    reports = [honest(f"node{index:04d}", index // 32, gpus=(0, 1, 2, None if index % 10 == 0 else 3, 4, 5, 6, 7))
               for index in range(1000)]
    clean = find_rails(summaries(reports))
    assert odd_hosts(clean) == set() and build_fleet_report(summaries(reports)).exit_code == 0
    for attackers in (1, 2):
        hostile = [honest(f"evil{index}", index, gpus=(0, 1, 2, 5, 4, 5 + index, 6, 7)) for index in range(attackers)]
        leaves = find_rails(summaries(reports + hostile))
        assert odd_hosts(leaves) == {f"evil{index}" for index in range(attackers)}
        # Some node lays its HCAs out otherwise: rails are shown by GPU, each leaf's still its own.
        assert all(leaf["rail"] == f"GPU{leaf['leaf'][6]}" for leaf in leaves)
        leaf = next(leaf for leaf in leaves if leaf["leaf"] == "leaf-r3-00")
        assert leaf["nodes"] == 33 and leaf["odd"] == {"GPU5": ["evil0"]}


def test_one_node_laid_out_otherwise_cannot_hide_a_miswire_between_the_two_nics_of_a_gpu() -> None:
    # HGX A100: mlx5_0 and mlx5_1 both sit by GPU 0. node0007's mlx5_1 lands on mlx5_0's leaf.
    # One node claiming another layout used to turn every name to its GPU, and mlx5_0 and
    # mlx5_1 (both "GPU0") became one rail: the miswire was gone (exit 1 -> 0).
    reports = [honest(f"node{index:04d}", index // 32, gpus=A100_GPUS, wired={1: 0} if index == 7 else None)
               for index in range(64)]
    hostile = honest("evil", 0, gpus=(1, 0, 2, 2, 4, 4, 6, 6))
    for fleet in (reports, reports + [hostile]):
        nodes = summaries(fleet)
        leaves = find_rails(nodes)
        odd = {leaf["leaf"]: leaf["odd"] for leaf in leaves if leaf["odd"]}
        assert odd["leaf-r0-00"]["mlx5_1"] == ["node0007"]
        assert odd_hosts(leaves) <= {"node0007", "evil"}             # the attacker is only odd itself
        assert build_fleet_report(nodes).exit_code == 1


def test_sixteen_invented_ports_on_a_leaf_cannot_hide_a_real_miswire() -> None:
    # 16 nodes per leaf; node0003's mlx5_3 lands on rail 2's leaf. The attacker lists 16
    # invented ports on that leaf: counted per port, the leaf was "not rail-aligned" and
    # nothing on it odd (exit 1 -> 0). Its vote is one node's, split 16 ways.
    reports = [honest(f"node{index:04d}", 0 if index < 16 else 1, wired={3: 2} if index == 3 else None)
               for index in range(32)]
    hostile = fabric_report("evil", [(f"fake{k}:1", 8 + k, "leaf-r2-00") for k in range(16)])
    nodes = summaries(reports + [hostile])
    leaf = next(leaf for leaf in find_rails(nodes) if leaf["leaf"] == "leaf-r2-00")
    assert "aligned" not in leaf and leaf["rail"] == "mlx5_2" and leaf["nodes"] == 17
    assert leaf["odd"]["mlx5_3"] == ["node0003"]
    assert set(leaf["odd"]) == {"mlx5_3"} | {f"fake{k}" for k in range(16)}
    assert build_fleet_report(nodes).exit_code == 1
    # However many ports it invents (up to the 64 a report may list), it cannot outvote the leaf.
    flood = fabric_report("evil", [(f"fake{k}:1", 3, "leaf-r2-00") for k in range(64)])
    leaf = next(leaf for leaf in find_rails(summaries(reports + [flood])) if leaf["leaf"] == "leaf-r2-00")
    assert leaf["rail"] == "mlx5_2" and leaf["odd"]["mlx5_3"] == ["node0003"]


def test_a_node_whose_gpus_were_guessed_is_not_judged_and_listed_as_such() -> None:
    # nvidia-smi topo -m timed out: the node took the first GPU of each NIC's NUMA node, so its
    # rails read 0,0,0,0,4,4,4,4. Its cables are right; counted, it was "miswired" on 6 leaves.
    reports = [honest(f"node{index:03d}", 0) for index in range(12)]
    guessed = fabric_report("node012", [(f"mlx5_{k}:1", 0 if k < 4 else 4, f"leaf-r{k}-00") for k in range(8)],
                            rails_guessed=True)
    nodes = summaries(reports + [guessed])
    assert nodes[-1].rails_guessed and not nodes[0].rails_guessed
    leaves = find_rails(nodes)
    assert odd_hosts(leaves) == set() and all(leaf["nodes"] == 12 for leaf in leaves)
    assert all(leaf["not_judged"] == ["node012"] for leaf in leaves)
    fleet = build_fleet_report(nodes)
    assert fleet.exit_code == 0
    assert json.loads(render_json(fleet))["rails"][0]["not_judged"] == ["node012"]
    text = render_text(fleet)
    assert "Not judged (the GPU nearest a NIC was guessed: nvidia-smi topo -m did not place it): node012" in text
    assert "not judged (the GPU nearest a NIC was guessed" in render_html(fleet)
    # Where no judged node names the leaf, the leaf is still listed, with no rail.
    alone = find_rails(summaries([guessed]))
    assert [(leaf["rail"], leaf["not_judged"], leaf["odd"]) for leaf in alone] == [(None, ["node012"], {})] * 8


def test_the_node_report_marks_a_guessed_gpu_and_the_fleet_does_not_judge_that_node(tmp_path: Path, capsys: Any) -> None:
    snapshots = [_node("dgx-h100", f"node{index:02d}", tmp_path) for index in range(1, 5)]
    snapshots.append(_node("dgx-h100-topo-timeout", "node05", tmp_path))
    directory = _reports(snapshots, tmp_path / "reports")
    timed_out = json.loads((directory / "node05.json").read_text())
    assert timed_out["fabric"]["rails_guessed"] is True
    placed = json.loads((directory / "node01.json").read_text())
    assert "rails_guessed" not in placed["fabric"]                  # additive: absent where topo -m placed every NIC
    capsys.readouterr()
    fleet_main(["report", str(directory), "-F", "json"])
    fleet = json.loads(capsys.readouterr().out)
    assert odd_hosts(fleet["rails"]) == set()
    assert {host for leaf in fleet["rails"] for host in leaf.get("not_judged", [])} == {"node05"}


def test_ten_thousand_nodes_on_one_leaf_are_judged_in_linear_time() -> None:
    # Each node puts its rail 3 and a rail of its own on one leaf: 10,000 odd rails, which the
    # old per-rail scan over the leaf's ports took ~4 s (quadratic) to list.
    def node(index: int) -> NodeSummary:
        return NodeSummary(host=f"n{index:05d}", grade=NodeGrade.PASS,
                           rails=(("mlx5_3:1", 400.0, 3, "0xaa", "leaf"), (f"x{index}:1", 400.0, 100 + index, "0xaa", "leaf")))
    nodes = [node(index) for index in range(10_000)]
    started = time.process_time()
    (leaf,) = find_rails(nodes)
    assert time.process_time() - started < 3.0
    assert leaf["rail"] == "mlx5_3" and leaf["nodes"] == 10_000 and len(leaf["odd"]) == 10_000


# ---- duplicate senders ---------------------------------------------------------------------------

def _fleet_json(paths: list[Path], capsys: Any) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = fleet_main(["report", *map(str, paths), "-F", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_second_file_claiming_a_failing_host_keeps_its_reason_and_the_exit_code(tmp_path: Path, capsys: Any) -> None:
    for forged_name in ("a-forged.json", "z-forged.json"):          # read before, and after, n2's own file
        reports = tmp_path / forged_name.split(".")[0]
        reports.mkdir()
        (reports / "n1.json").write_text(json.dumps(make_report("n1")))
        (reports / "n2.json").write_text(json.dumps(make_report("n2", "fail", [PORT_DOWN])))
        (reports / forged_name).write_text(json.dumps(make_report("n2")))       # "n2 passes"
        code, fleet = _fleet_json([reports], capsys)
        assert code == 2
        n2 = next(node for node in fleet["nodes"] if node["host"] == "n2")
        assert n2["grade"] == "invalid"
        assert "fail in n2.json (port-state mlx5_4:1: port is Down (physical state Disabled))" in n2["top"]["summary"]
        assert n2["top"]["summary"].startswith("more than one report from this sender: fail in n2.json")
        assert f"pass in {forged_name}" in n2["top"]["summary"]
        by_file = {Path(entry["file"]).name: entry for entry in n2["reports"]}
        assert by_file["n2.json"]["grade"] == "fail" and by_file["n2.json"]["top"]["subject"] == "mlx5_4:1"
        assert by_file[forged_name] == {"file": str(reports / forged_name), "grade": "pass", "top": None}
        n1 = next(node for node in fleet["nodes"] if node["host"] == "n1")
        assert n1["grade"] == "pass" and "reports" not in n1
        capsys.readouterr()
        fleet_main(["report", str(reports)])
        assert "port is Down (physical state Disabled)" in capsys.readouterr().out


def test_a_saved_sweep_that_floods_a_host_first_cannot_hide_its_report_in_the_real_sweep(tmp_path: Path, capsys: Any) -> None:
    # A forged pdsh capture, read first, gives n2 two passing reports (n2 refused there); the
    # real sweep's n2 still speaks: its failure is kept beside.
    forged = tmp_path / "a-forged.out"
    forged.write_text("".join(prefixed("n2", json.dumps(make_report("n2"))) * 2))
    real = tmp_path / "sweep.out"
    real.write_text("".join(prefixed("n1", json.dumps(make_report("n1")))
                            + prefixed("n2", json.dumps(make_report("n2", "fail", [PORT_DOWN]), indent=2))))
    code, fleet = _fleet_json([forged, real], capsys)
    assert code == 2
    n2 = next(node for node in fleet["nodes"] if node["host"] == "n2")
    assert [entry["grade"] for entry in n2["reports"]] == ["fail", "pass", "pass"]     # worst first
    assert n2["top"]["summary"].startswith("more than one report from this sender: fail in sweep.out (port-state mlx5_4:1")


def test_two_reports_from_one_sender_keep_the_failing_one_in_either_order() -> None:
    failing, passing = json.dumps(make_report("n1", "fail", [LINK_FAIL])), json.dumps(make_report("n1"))
    for first, second in ((failing, passing), (passing, failing)):
        collector = FleetCollector()
        collector.feed_lines(prefixed("n1", first) + prefixed("n1", second) + prefixed("n2", json.dumps(make_report("n2"))))
        nodes = {node.host: node for node in collector.finish(expected_hosts=["n1", "n2"])}
        assert nodes["n1"].grade is NodeGrade.INVALID and nodes["n2"].grade is NodeGrade.PASS
        assert sorted(str(grade) for _, grade, _ in nodes["n1"].reports) == ["fail", "pass"]
        assert nodes["n1"].top.summary.startswith("more than one report from this sender: fail (link-speed mlx5_3:1")
        fleet = build_fleet_report(nodes.values())
        assert fleet.exit_code == 2 and "port runs at 200 Gb/s" in render_text(fleet)


def test_a_sender_naming_another_host_keeps_its_own_verdict_and_never_touches_the_other() -> None:
    collector = FleetCollector()
    collector.feed_lines(prefixed("n1", json.dumps(make_report("n2", "fail", [LINK_FAIL])))
                         + prefixed("n2", json.dumps(make_report("n2"))))
    nodes = {node.host: node for node in collector.finish(expected_hosts=["n1", "n2"])}
    assert nodes["n2"].grade is NodeGrade.PASS and nodes["n2"].reports == ()
    n1 = nodes["n1"]
    assert n1.grade is NodeGrade.INVALID and n1.reported_host == "n2"
    assert n1.top.summary == ("its report names another host of the sweep, 'n2'; its report: fail (link-speed mlx5_3:1: "
                              "port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR))")
    assert [(str(grade), top.check) for _, grade, top in n1.reports] == [("fail", "link-speed")]
    entry = json.loads(render_json(build_fleet_report(nodes.values())))["nodes"][0]
    assert entry["host"] == "n1" and entry["reports"] == [{"grade": "fail", "top": {
        "check": "link-speed", "subject": "mlx5_3:1", "summary": LINK_FAIL["summary"]}}]


def test_what_a_sender_keeps_of_its_reports_is_bounded_and_keeps_the_worst() -> None:
    collector = FleetCollector()
    for index in range(40):
        # Each "file" of one host: 39 passing reports and one failing, sent in the middle.
        grade, findings = ("fail", [LINK_FAIL]) if index == 20 else ("pass", None)
        collector.add_document(json.dumps(make_report("n1", grade, findings)), f"r{index:02d}.json")
    (node,) = collector.finish()
    assert node.grade is NodeGrade.INVALID and len(node.reports) == 8
    assert str(node.reports[0][1]) == "fail" and node.reports[0][0] == "r20.json"
    assert len(node.top.summary) <= 500 and node.top.summary.startswith("more than one report from this sender: fail in r20.json")


def test_a_real_check_report_of_a_port_down_node_stays_visible_beside_a_forged_one(tmp_path: Path, capsys: Any) -> None:
    down = run_check(CheckOptions(snapshot=NODES / "dgx-h100-port-down", no_probe=True, deadline_s=60.0), env={}).to_json()
    down["host"] = "n2"
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "n2.json").write_text(json.dumps(down))
    (reports / "0-forged.json").write_text(json.dumps(make_report("n2")))
    code, fleet = _fleet_json([reports], capsys)
    (n2,) = fleet["nodes"]
    assert code == 2 and n2["grade"] == "invalid"
    assert "fail in n2.json (port-state mlx5_4:1" in n2["top"]["summary"]
