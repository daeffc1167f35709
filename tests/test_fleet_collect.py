"""Reassembling per-node reports from pdsh-style output and saved files."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from netdoctor.errors import UsageError
from netdoctor.fleet.collect import FleetCollector
from netdoctor.fleet.model import BUSBW_METRIC, ERROR_GROWTH_METRIC, PHY_BER_METRIC, NodeGrade, summarize_report
from netdoctor.fleet.outliers import find_outliers


def make_report(host: str, grade: str = "pass", findings: list[dict[str, Any]] | None = None, busbw: float | None = None) -> dict[str, Any]:
    report: dict[str, Any] = {
        "schema": "netdoctor.report/1",
        "host": host,
        "grade": grade,
        "started_at": "2026-11-21T22:40:00Z",
        "duration_s": 0.4,
        "rules": "dgx-h100",
        "findings": findings
        if findings is not None
        else [{"check": "port-state", "status": "pass", "subject": "mlx5_0:1", "summary": "", "evidence": {}}],
    }
    if busbw is not None:
        report["probe"] = {"busbw_gbps": busbw}
    return report


LINK_FAIL = {
    "check": "link-speed",
    "status": "fail",
    "subject": "mlx5_3:1",
    "summary": "port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)",
    "evidence": {"rate_gbps": 200, "expected_gbps": 400},
}
MTU_WARN = {"check": "mtu", "status": "warn", "subject": "ens1f0np0", "summary": "MTU 1500, expected 9000", "evidence": {}}


def prefixed(host: str, text: str) -> list[str]:
    return [f"{host}: {line}\n" for line in text.splitlines()]


def test_interleaved_pretty_and_compact_reports_are_reassembled_by_host() -> None:
    n1 = prefixed("n1", json.dumps(make_report("n1", "fail", [LINK_FAIL, MTU_WARN]), indent=2))
    n2 = prefixed("n2", json.dumps(make_report("n2", busbw=451.5)))
    n3 = prefixed("n3", json.dumps(make_report("n3", "warn", [MTU_WARN]), indent=4))
    lines = n1 + n2 + n3
    # pdsh interleaves hosts line by line in any order, but keeps each host's own order.
    rng = random.Random(7)
    queues = [list(n1), list(n2), list(n3)]
    shuffled: list[str] = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        shuffled.append(queue.pop(0))
    assert sorted(shuffled) == sorted(lines)
    collector = FleetCollector()
    for line in shuffled:
        collector.feed_line(line)
    nodes = {node.host: node for node in collector.finish()}
    assert set(nodes) == {"n1", "n2", "n3"}
    assert nodes["n1"].grade is NodeGrade.FAIL
    assert nodes["n1"].top is not None and nodes["n1"].top.check == "link-speed"
    assert nodes["n1"].top.subject == "mlx5_3:1"
    assert nodes["n1"].check_statuses == {"link-speed": "fail", "mtu": "warn"}
    assert nodes["n2"].grade is NodeGrade.PASS and nodes["n2"].top is None
    assert nodes["n2"].metrics == {BUSBW_METRIC: 451.5}
    assert nodes["n3"].grade is NodeGrade.WARN and nodes["n3"].top.summary == "MTU 1500, expected 9000"


def test_timeouts_garbage_empty_and_truncated_nodes_are_never_dropped() -> None:
    collector = FleetCollector(command_timeout_s=60)
    for line in prefixed("n1", json.dumps(make_report("n1"))):
        collector.feed_line(line)
    collector.feed_line("n2: Segmentation fault (core dumped)\n")
    collector.feed_line("n2: more noise\n")
    half = json.dumps(make_report("n4"), indent=2).splitlines()[:5]
    for line in half:
        collector.feed_line(f"n4: {line}\n")
    collector.feed_stderr_line("pdsh@vm: n3: command timeout\n")
    collector.feed_stderr_line("sending signal 15 to n3 [bash] pid 8538\n")
    collector.feed_stderr_line("pdsh@vm: n3: bash killed by signal 15\n")
    collector.feed_stderr_line("n5: bash: netdoctor: command not found\n")
    collector.feed_stderr_line("pdsh@vm: n5: bash exited with exit code 127\n")
    collector.feed_stderr_line("pdsh@vm: n1: bash exited with exit code 2\n")
    nodes = {node.host: node for node in collector.finish(expected_hosts=["n1", "n2", "n3", "n4", "n5", "n6"])}
    assert len(nodes) == 6
    assert nodes["n1"].grade is NodeGrade.PASS
    assert nodes["n2"].grade is NodeGrade.INVALID
    assert nodes["n2"].top.summary == "not a netdoctor report: 'Segmentation fault (core dumped)' (and 1 more line)"
    assert nodes["n3"].grade is NodeGrade.UNREACHABLE
    assert nodes["n3"].top.summary == "command timeout after 60 s"
    assert nodes["n4"].grade is NodeGrade.INVALID
    assert nodes["n4"].top.summary.startswith("incomplete or garbled JSON report")
    assert nodes["n5"].grade is NodeGrade.UNREACHABLE
    assert nodes["n5"].top.summary == "no output, exit code 127: bash: netdoctor: command not found"
    assert nodes["n6"].grade is NodeGrade.UNREACHABLE and nodes["n6"].top.summary == "no output"


def test_json_that_is_not_a_netdoctor_report_is_invalid() -> None:
    assert summarize_report([1, 2], host_hint="n1").grade is NodeGrade.INVALID
    other = summarize_report({"schema": "other/1", "grade": "pass", "findings": []}, host_hint="n1")
    assert other.grade is NodeGrade.INVALID and "schema 'other/1'" in other.top.summary
    bad_grade = summarize_report({**make_report("n1"), "grade": "great"}, host_hint="n1")
    assert bad_grade.grade is NodeGrade.INVALID
    no_findings = summarize_report({**make_report("n1"), "findings": None}, host_hint="n1")
    assert no_findings.grade is NodeGrade.INVALID


def counters_finding(subject: str, status: str = "pass", shadow: bool = False, **evidence: Any) -> dict[str, Any]:
    """An error-counters finding shaped like the check's: `<counter>_delta` for every counter
    with history (hw_counters too), and `error_growth` on the port's first finding only."""
    finding: dict[str, Any] = {"check": "error-counters", "status": status, "subject": subject,
                               "summary": "" if status == "pass" else f"{subject} errors grow", "evidence": evidence}
    if shadow:
        finding["shadow"] = True
    return finding


def test_shadow_findings_do_not_become_the_top_finding_and_growth_is_summed() -> None:
    findings = [
        {"check": "pcie-link", "status": "fail", "subject": "0000:18:00.0", "summary": "x8", "shadow": True},
        counters_finding("mlx5_0:1", "warn", symbol_error_delta=12, link_downed_delta=1, error_growth=13),
        counters_finding("mlx5_1:1", port_rcv_errors_delta=3, error_growth=3),
    ]
    node = summarize_report(make_report("n9", "warn", findings))
    assert node.top.check == "error-counters"
    assert "pcie-link" not in node.check_statuses
    assert node.metrics[ERROR_GROWTH_METRIC] == 16.0


def test_error_growth_metric_is_the_sum_of_error_growth_evidence_only() -> None:
    findings = [
        # Port 0: two findings, only the first carries the port's error_growth; the mlx5
        # hw_counter growth beside it (normal traffic) is no error growth.
        counters_finding("mlx5_0:1", "fail", symbol_error_delta=5000, out_of_sequence_delta=900, error_growth=5000),
        counters_finding("mlx5_0:1", "warn", link_downed_delta=0, local_ack_timeout_err_delta=70),
        # Port 1: only hw_counters grew; its error_growth says 0.
        counters_finding("mlx5_1:1", out_of_sequence_delta=12_000, packet_seq_err_delta=40, error_growth=0),
        # Port 2: a shadow finding still carries a measurement.
        counters_finding("mlx5_2:1", "warn", shadow=True, symbol_error_delta=7, error_growth=7),
        # The keys the fleet used to guess at, and values that are no count, are ignored.
        counters_finding("mlx5_3:1", growth={"symbol_error": 100}, delta=100, deltas={"a": 1}, increase=3,
                         increments=4, port_rcv_errors_increase=5, symbol_error_growth=6),
        counters_finding("mlx5_4:1", error_growth=True),
        counters_finding("mlx5_5:1", error_growth="12"),
        counters_finding("mlx5_6:1", error_growth=float("nan")),
        # error_growth of another check is not counter growth.
        {"check": "link-speed", "status": "pass", "subject": "mlx5_0:1", "evidence": {"error_growth": 99}},
    ]
    node = summarize_report(make_report("n1", "fail", findings))
    assert node.metrics == {ERROR_GROWTH_METRIC: 5007.0}


def test_no_error_growth_evidence_means_no_metric() -> None:
    """First run on a node (no history): the check writes deltas of nothing and no error_growth."""
    findings = [
        counters_finding("mlx5_0:1", symbol_error=120, out_of_sequence_delta=50),
        counters_finding("mlx5_1:1", "warn", link_downed=3),
    ]
    node = summarize_report(make_report("n1", "warn", findings))
    assert ERROR_GROWTH_METRIC not in node.metrics
    assert "metrics" not in node.to_json()
    quiet = summarize_report(make_report("n2", findings=[counters_finding("mlx5_0:1", error_growth=0)]))
    assert quiet.metrics == {ERROR_GROWTH_METRIC: 0.0}


def test_error_growth_metric_from_a_real_error_counters_report() -> None:
    """The check's own JSON report (a snapshot judged against its baseline) feeds the metric."""
    from netdoctor.run import CheckOptions, run_check

    nodes = Path(__file__).parent / "fixtures" / "nodes"
    options = CheckOptions(snapshot=nodes / "dgx-h100-symbol-errors-b", baseline=nodes / "dgx-h100-symbol-errors-a",
                           no_probe=True)
    data = json.loads(json.dumps(run_check(options, env={}).to_json()))
    growths = [f["evidence"]["error_growth"] for f in data["findings"]
               if f["check"] == "error-counters" and "error_growth" in f.get("evidence", {})]
    assert growths and sum(growths) == 5000            # mlx5_6:1 symbol_error 120 -> 5120
    node = summarize_report(data, host_hint="n1")
    assert node.metrics[ERROR_GROWTH_METRIC] == 5000.0
    # Without a baseline there is no history, so no growth and no metric.
    first_run = summarize_report(run_check(CheckOptions(snapshot=nodes / "dgx-h100-symbol-errors-b", no_probe=True),
                                           env={}).to_json(), host_hint="n1")
    assert ERROR_GROWTH_METRIC not in first_run.metrics


def test_report_directory_and_files(tmp_path: Path) -> None:
    directory = tmp_path / "reports"
    directory.mkdir()
    (directory / "n1.json").write_text(json.dumps(make_report("n1", "fail", [LINK_FAIL]), indent=2))
    (directory / "n2.json").write_text(json.dumps(make_report("n2")))
    (directory / "n3.json").write_text("{not json")
    (directory / "n4.json").write_text("")
    pdsh_file = tmp_path / "sweep.out"
    pdsh_file.write_text("".join(prefixed("n5", json.dumps(make_report("n5", "warn", [MTU_WARN])))))
    collector = FleetCollector()
    collector.add_path(directory)
    collector.add_path(pdsh_file)
    nodes = {node.host: node for node in collector.finish()}
    assert {host: str(node.grade) for host, node in nodes.items()} == {
        "n1": "fail", "n2": "pass", "n3": "invalid", "n4": "unreachable", "n5": "warn",
    }


@pytest.mark.parametrize("feed", ["feed_line", "feed_lines", "feed_text"])
def test_a_run_cut_off_by_finish_is_forgotten(feed: str) -> None:
    """finish() ends the host being reassembled: its lines after that start nothing old."""
    collector = FleetCollector()

    def give(lines: list[str]) -> None:
        if feed == "feed_line":
            for line in lines:
                collector.feed_line(line)
        elif feed == "feed_lines":
            collector.feed_lines(lines)
        else:
            collector.feed_text(["".join(lines)])

    n1 = prefixed("n1", json.dumps(make_report("n1", "fail", [LINK_FAIL]), indent=2))
    give(n1[:5])                                   # cut off mid-object
    first = {node.host: node for node in collector.finish()}
    assert first["n1"].grade is NodeGrade.INVALID and "incomplete" in first["n1"].top.summary
    # A new report of n1 does not extend the old run: it is read whole, as n1's second.
    give(n1 + prefixed("n2", json.dumps(make_report("n2", "warn", [MTU_WARN]), indent=2)))
    second = {node.host: node for node in collector.finish()}
    assert str(second["n2"].grade) == "warn" and str(second["n1"].grade) == "invalid"
    # The first report's failure stays beside the second one's breakage.
    assert second["n1"].top.summary.startswith("more than one report from this sender: fail (link-speed mlx5_3:1: port runs")
    assert [(str(grade), top.check if top else None) for _, grade, top in second["n1"].reports] == [
        ("fail", "link-speed"), ("invalid", None)]


def test_unreadable_input_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read fleet input"):
        FleetCollector().add_path(tmp_path / "missing.out")


def test_report_without_final_newline_glued_to_the_next_hosts_line() -> None:
    # pdsh prints a node's last line without a newline when the node did not end it with
    # one, so the next host's line starts on the same line. Glued text cannot be told from
    # a forgery: the whole line is the sender's, which makes the sender (and at worst the
    # node whose first line was taken) invalid, and nobody better.
    pretty = json.dumps(make_report("n1", "warn", [MTU_WARN]), indent=2).splitlines()
    lines = [f"n1: {line}\n" for line in pretty[:-1]]
    lines.append("n1: }n4: {\n")
    lines += [f"n4: {line}\n" for line in json.dumps(make_report("n4"), indent=2).splitlines()[1:]]
    lines.append("n2: " + json.dumps(make_report("n2", "fail", [LINK_FAIL])) + "n3: Segmentation fault\n")
    collector = FleetCollector()
    collector.feed_lines(lines)
    nodes = {node.host: node for node in collector.finish(expected_hosts=["n1", "n2", "n3", "n4"])}
    assert {host: str(node.grade) for host, node in nodes.items()} == {
        "n1": "invalid", "n4": "invalid", "n2": "invalid", "n3": "unreachable"}
    assert nodes["n1"].top.summary == ("text after its report on the same line: 'n4: {'; its report: warn "
                                       "(mtu ens1f0np0: MTU 1500, expected 9000)")
    # n2's own failure stays visible beside the glue that made it invalid.
    assert nodes["n2"].top.summary == ("text after its report on the same line: 'n3: Segmentation fault'; its report: "
                                       "fail (link-speed mlx5_3:1: port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR))")


def test_parallel_shell_failure_explains_every_silent_node() -> None:
    collector = FleetCollector()
    collector.feed_stderr_line('pdsh@vm: Cannot specify -t with "-R exec"\n')
    collector.feed_stderr_line("srun: error: Unable to allocate resources: Invalid node name specified\n")
    nodes = collector.finish(expected_hosts=["n1", "n2"])
    assert [(node.host, str(node.grade), node.top.summary) for node in sorted(nodes, key=lambda n: n.host)] == [
        ("n1", "unreachable", 'no output: pdsh@vm: Cannot specify -t with "-R exec"'),
        ("n2", "unreachable", 'no output: pdsh@vm: Cannot specify -t with "-R exec"'),
    ]


def test_saved_file_with_blocks_interleaving_and_glued_lines(tmp_path: Path) -> None:
    """The block fast path of saved files gives what line-by-line feeding gives."""
    lines: list[str] = []
    for index in range(1, 30):
        host = f"c{index:02d}"
        grade = "fail" if index % 7 == 0 else "pass"
        body = json.dumps(make_report(host, grade, [LINK_FAIL] if grade == "fail" else None, busbw=450.0 + index), indent=2)
        lines += prefixed(host, body)
    # Two hosts interleaved line by line, and one report glued to the next host's line.
    a = prefixed("i1", json.dumps(make_report("i1", "warn", [MTU_WARN]), indent=2))
    b = prefixed("i2", json.dumps(make_report("i2"), indent=2))
    for pair in zip(a, b):
        lines += pair
    lines += a[len(b):] + b[len(a):]
    glued = prefixed("g1", json.dumps(make_report("g1", "fail", [LINK_FAIL]), indent=2))
    glued[-1] = "g1: }g2: not json at all\n"
    lines += glued + ["pdsh@vm: g3: command timeout\n"]
    saved = tmp_path / "sweep.out"
    saved.write_text("".join(lines))
    from_file = FleetCollector()
    from_file.add_path(saved)
    by_line = FleetCollector()
    by_line.feed_lines(lines)
    file_nodes = {node.host: (str(node.grade), node.top) for node in from_file.finish()}
    line_nodes = {node.host: (str(node.grade), node.top) for node in by_line.finish()}
    assert file_nodes == line_nodes
    assert len(file_nodes) == 29 + 4       # g2 exists only inside g1's line
    assert file_nodes["c07"][0] == "fail" and file_nodes["c08"][0] == "pass"
    assert (file_nodes["i1"][0], file_nodes["i2"][0]) == ("warn", "pass")
    assert (file_nodes["g1"][0], file_nodes["g3"][0]) == ("invalid", "unreachable")


def phy_finding(subject: str, status: str = "pass", **evidence: object) -> dict[str, object]:
    return {"check": "phy", "status": status, "subject": subject, "summary": "", "evidence": evidence}


def test_the_worst_pre_fec_ber_of_a_node_is_its_phy_metric() -> None:
    findings = [phy_finding("mlx5_0:1", pre_fec_ber=2e-9), phy_finding("mlx5_1:1", "warn", pre_fec_ber=3e-5),
                phy_finding("mlx5_2:1", pre_fec_ber=0.0),
                # Values that are no BER are ignored; another check's pre_fec_ber is not phy's.
                phy_finding("mlx5_3:1", pre_fec_ber=7.0), phy_finding("mlx5_4:1", pre_fec_ber=True),
                phy_finding("mlx5_5:1", pre_fec_ber=float("inf")), phy_finding("mlx5_6:1", pre_fec_ber="1"),
                {"check": "link-speed", "status": "pass", "subject": "mlx5_0:1", "evidence": {"pre_fec_ber": 0.5}}]
    node = summarize_report(make_report("n1", "warn", findings))
    assert node.metrics == {PHY_BER_METRIC: round(math.log10(3e-5), 3)}
    clean = summarize_report(make_report("n2", findings=[phy_finding("mlx5_0:1", pre_fec_ber=0.0)]))
    assert clean.metrics == {PHY_BER_METRIC: -18.0}


def test_a_marginal_link_is_a_fleet_outlier_by_decades() -> None:
    nodes = [summarize_report(make_report(f"n{index}", findings=[phy_finding("mlx5_0:1", pre_fec_ber=ber)]))
             for index, ber in enumerate([2e-9, 3e-9, 1e-9, 2e-9, 4e-9, 2e-9, 5e-7, 8e-9])]
    [outlier] = [o for o in find_outliers(nodes) if o.metric == PHY_BER_METRIC]
    assert outlier.host == "n6" and outlier.value == pytest.approx(math.log10(5e-7), abs=1e-3)
