"""Counter history: the locked, atomic, bounded state file (host.state_store), the pure history
logic (checks.history), their composition in run.counter_history, and --baseline snapshots."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from inventory_factory import BOOT_ID, dgx_h100, port_of
from netdoctor.checks.api import CounterHistory
from netdoctor.checks.history import MAX_BOOTS_PER_HOST, history_from_baseline, history_from_entries, with_reading
from netdoctor.host.state_store import MAX_STATE_BYTES, exchange_entries, load_entries
from netdoctor.inventory.model import Inventory
from netdoctor.report.model import Finding, Grade, Status
from netdoctor.run import CheckOptions, counter_history, run_check


def exchange_counters(path: Path, inventory: Inventory, *, deadline: float | None = None) -> CounterHistory | None:
    """Store this inventory's reading and return the previous one (what run.counter_history composes)."""
    stored = exchange_entries(path, lambda entries: with_reading(entries, inventory), deadline=deadline)
    return history_from_entries(stored.entries, inventory)


def read_counters(path: Path, inventory: Inventory) -> CounterHistory | None:
    return history_from_entries(load_entries(path).entries, inventory)


def later(inventory: Inventory, captured_at: str, **counter_changes: int) -> Inventory:
    """The same node at another time, with some mlx5_3:1 counters changed."""
    newer = dgx_h100(host=inventory.host)
    newer.captured_at = captured_at
    newer.boot_id = inventory.boot_id
    port_of(newer, "mlx5_3:1").counters.update(counter_changes)
    return newer


def test_first_exchange_has_no_history_and_writes_a_readable_state_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    assert exchange_counters(path, dgx_h100()) is None
    document = json.loads(path.read_text())
    assert document["format"] == "netdoctor.state/1"
    [entry] = document["entries"]
    assert entry["host"] == "node017" and entry["boot_id"] == BOOT_ID
    assert entry["ports"]["mlx5_3:1"]["link_downed"] == 0
    assert entry["ports"]["mlx5_3:1"]["hw_counters/roce_adp_retrans"] == 3
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert (tmp_path / "state.json.lock").exists()
    assert sorted(item.name for item in tmp_path.iterdir()) == ["state.json", "state.json.lock"]   # no temp left


def test_second_exchange_returns_the_previous_reading_with_elapsed_time(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    first = dgx_h100()
    exchange_counters(path, first)
    second = later(first, "2026-11-21T22:50:00Z", link_downed=1, symbol_error=5)
    history = exchange_counters(path, second)
    assert history is not None
    assert history.elapsed_s == 600.0
    assert history.taken_at == "2026-11-21T22:40:00Z"
    assert history.source == "state"
    assert history.ports["mlx5_3:1"]["link_downed"] == 0
    # The file now holds the second reading, once.
    [entry] = json.loads(path.read_text())["entries"]
    assert entry["captured_at"] == "2026-11-21T22:50:00Z"
    assert entry["ports"]["mlx5_3:1"]["link_downed"] == 1


def test_another_boot_is_not_history(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    exchange_counters(path, dgx_h100())
    rebooted = later(dgx_h100(), "2026-11-22T01:00:00Z")
    rebooted.boot_id = "0b8f6d0e-0000-4000-8000-000000000001"
    assert exchange_counters(path, rebooted) is None
    entries = json.loads(path.read_text())["entries"]
    assert {entry["boot_id"] for entry in entries} == {BOOT_ID, rebooted.boot_id}


def test_boots_per_host_are_bounded_and_other_hosts_kept(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    exchange_counters(path, dgx_h100(host="node018"))
    for hour in range(MAX_BOOTS_PER_HOST + 2):
        inventory = dgx_h100()
        inventory.captured_at = f"2026-11-22T0{hour}:00:00Z"
        inventory.boot_id = f"boot-{hour}"
        exchange_counters(path, inventory)
    entries = json.loads(path.read_text())["entries"]
    mine = sorted(entry["boot_id"] for entry in entries if entry["host"] == "node017")
    assert mine == [f"boot-{hour}" for hour in range(2, MAX_BOOTS_PER_HOST + 2)]
    assert [entry["host"] for entry in entries].count("node018") == 1


def test_corrupt_state_file_is_replaced_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"format": "netdoctor.state/1", "entries": [')
    assert exchange_counters(path, dgx_h100()) is None
    assert len(json.loads(path.read_text())["entries"]) == 1


def test_foreign_json_is_treated_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"some": "other tool"}')
    assert exchange_counters(path, dgx_h100()) is None
    assert json.loads(path.read_text())["format"] == "netdoctor.state/1"


def test_read_counters_does_not_write(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    exchange_counters(path, dgx_h100())
    before = path.read_bytes()
    history = read_counters(path, later(dgx_h100(), "2026-11-21T23:40:00Z"))
    assert history is not None and history.elapsed_s == 3600.0
    assert path.read_bytes() == before
    assert read_counters(tmp_path / "absent.json", dgx_h100()) is None


def test_a_reading_that_is_not_older_gives_no_history(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    exchange_counters(path, dgx_h100())
    assert exchange_counters(path, dgx_h100()) is None   # same captured_at (a snapshot judged twice)


def test_unwritable_state_location_is_not_fatal(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    assert exchange_counters(blocker / "state.json", dgx_h100()) is None


def test_a_held_lock_times_out_and_falls_back_to_reading(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    exchange_counters(path, dgx_h100())
    before = path.read_bytes()
    descriptor = os.open(tmp_path / "state.json.lock", os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        history = exchange_counters(path, later(dgx_h100(), "2026-11-21T23:40:00Z"), deadline=time.monotonic() + 0.2)
    finally:
        os.close(descriptor)
    assert history is not None and history.elapsed_s == 3600.0
    assert path.read_bytes() == before


def test_concurrent_exchanges_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    hosts = [f"node{index:03d}" for index in range(12)]
    threads = [threading.Thread(target=exchange_counters, args=(path, dgx_h100(host=host))) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = json.loads(path.read_text())["entries"]
    assert sorted(entry["host"] for entry in entries) == hosts


def test_baseline_of_the_same_boot_gives_history() -> None:
    baseline = dgx_h100()
    current = later(baseline, "2026-11-21T22:50:00Z", symbol_error=5000)
    history, _ = history_from_baseline(baseline, current)
    assert history is not None
    assert history.source == "baseline"
    assert history.elapsed_s == 600.0
    assert history.ports["mlx5_3:1"]["symbol_error"] == 0


def test_baseline_of_another_boot_host_or_a_later_time_gives_none() -> None:
    baseline = dgx_h100()
    rebooted = later(baseline, "2026-11-21T22:50:00Z")
    rebooted.boot_id = "another-boot"
    assert history_from_baseline(baseline, rebooted) == (None, "different boot (" + baseline.boot_id
                                                         + " -> another-boot): counters were reset")
    assert history_from_baseline(dgx_h100(host="node018"), later(baseline, "2026-11-21T22:50:00Z")) == (
        None, "it is of host 'node018', not 'node017'")
    history, why_not = history_from_baseline(later(baseline, "2026-11-21T22:50:00Z"), baseline)
    assert history is None and "is not older" in why_not


def test_baselines_without_boot_ids_are_accepted() -> None:
    baseline = dgx_h100()
    baseline.boot_id = None
    current = later(baseline, "2026-11-21T23:10:00+00:00")
    current.boot_id = None
    history, _ = history_from_baseline(baseline, current)
    assert history is not None and history.elapsed_s == 1800.0


# -- a state file is untrusted input: bounded, and a bad one is reset where the report says so --


def _history_through_the_run(path: Path, inventory: Inventory, deadline: float | None = None
                             ) -> tuple[CounterHistory | None, list[Finding]]:
    return counter_history(CheckOptions(state=path), inventory, {}, is_snapshot=True, deadline=deadline)


def test_deeply_nested_state_is_reset_and_said_so_then_history_resumes(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"format": "netdoctor.state/1", "entries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    history, [note] = _history_through_the_run(path, dgx_h100())
    assert history is None
    assert (note.check, note.status, note.subject) == ("counter-history", Status.UNKNOWN, "node")
    assert "nested more than" in note.summary and "fresh history" in note.summary and str(path) in note.summary
    # The reset file was replaced: the next run has its history again, and no note.
    history, notes = _history_through_the_run(path, later(dgx_h100(), "2026-11-21T22:50:00Z"))
    assert history is not None and history.elapsed_s == 600.0 and notes == []


def test_oversized_state_is_reset_without_being_parsed(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    padding = "x" * (MAX_STATE_BYTES + 1)
    path.write_text(json.dumps({"format": "netdoctor.state/1", "entries": [{"host": "node999", "pad": padding}]}))
    del padding
    tracemalloc.start()
    try:
        history, [note] = _history_through_the_run(path, dgx_h100())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MAX_STATE_BYTES // 4           # refused by its size, never read whole
    assert history is None and "bytes" in note.summary and "reset" in note.summary
    assert path.stat().st_size < 1 << 20
    assert [entry["host"] for entry in json.loads(path.read_text())["entries"]] == ["node017"]


def test_nesting_of_a_normal_state_file_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    exchange_counters(path, dgx_h100())
    # Brackets inside strings are text, not nesting.
    document = json.loads(path.read_text())
    document["entries"][0]["note"] = "[[[[[[[[[[[[[[[[[[[[{{{{{{{{{{{{"
    path.write_text(json.dumps(document))
    history, notes = _history_through_the_run(path, later(dgx_h100(), "2026-11-21T22:50:00Z"))
    assert history is not None and notes == []


def test_corrupt_state_is_said_in_the_report(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"format": "netdoctor.state/1", "entries": [')
    history, [note] = _history_through_the_run(path, dgx_h100())
    assert history is None and "not JSON" in note.summary


@pytest.mark.skipif(os.geteuid() != 0, reason="simulates another user by chown: needs root")
def test_another_users_state_in_a_shared_directory_is_not_trusted(tmp_path: Path) -> None:
    import pwd

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    path = shared / "state.json"
    exchange_counters(path, dgx_h100())          # a reading that would give history...
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chown(path, nobody, nobody)               # ...but another user could have written it
    history, [note] = _history_through_the_run(path, later(dgx_h100(), "2026-11-21T22:50:00Z"))
    assert history is None and "not trusted" in note.summary
    assert path.stat().st_uid == os.geteuid()    # replaced by a file of ours


def test_a_lock_held_past_the_deadline_costs_only_the_growth_judgement(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    descriptor = os.open(tmp_path / "state.json.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        history, [note] = _history_through_the_run(path, dgx_h100(), deadline=time.monotonic() + 0.5)
    finally:
        os.close(descriptor)
    assert history is None and "locked by another process" in note.summary
    assert not path.exists()                     # nothing stored without the lock


def test_deeply_nested_unclosed_state_is_reset(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"format": "netdoctor.state/1", "entries": ' + "[" * 100_000)
    history, [note] = _history_through_the_run(path, dgx_h100())
    assert history is None and "nested more than" in note.summary


def test_a_baseline_of_another_host_is_said_in_the_report() -> None:
    snapshot = Path(__file__).parent / "fixtures" / "nodes" / "dgx-h100"    # host dgx-h100, not node017
    history, [note] = counter_history(CheckOptions(baseline=snapshot), dgx_h100(), {}, is_snapshot=True,
                                      deadline=time.monotonic() + 30)
    assert history is None and note.check == "counter-history" and note.status is Status.UNKNOWN
    assert f"baseline {snapshot} not used: it is of host 'dgx-h100', not 'node017'" in note.summary


def test_an_unusable_baseline_makes_the_grade_unknown_not_a_quiet_pass() -> None:
    """--baseline names what to judge growth against: when it cannot be used the run could not
    do what was asked, so the grade line says UNKNOWN (exit 3); a usable one grades as usual."""
    nodes = Path(__file__).parent / "fixtures" / "nodes"
    foreign = run_check(CheckOptions(snapshot=nodes / "dgx-h100", baseline=nodes / "aws-p5", no_probe=True))
    assert foreign.grade is Grade.UNKNOWN
    assert [finding.check for finding in foreign.findings if finding.status is Status.UNKNOWN] == ["counter-history"]
    alone = run_check(CheckOptions(snapshot=nodes / "dgx-h100", no_probe=True))
    assert alone.grade is Grade.PASS
    grown = run_check(CheckOptions(snapshot=nodes / "dgx-h100-symbol-errors-b",
                                   baseline=nodes / "dgx-h100-symbol-errors-a", no_probe=True))
    assert grown.grade is Grade.FAIL
