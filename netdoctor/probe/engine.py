"""What every probe engine shares: the interface, the worker process, its log, the GPUs' link facts.

An engine (`ProbeEngine`) turns a `ProbeRequest` into a `ProbeResult`; the engines are
listed in netdoctor.probe.dispatch, which validates the request and the budget first.
Engines start processes only through netdoctor.host.runner (`run_worker`): each run
gets its own process group, registered from its start until its leader is reaped, so
at the deadline the whole group is stopped (a hung NCCL communicator, its proxy threads
and anything it forked go together, nothing is left holding GPU memory), and it is
killed at interpreter exit too when a caller stopped waiting for the probe.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from netdoctor.errors import ParseError
from netdoctor.host.files import read_regular
from netdoctor.host.runner import run_merged
from netdoctor.host.trust import child_environment, trusted_override
from netdoctor.host.types import CommandSpec, CommandState
from netdoctor.logging import get_logger
from netdoctor.parsers.nccl import NcclLogFacts, parse_nccl_log
from netdoctor.probe.expectation import GpuLinks, nvlink_version_name
from netdoctor.probe.result import MIN_PROBE_BUDGET_S, ProbeRequest, ProbeResult, Transport
from netdoctor.records import record

if TYPE_CHECKING:       # the inventory model is not imported to start a probe
    from netdoctor.inventory.model import Gpu

log = get_logger(__name__)

MIB = 1 << 20
# Small sizes time latency, large ones bandwidth; the largest is the one graded.
DEFAULT_SIZES = [8 * 1024, MIB, 16 * MIB, 256 * MIB, 1024 * MIB]
LOG_CAP_BYTES = 8 * MIB
RESULT_CAP_BYTES = 64 * MIB     # the worker's JSON result: sizes, timings, localisation rows
# A worker killed during NCCL init with at least this budget was hung, not short of time.
INIT_HANG_BUDGET_S = 2 * MIN_PROBE_BUDGET_S
# Progress lines the worker prints (worker.PHASE_PREFIX): `NETDOCTOR_PHASE <name> [json]`.
_PHASE = re.compile(r"^NETDOCTOR_PHASE ([\w-]+)(?: (.*))?$", re.MULTILINE)




class ProbeEngine(Protocol):
    """One way of measuring: the ctypes NCCL worker, nccl-tests, ... (netdoctor.probe.dispatch lists them).

    `run` gets a request whose budget, sizes and fraction are already checked, and
    answers with a result for every outcome (skipped, error, timeout): it raises only
    for a bug. The dispatcher fills in `engine`, `gpu_links` (when the engine read none)
    and `duration_s`. `starts_early`: it can start before discovery has finished, taking
    the links and pass fraction from `request.later` when they are known.
    """

    name: str
    starts_early: bool

    def run(self, request: ProbeRequest) -> ProbeResult: ...


@record(frozen=True)
class WorkerRun:
    """How one engine process ended."""

    state: str                        # ok | timeout | crashed | missing
    result: dict[str, Any] | None     # the worker's JSON result, when it wrote one
    log: str                          # its stdout and stderr (NCCL's INFO lines among them)
    returncode: int | None
    duration_s: float


def run_worker(argv: list[str], env: Mapping[str, str], timeout_s: float, result_path: Path | None = None,
               while_running: Callable[[IO[bytes]], None] | None = None) -> WorkerRun:
    """Run an engine's process through the host runner; read its result file if it has one.

    `while_running(stdin)` (optional) does the parent's own work while the process runs
    and may write to its stdin. The process ends at `timeout_s` (at least 0.1 s).
    """
    spec = CommandSpec(Path(argv[0]).name, tuple(argv), timeout_s=max(timeout_s, 0.1), max_output_bytes=LOG_CAP_BYTES)
    run = run_merged(spec, env=env, while_running=while_running)
    if run.state is CommandState.MISSING or (run.state is CommandState.ERROR and run.returncode is None):
        return WorkerRun("missing", None, run.stderr, None, run.duration_s)
    result = None
    if result_path is not None:
        try:
            data = read_regular(result_path, RESULT_CAP_BYTES)
            result = json.loads(data) if data is not None else None
        except (OSError, ValueError) as error:   # JSONDecodeError and an oversized file are ValueErrors
            log.warning("probe worker result unreadable", error=str(error))
    state = "timeout" if run.state is CommandState.TIMEOUT else "ok"
    if state == "ok" and result is None and result_path is not None:
        state = "crashed"
    return WorkerRun(state, result, run.stdout, run.returncode, run.duration_s)


def worker_script() -> Path:
    """The probe worker: worker.py beside this module; `$NETDOCTOR_PROBE_WORKER` replaces it
    (a lab's or a test's stand-in that speaks the same config/result protocol), as root
    only when root alone can change it."""
    override = trusted_override("NETDOCTOR_PROBE_WORKER", os.environ.get("NETDOCTOR_PROBE_WORKER"))
    return override or Path(__file__).with_name("worker.py")


def worker_argv(script: Path, config: Mapping[str, Any], result_path: Path) -> list[str]:
    """The worker's command line: this interpreter, ignoring PYTHON* variables (-E) and
    writing no bytecode (-B), the script, its JSON config and where it writes its result."""
    return [sys.executable, "-E", "-B", str(script), json.dumps(config), str(result_path)]


def nccl_library(env: Mapping[str, str]) -> str | None:
    """`$NETDOCTOR_NCCL_LIBRARY`, the libnccl the worker loads instead of its own search; as
    root only a file root alone can change (the worker loads it into a root process)."""
    path = trusted_override("NETDOCTOR_NCCL_LIBRARY", env.get("NETDOCTOR_NCCL_LIBRARY"))
    return None if path is None else str(path)


def skipped(reason: str, code: str, *, status: str = "skipped", **facts: Any) -> ProbeResult:
    """A result for a probe that measured nothing: not applicable, not installed, refused."""
    return ProbeResult(status=status, reason=reason, reason_code=code, **facts)


# What the worker takes from its caller: NCCL's and CUDA's settings (a probe measures what a
# job on this node would get), the network libraries NCCL loads, netdoctor's own test hooks,
# HOME (NCCL reads ~/.nccl.conf) and SLURM's job facts. Nothing else: no LD_PRELOAD, no
# PYTHONPATH (netdoctor.host.trust.child_environment).
WORKER_PREFIXES = ("NCCL_", "CUDA_", "NVIDIA_", "UCX_", "FI_", "NETDOCTOR_", "SLURM_")
WORKER_NAMES = ("HOME", "USER", "TMPDIR")
# NCCL dlopens these; a path in them as root must be root's alone, like any code root runs.
_NCCL_PLUGIN_VARIABLES = ("NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN")


def worker_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """The worker's environment: what it needs of the caller's (WORKER_PREFIXES/NAMES, through
    netdoctor.host.trust.child_environment), plus what the probe needs.

    * NCCL_DEBUG=INFO with INIT,GRAPH,NET,ENV: the transport, channel, topology and GDR
      lines the report is read from (the COLL subsystem would log every call; left out).
    * NCCL_NVLS_ENABLE=0 unless set: NVLink SHARP needs multicast objects that on some
      shared hosts (the device machines here, for one) can take the NVSwitch fabric out
      of service, and NVLS init costs memory and time a health probe should not spend.
      The bandwidth model is calibrated without NVLS.
    * CUDA_DEVICE_ORDER=PCI_BUS_ID unless set: GPU indices then match nvidia-smi and NVML.
    """
    merged = child_environment(os.environ if env is None else env, names=WORKER_NAMES, prefixes=WORKER_PREFIXES)
    for variable in _NCCL_PLUGIN_VARIABLES:
        value = merged.get(variable, "")
        if "/" in value and trusted_override(variable, value) is None:
            merged.pop(variable)
    merged["NCCL_DEBUG"] = "INFO"
    merged["NCCL_DEBUG_SUBSYS"] = "INIT,GRAPH,NET,ENV"
    merged.pop("NCCL_DEBUG_FILE", None)           # the log must reach our pipe
    merged.setdefault("NCCL_NVLS_ENABLE", "0")
    merged.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    merged["PYTHONDONTWRITEBYTECODE"] = "1"
    return merged


def gpu_links_of(gpus: Iterable[Gpu]) -> tuple[GpuLinks, ...]:
    """NVLink version/links and PCIe max gen/width per GPU, as discovery found them (NVML
    first); a GPU fallen off the bus tells nothing, so no expectation is made up for it."""
    links: list[GpuLinks] = []
    for gpu in sorted(gpus, key=lambda gpu: gpu.index):
        if gpu.lost:
            links.append(GpuLinks(index=gpu.index))
            continue
        pcie = gpu.pcie
        links.append(GpuLinks(
            index=gpu.index, name=gpu.name, nvlink_version=nvlink_version_name(gpu.nvlink_version, gpu.name),
            nvlink_active=gpu.nvlink_active, nvlink_total=gpu.nvlink_total,
            pcie_gen=pcie.max_gen if pcie else None, pcie_width=pcie.max_width if pcie else None))
    return tuple(links)


def selected_links(request: ProbeRequest) -> list[GpuLinks]:
    """The request's GPUs' link facts, in the order it names them (every GPU by default)."""
    if request.gpus is None:
        return list(request.gpu_links)
    by_index = {link.index: link for link in request.gpu_links}
    return [by_index[index] for index in request.gpus if index in by_index]


def describe_transport(facts: NcclLogFacts | None) -> Transport:
    """How NCCL carried the traffic, from its own log: kind, channels, GDR, details."""
    if facts is None:
        return Transport()
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
    return Transport(kind=kind, channels=facts.channels, gdr=gdr, nvls_channels=facts.nvls_channels,
                     details=tuple(details), logged=True)


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


def assemble(run: WorkerRun, budget_s: float, **measured: Any) -> ProbeResult:
    """The probe result from a finished (or killed) worker run.

    `measured` (JSON form) stands in for the worker's result file, for an engine that
    reads its measurements from the process output (nccl-tests).
    """
    facts = None
    try:
        facts = parse_nccl_log(run.log)
    except ParseError:
        facts = None
    result: dict[str, Any] = {**(run.result or {}), **measured}
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
    result.setdefault("net_plugin", net_plugin_of(facts))
    result["busbw_gbps"] = result["sizes"][-1]["busbw_gbps"] if result["sizes"] else None
    if isinstance(result.get("timings"), dict):
        # The worker's own marks count from its start; this is its end as the parent saw it.
        result["timings"] = {**result["timings"], "exited": round(run.duration_s, 4)}
    result["nccl_warnings"] = [line.message for line in facts.warnings][:10] if facts else []
    return dataclasses.replace(ProbeResult.from_json(result), transport=describe_transport(facts))


def net_plugin_of(facts: NcclLogFacts | None) -> str | None:
    """The network plugin NCCL loaded and its version (`aws-ofi-nccl 1.14.2`), as the report's versions carry it."""
    return facts.net_plugin_version[:80] if facts is not None and facts.net_plugin_version else None
