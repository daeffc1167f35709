"""Runs the probe: starts the worker (or nccl-tests) under a deadline and assembles the result.

The only place of the probe that starts processes. Each run gets its own process group
(`start_new_session`), so at the deadline the whole group is killed: a hung NCCL
communicator, its proxy threads and anything it forked go together, and nothing is left
holding GPU memory. The group is registered with netdoctor.host.runner from its start
until its leader is reaped, so it is killed at interpreter exit too when a caller stopped
waiting for the probe (netdoctor.run gives up on a probe whose NVML call hangs).
"""

from __future__ import annotations

import json
import os
import re
import select
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
from netdoctor.host.nvml import collect_nvml
from netdoctor.host.runner import has_exited, tracked_process_group
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
# localisation (per-GPU copies, neighbour pairs). Callers pass their rule pack's
# `[nccl-probe] pass_fraction`; this default (rules/default.toml's value) is only for
# callers without a pack (the benchmarks).
DEFAULT_LOCALISE_FRACTION = 0.8
# The least budget the probe accepts. Below it a healthy node cannot finish, and being
# killed for that is not a hang: run_probe refuses at once (status "error", reason_code
# "budget-too-short"; the check says `unknown`). Measured on 2x H200 (benchmarks/results/
# probe.md; the reviewer's `check --deadline 2` run): worker start, libcuda/libnccl load,
# cuInit and contexts ~0.6 s and NCCL init alone up to ~1.4 s, before the all-reduces
# (0.3-0.6 s), the localisation reserve (0.5 s) and tear-down (0.25 s) are spent.
MIN_PROBE_BUDGET_S = 3.0
# A worker killed during NCCL init with at least this budget was hung, not short of time.
INIT_HANG_BUDGET_S = 2 * MIN_PROBE_BUDGET_S
# Progress lines the worker prints (worker.PHASE_PREFIX): `NETDOCTOR_PHASE <name> [json]`.
_PHASE = re.compile(r"^NETDOCTOR_PHASE ([\w-]+)(?: (.*))?$", re.MULTILINE)


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


def _wait_exited(pid: int, timeout_s: float) -> bool:
    """Wait up to `timeout_s` for child `pid` to exit, WITHOUT reaping it; True if it did.

    Unreaped, its pid (= its process group id) cannot be reused, so its group can still
    be killed safely afterwards.
    """
    end = time.monotonic() + max(timeout_s, 0.0)
    try:
        pidfd: int | None = os.pidfd_open(pid)   # readable once the child exits
    except (AttributeError, OSError):
        pidfd = None
    try:
        while not has_exited(pid):
            left = end - time.monotonic()
            if left <= 0:
                return False
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(left, 0.01))
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _terminate_group(pid: int, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the group led by child `pid` and give its leader `grace_s` to exit (unreaped).

    The SIGKILL for whatever is left comes from leaving `tracked_process_group`.
    """
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    _wait_exited(pid, grace_s)


def run_process(argv: list[str], env: dict[str, str], timeout_s: float,
                result_path: Path | None = None, while_running: Any = None) -> WorkerRun:
    """Run `argv` in its own process group; kill the group at `timeout_s`.

    `while_running(process)` (optional) is called once the process has started, to do
    the parent's own work in the meantime; it may write to `process.stdin`. Nothing of
    the group outlives this call, and should the caller stop waiting for it (this call
    hangs in `while_running`), the group is killed when the interpreter exits.
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
            with tracked_process_group(process.pid):      # leaving it SIGKILLs the rest of the group
                if while_running is not None:
                    try:
                        while_running(process)
                    finally:
                        _close_stdin(process)
                if not _wait_exited(process.pid, max(timeout_s - (time.monotonic() - started), 0.1)):
                    state = "timeout"
                    _terminate_group(process.pid)
        finally:
            try:
                process.wait(timeout=5.0)                  # reaped only once its group is dead
            except subprocess.TimeoutExpired:
                log.warning("probe process did not end after SIGKILL", pid=process.pid)
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


def _no_dmabuf_query(address: str) -> bool | None:
    return None     # not needed here; asking libcuda would cuInit in the parent as well


def collect_gpu_links(indices: list[int] | None, nvml_module: Any = None) -> list[GpuLinks]:
    """NVLink version/links and PCIe max gen/width per GPU (in `indices` order); [] without NVML.

    The facts come from netdoctor.host.nvml, the collector discovery uses (it counts the
    links of GPUs whose link indices have gaps, such as B200). `nvml_module` replaces
    pynvml (tests).
    """
    report, status = collect_nvml(nvml_module, dmabuf_query=_no_dmabuf_query)
    if report is None:
        log.debug("NVML unavailable for the probe's expectation", reason=status)
        return []
    by_index: dict[int, GpuLinks] = {}
    for gpu in report.get("gpus") or []:
        name = gpu.get("name") if isinstance(gpu.get("name"), str) else None
        nvlink = gpu.get("nvlink") or {}
        pcie = gpu.get("pcie") or {}
        by_index[gpu["index"]] = GpuLinks(
            index=gpu["index"], name=name, nvlink_version=nvlink_version_name(nvlink.get("version"), name),
            nvlink_active=nvlink.get("active"), nvlink_total=nvlink.get("total"),
            pcie_gen=pcie.get("max_gen"), pcie_width=pcie.get("max_width"))
    order = indices if indices is not None else sorted(by_index)
    return [by_index[index] for index in order if index in by_index]


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
    probe skip at once on nodes with fewer than two GPUs. `localise_below_fraction`: the
    caller's rule pack's `[nccl-probe] pass_fraction`; below that fraction of the expected
    busbw the worker localises the slow GPU or link.
    """
    started = time.monotonic()
    sizes = sorted(set(sizes or DEFAULT_SIZES))
    if any(size < 4 or size % 4 for size in sizes):
        return _skipped(f"message sizes must be positive multiples of 4 bytes, got {sizes}", "bad-sizes", started,
                        status="error")
    fraction = localise_below_fraction
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 2:
        return _skipped(f"localisation fraction (the pack's pass_fraction) must be in (0, 2], got {fraction!r}",
                        "bad-fraction", started, status="error")
    if engine not in ("auto", "nccl", "nccl-tests"):
        return _skipped(f"unknown probe engine {engine!r} (auto, nccl, nccl-tests)", "bad-engine", started,
                        status="error")
    if inventory is not None and gpus is None:
        known = getattr(inventory, "gpus", None)
        nvml = inventory.source("nvml") if hasattr(inventory, "source") else None
        if known is not None and nvml is not None and nvml.usable and len(known) < 2:
            return _skipped(f"{len(known)} GPU(s) on this node: an all-reduce needs at least 2", "single-gpu"
                            if known else "no-gpus", started, gpu_count=len(known), gpus=[gpu.index for gpu in known])
    if budget_s < MIN_PROBE_BUDGET_S:
        return _skipped(f"the probe needs at least {MIN_PROBE_BUDGET_S:g} s; it got {budget_s:.1f} s: "
                        "raise --deadline/--budget", "budget-too-short", started, status="error",
                        engine="nccl-tests" if engine == "nccl-tests" else "nccl",
                        gpus=list(gpus or []), gpu_count=len(gpus or []), budget_s=round(budget_s, 3),
                        min_budget_s=MIN_PROBE_BUDGET_S)
    chosen = "nccl-tests" if engine == "nccl-tests" else "nccl"
    gpu_links: list[GpuLinks] = []
    if chosen == "nccl-tests":
        every_gpu = collect_gpu_links(None)
        known = {link.index for link in every_gpu}
        missing = [index for index in gpus or [] if index not in known]
        if every_gpu and missing:
            return _skipped(f"GPU index {missing} does not exist: {len(every_gpu)} GPU(s) visible", "bad-gpus",
                            started, status="error", engine=chosen, gpus=list(gpus or []),
                            gpu_count=len(gpus or []))
        gpu_links = every_gpu if gpus is None else [link for index in gpus for link in every_gpu
                                                    if link.index == index]
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


def worker_phases(log_text: str) -> dict[str, Any]:
    """The worker's `NETDOCTOR_PHASE` lines: phase name -> its JSON payload (None without one)."""
    phases: dict[str, Any] = {}
    for match in _PHASE.finditer(log_text):
        payload = None
        if match[2]:
            try:
                payload = json.loads(match[2])
            except ValueError:
                payload = None
        phases[match[1]] = payload
    return phases


def assemble(run: WorkerRun, budget_s: float) -> dict[str, Any]:
    """The probe result from a finished (or killed) worker run."""
    facts = None
    try:
        facts = parse_nccl_log(run.log)
    except ParseError:
        facts = None
    result: dict[str, Any] = dict(run.result or {})
    phases = worker_phases(run.log)
    # What the worker said it probed, for a worker killed before it wrote its result.
    if not result.get("gpus") and isinstance(phases.get("gpus"), list):
        result["gpus"] = phases["gpus"]
    if not result.get("devices") and isinstance(phases.get("devices"), list):
        result["devices"] = phases["devices"]
    if run.state == "timeout":
        # Our worker prints `init-done` once ncclCommInitAll returned; nccl-tests prints no
        # phases, and its NCCL log's "Init COMPLETE" says the same.
        init_done = "init-done" in phases or (not phases and facts is not None and facts.init_complete)
        result["status"] = "timeout"
        if init_done:
            result["reason_code"] = "timeout"
            result["timeout_phase"] = "all-reduce"
            result["reason"] = (f"probe timed out: killed at the {budget_s:g} s deadline after NCCL init, "
                                "during the all-reduces")
        elif budget_s >= INIT_HANG_BUDGET_S:
            # Twice what a healthy node needs and NCCL init still not done: a hang.
            result["reason_code"] = "timeout"
            result["timeout_phase"] = "nccl-init"
            result["reason"] = (f"probe timed out: NCCL init did not finish within the {budget_s:g} s deadline "
                                f"(a healthy node needs well under {MIN_PROBE_BUDGET_S:g} s)")
        else:
            # Not evidence of a hang: init can take longer than a tight budget on a healthy node.
            result["reason_code"] = "init-timeout"
            result["timeout_phase"] = "nccl-init"
            result["reason"] = (f"timeout during NCCL init: killed at the {budget_s:g} s deadline before NCCL "
                                "init finished; a healthy node may need more time: raise --deadline/--budget")
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
    return result


def _run_nccl_tests(gpus: list[int] | None, sizes: list[int], budget_s: float, started: float,
                    env: dict[str, str] | None, gpu_links: list[GpuLinks]) -> dict[str, Any]:
    """`all_reduce_perf` from nccl-tests, one process, all GPUs (-g N), judged on its largest size."""
    binary = shutil.which("all_reduce_perf", path=(env or os.environ).get("PATH"))
    if binary is None:
        return _skipped("all_reduce_perf (nccl-tests) is not installed", "no-nccl-tests", started, engine="nccl-tests")
    if gpus is None and not gpu_links:
        # Without NVML the GPUs cannot be counted for `-g N`; 0 would read as a GPU-less node.
        return _skipped("NVML gives no GPU count for all_reduce_perf -g N: pass --gpus, or use --engine nccl",
                        "no-gpu-count", started, engine="nccl-tests", status="error")
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
