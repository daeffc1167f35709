"""Ctrl-C at any moment: exactly `netdoctor: error: interrupted` on stderr, exit 3, no
traceback, and nothing netdoctor started left running (a hung tool's group, a fleet
sweep's parallel shell and every `sh -c` it started in sessions of their own).

Moments are made deterministic rather than guessed: `python -X importtime` writes a line
to stderr as each import finishes, so a signal can follow a given import (typer's, the
runner, discovery); a check plugin that says when it started and then sleeps keeps the run
busy for the timed moments (0 to 0.3 s after netdoctor's own code began) and mid-run.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fake_tools import make_fake_tools, path_with

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "nodes" / "dgx-h100"
# What pip's console script runs, and `python -m netdoctor`.
CONSOLE_SCRIPT = ("import re\nimport sys\nfrom netdoctor.cli import main\n"
                  "sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\nsys.exit(main())\n")
ENTRIES = {"console-script": [sys.executable, "-X", "importtime", "-c", CONSOLE_SCRIPT],
           "python -m": [sys.executable, "-X", "importtime", "-m", "netdoctor"]}
INTERRUPTED = "netdoctor: error: interrupted\n"
SLOW_PLUGIN = """
import sys
import time

from netdoctor.checks import check


@check("zz-slow", "takes its time")
def slow(ctx):
    sys.stderr.write("SLOW-CHECK-STARTED\\n")
    sys.stderr.flush()
    time.sleep(20)
    yield ctx.passed("node")
"""
# The first import netdoctor makes once its entry point runs (the SIGINT handler is in place).
FIRST_OWN_IMPORT = "netdoctor.errors"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)     # a test runner's worker may ignore it


class Child:
    """A netdoctor process whose stderr lines are read as they come."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                        env=env, preexec_fn=_default_sigint)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout_s: float = 30.0) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=0.05)
            except queue.Empty:
                assert self.process.poll() is None, f"exited before {pattern!r}: {''.join(self.stderr)}"
                continue
            if re.search(pattern, line):
                return
        raise AssertionError(f"no {pattern!r} within {timeout_s} s: {''.join(self.stderr)}")

    def interrupt(self, timeout_s: float = 10.0) -> tuple[int, str, str]:
        """SIGINT now; (exit code, stdout, stderr without -X importtime's lines)."""
        assert self.process.poll() is None, "the process ended before the signal"
        self.process.send_signal(signal.SIGINT)
        return self.finish(timeout_s)

    def finish(self, timeout_s: float = 60.0) -> tuple[int, str, str]:
        """(exit code, stdout, stderr without -X importtime's lines) once it has exited."""
        assert self.process.stdout is not None
        self.process.wait(timeout=timeout_s)
        stdout = self.process.stdout.read()      # stderr is the reader thread's alone
        self._reader.join(timeout=5)
        own = [line for line in self.stderr if not line.startswith("import time:") and "SLOW-CHECK-STARTED" not in line]
        return self.process.returncode, stdout, "".join(own)


def _import_done(module: str) -> str:
    return rf"^import time:\s+\d+ \|\s+\d+ \|\s*{re.escape(module)}$"


@pytest.fixture()
def slow_plugin(tmp_path: Path) -> Path:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "slow.py").write_text(SLOW_PLUGIN)
    for path in (tmp_path, plugins):
        path.chmod(0o755)     # plugin directories must be safe when the tests run as root
    return plugins


def _snapshot_check(entry: str, plugins: Path, report_format: str = "json") -> list[str]:
    """`check --snapshot`, read without typer (netdoctor.check_command), or with `--format
    JSON` (a spelling only typer reads) through typer."""
    return [*ENTRIES[entry], "check", "--no-probe", "--snapshot", str(FIXTURE), "--plugin-dir", str(plugins),
            "--format", report_format, "--deadline", "60"]


@pytest.mark.parametrize("delay_s", [0.0, 0.02, 0.05, 0.1, 0.3])
def test_ctrl_c_moments_after_start_end_in_one_line_and_exit_3(slow_plugin: Path, delay_s: float) -> None:
    child = Child(_snapshot_check("console-script", slow_plugin))
    child.wait_for(_import_done(FIRST_OWN_IMPORT))
    time.sleep(delay_s)
    assert child.interrupt() == (3, "", INTERRUPTED)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize(("report_format", "after"), [
    ("json", "netdoctor.check_command"), ("json", "netdoctor.run"), ("json", "netdoctor.inventory.build"),
    ("json", "SLOW-CHECK-STARTED"),
    ("JSON", "typer.main"), ("JSON", "netdoctor.commands"), ("JSON", "SLOW-CHECK-STARTED"),
])
def test_ctrl_c_during_imports_and_mid_run(slow_plugin: Path, entry: str, report_format: str, after: str) -> None:
    child = Child(_snapshot_check(entry, slow_plugin, report_format))
    child.wait_for(after if after.isupper() else _import_done(after))
    started = time.monotonic()
    assert child.interrupt() == (3, "", INTERRUPTED)
    assert time.monotonic() - started < 5, "the sleeping check is a daemon thread: nothing waits for it"


def test_a_second_ctrl_c_during_cleanup_changes_nothing(slow_plugin: Path) -> None:
    child = Child(_snapshot_check("console-script", slow_plugin))
    child.wait_for("SLOW-CHECK-STARTED")
    child.process.send_signal(signal.SIGINT)
    assert child.interrupt() == (3, "", INTERRUPTED)


HANG_TOOL = """#!/bin/sh
sleep 600 &
echo "$$ $!" >> {pids}
exec sleep 601
"""


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for init."""
    fields = _stat(pid)
    return bool(fields) and fields[0] != b"Z"


def _wait_gone(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


def test_ctrl_c_on_a_live_node_kills_the_hung_tool_and_what_it_started(tmp_path: Path) -> None:
    bin_dir = make_fake_tools(FIXTURE, tmp_path / "bin")
    pids = tmp_path / "pids"
    (bin_dir / "ibstat").unlink()
    (bin_dir / "ibstat").write_text(HANG_TOOL.format(pids=pids))
    (bin_dir / "ibstat").chmod(0o755)
    env = {**os.environ, "PATH": path_with(bin_dir), "NETDOCTOR_SYSFS_ROOT": str(FIXTURE / "sys"), "NO_COLOR": "1"}
    env.pop("NETDOCTOR_FAKE_DELAY", None)
    child = Child([sys.executable, "-c", CONSOLE_SCRIPT, "check", "--no-probe", "--format", "json",
                   "--state", str(tmp_path / "state.json"), "--deadline", "60"], env=env)
    end = time.monotonic() + 30
    while not pids.exists() and time.monotonic() < end:
        time.sleep(0.02)
    assert pids.exists(), "".join(child.stderr)
    started = [int(pid) for pid in pids.read_text().split()]
    assert child.interrupt() == (3, "", INTERRUPTED)
    assert _wait_gone(started) == []


# -- fleet sweep: the parallel shell's children -------------------------------------------
FAKE_PDSH = """#!/bin/sh
# Like pdsh: one child per node; the first stays in pdsh's group, the others lead sessions
# of their own (pdsh's exec module calls setsid). Each says its pid once it is in place.
sh -c 'echo $$ >> "$PDSH_FAKE_PIDS"; exec sleep 30' &
for node in 2 3; do
    setsid sh -c 'echo $$ >> "$PDSH_FAKE_PIDS"; exec sleep 30' &
done
wait
"""


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _stat(pid: int) -> list[bytes]:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, ...; [] when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return []


def _groups_alive(groups: set[int]) -> list[int]:
    """Pids of running processes in `groups` (process group ids)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()
            and (fields := _stat(int(name))) and int(fields[2]) in groups and fields[0] != b"Z"]


@pytest.mark.skipif(shutil.which("setsid") is None, reason="setsid (util-linux) is not installed")
def test_ctrl_c_during_a_sweep_kills_every_child_of_the_parallel_shell(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pdsh").write_text(FAKE_PDSH)
    (bin_dir / "pdsh").chmod(0o755)
    pids = tmp_path / "pids"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PDSH_FAKE_PIDS": str(pids)}
    child = Child([sys.executable, "-c", CONSOLE_SCRIPT, "fleet", "sweep", "-w", "n[1-3]", "--rcmd", "exec",
                   "--timeout", "60"], env=env)
    end = time.monotonic() + 30
    while len(_lines(pids)) < 3 and time.monotonic() < end:
        time.sleep(0.02)
    groups = {int(_stat(int(pid))[2]) for pid in _lines(pids)}
    assert len(groups) == 3       # pdsh's own group and two sessions of their own
    assert child.interrupt() == (3, "", INTERRUPTED)
    deadline = time.monotonic() + 5
    while _groups_alive(groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _groups_alive(groups) == []


@pytest.mark.skipif(shutil.which("pdsh") is None, reason="pdsh is not installed")
@pytest.mark.parametrize("how", ["ctrl-c", "per-node timeout"])
def test_real_pdsh_leaves_nothing_running(tmp_path: Path, how: str) -> None:
    """pdsh's exec module starts each node's `sh` in a session of its own, and its own
    per-node timeout kills that `sh` only: both left `sleep`s behind before."""
    marker = f"{30 + os.getpid() % 1000 / 1000 + time.time() % 1 / 1000:.6f}"   # a sleep no other test runs
    remote = f"sh -c 'sleep {marker}'"
    timeout = "60" if how == "ctrl-c" else "1"
    child = Child([sys.executable, "-c", CONSOLE_SCRIPT, "fleet", "sweep", "-w", "n[1-2]", "--rcmd", "exec",
                   "--timeout", timeout, "--remote-command", remote, "--format", "json"])
    if how == "ctrl-c":
        end = time.monotonic() + 30
        while len(_sleeping(marker)) < 2 and time.monotonic() < end:
            time.sleep(0.05)
        assert len(_sleeping(marker)) == 2
        assert child.interrupt() == (3, "", INTERRUPTED)
    else:
        code, stdout, _ = child.finish()
        assert code == 2 and json.loads(stdout)["counts"]["unreachable"] == 2
    deadline = time.monotonic() + 5
    while _sleeping(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleeping(marker) == []


def _sleeping(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                    argv = cmdline.read().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", marker.encode()] and _alive(int(name)):
                found.append(int(name))
    return found


def test_an_interrupt_wrapped_by_an_import_is_still_the_interrupt() -> None:
    """Ctrl-C inside a class body surfaces as RuntimeError ("Error calling __set_name__"),
    its cause the KeyboardInterrupt: the user interrupted; it is not an internal error."""
    from netdoctor.cli import guarded_call

    def wrapped() -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'x' in 'Y'") from interrupt

    with pytest.raises(KeyboardInterrupt):
        guarded_call(wrapped)
    assert guarded_call(lambda: (_ for _ in ()).throw(RuntimeError("a real bug"))) == 3
