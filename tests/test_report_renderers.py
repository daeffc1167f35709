"""Renderers over one findings list: text, json, prometheus (validated), junit (parsed); atomic -o."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from netdoctor.errors import UsageError
from netdoctor.report.json_report import LINE_CHARS
from netdoctor.report.model import CheckOutcome, Finding, Grade, Report, Status
from netdoctor.report.prometheus import escape_label_value
from netdoctor.report.render import FORMATS, emit, render, use_color


def _report(probe: dict | None = None) -> Report:
    findings = [
        Finding("port-state", Status.PASS, "mlx5_0:1"),
        Finding("link-speed", Status.FAIL, "mlx5_3:1", "port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)",
                {"rate_gbps": 200, "expected_gbps": 400}, "reseat or replace the cable/transceiver; check the switch port"),
        Finding("link-speed", Status.PASS, "mlx5_0:1"),
        Finding("mtu", Status.WARN, 'ens1f0"np0\\x', "MTU 1500, expected 9000\nsecond line", {"mtu": 1500}),
        Finding("pfc-ecn", Status.SKIP, "node", "no RoCE ports"),
        Finding("gpudirect", Status.UNKNOWN, "node", "nvidia-smi timed out after 5.0 s"),
        Finding("error-counters", Status.FAIL, "mlx5_0:1", "symbol errors grow", rule="symbol_error_rate", shadow=True),
    ]
    checks = [
        CheckOutcome("port-state", Status.PASS, 0.001, True),
        CheckOutcome("link-speed", Status.FAIL, 0.002, True),
        CheckOutcome("error-counters", Status.PASS, 0.001, False),
        CheckOutcome("mtu", Status.WARN, 0.001, False),
        CheckOutcome("pfc-ecn", Status.SKIP, 0.0, False),
        CheckOutcome("gpudirect", Status.UNKNOWN, 0.0, False),
    ]
    return Report(host="node017", grade=Grade.FAIL, started_at="2026-11-21T22:40:00Z", duration_s=0.41,
                  rules="dgx-h100", findings=findings, checks=checks, probe=probe, netdoctor_version="0.1.0")


# -- prometheus -------------------------------------------------------------------------
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = rf'{_NAME[:-1]}*="(?:[^"\\\n]|\\["\\n])*"'.replace(":", "", 2)
_SAMPLE = re.compile(rf"^({_NAME})(\{{(?:{_LABEL})(?:,{_LABEL})*\}})? (-?[0-9.e+]+|NaN|[+-]Inf)$")


def validate_exposition(text: str) -> dict[str, list[tuple[str, float]]]:
    """A tiny text-format validator: HELP/TYPE before samples, every sample `name{labels} value`,
    no series twice (node_exporter's textfile collector refuses such a file)."""
    assert text.endswith("\n")
    samples: dict[str, list[tuple[str, float]]] = {}
    typed: set[str] = set()
    series: set[tuple[str, str]] = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("gauge", "counter"), line
            assert name not in typed, f"TYPE twice for {name}"
            typed.add(name)
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a valid sample line: {line!r}"
        name, labels, value = match.group(1), match.group(2) or "", match.group(3)
        assert name in typed, f"sample before its TYPE: {line!r}"
        assert (name, labels) not in series, f"repeated series: {line!r}"
        series.add((name, labels))
        samples.setdefault(name, []).append((labels, float(value)))
    return samples


def test_prometheus_output_is_valid_and_carries_the_values() -> None:
    samples = validate_exposition(render(_report(probe={"busbw_gbps": 452.7}), "prometheus"))
    assert samples["netdoctor_grade"] == [("", 2.0)]
    checks = dict(samples["netdoctor_check_status"])
    assert checks['{check="link-speed"}'] == 2
    assert checks['{check="pfc-ecn"}'] == -1
    assert checks['{check="gpudirect"}'] == 3
    findings = dict(samples["netdoctor_finding_status"])
    assert findings['{check="link-speed",subject="mlx5_3:1",shadow="false"}'] == 2
    assert findings['{check="mtu",subject="ens1f0\\"np0\\\\x",shadow="false"}'] == 1
    assert findings['{check="error-counters",subject="mlx5_0:1",shadow="true"}'] == 2
    assert len(samples["netdoctor_finding_status"]) == 7
    assert samples["netdoctor_run_duration_seconds"] == [("", 0.41)]
    assert samples["netdoctor_last_run_timestamp_seconds"] == [("", 1795300800.0)]
    assert samples["netdoctor_nccl_busbw_gbps"] == [("", 452.7)]
    assert samples["netdoctor_info"] == [('{version="0.1.0",rules="dgx-h100"}', 1.0)]


def test_prometheus_without_probe_has_no_busbw() -> None:
    samples = validate_exposition(render(_report(), "prometheus"))
    assert "netdoctor_nccl_busbw_gbps" not in samples


def test_label_escaping() -> None:
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_validator_rejects_bad_lines() -> None:
    with pytest.raises(AssertionError):
        validate_exposition('# TYPE x gauge\nx{a="unterminated} 1\n')
    with pytest.raises(AssertionError):
        validate_exposition("y 1\n")


# -- junit ------------------------------------------------------------------------------
def test_junit_parses_with_one_testcase_per_finding() -> None:
    report = _report()
    root = ElementTree.fromstring(render(report, "junit"))
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == len(report.findings)
    by_key = {(case.get("classname"), case.get("name")): case for case in cases}
    failure = by_key[("netdoctor.link-speed", "mlx5_3:1")].find("failure")
    assert failure is not None and failure.get("message", "").startswith("port runs at 200 Gb/s")
    assert "reseat" in (failure.text or "")
    assert by_key[("netdoctor.gpudirect", "node")].find("error").get("type") == "unknown"  # type: ignore[union-attr]
    assert by_key[("netdoctor.pfc-ecn", "node")].find("skipped") is not None
    warn = by_key[("netdoctor.mtu", 'ens1f0"np0\\x')]
    assert warn.find("failure") is None and "warn: MTU 1500" in (warn.findtext("system-out") or "")
    shadow = by_key[("netdoctor.error-counters", "mlx5_0:1")]
    assert shadow.find("failure") is None and "shadow" in (shadow.findtext("system-out") or "")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("7", "1", "1", "1")
    properties = {prop.get("name"): prop.get("value") for prop in suite.iter("property")}
    assert properties["grade"] == "fail"


# -- json and text ----------------------------------------------------------------------
def test_json_is_the_contract_object() -> None:
    data = json.loads(render(_report(probe={"busbw_gbps": 400.0}), "json"))
    assert data["schema"] == "netdoctor.report/1"
    assert data["grade"] == "fail" and data["host"] == "node017" and data["rules"] == "dgx-h100"
    assert data["findings"][1] == {
        "check": "link-speed", "status": "fail", "subject": "mlx5_3:1",
        "summary": "port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)",
        "evidence": {"rate_gbps": 200, "expected_gbps": 400},
        "remedy": "reseat or replace the cable/transceiver; check the switch port"}
    assert data["checks"][1] == {"check": "link-speed", "status": "fail", "duration_s": 0.002, "required": True}
    assert data["netdoctor"] == "0.1.0"
    assert data["probe"] == {"busbw_gbps": 400.0}


def test_json_for_a_pipe_is_short_lines_and_for_a_terminal_indented() -> None:
    # srun splits an output line over 1024 bytes in two; the fleet reader ends a report at
    # a line holding only its closing brace.
    long_summary = "x" * 1500
    report = _report(probe={"busbw_gbps": 400.0})
    report.findings.append(Finding("mtu", Status.WARN, "ens2", long_summary))
    piped = render(report, "json")
    lines = piped.splitlines()
    assert len(lines) > 2 and lines[-1] == "}" and piped.endswith("}\n")
    assert [len(line) for line in lines if len(line) > LINE_CHARS] == [len(json.dumps(long_summary))]
    assert json.loads(piped) == json.loads(render(report, "json", terminal=True))
    indented = render(report, "json", terminal=True)
    assert indented.startswith('{\n  "schema": "netdoctor.report/1"')


def test_text_lists_grade_problems_then_per_check_lines() -> None:
    text = render(_report(), "text")
    lines = text.splitlines()
    assert lines[0].startswith("node017: FAIL   rules dgx-h100   0.41 s")
    assert "\033[" not in text
    problem_lines = [line for line in lines if line.startswith(("fail", "unknown", "warn"))]
    assert problem_lines[0].split()[:3] == ["fail", "link-speed", "mlx5_3:1"]
    assert problem_lines[1].split()[:2] == ["fail", "error-counters"] and problem_lines[1].endswith("(shadow)")
    assert problem_lines[2].split()[:2] == ["unknown", "gpudirect"]
    assert any(line.strip() == "remedy: reseat or replace the cable/transceiver; check the switch port" for line in lines)
    assert not any("mlx5_0:1" in line and line.startswith("pass") for line in lines)
    per_check = {line.split()[0]: line for line in lines[-6:]}
    assert per_check["link-speed"].split(None, 2)[1:] == ["fail", "1 fail, 1 pass"]
    assert per_check["pfc-ecn"].split(None, 2)[1:] == ["skip", "no RoCE ports"]
    assert not any(line.startswith("skip") for line in lines)


def test_text_colors_only_when_asked() -> None:
    assert "\033[1;31mFAIL" in render(_report(), "text", color=True)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_use_color_needs_a_tty_and_no_NO_COLOR() -> None:
    assert use_color(_Tty(), {}) is True
    assert use_color(_Tty(), {"NO_COLOR": "1"}) is False
    assert use_color(io.StringIO(), {}) is False


def test_unknown_format_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown output format 'xml'"):
        render(_report(), "xml")
    assert FORMATS == ("text", "json", "prometheus", "junit")


# -- output -----------------------------------------------------------------------------
def test_output_file_is_atomic_0644_and_stdout_stays_empty(tmp_path: Path) -> None:
    target = tmp_path / "netdoctor.prom"
    target.write_text("old\n")
    stdout = io.StringIO()
    old_umask = os.umask(0o077)
    try:
        emit("new report\n", target, stdout)
    finally:
        os.umask(old_umask)
    assert target.read_text() == "new report\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert stdout.getvalue() == ""
    assert [path.name for path in tmp_path.iterdir()] == ["netdoctor.prom"]


def test_output_into_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot write .*/nope/report.json"):
        emit("x", tmp_path / "nope" / "report.json")
