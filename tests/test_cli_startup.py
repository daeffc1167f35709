"""Start-up and command-line polish: `--version` without the CLI framework, the imports of
`checks` and a snapshot `check`, global options after the command, "did you mean", and
the log lines netdoctor renders itself in structlog's layout (structlog is not imported)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from netdoctor import __version__
from netdoctor.cli import _Interrupts, run_cli

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "nodes" / "dgx-h100"
CONSOLE_SCRIPT = "import sys\nfrom netdoctor.cli import main\nsys.exit(main())\n"
# What a start must not load unless the command needs it.
HEAVY = {"typer", "click", "structlog", "asyncio", "rich", "pygments", "pynvml", "pyroute2", "ClusterShell", "psutil",
         "ctypes", "netdoctor.probe.engine", "netdoctor.fleet", "netdoctor.host.nvml", "netdoctor.host.live",
         "netdoctor.host.runner"}

LOGGING_PLUGIN = """
from netdoctor.checks import check
from netdoctor.logging import get_logger

log = get_logger("zz")


@check("zz-logs", "logs at every level")
def logs(ctx):
    log.debug("zz debug", n=1)
    log.info("zz info", n=2)
    log.warning("zz warning", path="/a b")
    log.error("zz error")
    yield ctx.passed("node")
"""


def _modules_after(args: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    program = CONSOLE_SCRIPT.replace("sys.exit(main())", textwrap.dedent("""
        import atexit
        atexit.register(lambda: sys.stderr.write("MODULES=" + ",".join(sorted(m for m in sys.modules if sys.modules[m])) + "\\n"))
        sys.exit(main())"""))
    done = subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=60, cwd=REPO)
    return done, set(done.stderr.rsplit("MODULES=", 1)[1].strip().split(","))


def _top(modules: set[str]) -> set[str]:
    return {name for name in HEAVY if any(module == name or module.startswith(name + ".") for module in modules)}


@pytest.mark.parametrize("args", [["--version"], ["-v", "--version"], ["--version", "-qq", "--log-json"]])
def test_version_answers_without_the_cli_framework(args: list[str]) -> None:
    done, modules = _modules_after(args)
    assert (done.returncode, done.stdout) == (0, f"netdoctor {__version__}\n")
    assert done.stderr.startswith("MODULES=")
    assert _top(modules) == set() and "netdoctor.commands" not in modules and "netdoctor.logging" not in modules


def test_version_through_typer_prints_the_same() -> None:
    # With a command after it, typer's eager --version answers: the same line.
    done = subprocess.run([sys.executable, "-m", "netdoctor", "--version", "checks"], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"netdoctor {__version__}\n", "")


@pytest.mark.parametrize("args", [["checks"], ["check", "--no-probe", "--snapshot", str(FIXTURE), "--format", "json"]])
def test_checks_and_a_snapshot_check_import_only_what_they_use(args: list[str]) -> None:
    done, modules = _modules_after(args)
    assert done.returncode == 0, done.stderr
    # A plain command line of these two is read without typer; structlog (asyncio), NVML,
    # netlink, the probe and fleet are not needed either.
    assert _top(modules) == set()


@pytest.fixture()
def logging_plugin(tmp_path: Path) -> Path:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "logs.py").write_text(LOGGING_PLUGIN)
    for path in (tmp_path, plugins):
        path.chmod(0o755)
    return plugins


def _run(args: list[str]) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = run_cli(args)
    return code, stdout.getvalue(), stderr.getvalue()


def _events(stderr: str) -> list[str]:
    """The zz plugin's log lines, without their time: `[level    ] event  key=value`."""
    return [line.split(" ", 1)[1] for line in stderr.splitlines() if " zz " in line]


@pytest.mark.parametrize(("before", "after", "levels"), [
    ([], [], ["warning", "error"]),
    (["-v"], [], ["info", "warning", "error"]),
    ([], ["-v"], ["info", "warning", "error"]),
    ([], ["--verbose", "-v"], ["debug", "info", "warning", "error"]),
    ([], ["-vv"], ["debug", "info", "warning", "error"]),
    (["-q"], [], ["error"]),
    ([], ["--quiet"], ["error"]),
    (["-v"], ["-v", "-q"], ["info", "warning", "error"]),      # counts add up, before and after
])
def test_global_options_after_the_command_mean_what_they_mean_before_it(
        logging_plugin: Path, before: list[str], after: list[str], levels: list[str]) -> None:
    check = ["check", "--no-probe", "--snapshot", str(FIXTURE), "--plugin-dir", str(logging_plugin), "--only", "zz-logs",
             "--format", "json"]
    code, stdout, stderr = _run([*before, *check, *after])
    assert code == 0 and json.loads(stdout)["grade"] == "pass"
    assert [event.split("]")[0].strip("[ ") for event in _events(stderr)] == levels
    if "warning" in levels:
        assert "[warning  ] zz warning                     path='/a b'" in _events(stderr)


def test_log_json_after_the_command(logging_plugin: Path) -> None:
    code, stdout, stderr = _run(["check", "--no-probe", "--snapshot", str(FIXTURE), "--plugin-dir", str(logging_plugin),
                                 "--only", "zz-logs", "--format", "json", "--log-json", "-v"])
    assert code == 0 and json.loads(stdout)["grade"] == "pass"
    events = [json.loads(line) for line in stderr.splitlines() if '"zz ' in line]
    assert [(event["event"], event["level"]) for event in events] == [
        ("zz info", "info"), ("zz warning", "warning"), ("zz error", "error")]
    assert events[0]["n"] == 2 and events[1]["path"] == "/a b" and events[0]["timestamp"].endswith("Z")


@pytest.mark.parametrize("args", [
    ["fleet", "report", "{reports}", "--format", "json", "-vv", "--log-json"],
    ["fleet", "-vv", "report", "{reports}", "--log-json"],
    ["checks", "-vv", "--log-json"],
    ["rules", "--rules", "default", "-vv", "--log-json"],
])
def test_every_subcommand_takes_the_global_options(tmp_path: Path, args: list[str]) -> None:
    from netdoctor import logging as netdoctor_logging

    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "n1.json").write_text(json.dumps({"schema": "netdoctor.report/1", "host": "n1", "grade": "pass",
                                                 "findings": []}))
    code, _, stderr = _run([arg.format(reports=reports) for arg in args])
    assert code == 0, stderr
    assert (netdoctor_logging._settings.level, netdoctor_logging._settings.json) == (netdoctor_logging.DEBUG, True)
    _run(["checks"])      # a new run starts again from the defaults
    assert (netdoctor_logging._settings.level, netdoctor_logging._settings.json) == (netdoctor_logging.WARNING, False)


@pytest.mark.parametrize(("args", "line"), [
    (["chek"], "netdoctor: error: no such command 'chek'; did you mean 'check'?\n"),
    (["discovr", "--format", "json"], "netdoctor: error: no such command 'discovr'; did you mean 'discover'?\n"),
    (["flet", "report"], "netdoctor: error: no such command 'flet'; did you mean 'fleet'?\n"),
    (["fleet", "sweeep", "-w", "n1"], "netdoctor: error: no such command 'sweeep'; did you mean 'sweep'?\n"),
    (["nosuchcommand"], "netdoctor: error: No such command 'nosuchcommand'.\n"),
])
def test_a_mistyped_command_names_the_nearest_one(args: list[str], line: str) -> None:
    assert _run(args) == (3, "", line)


def test_the_fleet_module_alone_says_did_you_mean_too() -> None:
    done = subprocess.run([sys.executable, "-m", "netdoctor.fleet", "reprot", "x"], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert (done.returncode, done.stdout, done.stderr) == (
        3, "", "netdoctor: error: no such command 'reprot'; did you mean 'report'?\n")


# -- log lines -----------------------------------------------------------------------------
def _structlog_line(json_lines: bool, colors: bool, event_dict: dict[str, Any], method: str) -> str:
    structlog = pytest.importorskip("structlog")
    processors: list[Any] = [structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True)]
    processors += ([structlog.processors.format_exc_info, structlog.processors.JSONRenderer()] if json_lines
                   else [structlog.dev.ConsoleRenderer(colors=colors, exception_formatter=structlog.dev.plain_traceback)])
    out: Any = dict(event_dict)
    for processor in processors:
        out = processor(None, method, out)
    return out


def _no_time(line: str) -> str:
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", "TIME", line)


@pytest.mark.parametrize("colors", [False, True])
@pytest.mark.parametrize("method", ["debug", "info", "warning", "error", "critical"])
def test_console_lines_have_structlog_consolerenderers_layout(method: str, colors: bool) -> None:
    from netdoctor.logging import render

    event = {"plugin": "/a b/c.py", "n": 3, "values": [1, "a"], "ratio": 1.5, "none": None, "plain": "x", "q": "it's",
             "event": "plugin skipped"}
    assert _no_time(render(method, event, json_lines=False, colors=colors)) == \
        _no_time(_structlog_line(False, colors, event, method))
    short = {"event": "an event longer than the thirty columns it is padded to", "z": 1}
    assert _no_time(render(method, short, json_lines=False, colors=colors)) == \
        _no_time(_structlog_line(False, colors, short, method))


def test_json_lines_and_tracebacks_as_structlog_renders_them() -> None:
    from netdoctor.logging import render

    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        for json_lines in (True, False):
            event = {"why": "x", "path": Path("/x"), "event": "boom", "exc_info": True}
            ours = render("exception", event, json_lines=json_lines)
            theirs = _structlog_line(json_lines, False, event, "exception")
            if json_lines:
                assert list(json.loads(ours)) == list(json.loads(theirs))      # key order too
                assert _no_time(ours) == _no_time(theirs)
            else:
                assert _no_time(ours) == _no_time(theirs) and "ZeroDivisionError" in ours


def test_structlog_imported_after_configuration_logs_to_stderr_in_netdoctors_format() -> None:
    """A third-party plugin that imports structlog itself: its default would print to stdout."""
    program = ("from netdoctor.logging import configure_logging\nconfigure_logging()\n"
               "import structlog\nstructlog.get_logger('plugin').warning('from a plugin', n=1)\n"
               "structlog.get_logger('plugin').info('not shown')\n"
               "from netdoctor.logging import get_logger\nget_logger('own').warning('through structlog now')\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0 and done.stdout == ""
    lines = [line.split(" ", 1)[1] for line in done.stderr.splitlines()]
    assert lines == ["[warning  ] from a plugin                  n=1", "[warning  ] through structlog now"]


# -- the interrupt guard's phases (the signals themselves: test_cli_interrupt.py) ----------
def test_ctrl_c_after_the_command_returned_still_makes_the_exit_3() -> None:
    program = ("import atexit, sys\nfrom netdoctor.cli import _Interrupts\n"
               "atexit.register(lambda: sys.stderr.write('exit handlers ran\\n'))\n"
               "guard = _Interrupts()\nguard.exiting = True\n"
               "guard.handle(2, None)\n"            # noted, not raised: the report is being flushed
               "sys.stdout.write('the report\\n')\nguard.finish(0)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert (done.returncode, done.stdout) == (3, "the report\n")
    assert done.stderr == "netdoctor: error: interrupted\nexit handlers ran\n"


def test_a_second_ctrl_c_waits_for_the_cleanup_only_so_long() -> None:
    guard = _Interrupts()
    with pytest.raises(KeyboardInterrupt):
        guard.handle(2, None)
    guard.handle(2, None)                       # within the grace: the cleanup goes on
    assert guard.first is not None
    guard.first -= 10                           # a cleanup (or a swallowed interrupt) long past: raise again
    with pytest.raises(KeyboardInterrupt):
        guard.handle(2, None)
