"""Runs the probe: starts the worker (or nccl-tests) under a deadline and assembles the result.

The only place of the probe that starts processes. Each run gets its own process group
(`start_new_session`), so at the deadline the whole group is killed: a hung NCCL
communicator, its proxy threads and anything it forked go together, and nothing is left
holding GPU memory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from netdoctor.errors import ParseError
from netdoctor.parsers.nccl import NcclLogFacts, parse_nccl_log, parse_nccl_tests
from netdoctor.probe.expectation import GpuLinks, expected_busbw, nvlink_version_name

log = structlog.get_logger(__name__)

WORKER = Path(__file__).with_name("worker.py")
MIB = 1 << 20
# Small sizes time latency, large ones bandwidth; the largest is the one graded.
DEFAULT_SIZES = [8 * 1024, MIB, 16 * MIB, 256 * MIB, 1024 * MIB]
LOG_CAP_BYTES = 8 * MIB
KILL_GRACE_S = 0.3
# Below this fraction of the expected busbw the worker spends its remaining budget on
# localisation (per-GPU copies, neighbour pairs). The pack's pass fraction is the usual value.
DEFAULT_LOCALISE_FRACTION = 0.8


@dataclass(frozen=True)
class WorkerRun:
    """How one worker process ended."""

    state: str                        # ok | timeout | crashed | missing
    result: dict[str, Any] | None     # the worker's JSON result, when it wrote one
    log: str                          # its stdout and stderr (NCCL's INFO lines among them)
    returncode: int | None
    duration_s: float


def worker_environment(env: dict[str, str] | None) -> dict[str, str]:
    """The worker's environment: the caller's, plus what the probe needs.

    * NCCL_DEBUG=INFO with INIT,GRAPH,NET,ENV: the transport, channel, topology and GDR
      lines the report is read from (the COLL subsystem would log every call; left out).
    * NCCL_NVLS_ENABLE=0 unless set: NVLink SHARP needs multicast objects that on some
      shared hosts (the device machines here, for one) can take the NVSwitch fabric out
      of service, and NVLS init costs memory and time a health probe should not spend.
      The bandwidth model is calibrated without NVLS.
    * CUDA_DEVICE_ORDER=PCI_BUS_ID unless set: GPU indices then match nvidia-smi and NVML.
    """
    merged = dict(os.environ if env is None else env)
    merged["NCCL_DEBUG"] = "INFO"
    merged["NCCL_DEBUG_SUBSYS"] = "INIT,GRAPH,NET,ENV"
    merged.pop("NCCL_DEBUG_FILE", None)           # the log must reach our pipe
    merged.setdefault("NCCL_NVLS_ENABLE", "0")
    merged.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    merged["PYTHONDONTWRITEBYTECODE"] = "1"
    merged["LC_ALL"] = "C"
    return merged


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, then SIGKILL what is left; reap the leader."""
    for signal_number, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, signal_number)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; make sure no other member of its group survives it.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        break


def run_process(argv: list[str], env: dict[str, str], timeout_s: float,
                result_path: Path | None = None, while_running: Any = None) -> WorkerRun:
    """Run `argv` in its own process group; kill the group at `timeout_s`.

    `while_running(process)` (optional) is called once the process has started, to do
    the parent's own work in the meantime; it may write to `process.stdin`.
    """
    started = time.monotonic()
    with tempfile.TemporaryFile() as output:
        try:
            process = subprocess.Popen(argv, stdin=subprocess.PIPE if while_running else subprocess.DEVNULL,
                                       stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as error:
            return WorkerRun("missing", None, f"cannot start {argv[0]}: {error}", None, 0.0)
        state = "ok"
        try:
            if while_running is not None:
                try:
                    while_running(process)
                finally:
                    _close_stdin(process)
            process.wait(timeout=max(timeout_s - (time.monotonic() - started), 0.1))
        except subprocess.TimeoutExpired:
            state = "timeout"
            kill_group(process)
        except BaseException:
            kill_group(process)
            raise
        output.seek(0)
        text = output.read(LOG_CAP_BYTES).decode(errors="replace")
    result = None
    if result_path is not None and result_path.exists():
        try:
            result = json.loads(result_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            log.warning("probe worker result unreadable", error=str(error))
    if state == "ok" and result is None and result_path is not None:
        state = "crashed"
    return WorkerRun(state, result, text, process.returncode, time.monotonic() - started)


def _close_stdin(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None:
        try:
            process.stdin.close()
        except OSError:
            pass


def collect_gpu_links(indices: list[int] | None) -> list[GpuLinks]:
    """NVLink version/links and PCIe max gen/width per GPU from NVML; [] when NVML is unavailable."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        log.debug("NVML unavailable for the probe's expectation", error=str(error))
        return []
    links: list[GpuLinks] = []
    try:
        count = pynvml.nvmlDeviceGetCount()
        for index in indices if indices is not None else range(count):
            if index >= count:
                continue
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = _nvml(pynvml.nvmlDeviceGetName, handle)
            active = total = 0
            version = None
            for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
                state = _nvml(pynvml.nvmlDeviceGetNvLinkState, handle, link)
                if state is None:
                    break
                total += 1
                if state == pynvml.NVML_FEATURE_ENABLED:
                    active += 1
                    version = version or _nvml(pynvml.nvmlDeviceGetNvLinkVersion, handle, link)
            links.append(GpuLinks(
                index=index, name=name if isinstance(name, str) else None,
                nvlink_version=nvlink_version_name(version, name if isinstance(name, str) else None),
                nvlink_active=active, nvlink_total=total,
                pcie_gen=_nvml(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
                pcie_width=_nvml(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle)))
    except pynvml.NVMLError as error:
        log.debug("NVML query failed", error=str(error))
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return links


def _nvml(function: Any, *args: Any) -> Any:
    import pynvml
    try:
        value = function(*args)
    except pynvml.NVMLError:
        return None
    return value.decode() if isinstance(value, bytes) else value


def describe_transport(facts: NcclLogFacts | None) -> dict[str, Any]:
    """How NCCL carried the traffic, from its own log: kind, channels, GDR, details."""
    if facts is None:
        return {"kind": None, "channels": None, "gdr": None, "details": ["no NCCL log lines captured"]}
    kinds = facts.transport_kinds
    primary = kinds[0] if kinds else None
    kind = primary
    if primary == "P2P":
        # NCCL prints `via P2P/...` for NVLink and for PCIe peer access alike; its topology
        # search (GRAPH subsystem) says which: a ring graph of type NVL/... is NVLink.
        kind = "P2P/NVLink" if facts.nvlink_between_gpus else "P2P"
    gdr = facts.gdr_enabled(primary.split("/", 1)[1]) if primary and primary.startswith("NET/") else None
    details: list[str] = []
    for transport in kinds:
        vias = sorted({connection.via for connection in facts.connections if connection.kind == transport})
        count = sum(1 for connection in facts.connections if connection.kind == transport)
        details.append(f"{count} connection(s) via {', '.join(vias)}")
    for graph in facts.graphs:
        details.append(f"graph pattern {graph.pattern}: {graph.channels} channel(s), type {graph.path_type}, "
                       f"bw {graph.bandwidth_intra:g}/{graph.bandwidth_inter:g} GB/s")
    if facts.network:
        details.append(f"network plugin {facts.network}")
    for state in facts.gdr:
        details.append(f"NET/{state.plugin} GPU Direct RDMA {'enabled' if state.enabled else 'disabled'} for "
                       f"{state.device}")
    for name, value in sorted(facts.environment.items()):
        details.append(f"{name}={value}")
    return {"kind": kind, "channels": facts.channels, "gdr": gdr, "nvls_channels": facts.nvls_channels,
            "details": details}


def _skipped(reason: str, code: str, started: float, **extra: Any) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason, "reason_code": code, "engine": extra.pop("engine", "nccl"),
            "nccl_version": None, "gpus": extra.pop("gpus", []), "gpu_count": extra.pop("gpu_count", 0), "sizes": [],
            "busbw_gbps": None, "transport": describe_transport(None), "localisation": [],
            "duration_s": round(time.monotonic() - started, 3), **extra}


def run_probe(*, gpus: list[int] | None, engine: str = "auto", budget_s: float = 5.0, sizes: list[int] | None = None,
              env: dict[str, str] | None = None, inventory: Any = None,
              localise_below_fraction: float = DEFAULT_LOCALISE_FRACTION) -> dict[str, Any]:
    """Run the NCCL probe on this node's GPUs within `budget_s` seconds; never raises for GPU problems.

    Returns a JSON-serialisable dict (see docs/probe.md). `inventory` (optional) lets the
    probe skip at once on nodes with fewer than two GPUs.
    """
    started = time.monotonic()
    sizes = sorted(set(sizes or DEFAULT_SIZES))
    if any(size < 4 or size % 4 for size in sizes):
        return _skipped(f"message sizes must be positive multiples of 4 bytes, got {sizes}", "bad-sizes", started,
                        status="error")
    if engine not in ("auto", "nccl", "nccl-tests"):
        return _skipped(f"unknown probe engine {engine!r} (auto, nccl, nccl-tests)", "bad-engine", started,
                        status="error")
    if inventory is not None and gpus is None:
        known = getattr(inventory, "gpus", None)
        nvml = inventory.source("nvml") if hasattr(inventory, "source") else None
        if known is not None and nvml is not None and nvml.usable and len(known) < 2:
            return _skipped(f"{len(known)} GPU(s) on this node: an all-reduce needs at least 2", "single-gpu"
                            if known else "no-gpus", started, gpu_count=len(known), gpus=[gpu.index for gpu in known])
    chosen = "nccl-tests" if engine == "nccl-tests" else "nccl"
    gpu_links: list[GpuLinks] = []
    if chosen == "nccl-tests":
        gpu_links = collect_gpu_links(gpus)
        result = _run_nccl_tests(gpus, sizes, budget_s, started, env, gpu_links)
    else:
        result = _run_worker(gpus, sizes, budget_s, started, env, gpu_links, localise_below_fraction)
    if not result.get("gpus") and gpu_links:
        result["gpus"] = [link.index for link in gpu_links]
        result["gpu_count"] = len(gpu_links)
    if result.get("reason_code") in ("no-driver", "no-gpus") and gpu_links:
        # NVML sees GPUs but CUDA does not: a broken driver install, not a GPU-less node.
        result["status"] = "error"
        result["reason"] = f"NVML reports {len(gpu_links)} GPU(s) but CUDA cannot use them: {result.get('reason')}"
    result["engine"] = chosen
    result["gpu_links"] = [asdict(link) for link in gpu_links]
    result["duration_s"] = round(time.monotonic() - started, 3)
    return result


def _localise_threshold(gpu_links: list[GpuLinks], gpus: list[int] | None, largest: int,
                        fraction: float) -> float | None:
    selected = [link for link in gpu_links if gpus is None or link.index in gpus]
    expectation = expected_busbw(selected, largest)
    return None if expectation.busbw_gbps is None else round(expectation.busbw_gbps * fraction, 2)


def _run_worker(gpus: list[int] | None, sizes: list[int], budget_s: float, started: float,
                env: dict[str, str] | None, gpu_links: list[GpuLinks], localise_fraction: float) -> dict[str, Any]:
    """Start the worker, then read NVML while it initialises CUDA (the two overlap) and send
    it the localisation threshold on its stdin. `gpu_links` is filled in place."""

    def meanwhile(process: subprocess.Popen[bytes]) -> None:
        gpu_links.extend(collect_gpu_links(gpus))
        threshold = _localise_threshold(gpu_links, gpus, sizes[-1], localise_fraction)
        if process.stdin is not None:
            try:
                process.stdin.write(json.dumps(threshold).encode() + b"\n")
                process.stdin.flush()
            except OSError:
                pass      # the worker already ended; its result says why

    with tempfile.TemporaryDirectory(prefix="netdoctor-probe-") as directory:
        result_path = Path(directory) / "result.json"
        left = budget_s - (time.monotonic() - started)
        config = {"gpus": gpus, "sizes": sizes, "budget_s": max(left - 0.2, 0.1),
                  "localise_below_gbps": "stdin", "localise_reserve_s": 0.5,
                  "nccl_library": (os.environ if env is None else env).get("NETDOCTOR_NCCL_LIBRARY") or None,
                  # Measuring longer than ~0.6 s changes busbw by < 1 % (benchmarks/results/probe.md)
                  # but adds to every prolog run; small budgets get 10 % of their time.
                  "measure_s": max(0.3, min(0.6, budget_s * 0.1))}
        argv = [sys.executable, "-B", str(WORKER), json.dumps(config), str(result_path)]
        run = run_process(argv, worker_environment(env), left, result_path, while_running=meanwhile)
    return assemble(run, budget_s)


def assemble(run: WorkerRun, budget_s: float) -> dict[str, Any]:
    """The probe result from a finished (or killed) worker run."""
    facts = None
    try:
        facts = parse_nccl_log(run.log)
    except ParseError:
        facts = None
    result: dict[str, Any] = dict(run.result or {})
    if run.state == "timeout":
        result["status"] = "timeout"
        result["reason"] = f"probe timed out: killed at the {budget_s:g} s deadline"
    elif run.state == "crashed":
        tail = " | ".join(line for line in run.log.strip().splitlines()[-3:])
        result["status"] = "error"
        result["reason"] = f"probe worker exited with status {run.returncode} without a result: {tail[:300]}"
    elif run.state == "missing":
        result["status"] = "error"
        result["reason"] = run.log
    result.setdefault("status", "error")
    result.setdefault("reason", "")
    result.setdefault("sizes", [])
    result.setdefault("gpus", [])
    result.setdefault("localisation", [])
    result.setdefault("gpu_count", len(result["gpus"]))
    result.setdefault("nccl_version", facts.version.split("+")[0] if facts and facts.version else None)
    result["busbw_gbps"] = result["sizes"][-1]["busbw_gbps"] if result["sizes"] else None
    result["transport"] = describe_transport(facts)
    result["nccl_warnings"] = [line.message for line in facts.warnings][:10] if facts else []
    if run.state == "timeout" and facts is not None and not facts.init_complete:
        result["reason"] += " (NCCL init had not completed)"
    return result


def _run_nccl_tests(gpus: list[int] | None, sizes: list[int], budget_s: float, started: float,
                    env: dict[str, str] | None, gpu_links: list[GpuLinks]) -> dict[str, Any]:
    """`all_reduce_perf` from nccl-tests, one process, all GPUs (-g N), judged on its largest size."""
    binary = shutil.which("all_reduce_perf", path=(env or os.environ).get("PATH"))
    if binary is None:
        return _skipped("all_reduce_perf (nccl-tests) is not installed", "no-nccl-tests", started, engine="nccl-tests")
    count = len(gpus) if gpus is not None else len(gpu_links)
    if count < 2:
        return _skipped(f"{count} GPU(s) selected: an all-reduce needs at least 2", "single-gpu", started,
                        engine="nccl-tests", gpu_count=count)
    environment = worker_environment(env)
    if gpus is not None:
        environment["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in gpus)
    smallest, largest = sizes[0], sizes[-1]
    argv = [binary, "-b", str(smallest), "-e", str(largest), "-f", "4", "-g", str(count), "-w", "5", "-n", "20", "-c", "1"]
    left = budget_s - (time.monotonic() - started)
    run = run_process(argv, environment, left)
    result = assemble(WorkerRun(run.state if run.state != "ok" else "ok", {}, run.log, run.returncode, run.duration_s),
                      budget_s)
    result["gpus"] = gpus if gpus is not None else [link.index for link in gpu_links]
    result["gpu_count"] = count
    if run.state == "timeout":
        return result
    try:
        runs = parse_nccl_tests(run.log)
    except ParseError as error:
        result.update(status="error", reason=f"nccl-tests output not understood: {error}")
        return result
    table = runs[-1]
    result["sizes"] = [{"bytes": row.size, "time_us": row.out_of_place.time_us, "algbw_gbps": row.out_of_place.algbw_gbps,
                        "busbw_gbps": row.out_of_place.busbw_gbps, "verified": not row.out_of_place.wrong}
                       for row in table.rows]
    result["busbw_gbps"] = table.largest.out_of_place.busbw_gbps if table.largest else None
    if table.wrong:
        result.update(status="wrong-result", reason=f"nccl-tests reported {table.wrong} wrong value(s)")
    elif run.returncode != 0:
        result.update(status="error", reason=f"all_reduce_perf exited with status {run.returncode}")
    else:
        result.update(status="ok", reason="")
    return result
