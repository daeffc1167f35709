"""The progress line of `fleet sweep` / `fleet probe` (issue 13): on a terminal only, on
stderr only, redrawn in place, throttled, erased at the end, never in the way of a log line.

The formatter, the tally and the throttle run on an injected clock; the end-to-end tests run
real sweeps through pdsh's exec module with stderr a pseudo-terminal, then a pipe.
"""

from __future__ import annotations

import io
import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from netdoctor.fleet import progress as progress_module
from netdoctor.fleet.progress import (
    ClearingStream,
    ProgressLine,
    Tally,
    clock_text,
    progress_line,
    progress_text,
    time_left,
    wanted,
)
from netdoctor.fleet.shell import host_done
from netdoctor.fleet.collect import FleetCollector

REPO = Path(__file__).resolve().parent.parent
needs_pdsh = pytest.mark.skipif(shutil.which("pdsh") is None, reason="pdsh is not installed (apt-get install pdsh)")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def screen(text: str) -> list[str]:
    """What a terminal shows after `text`: `\\r` returns to column 0, `\\n` starts a row."""
    rows: list[list[str]] = [[]]
    column = 0
    for char in text:
        if char == "\r":
            column = 0
        elif char == "\n":
            rows.append([])
            column = 0
        else:
            row = rows[-1]
            row.extend(" " * (column + 1 - len(row)))
            row[column] = char
            column += 1
    return ["".join(row).rstrip() for row in rows if "".join(row).strip()]


def make_line(hosts: int = 1000, bound_s: float = 1950.0, columns: int = 200) -> tuple[ProgressLine, FakeClock, io.StringIO]:
    clock, stream = FakeClock(), io.StringIO()
    line = ProgressLine("round 2", [f"n{index}" for index in range(hosts)], bound_s, stream, clock=clock,
                        columns=lambda: columns)
    return line, clock, stream


# ---- formatter -----------------------------------------------------------------------------


def test_the_line_says_answered_of_asked_failures_and_time_left() -> None:
    # Before the first answer only the sweep's bound (timeout x waves + margin) says anything.
    assert progress_text("sweep", 0, 1000, 0, 0.0, 1950.0) == "sweep: 0/1000 answered, 0 failed, at most 32:30 left"
    # Then the rate so far: 412 in 30 s, 588 to go at that rate.
    assert progress_text("round 2", 412, 1000, 3, 30.0, 1950.0) == "round 2: 412/1000 answered, 3 failed, about 0:43 left"
    # A rate that promises more than the bound leaves: the bound.
    assert time_left(1, 1000, 5.0, 50.0) == "at most 0:45 left"
    assert time_left(1000, 1000, 12.0, 50.0) == "about 0:00 left"
    assert time_left(0, 10, 80.0, 50.0) == "at most 0:00 left"
    assert [clock_text(seconds) for seconds in (0, 0.2, 59.5, 61, 3600, 3725)] == [
        "0:00", "0:01", "1:00", "1:01", "1:00:00", "1:02:05"]


def test_a_report_outranks_what_the_shell_said() -> None:
    tally = Tally(["n1", "n2", "n3", "n4"])
    tally.shell("n1", True)            # `exited with exit code 2` read before its report
    assert (tally.answered, tally.failures) == (1, 1)
    tally.report("n1", False)          # ... whose grade says otherwise
    tally.shell("n1", True)            # and nothing the shell says later changes it
    assert (tally.answered, tally.failures) == (1, 0)
    tally.report("n2", False)
    tally.report("n2", True)           # a second report made it `invalid`
    tally.shell("n3", True)
    tally.report("intruder", True)     # not asked: not counted
    assert (tally.answered, tally.total, tally.failures) == (3, 4, 2)


def test_what_the_shell_says_of_a_host() -> None:
    assert host_done("pdsh@vm: n3: sh exited with exit code 2\n") == ("n3", True)
    assert host_done("pdsh@vm: n3: sh exited with exit code 137") == ("n3", True)
    assert host_done("pdsh@vm: n4: sh exited with exit code 1") == ("n4", False)     # warn: its report grades it
    assert host_done("pdsh@vm: n3: command timeout") == ("n3", True)
    assert host_done("pdsh@vm: n3: sh killed by signal 9") == ("n3", True)
    assert host_done("clush: n2: exited with exit code 3") == ("n2", False)
    assert host_done("clush: n2: command timeout") == ("n2", True)
    assert host_done("srun: error: n2: task 1: Exited with exit code 2") == ("n2", True)
    assert host_done("n2: command timeout") == ("n2", True)                           # srun's `timeout`
    assert host_done("netdoctor-sweep: n2: sweep killed after 40 s (command timeout)") == ("n2", True)
    for other in ("n2: bash: netdoctor: command not found", "sending signal 15 to n3 [sh] pid 4130",
                  'pdsh@vm: Cannot specify -t with "-R exec"', "n1: {", ""):
        assert host_done(other) is None


# ---- throttle, erase, logs -----------------------------------------------------------------


def test_ten_thousand_answers_in_one_instant_draw_once() -> None:
    line, clock, stream = make_line(hosts=10_000)
    line.tick()
    for index in range(10_000):
        line.report(f"n{index}", index % 100 == 0)
    assert line.redraws == 1 and "0/10000 answered" in stream.getvalue()
    clock.now += 0.0625
    line.tick()
    assert line.redraws == 1                       # not due yet
    clock.now += 0.0625
    line.tick()
    assert line.redraws == 2
    assert screen(stream.getvalue()) == ["round 2: 10000/10000 answered, 100 failed, about 0:00 left"]


def test_at_most_ten_redraws_a_second() -> None:
    line, clock, _ = make_line(hosts=10_000, bound_s=1e6)
    for index in range(10_000):                    # 10,000 answers over 10 s
        clock.now += 0.001
        line.report(f"n{index}", False)
    assert 90 <= line.redraws <= 101


def test_redrawn_in_place_and_cut_to_the_terminal_width() -> None:
    line, clock, stream = make_line(hosts=1000, columns=30)
    line.tick()
    clock.now += 1
    line.report("n1", True)
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") == 2
    assert screen(text) == ["round 2: 1/1000 answered, 1 f"]      # 29 columns: no wrap


def test_a_log_line_erases_the_line_which_comes_back_after_it() -> None:
    line, clock, stream = make_line(hosts=10)
    terminal = ClearingStream(stream, line)       # what sys.stderr is while the line shows
    line.tick()
    terminal.write("2026-11-25T12:00:00Z [warning  ] something happened\n")
    assert screen(stream.getvalue()) == ["2026-11-25T12:00:00Z [warning  ] something happened"]
    clock.now += 1
    terminal.write("half a line")                 # print() writes its text, then "\n"
    line.report("n1", False)
    assert screen(stream.getvalue())[-1] == "half a line"          # not drawn into it
    terminal.write("\n")
    line.tick()
    assert screen(stream.getvalue()) == ["2026-11-25T12:00:00Z [warning  ] something happened", "half a line",
                                         "round 2: 1/10 answered, 0 failed, about 0:09 left"]
    line.close()
    line.report("n2", False)
    clock.now += 1
    line.tick()
    assert screen(stream.getvalue()) == ["2026-11-25T12:00:00Z [warning  ] something happened", "half a line"]
    assert stream.getvalue().endswith("\r" + " " * len("round 2: 1/10 answered, 0 failed, about 0:09 left") + "\r")


def test_only_on_a_terminal_and_when_nobody_said_no() -> None:
    assert wanted(FakeTerminal(), {"TERM": "xterm"})
    assert not wanted(io.StringIO(), {"TERM": "xterm"})
    assert not wanted(FakeTerminal(), {"TERM": "dumb"})
    assert not wanted(FakeTerminal(), {"TERM": "xterm", "NETDOCTOR_NO_PROGRESS": "1"})
    closed = open(os.devnull, "w")
    closed.close()
    assert not wanted(closed, {})
    assert not wanted(object(), {})


def test_stderr_is_a_stand_in_while_the_line_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(progress_module, "wanted", lambda stream: stream is terminal)
    with progress_line("check", ["n1", "n2"], 150.0) as line:
        assert line is not None and isinstance(sys.stderr, ClearingStream)
        assert sys.stderr.isatty()
        line.report("n1", True)
        print("a log line", file=sys.stderr)
    assert sys.stderr is terminal
    assert screen(terminal.getvalue()) == ["a log line"]
    assert "check: 0/2 answered, 0 failed, at most 2:30 left" in terminal.getvalue()


def test_nothing_on_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    with progress_line("sweep", ["n1"], 10.0) as line:
        assert line is None and sys.stderr is pipe
    assert pipe.getvalue() == ""


def test_the_sweep_counts_hosts_as_their_output_is_attributed() -> None:
    line, _, _ = make_line()
    collector = FleetCollector(command_timeout_s=2, hosts=[f"n{index}" for index in range(1, 8)], observer=line)
    report = {"schema": "netdoctor.report/1", "grade": "pass", "findings": []}
    fail = {**report, "grade": "fail", "findings": [{"check": "mtu", "status": "fail", "summary": "mtu 1500"}]}
    collector.feed_lines([f"n1: {json.dumps(report)}\n", "n2: {\n", 'n2:  "schema": "netdoctor.report/1",\n',
                          'n2:  "grade": "warn", "findings": []\n'])
    assert (line.tally.answered, line.tally.failures) == (1, 0)    # n2's report is not complete yet
    collector.feed_stderr_line("pdsh@vm: n2: sh exited with exit code 1\n")
    collector.feed_stderr_line("pdsh@vm: n3: sh exited with exit code 2\n")
    assert (line.tally.answered, line.tally.failures) == (3, 1)
    collector.feed_lines(["n2: }\n", f"n3: {json.dumps(fail)}\n", "n4: Traceback (most recent call last):\n",
                          f"n5: {json.dumps(report)}\n", f"n5: {json.dumps(report)}\n"])
    collector.feed_stderr_line("pdsh@vm: n6: command timeout\n")
    collector.feed_stderr_line("n7: some log line of the node\n")
    # n1 pass, n2 warn, n3 fail, n5 invalid (two reports), n6 timed out; n4 and n7 not done yet.
    assert (line.tally.answered, line.tally.failures) == (5, 3)
    grades = {node.host: str(node.grade) for node in collector.finish(expected_hosts=[])}
    assert grades["n5"] == "invalid" and grades["n3"] == "fail" and grades["n2"] == "warn"


# ---- end to end ----------------------------------------------------------------------------


def sweep_on(stderr_kind: str, tmp_path: Path, *args: str, extra_env: dict[str, str] | None = None) -> tuple[str, str, int]:
    """`netdoctor -v fleet ...` with stderr a pseudo-terminal or a pipe: (stdout, stderr, exit code)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm", "NO_COLOR": "1", **(extra_env or {})}
    if not extra_env or "NETDOCTOR_NO_PROGRESS" not in extra_env:
        env.pop("NETDOCTOR_NO_PROGRESS", None)
    command = [sys.executable, "-m", "netdoctor", "-v", "fleet", *args]
    stdout_path = tmp_path / f"stdout-{stderr_kind}"
    with open(stdout_path, "wb") as stdout:
        if stderr_kind == "pipe":
            done = subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, cwd=REPO, env=env, timeout=300)
            return stdout_path.read_text(), done.stderr.decode(), done.returncode
        controller, terminal = pty.openpty()
        process = subprocess.Popen(command, stdout=stdout, stderr=terminal, stdin=subprocess.DEVNULL, cwd=REPO, env=env)
        os.close(terminal)
        seen = bytearray()
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:                # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            seen += chunk
        os.close(controller)
        code = process.wait(timeout=300)
    return stdout_path.read_text(), seen.decode(errors="replace"), code


def without_time(fleet_json: str) -> dict:
    fleet = json.loads(fleet_json)
    fleet.pop("generated_at")
    return fleet


@needs_pdsh
def test_a_sweep_shows_progress_on_a_terminal_and_nothing_on_a_pipe(tmp_path: Path) -> None:
    from test_fleet_sweep import write_fake_nodes   # n1 pass, n2 fail, n3 hangs, n4 garbage, n5 silent

    script = write_fake_nodes(tmp_path)
    args = ("sweep", "-w", "n[1-5]", "--rcmd", "exec", "--timeout", "2", "--remote-command", f"{script} {{host}}",
            "--format", "json")
    stdout, terminal, code = sweep_on("pty", tmp_path, *args)
    assert "sweep: 0/5 answered, 0 failed, at most 0:32 left" in terminal, terminal
    shown = screen(terminal)
    # Erased at the end, redrawn in place (a newline between two draws would leave one):
    # what stays is the logs, each on its own line.
    assert not any("answered" in row for row in shown), shown
    assert any(" fleet sweep " in row and row.startswith("20") for row in shown), shown
    assert any(" fleet sweep done " in row and row.startswith("20") for row in shown), shown
    assert code == 2

    piped_stdout, piped_stderr, piped_code = sweep_on("pipe", tmp_path, *args)
    assert "answered" not in piped_stderr and "\r" not in piped_stderr
    assert " fleet sweep done " in piped_stderr and piped_code == 2
    # stdout is the same report either way.
    assert without_time(stdout) == without_time(piped_stdout)
    assert {node["host"]: node["grade"] for node in json.loads(stdout)["nodes"]} == {
        "n1": "pass", "n2": "fail", "n3": "unreachable", "n4": "invalid", "n5": "unreachable"}


@needs_pdsh
@pytest.mark.parametrize("environment", [{"NETDOCTOR_NO_PROGRESS": "1"}, {"TERM": "dumb"}])
def test_no_progress_on_a_terminal_when_told_not_to(tmp_path: Path, environment: dict[str, str]) -> None:
    report = json.dumps({"schema": "netdoctor.report/1", "host": "x", "grade": "pass", "findings": []})
    (tmp_path / "report.json").write_text(report)
    _, terminal, code = sweep_on("pty", tmp_path, "sweep", "-w", "n[1-3]", "--rcmd", "exec", "--remote-command",
                                 f"cat {tmp_path / 'report.json'}", "--format", "json", extra_env=environment)
    assert " fleet sweep done " in terminal and "answered" not in terminal and code == 0


@needs_pdsh
@pytest.mark.skipif(not (REPO / "tests" / "fixtures" / "nodes" / "dgx-h100").is_dir(), reason="node fixtures not generated")
def test_fleet_probe_shows_the_check_sweep_and_each_round(tmp_path: Path) -> None:
    from test_fleet_probe import lab

    commands = lab(tmp_path, {"pair_busbw_gbps": 350.0, "nodes": {"n3": {"factor": 0.45}}})
    stdout, terminal, code = sweep_on(
        "pty", tmp_path, "probe", "-w", "n[1-8]", "--rcmd", "exec", "--check-command", commands["check"],
        "--node-command", commands["node"], "--budget", "4", "--round-timeout", "60", "--format", "json")
    for label in ("check: 0/8 answered", "round 1: 0/8 answered", "round 2: 0/8 answered", "round 3: 0/2 answered"):
        assert label in terminal, terminal
    assert not any("answered" in row for row in screen(terminal))
    fleet = json.loads(stdout)
    assert [item["host"] for item in fleet["probe"]["suspects"]] == ["n3"] and code == 2
