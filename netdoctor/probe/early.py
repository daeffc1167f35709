"""The all-reduce started before discovery, and taken up once discovery has the facts it needs.

The worker's own time (CUDA contexts, NCCL init, measuring, exit: ~1.6 s on 2x H200) is most of
`netdoctor probe`, so it starts as early as it can: `netdoctor probe` starts it as soon as its
command line is read, `check` once NVML has read the GPUs at rest (netdoctor.traffic.early_allreduce).
What only discovery and the rule pack know, the GPUs' links and the pass fraction, reaches the
worker afterwards through `ProbeRequest.later`. Light on purpose: no inventory, no checks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

from netdoctor.host.sysfs import RootedSysTree
from netdoctor.host.visibility import bound_gpu_count
from netdoctor.probe.result import MIN_PROBE_BUDGET_S, LaterFacts, ProbeRequest, ProbeResult
from netdoctor.util import Background, DeadlineExceeded


def start_early_allreduce(sys: RootedSysTree, *, budget_s: float, gpus: tuple[int, ...] | None, engine: str,
                          before: Callable[[], object] | None = None) -> EarlyAllReduce | None:
    """The all-reduce, started now where it can start before discovery: a live node whose PCI
    bus (`sys`) has at least two GPUs bound to the nvidia driver, an engine that can wait for
    discovery's facts, a request the probe accepts. Otherwise None (the caller runs it after
    discovery, which says why it did not run)."""
    if budget_s < MIN_PROBE_BUDGET_S:
        return None
    try:
        from netdoctor.probe.dispatch import refusal, starts_early
    except ImportError:         # run_allreduce says the probe is not available
        return None
    if not starts_early(engine) or bound_gpu_count(sys) < 2:
        return None
    request = ProbeRequest(budget_s=budget_s, pass_fraction=1.0, gpus=gpus, engine=engine, later=LaterFacts())
    return EarlyAllReduce(request, before) if refusal(request, None) is None else None


class EarlyAllReduce:
    """The all-reduce started before discovery, taken up by netdoctor.traffic.run_allreduce.

    Once `before` has returned (NVML read, where other checks judge the GPUs at rest), its
    worker loads CUDA and NCCL and measures while the rest of discovery runs
    (benchmarks/results/probe-speed.md); what only discovery and the pack know (the GPUs'
    links, the pass fraction) reaches it through `later`.
    """

    def __init__(self, request: ProbeRequest, before: Callable[[], object] | None = None) -> None:
        assert request.later is not None
        self.request, self.later, self._before = request, request.later, before
        self.started = time.monotonic()
        self.deadline = self.started + request.budget_s
        self._job = Background("nccl-probe", self._run)

    def _run(self) -> ProbeResult | None:
        """The result; None when cancelled while NVML was read."""
        from netdoctor.probe import run_probe

        if self._before is not None:
            with contextlib.suppress(Exception):    # discovery reports NVML's own failure
                self._before()
        if self.later.wait(0.0) is None:
            return None
        # The probe's own budget ends where this one does: NVML's time came out of it.
        return run_probe(dataclasses.replace(self.request, budget_s=self.deadline - time.monotonic()))

    def cancel(self) -> None:
        """No longer wanted: the worker's group is stopped (a no-op once `result` resolved it)."""
        self.later.cancel()

    def result(self, request: ProbeRequest, node_gpus: tuple[int, ...] | None) -> ProbeResult:
        """The result for `request` (discovery's facts, the pack's fraction), as run_probe gives it."""
        from netdoctor.probe.dispatch import finished, refusal

        refused = refusal(request, node_gpus)
        if refused is not None:
            self.cancel()
            return finished(refused, request, self.started)
        self.later.resolve(request.gpu_links, request.pass_fraction)
        result = self._job.result(self.deadline + 0.5)
        if result is None:                            # it was cancelled before it started
            raise DeadlineExceeded("nccl-probe")
        return result
