"""`nvlink`: are every GPU's NVLinks up, alike, and free of growing errors?

On an NVSwitch node each GPU reaches the others over its NVLinks (18 NVLink 4.0 links on an
H100/H200 SXM, 18 NVLink 5.0 links on B200/B300/GB200/GB300). A link that trained down or
dropped leaves the GPU running: NCCL routes around it and the all-reduce runs slower on every
step, or a GPU falls back to PCIe. Replay and recovery counters that grow mean a marginal link
that will drop under load.

Counts come from NVML (per link where the driver gives it), judged as DCGM's NVLink health
watch judges them (NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp, MonitorNVLink4Fields):
replay and recovery errors by any growth since the last run (the same history and
`--baseline` as `error-counters`): a warn, and a fail past the pack's rate per hour; CRC
flit/data errors only by their rate per second (DCGM_LIMIT_MAX_NVLINK_CRC_ERROR, 100/s),
since a healthy link's CRC counters grow with traffic (replay corrects them). With no earlier
reading (the first run after boot) the window is the time since boot: the counters count
from the driver's load. NVLink 5, where the driver no longer answers those four counters, is
judged as DCGM's MonitorNVLink5Fields judges it: symbol errors (errors FEC did not correct) by
growth like replay, and each link's effective BER against the pack's limit (DCGM's 1e-12,
common/DcgmUtilities.cpp IsEffectiveBerThresholdExceeded). See docs/checks.md (`nvlink`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.checks.api import majority
from netdoctor.checks.history import nvlink_key
from netdoctor.inventory.model import NVLINK5_ERROR_COUNTERS, NVLINK_ERROR_COUNTERS, Gpu
from netdoctor.probe.expectation import nvlink_version_name
from netdoctor.records import record
from netdoctor.util import duration_text

CHECK_ID = "nvlink"
REMEDY_DOWN = ("reset the GPU when idle (`nvidia-smi -r -i {n}`) or reboot; `nvidia-smi nvlink -s -i {n}` shows each "
               "link's state; if the links stay down, reseat the GPU tray / baseboard and open a hardware case (NVLink "
               "down is a board or NVSwitch fault)")
REMEDY_ERRORS = ("drain the node and run the NVLink diagnostics (`dcgmi diag -r 3 -i {n}` or the vendor's field "
                 "diagnostics); `nvidia-smi nvlink -e -i {n}` shows the error counters; growing replay/recovery/symbol "
                 "errors mean a marginal link that will drop under load")
REMEDY_BER = ("drain the node and run the NVLink field diagnostics (`dcgmi diag -r 3 -i {n}`); on an NVL72 tray check "
              "the tray's seating and the NVLink cable cartridge of that link before replacing parts")
REMEDY_WATCH = ("watch the link: run netdoctor again after the next job (`nvidia-smi nvlink -e -i {n}` shows the counters "
                "now); if the errors keep growing, drain the node and run `dcgmi diag -r 3 -i {n}`")


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
    down = REMEDY_DOWN.format(n=gpu.index)
    if expected is not None and active < expected:
        problems += 1
        links = f": link{'s' if len(inactive) > 1 else ''} {', '.join(map(str, inactive))} inactive" if inactive else ""
        yield ctx.fail(subject, f"{active} of {expected} NVLinks active{links}; NCCL routes around them and "
                       "every collective on this node slows", evidence=evidence, remedy=down, rule="expected_links")
    if node_version is not None and gpu.nvlink_version not in (None, node_version):
        problems += 1
        yield ctx.warn(subject, f"NVLink {version_name or gpu.nvlink_version} where the node's other GPUs run "
                       f"NVLink {nvlink_version_name(node_version) or node_version}", evidence=evidence, remedy=down)
    slow = [link for link in gpu.nvlinks if link.active and node_speed and link.speed_mbps and link.speed_mbps < node_speed]
    if slow:
        problems += 1
        yield ctx.warn(subject, f"NVLink {', '.join(str(link.link) for link in slow)} at "
                       f"{min(link.speed_mbps or 0 for link in slow)} MB/s, the node's links run at {node_speed} MB/s",
                       evidence={**evidence, "slow_links": {link.link: link.speed_mbps for link in slow}},
                       remedy=down)
    for finding in (*_judge_errors(ctx, gpu, subject), *_judge_ber(ctx, gpu, subject)):
        problems += 1
        yield finding
    if not problems:
        bers = [link.effective_ber for link in gpu.nvlinks if link.active and link.effective_ber is not None]
        if bers:
            evidence["effective_ber_max"] = max(bers)
        speed = f", {gpu.nvlinks[0].speed_mbps / 1000:g} GB/s each" if gpu.nvlinks and gpu.nvlinks[0].speed_mbps else ""
        version = f" (NVLink {version_name}{speed})" if version_name else ""
        yield ctx.passed(subject, f"{active}/{gpu.nvlink_total} NVLinks active{version}", evidence=evidence)


@record(frozen=True)
class _Count:
    """One counter of one link over a window: `growth` between two readings, else its count
    over the uptime (the counters count from the driver's load at boot)."""

    link: int
    name: str
    count: int
    seconds: float | None          # the window's length; None: not known
    growth: bool

    def text(self) -> str:
        per = f", {self.count * 3600 / self.seconds:.0f}/h" if self.seconds else ""
        if self.growth:
            window = f" in {duration_text(self.seconds)}" if self.seconds else ""
            return f"link {self.link} {self.name} +{self.count}{window}{per}"
        since = " since boot" if self.seconds else " (no window known: no earlier reading, no uptime)"
        return f"link {self.link} {self.name} {self.count}{since}{per}"


def _judge_errors(ctx: CheckContext, gpu: Gpu, subject: str) -> Iterator[Finding]:
    """Replay and recovery as DCGM's NVLink health watch judges them (any growth is an error:
    here a warn, a rate past the pack's a fail); CRC flit/data by their rate per second
    against DCGM's 100/s. With no usable earlier reading the window is the time since boot.
    """
    counts = list(_counts(ctx, gpu))
    failed: list[tuple[_Count, str, str]] = []       # (count, limit text, rule)
    warned: list[tuple[_Count, str]] = []            # (count, rule)
    for item in counts:
        verdict = _judge_count(ctx, item)
        if verdict is None:
            continue
        status, limit, rule = verdict
        if status == "fail":
            failed.append((item, limit, rule))
        else:
            warned.append((item, rule))
    evidence = {"counts": {f"link {item.link} {item.name}": item.count for item in counts if item.count},
                "windows_s": sorted({round(item.seconds, 1) for item in counts if item.count and item.seconds}),
                "history": ctx.history.source if ctx.history is not None and any(item.growth for item in counts) else None}
    if failed:
        text = "; ".join(f"{item.text()} ({limit})" for item, limit, _ in failed)
        yield ctx.fail(subject, f"NVLink errors past their rate limit: {text}", evidence=evidence,
                       remedy=REMEDY_ERRORS.format(n=gpu.index), rule=failed[0][2])
    if warned:
        text = ", ".join(item.text() for item, _ in warned)
        if any(item.growth for item, _ in warned):
            summary = (f"NVLink errors grew since the last run: {text}; DCGM's NVLink health watch counts any "
                       "replay/recovery/symbol error growth as an error (below the pack's fail rate)")
        else:
            summary = f"NVLink errors with no earlier reading to tell growth: {text}"
        yield ctx.warn(subject, summary, evidence=evidence, remedy=REMEDY_WATCH.format(n=gpu.index),
                       rule=warned[0][1])


def _counts(ctx: CheckContext, gpu: Gpu) -> Iterator[_Count]:
    history = ctx.history
    elapsed_s = (history.elapsed_s if history is not None and 0 < history.elapsed_s <= float(ctx.rule("history_max_age_s"))
                 else None)
    # Without an earlier reading the counters are judged over the uptime: they count from the
    # driver's load at boot (or a later GPU reset or driver reload, which the log does not always
    # show and which may or may not clear them), so a rate over the uptime is never above the
    # true one: no healthy link is failed for a window guessed too short.
    uptime = ctx.inventory.uptime_s if ctx.inventory.uptime_s is not None and ctx.inventory.uptime_s > 0 else None
    for link in gpu.nvlinks:
        previous = history.ports.get(nvlink_key(gpu, link.link)) if history is not None and elapsed_s else None
        for name in (*NVLINK_ERROR_COUNTERS, *NVLINK5_ERROR_COUNTERS):
            value = link.errors.get(name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                continue
            before = previous.get(name) if previous is not None else None
            if before is not None and elapsed_s is not None:
                # A lower value: the counters were reset (GPU reset, driver reload) within the interval.
                yield _Count(link.link, name, value - before if value >= before else value, elapsed_s, True)
            else:
                yield _Count(link.link, name, value, uptime, False)


def _judge_count(ctx: CheckContext, item: _Count) -> tuple[str, str, str] | None:
    """("fail"|"warn", limit text, rule) for one counter over its window, or None."""
    if item.count <= 0:
        return None
    seconds = item.seconds
    if item.name in ("crc_flit", "crc_data"):
        # CRC errors are corrected by replay and grow with traffic on healthy links: only a rate counts.
        limit = float(ctx.rule("crc_per_second_fail"))
        if seconds is not None and seconds >= float(ctx.rule("crc_min_interval_s")) and item.count / seconds >= limit:
            return "fail", f"{item.count / seconds:.0f}/s, fails at {limit:g}/s", "crc_per_second_fail"
        return None
    count_limit = int(ctx.rule("error_growth_count_fail"))
    if seconds is None:
        # No window at all (no earlier reading, uptime not read): no rate, so no fail.
        if item.count >= count_limit or item.name == "recovery":
            return "warn", "", "no_window"
        return None
    if seconds >= float(ctx.rule("rate_min_interval_s")):
        if item.name == "replay":
            rule, per_hour_limit = "replay_per_hour_fail", float(ctx.rule("replay_per_hour_fail"))
        elif item.name == "symbol_errors":
            rule, per_hour_limit = "symbol_errors_per_hour_fail", float(ctx.rule("symbol_errors_per_hour_fail"))
        else:
            rule, per_hour_limit = "recovery_per_hour_fail", float(ctx.rule("recovery_per_hour_fail"))
        if item.count * 3600 / seconds >= per_hour_limit:
            return "fail", f"fails at {per_hour_limit:g}/h", rule
    elif item.count >= count_limit:
        # Over a short window (two runs close together, a node just booted) a few errors are a
        # burst, no rate: only a large count fails.
        return "fail", f"{item.count} in {duration_text(seconds)}, fails at {count_limit}", "error_growth_count_fail"
    if item.growth:
        return "warn", "", "symbol_errors_growth" if item.name == "symbol_errors" else "replay_recovery_growth"
    if item.name == "recovery":
        # A link that retrained since boot: no rate to fail it, but not a clean link either.
        return "warn", "", "recovery_since_boot"
    return None     # replays / symbol errors since boot below the rate: link training and old bursts, not judged


def _judge_ber(ctx: CheckContext, gpu: Gpu, subject: str) -> Iterator[Finding]:
    """NVLink 5: each link's effective BER (NVML's, decoded) against the pack's limit, as DCGM's
    NVLink health watch fails a link past 1e-12. An inactive link's value is not judged."""
    limit = float(ctx.rule("effective_ber_limit"))
    # 1e-9 relative: DCGM compares the packed mantissa/exponent, so 10 x 10^-13 (= 1e-12) passes
    # there; the float product of the two may land a hair above the limit.
    high = [link for link in gpu.nvlinks if link.active is not False and link.effective_ber is not None
            and link.effective_ber > limit * (1 + 1e-9)]
    if not high:
        return
    text = ", ".join(f"link {link.link} {link.effective_ber:.1e}" for link in high)
    yield ctx.graded(ctx.severity("effective_ber_severity"), subject,
                     f"NVLink effective BER past {limit:g} (errors left after FEC): {text}",
                     evidence={"effective_ber": {link.link: link.effective_ber for link in high}, "limit": limit},
                     remedy=REMEDY_BER.format(n=gpu.index), rule="effective_ber_limit")


def _majority(values: list[Any]) -> Any:
    return majority(Counter(value for value in values if value is not None))
