"""The fleet report's memory budget (netdoctor.fleet.budget): a whole-report bound, not only a
per-node one. A node over its share is `invalid` (too large), never the report's death; no other
node's entry changes; every host appears once; the charge is never below what the nodes cost."""

from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from netdoctor.fleet import bounded, collect
from netdoctor.fleet.budget import NodeBudget
from netdoctor.fleet.collect import FleetCollector
from netdoctor.fleet.model import NodeSummary, summarize_report
from netdoctor.fleet.render import render_json, render_text
from netdoctor.fleet.report import MAX_COLUMNS, build_fleet_report
from test_fleet_collect import LINK_FAIL, MTU_WARN, make_report, prefixed

REPO = Path(__file__).resolve().parent.parent


def honest(index: int) -> dict[str, Any]:
    """A report like an 8-GPU node's: checks, versions, rails on the leaves of its group of 32."""
    host = f"n{index:04d}"
    findings = [LINK_FAIL] if index % 17 == 0 else [MTU_WARN] if index % 23 == 0 else None
    report = make_report(host, "fail" if index % 17 == 0 else "warn" if index % 23 == 0 else "pass", findings,
                         busbw=450.0 + index % 7)
    report["checks"] = [{"check": check, "status": "pass"} for check in ("port-state", "link-speed", "mtu", "nccl-probe")]
    report["versions"] = {"driver": "550.54.15", "hca_firmware": {"MT4129": "28.39.1002"}, "kernel": "5.15.0-105"}
    report["fabric"] = {"gpus": 8, "rails": [{"port": f"mlx5_{port}:1", "rate_gbps": 400.0, "gpu": port} for port in range(8)]}
    report["neighbors"] = {f"mlx5_{port}:1": {"switch_guid": f"0x{index // 32:04x}{port:02x}", "switch_name": f"leaf-{port}-{index // 32}"}
                           for port in range(8)}
    return report


def many_checks(index: int, count: int = 200) -> dict[str, Any]:
    """A report at the check-id bound: `count` ids of 64 characters no other node has, none passing."""
    tag = f"{index:04d}"
    checks = [f"c{number:03d}-{tag}-".ljust(64, "x") for number in range(count)]
    report = make_report(f"big{tag}", "fail", [{"check": checks[0], "status": "fail", "subject": "s", "summary": "broken"}])
    report["checks"] = [{"check": check, "status": ("warn", "fail", "unknown")[number % 3]} for number, check in enumerate(checks)]
    return report


def many_versions(index: int) -> dict[str, Any]:
    tag = f"{index:04d}"
    report = make_report(f"ver{tag}")
    report["versions"] = {"driver": f"d-{tag}".ljust(128, "d"), "kernel": f"k-{tag}".ljust(128, "k"),
                          "vbios": {f"m{model}-{tag}".ljust(128, "m"): f"b{model}".ljust(128, "b") for model in range(16)},
                          "hca_firmware": {f"h{model}-{tag}".ljust(128, "h"): f"f{model}".ljust(128, "f") for model in range(16)}}
    return report


def many_rails(index: int) -> dict[str, Any]:
    tag = f"{index:04d}"
    report = make_report(f"rail{tag}")
    ports = [f"p{port:02d}-{tag}-".ljust(128, "p") for port in range(64)]
    report["fabric"] = {"gpus": 8, "rails": [{"port": port, "rate_gbps": 400.0, "gpu": number} for number, port in enumerate(ports)]}
    report["neighbors"] = {port: {"switch_guid": f"g{number}-{tag}".ljust(128, "g"), "switch_name": f"s{number}-{tag}".ljust(128, "s")}
                           for number, port in enumerate(ports)}
    return report


def big_probe(index: int) -> dict[str, Any]:
    tag = f"{index:04d}"
    report = make_report(f"probe{tag}")
    report["probe"] = {"status": "pass", "reason": "r" * 600, "busbw_gbps": 400.0,
                       "group": [{f"k{key}": f"{tag}-{item}-{key}".ljust(600, "v") for key in range(8)} for item in range(64)],
                       "rails": {f"{tag}-{item}".ljust(80, "r"): 1.0 for item in range(64)}}
    return report


def collected(lines: list[str], budget: int | None = None) -> dict[str, NodeSummary]:
    collector = FleetCollector(budget=NodeBudget(budget) if budget is not None else None)
    collector.feed_lines(lines)
    return {node.host: node for node in collector.finish()}


def test_nodes_over_their_share_are_too_large_and_the_others_unchanged() -> None:
    fleet = [(f"n{index:04d}", honest(index)) for index in range(300)]
    fleet += [(f"big{index:04d}", many_checks(index, 150 + index)) for index in range(12)]
    lines = [line for host, report in fleet for line in prefixed(host, json.dumps(report))]
    unbounded = collected(lines, budget=1 << 40)
    bounded_nodes = collected(lines, budget=3 << 20)
    assert sorted(bounded_nodes) == sorted(host for host, _ in fleet)          # every host, once
    dropped = {host for host, node in bounded_nodes.items() if node.top and node.top.summary.startswith("too large")}
    assert dropped and dropped < {host for host, _ in fleet if host.startswith("big")}
    # The heaviest go first: every big node dropped has more checks than every big node kept.
    kept_big = {host for host in bounded_nodes if host.startswith("big")} - dropped
    assert max(int(host[3:]) for host in kept_big) < min(int(host[3:]) for host in dropped)
    for host, node in bounded_nodes.items():
        if host in dropped:
            assert str(node.grade) == "invalid" and node.top is not None
            assert "over its share of the report's memory (3 MiB for all nodes); its report: fail (c000-" in node.top.summary
            assert [str(grade) for _, grade, _ in node.reports] == ["fail"]     # its own verdict beside
        else:
            assert node == unbounded[host]
    report = build_fleet_report(bounded_nodes.values())
    assert report.exit_code == 2 and json.loads(render_json(report))["counts"]["invalid"] == len(dropped)


def test_the_same_nodes_are_dropped_whatever_order_they_arrive_in() -> None:
    reports = [honest(index) for index in range(100)] + [many_checks(index, 120 + 7 * index % 60) for index in range(20)]
    outcomes = []
    for seed in range(4):
        random.Random(seed).shuffle(reports)
        nodes = collected([line for report in reports for line in prefixed(report["host"], json.dumps(report))], 1 << 20)
        outcomes.append({host for host, node in nodes.items() if node.top and node.top.summary.startswith("too large")})
    assert outcomes[0] and all(outcome == outcomes[0] for outcome in outcomes)
    assert not any(host.startswith("n") for host in outcomes[0])


def test_a_fleet_of_alike_nodes_over_the_budget_loses_only_as_many_as_must_go() -> None:
    """Healthy nodes of one shape weigh the same: over the budget only as many go as must, the
    same ones whatever the order, never the whole fleet (once `invalid` all together)."""
    reports = [honest(index) for index in range(400)]
    outcomes = []
    for seed in range(3):
        random.Random(seed).shuffle(reports)
        nodes = collected([line for report in reports for line in prefixed(report["host"], json.dumps(report))], 2 << 20)
        assert len(nodes) == len(reports)
        outcomes.append(sorted(host for host, node in nodes.items() if str(node.grade) == "invalid"))
    assert outcomes[0] and all(outcome == outcomes[0] for outcome in outcomes)
    assert len(outcomes[0]) < len(reports) // 2


def test_honest_nodes_are_never_dropped_at_ten_thousand_nodes() -> None:
    budget = NodeBudget()
    nodes = [summarize_report(honest(index), "sweep.out", f"n{index:05d}") for index in range(2000)]
    for node in nodes:
        assert budget.admit(node) == []
    # Ten thousand such nodes take under half the default budget.
    assert budget.total * 5 < budget.budget / 2


SHAPES: dict[str, Callable[[int], dict[str, Any]]] = {
    "honest": honest, "200 check ids": many_checks, "versions": many_versions, "64 rails": many_rails, "probe facts": big_probe,
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("render", [render_json, render_text], ids=["json", "text"])
def test_the_charge_is_never_below_what_the_nodes_cost(shape: Callable[[int], dict[str, Any]], render: Callable[..., str]) -> None:
    """tracemalloc's peak over keeping, building and rendering the nodes, against their charge."""
    reports = [shape(index) for index in range(60)]
    budget = NodeBudget(1 << 40)
    # What a first render imports (the text parts, ClusterShell) is no node's cost: run alone, the
    # text render of honest nodes was charged 6 KB a node for a peak of 17 KB.
    render(build_fleet_report([summarize_report(shape(0), "warm.json", "warm")], generated_at="2026-11-26T00:00:00Z"))
    gc.collect()
    tracemalloc.start()
    try:
        nodes = [summarize_report(report, f"/var/lib/fleet/reports/{index}.json", f"node{index:05d}")
                 for index, report in enumerate(reports)]
        render(build_fleet_report(nodes, generated_at="2026-11-26T00:00:00Z"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    for node in nodes:
        budget.admit(node)
    assert peak < budget.total, f"{peak / len(nodes):.0f} bytes per node, charged {budget.total / len(nodes):.0f}"


def test_reports_still_open_together_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collect, "PENDING_BUDGET_CHARS", 6000)
    lines = ["n1: {\n", "n2: {\n", "n3: {\n"]
    for _ in range(30):      # interleaved: n1 sends 200 characters a line, n2 and n3 a dozen
        lines += ['n1:   "a": "' + "x" * 200 + '",\n', 'n2:   "b": 1,\n', 'n3:   "c": 2,\n']
    lines += prefixed("n4", json.dumps(make_report("n4"), indent=2))
    nodes = collected(lines)
    assert {host: str(node.grade) for host, node in nodes.items()} == {"n1": "invalid", "n2": "invalid", "n3": "invalid", "n4": "pass"}
    assert nodes["n1"].top is not None and nodes["n1"].top.summary.startswith("too large: its unfinished report is the largest")
    assert nodes["n2"].top is not None and nodes["n2"].top.summary.startswith("incomplete or garbled JSON report")


def test_json_of_more_values_than_a_report_has_is_too_large_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "MAX_JSON_VALUES", 10_000)
    flood = '{"schema": "netdoctor.report/1", "x": [' + "[]," * 400_000 + "[]]}"    # 1.2 MB: 800,000 values
    nodes = collected([f"n1: {flood}\n", *prefixed("n2", json.dumps(make_report("n2")))])
    assert str(nodes["n1"].grade) == "invalid" and str(nodes["n2"].grade) == "pass"
    assert nodes["n1"].top is not None and nodes["n1"].top.summary.startswith("too large: more than 10,000 JSON values (800,")


def test_the_budget_is_set_by_the_environment_for_the_command(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.out"
    sweep.write_text("".join(line for index in range(30) for line in prefixed(f"n{index:04d}", json.dumps(honest(index))))
                     + "".join(prefixed("big0001", json.dumps(many_checks(1)))))
    code = "import sys\nfrom netdoctor.fleet.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    done = subprocess.run([sys.executable, "-c", code, "report", str(sweep), "--format", "json"], capture_output=True,
                          text=True, env={**os.environ, "NETDOCTOR_FLEET_BUDGET_MIB": "0.25"}, timeout=120)
    assert done.returncode == 2, done.stderr
    nodes = {node["host"]: node for node in json.loads(done.stdout)["nodes"]}
    assert len(nodes) == 31 and nodes["big0001"]["grade"] == "invalid"
    assert nodes["big0001"]["top"]["summary"].startswith("too large: what the fleet keeps of its report (")
    assert [(entry["grade"], entry["top"]) for entry in nodes["big0001"]["reports"]] == [
        ("fail", {"check": "c000-0001-" + "x" * 54, "subject": "s", "summary": "broken"})]
    assert all(node["grade"] != "invalid" for host, node in nodes.items() if host != "big0001")


def test_check_ids_no_pack_has_do_not_widen_the_grid_past_its_columns() -> None:
    nodes = [summarize_report(honest(index), "", f"n{index:04d}") for index in range(20)]
    nodes += [summarize_report(many_checks(index, 60), "", f"big{index:04d}") for index in range(5)]
    report = build_fleet_report(nodes)
    assert len(report.checks) == MAX_COLUMNS
    # The columns most nodes give stay; of the ids one node gives each, those earliest in their reports.
    assert {"port-state", "link-speed", "mtu", "nccl-probe"} < set(report.checks)
    assert {check[:4] for check in report.checks} == {"port", "link", "mtu", "nccl"} | {f"c{number:03d}" for number in range(20)}
    assert len(build_fleet_report(nodes[:21]).checks) == 4 + 60          # under the bound: every check a column


def test_a_list_where_a_string_belongs_never_takes_the_report_down() -> None:
    """A check id or status that is a list (unhashable) crashed the summary, and `str` of a
    summary or schema nested 900 deep recursed past the interpreter's limit."""
    deep = "[" * 900 + "]" * 900
    lines = (prefixed("n1", json.dumps(make_report("n1", findings=[{"check": [1], "status": "pass"},
                                                                    {"check": "mtu", "status": [2]},
                                                                    {"check": "error-counters", "status": {"a": 1}}])))
             + prefixed("n2", json.dumps(make_report("n2", "fail", [{**LINK_FAIL, "summary": [["x"]]}]))
                        .replace('[["x"]]', deep))
             + prefixed("n3", json.dumps(make_report("n3")).replace('"netdoctor.report/1"', deep))
             + prefixed("n4", json.dumps(make_report("n4"))))
    nodes = collected(lines)
    assert {host: str(node.grade) for host, node in nodes.items()} == {"n1": "pass", "n2": "fail", "n3": "invalid", "n4": "pass"}
    assert nodes["n2"].top is not None and nodes["n2"].top.summary.startswith("[[[[")
    assert nodes["n3"].top is not None and nodes["n3"].top.summary.startswith("not a netdoctor report: schema [[[[")
    assert len(render_text(build_fleet_report(nodes.values()))) > 0
