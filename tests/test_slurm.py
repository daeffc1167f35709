"""netdoctor's SLURM Prolog / HealthCheckProgram: the policy with a fake scontrol, then a real cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_cluster import SlurmCluster, missing_tools

REPO = Path(__file__).resolve().parent.parent
HOOKS = REPO / "packaging" / "slurm"
FIXTURES = REPO / "tests" / "fixtures" / "nodes"
HEALTHY = FIXTURES / "dgx-h100"
FAILING = FIXTURES / "dgx-h100-port-down"
NETDOCTOR = f"{sys.executable} -m netdoctor"

needs_fixtures = pytest.mark.skipif(not HEALTHY.is_dir() or not FAILING.is_dir(), reason="node fixtures not generated")


def write_config(path: Path, **settings: str) -> Path:
    path.write_text("# test policy\n" + "".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def fake_scontrol(directory: Path, show_node: str = "") -> Path:
    """Records each call; `show node` prints the given line."""
    script = directory / "scontrol"
    (directory / "show-node").write_text(show_node)
    script.write_text(
        "#!/bin/bash\n"
        f'echo "$*" >> {directory}/scontrol.calls\n'
        f'[ "$1" = show ] && cat {directory}/show-node\n'
        "exit 0\n"
    )
    script.chmod(0o755)
    return script


def run_hook(tmp_path: Path, mode: str, snapshot: Path | str, show_node: str = "", extra_env: dict[str, str] | None = None,
             **policy: str) -> tuple[int, list[str], str]:
    scontrol = fake_scontrol(tmp_path, show_node)
    config = write_config(
        tmp_path / "slurm-hook.conf",
        NETDOCTOR=policy.pop("NETDOCTOR", NETDOCTOR), PYTHON=sys.executable, SNAPSHOT=str(snapshot),
        REPORT_DIR=policy.pop("REPORT_DIR", str(tmp_path / "reports")), SCONTROL=str(scontrol), SYSLOG="no", **policy,
    )
    env = {**os.environ, "NETDOCTOR_SLURM_CONFIG": str(config), "SLURMD_NODENAME": "gpu07", "SLURM_JOB_ID": "42",
           "PYTHONPATH": str(REPO), **(extra_env or {})}
    done = subprocess.run([str(HOOKS / f"netdoctor-{mode}")], capture_output=True, text=True, env=env, timeout=120)
    calls_file = tmp_path / "scontrol.calls"
    calls = calls_file.read_text().splitlines() if calls_file.exists() else []
    return done.returncode, calls, done.stderr


def updates(calls: list[str]) -> list[str]:
    """The `scontrol update` calls (a drain first reads the node's state with `show node`)."""
    return [call for call in calls if call.startswith("update ")]


@needs_fixtures
def test_prolog_passes_a_healthy_node_and_logs(tmp_path: Path) -> None:
    code, calls, _ = run_hook(tmp_path, "prolog", HEALTHY)
    assert code == 0 and calls == []
    report = json.loads((tmp_path / "reports" / "prolog-gpu07.json").read_text())
    assert report["grade"] == "pass"
    assert "prolog node=gpu07 job=42 pass" in (tmp_path / "reports" / "slurm-hook.log").read_text()


@needs_fixtures
def test_prolog_drains_a_failing_node_with_a_short_reason(tmp_path: Path) -> None:
    code, calls, stderr = run_hook(tmp_path, "prolog", FAILING)
    assert code == 1, stderr
    assert calls[0] == "show node gpu07 -o" and len(updates(calls)) == 1
    assert updates(calls)[0].startswith("update nodename=gpu07 state=drain reason=netdoctor: port-state mlx5_")
    assert len(updates(calls)[0].split("reason=", 1)[1]) <= 160


@needs_fixtures
def test_unknown_drains_only_when_the_policy_says_so(tmp_path: Path) -> None:
    unknown_fixture = FIXTURES / "dgx-h100-no-ibstat"
    report = subprocess.run([sys.executable, "-m", "netdoctor", "check", "--no-probe", "--format", "json",
                             "--snapshot", str(unknown_fixture)], capture_output=True, text=True, timeout=120, cwd=REPO)
    grade = json.loads(report.stdout)["grade"]
    code, calls, _ = run_hook(tmp_path, "prolog", unknown_fixture, DRAIN_ON="fail")
    assert (code, calls) == ((1, calls) if grade == "fail" else (0, []))
    (tmp_path / "scontrol.calls").unlink(missing_ok=True)
    code, calls, _ = run_hook(tmp_path, "prolog", unknown_fixture, DRAIN_ON=f"fail,{grade}")
    assert code == 1 and updates(calls)[0].startswith("update nodename=gpu07 state=drain reason=netdoctor: ")


def test_internal_error_does_not_drain_unless_configured(tmp_path: Path) -> None:
    crash = tmp_path / "crashing-netdoctor"
    crash.write_text("#!/bin/bash\necho 'Traceback (most recent call last): boom' >&2\nexit 3\n")
    crash.chmod(0o755)
    code, calls, stderr = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(crash))
    assert (code, calls) == (0, [])
    assert "internal error: no netdoctor report on stdout (exit 3): Traceback" in stderr
    code, calls, _ = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(crash), DRAIN_ON_ERROR="yes")
    assert code == 1
    assert updates(calls) == ["update nodename=gpu07 state=drain reason=netdoctor: internal error: no netdoctor report on stdout (exit 3): "
                     "Traceback (most recent call last): boom"]
    (tmp_path / "scontrol.calls").unlink()
    code, calls, stderr = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(tmp_path / "not-installed"))
    assert (code, calls) == (0, [])
    assert "cannot run" in stderr


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_an_error_line_cut_inside_a_utf8_character_stays_valid_text(tmp_path: Path, offset: int) -> None:
    """The hook keeps 120 bytes of the last error line: a cut through coreutils' ‘quotes’ (or
    any multi-byte character) must not leave invalid UTF-8 in the log or the drain reason,
    wherever the path lengths put the cut."""
    crash = tmp_path / "crashing-netdoctor"
    line = "x" * (118 + offset) + "‘quoted’ and more"
    crash.write_text(f"#!/bin/bash\necho '{line}' >&2\nexit 3\n")
    crash.chmod(0o755)
    code, calls, stderr = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(crash), DRAIN_ON_ERROR="yes",
                                   REASON_MAX="400")
    assert code == 1 and "x" * 100 in stderr          # decoded as UTF-8 by run_hook: no stray byte
    assert len(updates(calls)) == 1 and updates(calls)[0].endswith(" " + "x" * (118 + offset))


def test_prolog_deadline_kills_a_hung_netdoctor(tmp_path: Path) -> None:
    hang = tmp_path / "hanging-netdoctor"
    hang.write_text("#!/bin/bash\nexec sleep 60\n")
    hang.chmod(0o755)
    started = time.monotonic()
    # DEADLINE=0 still allows the 10 s backstop; the hook must not wait for the full minute.
    code, calls, stderr = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(hang), DEADLINE="0")
    assert time.monotonic() - started < 20
    assert (code, calls) == (0, [])
    assert "timed out after 10 s" in stderr


@needs_fixtures
def test_healthcheck_resumes_only_its_own_drains(tmp_path: Path) -> None:
    ours = "NodeName=gpu07 State=IDLE+DRAIN Reason=netdoctor: port-state mlx5_2:1 - port is down [root@2026-11-21T23:00:00]"
    code, calls, _ = run_hook(tmp_path, "healthcheck", HEALTHY, show_node=ours, RESUME_AFTER="1")
    assert code == 0
    assert calls == ["show node gpu07 -o", "update nodename=gpu07 state=resume"]
    (tmp_path / "scontrol.calls").unlink()
    theirs = "NodeName=gpu07 State=IDLE+DRAIN Reason=bad DIMM [admin@2026-11-21T23:00:00]"
    for _ in range(3):      # however many passes in a row: a person's drain is theirs to undo
        code, calls, _ = run_hook(tmp_path, "healthcheck", HEALTHY, show_node=theirs)
        assert code == 0 and "update nodename=gpu07 state=resume" not in calls
    # A reason that merely mentions netdoctor is a person's too.
    mention = "NodeName=gpu07 State=IDLE+DRAIN Reason=RMA after netdoctor: port-state [admin@2026-11-21T23:00:00]"
    (tmp_path / "scontrol.calls").unlink()
    code, calls, _ = run_hook(tmp_path, "healthcheck", HEALTHY, show_node=mention, RESUME_AFTER="1")
    assert code == 0 and calls == ["show node gpu07 -o"]


def _clean_runs(tmp_path: Path) -> str:
    return (tmp_path / "reports" / "clean-runs-gpu07").read_text()


def test_a_drained_node_resumes_only_on_the_second_pass_in_a_row(tmp_path: Path) -> None:
    passing, failing = fake_netdoctor(tmp_path, "pass"), fake_netdoctor(tmp_path, "fail")
    resume = "update nodename=gpu07 state=resume"
    code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS, NETDOCTOR=str(failing))
    # Drained by netdoctor already: the reason is ours to update.
    assert code == 1 and updates(calls) == [f"update nodename=gpu07 state=drain reason={PORT_DOWN}"], stderr
    assert _clean_runs(tmp_path) == "0\n"
    (tmp_path / "scontrol.calls").unlink()
    code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS, NETDOCTOR=str(passing))
    assert code == 0 and resume not in calls, stderr                 # first pass: still drained
    assert "clean run 1 of 2 in a row (pass)" in stderr and _clean_runs(tmp_path) == "1\n"
    code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS, NETDOCTOR=str(passing))
    assert code == 0 and calls[-1] == resume, stderr                  # second pass in a row: resumed
    assert _clean_runs(tmp_path) == "2\n"


def crashing_netdoctor(directory: Path) -> Path:
    """Exits 3 with a traceback and no report: netdoctor's own failure."""
    script = directory / "crashing-netdoctor"
    script.write_text("#!/bin/bash\necho 'Traceback (most recent call last): boom' >&2\nexit 3\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("between", ["fail", "crash", "internal", "unknown", "warn-drained", "unknown-drained"])
def test_a_run_that_is_not_clean_starts_the_count_again(tmp_path: Path, between: str) -> None:
    """A fail, an unknown (nothing judged: the fault is not shown gone), netdoctor's own failure
    (exit 3, no report; an unknown only through crashed checks), or a grade DRAIN_ON drains on,
    between two passes: the count starts again."""
    passing = fake_netdoctor(tmp_path, "pass")
    policy = {"DRAIN_ON": "fail"}
    if between == "crash":
        other = crashing_netdoctor(tmp_path)
    elif between == "internal":
        other = report_netdoctor(tmp_path, "crashed", _unknown_report(CRASHED))
    elif between.endswith("-drained"):
        grade = between.split("-")[0]
        other, policy = fake_netdoctor(tmp_path, grade), {"DRAIN_ON": f"fail,{grade}"}
    else:
        other = fake_netdoctor(tmp_path, between)
    resume = "update nodename=gpu07 state=resume"
    for netdoctor in (passing, other, passing):
        code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS, NETDOCTOR=str(netdoctor),
                                       **policy)
        assert resume not in calls, (between, stderr)
    assert _clean_runs(tmp_path) == "1\n"
    code, calls, _ = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS, NETDOCTOR=str(passing), **policy)
    assert calls[-1] == resume


@pytest.mark.parametrize("grade", ["warn"])
def test_a_drained_node_resumes_after_two_runs_the_policy_does_not_drain(tmp_path: Path, grade: str) -> None:
    """Drained for a fault that was then fixed (an Xid cleared by a GPU reset) but left with a
    steady warning (a lifetime ECC count): with DRAIN_ON=fail that warning never drains, so two
    such runs in a row return the node. Under DRAIN_ON=fail,warn it never does."""
    tolerated = fake_netdoctor(tmp_path, grade)
    resume = "update nodename=gpu07 state=resume"
    code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS, NETDOCTOR=str(tolerated),
                                   DRAIN_ON="fail")
    assert (code, calls) == (0, ["show node gpu07 -o"]), stderr       # first clean run: still drained
    assert f"clean run 1 of 2 in a row ({grade})" in stderr
    (tmp_path / "scontrol.calls").unlink()
    code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS, NETDOCTOR=str(tolerated),
                                   DRAIN_ON="fail")
    assert (code, calls) == (0, ["show node gpu07 -o", resume]), stderr
    assert f"resumed: netdoctor's earlier drain no longer holds (2 clean runs in a row, last {grade})" in stderr
    assert _clean_runs(tmp_path) == "2\n"
    # The policy drains on this grade: the run drains (updating netdoctor's reason), never resumes.
    for _ in range(3):
        (tmp_path / "scontrol.calls").unlink()
        code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS,
                                       NETDOCTOR=str(tolerated), DRAIN_ON=f"fail,{grade}")
        assert code == 1 and resume not in calls, stderr
        assert updates(calls) == [f"update nodename=gpu07 state=drain reason={PORT_DOWN}"]
    assert _clean_runs(tmp_path) == "0\n"


THEIRS = "NodeName=gpu07 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Reason=bad DIMM [admin@2026-11-21T23:00:00]"
SLURMS = "NodeName=gpu07 State=DOWN+NOT_RESPONDING Reason=Not responding [slurm@2026-11-21T23:00:00]"


@pytest.mark.parametrize("mode", ["healthcheck", "prolog"])
@pytest.mark.parametrize("show_node", [THEIRS, SLURMS], ids=["person", "slurm"])
def test_a_drain_not_ours_keeps_its_reason_and_is_never_resumed(tmp_path: Path, mode: str, show_node: str) -> None:
    """A person drained the node (or SLURM downed it), then netdoctor finds a fault: the fault
    is logged, the reason stays (overwritten, the node would become netdoctor's to resume)."""
    failing = fake_netdoctor(tmp_path, "fail")
    code, calls, stderr = run_hook(tmp_path, mode, "/nonexistent", show_node=show_node, NETDOCTOR=str(failing))
    assert code == 1, stderr                                          # the job still must not run there
    assert calls == ["show node gpu07 -o"], stderr                    # no `scontrol update` at all
    state = show_node.split("State=", 1)[1].split()[0]
    reason = show_node.split("Reason=", 1)[1].split(" [", 1)[0]
    logged = f"{PORT_DOWN}; node already {state} (reason: {reason}), not ours: reason left alone"
    assert logged in (tmp_path / "reports" / "slurm-hook.log").read_text()
    passing = fake_netdoctor(tmp_path, "pass")
    for _ in range(3):
        (tmp_path / "scontrol.calls").unlink(missing_ok=True)
        code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=show_node,
                                       NETDOCTOR=str(passing), RESUME_AFTER="1")
        assert code == 0 and updates(calls) == [], stderr


def test_resume_on_pass_no_never_resumes_and_a_bad_count_file_is_not_trusted(tmp_path: Path) -> None:
    passing = fake_netdoctor(tmp_path, "pass")
    for _ in range(3):
        code, calls, _ = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS, NETDOCTOR=str(passing),
                                  RESUME_ON_PASS="no")
        assert code == 0 and calls == []
    assert _clean_runs(tmp_path) == "3\n"
    # A count file that is not a number counts as 0: one more pass is the first.
    (tmp_path / "reports" / "clean-runs-gpu07").write_text("99; rm -rf /\n")
    code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS, NETDOCTOR=str(passing))
    assert "update nodename=gpu07 state=resume" not in calls and _clean_runs(tmp_path) == "1\n", stderr
    # Nothing but the count and the reports is left in REPORT_DIR (no temporary files).
    assert sorted(path.name for path in (tmp_path / "reports").iterdir()) == [
        "clean-runs-gpu07", "healthcheck-gpu07.err", "healthcheck-gpu07.json", "slurm-hook.log"]


def test_the_drain_reason_names_the_first_failing_check_and_device(tmp_path: Path) -> None:
    findings = [{"check": "mtu", "subject": "ibp24s0", "status": "warn", "summary": "MTU 2044"},
                {"check": "link-speed", "subject": "mlx5_5:1", "status": "fail",
                 "summary": "port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR) " + "x" * 300},
                {"check": "pcie-link", "subject": "GPU2", "status": "fail", "summary": "Gen4 x8"}]
    report = report_netdoctor(tmp_path, "two-fails", {"schema": "netdoctor.report/1", "grade": "fail", "findings": findings})
    code, calls, stderr = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(report))
    assert code == 1, stderr
    reason = updates(calls)[0].split("reason=", 1)[1]
    assert reason.startswith("netdoctor: link-speed mlx5_5:1 - port runs at 200 Gb/s (4X HDR)")
    assert len(reason.encode()) <= 160


def fake_netdoctor(directory: Path, grade: str) -> Path:
    """Prints a minimal report of the given grade, like `netdoctor check --format json`."""
    finding = {"check": "port-state", "subject": "mlx5_2:1", "status": grade, "summary": "port is down"}
    report = {"schema": "netdoctor.report/1", "grade": grade, "findings": [] if grade == "pass" else [finding]}
    script = directory / f"netdoctor-{grade}"
    script.write_text(f"#!/bin/bash\ncat <<'EOF'\n{json.dumps(report)}\nEOF\nexit 0\n")
    script.chmod(0o755)
    return script


def report_netdoctor(directory: Path, name: str, report: dict) -> Path:
    """Prints the given report, like `netdoctor check --format json`, and exits with its grade's code."""
    script = directory / f"netdoctor-{name}"
    script.write_text(f"#!/bin/bash\ncat <<'EOF'\n{json.dumps(report)}\nEOF\nexit 3\n")
    script.chmod(0o755)
    return script


CRASHED = {"check": "port-state", "subject": "node", "status": "unknown", "internal": True,
           "summary": "check crashed: ZeroDivisionError: division by zero"}
TOOL_MISSING = {"check": "link-speed", "subject": "node", "status": "unknown", "summary": "ibstat is not installed"}
PLUGIN_BROKEN = {"check": "plugins", "subject": "/etc/netdoctor/plugins.d/x.py", "status": "unknown", "internal": True,
                 "summary": "plugin failed to load: ImportError: no module named foo"}


def _unknown_report(*findings: dict) -> dict:
    checks = [{"check": "port-state", "status": "unknown", "required": True},
              {"check": "link-speed", "status": "unknown", "required": True}]
    return {"schema": "netdoctor.report/1", "grade": "unknown", "findings": list(findings), "checks": checks}


def test_an_internal_error_is_no_verdict_on_the_node(tmp_path: Path) -> None:
    """DRAIN_ON=fail,unknown drains a node netdoctor could not judge, never one where netdoctor broke."""
    crashed = report_netdoctor(tmp_path, "crashed", _unknown_report(CRASHED, PLUGIN_BROKEN))
    code, calls, stderr = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(crashed), DRAIN_ON="fail,unknown")
    assert (code, calls) == (0, []), stderr
    assert "internal error: port-state node - check crashed: ZeroDivisionError" in stderr
    assert "node left in service (DRAIN_ON_INTERNAL=no)" in stderr
    assert "internal error" in (tmp_path / "reports" / "slurm-hook.log").read_text()
    code, calls, _ = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(crashed), DRAIN_ON="fail,unknown",
                              DRAIN_ON_INTERNAL="yes")
    assert code == 1
    assert updates(calls) == ["update nodename=gpu07 state=drain reason=netdoctor: internal error: port-state node - "
                     "check crashed: ZeroDivisionError: division by zero"]


def test_a_real_unknown_still_drains_beside_an_internal_one(tmp_path: Path) -> None:
    mixed = report_netdoctor(tmp_path, "mixed", _unknown_report(CRASHED, TOOL_MISSING))
    code, calls, stderr = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(mixed), DRAIN_ON="fail,unknown")
    assert code == 1, stderr
    drains = updates(calls)
    assert drains and drains[0].startswith("update nodename=gpu07 state=drain reason=netdoctor: ")
    assert "internal error" not in drains[0]


OURS = "NodeName=gpu07 State=IDLE+DRAIN Reason=netdoctor: port-state mlx5_2:1 - port is down [root@2026-11-21T23:00:00]"


PORT_DOWN = "netdoctor: port-state mlx5_2:1 - port is down"


@pytest.mark.parametrize("report_dir", ["uncreatable", "world-writable", "symlink"])
def test_hook_never_writes_predictable_shared_paths(tmp_path: Path, report_dir: str) -> None:
    """Without a usable REPORT_DIR the hook must not fall back to fixed names in /tmp (root, symlinks)."""
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir(mode=0o1777)
    shared_tmp.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for name in ("prolog-gpu07.json", "prolog-gpu07.err", "slurm-hook.log", "prolog-gpu07.json.1234"):
        (shared_tmp / name).symlink_to(victim)
    if report_dir == "uncreatable":
        (tmp_path / "a-file").write_text("")
        directory = tmp_path / "a-file" / "reports"           # mkdir -p fails, even as root
    elif report_dir == "world-writable":
        directory = shared_tmp
    else:                                                     # someone else's link: not ours to follow
        directory = shared_tmp / "reports"
        (tmp_path / "elsewhere").mkdir()
        directory.symlink_to(tmp_path / "elsewhere")
        if os.geteuid() == 0:
            os.lchown(directory, 65534, 65534)
        else:
            pytest.skip("a symlink owned by another user needs root")
    code, calls, stderr = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(fake_netdoctor(tmp_path, "fail")),
                                   REPORT_DIR=str(directory), extra_env={"TMPDIR": str(shared_tmp)})
    assert code == 1, stderr
    assert updates(calls)[0].startswith("update nodename=gpu07 state=drain reason=netdoctor: port-state mlx5_2:1")
    assert "report not kept" in stderr
    assert victim.read_text() == "precious\n"
    # Only the planted links (and the test's own directory) remain: the private directory is removed.
    left = sorted(path.name for path in shared_tmp.iterdir())
    assert left == sorted(["prolog-gpu07.json", "prolog-gpu07.err", "slurm-hook.log", "prolog-gpu07.json.1234"]
                          + (["reports"] if report_dir == "symlink" else []))
    if report_dir == "symlink":
        assert not list((tmp_path / "elsewhere").iterdir())


def test_hook_ignores_a_policy_others_can_write(tmp_path: Path) -> None:
    """The policy names commands root runs: a world-writable one is not obeyed."""
    marker = tmp_path / "ran-from-untrusted-policy"
    planted = tmp_path / "planted"
    planted.write_text(f"#!/bin/bash\ntouch {marker}\n")
    planted.chmod(0o755)
    # Defaults then apply: keep them off this machine (fake netdoctor/scontrol first on PATH,
    # and a mkdir that fails so /var/log/netdoctor is not created).
    bin_directory = tmp_path / "bin"
    bin_directory.mkdir()
    (bin_directory / "netdoctor").symlink_to(fake_netdoctor(tmp_path, "pass"))
    (bin_directory / "scontrol").symlink_to(fake_scontrol(tmp_path))
    (bin_directory / "mkdir").write_text("#!/bin/sh\nexit 1\n")
    (bin_directory / "mkdir").chmod(0o755)
    config = write_config(tmp_path / "policy.conf", NETDOCTOR=str(planted), SCONTROL=str(planted), SYSLOG="no")
    config.chmod(0o666)
    env = {**os.environ, "NETDOCTOR_SLURM_CONFIG": str(config), "SLURMD_NODENAME": "gpu07",
           "PATH": f"{bin_directory}:{os.environ['PATH']}", "TMPDIR": str(tmp_path)}
    done = subprocess.run([str(HOOKS / "netdoctor-healthcheck")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "writable by others" in done.stderr
    assert not marker.exists()
    config.chmod(0o644)
    done = subprocess.run([str(HOOKS / "netdoctor-healthcheck")], capture_output=True, text=True, env=env, timeout=60)
    assert marker.exists(), done.stderr


# ---- a real SLURM ---------------------------------------------------------------------

def _slurm_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the SLURM test runs slurmd/slurmctld as root"
    missing = missing_tools()
    if missing:
        return f"SLURM/munge not installed ({', '.join(missing)}): apt-get install slurmctld slurmd slurm-client munge"
    return None


slurm_only = pytest.mark.skipif(_slurm_skip_reason() is not None, reason=_slurm_skip_reason() or "")


def hook_wrapper(directory: Path, mode: str, config: Path) -> Path:
    """slurmd builds the Prolog's environment itself, so the config path is baked in here."""
    wrapper = directory / f"{mode}.sh"
    wrapper.write_text(f"#!/bin/bash\nexport NETDOCTOR_SLURM_CONFIG={config}\nexec {HOOKS / f'netdoctor-{mode}'}\n")
    wrapper.chmod(0o755)
    return wrapper


def cluster_policy(directory: Path, cluster_conf: Path) -> Path:
    snapshots = directory / "snapshots"
    snapshots.mkdir()
    (snapshots / "n1").symlink_to(HEALTHY)
    (snapshots / "n2").symlink_to(FAILING)
    return write_config(
        directory / "netdoctor-slurm.conf",
        NETDOCTOR=f"env PYTHONPATH={REPO} {NETDOCTOR}", PYTHON=sys.executable, SNAPSHOT=f"{snapshots}/%n",
        REPORT_DIR=str(directory / "netdoctor"), SYSLOG="no", DEADLINE="30", SLURM_CONF_PATH=str(cluster_conf),
    )


@pytest.fixture
def slurm_directory() -> Iterator[Path]:
    # Not tmp_path: munged refuses a socket directory under a group/world-writable parent chain
    # it cannot trust, and pytest's tmp dirs can be 0700-owned elsewhere. A fresh dir under /tmp.
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="netdoctor-slurm-"))
    directory.chmod(0o755)
    yield directory
    if not os.environ.get("NETDOCTOR_KEEP_SLURM_DIR"):
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slurm
@slurm_only
@needs_fixtures
def test_real_slurm_prolog_runs_jobs_on_healthy_nodes_and_drains_failing_ones(slurm_directory: Path) -> None:
    cluster = SlurmCluster(slurm_directory, nodes=2)
    config = cluster_policy(slurm_directory, cluster.conf)
    cluster.prolog = hook_wrapper(slurm_directory, "prolog", config)
    try:
        cluster.start()
        marker = slurm_directory / "ran"
        marker.mkdir(mode=0o777)
        healthy = cluster.run(["sbatch", "--wait", "-N1", "-w", "n1", "-o", "/dev/null",
                               "--wrap", f"touch {marker}/$SLURMD_NODENAME"], check=False, timeout=60)
        assert healthy.returncode == 0, healthy.stderr + cluster.log_tail()
        assert (marker / "n1").exists()
        assert cluster.node_state("n1") == ("IDLE", "")

        failing = cluster.run(["sbatch", "--wait", "--no-requeue", "-N1", "-w", "n2", "-o", "/dev/null",
                               "--wrap", f"touch {marker}/$SLURMD_NODENAME"], check=False, timeout=60)
        job_id = failing.stdout.split()[-1]
        job = cluster.run(["scontrol", "show", "job", job_id, "-o"]).stdout
        # sbatch --wait exits 0 for a job cancelled before it started; the job state tells.
        assert "JobState=CANCELLED" in job or "JobState=FAILED" in job, job
        assert not (marker / "n2").exists(), "the job must not run on a failing node"
        state, reason = cluster.node_state("n2")
        assert "DRAIN" in state
        assert reason.startswith("netdoctor: port-state mlx5_"), reason
        report = json.loads((slurm_directory / "netdoctor" / "prolog-n2.json").read_text())
        assert report["grade"] == "fail"
    finally:
        cluster.stop()
    assert cluster.pids == {}


@pytest.mark.slurm
@slurm_only
@needs_fixtures
def test_real_slurm_healthcheck_drains_and_resumes(slurm_directory: Path) -> None:
    cluster = SlurmCluster(slurm_directory, nodes=2, health_check_interval=2)
    config = cluster_policy(slurm_directory, cluster.conf)
    cluster.health_check = hook_wrapper(slurm_directory, "healthcheck", config)
    try:
        cluster.start()
        cluster.wait_for(lambda: "DRAIN" in cluster.node_state("n2")[0], 25, "n2 drained by the health check")
        assert cluster.node_state("n2")[1].startswith("netdoctor: port-state mlx5_")
        assert "DRAIN" not in cluster.node_state("n1")[0]
        # The cable is fixed: the second clean health check in a row (RESUME_AFTER=2) returns the node.
        (slurm_directory / "snapshots" / "n2").unlink()
        (slurm_directory / "snapshots" / "n2").symlink_to(HEALTHY)
        cluster.wait_for(lambda: "DRAIN" not in cluster.node_state("n2")[0], 40, "n2 resumed by the health check")
        log = (slurm_directory / "netdoctor" / "slurm-hook.log").read_text()
        assert log.index("node=n2 clean run 1 of 2 in a row (pass)") < log.index("node=n2 resumed")
        # A person's drain: a fault found there keeps the person's reason, and passes never undo it.
        cluster.run(["scontrol", "update", "nodename=n1", "state=drain", "reason=bad DIMM"])
        (slurm_directory / "snapshots" / "n1").unlink()
        (slurm_directory / "snapshots" / "n1").symlink_to(FAILING)
        hook_log = slurm_directory / "netdoctor" / "slurm-hook.log"
        cluster.wait_for(lambda: "(reason: bad DIMM), not ours: reason left alone" in hook_log.read_text(), 25,
                         "n1's fault logged beside the person's drain")
        assert cluster.node_state("n1")[1] == "bad DIMM"
        (slurm_directory / "snapshots" / "n1").unlink()
        (slurm_directory / "snapshots" / "n1").symlink_to(HEALTHY)
        time.sleep(8)                                         # several clean health checks
        state, reason = cluster.node_state("n1")
        assert "DRAIN" in state and reason == "bad DIMM", (state, reason)
    finally:
        cluster.stop()


@pytest.mark.slurm
@slurm_only
@needs_fixtures
def test_real_slurm_fleet_sweep_through_srun(slurm_directory: Path) -> None:
    cluster = SlurmCluster(slurm_directory, nodes=2)
    snapshots = slurm_directory / "snapshots"
    snapshots.mkdir()
    (snapshots / "n1").symlink_to(HEALTHY)
    (snapshots / "n2").symlink_to(FAILING)
    try:
        cluster.start()
        remote = f"env PYTHONPATH={REPO} {NETDOCTOR} check --format json --no-probe --snapshot {snapshots}/{{host}}"
        done = subprocess.run(
            [sys.executable, "-m", "netdoctor", "fleet", "sweep", "--via", "srun", "-w", "n[1-2]", "--timeout", "60",
             "--remote-command", remote, "--format", "json"],
            capture_output=True, text=True, timeout=120, env={**cluster.env, "PYTHONPATH": str(REPO)}, cwd=REPO,
        )
        fleet = json.loads(done.stdout or "{}")
        assert {node["host"]: node["grade"] for node in fleet.get("nodes", [])} == {"n1": "pass", "n2": "fail"}, (fleet, done.stderr)
        assert done.returncode == 2
    finally:
        cluster.stop()


@pytest.mark.slurm
@slurm_only
@needs_fixtures
def test_real_slurm_fleet_probe_through_srun_names_the_slow_node_and_rail(slurm_directory: Path) -> None:
    """8 SLURM nodes, `fleet probe --via srun`, the stand-in NCCL worker with n3 slow and n6's
    rail mlx5_4 at half speed: the suspects are exactly those; then n7 hangs: unreachable."""
    from test_fleet_probe import fleet_probe, lab

    cluster = SlurmCluster(slurm_directory, nodes=8)
    try:
        cluster.start()
        env = {**cluster.env, "PYTHONPATH": str(REPO)}
        commands = lab(slurm_directory, {"pair_busbw_gbps": 350.0, "nodes": {"n3": {"factor": 0.45}},
                                         "rails_factor": {"n6": {"mlx5_4": 0.5}}})
        fleet, code, stderr = fleet_probe(commands, "--round-timeout", "60", shell=("--via", "srun"), env=env)
        suspects = sorted((item["kind"], item["host"], item.get("subject")) for item in fleet.get("probe", {}).get("suspects", []))
        assert suspects == [("node", "n3", None), ("rail", "n6", "mlx5_4:1")], (fleet, stderr, cluster.log_tail())
        assert code == 2
        hanging = slurm_directory / "hang"
        hanging.mkdir()
        commands = lab(hanging, {"pair_busbw_gbps": 350.0}, hanging=("n7",))
        fleet, code, stderr = fleet_probe(commands, "--round-timeout", "8", shell=("--via", "srun"), env=env)
        grades = {node["host"]: node["grade"] for node in fleet.get("nodes", [])}
        assert grades == {**{f"n{index}": "pass" for index in range(1, 9)}, "n7": "unreachable"}, (fleet, stderr)
    finally:
        cluster.stop()
    assert cluster.pids == {}

