"""Prometheus and JUnit output of every fixture node and of the real H200 capture.

node_exporter's textfile collector rejects a file that repeats a series, and CI
dashboards key test history on classname + name: both must be unique on real reports,
where a check judges one subject more than once (port-state on `node`: SM LID and P_Key).
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

import pytest

from netdoctor.report.junit import junit_case_names
from netdoctor.report.model import Finding, Report, Status
from netdoctor.report.render import render
from netdoctor.run import CheckOptions, run_check
from test_report_renderers import validate_exposition

TESTS = Path(__file__).resolve().parent
NODES = TESTS / "fixtures" / "nodes"
CAPTURE = TESTS / "data" / "device" / "nvidia-h200-x2" / "capture.tar.gz"
SNAPSHOTS = sorted(path for path in NODES.iterdir() if path.is_dir()) + [CAPTURE] if NODES.is_dir() else []


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    if len(SNAPSHOTS) < 20 or not CAPTURE.is_file():
        pytest.skip("node fixtures or the H200 capture are missing")
    return {
        snapshot.name: run_check(CheckOptions(snapshot=snapshot, no_probe=True, deadline_s=30.0), env={})
        for snapshot in SNAPSHOTS
    }


def test_the_ib_fixtures_do_judge_one_subject_twice(reports: dict[str, Report]) -> None:
    """The case the uniqueness rules exist for is really there (else the tests below prove little)."""
    node_findings = [finding for finding in reports["dgx-h100"].findings
                     if finding.check == "port-state" and finding.subject == "node"]
    assert len(node_findings) == 2
    assert {finding.summary.split()[0] for finding in node_findings} == {"all", "P_Keys"}


def test_prometheus_has_no_duplicate_series_on_any_fixture(reports: dict[str, Report]) -> None:
    for name, report in reports.items():
        text = render(report, "prometheus")
        samples = validate_exposition(text)     # every line parses; repeats are refused
        series = [(metric, labels) for metric, values in samples.items() for labels, _ in values]
        assert len(series) == len(set(series)), name
        graded = {(finding.check, finding.subject) for finding in report.findings if not finding.shadow}
        assert len(samples["netdoctor_finding_status"]) == len(graded) + len(
            {(finding.check, finding.subject) for finding in report.findings if finding.shadow}), name
        assert samples["netdoctor_grade"] == [("", float(report.grade.exit_code))], name


def test_junit_names_are_unique_per_classname_on_any_fixture(reports: dict[str, Report]) -> None:
    for name, report in reports.items():
        suite = ElementTree.fromstring(render(report, "junit")).find("testsuite")
        assert suite is not None
        cases = [(case.get("classname"), case.get("name")) for case in suite.findall("testcase")]
        assert len(cases) == len(report.findings), name
        repeated = [case for case, count in Counter(cases).items() if count > 1]
        assert repeated == [], f"{name}: {repeated}"
    dgx = ElementTree.fromstring(render(reports["dgx-h100"], "junit"))
    names = {case.get("name") for case in dgx.iter("testcase") if case.get("classname") == "netdoctor.port-state"}
    assert {"node #1", "node #2", "mlx5_0:1"} <= names and "node" not in names


def test_validator_refuses_a_repeated_series() -> None:
    with pytest.raises(AssertionError, match="repeated series"):
        validate_exposition('# TYPE x gauge\nx{a="1"} 1\nx{a="1"} 2\n')


def _report(findings: list[Finding]) -> Report:
    from netdoctor.report.model import Grade
    return Report(host="n1", grade=Grade.FAIL, started_at="2026-11-21T22:40:00Z", duration_s=0.1,
                  rules="dgx-h100", findings=findings)


def test_prometheus_folds_one_subject_to_its_worst_status_and_keeps_shadow_apart() -> None:
    findings = [
        Finding("port-state", Status.PASS, "node", "all 8 active IB ports see SM LID 0x1"),
        Finding("port-state", Status.WARN, "node", "P_Keys differ", rule="pkey_mismatch"),
        Finding("port-state", Status.UNKNOWN, "node", "ibstat timed out"),
        Finding("port-state", Status.PASS, "mlx5_0:1"),
        Finding("port-state", Status.FAIL, "node", "SM LIDs differ", rule="sm_mismatch", shadow=True),
        Finding("port-state", Status.SKIP, "node", "shadow skip", shadow=True),
    ]
    samples = dict(validate_exposition(render(_report(findings), "prometheus"))["netdoctor_finding_status"])
    assert samples == {
        '{check="port-state",subject="node",shadow="false"}': 3.0,
        '{check="port-state",subject="mlx5_0:1",shadow="false"}': 0.0,
        '{check="port-state",subject="node",shadow="true"}': 2.0,
    }


def test_junit_names_take_the_rule_then_an_ordinal() -> None:
    findings = [
        Finding("port-state", Status.FAIL, "node", rule="sm_mismatch"),
        Finding("port-state", Status.PASS, "node", rule="pkey_mismatch"),
        Finding("port-state", Status.PASS, "mlx5_0:1"),
        Finding("link-speed", Status.PASS, "node"),            # another check: its own namespace
        Finding("mtu", Status.WARN, "ens1", rule="mtu"),
        Finding("mtu", Status.WARN, "ens1", rule="mtu"),        # the same rule twice: ordinals
        Finding("gpudirect", Status.PASS, "node"),
        Finding("gpudirect", Status.PASS, "node"),
        Finding("gpudirect", Status.PASS, "node #1"),           # a subject equal to an ordinal name
    ]
    assert junit_case_names(findings) == [
        "node [sm_mismatch]", "node [pkey_mismatch]", "mlx5_0:1", "node",
        "ens1 [mtu] #1", "ens1 [mtu] #2", "node #2", "node #3", "node #1",
    ]
