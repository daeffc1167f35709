"""The `nccl` engine: netdoctor's own worker (worker.py), ctypes on libcuda and libnccl.

One process, every selected GPU, verified all-reduces; below the pack's pass fraction
of the expected busbw it localises the slow GPU or link with what is left of its budget.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

from netdoctor.probe import engine
from netdoctor.probe.expectation import GpuLinks, expected_busbw
from netdoctor.probe.result import ProbeRequest, ProbeResult

WORKER = Path(__file__).with_name("worker.py")
# Seconds of the budget kept for localisation, and kept back for the parent's own end.
LOCALISE_RESERVE_S = 0.5
PARENT_RESERVE_S = 0.2


def localise_threshold(gpu_links: list[GpuLinks], gpus: tuple[int, ...] | None, largest: int,
                       fraction: float) -> float | None:
    """The busbw (GB/s) under which the worker localises: the pack's pass fraction of the expected level."""
    selected = [link for link in gpu_links if gpus is None or link.index in gpus]
    expectation = expected_busbw(selected, largest)
    return None if expectation.busbw_gbps is None else round(expectation.busbw_gbps * fraction, 2)


class NcclWorkerEngine:
    name = "nccl"

    def run(self, request: ProbeRequest) -> ProbeResult:
        started = time.monotonic()
        gpus = None if request.gpus is None else list(request.gpus)
        gpu_links = engine.selected_links(request)
        threshold = localise_threshold(gpu_links, request.gpus, request.sizes[-1], request.pass_fraction)
        env = engine.worker_environment(request.env)
        with tempfile.TemporaryDirectory(prefix="netdoctor-probe-") as directory:
            result_path = Path(directory) / "result.json"
            config = {"gpus": gpus, "sizes": list(request.sizes),
                      "budget_s": max(request.budget_s - PARENT_RESERVE_S, 0.1),
                      "localise_below_gbps": threshold, "localise_reserve_s": LOCALISE_RESERVE_S,
                      "nccl_library": engine.nccl_library(env),
                      # Measuring longer than ~0.6 s changes busbw by < 1 % (benchmarks/results/probe.md)
                      # but adds to every prolog run; small budgets get 10 % of their time.
                      "measure_s": max(0.3, min(0.6, request.budget_s * 0.1))}
            argv = engine.worker_argv(WORKER, config, result_path)
            left = request.budget_s - (time.monotonic() - started)
            run = engine.run_worker(argv, env, left, result_path)
        return dataclasses.replace(engine.assemble(run, request.budget_s), gpu_links=tuple(gpu_links))
