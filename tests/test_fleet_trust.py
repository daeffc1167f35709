"""Trust at the fleet edge (CONTRACT 6.4): no node decides about another, nor takes the report down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from netdoctor.fleet.collect import FleetCollector
from netdoctor.fleet.model import NodeSummary
from netdoctor.fleet.render import render_html, render_json, render_text
from netdoctor.fleet.report import build_fleet_report
from netdoctor.fleet.sweep import SweepOptions, run_sweep
from test_fleet_collect import LINK_FAIL, MTU_WARN, make_report, prefixed

REPO = Path(__file__).resolve().parent.parent


def collect(lines: list[str], expected: list[str]) -> dict[str, NodeSummary]:
    collector = FleetCollector()
    collector.feed_lines(lines)
    return {node.host: node for node in collector.finish(expected_hosts=expected)}


def grades(nodes: dict[str, NodeSummary]) -> dict[str, str]:
    return {host: str(node.grade) for host, node in nodes.items()}


# ---- attribution ---------------------------------------------------------------------------

def test_a_report_naming_another_host_makes_its_sender_invalid_and_leaves_the_other_alone() -> None:
    forged = make_report("n2")                                      # n1 claims n2 passes
    nodes = collect(prefixed("n1", json.dumps(forged)) + prefixed("n3", json.dumps(make_report("n2"))),
                    ["n1", "n2", "n3"])
    assert grades(nodes) == {"n1": "invalid", "n2": "unreachable", "n3": "invalid"}
    assert nodes["n1"].top.summary == "its report names another host of the sweep, 'n2'"
    # n2 failing stays failing, whoever claims it passes.
    nodes = collect(prefixed("n2", json.dumps(make_report("n2", "fail", [LINK_FAIL])))
                    + prefixed("n1", json.dumps(forged, indent=2)), ["n1", "n2"])
    assert grades(nodes) == {"n1": "invalid", "n2": "fail"}


def test_an_alias_of_the_sender_is_shown_beside_its_name() -> None:
    nodes = collect(prefixed("n1", json.dumps(make_report("n1.cluster.example", "warn", [MTU_WARN]))), ["n1"])
    assert grades(nodes) == {"n1": "warn"}
    assert nodes["n1"].reported_host == "n1.cluster.example"
    report = build_fleet_report(nodes.values())
    assert "n1 (reports as n1.cluster.example)  warn" in render_text(report)
    assert json.loads(render_json(report))["nodes"][0]["reported_host"] == "n1.cluster.example"


def test_two_reports_from_one_sender_make_it_invalid() -> None:
    lines = prefixed("n1", json.dumps(make_report("n1", "fail", [LINK_FAIL]))) + prefixed("n1", json.dumps(make_report("n1")))
    nodes = collect(lines, ["n1"])
    assert grades(nodes) == {"n1": "invalid"}
    # Each report's own verdict stays beside the `invalid`: the second one hides no failure.
    assert nodes["n1"].top.summary == ("more than one report from this sender: fail (link-speed mlx5_3:1: port runs at "
                                       "200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)); pass")
    assert [str(grade) for _, grade, _ in nodes["n1"].reports] == ["fail", "pass"]


def test_a_glued_line_is_its_senders_and_never_makes_another_node_better() -> None:
    n2_fails = json.dumps(make_report("n2", "fail", [LINK_FAIL]))
    # n1 appends a passing "n2" report to its own line: it cannot be told from pdsh's glue.
    glued = [f"n1: {json.dumps(make_report('n1'))}n2: {json.dumps(make_report('n2'))}\n"]
    for lines in (glued + prefixed("n2", n2_fails), prefixed("n2", n2_fails) + glued):
        nodes = collect(lines, ["n1", "n2"])
        assert grades(nodes) == {"n1": "invalid", "n2": "fail"}
        assert nodes["n1"].top.summary.startswith("text after its report on the same line: 'n2: {")
    # A silent n2 stays unreachable.
    assert grades(collect(glued, ["n1", "n2"])) == {"n1": "invalid", "n2": "unreachable"}


def test_a_carriage_return_starts_no_line_of_another_host(tmp_path: Path) -> None:
    # pdsh cuts lines at "\n" only; Python's universal newlines would cut at "\r" too.
    forged = f"n1: junk\rn2: {json.dumps(make_report('n2'))}\n"
    saved = tmp_path / "sweep.out"
    saved.write_text(forged + "".join(prefixed("n1", json.dumps(make_report("n1")))), newline="")
    for feed in ("file", "stdin"):
        collector = FleetCollector()
        if feed == "file":
            collector.add_path(saved)
        else:
            with saved.open(encoding="utf-8") as stream:      # universal newlines, like sys.stdin
                collector.feed_stream(stream)
        nodes = {node.host: node for node in collector.finish(expected_hosts=["n1", "n2"])}
        assert grades(nodes)["n2"] == "unreachable", feed


def test_a_second_report_in_one_saved_file_makes_the_file_s_node_invalid(tmp_path: Path) -> None:
    (tmp_path / "n1.json").write_text(json.dumps(make_report("n1")) + "\n" + json.dumps(make_report("n2")))
    (tmp_path / "n2.json").write_text(json.dumps(make_report("n2", "fail", [LINK_FAIL])))
    collector = FleetCollector()
    collector.add_path(tmp_path)
    nodes = {node.host: node for node in collector.finish()}
    assert grades(nodes) == {"n1": "invalid", "n2": "fail"}
    assert "more than one JSON value in one report file" in nodes["n1"].top.summary


# ---- bounded -------------------------------------------------------------------------------

def deep(levels: int) -> str:
    return '{"schema": "netdoctor.report/1", "host": "n1", "grade": "pass", "findings": [], "x": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.parametrize("levels", [1000, 100_000])
def test_deep_nesting_makes_one_node_invalid_not_the_report_crash(levels: int) -> None:
    healthy = prefixed("n2", json.dumps(make_report("n2"), indent=2))
    nodes = collect(["n1: " + deep(levels) + "\n"] + healthy, ["n1", "n2"])
    assert grades(nodes) == {"n1": "invalid", "n2": "pass"}
    assert "nested deeper" in nodes["n1"].top.summary
    pretty = ["n3: {\n", "n3: " + deep(levels)[1:-1] + "\n", "n3: }\n"]
    assert grades(collect(pretty + healthy, ["n2", "n3"])) == {"n2": "pass", "n3": "invalid"}


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_make_the_node_invalid_and_every_renderer_works(number: str) -> None:
    text = json.dumps(make_report("n1", busbw=1.5)).replace("1.5", number)
    nodes = collect(prefixed("n1", text) + prefixed("n2", json.dumps(make_report("n2", busbw=450.0))), ["n1", "n2"])
    assert grades(nodes) == {"n1": "invalid", "n2": "pass"}
    report = build_fleet_report(nodes.values())
    rendered = render_json(report)
    json.loads(rendered, parse_constant=lambda name: pytest.fail(f"bare {name} in the JSON"))
    assert "n1" in render_html(report) and "n1" in render_text(report)


def peak_rss_mib(args: list[str], feed: bytes, repeat: int) -> tuple[int, str]:
    """Run `fleet ARGS` with `feed` written `repeat` times to its stdin: (VmHWM MiB, stdout)."""
    code = ("import sys\nfrom netdoctor.fleet.cli import main\nrc = main(sys.argv[1:])\n"
            "sys.stderr.write('\\nVmHWM ' + open('/proc/self/status').read().split('VmHWM:')[1].split()[0] + '\\n')\n"
            "sys.exit(rc)\n")
    with tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=stderr, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert child.stdin is not None and child.stdout is not None
        for _ in range(repeat):
            child.stdin.write(feed)
        child.stdin.write(b"\n" + "".join(prefixed("n2", json.dumps(make_report("n2")))).encode())
        child.stdin.close()
        stdout = child.stdout.read()
        child.wait(timeout=600)
        stderr.seek(0)
        kib = int(stderr.read().decode().rsplit("VmHWM ", 1)[1].split()[0])
    return kib // 1024, stdout.decode()


@pytest.mark.parametrize("feed", [b"x" * (1 << 20), b"n1: {" + b"\"k\": 1,\n" * (1 << 17)],
                         ids=["one 256 MiB line", "256 MiB of one node's lines"])
def test_one_node_s_flood_costs_bounded_memory(feed: bytes) -> None:
    flood = [b"n1: " + feed] if feed.startswith(b"x") else [feed.replace(b"\n", b"\nn1: ")]
    rss, stdout = peak_rss_mib(["report", "-", "--format", "json", "-w", "n[1-2]"], flood[0], 256)
    nodes = {node["host"]: node for node in json.loads(stdout)["nodes"]}
    assert nodes["n2"]["grade"] == "pass" and nodes["n1"]["grade"] == "invalid"
    assert rss < 150, f"peak RSS {rss} MiB for 256 MiB of one node's output"


def test_stderr_flood_is_bounded() -> None:
    collector = FleetCollector(hosts=["n1"])
    for _ in range(200_000):
        collector.feed_stderr_line("n1: " + "e" * 500 + "\n")
    nodes = collector.finish(expected_hosts=["n1"])
    assert nodes[0].top.summary.startswith("no output: eeee") and len(nodes[0].top.summary) < 220
    assert sum(len(messages) for messages in collector._shell._messages.values()) <= 3


# ---- escaping ------------------------------------------------------------------------------

HOSTILE = "\x1b]0;owned\x07\x1b[2J\rfake: pass\nline\u202e"


def test_control_characters_from_nodes_are_escaped_in_text_and_html() -> None:
    report = make_report("n1", "fail", [{**LINK_FAIL, "summary": HOSTILE, "check": "link-speed\x1b[31m"}])
    lines = prefixed("n1", json.dumps(report)) + [f"n\x1b[2J{index}: garbage {HOSTILE!s}\n".replace("\n", " ", 1)
                                                  for index in range(2)]
    nodes = collect(lines, ["n1"])
    fleet = build_fleet_report(nodes.values())
    for rendered in (render_text(fleet), render_html(fleet)):
        assert not any(ord(char) < 0x20 and char != "\n" or 0x7f <= ord(char) < 0xa0 or char == "\u202e"
                       for char in rendered), rendered
        assert "\\x1b]0;owned\\x07" in rendered
    assert not any(line.startswith("fake: pass") for line in render_text(fleet).splitlines())


# ---- messages ------------------------------------------------------------------------------

def test_one_node_is_one_node_and_the_top_finding_counts_the_others() -> None:
    findings = [LINK_FAIL, {**LINK_FAIL, "subject": "mlx5_4:1"}, MTU_WARN]
    nodes = collect(prefixed("n1", json.dumps(make_report("n1", "fail", findings))), ["n1"])
    text = render_text(build_fleet_report(nodes.values()))
    assert text.startswith("netdoctor fleet: 1 node (generated ")
    assert ("  n1  fail         link-speed mlx5_3:1: port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)"
            " (and 2 other findings)") in text
    assert "+2 more" not in text


def fake_srun(directory: Path) -> Path:
    """An srun of a machine without a working SLURM: errors on stderr, no output."""
    script = directory / "srun"
    script.write_text("#!/bin/sh\n"
                      "echo 'srun: error: _parse_next_key: Parsing error at unrecognized key: X' >&2\n"
                      "echo 'srun: error: _establish_config_source: failed to fetch config' >&2\n"
                      "echo 'srun: fatal: Could not establish a configuration source' >&2\n"
                      "exit 1\n")
    script.chmod(0o755)
    return directory


def test_srun_without_slurm_invents_no_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{fake_srun(tmp_path)}:{os.environ['PATH']}")
    result = run_sweep(SweepOptions(hosts="n[1-2]", via="srun", timeout_s=5))
    assert {node.host: (str(node.grade), node.top.summary) for node in result.nodes} == {
        host: ("unreachable", "no output: srun: fatal: Could not establish a configuration source") for host in ("n1", "n2")}


def test_fleet_errors_use_the_common_prefix(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "netdoctor", "fleet", "report", str(tmp_path / "missing")],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 3
    assert done.stderr.strip() == f"netdoctor: error: fleet input {tmp_path / 'missing'} does not exist"


def test_saved_shell_errors_name_no_host_outside_the_expected_ones(tmp_path: Path) -> None:
    saved = tmp_path / "sweep.err"
    saved.write_text("srun: error: _establish_config_source: failed to fetch config\nsrun: fatal: no config\n")
    collector = FleetCollector(hosts=["n1", "n2"])
    collector.add_path(saved)
    nodes = collector.finish(expected_hosts=["n1", "n2"])
    assert {node.host: node.top.summary for node in nodes} == {"n1": "no output: srun: fatal: no config",
                                                               "n2": "no output: srun: fatal: no config"}
