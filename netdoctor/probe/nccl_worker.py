"""The `nccl` engine: netdoctor's own worker (worker.py), ctypes on libcuda and libnccl.

One process, every selected GPU, verified all-reduces; below the pack's pass fraction
of the expected busbw it localises the slow GPU or link with what is left of its budget.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import IO

from netdoctor.probe import engine
from netdoctor.probe.expectation import GpuLinks, expected_busbw
from netdoctor.probe.result import ProbeCancelled, ProbeRequest, ProbeResult

WORKER = Path(__file__).with_name("worker.py")
# Seconds of the budget kept for localisation, and kept back for the parent's own end.
LOCALISE_RESERVE_S = 0.5
PARENT_RESERVE_S = 0.2
# config["localise_below_gbps"] of a worker that reads its threshold from stdin; the same
# string as worker.THRESHOLD_ON_STDIN (the worker script imports nothing of netdoctor's).
THRESHOLD_ON_STDIN = "stdin"


def localise_threshold(gpu_links: list[GpuLinks], gpus: tuple[int, ...] | None, largest: int,
                       fraction: float) -> float | None:
    """The busbw (GB/s) under which the worker localises: the pack's pass fraction of the expected level."""
    selected = [link for link in gpu_links if gpus is None or link.index in gpus]
    expectation = expected_busbw(selected, largest)
    return None if expectation.busbw_gbps is None else round(expectation.busbw_gbps * fraction, 2)


class NcclWorkerEngine:
    name = "nccl"
    # Started before discovery has finished (ProbeRequest.later): the worker loads CUDA and
    # NCCL and measures while discovery runs, and gets its localisation threshold on stdin.
    starts_early = True

    def run(self, request: ProbeRequest) -> ProbeResult:
        started = time.monotonic()
        gpus = None if request.gpus is None else list(request.gpus)
        gpu_links = engine.selected_links(request)
        later: dict[str, tuple[GpuLinks, ...]] = {}
        if request.later is None:
            threshold: float | str | None = localise_threshold(gpu_links, request.gpus, request.sizes[-1],
                                                               request.pass_fraction)
        else:
            threshold = THRESHOLD_ON_STDIN
        env = engine.worker_environment(request.env)
        with tempfile.TemporaryDirectory(prefix="netdoctor-probe-") as directory:
            result_path = Path(directory) / "result.json"
            config = {"gpus": gpus, "sizes": list(request.sizes),
                      "budget_s": max(request.budget_s - PARENT_RESERVE_S, 0.1),
                      "localise_below_gbps": threshold, "localise_reserve_s": LOCALISE_RESERVE_S,
                      "nccl_library": engine.nccl_library(env),
                      # 0.35 s (1 GiB gets 40 %: ~40 iterations on 2 H200s, nccl-tests' default is
                      # 20) measured busbw within 2 % of nccl-tests' in the same run
                      # (benchmarks/results/probe-speed.md); longer adds to every prolog run.
                      "measure_s": max(0.3, min(0.35, request.budget_s * 0.1))}
            argv = engine.worker_argv(WORKER, config, result_path)
            left = request.budget_s - (time.monotonic() - started)
            send = None if request.later is None else (
                lambda stdin: later.update(links=send_threshold(request, stdin, started + request.budget_s)))
            try:
                run = engine.run_worker(argv, env, left, result_path, while_running=send)
            except ProbeCancelled:
                return engine.skipped("the run no longer needs the probe", "cancelled", status="error")
        links = later.get("links", tuple(gpu_links))
        return dataclasses.replace(engine.assemble(run, request.budget_s), gpu_links=links)


def send_threshold(request: ProbeRequest, stdin: IO[bytes], until: float) -> tuple[GpuLinks, ...]:
    """Wait for discovery's facts, hand the worker its localisation threshold, return the links.

    Cancelled: raises ProbeCancelled, which stops the worker's process group. Not known by
    the worker's end: stdin closes without a line (no localisation)."""
    assert request.later is not None
    facts = request.later.wait(until - time.monotonic())
    if facts is None:
        raise ProbeCancelled()
    if facts is False:
        return ()
    gpu_links, pass_fraction = facts
    threshold = localise_threshold(list(gpu_links), request.gpus, request.sizes[-1], pass_fraction)
    with contextlib.suppress(OSError):     # a worker that already left (skipped, failed)
        stdin.write(json.dumps({"localise_below_gbps": threshold}).encode() + b"\n")
        stdin.flush()
    return tuple(engine.selected_links(dataclasses.replace(request, gpu_links=gpu_links)))
