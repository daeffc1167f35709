"""What a probe engine is asked (`ProbeRequest`) and what it answers (`ProbeResult`).

Pure data: no I/O, nothing heavy to import, so checks read it without pulling in the
engines. `ProbeResult.to_json()` is the report's `probe` section (docs/probe.md), key for
key as the engines have always written it; `from_json` reads one back (the worker's
result file, recorded results in tests).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import asdict, field, fields
from typing import Any

from netdoctor.probe.expectation import GpuLinks
from netdoctor.records import record

# Outcomes (ProbeResult.status) and the reason codes that say "nothing to probe here" where
# discovery found no more GPUs either (plugins/nccl_probe.py: GPUs CUDA cannot open are `unknown`).
STATUSES = ("ok", "skipped", "error", "timeout", "wrong-result")
NOT_APPLICABLE = frozenset({"single-gpu", "no-gpus", "no-driver"})
NO_LOG = "no NCCL log lines captured"
# The least budget the probe accepts. Below it a healthy node cannot finish, and being
# killed for that is not a hang: run_probe (netdoctor.probe.dispatch) refuses at once (status "error", reason_code
# "budget-too-short"; the check says `unknown`). Measured on 2x H200 (benchmarks/results/
# probe.md; the reviewer's `check --deadline 2` run): worker start, libcuda/libnccl load,
# cuInit and contexts ~0.6 s and NCCL init alone up to ~1.4 s, before the all-reduces
# (0.3-0.6 s), the localisation reserve (0.5 s) and tear-down (0.25 s) are spent.
MIN_PROBE_BUDGET_S = 3.0


def _omit_none(pairs: Mapping[str, Any], keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`pairs` without the keys whose value is None, except those in `keep` (always written)."""
    return {key: value for key, value in pairs.items() if value is not None or key in keep}


# Keys of the report's `probe` section written even when null.
_ALWAYS = frozenset({"nccl_version", "busbw_gbps"})


def _ints(values: Any) -> tuple[int, ...]:
    return tuple(value for value in values or () if isinstance(value, int) and not isinstance(value, bool))


class LaterFacts:
    """What discovery tells a probe that started before discovery finished: every GPU's links
    and the pack's pass fraction (`resolve`), or that the probe is no longer wanted (`cancel`:
    discovery timed out, the run failed). Set once; the first of the two wins."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self._value: tuple[tuple[GpuLinks, ...], float] | None = None

    def resolve(self, gpu_links: tuple[GpuLinks, ...], pass_fraction: float) -> None:
        if not self._set.is_set():
            self._value = (gpu_links, pass_fraction)
            self._set.set()

    def cancel(self) -> None:
        self._set.set()

    def wait(self, timeout_s: float) -> tuple[tuple[GpuLinks, ...], float] | None | bool:
        """The facts; None when cancelled; False when neither came within `timeout_s`."""
        if not self._set.wait(max(timeout_s, 0.0)):
            return False
        return self._value


class ProbeCancelled(Exception):
    """The pipeline no longer wants a probe it started early (LaterFacts.cancel)."""


@record(frozen=True)
class ProbeRequest:
    """One probe run as the pipeline asks for it.

    `pass_fraction` is the pack's `[nccl-probe] pass_fraction`: below that fraction of the
    expected busbw an engine that can spends what is left of its budget on localisation.
    """

    budget_s: float
    pass_fraction: float
    gpus: tuple[int, ...] | None = None          # None: every GPU
    engine: str = "auto"
    sizes: tuple[int, ...] = ()                  # () : the engine's default sizes
    env: Mapping[str, str] | None = None         # None: this process's environment
    # Every GPU's link facts as discovery found them (`engine.gpu_links_of`): the bandwidth
    # model's input and the GPU count; the probe does not ask NVML again.
    gpu_links: tuple[GpuLinks, ...] = ()
    # Set when the probe starts before discovery has finished: `gpu_links` and `pass_fraction`
    # then come from here once known (an engine that cannot wait for them is not started early).
    later: LaterFacts | None = field(default=None, compare=False)


@record(frozen=True)
class SizeRow:
    """One message size measured: time, algorithm and bus bandwidth, verification."""

    bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    verified: bool
    count: int | None = None                     # the worker's own bookkeeping, nccl-tests has none
    iterations: int | None = None
    warmup: int | None = None
    wrong_elements: int | None = None

    def to_json(self) -> dict[str, Any]:
        return _omit_none({"bytes": self.bytes, "count": self.count, "iterations": self.iterations,
                           "warmup": self.warmup, "time_us": self.time_us, "algbw_gbps": self.algbw_gbps,
                           "busbw_gbps": self.busbw_gbps, "verified": self.verified,
                           "wrong_elements": self.wrong_elements})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SizeRow:
        return cls(bytes=int(data["bytes"]), time_us=data.get("time_us"), algbw_gbps=data.get("algbw_gbps"),
                   busbw_gbps=data["busbw_gbps"], verified=bool(data.get("verified")), count=data.get("count"),
                   iterations=data.get("iterations"), warmup=data.get("warmup"),
                   wrong_elements=data.get("wrong_elements"))


@record(frozen=True)
class LocalisationRow:
    """One localisation run: a GPU's host<->device copy (`copy`) or a neighbour pair's all-reduce (`pair`)."""

    kind: str
    gpus: tuple[int, ...]
    direction: str | None = None                 # copies: host-to-device | device-to-host
    bytes: int | None = None
    gbps: float | None = None                    # copies
    busbw_gbps: float | None = None              # pairs
    verified: bool | None = None
    skipped: str | None = None                   # a pair left out, and why

    def to_json(self) -> dict[str, Any]:
        return _omit_none({"kind": self.kind, "direction": self.direction, "gpus": list(self.gpus),
                           "bytes": self.bytes, "gbps": self.gbps, "busbw_gbps": self.busbw_gbps,
                           "verified": self.verified, "skipped": self.skipped})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LocalisationRow:
        return cls(kind=str(data.get("kind")), gpus=_ints(data.get("gpus")), direction=data.get("direction"),
                   bytes=data.get("bytes"), gbps=data.get("gbps"), busbw_gbps=data.get("busbw_gbps"),
                   verified=data.get("verified"), skipped=data.get("skipped"))


@record(frozen=True)
class Transport:
    """How NCCL carried the traffic, from its own log."""

    kind: str | None = None                      # P2P/NVLink, P2P, SHM, NET/IB, NET/Socket, ...
    channels: int | None = None
    gdr: bool | None = None                      # GPUDirect RDMA, for NET transports
    nvls_channels: int | None = None
    details: tuple[str, ...] = (NO_LOG,)
    logged: bool = False                         # False: no NCCL log lines were captured

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "channels": self.channels, "gdr": self.gdr}
        if self.logged:
            data["nvls_channels"] = self.nvls_channels
        data["details"] = list(self.details)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Transport:
        data = data or {}
        return cls(kind=data.get("kind"), channels=data.get("channels"), gdr=data.get("gdr"),
                   nvls_channels=data.get("nvls_channels"), details=tuple(data.get("details") or (NO_LOG,)),
                   logged="nvls_channels" in data)


def _gpu_links(entry: Mapping[str, Any]) -> GpuLinks:
    return GpuLinks(**{item.name: entry.get(item.name) for item in fields(GpuLinks)})


@record(frozen=True)
class ProbeDevice:
    """A GPU as CUDA named it to the worker."""

    index: int
    name: str | None = None
    pci_bus_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "pci_bus_id": self.pci_bus_id}


@record(frozen=True)
class ProbeResult:
    """One probe run, whatever its outcome (docs/probe.md lists the fields)."""

    status: str                                  # one of STATUSES
    reason: str = ""
    reason_code: str | None = None               # why not ok: no-driver, no-nccl, budget-too-short, init-timeout, ...
    engine: str = "nccl"
    gpus: tuple[int, ...] = ()
    gpu_count: int = 0
    sizes: tuple[SizeRow, ...] = ()
    busbw_gbps: float | None = None              # at the largest size
    transport: Transport = field(default_factory=Transport)
    localisation: tuple[LocalisationRow, ...] = ()
    gpu_links: tuple[GpuLinks, ...] | None = None   # None: the engine did not get as far as NVML
    devices: tuple[ProbeDevice, ...] | None = None
    nccl_version: str | None = None
    net_plugin: str | None = None                # NCCL's network plugin and its version: `aws-ofi-nccl 1.14.2`
    nccl_warnings: tuple[str, ...] | None = None
    duration_s: float = 0.0
    timeout_phase: str | None = None             # nccl-init | all-reduce
    truncated: str | None = None                 # the budget ran out before this size
    budget_s: float | None = None                # budget-too-short: what it got and needs
    min_budget_s: float | None = None
    # The worker's own account of itself, carried into the report as it wrote it.
    timings: Mapping[str, float] | None = None
    cuda_driver_version: int | None = None
    nccl_library: str | None = None
    verification: str | None = None
    worker_s: float | None = None

    @property
    def not_applicable(self) -> bool:
        """CUDA found nothing to probe (fewer than two GPUs, no driver, no GPU): a skip where the
        node has no more GPUs than that (the check decides, against the inventory)."""
        return self.status == "skipped" and self.reason_code in NOT_APPLICABLE

    @property
    def largest(self) -> SizeRow | None:
        return max(self.sizes, key=lambda row: row.bytes) if self.sizes else None

    def to_json(self) -> dict[str, Any]:
        """The report's `probe` section."""
        links = None if self.gpu_links is None else [asdict(link) for link in self.gpu_links]
        devices = None if self.devices is None else [device.to_json() for device in self.devices]
        warnings = None if self.nccl_warnings is None else list(self.nccl_warnings)
        return _omit_none({
            "status": self.status, "reason": self.reason, "reason_code": self.reason_code,
            "sizes": [row.to_json() for row in self.sizes],
            "localisation": [row.to_json() for row in self.localisation],
            "timings": None if self.timings is None else dict(self.timings),
            "cuda_driver_version": self.cuda_driver_version, "gpus": list(self.gpus), "gpu_count": self.gpu_count,
            "nccl_version": self.nccl_version, "net_plugin": self.net_plugin, "nccl_library": self.nccl_library,
            "devices": devices,
            "verification": self.verification,
            "truncated": self.truncated, "worker_s": self.worker_s, "timeout_phase": self.timeout_phase,
            "busbw_gbps": self.busbw_gbps, "transport": self.transport.to_json(), "nccl_warnings": warnings,
            "engine": self.engine, "gpu_links": links, "budget_s": self.budget_s,
            "min_budget_s": self.min_budget_s, "duration_s": self.duration_s,
        }, _ALWAYS)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProbeResult:
        """A result from its JSON form; what does not fit the types is left out, never raised."""
        links = data.get("gpu_links")
        devices = data.get("devices")
        warnings = data.get("nccl_warnings")
        return cls(
            status=str(data.get("status") or "error"), reason=str(data.get("reason") or ""),
            reason_code=data.get("reason_code"), engine=str(data.get("engine") or "nccl"),
            gpus=_ints(data.get("gpus")), gpu_count=int(data.get("gpu_count") or len(_ints(data.get("gpus")))),
            sizes=tuple(SizeRow.from_json(row) for row in data.get("sizes") or ()
                        if isinstance(row, Mapping) and "bytes" in row and "busbw_gbps" in row),
            busbw_gbps=data.get("busbw_gbps"), transport=Transport.from_json(data.get("transport")),
            localisation=tuple(LocalisationRow.from_json(row) for row in data.get("localisation") or ()
                               if isinstance(row, Mapping)),
            gpu_links=None if links is None else tuple(_gpu_links(entry) for entry in links
                                                      if isinstance(entry, Mapping) and "index" in entry),
            devices=None if devices is None else tuple(
                ProbeDevice(entry["index"], entry.get("name") or None, entry.get("pci_bus_id"))
                for entry in devices if isinstance(entry, Mapping) and isinstance(entry.get("index"), int)),
            nccl_version=data.get("nccl_version"),
            net_plugin=data.get("net_plugin") if isinstance(data.get("net_plugin"), str) else None,
            nccl_warnings=None if warnings is None else tuple(str(line) for line in warnings),
            duration_s=float(data.get("duration_s") or 0.0), timeout_phase=data.get("timeout_phase"),
            truncated=data.get("truncated"), budget_s=data.get("budget_s"), min_budget_s=data.get("min_budget_s"),
            timings=data.get("timings"), cuda_driver_version=data.get("cuda_driver_version"),
            nccl_library=data.get("nccl_library"), verification=data.get("verification"),
            worker_s=data.get("worker_s"))


@record(frozen=True)
class ProbeNotRun:
    """The pipeline did not run the probe (`unknown=False`: not wanted or not applicable,
    the probe checks skip) or got no result from it (`unknown=True`: a hang, a crash, no
    time left; the probe checks are unknown)."""

    reason: str
    unknown: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"error": self.reason} if self.unknown else {"skipped": self.reason}
