"""`nccl-probe`: the NCCL all-reduce over the node's GPUs, graded against its interconnect.

Judged on the busbw of the largest message size (not nccl-tests' "Avg bus bandwidth",
which averages latency-bound sizes in). The expected level comes from
netdoctor.probe.expectation (NVLink version x active links, or the PCIe link); the
pack's `pass_fraction` / `warn_fraction` turn the ratio into a status. A run that is
not verified (wrong sum) or hangs after NCCL init is `fail`: that node would corrupt or
stall a job. A budget too short to run the probe, or a kill during NCCL init, is `unknown`:
a healthy node can take longer than a tight budget to initialise, and draining it for that
would drain every node.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.errors import RulesError
from netdoctor.inventory.model import Inventory
from netdoctor.inventory.visibility import HIDING_STATES, device_node_state, hiding_reason
from netdoctor.probe.expectation import GpuLinks, expected_busbw, nvlink_version_name, size_text
from netdoctor.probe.result import LocalisationRow, ProbeResult
from netdoctor.report.model import STATUS_SEVERITY
from netdoctor.util import canonical_pci_address

CHECK_ID = "nccl-probe"
SLOW_REMEDY = ("compare with `nvidia-smi topo -m` and `nvidia-smi nvlink -s`; check NCCL_P2P_DISABLE / "
               "NCCL_SHM_DISABLE / NCCL_P2P_LEVEL in the environment, ACS on PCIe switches, and the GPUs' PCIe links")
TIMEOUT_REMEDY = ("drain the node; look for a stuck GPU (`nvidia-smi`, Xid errors in `dmesg`), "
                  "then reset the GPUs or reboot")
WRONG_REMEDY = "drain the node: an all-reduce gave a wrong sum; check `dmesg` for Xid errors and run GPU diagnostics"
# What CUDA says on a node without usable GPUs. Discovery found GPUs whenever the probe ran
# (traffic.run_allreduce), so here they are GPUs CUDA cannot open.
CUDA_BLIND = frozenset({"no-driver", "no-gpus"})
_SKIP_REMEDY = {"no-nccl": "install NCCL: `pip install netdoctor[probe]` or the system libnccl2 package",
                "no-nccl-tests": "put nccl-tests' all_reduce_perf on PATH, or use `--engine nccl`"}


def _cuda_blind(ctx: CheckContext, reason: str, base: dict[str, Any]) -> Finding:
    """GPUs discovery found that CUDA cannot open: nothing measured on a node that has GPUs, never
    a pass (gpu-driver judges the driver); a skip only where this process is denied every one of
    them on purpose (a container or job step without them), as gpu-driver skips them."""
    gpus = ctx.inventory.gpus
    states = {device_node_state(ctx.inventory, gpu.pci_address or "") for gpu in gpus}
    if states and states <= set(HIDING_STATES):
        return ctx.skip("node", f"the {len(gpus)} NVIDIA GPU(s) are hidden from this process "
                        f"({hiding_reason(states)}): nothing to probe here ({reason})", evidence=base)
    address = next((gpu.pci_address for gpu in gpus if gpu.pci_address), None)
    bound = f"`lspci -k -s {address}` names the driver each GPU is bound to; " if address else ""
    return ctx.unknown("node", f"{len(gpus)} NVIDIA GPU(s) on this node, but CUDA cannot use them: {reason}",
                       evidence=base,
                       remedy=f"{bound}load the NVIDIA driver (`modprobe nvidia`; `dmesg` names NVRM errors) and "
                              "leave the GPUs visible where netdoctor runs (CUDA_VISIBLE_DEVICES unset; in "
                              "containers, the NVIDIA container runtime)")


def _budget_remedy(probe: ProbeResult) -> str:
    """More time for the probe: twice what it had (at least what it needs), as both commands take it."""
    had = probe.budget_s or probe.duration_s
    seconds = math.ceil(max(2 * had, probe.min_budget_s or 0.0)) if had else 0
    if seconds <= 0:
        return ("give the probe more time: a larger `--deadline` of `netdoctor check` (the probe gets about half) "
                "or `--budget` of `netdoctor probe` (how long it had is not known)")
    return (f"give the probe more time: `netdoctor check --deadline {2 * seconds}` (the probe gets about half) "
            f"or `netdoctor probe --budget {seconds}`")


def _fraction_rule(ctx: CheckContext, key: str) -> float:
    value = ctx.rule(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 2:
        raise RulesError(f"[{CHECK_ID}] {key} = {value!r}: expected a fraction in (0, 2]")
    return float(value)


def _nvlink_peers(inventory: Inventory, index: int, probed: list[int]) -> int | None:
    """NVLinks from GPU `index` to the other probed GPUs per `nvidia-smi topo -m` (NV#), summed."""
    topology = inventory.topology
    if topology is None:
        return None
    total = 0
    seen = False
    for other in probed:
        if other == index:
            continue
        link = topology.link(f"GPU{index}", f"GPU{other}")
        if link is None:
            return None
        seen = True
        match = re.fullmatch(r"NV(\d+)", link.strip())
        total += int(match[1]) if match else 0
    return total if seen else None


def gpu_links(probe: ProbeResult, inventory: Inventory) -> list[GpuLinks]:
    """Link facts of the probed GPUs: the inventory's (NVML, else sysfs), else what the probe read from NVML.

    The GPU the probe ran on is found in the inventory by its PCI address when CUDA named
    one (CUDA and the inventory may number GPUs differently), else by its index.
    """
    probed = list(probe.gpus)
    by_index = {link.index: link for link in probe.gpu_links or ()}
    addresses = {device.index: device.pci_bus_id for device in probe.devices or () if device.pci_bus_id}
    inventory_gpus = {gpu.index: gpu for gpu in inventory.gpus}
    by_address = {gpu.pci_address: gpu for gpu in inventory.gpus if gpu.pci_address}
    links = []
    for index in probed or sorted(by_index) or sorted(inventory_gpus):
        entry = by_index.get(index) or GpuLinks(index=index)
        gpu = by_address.get(canonical_pci_address(addresses[index])) if index in addresses else None
        gpu = gpu or inventory_gpus.get(index)
        name = entry.name or (gpu.name if gpu else None)
        # NVML's view of the link, else the kernel's (sysfs): a node without NVML still has one.
        pcie = (gpu.pcie or inventory.pcie.get(gpu.pci_address or "")) if gpu else None
        links.append(GpuLinks(
            index=index, name=name,
            nvlink_version=nvlink_version_name(entry.nvlink_version, name),
            nvlink_active=gpu.nvlink_active if gpu and gpu.nvlink_active is not None else entry.nvlink_active,
            nvlink_total=gpu.nvlink_total if gpu and gpu.nvlink_total is not None else entry.nvlink_total,
            nvlink_peers=_nvlink_peers(inventory, index, probed) if probed else None,
            pcie_gen=(pcie.max_gen if pcie and pcie.max_gen else None) or entry.pcie_gen,
            pcie_width=(pcie.max_width if pcie and pcie.max_width else None) or entry.pcie_width))
    return links


@check(CHECK_ID, "a short NCCL all-reduce over the local GPUs: bus bandwidth against the expected level",
       needs=("gpus", "probe"), order=90)
def nccl_probe(ctx: CheckContext) -> Iterator[Finding]:
    # The needs gate (need_probe) has already turned "not run" and "no result" (ProbeNotRun)
    # into this check's one finding: here `probe` is a result.
    probe = ctx.probe
    assert isinstance(probe, ProbeResult), "need_probe lets only a ProbeResult through"
    status = probe.status
    reason = probe.reason
    base = {"nccl_version": probe.nccl_version, "engine": probe.engine, "gpus": list(probe.gpus),
            "duration_s": probe.duration_s}
    if status == "skipped":
        if probe.reason_code in CUDA_BLIND and ctx.inventory.gpus:
            yield _cuda_blind(ctx, reason, base)
        elif probe.not_applicable:
            yield ctx.skip("node", reason, evidence=base)
        else:
            yield ctx.unknown("node", reason, evidence=base,
                              remedy=_SKIP_REMEDY.get(probe.reason_code or "", _SKIP_REMEDY["no-nccl"]))
        return
    if status == "timeout" and probe.reason_code == "init-timeout":
        # Killed before NCCL init finished: too little time is as likely as a hang.
        yield ctx.unknown("node", reason or "timeout during NCCL init", evidence=base, remedy=_budget_remedy(probe))
        return
    if status == "error" and probe.reason_code == "budget-too-short":
        yield ctx.unknown("node", reason, evidence={**base, "budget_s": probe.budget_s,
                                                    "min_budget_s": probe.min_budget_s},
                          remedy=_budget_remedy(probe))
        return
    if status == "timeout":
        yield ctx.graded(ctx.severity("timeout_status"), "node", reason if reason.startswith("probe timed out") else f"probe timed out: {reason}",
                         evidence=base, remedy=TIMEOUT_REMEDY, rule="timeout_status")
        return
    if status == "wrong-result":
        yield ctx.graded(ctx.severity("wrong_result_status"), "node",
                         f"all-reduce result is wrong: {reason}",
                         evidence={**base, "sizes": [row.to_json() for row in probe.sizes]},
                         remedy=WRONG_REMEDY, rule="wrong_result_status")
        return
    if status != "ok":
        yield ctx.unknown("node", f"probe failed: {reason or 'its result carries no status'}", evidence=base)
        return
    yield from _judge_bandwidth(ctx, probe, base)


def _judge_bandwidth(ctx: CheckContext, probe: ProbeResult, base: dict[str, Any]) -> Iterator[Finding]:
    largest = probe.largest
    if largest is None:
        truncated = probe.truncated
        if truncated:
            yield ctx.unknown("node", f"probe returned no measurements: {truncated}", evidence=base,
                              remedy=_budget_remedy(probe))
        else:
            yield ctx.unknown("node", "probe returned no measurements", evidence=base)
        return
    busbw = float(largest.busbw_gbps)
    transport = probe.transport
    evidence: dict[str, Any] = {**base, "nccl_busbw_gbps": busbw, "bytes": largest.bytes,
                                "time_us": largest.time_us, "transport": transport.kind,
                                "channels": transport.channels, "gdr": transport.gdr,
                                "sizes": [row.to_json() for row in probe.sizes]}
    min_bytes = int(ctx.rule("min_judged_bytes"))
    if largest.bytes < min_bytes:
        yield ctx.unknown("node", f"largest message ({size_text(largest.bytes)}) is below "
                          f"{size_text(min_bytes)}: too small to judge bandwidth", evidence=evidence,
                          rule="min_judged_bytes")
        return
    links = gpu_links(probe, ctx.inventory)
    override = ctx.rule("expected_busbw_gbps")
    expectation = expected_busbw(links, largest.bytes)
    expected = float(override) if override else expectation.busbw_gbps
    reasoning = f"pack sets expected_busbw_gbps = {override}" if override else expectation.reasoning
    evidence.update(expected_gbps=expected, interconnect=expectation.interconnect, reasoning=reasoning)
    if expected is None:
        yield ctx.unknown("node", f"busbw {busbw:.1f} GB/s; no expected level: {reasoning}", evidence=evidence)
        return
    pass_fraction = _fraction_rule(ctx, "pass_fraction")
    warn_fraction = _fraction_rule(ctx, "warn_fraction")
    fraction = busbw / expected if expected > 0 else 0.0
    evidence["fraction"] = round(fraction, 3)
    carried = transport.kind or "unknown transport"
    sentence = (f"all-reduce busbw {busbw:.1f} GB/s at {size_text(largest.bytes)} over {len(links)} GPUs "
                f"via {carried} ({transport.channels or '?'} channels) = {fraction:.0%} of the expected "
                f"{expected:.1f} GB/s")
    if fraction >= pass_fraction:
        status, rule = Status.PASS, "pass_fraction"
    elif fraction >= warn_fraction:
        status, rule = Status.WARN, "warn_fraction"
    else:
        status, rule = Status.FAIL, "warn_fraction"
    # NVLink present but NCCL not using it (P2P disabled, ACS, a broken link): say so even
    # when the bandwidth still passes, since the node is not running as built.
    if expectation.interconnect == "NVLink" and transport.kind not in (None, "P2P/NVLink"):
        mismatch = ctx.severity("transport_mismatch_status")
        sentence += f"; the GPUs have NVLink but NCCL used {carried}"
        if STATUS_SEVERITY[mismatch] > STATUS_SEVERITY[status]:
            status, rule = mismatch, "transport_mismatch_status"
    if status is Status.PASS:
        yield ctx.passed("node", sentence, evidence=evidence, rule=rule)
    else:
        yield ctx.graded(status, "node", f"{sentence}, below {pass_fraction:.0%}", evidence=evidence, rule=rule,
                         remedy=SLOW_REMEDY)
    yield from _localise(ctx, probe.localisation, _smi_ids(probe))


def _smi_ids(probe: ProbeResult) -> dict[int, str]:
    """The probe's CUDA ordinal -> what `nvidia-smi -i` takes for that GPU: its PCI bus id (the
    worker's ordinals follow CUDA_VISIBLE_DEVICES, nvidia-smi's indices do not)."""
    return {device.index: device.pci_bus_id for device in probe.devices or () if device.pci_bus_id}


def _localise(ctx: CheckContext, rows: tuple[LocalisationRow, ...], smi: dict[int, str]) -> Iterator[Finding]:
    """Name the GPU (or pair) that is slow compared with its peers in the localisation runs."""
    import statistics   # only once the probe localised: ~5 ms of imports in every run otherwise

    slow_fraction = _fraction_rule(ctx, "localise_slow_fraction")
    for direction in ("host-to-device", "device-to-host"):
        copies = [row for row in rows if row.kind == "copy" and row.direction == direction and row.gbps is not None]
        if len(copies) < 2:
            continue
        for row in copies:
            others = [other.gbps for other in copies if other is not row]
            reference = statistics.median(others)
            if reference > 0 and row.gbps < slow_fraction * reference:
                gpu = row.gpus[0]
                yield ctx.warn(f"GPU{gpu}", f"{direction} copy {row.gbps:.1f} GB/s, "
                               f"{row.gbps / reference:.0%} of the other GPUs' {reference:.1f} GB/s: "
                               "its PCIe link is the likely bottleneck",
                               evidence=row.to_json(), rule="localise_slow_fraction",
                               remedy=f"check this GPU's PCIe link (`nvidia-smi -q -d PCIE -i {smi.get(gpu, gpu)}`) and its "
                                      "slot/riser")
    pairs = [row for row in rows if row.kind == "pair" and row.busbw_gbps is not None]
    if len(pairs) < 3:
        return
    slow = []
    for row in pairs:
        reference = statistics.median(other.busbw_gbps for other in pairs if other is not row)
        if reference > 0 and row.busbw_gbps < slow_fraction * reference:
            slow.append((row, reference))
    # Neighbour pairs form a ring: a slow GPU slows both pairs it is in, a slow link one.
    counts: dict[int, int] = {}
    for row, _ in slow:
        for gpu in row.gpus:
            counts[gpu] = counts.get(gpu, 0) + 1
    for gpu in sorted(gpu for gpu, count in counts.items() if count >= 2):
        rows_of_gpu = [f"GPU{row.gpus[0]}<->GPU{row.gpus[1]} {row.busbw_gbps:.1f} GB/s"
                       for row, _ in slow if gpu in row.gpus]
        yield ctx.warn(f"GPU{gpu}", f"slow in both neighbour pairs ({'; '.join(rows_of_gpu)}), the other pairs reach "
                       f"{statistics.median(row.busbw_gbps for row in pairs):.1f} GB/s",
                       evidence={"pairs": [row.to_json() for row, _ in slow if gpu in row.gpus]},
                       rule="localise_slow_fraction",
                       remedy=f"check this GPU's NVLinks: `nvidia-smi nvlink -s -i {smi.get(gpu, gpu)}` and "
                              f"`nvidia-smi nvlink -e -i {smi.get(gpu, gpu)}`")
    for row, reference in slow:
        first, second = row.gpus
        if counts.get(first, 0) >= 2 or counts.get(second, 0) >= 2:
            continue
        yield ctx.warn(f"GPU{first}", f"the GPU{first}<->GPU{second} path is slow: {row.busbw_gbps:.1f} GB/s, "
                       f"{row.busbw_gbps / reference:.0%} of the other pairs' {reference:.1f} GB/s",
                       evidence=row.to_json(), rule="localise_slow_fraction",
                       remedy=f"check the NVLinks between the two GPUs: `nvidia-smi nvlink -s -i {smi.get(first, first)}` "
                              f"and `nvidia-smi nvlink -s -i {smi.get(second, second)}`; `nvidia-smi topo -m` shows the path")
