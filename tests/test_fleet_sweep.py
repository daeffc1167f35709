"""`netdoctor fleet sweep` through the real pdsh and clush (`-R exec`: no ssh needed)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netdoctor.errors import UsageError
from netdoctor.fleet.sweep import SweepOptions, build_sweep_command, run_sweep

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "nodes"

needs_pdsh = pytest.mark.skipif(shutil.which("pdsh") is None, reason="pdsh is not installed (apt-get install pdsh)")
needs_clush = pytest.mark.skipif(shutil.which("clush") is None, reason="clush is not installed (pip install ClusterShell)")

PASS_REPORT = {"schema": "netdoctor.report/1", "host": "n1", "grade": "pass", "findings": [
    {"check": "port-state", "status": "pass", "subject": "mlx5_0:1", "summary": "ACTIVE/LinkUp"}], "probe": {"busbw_gbps": 452.1}}
FAIL_REPORT = {"schema": "netdoctor.report/1", "host": "n2", "grade": "fail", "findings": [
    {"check": "link-speed", "status": "fail", "subject": "mlx5_3:1", "summary": "port runs at 200 Gb/s, expected 400 Gb/s"}]}


def test_pdsh_command_quotes_for_ssh_and_passes_argv_for_exec() -> None:
    # Each node runs its command under `sh` with a newline after its output (pdsh glues an
    # unterminated last line onto another node's line) and its exit status kept.
    options = SweepOptions(hosts="node[001-003,010]", fanout=32, timeout_s=90, no_probe=True, rules="/etc/x y.toml", deadline_s=60)
    assert build_sweep_command(options) == [
        "pdsh", "-R", "ssh", "-f", "32", "-t", "10", "-u", "90", "-w", "node[001-003,010]",
        shlex.join(["sh", "-c", "netdoctor check --format json --no-probe --rules '/etc/x y.toml' --deadline 60; rc=$?; echo; exit $rc"]),
    ]
    exec_options = SweepOptions(hosts="n[1-2]", rcmd="exec", timeout_s=5, remote_command="netdoctor check --snapshot /f/{host}")
    assert build_sweep_command(exec_options)[-3:] == ["sh", "-c", "netdoctor check --snapshot /f/%h; rc=$?; echo; exit $rc"]
    assert build_sweep_command(SweepOptions(hosts="n[1-2]", via="clush", rcmd="exec", timeout_s=5))[-1] == shlex.join(
        ["sh", "-c", "netdoctor check --format json; rc=$?; echo; exit $rc"])
    srun = build_sweep_command(SweepOptions(hosts="n[1-2]", via="srun", remote_command="nd --snapshot /f/{host}"))
    # The node's name comes from SLURM (task i of the label runs on the i-th node listed),
    # never from what the node prints.
    assert srun[:7] == ["srun", "--nodelist", "n1,n2", "--ntasks", "2", "--distribution=arbitrary", "--label"]
    assert "nd --snapshot '/f/'\"$SLURMD_NODENAME\"''" in srun[-1] and "sed" not in srun[-1]
    with pytest.raises(UsageError, match="bad host list"):
        build_sweep_command(SweepOptions(hosts="n[1-"))
    with pytest.raises(UsageError, match="--rcmd does not apply"):
        build_sweep_command(SweepOptions(hosts="n1", via="srun", rcmd="exec"))


def test_remote_command_refuses_the_options_it_would_drop() -> None:
    for extra in ({"rules": "dgx-h100"}, {"no_probe": True}, {"deadline_s": 30.0}):
        options = SweepOptions(hosts="n1", remote_command="my-check", **extra)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="cannot be passed to a --remote-command"):
            build_sweep_command(options)


def test_cli_remote_command_with_rules_is_a_usage_error() -> None:
    done = subprocess.run([sys.executable, "-m", "netdoctor", "fleet", "sweep", "-w", "n1", "--remote-command", "true",
                           "--rules", "dgx-h100", "--no-probe"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stderr.strip() == ("netdoctor: error: --no-probe, --rules cannot be passed to a --remote-command "
                                   "(it replaces `netdoctor check`): put them in the remote command")


def write_fake_nodes(directory: Path) -> Path:
    """A per-host fake `netdoctor` for pdsh's exec module: each node answers differently."""
    (directory / "n1.json").write_text(json.dumps(PASS_REPORT, indent=2))
    (directory / "n2.json").write_text(json.dumps(FAIL_REPORT))
    script = directory / "fake-node.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"D={directory}\n"
        'case "$1" in\n'
        '  n1) cat "$D/n1.json"; echo "log line on stderr" >&2; exit 0 ;;\n'
        '  n2) cat "$D/n2.json"; echo; exit 2 ;;\n'
        "  n3) sleep 30 ;;\n"
        "  n4) echo 'Traceback (most recent call last):'; echo '  oops'; exit 3 ;;\n"
        "  n5) exit 2 ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    return script


@needs_pdsh
def test_pdsh_sweep_keeps_every_node_hung_garbage_and_silent_ones(tmp_path: Path) -> None:
    script = write_fake_nodes(tmp_path)
    started = time.monotonic()
    result = run_sweep(SweepOptions(hosts="n[1-5]", rcmd="exec", timeout_s=2, remote_command=f"{script} {{host}}"))
    elapsed = time.monotonic() - started
    assert elapsed < 10, "the hung node must be cut at its per-node timeout"
    nodes = {node.host: node for node in result.nodes}
    assert {host: str(node.grade) for host, node in nodes.items()} == {
        "n1": "pass", "n2": "fail", "n3": "unreachable", "n4": "invalid", "n5": "unreachable",
    }
    assert nodes["n1"].metrics == {"nccl_busbw_gbps": 452.1}
    assert nodes["n2"].top.describe() == "link-speed mlx5_3:1: port runs at 200 Gb/s, expected 400 Gb/s"
    assert nodes["n3"].top.summary == "command timeout after 2 s"
    assert nodes["n4"].top.summary == "not a netdoctor report: 'Traceback (most recent call last):' (and 1 more line)"
    assert nodes["n5"].top.summary == "no output, exit code 2"
    assert not result.killed


@needs_clush
def test_clush_sweep_reassembles_reports(tmp_path: Path) -> None:
    script = write_fake_nodes(tmp_path)
    result = run_sweep(SweepOptions(hosts="n[1-4]", via="clush", rcmd="exec", timeout_s=2, remote_command=f"{script} {{host}}"))
    assert {node.host: str(node.grade) for node in result.nodes} == {
        "n1": "pass", "n2": "fail", "n3": "unreachable", "n4": "invalid",
    }


def test_missing_parallel_shell_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match="pdsh is not installed"):
        run_sweep(SweepOptions(hosts="n1", rcmd="exec"))


@needs_pdsh
@pytest.mark.skipif(not (FIXTURES / "dgx-h100").is_dir(), reason="node fixtures not generated")
def test_real_netdoctor_check_on_each_node_through_pdsh(tmp_path: Path) -> None:
    """`netdoctor fleet sweep` end to end: each pdsh "host" judges its own snapshot."""
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    (snapshots / "gpu01").symlink_to(FIXTURES / "dgx-h100")
    (snapshots / "gpu02").symlink_to(FIXTURES / "dgx-h100-port-down")
    (snapshots / "gpu03").symlink_to(FIXTURES / "dgx-h100")
    remote = f"{sys.executable} -m netdoctor check --format json --no-probe --snapshot {snapshots}/{{host}}"
    done = subprocess.run(
        [sys.executable, "-m", "netdoctor", "fleet", "sweep", "-w", "gpu[01-03],gpu99", "--rcmd", "exec",
         "--timeout", "60", "--remote-command", remote, "--format", "json"],
        capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 2, done.stderr
    fleet = json.loads(done.stdout)
    nodes = {node["host"]: node for node in fleet["nodes"]}
    assert fleet["counts"] == {"pass": 2, "warn": 0, "fail": 1, "unknown": 1, "unreachable": 0, "invalid": 0}
    assert nodes["gpu02"]["grade"] == "fail" and nodes["gpu02"]["top"]["check"] == "port-state"
    assert nodes["gpu01"]["grade"] == "pass" and nodes["gpu03"]["grade"] == "pass"
    # gpu99 has no snapshot: netdoctor still printed a report (grade unknown, with why),
    # so the node is not mistaken for an unreachable one.
    assert nodes["gpu99"]["grade"] == "unknown"
    assert "netdoctor could not judge this node: snapshot" in nodes["gpu99"]["top"]["summary"]
