"""Cloud fixtures run live (their sys/ as the live /sys, fake fi_info & co on PATH), captured,
and judged again from the capture: the same findings, so a p5 or a3 support bundle says what
the node said."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fake_tools import live_source_for
from netdoctor.host.snapshot import write_snapshot
from netdoctor.inventory.build import build_inventory
from netdoctor.run import CheckOptions, run_check

NODES = Path(__file__).parent / "fixtures" / "nodes"


def _findings(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(item["check"], item["status"], item["subject"], item["summary"]) for item in report["findings"]]


@pytest.mark.parametrize("fixture", ["aws-p5", "aws-p5-efa-unbound", "gcp-a3-high"])
def test_live_capture_and_replay_give_the_fixtures_findings(tmp_path: Path, fixture: str) -> None:
    env = {"NETDOCTOR_STATE": str(tmp_path / "state.json")}
    live = run_check(CheckOptions(no_probe=True, deadline_s=30.0),
                     source=live_source_for(NODES / fixture, tmp_path / "bin"), env=env).to_json()
    recorded = run_check(CheckOptions(snapshot=NODES / fixture, no_probe=True, deadline_s=30.0), env={}).to_json()
    assert _findings(live) == _findings(recorded)
    assert live["rules"] == recorded["rules"] == fixture.split("-efa")[0]

    source = live_source_for(NODES / fixture, tmp_path / "bin2", record=True)
    build_inventory(source)
    capture = write_snapshot(source.recording, tmp_path / "capture.tar.gz", host=source.host,
                             captured_at=source.captured_at, boot_id=source.boot_id, version="test")
    replayed = run_check(CheckOptions(snapshot=capture, no_probe=True, deadline_s=30.0), env={}).to_json()
    assert _findings(replayed) == _findings(recorded)
    # /proc is this machine's in a live run: the kernel is the test host's.
    assert {**replayed["versions"], "kernel": None} == {**recorded["versions"], "kernel": None}


def test_the_efa_versions_reach_the_report() -> None:
    report = run_check(CheckOptions(snapshot=NODES / "aws-p5", no_probe=True, deadline_s=30.0), env={}).to_json()
    assert report["versions"]["efa"] == "2.17.1g"
    assert report["versions"]["libfabric"] == "1.22.0amzn4.0"
    rails = report["fabric"]["rails"]
    assert len(rails) == 32 and {rail["rate_gbps"] for rail in rails} == {100.0}
    assert [rail["gpu"] for rail in rails[:8]] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_fi_info_finding_no_efa_provider_fails_gpudirect(tmp_path: Path) -> None:
    """`fi_info -p efa` with no usable provider exits 1 with `fi_getinfo: -61` on stderr (the
    pbelevich p4d capture in the corpus): libfabric cannot open EFA, so NCCL would fall back to
    sockets. That is a failure, not a tool that could not say."""
    import shutil

    node = tmp_path / "aws-p5"
    shutil.copytree(NODES / "aws-p5", node, symlinks=True)
    commands = node / "commands"
    (commands / "fi_info-p-efa.out").write_text("")
    (commands / "fi_info-p-efa.err").write_text("fi_getinfo: -61 (No data available)\n")
    (commands / "fi_info-p-efa.status").write_text("1\n")
    report = run_check(CheckOptions(snapshot=node, no_probe=True, deadline_s=30.0), env={}).to_json()
    (finding,) = [item for item in report["findings"] if item["check"] == "gpudirect"]
    assert finding["status"] == "fail" and "no efa provider at all" in finding["summary"]
    assert report["grade"] == "fail"
