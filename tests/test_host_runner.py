"""The command runner against the fake tools in tests/fakebin (real processes, real timeouts)."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from netdoctor.host import runner
from netdoctor.host.runner import run_commands
from netdoctor.host.types import CommandSpec, CommandState
from tests.process_util import gone

FAKEBIN = Path(__file__).parent / "fakebin"
# The fake tools are shell scripts that call sleep, head, tr, grep: keep the system PATH too.
PATH = f"{FAKEBIN}:{os.defpath}:/usr/bin:/bin"


def _run(*specs: CommandSpec, deadline: float | None = None, **options: int) -> dict:
    return run_commands(list(specs), deadline, path=PATH, **options)


def _grandchild_pid(stdout: str) -> int:
    line = next(line for line in stdout.splitlines() if line.startswith("grandchild "))
    return int(line.split()[1])




def test_tools_run_concurrently() -> None:
    started = time.monotonic()
    results = _run(*(CommandSpec(f"nap-{index}", ("nap",), timeout_s=5) for index in range(3)))
    elapsed = time.monotonic() - started
    assert elapsed < 0.75, f"3 x 0.3 s naps took {elapsed:.2f} s: not concurrent"
    assert sorted(results) == ["nap-0", "nap-1", "nap-2"]
    for result in results.values():
        assert result.state is CommandState.OK
        assert result.stdout == "rested\n"
        assert result.returncode == 0
        assert 0.25 < result.duration_s < 0.75


def test_nonzero_exit_keeps_stdout_and_stderr() -> None:
    result = _run(CommandSpec("ibstat", ("ibstat",)))["ibstat"]
    assert result.state is CommandState.ERROR
    assert result.returncode == 255
    assert "CA 'mlx5_0'" in result.stdout
    assert result.stdout.count("CA '") == 8
    assert result.stderr.startswith("ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed")
    assert "failed (exit status 255): ibpanic" in result.describe()


def test_hung_tool_times_out_and_its_whole_group_dies() -> None:
    started = time.monotonic()
    result = _run(CommandSpec("hang", ("hang",), timeout_s=0.5))["hang"]
    elapsed = time.monotonic() - started
    assert result.state is CommandState.TIMEOUT
    assert result.returncode is None
    assert 0.45 < elapsed < 1.5
    # The partial output written before the timeout is kept.
    grandchild = _grandchild_pid(result.stdout)
    assert gone(grandchild), "the tool's grandchild survived the timeout"
    assert "timed out after 0.5 s" in result.describe()


def test_deadline_cuts_a_longer_tool_timeout() -> None:
    started = time.monotonic()
    result = _run(CommandSpec("hang", ("hang",), timeout_s=30), deadline=time.monotonic() + 0.4)["hang"]
    assert result.state is CommandState.TIMEOUT
    assert time.monotonic() - started < 1.4


def test_passed_deadline_starts_nothing() -> None:
    result = _run(CommandSpec("nap", ("nap",)), deadline=time.monotonic() - 1)["nap"]
    assert result.state is CommandState.TIMEOUT
    assert result.stdout == ""
    assert "deadline" in result.stderr


def test_tool_that_exits_leaving_a_pipe_holder_returns_at_once() -> None:
    started = time.monotonic()
    result = _run(CommandSpec("straggler", ("straggler",), timeout_s=10))["straggler"]
    assert time.monotonic() - started < 2.0
    assert result.state is CommandState.OK
    assert gone(_grandchild_pid(result.stdout))


def test_output_flood_is_capped() -> None:
    result = _run(CommandSpec("flood", ("flood",), timeout_s=20), max_output_bytes=1_000_000)["flood"]
    assert result.state is CommandState.OK
    assert result.truncated is True
    assert len(result.stdout) == 1_000_000
    assert set(result.stdout) == {"x"}
    assert result.stderr == "about to flood\n"


def test_child_sees_the_c_locale_and_no_inherited_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("HOME", "/root-of-someone")
    result = _run(CommandSpec("locale", ("show-locale",)))["locale"]
    assert result.stdout.splitlines() == ["LC_ALL=C", "LANG=C", "HOME=unset"]


def test_missing_tool_is_missing() -> None:
    result = _run(CommandSpec("ibdev2netdev", ("no-such-tool-netdoctor",)))["ibdev2netdev"]
    assert result.state is CommandState.MISSING
    assert result.describe() == "no-such-tool-netdoctor is not installed"   # names the executable to install


def test_not_executable_path_is_an_error(tmp_path: Path) -> None:
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = _run(CommandSpec("tool", (str(script),)))["tool"]
    assert result.state is CommandState.ERROR
    assert result.returncode is None
    assert "permission denied" in result.stderr.lower()


def test_error_status_and_partial_output() -> None:
    result = _run(CommandSpec("broken", ("fail-with-output",)))["broken"]
    assert (result.state, result.returncode, result.stdout, result.stderr) == (
        CommandState.ERROR, 3, "partial result\n", "something broke\n")


def test_mixed_batch_each_gets_its_own_outcome() -> None:
    started = time.monotonic()
    results = _run(
        CommandSpec("nap", ("nap",)),
        CommandSpec("hang", ("hang",), timeout_s=0.4),
        CommandSpec("missing", ("not-installed-anywhere",)),
        CommandSpec("ibstat", ("ibstat",)),
    )
    assert time.monotonic() - started < 1.5
    assert {name: result.state for name, result in results.items()} == {
        "nap": CommandState.OK, "hang": CommandState.TIMEOUT,
        "missing": CommandState.MISSING, "ibstat": CommandState.ERROR,
    }
    assert list(results) == ["nap", "hang", "missing", "ibstat"]


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate command names: nap"):
        _run(CommandSpec("nap", ("nap",)), CommandSpec("nap", ("nap",)))


def test_no_process_group_survives_a_batch() -> None:
    results = _run(*(CommandSpec(f"hang-{index}", ("hang",), timeout_s=0.3) for index in range(4)))
    for result in results.values():
        assert result.state is CommandState.TIMEOUT
        assert gone(_grandchild_pid(result.stdout))
    me = psutil.Process()
    assert [child for child in me.children(recursive=True) if child.status() != psutil.STATUS_ZOMBIE] == []


def test_keyboard_interrupt_kills_every_started_tool() -> None:
    seen: list[psutil.Process] = []

    def interrupt() -> None:
        seen.extend(psutil.Process().children(recursive=True))
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.4, interrupt)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(*(CommandSpec(f"hang-{index}", ("hang",), timeout_s=30) for index in range(2)))
    finally:
        timer.cancel()
    assert time.monotonic() - started < 3.0
    # Two tools, each a sleep (the exec'd shell) and its background sleep: four processes, all gone.
    assert len(seen) == 4
    assert all(gone(process.pid) for process in seen)


# -- the same runner for processes that are not node tools (probe engines, parallel shells) ----

def _python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", textwrap.dedent(code))


def test_the_one_kill_path_terms_first_then_kills_what_ignores_it(tmp_path: Path) -> None:
    """A worker that handles SIGTERM gets to clean up; one that ignores it is killed after the grace."""
    polite, stubborn = tmp_path / "polite", tmp_path / "stubborn"
    code = """
        import os, signal, sys, time
        marker = sys.argv[1]
        if sys.argv[2] == "polite":
            signal.signal(signal.SIGTERM, lambda *_: (open(marker, "w").write("cleaned up"), os._exit(0)))
        else:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(marker + ".pid", "w").write(str(os.getpid()))
        time.sleep(600)
    """
    for marker, kind in ((polite, "polite"), (stubborn, "stubborn")):
        with runner.spawn([*_python(code), str(marker), kind], env=os.environ, timeout_s=60) as group:
            while not Path(f"{marker}.pid").exists():
                time.sleep(0.01)
            started = time.monotonic()
            runner.stop_group(group.process.pid, grace_s=0.3)
            stopped_s = time.monotonic() - started
            assert runner.wait_exited(group.process.pid, 5.0)
        if kind == "polite":
            assert marker.read_text() == "cleaned up" and stopped_s < 0.3
        else:
            assert not marker.exists() and stopped_s >= 0.3


def test_run_merged_keeps_one_log_in_order_closes_stdin_and_uses_the_c_locale(tmp_path: Path) -> None:
    spec = CommandSpec("worker", _python("""
        import os, sys
        print("out 1", flush=True)
        print("err 2", file=sys.stderr, flush=True)
        print("stdin " + repr(sys.stdin.read()), os.environ.get("LC_ALL"), flush=True)
    """), timeout_s=30)
    result = runner.run_merged(spec, env={**os.environ, "LC_ALL": "de_DE.UTF-8"})
    assert result.state is CommandState.OK and result.returncode == 0
    assert result.stdout.splitlines() == ["out 1", "err 2", "stdin '' C"]


def test_run_merged_feeds_stdin_while_running_and_caps_the_log() -> None:
    spec = CommandSpec("worker", _python("""
        import sys
        line = sys.stdin.readline()
        sys.stdout.write(line.strip() * 100000)
    """), timeout_s=30, max_output_bytes=1000)
    result = runner.run_merged(spec, env=os.environ, while_running=lambda stdin: (stdin.write(b"x\n"), stdin.flush()))
    assert result.state is CommandState.OK
    assert result.stdout == "x" * 1000 and result.truncated


def test_run_merged_stops_the_whole_group_at_the_deadline(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    spec = CommandSpec("worker", _python(f"""
        import os, time
        child = os.fork()
        if child == 0:
            time.sleep(600)
            os._exit(0)
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child}}")
        time.sleep(600)
    """), timeout_s=60)
    result = runner.run_merged(spec, env=os.environ, deadline=time.monotonic() + 1.0)
    assert result.state is CommandState.TIMEOUT and result.returncode is None
    leader, child = (int(value) for value in pids.read_text().split())
    assert gone(leader) and gone(child)
    assert leader not in runner._LIVE_GROUPS._groups
    missing = runner.run_merged(CommandSpec("nope", (str(tmp_path / "nope"),)), env=os.environ)
    assert missing.state is CommandState.MISSING and "cannot start" in missing.stderr


def test_spawn_watchdog_stops_a_group_whose_output_the_caller_blocks_on() -> None:
    """The fleet sweep reads its shell's stdout line by line; the watchdog ends a shell that hangs."""
    with runner.spawn(_python("import time; print('hello', flush=True); time.sleep(600)"), env=os.environ,
                      timeout_s=1.0, text=True, watchdog=True) as group:
        assert group.process.stdout is not None
        lines = list(group.process.stdout)          # blocks until the group is stopped
        assert not group.wait()                     # it did not end by itself
    assert lines == ["hello\n"] and group.timed_out
