"""Prolog storm: 50 `netdoctor check` processes at once against one state file.

Every process reads, updates and rewrites the shared counter history. Afterwards the
file must be valid JSON, hold one entry per host that ran (no lost update), keep the
entry of a host that did not run, and leave no temporary files; a later run must find
the baseline an earlier stormy run stored, and judge counter growth from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "nodes"
CLI = [sys.executable, "-c", "import sys; from netdoctor.cli import main; main()"]
EXIT_CODES = {"pass": 0, "warn": 1, "fail": 2, "unknown": 3}
STORM = ["dgx-h100", "hgx-a100", "roce-h100", "dgx-h100-port-hdr", "dgx-h100-mtu-2048", "dgx-h100-no-ibstat",
         "roce-h100-ecn-off", "dgx-h100-symbol-errors-a", "dgx-h100-link-downed-a", "dgx-h100-pcie-gen4-x8"]
RUNS_PER_FIXTURE = 5


def _index() -> dict[str, dict[str, object]]:
    return tomllib.loads((FIXTURES / "INDEX.toml").read_text())["fixtures"]


def _check(fixture: str, state: Path, *, quiet: bool = True, deadline: float = 120) -> list[str]:
    # A generous deadline: 50 runs share 2 cores here, and this test is about the state file,
    # not about how fast a starved run is (deadlines have their own tests).
    return [*CLI, *(["--quiet"] if quiet else []), "check", "--no-probe", "--format", "json", "--snapshot", str(FIXTURES / fixture),
            "--state", str(state), "--deadline", str(deadline)]


def test_fifty_concurrent_runs_keep_the_state_file_whole(tmp_path: Path) -> None:
    index = _index()
    state = tmp_path / "state" / "state.json"
    state.parent.mkdir()
    # A host that is not part of the storm: its history must survive 50 rewrites.
    bystander = {"host": "node999", "boot_id": "b-999", "captured_at": "2026-11-21T20:00:00Z",
                 "ports": {"mlx5_0:1": {"symbol_error": 7}}}
    state.write_text(json.dumps({"format": "netdoctor.state/1", "entries": [bystander]}))

    runs = [fixture for fixture in STORM for _ in range(RUNS_PER_FIXTURE)]
    assert len(runs) == 50
    env = dict(os.environ, NO_COLOR="1")
    processes = [(fixture, subprocess.Popen(_check(fixture, state), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True, env=env)) for fixture in runs]
    for fixture, process in processes:
        stdout, stderr = process.communicate(timeout=240)
        assert "Traceback" not in stderr
        report = json.loads(stdout)
        expected = index[fixture]["expect"]["grade"]      # type: ignore[index]
        assert (report["grade"], process.returncode) == (expected, EXIT_CODES[expected]), (fixture, stderr)

    document = json.loads(state.read_text())
    assert document["format"] == "netdoctor.state/1"
    hosts = sorted(entry["host"] for entry in document["entries"])
    expected_hosts = sorted({str(index[fixture]["host"]) for fixture in STORM} | {"node999"})
    assert hosts == expected_hosts                       # one entry per host: none lost, none doubled
    entries = {entry["host"]: entry for entry in document["entries"]}
    assert entries["node999"] == bystander
    assert entries["dgx-h100-symbol-errors"]["ports"]["mlx5_6:1"]["symbol_error"] == 120
    # Only the state file and its lock remain: every temporary file was renamed or removed.
    assert sorted(path.name for path in state.parent.iterdir()) == ["state.json", "state.json.lock"]
    assert state.stat().st_mode & 0o777 == 0o644

    # The baseline the storm stored is used by the next reading of that host:
    # symbol_error 120 -> 5120 in 600 s is judged as growth (fail), as with --baseline.
    later = subprocess.run(_check("dgx-h100-symbol-errors-b", state), capture_output=True, text=True, timeout=60)
    report = json.loads(later.stdout)
    judged = [(finding["status"], finding["subject"]) for finding in report["findings"]
              if finding["check"] == "error-counters" and finding["status"] != "pass"]
    assert judged == [("fail", "mlx5_6:1")]
    assert "rose by 5000 in 10 min" in next(finding["summary"] for finding in report["findings"]
                                            if finding["subject"] == "mlx5_6:1" and finding["check"] == "error-counters")
    assert later.returncode == 2


def test_corrupt_state_file_is_replaced_not_fatal(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_bytes(b"\x00\x01{not json")
    done = subprocess.run(_check("dgx-h100", state), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    document = json.loads(state.read_text())
    assert [entry["host"] for entry in document["entries"]] == ["dgx-h100"]


def test_unwritable_state_costs_only_the_growth_judgement(tmp_path: Path) -> None:
    # A file where the state directory should be: the state cannot be written at all.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    done = subprocess.run(_check("dgx-h100", blocker / "state.json", quiet=False), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "counter state" in done.stderr
    assert json.loads(done.stdout)["grade"] == "pass"


def test_a_lock_held_by_another_process_does_not_push_the_run_past_its_deadline(tmp_path: Path) -> None:
    import fcntl

    state = tmp_path / "state.json"
    descriptor = os.open(tmp_path / "state.json.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)    # held by this process for the whole run
        done = subprocess.run(_check("dgx-h100", state, deadline=3), capture_output=True, text=True,
                              timeout=120)
    finally:
        os.close(descriptor)
    report = json.loads(done.stdout)
    # The old code waited 10 s for the lock whatever the deadline; the run's own clock
    # (interpreter start-up left out) must stay near its 3 s.
    assert report["duration_s"] < 3 + 3
    assert done.returncode == 0 and report["grade"] == "pass", done.stderr
    [note] = [finding for finding in report["findings"] if finding["check"] == "counter-history"]
    assert note["status"] == "unknown" and "locked by another process" in note["summary"]
    assert not state.exists()
