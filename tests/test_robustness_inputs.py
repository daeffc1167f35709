"""Degraded inputs through the CLI: NVML failures, tools that failed, a start-up that stays lean.

Each case is a fixture snapshot with one source broken the way it breaks on real nodes;
the run must finish, say what it could not judge and why, and judge everything else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parent / "fixtures" / "nodes" / "dgx-h100"
CLI = [sys.executable, "-c", "import sys; from netdoctor.cli import main; main()"]


def _copy(tmp_path: Path) -> Path:
    snapshot = tmp_path / "snap"
    shutil.copytree(FIXTURE, snapshot, symlinks=True)
    return snapshot


def _check(snapshot: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([*CLI, "check", "--no-probe", "--format", "json", "--snapshot", str(snapshot), *extra],
                          capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def _not_passed(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(finding["check"], finding["subject"]): finding for finding in report["findings"]
            if finding["status"] not in ("pass",) and finding["check"] != "nccl-probe"}


def _edit_json(path: Path, **changes: Any) -> None:
    document = json.loads(path.read_text())
    document.update(changes)
    path.write_text(json.dumps(document))


def test_nvml_driver_library_mismatch_fails_the_node_and_keeps_judging_from_sysfs(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    (snapshot / "nvml.json").unlink()
    _edit_json(snapshot / "snapshot.json", nvml_status="NVML error: Driver/library version mismatch")
    code, report = _check(snapshot)
    problems = _not_passed(report)
    # The driver does not answer for the 8 GPUs on the PCI bus: the node cannot run GPU jobs.
    assert problems[("gpu-driver", "node")]["status"] == "fail"
    assert "Driver/library version mismatch" in problems[("gpu-driver", "node")]["summary"]
    # Links are judged from sysfs. The GPUs at Gen1 (GPU6, GPU7) have no evidence of load
    # without NVML's utilization: a lower speed with full width is power saving, said so.
    assert not [subject for check_id, subject in problems if check_id == "pcie-link"]
    idle = [finding for finding in report["findings"] if finding["check"] == "pcie-link"
            and finding["subject"] in ("GPU6", "GPU7")]
    assert [finding["status"] for finding in idle] == ["pass", "pass"]
    assert all("utilization unknown, so no evidence of load" in finding["summary"] for finding in idle)
    # The NICs' PCIe links, the ports and the affinity (from nvidia-smi topo) are still judged.
    statuses = {(finding["check"], finding["status"]) for finding in report["findings"]}
    assert {("port-state", "pass"), ("link-speed", "pass"), ("gpu-nic-affinity", "pass")} <= statuses
    assert code == 2 and report["grade"] == "fail"


def test_no_nvidia_driver_fails_gpu_driver_and_judges_the_fabric(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    (snapshot / "nvml.json").unlink()
    (snapshot / "commands" / "nvidia-smi-topo-m.status").write_text("missing\n")
    (snapshot / "commands" / "nvidia-smi-topo-m.out").write_text("")
    _, report = _check(snapshot)
    by_check: dict[str, set[str]] = {}
    for finding in report["findings"]:
        by_check.setdefault(finding["check"], set()).add(finding["status"])
    assert by_check["gpu-driver"] == {"fail"}
    assert by_check["port-state"] == {"pass"} and by_check["error-counters"] == {"pass"}


def test_lost_gpu_is_recorded_and_the_rest_still_judged(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    nvml = json.loads((snapshot / "nvml.json").read_text())
    lost = nvml["gpus"][3]
    lost.update({"name": None, "uuid": None, "performance_state": None, "dmabuf_supported": None,
                 "pcie": {"cur_gen": None, "max_gen": None, "cur_width": None, "max_width": None},
                 "nvlink": {"active": None, "total": None},
                 "errors": {"pcie": "GPU is lost", "nvlink": "GPU is lost", "name": "GPU is lost"}})
    (snapshot / "nvml.json").write_text(json.dumps(nvml))
    code, report = _check(snapshot)
    assert {finding["check"] for finding in report["findings"]} >= {"port-state", "pcie-link", "gpu-nic-affinity"}
    lost_findings = [f for f in report["findings"] if f["subject"] == "GPU3" and f["check"] == "pcie-link"]
    assert [f["status"] for f in lost_findings] == ["fail"] and "lost" in lost_findings[0]["summary"]
    assert code == 2 and report["grade"] == "fail"
    done = subprocess.run([*CLI, "discover", "--format", "json", "--snapshot", str(snapshot)],
                          capture_output=True, text=True, timeout=60)
    sources = json.loads(done.stdout)["sources"]
    assert "GPU3: " in sources["nvml"]["detail"] and "GPU is lost" in sources["nvml"]["detail"]


def test_failed_ibstat_with_partial_output_is_used_and_said(tmp_path: Path) -> None:
    """ibstat exits 255 after an `ibpanic:` line: its records are used, the failure is kept."""
    snapshot = _copy(tmp_path)
    out = snapshot / "commands" / "ibstat.out"
    out.write_text(out.read_text() + "ibpanic: [4011] main: stat of IB device 'mlx5_12' failed: No such file or directory\n")
    (snapshot / "commands" / "ibstat.status").write_text("255\n")
    code, report = _check(snapshot)
    assert code == 0 and report["grade"] == "pass"
    done = subprocess.run([*CLI, "discover", "--format", "json", "--snapshot", str(snapshot)],
                          capture_output=True, text=True, timeout=60)
    ibstat = json.loads(done.stdout)["sources"]["ibstat"]
    assert ibstat["state"] == "error" and "partial output used" in ibstat["detail"]


def test_check_snapshot_imports_only_what_it_needs() -> None:
    """The fast path (SLURM prologs) loads no NVML, netlink, ClusterShell, psutil, rich or probe engine."""
    program = (
        "import sys\n"
        "from netdoctor.cli import run_cli\n"
        f"code = run_cli(['check', '--no-probe', '--snapshot', {str(FIXTURE)!r}, '--format', 'json'])\n"
        "sys.stderr.write('MODULES=' + ','.join(sorted(sys.modules)) + '\\n')\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    modules = set(done.stderr.rsplit("MODULES=", 1)[1].strip().split(","))
    assert "netdoctor.run" in modules and "netdoctor_plugins.port_state" in modules   # it really ran
    heavy = {"pynvml", "pyroute2", "ClusterShell", "psutil", "rich", "pygments", "netdoctor.probe.engine",
             "netdoctor.parsers.nccl", "netdoctor.fleet", "netdoctor.host.nvml", "netdoctor.host.live"}
    assert sorted(heavy & {module.split(".")[0] if module.split(".")[0] in heavy else module for module in modules}) == []


def test_nvml_json_with_unplaceable_gpu_is_refused(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    nvml = json.loads((snapshot / "nvml.json").read_text())
    nvml["gpus"][0]["index"] = "zero"
    (snapshot / "nvml.json").write_text(json.dumps(nvml))
    done = subprocess.run([*CLI, "check", "--no-probe", "--snapshot", str(snapshot)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert "gpus[0]" in done.stderr and "Traceback" not in done.stderr


def test_unreadable_sysfs_values_are_unknown_not_dropped_or_fatal(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    port = snapshot / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters" / "symbol_error").write_text("-5\n")
    (port / "counters" / "link_downed").write_bytes(b"\xff\n")
    (port / "pkeys" / "0").write_text("zz\n")
    (snapshot / "commands" / "ibstat.out").write_text("CA 'mlx5_0'\n\tPort " + "9" * 5000 + ":\n")
    code, report = _check(snapshot)
    problems = _not_passed(report)
    assert problems[("error-counters", "mlx5_0:1")]["status"] == "unknown"
    assert "symbol_error" in problems[("error-counters", "mlx5_0:1")]["summary"]
    assert code == 3 and report["grade"] == "unknown"   # error-counters is required on dgx-h100


def test_an_undecodable_device_name_is_escaped_in_every_output(tmp_path: Path) -> None:
    """A hostile snapshot names an HCA with bytes that are not UTF-8 plus a terminal escape:
    no output crashes or carries the raw bytes, and a stale healthy `-o` file is replaced."""
    snapshot = tmp_path / "node"
    shutil.copytree(Path(__file__).parent / "fixtures" / "nodes" / "dgx-h100-port-down", snapshot, symlinks=True)
    devices = bytes(snapshot / "sys" / "class" / "infiniband")
    os.rename(os.path.join(devices, b"mlx5_9"), os.path.join(devices, b"mlx5_\xff\x1b]0;owned\x07"))
    stale = tmp_path / "node.prom"
    stale.write_text("netdoctor_grade 0\n")
    for output_format in ("text", "json", "prometheus", "junit"):
        done = subprocess.run([sys.executable, "-m", "netdoctor", "check", "--no-probe", "--snapshot", str(snapshot),
                               "--format", output_format, "-o", str(stale if output_format == "prometheus" else
                                                                    tmp_path / f"out.{output_format}")],
                              capture_output=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
        assert b"Traceback" not in done.stderr, done.stderr
        assert done.returncode == 2, (output_format, done.stderr)     # the port that is down still fails
        written = (stale if output_format == "prometheus" else tmp_path / f"out.{output_format}").read_bytes()
        assert b"\x1b" not in written and b"\x07" not in written and b"\xff" not in written
        written.decode("utf-8")
        if output_format == "json":
            assert any("mlx5_\\xff" in finding["subject"] for finding in json.loads(written)["findings"])
    assert b"netdoctor_grade 2" in stale.read_bytes()
