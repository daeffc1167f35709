"""End-to-end scenarios: every fixture node judged through the whole pipeline.

The expectations live beside the fixtures (tests/fixtures/nodes/INDEX.toml): the grade
and EVERY finding that is not pass/skip. A check that raises a false alarm on a healthy
fixture, or misses the planted fault, fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from netdoctor.report.model import Status
from netdoctor.run import CheckOptions, run_check

NODES = Path(__file__).parent / "fixtures" / "nodes"
INDEX = tomllib.loads((NODES / "INDEX.toml").read_text())["fixtures"]


def _non_pass(report) -> list[list[str]]:
    return sorted(
        [finding.check, str(finding.status), finding.subject]
        for finding in report.findings
        if finding.status not in (Status.PASS, Status.SKIP)
    )


@pytest.mark.parametrize("name", sorted(INDEX))
def test_fixture_gives_expected_findings(name: str) -> None:
    expected = INDEX[name]["expect"]
    report = run_check(CheckOptions(snapshot=NODES / name, no_probe=True), env={})
    assert _non_pass(report) == sorted(expected["findings"]), report.to_json()["findings"]
    assert str(report.grade) == expected["grade"]
    # Every finding that is not a pass says what is wrong in words.
    for finding in report.findings:
        if finding.status is not Status.PASS:
            assert finding.summary, finding


@pytest.mark.parametrize("name", sorted(name for name, entry in INDEX.items() if "baseline" in entry))
def test_counter_growth_against_baseline(name: str) -> None:
    entry = INDEX[name]
    options = CheckOptions(snapshot=NODES / name, baseline=NODES / entry["baseline"], no_probe=True)
    report = run_check(options, env={})
    expected = entry["expect_with_baseline"]
    assert _non_pass(report) == sorted(expected["findings"])
    assert str(report.grade) == expected["grade"]
    # The finding (a fail; a warn where the pair's growth is slow) names the counter, how much it
    # grew, and over what time.
    growth = next(f for f in sorted(report.findings, key=lambda f: f.status is not Status.FAIL)
                  if f.status in (Status.FAIL, Status.WARN))
    assert "600" in growth.summary or "10 min" in growth.summary or "10.0 min" in growth.summary, growth.summary


def test_growth_between_two_runs_through_the_state_file(tmp_path: Path) -> None:
    """Two prolog runs on the same boot: the second judges link_downed growth from the state file."""
    state = tmp_path / "state.json"
    first = run_check(CheckOptions(snapshot=NODES / "dgx-h100-link-downed-a", state=state, no_probe=True), env={})
    assert str(first.grade) == "warn"
    assert json.loads(state.read_text())   # the first run left a baseline
    second = run_check(CheckOptions(snapshot=NODES / "dgx-h100-link-downed-b", state=state, no_probe=True), env={})
    assert str(second.grade) == "fail"
    assert ["error-counters", "fail", "mlx5_9:1"] in _non_pass(second)


def test_snapshot_run_never_writes_default_state(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    run_check(CheckOptions(snapshot=NODES / "dgx-h100", no_probe=True), env={"NETDOCTOR_STATE": str(state)})
    assert not state.exists()


def test_cli_json_report_follows_contract() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "netdoctor", "check", "--no-probe", "--format", "json", "--snapshot", str(NODES / "dgx-h100-port-down")],
        capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 2, completed.stderr
    report = json.loads(completed.stdout)   # stdout holds only the report
    assert report["schema"] == "netdoctor.report/1"
    assert report["host"] == "dgx-h100-port-down"
    assert report["grade"] == "fail"
    assert report["rules"] == "dgx-h100"
    for key in ("started_at", "duration_s", "findings"):
        assert key in report
    down = [f for f in report["findings"] if f["status"] == "fail"]
    assert [f["subject"] for f in down] == ["mlx5_4:1"]
    assert "DOWN" in down[0]["summary"].upper() and down[0]["remedy"]


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-h100-port-hdr", "dgx-h100-pcie-gen4-x8", "roce-h100-no-pfc", "cpu-node"])
def test_capture_of_a_live_run_gives_the_same_findings(name: str, tmp_path: Path) -> None:
    """check --snapshot on a capture equals the live run it was captured from (and the fixture itself)."""
    from fake_tools import live_source_for

    from netdoctor.host.snapshot import write_snapshot
    from netdoctor.inventory.build import build_inventory

    fixture = NODES / name
    env = {"NETDOCTOR_STATE": str(tmp_path / "state.json")}
    # The fixtures hold a fabric scan (iblinkinfo); a live run does one only when asked.
    live = run_check(CheckOptions(no_probe=True, fabric_scan=True), source=live_source_for(fixture, tmp_path / "bin"), env=env)

    recording_source = live_source_for(fixture, tmp_path / "bin", record=True)
    build_inventory(recording_source, fabric_scan=True)
    capture = tmp_path / "capture.tar.gz"
    write_snapshot(recording_source.recording, capture, host=recording_source.host,
                   captured_at=recording_source.captured_at, boot_id=recording_source.boot_id, version="test")
    replayed = run_check(CheckOptions(snapshot=capture, no_probe=True), env={})
    original = run_check(CheckOptions(snapshot=fixture, no_probe=True), env={})

    def judged(report) -> list[tuple[str, str, str, str]]:
        return sorted((f.check, str(f.status), f.subject, f.summary) for f in report.findings)

    assert judged(replayed) == judged(live)
    assert judged(original) == judged(live)
    assert live.grade == replayed.grade == original.grade


def test_live_run_without_fabric_scan_gives_the_same_verdicts(tmp_path: Path) -> None:
    """The default live run leaves iblinkinfo out; the verdicts stay those of the fixture."""
    from fake_tools import live_source_for

    fixture = NODES / "dgx-h100-port-hdr"
    live = run_check(CheckOptions(no_probe=True), source=live_source_for(fixture, tmp_path / "bin"),
                     env={"NETDOCTOR_STATE": str(tmp_path / "state.json")})
    assert _non_pass(live) == sorted(INDEX["dgx-h100-port-hdr"]["expect"]["findings"])
