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
    assert len(calls) == 1
    assert calls[0].startswith("update nodename=gpu07 state=drain reason=netdoctor: port-state mlx5_")
    assert len(calls[0].split("reason=", 1)[1]) <= 160


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
    assert code == 1 and calls[0].startswith("update nodename=gpu07 state=drain reason=netdoctor: ")


def test_internal_error_does_not_drain_unless_configured(tmp_path: Path) -> None:
    crash = tmp_path / "crashing-netdoctor"
    crash.write_text("#!/bin/bash\necho 'Traceback (most recent call last): boom' >&2\nexit 3\n")
    crash.chmod(0o755)
    code, calls, stderr = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(crash))
    assert (code, calls) == (0, [])
    assert "internal error: no netdoctor report on stdout (exit 3): Traceback" in stderr
    code, calls, _ = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(crash), DRAIN_ON_ERROR="yes")
    assert code == 1
    assert calls == ["update nodename=gpu07 state=drain reason=netdoctor: internal error: no netdoctor report on stdout (exit 3): "
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
    assert len(calls) == 1 and calls[0].endswith(" " + "x" * (118 + offset))


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
    code, calls, _ = run_hook(tmp_path, "healthcheck", HEALTHY, show_node=ours)
    assert code == 0
    assert calls == ["show node gpu07 -o", "update nodename=gpu07 state=resume"]
    (tmp_path / "scontrol.calls").unlink()
    theirs = "NodeName=gpu07 State=IDLE+DRAIN Reason=bad DIMM [admin@2026-11-21T23:00:00]"
    code, calls, _ = run_hook(tmp_path, "healthcheck", HEALTHY, show_node=theirs)
    assert code == 0 and calls == ["show node gpu07 -o"]


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
    assert calls == ["update nodename=gpu07 state=drain reason=netdoctor: internal error: port-state node - "
                     "check crashed: ZeroDivisionError: division by zero"]


def test_a_real_unknown_still_drains_beside_an_internal_one(tmp_path: Path) -> None:
    mixed = report_netdoctor(tmp_path, "mixed", _unknown_report(CRASHED, TOOL_MISSING))
    code, calls, stderr = run_hook(tmp_path, "prolog", "/nonexistent", NETDOCTOR=str(mixed), DRAIN_ON="fail,unknown")
    assert code == 1, stderr
    assert calls and calls[0].startswith("update nodename=gpu07 state=drain reason=netdoctor: ")
    assert "internal error" not in calls[0]


OURS = "NodeName=gpu07 State=IDLE+DRAIN Reason=netdoctor: port-state mlx5_2:1 - port is down [root@2026-11-21T23:00:00]"


@pytest.mark.parametrize("grade", ["warn", "unknown"])
def test_healthcheck_resumes_only_on_pass(tmp_path: Path, grade: str) -> None:
    # Tolerated by the policy (not drained), but not healthy: the node stays drained.
    code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS,
                                   NETDOCTOR=str(fake_netdoctor(tmp_path, grade)), DRAIN_ON="fail")
    assert code == 0, stderr
    assert calls == []                                 # no resume, not even a look at the node
    code, calls, stderr = run_hook(tmp_path, "healthcheck", "/nonexistent", show_node=OURS,
                                   NETDOCTOR=str(fake_netdoctor(tmp_path, "pass")))
    assert code == 0, stderr
    assert calls == ["show node gpu07 -o", "update nodename=gpu07 state=resume"]


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
    assert calls[0].startswith("update nodename=gpu07 state=drain reason=netdoctor: port-state mlx5_2:1")
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
        # The cable is fixed: the next health check returns the node to service.
        (slurm_directory / "snapshots" / "n2").unlink()
        (slurm_directory / "snapshots" / "n2").symlink_to(HEALTHY)
        cluster.wait_for(lambda: "DRAIN" not in cluster.node_state("n2")[0], 25, "n2 resumed by the health check")
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

