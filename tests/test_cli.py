"""The CLI: exit codes per grade (in-process and as a real subprocess), usage
errors exit 3 with one line, JSON stdout holds only the report, -o writes a file."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import netdoctor.run
from netdoctor import __version__
from netdoctor.cli import run_cli

REPO = Path(__file__).resolve().parents[1]

PLUGINS = """
from netdoctor.checks import check

@check("zz-pass", "always passes")
def always_pass(ctx):
    yield ctx.passed("node")

@check("zz-warn", "always warns")
def always_warn(ctx):
    yield ctx.warn("mlx5_0:1", "runs degraded", remedy="look at it")

@check("zz-fail", "always fails")
def always_fail(ctx):
    yield ctx.fail("mlx5_3:1", "port runs at 200 Gb/s, expected 400 Gb/s", evidence={"rate_gbps": 200})

@check("zz-unknown", "never knows")
def never_knows(ctx):
    yield ctx.unknown("node", "tool timed out")
"""

REQUIRED_PACK = """
[pack]
name = "test-required"
description = "default, with zz-unknown required"
extends = "default"
priority = 0

[grade]
required = ["zz-unknown"]
"""


@pytest.fixture()
def world(tmp_path: Path) -> dict[str, Path]:
    """A minimal snapshot (a node with nothing on it), a plugin directory and a rule pack."""
    snapshot = tmp_path / "snap"
    (snapshot / "sys").mkdir(parents=True)
    (snapshot / "snapshot.json").write_text(json.dumps({
        "format": "netdoctor.snapshot/1", "host": "snapnode", "captured_at": "2026-11-21T22:40:00Z",
        "netdoctor": __version__}))
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "grades.py").write_text(textwrap.dedent(PLUGINS))
    pack = tmp_path / "required.toml"
    pack.write_text(textwrap.dedent(REQUIRED_PACK))
    for path in (tmp_path, plugins):
        path.chmod(0o755)     # plugin dirs must be safe when the tests run as root
    return {"snapshot": snapshot, "plugins": plugins, "pack": pack, "state": tmp_path / "state.json"}


def invoke(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run the CLI in-process with stdout and stderr captured apart: (exit code, stdout, stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = run_cli(args)
    return code, stdout.getvalue(), stderr.getvalue()


def _check_args(world: dict[str, Path], only: str, *extra: str) -> list[str]:
    return ["check", "--snapshot", str(world["snapshot"]), "--plugin-dir", str(world["plugins"]),
            "--no-probe", "--only", only, "--rules", str(world["pack"]), *extra]


@pytest.mark.parametrize(("only", "code", "grade"), [
    ("zz-pass", 0, "pass"), ("zz-warn", 1, "warn"), ("zz-fail", 2, "fail"),
    ("zz-unknown", 3, "unknown"), ("zz-pass,zz-warn,zz-fail,zz-unknown", 2, "fail"),
])
def test_exit_code_is_the_grade(world: dict[str, Path], only: str, code: int, grade: str) -> None:
    exit_code, stdout, stderr = invoke(_check_args(world, only, "--format", "json"))
    assert exit_code == code, stderr
    report = json.loads(stdout)
    assert report["grade"] == grade
    assert report["host"] == "snapnode"
    assert report["rules"] == "test-required"
    assert sorted({finding["check"] for finding in report["findings"]}) == sorted(only.split(","))


def test_text_report_and_required_marker(world: dict[str, Path]) -> None:
    code, stdout, _ = invoke(_check_args(world, "zz-warn,zz-unknown"))
    assert code == 3
    lines = stdout.splitlines()
    assert lines[0].startswith("snapnode: UNKNOWN   rules test-required")
    assert any(line.split()[:3] == ["warn", "zz-warn", "mlx5_0:1"] for line in lines)
    assert any(line.split() == ["zz-unknown", "unknown", "1", "unknown", "(required)"] for line in lines)


def test_json_stdout_holds_only_the_object_even_with_logs(world: dict[str, Path]) -> None:
    code, stdout, stderr = invoke(["-vv", *_check_args(world, "zz-pass", "--format", "json")])
    assert code == 0
    assert json.loads(stdout)["schema"] == "netdoctor.report/1"
    assert stdout.lstrip().startswith("{") and stdout.rstrip().endswith("}")
    assert "debug" in stderr or "info" in stderr      # -vv logs went to stderr, not stdout


def test_log_json_lines_on_stderr(world: dict[str, Path]) -> None:
    (world["plugins"] / "broken.py").write_text("raise ImportError('needs a library we lack')\n")
    code, stdout, stderr = invoke(["--log-json", *_check_args(world, "zz-pass", "--format", "json")])
    assert code == 0
    events = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    skipped = [event for event in events if event["event"] == "plugin skipped"]
    assert skipped and skipped[0]["level"] == "warning"
    assert skipped[0]["plugin"].endswith("broken.py")
    report = json.loads(stdout)
    plugin_findings = [finding for finding in report["findings"] if finding["check"] == "plugins"]
    assert plugin_findings[0]["status"] == "unknown"
    assert plugin_findings[0]["summary"] == "plugin failed to load: ImportError: needs a library we lack"


def test_output_file_leaves_stdout_empty(world: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "out.prom"
    code, stdout, _ = invoke(_check_args(world, "zz-fail", "--format", "prometheus", "-o", str(target)))
    assert code == 2
    assert stdout == ""
    assert "netdoctor_grade 2" in target.read_text().splitlines()


@pytest.mark.parametrize(("args", "message"), [
    (["--bogus"], "No such option: --bogus"),
    (["check", "--format", "xml"], "'xml' is not one of"),
    (["check", "--frobnicate"], "No such option: --frobnicate"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
    (["check", "--deadline", "soon"], "Invalid value for '--deadline'"),
    (["fleet"], "Missing command"),
    (["check", "--deadline", "inf"], "more than 0 and at most 86400 seconds"),
    (["check", "--only", "mtu", "--skip", "mtu"], "leave no check to run"),
])
def test_usage_errors_exit_3_with_one_line(args: list[str], message: str) -> None:
    code, stdout, stderr = invoke(args)
    assert code == 3
    assert stdout == ""
    assert len(stderr.strip().splitlines()) == 1
    assert stderr.startswith("netdoctor: error: ")
    assert message in stderr


def test_unknown_check_id_exits_3_listing_valid_ids(world: dict[str, Path]) -> None:
    code, stdout, stderr = invoke(_check_args(world, "zz-pas"))
    assert code == 3 and stdout == ""
    assert stderr.startswith("netdoctor: error: --only: unknown check id zz-pas; valid ids: ")
    assert "zz-pass" in stderr


def test_negative_deadline_is_a_usage_error(world: dict[str, Path]) -> None:
    code, _, stderr = invoke(_check_args(world, "zz-pass", "--deadline", "-1"))
    assert code == 3
    assert stderr == "netdoctor: error: a time budget must be more than 0 and at most 86400 seconds, not -1\n"


def test_unreadable_snapshot_exits_3_without_traceback(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "snapshot.json").write_text("{not json")
    code, stdout, stderr = invoke(["check", "--snapshot", str(broken), "--no-probe"])
    assert code == 3 and stdout == ""
    assert stderr.startswith("netdoctor: error: ")
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_internal_error_exit_3_and_traceback_only_with_debug(world: dict[str, Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("division by zero in the runner")

    monkeypatch.setattr(netdoctor.run, "run_check", explode)
    code, _, stderr = invoke(_check_args(world, "zz-pass"))
    assert (code, stderr) == (3, "netdoctor: error: internal error: ZeroDivisionError: division by zero in the runner\n")
    code, _, stderr = invoke(_check_args(world, "zz-pass", "--debug"))
    assert code == 3
    assert "Traceback (most recent call last)" in stderr


def test_no_arguments_shows_help_and_exits_3() -> None:
    code, stdout, stderr = invoke([])
    assert code == 3
    assert "Usage" in stdout + stderr


def test_version() -> None:
    assert invoke(["--version"]) == (0, f"netdoctor {__version__}\n", "")


def test_checks_lists_builtin_and_plugin_checks(world: dict[str, Path]) -> None:
    code, stdout, _ = invoke(["checks", "--format", "json", "--plugin-dir", str(world["plugins"])])
    assert code == 0
    rows = {row["id"]: row for row in json.loads(stdout)["checks"]}
    assert rows["zz-fail"]["origin"] == f"file {world['plugins'] / 'grades.py'}"
    assert rows["zz-fail"]["third_party"] is True
    assert rows["zz-fail"]["description"] == "always fails"
    builtin = [row for row in rows.values() if not row["third_party"]]
    assert builtin and all(row["origin"].startswith("netdoctor_plugins.") for row in builtin)
    code, stdout, _ = invoke(["checks", "--plugin-dir", str(world["plugins"])])
    assert code == 0
    header, *lines = stdout.splitlines()
    assert header.split()[:4] == ["ID", "NEEDS", "ORIGIN", "DESCRIPTION"]
    assert any(line.split()[:2] == ["zz-pass", "-"] for line in lines)


def test_rules_shows_the_pack(world: dict[str, Path]) -> None:
    code, stdout, _ = invoke(["rules", "--rules", str(world["pack"])], env={"NETDOCTOR_RULES": ""})
    assert code == 0
    assert stdout.startswith("# rule pack: test-required\n")
    assert "zz-unknown" in stdout


# -- a real process ---------------------------------------------------------------------
def _process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netdoctor", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, check=False)


@pytest.mark.parametrize(("only", "code"), [("zz-pass", 0), ("zz-warn", 1), ("zz-fail", 2), ("zz-unknown", 3)])
def test_subprocess_exit_codes(world: dict[str, Path], only: str, code: int) -> None:
    result = _process(*_check_args(world, only, "--format", "json"))
    assert result.returncode == code, result.stderr
    assert json.loads(result.stdout)["grade"] == ["pass", "warn", "fail", "unknown"][code]


def test_subprocess_usage_error_is_3_not_2() -> None:
    result = _process("check", "--no-such-option")
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr.startswith("netdoctor: error: No such option: --no-such-option")


def test_subprocess_snapshot_check_starts_fast(world: dict[str, Path]) -> None:
    started = time.monotonic()
    result = _process(*_check_args(world, "zz-pass"))
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    # Generous bound for a loaded CI box; the target on an idle node is 0.35 s.
    assert elapsed < 3.0
