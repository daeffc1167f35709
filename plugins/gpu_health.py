"""`gpu-health`: each GPU's own health as NVML reports it (CONTRACT 7.1/7.2).

Reads Gpu.memory (ECC mode, uncorrectable ECC counts, row remapping, page retirement),
Gpu.recovery_action, Gpu.clocks_event_reasons, Gpu.utilization_gpu and Gpu.pcie_replay_counter
(nvml.json), and ctx.history (the previous run's reading: state file or --baseline).

* Memory, after NVIDIA's "GPU Memory Error Management" (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt):
  a row remap *pending* is applied at the next GPU reset and does not affect running work
  (warn: reset when idle); a remap *failure* is NVIDIA's RMA criterion (fail). An uncorrectable
  error the GPU *contained* (Xid 94, catalog RESTART_APP) leaves the volatile count above 0 with
  its row's remap pending: NVML (nvmlDeviceGetRemappedRows) says a pending remap does not affect
  future work, "error-containment and dynamic page blacklisting will take care of that", so it
  warns (reset when idle). Any other volatile uncorrectable error fails, as DCGM's memory health
  watch (NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp) fails any volatile DBE; an *uncontained*
  one also comes with Xid 95 and a gpu_reset recovery action, which fail on their own. DCGM
  warns on pages pending retirement and fails at
  DCGM_LIMIT_MAX_RETIRED_PAGES retired pages (pre-Ampere dynamic page retirement,
  docs.nvidia.com/deploy/dynamic-page-retirement). Row remapping replaces page retirement
  from Ampere on, so an H100 reports no retired pages: only the mechanism its GPU has is
  expected.
* The recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, NVIDIA's "Error Recovery and
  Response Flags"): anything but `none` means the GPU needs that action before new work.
* Clock event reasons (CONTRACT 7.1): HW slowdown, HW thermal and HW power brake slow a GPU the
  node did not ask to slow. SW thermal slowdown is the driver holding a busy GPU under its
  operating temperature, which load causes (evidence only). On an idle GPU nothing explains
  them: one sighting warns, and set on this run and a previous one that was also idle and at
  most `persistent_max_age_s` old, the pack grades it. Under load (or load unknown) NVML's
  HW slowdown is also "Power draw is too high and Fast Trigger protection is reducing the
  clocks" and "may be also reported during PState or clock change" (nvml.h,
  nvmlClocksEventReasonHwSlowdown): one sighting is evidence, a persistent one warns. HW
  thermal and HW power brake name their cause (the GPU at its hardware slowdown temperature,
  the power brake asserted by the system, e.g. its power supply; `busy_slowdown_reasons`): they
  warn under load on one sighting, and never take the pack's persistent severity while busy.
* PCIe replays by growth since the previous run: DCGM's PCIe watch warns above 8 replays a
  minute (DCGM_LIMIT_MAX_PCIREPLAY_RATE); without a previous reading only the level is judged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import field
from typing import Any

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.checks.history import CLOCK_REASON_PREFIX, CLOCK_REASONS, gpu_key
from netdoctor.inventory.model import Gpu, GpuMemoryHealth
from netdoctor.records import record
from netdoctor.util import duration_text

CHECK_ID = "gpu-health"
MAX_SHOWN = 40                      # characters of a value nvml.json gives that a summary may show
MAX_UNKNOWN_REASONS = 4             # unknown clock event reason names listed in the evidence
_WORD = re.compile(r"[a-z0-9_]+")   # the form of NVML's recovery action names (nvmlGpuRecoveryAction_t)
DIAG = "run NVIDIA's field diagnostic (`dcgmi diag -r 3 -i {n}` on an idle node) and open an RMA with its log"
# What each recovery action asks (NVIDIA, Error Recovery and Response Flags; nvmlGpuRecoveryAction_t).
RECOVERY: dict[str, tuple[str, str]] = {
    "gpu_reset": ("the GPU must be reset",
                  ("drain the node, stop the processes on the GPU (`nvidia-smi -i {n} --query-compute-apps=pid "
                   "--format=csv`), then reset it: `nvidia-smi -r -i {n}`")),
    "node_reboot": ("the node must be rebooted (the fault may have left the OS inconsistent)",
                    "drain the node and reboot it"),
    "drain_p2p": ("all peer-to-peer traffic must be quiesced",
                  ("drain the node: stop every process doing peer-to-peer traffic (NCCL jobs) and disable UVM "
                   "persistence mode, then read the action again (`nvidia-smi -q -i {n} | grep -i 'recovery "
                   "action'`)")),
    "drain_and_reset": ("peer-to-peer traffic must be quiesced, then the GPU reset",
                        ("drain the node: stop every process doing peer-to-peer traffic (NCCL jobs), then reset "
                         "the GPU: `nvidia-smi -r -i {n}`")),
    "recover_imex_domain": ("the IMEX (NVLink) domain must be recovered",
                            ("check the domain (`nvidia-imex-ctl -N`) and restart IMEX on its nodes "
                             "(`systemctl restart nvidia-imex`)")),
    "bus_reset": ("the GPU's PCIe bus must be reset", "drain the node and reboot it (which resets the bus)"),
    "system_reboot": ("the system must be rebooted", "drain the node and reboot it"),
}
SLOWDOWN_REMEDY = {
    "hw_thermal_slowdown": "the GPU is too hot: check its temperature (`nvidia-smi -q -d TEMPERATURE -i {n}`), the "
                           "fans, airflow and inlet temperature",
    "hw_power_brake_slowdown": "the system asserts the power brake (power supply or power delivery): check the PSUs "
                               "and the BMC's event log (`ipmitool sel list`)",
    "hw_slowdown": "HW slowdown (temperature, power brake or a power spike): `nvidia-smi -q -d PERFORMANCE -i {n}` "
                   "shows which; check cooling and the PSUs (`ipmitool sel list`)",
}
REPLAY_REMEDY = ("PCIe replays are link-level retransmissions (signal integrity): look for AER errors of "
                 "{address} in `journalctl -k`, reseat the GPU or its riser/baseboard cable; if the count keeps "
                 "growing, have the slot, riser or retimer serviced")


@record
class GpuJudgement:
    """One GPU's problems (findings), healthy facts and unread fields (for its pass)."""

    ctx: CheckContext
    gpu: Gpu
    findings: list[Finding] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    def problem(self, status: Status, rule: str, summary: str, remedy: str, evidence: Mapping[str, Any]) -> None:
        """A finding graded by the pack: `status` is `ctx.severity(rule)`, read at the call site."""
        n = self.gpu.index
        self.findings.append(self.ctx.finding(
            status, self.gpu.label, summary, rule=rule,
            evidence={"pci_address": self.gpu.pci_address, **evidence},
            remedy=remedy.format(n=n, address=self.gpu.pci_address or self.gpu.label)))


def _count(value: int | None) -> str:
    return str(value) if value is not None else "unknown"


def _shown(text: str) -> str:
    """A name from nvml.json as a summary may show it: printable ASCII word characters, cut."""
    safe = "".join(char if char.isascii() and (char.isalnum() or char in "_-.") else "?" for char in text[:MAX_SHOWN])
    return safe + ("..." if len(text) > MAX_SHOWN else "")


def _memory_of(gpu: Gpu) -> GpuMemoryHealth | None:
    """The GPU's memory health, None also when NVML gave a memory object with every field null."""
    memory = gpu.memory
    if memory is None or all(getattr(memory, name) is None for name in GpuMemoryHealth.__dataclass_fields__):
        return None
    return memory


def _has_health(gpu: Gpu) -> bool:
    return any(value is not None for value in (_memory_of(gpu), gpu.recovery_action, gpu.clocks_event_reasons,
                                               gpu.utilization_gpu, gpu.pcie_replay_counter))


def _why_none(gpus: list[Gpu], ctx: CheckContext) -> str:
    """Why NVML gave no health field: its errors, a vGPU guest, or a capture without them."""
    errors = sorted({f"{field_name}: {error}" for gpu in gpus for field_name, error in gpu.nvml_errors.items()})
    if any(gpu.lost for gpu in gpus):
        return "NVML reports the GPU lost (fell off the bus)"
    if errors:
        return "NVML failed: " + "; ".join(errors[:3])
    if any(gpu.virtualization_mode == "vgpu" for gpu in gpus):
        return "a vGPU guest: NVML in the guest did not report them (judge the GPU on the host)"
    nvml = ctx.inventory.source("nvml")
    if not nvml.usable:
        return nvml.reason()
    return ("nvml.json has none of the health fields (captured by netdoctor before 0.3, or a driver that "
            "reports none of them)")


@check(CHECK_ID, "each GPU's memory (ECC, row remapping, retired pages), recovery action, clock slowdowns "
       "and PCIe replays, from NVML", needs=("gpus",), order=97)
def gpu_health(ctx: CheckContext) -> Iterator[Finding]:
    gpus = sorted(ctx.inventory.gpus, key=lambda gpu: gpu.index)
    if not any(_has_health(gpu) for gpu in gpus):
        yield ctx.unknown("node", f"no GPU health from NVML for {len(gpus)} GPU(s): {_why_none(gpus, ctx)}",
                          evidence={"gpus": [gpu.label for gpu in gpus]})
        return
    for gpu in gpus:
        if not _has_health(gpu):
            yield ctx.unknown(gpu.label, f"no health fields from NVML for {gpu.label}: {_why_none([gpu], ctx)}",
                              evidence={"pci_address": gpu.pci_address, "nvml_errors": dict(gpu.nvml_errors)})
            continue
        judgement = GpuJudgement(ctx, gpu)
        _judge_memory(judgement)
        _judge_recovery(judgement)
        _judge_clocks(judgement)
        _judge_replays(judgement)
        if judgement.findings:
            yield from judgement.findings
            continue
        summary = ", ".join(judgement.facts)
        if judgement.unread:
            summary += f"; not reported: {', '.join(judgement.unread)}"
        yield ctx.passed(gpu.label, summary, evidence={"pci_address": gpu.pci_address, **judgement.evidence,
                                                       "not_reported": judgement.unread})


def _judge_memory(out: GpuJudgement) -> None:
    memory, ctx = _memory_of(out.gpu), out.ctx
    if memory is None:
        out.unread.append("memory health (ECC, row remapping)")
        return
    out.evidence["memory"] = {name: getattr(memory, name) for name in GpuMemoryHealth.__dataclass_fields__}
    if memory.ecc_mode == "disabled":
        out.problem(ctx.severity("ecc_disabled_severity"), "ecc_disabled_severity",
                    "ECC is disabled: uncorrectable memory errors go undetected and bad rows are neither remapped "
                    "nor retired",
                    "enable it and reset the GPU: `nvidia-smi -e 1 -i {n}`, then `nvidia-smi -r -i {n}` (or reboot)",
                    {"ecc_mode": "disabled"})
    elif memory.ecc_mode == "enabled":
        out.facts.append("ECC on")
    else:
        out.unread.append("ECC mode")
    _judge_uncorrectable(out, memory)
    _judge_remapping(out, memory)
    _judge_retired_pages(out, memory)


def _judge_uncorrectable(out: GpuJudgement, memory: GpuMemoryHealth) -> None:
    ctx = out.ctx
    volatile, aggregate = memory.volatile_uncorrected, memory.aggregate_uncorrected
    counts = {"volatile_uncorrected": volatile, "aggregate_uncorrected": aggregate}
    if volatile and _contained(memory):
        counts.update(remapped_uncorrectable=memory.remapped_uncorrectable, remap_pending=True, remap_failure=False)
        out.problem(ctx.severity("contained_uncorrectable_severity"), "contained_uncorrectable_severity",
                    f"{volatile} uncorrectable ECC error(s) since the driver loaded, contained: their row remap is "
                    f"pending ({memory.remapped_uncorrectable} row(s) remapped for uncorrectable errors), running "
                    "work is not affected",
                    "reset the GPU when idle (`nvidia-smi -r -i {n}`) to complete the remap, or reboot the node; if "
                    "uncorrectable errors come back after it, " + DIAG, counts)
    elif volatile:
        out.problem(ctx.severity("volatile_uncorrectable_severity"), "volatile_uncorrectable_severity",
                    f"{volatile} uncorrectable ECC error(s) since the driver loaded "
                    f"({_count(aggregate)} in the GPU's life)",
                    "see what the driver asks (`nvidia-smi -q -d ECC,ROW_REMAPPER -i {n}` and this GPU's recovery "
                    "action); drain the node and reset the GPU (`nvidia-smi -r -i {n}`) or reboot, which applies a "
                    "pending row remap and clears the count; if uncorrectable errors come back, " + DIAG, counts)
    elif aggregate:
        out.problem(ctx.severity("aggregate_uncorrectable_severity"), "aggregate_uncorrectable_severity",
                    f"{aggregate} uncorrectable ECC error(s) in the GPU's life, none since the driver loaded",
                    "past errors: check that their rows were remapped (`nvidia-smi -q -d ROW_REMAPPER -i {n}`); "
                    "if the count grows, " + DIAG, counts)
    elif volatile == 0 and aggregate in (0, None):
        out.facts.append("0 uncorrectable")
    elif memory.ecc_mode != "disabled":
        out.unread.append("uncorrectable ECC counts")


def _contained(memory: GpuMemoryHealth) -> bool:
    """The volatile uncorrectable errors are accounted for by a pending row remap (NVIDIA: a
    contained error; the remap completes at the next GPU reset): rows remapped for
    uncorrectable errors, the remap pending and no remap failure."""
    return (memory.remap_pending is True and memory.remap_failure is False
            and memory.remapped_uncorrectable is not None and memory.remapped_uncorrectable > 0)


def _judge_remapping(out: GpuJudgement, memory: GpuMemoryHealth) -> None:
    ctx = out.ctx
    rows = {"remapped_correctable": memory.remapped_correctable,
            "remapped_uncorrectable": memory.remapped_uncorrectable,
            "remap_pending": memory.remap_pending, "remap_failure": memory.remap_failure}
    if memory.remap_failure:
        out.problem(ctx.severity("remap_failure_severity"), "remap_failure_severity",
                    f"row remapping failed ({_count(memory.remapped_uncorrectable)} rows remapped for "
                    "uncorrectable errors): a bank has no spare row left, NVIDIA's RMA criterion",
                    "drain the node; " + DIAG, rows)
    if memory.volatile_uncorrected and _contained(memory):
        pass                            # said by the contained uncorrectable finding, with its reset
    elif memory.remap_pending:
        out.problem(ctx.severity("remap_pending_severity"), "remap_pending_severity",
                    "a row remap is pending: it takes effect at the next GPU reset (running work is not affected)",
                    "reset the GPU when idle (`nvidia-smi -r -i {n}`), or reboot the node", rows)
    elif memory.remap_pending is False and not memory.remap_failure:
        out.facts.append("no remap pending")


def _judge_retired_pages(out: GpuJudgement, memory: GpuMemoryHealth) -> None:
    ctx = out.ctx
    sbe, dbe = memory.retired_sbe, memory.retired_dbe
    pages = {"retired_sbe": sbe, "retired_dbe": dbe, "retired_pending": memory.retired_pending}
    if memory.retired_pending:
        out.problem(ctx.severity("retired_pending_severity"), "retired_pending_severity",
                    "pages are pending retirement: they are retired at the next driver load or GPU reset",
                    "reset the GPU when idle (`nvidia-smi -r -i {n}`), or reboot the node", pages)
    if sbe is not None or dbe is not None:
        total, limit = (sbe or 0) + (dbe or 0), int(ctx.rule("retired_pages_limit"))
        if total >= limit:
            out.problem(ctx.severity("retired_pages_severity"), "retired_pages_severity",
                        f"{total} retired pages ({sbe} single-bit, {dbe} double-bit ECC): at or over {limit}, "
                        "DCGM's limit (the field diagnostic's RMA threshold)", "drain the node; " + DIAG,
                        {**pages, "limit": limit})
        else:
            out.facts.append(f"{total} retired pages")
    elif memory.remap_pending is None and memory.remap_failure is None:
        # One of the two repair mechanisms is the GPU's (page retirement before Ampere, row
        # remapping from Ampere on): neither reported is worth saying.
        out.unread.append("row remapping and page retirement")


def _judge_recovery(out: GpuJudgement) -> None:
    action, ctx = out.gpu.recovery_action, out.ctx
    if action is not None and (len(action) > MAX_SHOWN or not _WORD.fullmatch(action)):
        action = _shown(action)         # not a name NVML gives: an unknown action, shown safely
    out.evidence["recovery_action"] = action
    if action is None:
        out.unread.append("recovery action (driver before R575)")
    elif action == "none":
        out.facts.append("recovery none")
    else:
        meaning, remedy = RECOVERY.get(action, (
            f"an action this netdoctor does not know ({action})",
            ("read it with `nvidia-smi -q -i {n} | grep -i 'recovery action'` and follow NVIDIA's GPU memory "
             "error management guide (Error Recovery and Response Flags)")))
        out.problem(ctx.severity("recovery_action_severity"), "recovery_action_severity",
                    f"the driver's recovery action is {action}: {meaning}", remedy, {"recovery_action": action})


def _previous(ctx: CheckContext, gpu: Gpu, max_age_key: str,
              max_age: float) -> tuple[Mapping[str, int | None] | None, float | None, str]:
    """The previous run's reading of this GPU, its age, or (None, None, why there is none);
    a reading older than `max_age` (the pack's `max_age_key`) is not used."""
    history = ctx.history
    if history is None:
        return None, None, "there is no earlier reading"
    previous = history.ports.get(gpu_key(gpu))
    if previous is None:
        return None, None, "there is no earlier reading of this GPU"
    if not 0 < history.elapsed_s <= max_age:
        return None, None, f"the last reading is {duration_text(history.elapsed_s)} old ({max_age_key} {max_age:g})"
    return previous, history.elapsed_s, ""


def _idle(gpu_idle: bool, utilization: int | None, limit: float) -> bool:
    """Idle: NVML's gpu_idle reason set, or the utilization at or below the pack's limit."""
    return gpu_idle or (utilization is not None and utilization <= limit)


def _judge_clocks(out: GpuJudgement) -> None:
    gpu, ctx = out.gpu, out.ctx
    reasons = gpu.clocks_event_reasons
    out.evidence["utilization_gpu"] = gpu.utilization_gpu
    if reasons is None:
        out.evidence["clocks_event_reasons"] = None
        out.unread.append("clock event reasons")
        return
    # Only NVML's names are judged; others are listed, cut, as evidence.
    known = [reason for reason in reasons if reason in CLOCK_REASONS]
    out.evidence["clocks_event_reasons"] = known
    unknown = [_shown(reason) for reason in reasons if reason not in CLOCK_REASONS]
    if unknown:
        out.evidence["unknown_clocks_event_reasons"] = unknown[:MAX_UNKNOWN_REASONS]
        out.evidence["unknown_clocks_event_reasons_count"] = len(unknown)
    listed = set(ctx.rule("slowdown_reasons"))
    slowing = [reason for reason in known if reason in listed]
    if not slowing:
        out.facts.append("no clock slowdown")
        return
    limit = float(ctx.rule("idle_max_utilization"))
    idle = _idle("gpu_idle" in known, gpu.utilization_gpu, limit)
    previous, elapsed_s, _ = _previous(ctx, gpu, "persistent_max_age_s", float(ctx.rule("persistent_max_age_s")))
    persistent = [reason for reason in slowing if previous and previous.get(f"{CLOCK_REASON_PREFIX}{reason}") == 1]
    load = f"{gpu.utilization_gpu} % utilization" if gpu.utilization_gpu is not None else "utilization unknown"
    where = " on an idle GPU" if idle else (" under load" if gpu.utilization_gpu is not None else "")
    summary = f"clocks slowed by {', '.join(slowing)}{where} ({load})"
    evidence: dict[str, Any] = {"clocks_event_reasons": known, "slowdown": slowing, "idle": idle,
                                "utilization_gpu": gpu.utilization_gpu}
    remedy = "; ".join(SLOWDOWN_REMEDY.get(reason, "see `nvidia-smi -q -d PERFORMANCE -i {n}`") for reason in slowing)
    if persistent:
        assert previous is not None and elapsed_s is not None      # a previous reading comes with its age
        previous_idle = _idle(previous.get(f"{CLOCK_REASON_PREFIX}gpu_idle") == 1, previous.get("utilization_gpu"),
                              limit)
        summary += f"; {', '.join(persistent)} also at the previous run {duration_text(elapsed_s)} ago"
        evidence.update(persistent=persistent, elapsed_s=round(elapsed_s, 1), previous_idle=previous_idle)
        if idle and previous_idle:
            out.problem(ctx.severity("persistent_slowdown_severity"), "persistent_slowdown_severity",
                        summary + ", idle both times: persistent", remedy, evidence)
            return
        summary += ", not idle both times"
    elif not idle and not set(slowing) & set(ctx.rule("busy_slowdown_reasons")):
        # Under load HW slowdown also marks a power excursion or a clock change: one sighting tells nothing.
        out.facts.append(f"{', '.join(slowing)} seen once{where} ({load}): not judged")
        out.evidence["slowdown"] = slowing
        return
    out.problem(ctx.severity("slowdown_severity"), "slowdown_severity", summary, remedy, evidence)


def _judge_replays(out: GpuJudgement) -> None:
    gpu, ctx = out.gpu, out.ctx
    value = gpu.pcie_replay_counter
    out.evidence["pcie_replay_counter"] = value
    if value is None:
        out.unread.append("PCIe replay counter")
        return
    max_age = float(ctx.rule("history_max_age_s"))
    previous_reading, elapsed_s, no_history = _previous(ctx, gpu, "history_max_age_s", max_age)
    previous = previous_reading.get("pcie_replay_counter") if previous_reading else None
    if previous is not None and value < previous:
        previous, no_history = None, f"the counter went down since the last run ({previous} -> {value}: reset)"
    elif previous is None and previous_reading is not None:
        no_history = "the last reading has no PCIe replay counter"
    if previous is not None and elapsed_s is not None:
        per_minute = float(ctx.rule("pcie_replay_per_minute"))
        delta = value - previous
        # DCGM judges replays over one minute: a shorter interval allows a minute's worth.
        allowed = per_minute * max(elapsed_s, 60.0) / 60
        if delta > allowed:
            out.problem(ctx.severity("pcie_replay_severity"), "pcie_replay_severity",
                        f"PCIe replays rose by {delta} in {duration_text(elapsed_s)} "
                        f"({delta * 60 / elapsed_s:.1f}/min; limit {per_minute:g}/min)", REPLAY_REMEDY,
                        {"pcie_replay_counter": value, "previous": previous, "delta": delta,
                         "elapsed_s": round(elapsed_s, 1), "allowed": round(allowed, 1)})
        else:
            out.facts.append(f"{value} PCIe replays (+{delta} in {duration_text(elapsed_s)})")
        return
    limit = int(ctx.rule("pcie_replay_absolute"))
    if value > limit:
        out.problem(ctx.severity("pcie_replay_severity"), "pcie_replay_severity",
                    f"{value} PCIe replays since the driver loaded (above {limit}), with no rate to judge "
                    f"({no_history})", "run netdoctor again later to measure growth; if it grows: " + REPLAY_REMEDY,
                    {"pcie_replay_counter": value, "absolute_limit": limit})
    else:
        out.facts.append(f"{value} PCIe replays")
