"""Fleet report: counts, ordering, failing checks, outliers, exit codes, renderers, the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from netdoctor.fleet.cli import main
from netdoctor.fleet.model import BUSBW_METRIC, ERROR_GROWTH_METRIC, NodeGrade, NodeSummary, TopFinding, no_report
from netdoctor.fleet.outliers import find_outliers, robust_z_scores
from netdoctor.fleet.render import render_html, render_json, render_text
from netdoctor.fleet.report import build_fleet_report


def node(host: str, grade: str = "pass", busbw: float | None = None, growth: float | None = None,
         checks: dict[str, str] | None = None, top: TopFinding | None = None) -> NodeSummary:
    metrics: dict[str, float] = {}
    if busbw is not None:
        metrics[BUSBW_METRIC] = busbw
    if growth is not None:
        metrics[ERROR_GROWTH_METRIC] = growth
    return NodeSummary(host=host, grade=NodeGrade(grade), top=top, check_statuses=checks or {}, metrics=metrics)


def test_robust_z_scores_against_hand_computed_values() -> None:
    median, scores = robust_z_scores([10.0, 11.0, 12.0, 13.0, 50.0])
    # median 12, deviations 2,1,0,1,38 -> MAD 1; z = 0.6745 * (x - 12) / 1
    assert median == 12.0
    assert scores == pytest.approx([-1.349, -0.6745, 0.0, 0.6745, 25.631])
    # More than half identical: MAD is 0, mean absolute deviation stands in.
    median, scores = robust_z_scores([0.0, 0.0, 0.0, 0.0, 10.0])
    assert median == 0.0
    assert scores[4] == pytest.approx(10.0 / (2.0 * 1.2533))
    assert robust_z_scores([5.0, 5.0, 5.0]) == (5.0, [0.0, 0.0, 0.0])


def test_slow_node_is_an_outlier_even_when_it_passes() -> None:
    nodes = [node(f"n{i:03d}", busbw=450.0 + (i % 7)) for i in range(1, 41)]
    nodes.append(node("n101", busbw=301.2))
    nodes.append(node("n102", busbw=470.0))                       # fast is not a problem
    outliers = find_outliers(nodes, threshold=3.5)
    assert [(o.host, o.metric) for o in outliers] == [("n101", BUSBW_METRIC)]
    assert outliers[0].fleet_median == 453.0
    assert outliers[0].robust_z < -3.5
    # A stricter threshold keeps it, an absurdly loose one drops it.
    assert find_outliers(nodes, threshold=200) == []


def test_tight_fleet_does_not_flag_noise_and_small_fleets_are_not_judged() -> None:
    nodes = [node(f"n{i}", busbw=452.0 + 0.01 * i) for i in range(30)] + [node("n99", busbw=449.0)]
    assert find_outliers(nodes) == []                               # 0.7 % below: noise
    assert find_outliers([node("a", busbw=400.0), node("b", busbw=100.0)]) == []


def test_error_growth_outlier_where_the_fleet_is_quiet() -> None:
    nodes = [node(f"n{i}", growth=0.0) for i in range(50)] + [node("n77", growth=40.0)]
    outliers = find_outliers(nodes)
    assert [(o.host, o.metric, o.value) for o in outliers] == [("n77", ERROR_GROWTH_METRIC, 40.0)]


def test_report_orders_counts_and_exit_codes() -> None:
    link = TopFinding(summary="port runs at 200 Gb/s", check="link-speed", subject="mlx5_3:1")
    nodes = [
        node("node10", checks={"link-speed": "pass", "mtu": "pass"}),
        node("node2", "fail", checks={"link-speed": "fail", "mtu": "warn"}, top=link),
        node("node9", "warn", checks={"link-speed": "pass", "mtu": "warn"}),
        no_report("node44", NodeGrade.UNREACHABLE, "command timeout after 60 s"),
        node("node17", "fail", checks={"link-speed": "fail"}, top=link),
    ]
    report = build_fleet_report(nodes, generated_at="2026-11-21T23:00:00Z")
    assert [n.host for n in report.nodes] == ["node2", "node17", "node44", "node9", "node10"]
    assert report.counts == {"pass": 1, "warn": 1, "fail": 2, "unknown": 0, "unreachable": 1, "invalid": 0}
    assert report.checks == ["link-speed", "mtu"]
    tallies = report.check_tallies()
    assert [(t.check, t.fail, t.warn) for t in tallies] == [("link-speed", 2, 0), ("mtu", 0, 2)]
    assert report.exit_code == 2
    data = json.loads(render_json(report))
    assert data["schema"] == "netdoctor.fleet/1"
    assert data["nodes"][0] == {
        "host": "node2", "grade": "fail",
        "top": {"check": "link-speed", "subject": "mlx5_3:1", "summary": "port runs at 200 Gb/s"},
        "checks": {"link-speed": "fail", "mtu": "warn"},
    }
    assert data["nodes"][2]["top"] == {"summary": "command timeout after 60 s"}
    text = render_text(report)
    assert "pass 1  warn 1  fail 2  unknown 0  unreachable 1  invalid 0" in text
    assert "node44  unreachable  command timeout after 60 s" in text
    assert "Passing: node10" in text
    assert build_fleet_report([node("a"), node("b", "warn")]).exit_code == 1
    assert build_fleet_report([node("a"), node("b", "unknown"), node("c", "warn")]).exit_code == 3
    assert build_fleet_report([node("a"), node("b")]).exit_code == 0
    slow = [node(f"n{i}", busbw=450.0) for i in range(10)] + [node("slow", busbw=200.0)]
    assert build_fleet_report(slow).exit_code == 1


def test_html_is_self_contained_and_escapes_names() -> None:
    nodes = [node("n<1>", "fail", checks={"port-state": "fail"}, top=TopFinding("down & out", "port-state", "mlx5_0:1"), busbw=100.0)]
    nodes += [node(f"n{i}", busbw=450.0 + i, checks={"port-state": "pass"}) for i in range(10)]
    page = render_html(build_fleet_report(nodes))
    assert "n&lt;1&gt;" in page and "n<1>" not in page
    assert "down &amp; out" in page
    assert "<svg id=\"busbw-histogram\"" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page and "<link" not in page and "src=" not in page


def write_reports(directory: Path, reports: list[dict[str, Any]]) -> None:
    directory.mkdir()
    for report in reports:
        (directory / f"{report['host']}.json").write_text(json.dumps(report, indent=2))


def test_cli_report_formats_and_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = [
        {"schema": "netdoctor.report/1", "host": f"gpu{i:02d}", "grade": "pass", "findings": [], "probe": {"busbw_gbps": 450.0 + i}}
        for i in range(1, 9)
    ]
    reports.append({"schema": "netdoctor.report/1", "host": "gpu09", "grade": "pass", "findings": [], "probe": {"busbw_gbps": 280.0}})
    write_reports(tmp_path / "reports", reports)
    code = main(["report", str(tmp_path / "reports"), "--format", "json", "--expect", "gpu[01-10]"])
    data = json.loads(capsys.readouterr().out)
    assert code == 2                                               # gpu10 never answered
    assert data["counts"]["pass"] == 9 and data["counts"]["unreachable"] == 1
    assert data["outliers"] == [{"host": "gpu09", "metric": "nccl_busbw_gbps", "value": 280.0, "fleet_median": 454.0, "robust_z": pytest.approx(data["outliers"][0]["robust_z"])}]
    assert data["outliers"][0]["robust_z"] < -3.5
    out_file = tmp_path / "fleet.html"
    assert main(["report", str(tmp_path / "reports"), "-F", "html", "-o", str(out_file)]) == 1
    assert "gpu09" in out_file.read_text()
    assert main(["report", str(tmp_path / "nothing-here")]) == 3
    assert "does not exist" in capsys.readouterr().err


def counters_report(host: str, ports: list[dict[str, Any]]) -> dict[str, Any]:
    """A report whose error-counters findings look like the check's: `*_delta` per counter,
    `error_growth` once per port when there was history (`None`: no history)."""
    findings = []
    for index, evidence in enumerate(ports):
        findings.append({"check": "error-counters", "status": "pass", "subject": f"mlx5_{index}:1", "summary": "",
                         "evidence": {key: value for key, value in evidence.items() if value is not None}})
    return {"schema": "netdoctor.report/1", "host": host, "grade": "pass", "findings": findings}


def test_cli_error_growth_outlier_counts_ibta_errors_not_hw_counters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quiet = {"symbol_error_delta": 0, "out_of_sequence_delta": 30, "error_growth": 0}
    reports = [counters_report(f"node{i}", [quiet, quiet]) for i in range(1, 9)]
    # node9: adaptive routing reorders a lot (hw counter), no error counter grew: not an outlier.
    reports.append(counters_report("node9", [{"out_of_sequence_delta": 90_000, "local_ack_timeout_err_delta": 500,
                                              "symbol_error_delta": 0, "error_growth": 0}, quiet]))
    # node10: symbol errors grow on one port.
    reports.append(counters_report("node10", [{"symbol_error_delta": 40, "port_rcv_errors_delta": 2,
                                               "out_of_sequence_delta": 30, "error_growth": 42}, quiet]))
    # node11: first run, no history: no error_growth, so no metric at all.
    reports.append(counters_report("node11", [{"symbol_error": 3, "out_of_sequence_delta": None}]))
    write_reports(tmp_path / "reports", reports)
    assert main(["report", str(tmp_path / "reports"), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [(o["host"], o["metric"], o["value"]) for o in data["outliers"]] == [("node10", ERROR_GROWTH_METRIC, 42.0)]
    metrics = {entry["host"]: entry.get("metrics") for entry in data["nodes"]}
    assert metrics["node9"] == {ERROR_GROWTH_METRIC: 0.0}
    assert metrics["node11"] is None
    # Natural host order among equals: node2 before node10.
    assert [entry["host"] for entry in data["nodes"]] == [f"node{i}" for i in range(1, 12)]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["generated_at"])


def test_cli_output_file_is_replaced_whole_and_unwritable_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_reports(tmp_path / "reports", [counters_report("n1", [{"error_growth": 0}])])
    out_file = tmp_path / "fleet.json"
    out_file.write_text("old")
    assert main(["report", str(tmp_path / "reports"), "-F", "json", "-o", str(out_file)]) == 0
    assert capsys.readouterr().out == ""
    assert json.loads(out_file.read_text())["nodes"][0]["host"] == "n1"
    assert out_file.stat().st_mode & 0o777 == 0o644
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []   # no temporary left
    assert main(["report", str(tmp_path / "reports"), "-o", str(tmp_path / "missing" / "fleet.txt")]) == 3
    assert "cannot write" in capsys.readouterr().err


def test_cli_reads_pdsh_output_from_stdin(tmp_path: Path) -> None:
    lines = [f"h{i}: " + json.dumps({"schema": "netdoctor.report/1", "host": f"h{i}", "grade": "warn" if i == 2 else "pass",
                                       "findings": [{"check": "mtu", "status": "warn" if i == 2 else "pass", "subject": "ib0", "summary": "MTU 2044"}]})
             for i in range(1, 4)]
    done = subprocess.run([sys.executable, "-m", "netdoctor.fleet", "report", "-"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "h2  warn         mtu ib0: MTU 2044" in done.stdout
