"""`nvlink`: are every GPU's NVLinks up, alike, and free of growing errors?

On an NVSwitch node each GPU reaches the others over its NVLinks (18 NVLink 4.0 links on an
H100/H200 SXM). A link that trained down or dropped leaves the GPU running: NCCL routes
around it and the all-reduce runs slower on every step, or a GPU falls back to PCIe. Replay
and recovery counters that grow mean a marginal link that will drop under load.

Counts come from NVML (per link where the driver gives it). Replay and recovery counters
are judged by their growth since the last run (the same history and `--baseline` as
`error-counters`), CRC counters are only shown: a healthy, idle 2x H200 showed 0-29 CRC-data
errors per link, and each 1 GiB all-reduce added up to 29 more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.checks.api import majority
from netdoctor.checks.history import nvlink_key
from netdoctor.inventory.model import NVLINK_ERROR_COUNTERS, Gpu
from netdoctor.probe.expectation import nvlink_version_name
from netdoctor.util import duration_text

CHECK_ID = "nvlink"
REMEDY_DOWN = ("reset the GPU when idle (`nvidia-smi -r -i N`) or reboot; if the links stay down, reseat the GPU "
               "tray / baseboard and open a hardware case (NVLink down is a board or NVSwitch fault)")
REMEDY_ERRORS = ("drain the node and run the NVLink diagnostics (`dcgmi diag -r 3` or the vendor's field "
                 "diagnostics); growing replay/recovery errors mean a marginal link that will drop under load")


@check(CHECK_ID, "NVLinks per GPU: active vs expected, link state, speed and version alike, error counters by growth",
       needs=("nvlink",), order=72)
def nvlink(ctx: CheckContext) -> Iterator[Finding]:
    gpus = sorted(ctx.inventory.gpus, key=lambda gpu: gpu.index)
    with_links = [gpu for gpu in gpus if gpu.nvlink_total]
    expected = int(ctx.rule("expected_links")) or _majority([gpu.nvlink_total for gpu in with_links])
    versions = _majority([gpu.nvlink_version for gpu in with_links if gpu.nvlink_version is not None])
    speeds = _majority([link.speed_mbps for gpu in with_links for link in gpu.nvlinks
                        if link.active and link.speed_mbps])
    for gpu in gpus:
        yield from _judge_gpu(ctx, gpu, expected, versions, speeds)


def _judge_gpu(ctx: CheckContext, gpu: Gpu, expected: int | None, node_version: int | None,
               node_speed: int | None) -> Iterator[Finding]:
    subject = f"{gpu.label} {gpu.pci_address}" if gpu.pci_address else gpu.label
    if gpu.lost:
        yield ctx.unknown(subject, "the GPU has fallen off the bus (NVML: GPU is lost): its NVLinks cannot be read")
        return
    if gpu.nvlink_total is None:
        why = gpu.nvml_errors.get("nvlink") or ctx.inventory.source("nvml").reason()
        yield ctx.unknown(subject, f"NVLink state not known ({why})")
        return
    if gpu.nvlink_total == 0:
        yield ctx.skip(subject, "no NVLinks on this GPU (PCIe card)")
        return
    active = gpu.nvlink_active or 0
    inactive = [link.link for link in gpu.nvlinks if link.active is False]
    version_name = nvlink_version_name(gpu.nvlink_version, gpu.name)
    evidence: dict[str, Any] = {"active": active, "total": gpu.nvlink_total, "expected": expected,
                                "version": gpu.nvlink_version, "inactive_links": inactive}
    problems = 0
    if expected is not None and active < expected:
        problems += 1
        links = f": link{'s' if len(inactive) > 1 else ''} {', '.join(map(str, inactive))} inactive" if inactive else ""
        yield ctx.fail(subject, f"{active} of {expected} NVLinks active{links}; NCCL routes around them and "
                       "every collective on this node slows", evidence=evidence, remedy=REMEDY_DOWN, rule="expected_links")
    if node_version is not None and gpu.nvlink_version not in (None, node_version):
        problems += 1
        yield ctx.warn(subject, f"NVLink {version_name or gpu.nvlink_version} where the node's other GPUs run "
                       f"NVLink {nvlink_version_name(node_version) or node_version}", evidence=evidence, remedy=REMEDY_DOWN)
    slow = [link for link in gpu.nvlinks if link.active and node_speed and link.speed_mbps and link.speed_mbps < node_speed]
    if slow:
        problems += 1
        yield ctx.warn(subject, f"NVLink {', '.join(str(link.link) for link in slow)} at "
                       f"{min(link.speed_mbps or 0 for link in slow)} MB/s, the node's links run at {node_speed} MB/s",
                       evidence={**evidence, "slow_links": {link.link: link.speed_mbps for link in slow}},
                       remedy=REMEDY_DOWN)
    for finding in _judge_errors(ctx, gpu, subject):
        problems += 1
        yield finding
    if not problems:
        speed = f", {gpu.nvlinks[0].speed_mbps / 1000:g} GB/s each" if gpu.nvlinks and gpu.nvlinks[0].speed_mbps else ""
        version = f" (NVLink {version_name}{speed})" if version_name else ""
        yield ctx.passed(subject, f"{active}/{gpu.nvlink_total} NVLinks active{version}", evidence=evidence)


def _judge_errors(ctx: CheckContext, gpu: Gpu, subject: str) -> Iterator[Finding]:
    """Growth of the judged counters since the last reading of this boot (as a rate per hour
    over at least `rate_min_interval_s`), else their level.

    Only `judged_counters` are judged (replay, recovery). CRC counters are not: on a healthy
    2x H200 one 1 GiB all-reduce added 1-29 CRC-data errors per link (corrected by replay,
    measured on the device tool's machine); without the traffic in between, their growth
    cannot be told from load.
    """
    judged = set(ctx.rule("judged_counters"))
    history = ctx.history
    elapsed_s = history.elapsed_s if history is not None and 0 < history.elapsed_s <= float(ctx.rule("history_max_age_s")) else None
    level_warn = int(ctx.rule("error_level_warn"))
    grown: dict[str, int] = {}
    high: dict[str, int] = {}
    for link in gpu.nvlinks:
        previous = history.ports.get(nvlink_key(gpu, link.link)) if history is not None and elapsed_s else None
        for name in NVLINK_ERROR_COUNTERS:
            value = link.errors.get(name)
            before = previous.get(name) if previous is not None else None
            if value is None or name not in judged:
                continue
            if before is not None and value >= before:      # a lower value: cleared, judged by level
                if value > before:
                    grown[f"link {link.link} {name}"] = value - before
            elif value >= level_warn:
                high[f"link {link.link} {name}"] = value
    if grown and elapsed_s:
        yield from _judge_growth(ctx, subject, grown, elapsed_s, history.source if history is not None else None)
    if high:
        text = ", ".join(f"{key} {count}" for key, count in sorted(high.items()))
        yield ctx.warn(subject, f"NVLink error counters high with no earlier reading to tell growth: {text}",
                       evidence={"levels": high}, remedy=REMEDY_ERRORS, rule="error_level_warn")


def _judge_growth(ctx: CheckContext, subject: str, grown: dict[str, int], elapsed_s: float,
                  history_source: str | None) -> Iterator[Finding]:
    """A rate over a long enough interval; over a short one (two runs seconds apart) only a
    count past `error_growth_count_fail` is judged: a burst is no rate."""
    text = ", ".join(f"{key} +{count}" for key, count in sorted(grown.items()))
    largest = max(grown.values())
    evidence = {"growth": grown, "elapsed_s": round(elapsed_s, 1), "history": history_source}
    summary = f"NVLink errors grew in {duration_text(elapsed_s)}: {text}"
    if elapsed_s < float(ctx.rule("rate_min_interval_s")):
        if largest >= int(ctx.rule("error_growth_count_fail")):
            yield ctx.fail(subject, summary, evidence=evidence, remedy=REMEDY_ERRORS, rule="error_growth_count_fail")
        return
    rate_per_hour = largest * 3600 / elapsed_s
    evidence["per_hour"] = round(rate_per_hour, 1)
    summary = f"NVLink errors grew in {duration_text(elapsed_s)} ({rate_per_hour:.0f}/h): {text}"
    if rate_per_hour >= float(ctx.rule("error_growth_per_hour_fail")):
        yield ctx.fail(subject, summary, evidence=evidence, remedy=REMEDY_ERRORS, rule="error_growth_per_hour_fail")
    elif rate_per_hour >= float(ctx.rule("error_growth_per_hour_warn")):
        yield ctx.warn(subject, summary, evidence=evidence, remedy=REMEDY_ERRORS, rule="error_growth_per_hour_warn")


def _majority(values: list[Any]) -> Any:
    return majority(Counter(value for value in values if value is not None))
