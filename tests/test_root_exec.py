"""Root runs only root's code, and no child inherits the caller's loader or interpreter hooks.

Built as an attacker would: an unprivileged user (`nobody`) owns a directory on root's PATH,
a probe worker, a libnccl, a sysfs tree; root's environment carries LD_PRELOAD and
PYTHONPATH; NCCL_CONF_FILE names a root-only file with a secret in it. Each test asserts
what a correct tool does: the planted code never runs (its marker file is never written),
the secret never reaches a report or a snapshot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fake_tools import make_fake_tools
from netdoctor.host.nccl_env import collect_nccl_env, shareable
from netdoctor.host.runner import run_commands, run_merged
from netdoctor.host.trust import UntrustedProgram, child_environment, resolve_program, tool_search_path
from netdoctor.host.types import CommandSpec, CommandState
from netdoctor.probe import engine
from netdoctor.probe.nccl_tests import NcclTestsEngine
from netdoctor.probe.result import ProbeRequest
from netdoctor.host.trust import live_sys_root

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "nodes" / "dgx-h100"
CLI = [sys.executable, "-c", "import sys; from netdoctor.cli import main; main()"]
NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root's trust rules apply to root runs")

SECRET = "root:$6$Zq1.planted$hash"


def _planted(directory: Path, name: str, marker: Path) -> Path:
    """A program of `nobody` that, if root ever ran it, leaves `marker` with its uid."""
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / name
    tool.write_text(f"#!/bin/sh\nid -u > {marker}\necho planted\n")
    tool.chmod(0o755)
    os.chown(tool, NOBODY, NOBODY)
    os.chown(directory, NOBODY, NOBODY)
    return tool


@pytest.fixture(autouse=True)
def _fresh_search_path() -> None:
    tool_search_path.cache_clear()


def test_a_users_ibstat_first_on_roots_path_is_never_run(tmp_path: Path) -> None:
    """PATH=/home/user/bin:... netdoctor check as root: the user's ibstat is not started."""
    marker = tmp_path / "ran-as"
    user_bin = _planted(tmp_path / "home" / "user" / "bin", "ibstat", marker).parent
    fakes = make_fake_tools(FIXTURE, tmp_path / "fakes")
    (fakes / "ibstat").unlink()                 # only the planted ibstat answers to the name
    env = {**os.environ, "PATH": os.pathsep.join([str(user_bin), str(fakes), "/usr/bin", "/bin"]),
           "NETDOCTOR_SYSFS_ROOT": str(FIXTURE / "sys"), "NO_COLOR": "1"}
    done = subprocess.run([*CLI, "check", "--no-probe", "--format", "json", "--only", "port-state",
                           "--state", str(tmp_path / "state.json")], capture_output=True, text=True, env=env,
                          timeout=60)
    assert not marker.exists(), "root ran another user's ibstat"
    assert done.returncode in (0, 1, 2, 3) and "Traceback" not in done.stderr
    assert "not searched as root" in done.stderr


def test_a_named_program_is_run_only_when_root_alone_can_change_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran-as"
    tool = _planted(tmp_path / "user", "ibstat", marker)
    result = run_commands([CommandSpec("ibstat", (str(tool),), timeout_s=5.0)])["ibstat"]
    assert result.state is CommandState.ERROR and "not run as root" in result.stderr
    assert not marker.exists()
    with pytest.raises(UntrustedProgram):
        resolve_program(str(tool), "/usr/bin")
    with pytest.raises(UntrustedProgram):
        resolve_program("relative/ibstat", "/usr/bin")


def test_a_link_in_a_trusted_directory_to_a_users_program_is_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran-as"
    tool = _planted(tmp_path / "user", "ibstat", marker)
    trusted = tmp_path / "trusted"
    trusted.mkdir(mode=0o755)
    (trusted / "ibstat").symlink_to(tool)
    result = run_commands([CommandSpec("ibstat", ("ibstat",), timeout_s=5.0)], path=str(trusted))["ibstat"]
    assert result.state is CommandState.ERROR and not marker.exists()


def test_all_reduce_perf_is_looked_up_on_the_trusted_path_only(tmp_path: Path) -> None:
    marker = tmp_path / "ran-as"
    user_bin = _planted(tmp_path / "user", "all_reduce_perf", marker).parent
    request = ProbeRequest(budget_s=5.0, pass_fraction=0.8, env={"PATH": os.pathsep.join([str(user_bin), "/usr/bin", "/bin"])})
    result = NcclTestsEngine().run(request)
    assert result.reason_code == "no-nccl-tests" and not marker.exists()


def test_another_users_probe_worker_or_libnccl_is_not_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran-as"
    worker = _planted(tmp_path / "user", "worker.py", marker)
    monkeypatch.setenv("NETDOCTOR_PROBE_WORKER", str(worker))
    assert engine.worker_script() == Path(engine.__file__).with_name("worker.py")
    assert engine.nccl_library({"NETDOCTOR_NCCL_LIBRARY": str(worker)}) is None
    # Root's own stand-in (a lab's or a test's) is still honoured.
    own = tmp_path / "own-worker.py"
    own.write_text("")
    monkeypatch.setenv("NETDOCTOR_PROBE_WORKER", str(own))
    assert engine.worker_script() == own


def test_another_users_sysfs_tree_does_not_stand_in_for_sys(tmp_path: Path) -> None:
    tree = tmp_path / "sys"
    tree.mkdir()
    os.chown(tree, NOBODY, NOBODY)
    assert live_sys_root({"NETDOCTOR_SYSFS_ROOT": str(tree)}) == "/sys"
    assert live_sys_root({"NETDOCTOR_SYSFS_ROOT": str(FIXTURE / "sys")}) == str(FIXTURE / "sys")


def test_children_get_no_loader_or_interpreter_hooks_from_the_caller(tmp_path: Path) -> None:
    caller = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(tmp_path / "evil.so"), "PYTHONPATH": str(tmp_path),
              "LD_AUDIT": "x", "BASH_ENV": str(tmp_path / "rc"), "NCCL_IB_HCA": "=mlx5_0", "SECRET_TOKEN": "t0k",
              "LD_LIBRARY_PATH": os.pathsep.join([str(tmp_path / "user-libs"), "relative", "/usr/lib"])}
    (tmp_path / "user-libs").mkdir()
    os.chown(tmp_path / "user-libs", NOBODY, NOBODY)
    worker = engine.worker_environment(caller)
    for name in ("LD_PRELOAD", "PYTHONPATH", "LD_AUDIT", "BASH_ENV", "SECRET_TOKEN"):
        assert name not in worker
    assert worker["NCCL_IB_HCA"] == "=mlx5_0" and worker["LD_LIBRARY_PATH"] == "/usr/lib"
    # Whatever a caller hands spawn, the process itself never sees the hooks.
    spec = CommandSpec("env", ("env",), timeout_s=5.0)
    seen = run_merged(spec, env=caller).stdout
    assert "LD_PRELOAD" not in seen and "PYTHONPATH" not in seen and "BASH_ENV" not in seen
    tool = child_environment(caller)
    assert set(tool) == {"PATH", "LC_ALL", "LANG", "LD_LIBRARY_PATH"}


def test_a_relative_nccl_plugin_stays_but_another_users_plugin_path_is_dropped(tmp_path: Path) -> None:
    plugin = tmp_path / "libnccl-net.so"
    plugin.write_text("")
    os.chown(plugin, NOBODY, NOBODY)
    environment = engine.worker_environment({"NCCL_NET_PLUGIN": str(plugin), "NCCL_TUNER_PLUGIN": "libtuner.so"})
    assert "NCCL_NET_PLUGIN" not in environment and environment["NCCL_TUNER_PLUGIN"] == "libtuner.so"


def _root_only_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "root-only.conf"
    conf.write_text(f"{SECRET}\nPASSWORD=hunter2\nNCCL_IB_HCA=mlx5_0\nexport NCCL_DEBUG=WARN\n")
    conf.chmod(0o600)
    return conf


def test_a_root_only_nccl_conf_file_never_reaches_a_report_or_a_snapshot(tmp_path: Path) -> None:
    conf = _root_only_conf(tmp_path)
    fakes = make_fake_tools(FIXTURE, tmp_path / "fakes")
    env = {**os.environ, "PATH": os.pathsep.join([str(fakes), "/usr/bin", "/bin"]), "NCCL_CONF_FILE": str(conf),
           "NETDOCTOR_SYSFS_ROOT": str(FIXTURE / "sys"), "NO_COLOR": "1"}
    done = subprocess.run([*CLI, "check", "--no-probe", "--format", "json", "--only", "nccl-env",
                           "--state", str(tmp_path / "state.json")], capture_output=True, text=True, env=env,
                          timeout=60)
    assert "Traceback" not in done.stderr
    assert "hunter2" not in done.stdout and "$6$" not in done.stdout
    assert "export NCCL_DEBUG" in done.stdout         # the NCCL line that matters is still judged
    snapshot = tmp_path / "snap"
    captured = subprocess.run([*CLI, "capture", "-o", str(snapshot)], capture_output=True, text=True, env=env,
                              timeout=60)
    assert captured.returncode == 0, captured.stderr
    written = (snapshot / "nccl-env.json").read_text()
    assert "hunter2" not in written and "$6$" not in written and "NCCL_IB_HCA=mlx5_0" not in written
    assert str(conf) in json.loads(written)["withheld"]
    # The snapshot says which settings it could not carry instead of judging without them.
    replayed = subprocess.run([*CLI, "check", "--no-probe", "--format", "json", "--only", "nccl-env", "--snapshot",
                               str(snapshot)], capture_output=True, text=True, env=env, timeout=60)
    statuses = {finding["subject"]: finding["status"] for finding in json.loads(replayed.stdout)["findings"]}
    assert statuses[str(conf)] == "unknown"


def test_nccl_conf_files_as_root_only_roots(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.conf"
    foreign.write_text("NCCL_IB_HCA=mlx5_9\n")
    foreign.chmod(0o644)
    os.chown(foreign, NOBODY, NOBODY)
    report = collect_nccl_env({"NCCL_CONF_FILE": str(foreign)}, home=str(tmp_path))
    assert str(foreign) not in report["files"] and "uid 65534" in report["withheld"][str(foreign)]
    home = tmp_path / "home"
    home.mkdir()
    user_conf = home / ".nccl.conf"
    user_conf.write_text("# a comment\nNCCL_IB_HCA=mlx5_1\nnot for nccl\n")
    user_conf.chmod(0o644)
    report = collect_nccl_env({}, home=str(home))
    assert report["files"][str(user_conf)] == "\nNCCL_IB_HCA=mlx5_1\n\n"      # line numbers kept
    assert str(user_conf) in shareable(report)["files"]
