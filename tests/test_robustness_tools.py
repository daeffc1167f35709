"""Never hang, never crash, never lie: hostile node tools, end to end through the CLI.

Each test runs `netdoctor check` as a separate process on a *live* node made of a
fixture's sys/ tree ($NETDOCTOR_SYSFS_ROOT) and fake tools on PATH (tests/fake_tools.py),
then replaces some tools with hostile ones: tools that never return (and leave a
grandchild behind), answer after the deadline, flood their output, are not installed,
or are refused by the kernel (non-root perfquery).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fake_tools import make_fake_tools, path_with

FIXTURES = Path(__file__).parent / "fixtures" / "nodes"
CLI = [sys.executable, "-c", "import sys; from netdoctor.cli import main; main()"]
# Runs the CLI and reports the largest resident set of its process tree (KiB), so a
# flooding tool's output is seen to stay bounded in netdoctor's memory.
RSS_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "sys.stderr.write(f'MAXRSS_KIB={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n"
    "sys.exit(code)\n"
)

# Never returns; leaves a grandchild in its process group and records both pids, so the
# test can see that netdoctor killed the whole group, not just the tool.
HANG_TOOL = """#!/bin/sh
sleep 600 &
echo "$$ $!" >> {pids}
exec sleep 601
"""
# Answers correctly, but only after the run's deadline.
LATE_TOOL = """#!/bin/sh
echo "$$" >> {pids}
sleep {delay}
exec {real} "$@"
"""
# Endless output as fast as the pipe takes it.
FLOOD_TOOL = """#!/bin/sh
echo "$$" >> {pids}
exec yes 'CA: flood 0x0002c903000e0b72   1    1[  ] ==( 4X  53.125 Gbps Active/  LinkUp)==>  2 14[  ] "sw" ( )'
"""
# What perfquery prints when run by a user without access to /dev/infiniband/umad*.
NON_ROOT_PERFQUERY = """#!/bin/sh
echo "ibwarn: [4242] mad_rpc_open_port: can't open UMAD port ((null):0)" >&2
echo "perfquery: iberror: failed: Failed to open '(null)' port '0'" >&2
exit 255
"""


def _write_tool(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    if path.exists():
        path.unlink()
    path.write_text(script)
    path.chmod(0o755)


def _node(tmp_path: Path, fixture: str, hostile: dict[str, str], *, delay_s: float = 0.0) -> tuple[Path, Path, Path]:
    """(bin dir, sys root, pid file): the fixture's fake tools with `hostile` tools swapped in."""
    snapshot = FIXTURES / fixture
    bin_dir = make_fake_tools(snapshot, tmp_path / "bin", delay_s=delay_s)
    pids = tmp_path / "pids"
    real = tmp_path / "real"
    real.mkdir()
    for name, template in hostile.items():
        if (bin_dir / name).exists():
            shutil.copy2(bin_dir / name, real / name)
        _write_tool(bin_dir, name, template.format(pids=pids, real=real / name, delay=30))
    return bin_dir, snapshot / "sys", pids


def _run(args: list[str], bin_dir: Path, sys_root: Path, tmp_path: Path, *, wrapper: bool = False,
         timeout_s: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    env = dict(os.environ)
    env.update({"PATH": path_with(bin_dir), "NETDOCTOR_SYSFS_ROOT": str(sys_root), "NO_COLOR": "1"})
    env.pop("NETDOCTOR_FAKE_DELAY", None)
    command = [*CLI, *args, "--state", str(tmp_path / "state.json")]
    if wrapper:
        command = [sys.executable, "-c", RSS_WRAPPER, *command]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s)
    return done, time.monotonic() - started


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def _by_check(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for finding in report["findings"]:
        found.setdefault(finding["check"], []).append(finding)
    return found


def _alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (killed, waiting for init to reap it) is not alive."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] not in ("Z", "X")


def _recorded_pids(pids: Path) -> list[int]:
    return [int(word) for word in pids.read_text().split()] if pids.exists() else []


def _assert_no_orphans(pids: Path) -> None:
    recorded = _recorded_pids(pids)
    assert recorded, "the hostile tools never ran"
    # SIGKILL of a group is delivered at once, but give the kernel a moment to tear down.
    deadline = time.monotonic() + 2.0
    while any(_alive(pid) for pid in recorded) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [pid for pid in recorded if _alive(pid)]
    for pid in survivors:   # do not leak them into the rest of the suite
        os.kill(pid, signal.SIGKILL)
    assert survivors == []


def test_hung_tools_end_by_the_deadline_kill_their_groups_and_leave_other_checks_judged(tmp_path: Path) -> None:
    bin_dir, sys_root, pids = _node(tmp_path, "dgx-h100", {"nvidia-smi": HANG_TOOL, "ibstat": HANG_TOOL,
                                                             "perfquery": HANG_TOOL})
    done, elapsed = _run(["check", "--no-probe", "--format", "json", "--deadline", "2"], bin_dir, sys_root, tmp_path)
    assert elapsed < 2 + 1.0, f"took {elapsed:.2f} s for a 2 s deadline"
    report = _report(done)
    checks = _by_check(report)
    # There is no NVML library on the test machine and nvidia-smi hangs: the GPUs are
    # known only from the PCI bus. The GPU/NIC matrix cannot be judged and says why;
    # NVML cannot be asked although the fixture's nvidia module is loaded: unknown.
    affinity = [finding for finding in checks["gpu-nic-affinity"] if finding["status"] != "pass"]
    assert [finding["status"] for finding in affinity] == ["unknown"]
    assert "nvidia-smi-topo-m timed out" in affinity[0]["summary"]
    assert [finding["status"] for finding in checks["gpu-driver"]] == ["unknown"]
    # sysfs answered: the port checks are still judged, from it, on all 10 ports.
    assert {finding["status"] for finding in checks["port-state"]} == {"pass"}
    assert len(checks["port-state"]) >= 10
    assert {finding["status"] for finding in checks["error-counters"]} == {"pass"}
    # one ibstat + three nvidia-smi (topo -m, nvlink -s, -q) + one perfquery per IB port, each with its grandchild
    recorded = _recorded_pids(pids)
    assert len(recorded) == 2 * (1 + 3 + 8)
    _assert_no_orphans(pids)


def test_a_hung_nvidia_smi_is_said_even_where_the_pack_can_judge_without_it(tmp_path: Path) -> None:
    """The default pack places NICs by NUMA when there is no `nvidia-smi topo -m`, so no check
    becomes unknown; the report still names the hung tool (it used to say nothing)."""
    bin_dir, sys_root, pids = _node(tmp_path, "dgx-h100", {"nvidia-smi": HANG_TOOL})
    done, _ = _run(["check", "--no-probe", "--format", "json", "--rules", "default", "--deadline", "4"],
                   bin_dir, sys_root, tmp_path)
    report = _report(done)
    hung = [finding for finding in report["findings"] if finding["check"] == "discovery"]
    assert sorted((finding["status"], finding["subject"]) for finding in hung) == [
        ("unknown", "nvidia-smi-nvlink-s"), ("unknown", "nvidia-smi-q"), ("unknown", "nvidia-smi-topo-m")]
    assert all("timed out" in finding["summary"] and "Xid" in finding["remedy"] for finding in hung)
    assert {finding["status"] for finding in _by_check(report)["gpu-nic-affinity"]} == {"pass"}
    _assert_no_orphans(pids)


def test_tool_that_answers_after_the_deadline_is_reported_as_timed_out(tmp_path: Path) -> None:
    bin_dir, sys_root, pids = _node(tmp_path, "roce-h100", {"mlnx_qos": LATE_TOOL})
    done, elapsed = _run(["check", "--no-probe", "--format", "json", "--deadline", "1.5"], bin_dir, sys_root, tmp_path)
    assert elapsed < 1.5 + 1.0
    checks = _by_check(_report(done))
    pfc = checks["pfc-ecn"]
    assert sorted(finding["subject"] for finding in pfc) == [f"ens{index}np0" for index in range(1, 9)]
    for finding in pfc:
        assert finding["status"] == "unknown"
        assert f"mlnx_qos-{finding['subject']} timed out" in finding["summary"]
    assert {finding["status"] for finding in checks["mtu"]} == {"pass"}
    assert len(_recorded_pids(pids)) == 8
    _assert_no_orphans(pids)


def test_flooding_tool_keeps_memory_bounded_and_the_run_on_time(tmp_path: Path) -> None:
    bin_dir, sys_root, pids = _node(tmp_path, "dgx-h100", {"iblinkinfo": FLOOD_TOOL})
    done, elapsed = _run(["check", "--no-probe", "--fabric-scan", "--format", "json", "--deadline", "2"], bin_dir, sys_root, tmp_path,
                         wrapper=True)
    assert elapsed < 2 + 1.0
    report = _report(done)
    maxrss_kib = int(done.stderr.rsplit("MAXRSS_KIB=", 1)[1].split()[0])
    # The runner keeps at most its cap per stream (24 MiB for iblinkinfo's stdout), however
    # much the tool writes (GB here).
    assert maxrss_kib < 150 * 1024, f"peak RSS {maxrss_kib} KiB"
    assert {finding["status"] for finding in _by_check(report)["link-speed"]} == {"pass"}
    _assert_no_orphans(pids)


def test_no_tools_installed_gives_unknowns_with_reasons(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    sys_root = FIXTURES / "roce-h100" / "sys"
    done, elapsed = _run(["check", "--no-probe", "--format", "json"], empty, sys_root, tmp_path)
    checks = _by_check(_report(done))
    assert elapsed < 10
    assert {finding["status"] for finding in checks["port-state"]} == {"pass"}
    assert {finding["status"] for finding in checks["mtu"]} == {"pass"}
    pfc = checks["pfc-ecn"]
    assert len(pfc) == 8
    for finding in pfc:
        assert finding["status"] == "unknown"
        assert "mlnx_qos is not installed" in finding["summary"]
    # pfc-ecn is required on a RoCE node: not knowing it is not a pass. NVML cannot be
    # asked (no library on the test machine) while the nvidia module is loaded: unknown too.
    [driver] = checks["gpu-driver"]
    assert driver["status"] == "unknown" and "NVML cannot be asked" in driver["summary"]
    assert done.returncode == 3 and _report(done)["grade"] == "unknown"


def test_perfquery_denied_to_non_root_makes_counters_unknown_not_clean(tmp_path: Path) -> None:
    # A copy of the node without sysfs counters: perfquery is the only counter source.
    sys_root = tmp_path / "sys"
    shutil.copytree(FIXTURES / "dgx-h100" / "sys", sys_root, symlinks=True)
    removed = 0
    for counters in sys_root.glob("class/infiniband/*/ports/*/counters"):
        shutil.rmtree(counters.resolve())
        removed += 1
    assert removed >= 10
    bin_dir, _, _ = _node(tmp_path, "dgx-h100", {"perfquery": NON_ROOT_PERFQUERY})
    done, _ = _run(["check", "--no-probe", "--format", "json"], bin_dir, sys_root, tmp_path)
    checks = _by_check(_report(done))
    [counters] = checks["error-counters"]
    assert counters["status"] == "unknown"
    assert "perfquery" in counters["summary"] and "can't open UMAD port" in counters["summary"]
    assert {finding["status"] for finding in checks["link-speed"]} == {"pass"}


def test_missing_sysfs_file_is_unknown_for_that_port_only(tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    shutil.copytree(FIXTURES / "dgx-h100" / "sys", sys_root, symlinks=True)
    port = (sys_root / "class/infiniband/mlx5_0/ports/1").resolve()
    (port / "state").unlink()
    (port / "phys_state").unlink()
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    done, _ = _run(["check", "--no-probe", "--format", "json", "--only", "port-state"], empty, sys_root, tmp_path)
    findings = {finding["subject"]: finding for finding in _report(done)["findings"] if finding["check"] == "port-state"}
    assert findings["mlx5_0:1"]["status"] == "unknown"
    others = {subject: finding["status"] for subject, finding in findings.items() if subject != "mlx5_0:1"}
    assert len(others) >= 9 and set(others.values()) == {"pass"}


def test_interrupted_run_kills_its_tools(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) in the middle of discovery: exit 3, and no tool outlives netdoctor."""
    bin_dir, sys_root, pids = _node(tmp_path, "dgx-h100", {"ibstat": HANG_TOOL, "nvidia-smi": HANG_TOOL})
    env = dict(os.environ, PATH=path_with(bin_dir), NETDOCTOR_SYSFS_ROOT=str(sys_root))
    process = subprocess.Popen([*CLI, "check", "--no-probe", "--deadline", "20", "--state", str(tmp_path / "s.json")],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while len(_recorded_pids(pids)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 3
    assert "Traceback" not in stderr
    _assert_no_orphans(pids)
