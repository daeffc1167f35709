"""Traffic through each compute NIC: GPU memory -> NIC -> GPU memory (`nic-loopback`).

Engines, best available first:

* `nccl`: the project's worker (worker.py) as two processes on the GPU nearest the NIC,
  one NCCL rank each, made to look like two nodes (`NCCL_HOSTID`) so NCCL's network
  transport carries every byte, restricted to that one port (`NCCL_IB_HCA==mlx5_3:1`),
  with P2P and SHM off. NCCL's own log then says whether the traffic used GPUDirect RDMA
  (`via NET/IB/0/GDRDMA`), plain RDMA staged through host memory (`via NET/IB/0`), or fell
  back to TCP (`via NET/Socket/0`). The bootstrap root is netdoctor's: NCCL_COMM_ID names a
  free port on 127.0.0.1.
* `perftest`: `ib_write_bw --use_cuda=GPU` server and client on the same HCA (loopback),
  where NCCL is not installed. A run that could not register GPU memory is GPUDirect not
  available.

Rails run in parallel, in waves so that no GPU serves two rails at once; the whole check
stays within its budget and every process is stopped at the deadline by the host runner.
Loopback exercises the GPU's and NIC's PCIe path, GPUDirect and the HCA, not the cable or
the switch: those are the fleet probe's (netdoctor.fleet.probe).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from netdoctor.errors import ParseError
from netdoctor.host.ports import free_tcp_port
from netdoctor.host.runner import run_commands
from netdoctor.host.types import CommandResult, CommandSpec, CommandState
from netdoctor.parsers.nccl import parse_nccl_log
from netdoctor.parsers.perftest import parse_perftest_bw
from netdoctor.probe import engine
from netdoctor.probe.engine import MIB, worker_script
from netdoctor.records import record

# One message size, fixed iterations: both processes must run the same number of
# collectives (iterations picked by each side's own timing could differ and hang NCCL).
LOOPBACK_BYTES = 256 * MIB
LOOPBACK_ITERATIONS = 8
LOOPBACK_WARMUP = 2
MIN_RAIL_BUDGET_S = 3.0          # worker start + NCCL init (~1.5 s) + the transfers
PERFTEST_SECONDS = 2


@record(frozen=True)
class Rail:
    """One compute port to push traffic through, and the GPU whose memory it uses."""

    port: str                    # mlx5_3:1
    hca: str
    port_number: int
    gpu: int                     # CUDA index in PCI bus order (nvidia-smi's)
    gpu_basis: str               # why that GPU: "PIX in nvidia-smi topo -m"
    rate_gbps: float | None      # the port's line rate


@record(frozen=True)
class RailResult:
    port: str
    gpu: int
    engine: str
    status: str                  # ok | error | timeout
    reason: str = ""
    code: str = ""               # not-installed: the engine is missing (the next one is tried)
    bandwidth_gbps: float | None = None     # Gb/s through the NIC (busbw x 8 for NCCL, BW average for perftest)
    transport: str | None = None            # NET/IB/GDRDMA, NET/IB, NET/Socket, ... (NCCL's log)
    gdr: bool | None = None                 # GPUDirect RDMA used
    nccl_version: str | None = None
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if value not in (None, "", ())}


@record(frozen=True)
class LoopbackResult:
    engine: str | None
    rails: tuple[RailResult, ...] = ()
    skipped: str | None = None   # why no rail was measured (no engine, nothing to test)
    requested: tuple[Rail, ...] = ()

    def rail(self, port: str) -> Rail | None:
        return next((rail for rail in self.requested if rail.port == port), None)

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "rails": [rail.to_json() for rail in self.rails],
                **({"skipped": self.skipped} if self.skipped else {})}


@record(frozen=True)
class LoopbackRequest:
    rails: tuple[Rail, ...]
    budget_s: float
    engine: str = "auto"         # auto | nccl | perftest
    env: Mapping[str, str] | None = None
    tool_path: str | None = None     # PATH for perftest (None: the runner's safe default)
    worker: Path = field(default_factory=lambda: worker_script())


def waves(rails: tuple[Rail, ...]) -> list[list[Rail]]:
    """Rails grouped so that no GPU is in two rails of one wave (two NICs per GPU: two waves)."""
    result: list[list[Rail]] = []
    for rail in rails:
        wave = next((wave for wave in result if all(other.gpu != rail.gpu for other in wave)), None)
        if wave is None:
            result.append([rail])
        else:
            wave.append(rail)
    return result


def run_loopback(request: LoopbackRequest) -> LoopbackResult:
    """Measure every rail within `request.budget_s`; never raises for a GPU or NIC problem.

    `auto` tries NCCL, then perftest: an engine whose every rail says it is not installed
    hands over to the next (costing a worker start, ~0.2 s)."""
    if not request.rails:
        return LoopbackResult(None, skipped="no active compute RDMA port with a GPU to push traffic from")
    deadline = time.monotonic() + request.budget_s
    missing: list[str] = []
    for name in ("nccl", "perftest") if request.engine == "auto" else (request.engine,):
        result = _run_engine(name, request, deadline)
        if result.skipped is None:
            return replace(result, requested=request.rails)
        missing.append(result.skipped)
    return LoopbackResult(None, skipped="no traffic engine: " + "; ".join(missing), requested=request.rails)


def _run_engine(chosen: str, request: LoopbackRequest, deadline: float) -> LoopbackResult:
    groups = waves(request.rails)
    results: list[RailResult] = []
    for position, wave in enumerate(groups):
        left = deadline - time.monotonic()
        share = left / (len(groups) - position)
        if share < MIN_RAIL_BUDGET_S:
            results += [RailResult(rail.port, rail.gpu, chosen, "error", f"no time left for this rail ({share:.1f} s; "
                                   f"it needs {MIN_RAIL_BUDGET_S:g} s): raise --deadline") for rail in wave]
            continue
        measure = _nccl_rail if chosen == "nccl" else _perftest_rail
        box: dict[str, RailResult] = {}
        threads = [threading.Thread(target=lambda rail=rail: box.__setitem__(rail.port, measure(request, rail, share)),
                                    name=f"loopback:{rail.port}", daemon=True) for rail in wave]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=share + 2.0)
        results += [box.get(rail.port) or RailResult(rail.port, rail.gpu, chosen, "timeout",
                                                     "the rail's processes did not end in time") for rail in wave]
        if position == 0 and all(result.code == "not-installed" for result in results):
            return LoopbackResult(chosen, skipped=results[0].reason)
    return LoopbackResult(chosen, tuple(results))


def _nccl_rail(request: LoopbackRequest, rail: Rail, budget_s: float) -> RailResult:
    """Two worker processes on the rail's GPU, ranks 0 and 1, talking through the one port."""
    port = free_tcp_port()
    base = engine.worker_environment(request.env)
    base.pop("CUDA_VISIBLE_DEVICES", None)      # GPU indices are nvidia-smi's (PCI bus order)
    base.update({"NCCL_COMM_ID": f"127.0.0.1:{port}", "NCCL_IB_HCA": f"={rail.hca}:{rail.port_number}",
                 "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    runs: dict[int, engine.WorkerRun] = {}
    with tempfile.TemporaryDirectory(prefix="netdoctor-loopback-") as directory:
        def start(rank: int) -> None:
            result_path = Path(directory) / f"rank{rank}.json"
            config = {"gpus": [rail.gpu], "sizes": [LOOPBACK_BYTES], "iterations": LOOPBACK_ITERATIONS,
                      "warmup": LOOPBACK_WARMUP, "nranks": 2, "rank_base": rank, "budget_s": max(budget_s - 0.3, 0.5),
                      "localise_below_gbps": None, "nccl_library": engine.nccl_library(base)}
            env = {**base, "NCCL_HOSTID": f"netdoctor-loopback-{rail.hca}-{rank}"}
            argv = engine.worker_argv(request.worker, config, result_path)
            runs[rank] = engine.run_worker(argv, env, budget_s, result_path)

        threads = [threading.Thread(target=start, args=(rank,), daemon=True) for rank in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=budget_s + 2.0)
    return rail_from_runs(rail, [runs[rank] for rank in (0, 1) if rank in runs], budget_s)


def rail_from_runs(rail: Rail, runs: list[engine.WorkerRun], budget_s: float) -> RailResult:
    """One rail's result from its two ranks: the slower rank's bandwidth, NCCL's transport."""
    results = [engine.assemble(run, budget_s) for run in runs]
    log_text = "\n".join(run.log for run in runs)
    try:
        facts = parse_nccl_log(log_text)
    except ParseError:
        facts = None
    transport = facts.net_transport() if facts else None
    gdr = None if transport is None else transport.endswith("/GDRDMA")
    version = next((result.nccl_version for result in results if result.nccl_version), None)
    warnings = tuple(dict.fromkeys(warning for result in results for warning in result.nccl_warnings))[:5]
    bad = next((result for result in results if result.status != "ok"), None)
    if len(results) < 2 or bad is not None:
        status = bad.status if bad is not None else "timeout"
        reason = bad.reason if bad is not None else "a rank's process did not report"
        code = "not-installed" if bad is not None and bad.reason_code == "no-nccl" else ""
        return RailResult(rail.port, rail.gpu, "nccl", "timeout" if status == "timeout" else "error", reason, code,
                          transport=transport, gdr=gdr, nccl_version=version, warnings=warnings)
    busbw = min(result.busbw_gbps for result in results if result.busbw_gbps is not None)
    return RailResult(rail.port, rail.gpu, "nccl", "ok", bandwidth_gbps=round(busbw * 8, 1), transport=transport,
                      gdr=gdr, nccl_version=version, warnings=warnings)


def _perftest_rail(request: LoopbackRequest, rail: Rail, budget_s: float) -> RailResult:
    """ib_write_bw server and client on the same HCA port, GPU memory on both ends."""
    port = free_tcp_port()
    common = ("-d", rail.hca, "-i", str(rail.port_number), f"--use_cuda={rail.gpu}", "-D", str(PERFTEST_SECONDS),
              "--report_gbits", "-F", "-p", str(port))
    timeout = max(budget_s - 0.2, 1.0)
    server = CommandSpec(f"ib_write_bw-server-{rail.hca}", ("ib_write_bw", *common), timeout_s=timeout)
    client = CommandSpec(f"ib_write_bw-client-{rail.hca}", ("ib_write_bw", *common, "127.0.0.1"), timeout_s=timeout)
    results: dict[str, CommandResult] = {}

    def run(spec: CommandSpec, delay: float) -> None:
        time.sleep(delay)                 # the client connects once the server listens
        results.update(run_commands([spec], path=request.tool_path))

    threads = [threading.Thread(target=run, args=(server, 0.0), daemon=True),
               threading.Thread(target=run, args=(client, 0.3), daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout + 2.0)
    return rail_from_perftest(rail, results.get(server.name), results.get(client.name))


def rail_from_perftest(rail: Rail, server: CommandResult | None, client: CommandResult | None) -> RailResult:
    if server is not None and server.state is CommandState.MISSING:
        return RailResult(rail.port, rail.gpu, "perftest", "error", "perftest's ib_write_bw is not installed",
                          "not-installed")
    for result in (client, server):
        if result is None or result.state is CommandState.TIMEOUT:
            return RailResult(rail.port, rail.gpu, "perftest", "timeout", "ib_write_bw did not finish in time")
    assert server is not None and client is not None
    try:
        run = parse_perftest_bw(client.stdout)
    except ParseError as error:
        tail = " | ".join((client.stderr or client.stdout or server.stderr).strip().splitlines()[-2:])
        why = f"ib_write_bw --use_cuda failed ({tail[:200] or error})"
        # perftest registers GPU memory with the HCA: failing that is GPUDirect RDMA not available.
        gdr = False if "MR" in tail or "allocate" in tail.lower() else None
        return RailResult(rail.port, rail.gpu, "perftest", "error", why, gdr=gdr)
    return RailResult(rail.port, rail.gpu, "perftest", "ok", bandwidth_gbps=round(run.bandwidth_gbps, 1),
                      transport=f"RDMA_Write/{run.link_type or 'IB'}/GPU memory", gdr=True)

