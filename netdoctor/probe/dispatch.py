"""`run_probe`: check a probe request, refuse what cannot run, hand it to its engine.

Adding an engine: a class with `name` and `run(request) -> ProbeResult` (see
netdoctor.probe.engine.ProbeEngine) and a line in ENGINES; `--engine NAME` selects it.
"""

from __future__ import annotations

import dataclasses
import time

from netdoctor.probe.engine import MIN_PROBE_BUDGET_S, DEFAULT_SIZES, ProbeEngine, skipped
from netdoctor.probe.nccl_tests import NcclTestsEngine
from netdoctor.probe.nccl_worker import NcclWorkerEngine
from netdoctor.probe.result import ProbeRequest, ProbeResult

ENGINES: dict[str, ProbeEngine] = {engine.name: engine for engine in (NcclWorkerEngine(), NcclTestsEngine())}
DEFAULT_ENGINE = "nccl"          # what `--engine auto` runs


def engine_names() -> tuple[str, ...]:
    return ("auto", *ENGINES)


def starts_early(engine: str) -> bool:
    """Can this engine start before discovery has finished (ProbeRequest.later)?"""
    return getattr(ENGINES.get(DEFAULT_ENGINE if engine == "auto" else engine), "starts_early", False)


def run_probe(request: ProbeRequest, *, node_gpus: tuple[int, ...] | None = None) -> ProbeResult:
    """Run the probe within `request.budget_s`; never raises for GPU problems.

    `node_gpus`: the GPUs discovery found, when it could tell (NVML usable); with fewer
    than two the probe skips at once.
    """
    started = time.monotonic()
    result = refusal(request, node_gpus)
    if result is None:
        request = dataclasses.replace(request, sizes=tuple(sorted(set(request.sizes or DEFAULT_SIZES))))
        result = ENGINES[DEFAULT_ENGINE if request.engine == "auto" else request.engine].run(request)
        links = result.gpu_links or ()
        if not result.gpus and links:
            result = dataclasses.replace(result, gpus=tuple(link.index for link in links), gpu_count=len(links))
        if result.reason_code in ("no-driver", "no-gpus") and links:
            # NVML sees GPUs but CUDA does not: a broken driver install, not a GPU-less node.
            result = dataclasses.replace(result, status="error", reason=f"NVML reports {len(links)} GPU(s) but CUDA "
                                         f"cannot use them: {result.reason}")
    return finished(result, request, started)


def finished(result: ProbeResult, request: ProbeRequest, started: float) -> ProbeResult:
    """`result` naming the engine that ran and how long the probe took since `started`."""
    return dataclasses.replace(result, engine=request.engine if request.engine in ENGINES else DEFAULT_ENGINE,
                               duration_s=round(time.monotonic() - started, 3))


def refusal(request: ProbeRequest, node_gpus: tuple[int, ...] | None) -> ProbeResult | None:
    """The result of a request that is not run at all, or None to run it."""
    sizes = sorted(set(request.sizes or DEFAULT_SIZES))
    if any(size < 4 or size % 4 for size in sizes):
        return skipped(f"message sizes must be positive multiples of 4 bytes, got {sizes}", "bad-sizes",
                       status="error")
    fraction = request.pass_fraction
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 2:
        return skipped(f"localisation fraction (the pack's pass_fraction) must be in (0, 2], got {fraction!r}",
                       "bad-fraction", status="error")
    if request.engine not in engine_names():
        return skipped(f"unknown probe engine {request.engine!r} ({', '.join(engine_names())})", "bad-engine",
                       status="error")
    if node_gpus is not None and request.gpus is None and len(node_gpus) < 2:
        return skipped(f"{len(node_gpus)} GPU(s) on this node: an all-reduce needs at least 2",
                       "single-gpu" if node_gpus else "no-gpus", gpu_count=len(node_gpus), gpus=node_gpus)
    if request.budget_s < MIN_PROBE_BUDGET_S:
        return skipped(f"the probe needs at least {MIN_PROBE_BUDGET_S:g} s; it got {request.budget_s:.1f} s: "
                       "raise --deadline/--budget", "budget-too-short", status="error",
                       gpus=request.gpus or (), gpu_count=len(request.gpus or ()),
                       budget_s=round(request.budget_s, 3), min_budget_s=MIN_PROBE_BUDGET_S)
    return None
