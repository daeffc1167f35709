"""Property test of `fleet report` over hostile per-node outputs (CONTRACT 6.4).

Some nodes answer honestly (a report of their own, compact or pretty-printed), some stay
silent, the rest send anything: deep nesting, huge or non-finite numbers, control bytes,
reports naming another host or an alias, two reports, a report glued to another's on one
line, cut reports, random text. Lines of all nodes are interleaved as a parallel shell
would. Whatever the hostile ones send: no crash in any renderer, every asked host exactly
once, and each honest or silent host graded exactly as if it had been alone.
NETDOCTOR_FUZZ_EXAMPLES sets the number of examples (scripts/test.sh: 2000 under CI).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netdoctor.fleet.collect import FleetCollector
from netdoctor.fleet.render import render_html, render_json, render_text
from netdoctor.fleet.report import build_fleet_report
from test_fleet_collect import LINK_FAIL, MTU_WARN, make_report

FUZZ = settings(
    max_examples=int(os.environ.get("NETDOCTOR_FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)

HOSTS = [f"n{index}" for index in range(6)]
NASTY_TEXT = st.lists(st.sampled_from(list("{}[]\":, \x1b\x07\r\t\u202e\ud800é0aZ") + ["n1: ", "\\u0000", "NaN"]),
                      max_size=40).map("".join)
HONEST_FINDINGS = {"pass": [], "warn": [MTU_WARN], "fail": [LINK_FAIL, MTU_WARN], "unknown": []}


def honest_lines(host: str, grade: str, pretty: int | None, busbw: float | None) -> list[str]:
    report = make_report(host, grade, HONEST_FINDINGS[grade] or None, busbw=busbw)
    return json.dumps(report, indent=pretty).split("\n")


@st.composite
def hostile_lines(draw: st.DrawFn, host: str) -> list[str]:
    """What a broken or compromised node sends, as its lines (without the shell's prefix)."""
    other = draw(st.sampled_from(HOSTS + [f"{host}.example.org", "localhost"]))
    kind = draw(st.sampled_from(["deep", "number", "control", "foreign", "twice", "glued", "cut", "random", "big"]))
    report: dict[str, Any] = make_report(host, draw(st.sampled_from(["pass", "fail", "bogus"])), [dict(MTU_WARN)])
    if kind == "deep":
        levels = draw(st.integers(1, 3000))
        text = json.dumps(report)[:-1] + ', "x": ' + "[" * levels + "]" * levels + "}"
        return [text] if draw(st.booleans()) else ["{", text[1:-1], "}"]
    if kind == "number":
        number = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "1" * 5000, "-0", "1e-400"]))
        report["probe"] = {"busbw_gbps": 1.25}
        report["findings"][0]["evidence"] = {"error_growth": 2.5}
        text = json.dumps(report).replace("1.25", number).replace("2.5", draw(st.sampled_from(["2.5", number])))
        return [text]
    if kind == "control":
        report["host"] = draw(st.sampled_from([host, other])) + draw(NASTY_TEXT)
        report["findings"][0]["summary"] = draw(NASTY_TEXT)
        report["findings"][0]["check"] = draw(st.sampled_from(["mtu", "mtu\x1b[2J", "x" * 100]))
        return json.dumps(report, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans())).split("\n")
    if kind == "foreign":
        report["host"] = other
        return json.dumps(report, indent=draw(st.sampled_from([None, 0, 2]))).split("\n")
    if kind == "twice":
        return [json.dumps(report), json.dumps(make_report(other, "pass"))]
    if kind == "glued":
        glued_to = draw(st.sampled_from([other, host]))
        lines = json.dumps(report, indent=draw(st.sampled_from([None, 2]))).split("\n")
        lines[-1] += f"{glued_to}: " + json.dumps(make_report(glued_to, "pass"))
        return lines
    if kind == "cut":
        text = json.dumps(report, indent=2)
        return text[: draw(st.integers(0, len(text)))].split("\n")
    if kind == "big":
        return ["{" + '"k": "' + "x" * draw(st.integers(0, 50_000)) + '"'] * draw(st.integers(1, 3))
    return draw(st.lists(NASTY_TEXT, max_size=5))


@st.composite
def sweeps(draw: st.DrawFn) -> tuple[list[str], dict[str, list[str]], set[str]]:
    """Interleaved `host: line` output, each host's own lines, and the honest/silent hosts."""
    hosts = HOSTS[: draw(st.integers(1, len(HOSTS)))]
    per_host: dict[str, list[str]] = {}
    trusted: set[str] = set()
    for host in hosts:
        role = draw(st.sampled_from(["honest", "honest", "silent", "hostile"]))
        if role == "honest":
            busbw = draw(st.none() | st.floats(1, 500))
            lines = honest_lines(host, draw(st.sampled_from(list(HONEST_FINDINGS))), draw(st.sampled_from([None, 0, 2])), busbw)
            trusted.add(host)
        elif role == "silent":
            lines = []
            trusted.add(host)
        else:
            lines = draw(hostile_lines(host))
        per_host[host] = [f"{host}: {line}\n" for line in lines]
    queues = [list(lines) for lines in per_host.values() if lines]
    output: list[str] = []
    while queues:
        queue = queues[draw(st.integers(0, len(queues) - 1))]
        output.append(queue.pop(0))
        queues = [queue for queue in queues if queue]
    return output, per_host, trusted


def verdicts(lines: list[str], hosts: list[str]) -> dict[str, tuple[str, str]]:
    collector = FleetCollector()
    collector.feed_lines(lines)
    nodes = collector.finish(expected_hosts=hosts)
    report = build_fleet_report(nodes)
    for render in (render_text, render_json, render_html):
        rendered = render(report)
        assert "\x1b" not in rendered and "\x07" not in rendered
        rendered.encode("utf-8")                   # no lone surrogate reaches a terminal or page
    json.loads(render_json(report), parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(name)))
    listed = [node.host for node in report.nodes]
    assert sorted(listed) == sorted(set(listed)), "a host listed twice"
    return {node.host: (str(node.grade), node.headline()) for node in report.nodes}


@FUZZ
@given(sweeps())
def test_no_node_changes_another_nodes_verdict_or_crashes_the_report(sweep: tuple[list[str], dict[str, list[str]], set[str]]) -> None:
    output, per_host, trusted = sweep
    hosts = list(per_host)
    fleet = verdicts(output, hosts)
    assert set(hosts) <= set(fleet)
    for host in trusted:
        alone = verdicts(per_host[host], [host])
        assert fleet[host] == alone[host], (host, fleet[host], alone[host])


@settings(max_examples=max(10, int(os.environ.get("NETDOCTOR_FUZZ_EXAMPLES", "100")) // 20), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(sweeps())
def test_a_saved_sweep_gives_what_the_stream_gives(tmp_path: Path, sweep: tuple[list[str], dict[str, list[str]], set[str]]) -> None:
    output, per_host, _ = sweep
    saved = tmp_path / "sweep.out"
    saved.write_text("".join(output), encoding="utf-8", errors="surrogatepass", newline="")
    from_file = FleetCollector()
    from_file.add_path(saved)
    file_hosts = {node.host for node in from_file.finish(expected_hosts=list(per_host))}
    assert set(per_host) <= file_hosts
