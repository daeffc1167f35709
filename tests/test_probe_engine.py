"""The probe engine: deadlines (a hung worker is killed, group and all), results, nccl-tests."""

from __future__ import annotations

import ctypes
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import pytest

from netdoctor.host import runner
from netdoctor.probe import engine, nccl_worker, worker
from netdoctor.probe.dispatch import ENGINES, run_probe as dispatch_probe
from netdoctor.host.nvml import collect_nvml
from netdoctor.inventory.model import Gpu, PcieLink
from netdoctor.probe.engine import WorkerRun, assemble, gpu_links_of, run_worker, worker_environment
from netdoctor.probe.expectation import GpuLinks, expected_busbw
from netdoctor.probe.result import ProbeRequest, ProbeResult
from tests.corpus_util import corpus_dir
from tests.process_util import gone
from tests.test_host_nvml import FakeGpu, FakeNvml

DEVICE = Path(__file__).parent / "data" / "device" / "nvidia-h200-x2"


def run_probe(*, gpus: list[int] | None, budget_s: float, engine: str = "auto", sizes: list[int] | None = None,
              env: dict[str, str] | None = None, localise_below_fraction: float = 0.8,
              node_gpus: tuple[int, ...] | None = None, gpu_links: tuple[GpuLinks, ...] = ()) -> ProbeResult:
    """One probe run as the pipeline asks for it (the pack's pass_fraction is 0.8 by default)."""
    request = ProbeRequest(budget_s=budget_s, pass_fraction=localise_below_fraction, gpus=None if gpus is None else tuple(gpus),
                           engine=engine, sizes=tuple(sizes or ()), env=env, gpu_links=gpu_links)
    return dispatch_probe(request, node_gpus=node_gpus)


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
    run = run_worker([sys.executable, "-c", code], dict(os.environ), 1.0, tmp_path / "result.json")
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
    assert result.status == "timeout"
    # Killed before the worker said NCCL init was done: not evidence of a hang.
    assert result.reason_code == "init-timeout" and result.timeout_phase == "nccl-init"
    assert result.reason.startswith("timeout during NCCL init: killed at the 1 s deadline")
    assert result.nccl_version == "2.28.9"


def test_worker_that_exits_without_a_result_is_an_error(tmp_path: Path) -> None:
    run = run_worker([sys.executable, "-c", "import sys; print('Segmentation fault'); sys.exit(139)"],
                      dict(os.environ), 10.0, tmp_path / "result.json")
    assert run.state == "crashed" and run.returncode == 139
    result = assemble(run, 10.0)
    assert result.status == "error"
    assert "status 139" in result.reason and "Segmentation fault" in result.reason


def test_missing_program(tmp_path: Path) -> None:
    run = run_worker([str(tmp_path / "nope")], dict(os.environ), 1.0)
    assert run.state == "missing"
    assert assemble(run, 1.0).status == "error"


def test_assemble_reads_transport_from_the_captured_log() -> None:
    log = (DEVICE / "nccl-info-allreduce-2gpu.log").read_text(encoding="utf-8")
    worker_result = json.loads((DEVICE / "worker-result.json").read_text(encoding="utf-8"))
    result = assemble(WorkerRun("ok", worker_result, log, 0, 2.9), 10.0)
    assert result.status == "ok"
    assert result.busbw_gbps == pytest.approx(332.135)
    assert result.transport.kind == "P2P/NVLink"
    assert result.transport.channels == 24
    assert result.transport.gdr is None
    assert "48 connection(s) via P2P/direct pointer" in result.transport.details
    assert all(row.verified for row in result.sizes)
    json.dumps(result.to_json())


def test_assemble_p2p_disabled() -> None:
    log = (DEVICE / "nccl-info-allreduce-2gpu-p2p-disabled.log").read_text(encoding="utf-8")
    worker_result = json.loads((DEVICE / "worker-result-p2p-disabled.json").read_text(encoding="utf-8"))
    result = assemble(WorkerRun("ok", worker_result, log, 0, 2.9), 10.0)
    assert result.transport.kind == "SHM" and result.transport.channels == 4
    assert result.busbw_gbps == pytest.approx(27.646)


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
    assert result.status == "skipped"
    assert result.reason_code == "no-driver"
    assert "libcuda.so.1" in result.reason
    assert result.engine == "nccl"
    assert result.duration_s < 5.0
    json.dumps(result.to_json())


def test_bad_arguments_are_errors_not_exceptions() -> None:
    assert run_probe(gpus=None, sizes=[6], budget_s=1.0).status == "error"
    assert run_probe(gpus=None, engine="mpi", budget_s=1.0).status == "error"


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
    assert result.engine == "nccl-tests"
    assert result.status == "ok"
    assert result.busbw_gbps == pytest.approx(216.6)
    assert len(result.sizes) == 11
    assert result.transport.kind == "P2P/NVLink"
    assert result.nccl_version == "2.27.7"


def test_nccl_tests_engine_missing(tmp_path: Path) -> None:
    result = run_probe(gpus=[0, 1], engine="nccl-tests", budget_s=5.0, env={"PATH": str(tmp_path)})
    assert result.status == "skipped" and result.reason_code == "no-nccl-tests"


def test_default_sizes_are_small_to_large() -> None:
    assert engine.DEFAULT_SIZES == sorted(engine.DEFAULT_SIZES)
    assert engine.DEFAULT_SIZES[0] <= 8192 and engine.DEFAULT_SIZES[-1] == 1 << 30


# -- the GPUs' link facts: discovery's, mapped into GpuLinks ------------------------------

def _fake_nvml(gpus: list[FakeGpu], *, max_links: int = 18, version: int = 6,
               gaps: bool = False) -> types.ModuleType:
    module = FakeNvml(gpus).module()
    module.NVML_NVLINK_MAX_LINKS = max_links
    module.nvmlDeviceGetNvLinkVersion = lambda handle, link: version
    if gaps:
        # B200: 18 links spread over 36 indices; the others answer NOT_SUPPORTED. Index 0
        # is a gap, so a count that stops at the first failing index finds no link at all.
        def state(handle: Any, link: int) -> int:
            if link % 2 == 0:
                raise module.NVMLError(3)
            return 1
        module.nvmlDeviceGetNvLinkState = state
    return module


def test_discovery_counts_every_link_of_a_b200_with_index_gaps() -> None:
    module = _fake_nvml([FakeGpu("NVIDIA B200", f"GPU-{index}", f"00000000:1{index}:00.0", 0) for index in range(2)],
                        max_links=36, version=7, gaps=True)
    report, _ = collect_nvml(module)
    assert report is not None
    assert [(gpu["nvlink"]["active"], gpu["nvlink"]["total"], gpu["nvlink"]["version"]) for gpu in report["gpus"]] == [
        (18, 18, 7), (18, 18, 7)]


def _gpu(index: int, name: str | None = "NVIDIA B200", active: int | None = 18, version: int | None = 7,
         lost: bool = False) -> Gpu:
    return Gpu(index=index, name=name, nvlink_active=active, nvlink_total=18, nvlink_version=version,
               pcie=PcieLink(f"0000:1{index}:00.0", current_gen=1, max_gen=5, current_width=16, max_width=16),
               nvml_errors={"name": "GPU is lost"} if lost else {})


def test_gpu_links_come_from_the_inventory_with_the_links_maximum() -> None:
    links = gpu_links_of([_gpu(1), _gpu(0)])
    assert [(link.index, link.nvlink_active, link.nvlink_total, link.nvlink_version) for link in links] == [
        (0, 18, 18, "5.0"), (1, 18, 18, "5.0")]
    assert (links[0].pcie_gen, links[0].pcie_width) == (5, 16)       # the link's maximum, not the idle Gen1
    # 18 x 50 GB/s of NVLink 5.0, not the PCIe fallback a zero link count would give.
    assert expected_busbw(list(links), 1 << 30).interconnect == "NVLink"
    assert expected_busbw(list(links), 1 << 30).nominal_gbps == 900


def test_selected_links_follow_the_requested_indices_and_lost_gpus_tell_nothing() -> None:
    every = gpu_links_of([_gpu(0, "NVIDIA H200", 17, 6), _gpu(1, "NVIDIA H200", lost=True), _gpu(2, "NVIDIA H200", 18, 6)])
    request = ProbeRequest(budget_s=10.0, pass_fraction=0.8, gpus=(2, 0, 7), gpu_links=every)
    links = engine.selected_links(request)
    assert [(link.index, link.nvlink_active, link.nvlink_total) for link in links] == [(2, 18, 18), (0, 17, 18)]
    assert links[0].nvlink_version == "4.0" and links[0].name == "NVIDIA H200"
    lost = every[1]
    # NVML lists it but tells nothing: no expectation is made up for it.
    assert (lost.name, lost.nvlink_active, lost.pcie_gen) == (None, None, None)


# -- the worker's process group: registered, and killed even when the caller gives up ------



def _stubborn_worker(path: Path, pids: Path) -> Path:
    """A fake worker that forks a child, ignores SIGTERM and sleeps, as a hung NCCL does."""
    path.write_text(textwrap.dedent(f"""
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = os.fork()
        if child == 0:
            time.sleep(600)
            os._exit(0)
        with open({str(pids)!r} + ".tmp", "w") as handle:
            handle.write(f"{{os.getpid()}} {{child}}")
        os.replace({str(pids)!r} + ".tmp", {str(pids)!r})
        time.sleep(600)
    """))
    return path


def test_worker_group_dies_with_netdoctor_when_the_caller_gave_up(tmp_path: Path) -> None:
    """NVML hangs in the parent while the worker runs: netdoctor.run stops waiting for the
    probe and netdoctor exits; the worker and its child must not outlive it."""
    pids = tmp_path / "pids"
    worker_script = _stubborn_worker(tmp_path / "worker.py", pids)
    parent = textwrap.dedent(f"""
        import sys, time, types
        from pathlib import Path
        fake = types.ModuleType("pynvml")               # NVML wedged in the driver
        fake.NVMLError = type("NVMLError", (Exception,), {{}})
        fake.nvmlInit = lambda: time.sleep(600)
        sys.modules["pynvml"] = fake
        from netdoctor import util
        from netdoctor.probe import dispatch, nccl_worker
        from netdoctor.probe.result import ProbeRequest
        nccl_worker.WORKER = Path({str(worker_script)!r})
        try:
            util.call_with_deadline("nccl-probe", lambda: dispatch.run_probe(ProbeRequest(60.0, 0.8, gpus=(0, 1))),
                                    time.monotonic() + 2.0)
        except util.DeadlineExceeded:
            print("gave up waiting", flush=True)
    """)
    completed = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60,
                               check=False)
    assert completed.returncode == 0, completed.stderr
    assert "gave up waiting" in completed.stdout
    leader, child = (int(value) for value in pids.read_text().split())
    assert gone(leader, within_s=3.0) and gone(child, within_s=3.0)


def test_worker_group_is_registered_while_it_runs_and_nothing_of_it_outlives_it(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = textwrap.dedent(f"""
        import os, sys, time
        child = os.fork()
        if child == 0:
            time.sleep(600)
            os._exit(0)
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child}}")
        open(sys.argv[1], "w").write('{{"status": "ok"}}')
    """)
    seen: list[set[int]] = []

    def meanwhile(stdin: Any) -> None:
        seen.append(set(runner._LIVE_GROUPS._groups))

    result_path = tmp_path / "result.json"
    run = run_worker([sys.executable, "-c", code, str(result_path)], dict(os.environ), 10.0, result_path,
                      while_running=meanwhile)
    assert run.state == "ok" and run.result == {"status": "ok"} and run.returncode == 0
    leader, child = (int(value) for value in pids.read_text().split())
    assert len(seen) == 1 and leader in seen[0]
    assert leader not in runner._LIVE_GROUPS._groups
    assert gone(child, within_s=3.0)        # the leader's straggler went with it


# -- the localisation threshold comes from the caller's pass fraction -----------------------

def test_localisation_threshold_uses_the_callers_fraction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_worker = tmp_path / "worker.py"
    fake_worker.write_text(textwrap.dedent("""
        import json, sys
        config = json.loads(sys.argv[1])
        json.dump({"status": "ok", "sizes": [], "reason": json.dumps(config["localise_below_gbps"])}, open(sys.argv[2], "w"))
    """))
    links = gpu_links_of([_gpu(index, "NVIDIA H200", 18, 6) for index in range(2)])
    monkeypatch.setattr(nccl_worker, "WORKER", fake_worker)
    expected = expected_busbw(list(links), 1 << 30).busbw_gbps
    assert expected == pytest.approx(331.8, abs=0.1)
    for fraction in (0.5, 0.9):
        result = run_probe(gpus=[0, 1], budget_s=10.0, localise_below_fraction=fraction, gpu_links=links)
        assert float(result.reason) == pytest.approx(expected * fraction, abs=0.01)    # the worker echoes it
        assert [link.nvlink_active for link in result.gpu_links] == [18, 18]
    bad = run_probe(gpus=[0, 1], budget_s=10.0, localise_below_fraction=0)
    assert bad.status == "error" and bad.reason_code == "bad-fraction"


# -- the time budget: too short is refused; a kill during init is not a hang ----------------

def _phase_worker(path: Path, *, init_done: bool, started: Path) -> Path:
    """A fake worker that reports its GPUs through the phase lines (as the real one does),
    optionally that NCCL init finished, and then hangs without writing a result."""
    path.write_text(textwrap.dedent(f"""
        import os, sys, time
        open({str(started)!r}, "w").write("started")
        sys.path.insert(0, {str(Path(worker.__file__).parent)!r})
        import worker
        worker.phase("gpus", [0, 1])
        worker.phase("devices", [{{"index": 0, "name": "NVIDIA H200", "pci_bus_id": "0000:00:06.0"}},
                                 {{"index": 1, "name": "NVIDIA H200", "pci_bus_id": "0000:00:07.0"}}])
        print("vm:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0", flush=True)
        if {init_done!r}:
            worker.phase("init-done")
        time.sleep(600)
    """))
    return path


def test_a_budget_below_the_minimum_is_refused_without_starting_the_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = tmp_path / "started"
    monkeypatch.setattr(nccl_worker, "WORKER", _phase_worker(tmp_path / "worker.py", init_done=True, started=started))
    before = time.monotonic()
    result = run_probe(gpus=None, budget_s=1.27)
    assert time.monotonic() - before < 0.5
    assert not started.exists()
    assert result.status == "error" and result.reason_code == "budget-too-short"
    assert result.reason == (f"the probe needs at least {engine.MIN_PROBE_BUDGET_S:g} s; it got 1.3 s: "
                                "raise --deadline/--budget")
    assert result.min_budget_s == engine.MIN_PROBE_BUDGET_S
    json.dumps(result.to_json())
    # A node discovery shows GPU-less (or with one GPU) is still a skip, whatever the budget.
    assert run_probe(gpus=None, budget_s=1.0, node_gpus=()).reason_code == "no-gpus"
    assert run_probe(gpus=None, budget_s=1.0, node_gpus=(0,)).reason_code == "single-gpu"


@pytest.mark.parametrize(("init_done", "code", "phase"), [(False, "init-timeout", "nccl-init"),
                                                           (True, "timeout", "all-reduce")])
def test_a_kill_is_told_apart_by_the_workers_phase(init_done: bool, code: str, phase: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_worker, "WORKER", _phase_worker(tmp_path / "worker.py", init_done=init_done,
                                                        started=tmp_path / "started"))
    result = run_probe(gpus=None, budget_s=engine.MIN_PROBE_BUDGET_S)
    assert result.status == "timeout"
    assert result.reason_code == code and result.timeout_phase == phase
    if init_done:
        assert result.reason.startswith("probe timed out: killed at the 3 s deadline after NCCL init")
    else:
        assert result.reason.startswith("timeout during NCCL init")
    # What was probed is known from the phase lines, though no result file was written.
    assert result.gpus == (0, 1) and result.gpu_count == 2
    assert [device.pci_bus_id for device in result.devices] == ["0000:00:06.0", "0000:00:07.0"]
    assert result.nccl_version == "2.28.9"


def test_phase_lines_stay_whole_among_nccl_output() -> None:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import worker; sys.stdout.write('NCCL INFO partial'); "
            "worker.phase('devices', [{'index': 0, 'name': 'X', 'pci_bus_id': '0000:00:06.0'}]); "
            "worker.phase('init-done'); print(' line')")
    completed = subprocess.run([sys.executable, "-c", code, str(Path(worker.__file__).parent)], capture_output=True,
                               text=True, timeout=30, check=True)
    phases = engine.worker_phases(completed.stdout)
    assert phases == {"devices": [{"index": 0, "name": "X", "pci_bus_id": "0000:00:06.0"}], "init-done": None}
    assert completed.stdout.startswith("NCCL INFO partial\n")


def _fake_all_reduce_perf(directory: Path, *, init_complete: bool) -> dict[str, str]:
    binary = directory / "all_reduce_perf"
    line = "vm:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 6000 - Init COMPLETE" if init_complete else ""
    binary.write_text(f"#!/bin/sh\necho 'vm:1:1 [0] NCCL INFO NCCL version 2.27.7+cuda12.9'\necho '{line}'\nexec sleep 600\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{directory}:/usr/bin:/bin"}


@pytest.mark.parametrize(("init_complete", "code"), [(False, "init-timeout"), (True, "timeout")])
def test_nccl_tests_kill_uses_nccls_init_complete(init_complete: bool, code: str, tmp_path: Path) -> None:
    env = _fake_all_reduce_perf(tmp_path, init_complete=init_complete)
    result = run_probe(gpus=[0, 1], engine="nccl-tests", budget_s=engine.MIN_PROBE_BUDGET_S, env=env)
    assert result.status == "timeout" and result.reason_code == code


def test_nccl_tests_gpu_selection_is_checked_against_the_discovered_gpus(tmp_path: Path) -> None:
    env = _fake_all_reduce_perf(tmp_path, init_complete=True)
    bad = run_probe(gpus=[0, 5], engine="nccl-tests", budget_s=5.0, env=env, gpu_links=gpu_links_of(
        [_gpu(index, "NVIDIA H200", 18, 6) for index in range(2)]))
    assert bad.status == "error" and bad.reason_code == "bad-gpus"
    assert bad.reason == "GPU index [5] does not exist: 2 GPU(s) visible"
    # Without NVML the count for -g N is unknown: an error, not "0 GPU(s)", which reads as GPU-less.
    uncounted = run_probe(gpus=None, engine="nccl-tests", budget_s=5.0, env=env)
    assert uncounted.status == "error" and uncounted.reason_code == "no-gpu-count"


def test_a_kill_during_init_with_a_generous_budget_is_a_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twice what a healthy node needs and NCCL init still not done: fail as a timeout, not unknown."""
    monkeypatch.setattr(nccl_worker, "WORKER", _phase_worker(tmp_path / "worker.py", init_done=False,
                                                        started=tmp_path / "started"))
    monkeypatch.setattr(engine, "INIT_HANG_BUDGET_S", engine.MIN_PROBE_BUDGET_S)   # keep the test at 3 s
    result = run_probe(gpus=None, budget_s=engine.MIN_PROBE_BUDGET_S)
    assert result.status == "timeout" and result.reason_code == "timeout"
    assert result.timeout_phase == "nccl-init"
    assert result.reason.startswith("probe timed out: NCCL init did not finish")


# -- engines behind one interface ----------------------------------------------------------

class _FakeEngine:
    """An engine as a new one would be written: a name and run(request) -> ProbeResult."""

    name = "fake"

    def __init__(self) -> None:
        self.requests: list[ProbeRequest] = []

    def run(self, request: ProbeRequest) -> ProbeResult:
        from netdoctor.probe.expectation import GpuLinks

        self.requests.append(request)
        return ProbeResult(status="ok", gpu_links=(GpuLinks(0), GpuLinks(1)))


def test_a_new_engine_is_one_entry_in_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeEngine()
    monkeypatch.setitem(ENGINES, fake.name, fake)
    result = run_probe(gpus=None, engine="fake", budget_s=engine.MIN_PROBE_BUDGET_S, localise_below_fraction=0.9)
    [request] = fake.requests
    assert request.pass_fraction == 0.9 and request.sizes == tuple(engine.DEFAULT_SIZES)
    # What every result carries is filled in by the dispatcher, not by each engine.
    assert (result.engine, result.gpus, result.gpu_count) == ("fake", (0, 1), 2)
    assert result.duration_s >= 0
    # Requests an engine could not honour never reach it.
    assert run_probe(gpus=None, engine="fake", budget_s=1.0).reason_code == "budget-too-short"
    assert len(fake.requests) == 1


def test_a_refused_request_keeps_the_short_json_shape() -> None:
    result = run_probe(gpus=None, sizes=[6], budget_s=1.0)
    data = result.to_json()
    assert data["status"] == "error" and data["reason_code"] == "bad-sizes"
    # The engine never ran: no NVML link facts and no NCCL warnings, so no such keys.
    assert "gpu_links" not in data and "nccl_warnings" not in data
    assert ProbeResult.from_json(data).to_json() == data
