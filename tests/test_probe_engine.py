"""The probe engine: deadlines (a hung worker is killed, group and all), results, nccl-tests."""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from netdoctor.probe import engine, worker
from netdoctor.probe.engine import WorkerRun, assemble, run_probe, run_process, worker_environment
from tests.corpus_util import corpus_dir

DEVICE = Path(__file__).parent / "data" / "device" / "nvidia-h200-x2"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers signal 0; it holds no resources, but it must have been reaped
    # or re-parented: report it as gone only once /proc says so.
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def test_hung_worker_and_its_child_are_killed_at_the_deadline(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The fake worker forks a child (like NCCL's proxy threads or a helper would), then
    # both ignore SIGTERM and hang: only SIGKILL of the whole group ends them.
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = os.fork()
        if child == 0:
            time.sleep(600)
            os._exit(0)
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child}}")
        print("vm:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0", flush=True)
        time.sleep(600)
    """)
    started = time.monotonic()
    run = run_process([sys.executable, "-c", code], dict(os.environ), 1.0, tmp_path / "result.json")
    elapsed = time.monotonic() - started
    assert run.state == "timeout"
    assert 1.0 <= elapsed < 3.0
    assert "NCCL version 2.28.9" in run.log
    leader, child = (int(value) for value in pids.read_text().split())
    deadline = time.monotonic() + 2.0
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(leader)
    assert not alive(child)
    result = assemble(run, 1.0)
    assert result["status"] == "timeout"
    assert result["reason"] == "probe timed out: killed at the 1 s deadline (NCCL init had not completed)"
    assert result["nccl_version"] == "2.28.9"


def test_worker_that_exits_without_a_result_is_an_error(tmp_path: Path) -> None:
    run = run_process([sys.executable, "-c", "import sys; print('Segmentation fault'); sys.exit(139)"],
                      dict(os.environ), 10.0, tmp_path / "result.json")
    assert run.state == "crashed" and run.returncode == 139
    result = assemble(run, 10.0)
    assert result["status"] == "error"
    assert "status 139" in result["reason"] and "Segmentation fault" in result["reason"]


def test_missing_program(tmp_path: Path) -> None:
    run = run_process([str(tmp_path / "nope")], dict(os.environ), 1.0)
    assert run.state == "missing"
    assert assemble(run, 1.0)["status"] == "error"


def test_assemble_reads_transport_from_the_captured_log() -> None:
    log = (DEVICE / "nccl-info-allreduce-2gpu.log").read_text(encoding="utf-8")
    worker_result = json.loads((DEVICE / "worker-result.json").read_text(encoding="utf-8"))
    result = assemble(WorkerRun("ok", worker_result, log, 0, 2.9), 10.0)
    assert result["status"] == "ok"
    assert result["busbw_gbps"] == pytest.approx(332.135)
    assert result["transport"]["kind"] == "P2P/NVLink"
    assert result["transport"]["channels"] == 24
    assert result["transport"]["gdr"] is None
    assert "48 connection(s) via P2P/direct pointer" in result["transport"]["details"]
    assert all(row["verified"] for row in result["sizes"])
    json.dumps(result)


def test_assemble_p2p_disabled() -> None:
    log = (DEVICE / "nccl-info-allreduce-2gpu-p2p-disabled.log").read_text(encoding="utf-8")
    worker_result = json.loads((DEVICE / "worker-result-p2p-disabled.json").read_text(encoding="utf-8"))
    result = assemble(WorkerRun("ok", worker_result, log, 0, 2.9), 10.0)
    assert result["transport"]["kind"] == "SHM" and result["transport"]["channels"] == 4
    assert result["busbw_gbps"] == pytest.approx(27.646)


def test_worker_environment_keeps_user_nvls_choice() -> None:
    env = worker_environment({"PATH": "/bin", "NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/tmp/x"})
    assert env["NCCL_DEBUG"] == "INFO" and "NCCL_DEBUG_FILE" not in env
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert worker_environment({"NCCL_NVLS_ENABLE": "1"})["NCCL_NVLS_ENABLE"] == "1"


def _has_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_libcuda(), reason="this machine has an NVIDIA driver")
def test_real_worker_without_a_driver_skips_quickly() -> None:
    result = run_probe(gpus=None, budget_s=10.0)
    assert result["status"] == "skipped"
    assert result["reason_code"] == "no-driver"
    assert "libcuda.so.1" in result["reason"]
    assert result["engine"] == "nccl"
    assert result["duration_s"] < 5.0
    json.dumps(result)


def test_bad_arguments_are_errors_not_exceptions() -> None:
    assert run_probe(gpus=None, sizes=[6], budget_s=1.0)["status"] == "error"
    assert run_probe(gpus=None, engine="mpi", budget_s=1.0)["status"] == "error"


def test_wheel_nccl_comes_before_the_system_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    library = tmp_path / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert worker.find_nccl(None) == [str(library), "libnccl.so.2"]
    assert worker.find_nccl("/opt/nccl/libnccl.so.2") == ["/opt/nccl/libnccl.so.2"]


def test_nccl_tests_engine_parses_all_reduce_perf(tmp_path: Path) -> None:
    sample = corpus_dir("nccl-log") / "Timez-zx-nccl-tests__nccl.log.txt"
    binary = tmp_path / "all_reduce_perf"
    binary.write_text(f"#!/bin/sh\nexec cat {sample}\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    result = run_probe(gpus=[0, 1], engine="nccl-tests", budget_s=10.0,
                       env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert result["engine"] == "nccl-tests"
    assert result["status"] == "ok"
    assert result["busbw_gbps"] == pytest.approx(216.6)
    assert len(result["sizes"]) == 11
    assert result["transport"]["kind"] == "P2P/NVLink"
    assert result["nccl_version"] == "2.27.7"


def test_nccl_tests_engine_missing(tmp_path: Path) -> None:
    result = run_probe(gpus=[0, 1], engine="nccl-tests", budget_s=5.0, env={"PATH": str(tmp_path)})
    assert result["status"] == "skipped" and result["reason_code"] == "no-nccl-tests"


def test_default_sizes_are_small_to_large() -> None:
    assert engine.DEFAULT_SIZES == sorted(engine.DEFAULT_SIZES)
    assert engine.DEFAULT_SIZES[0] <= 8192 and engine.DEFAULT_SIZES[-1] == 1 << 30
