"""`pcie-link`: GPU and NIC PCIe links, and the uplinks of the PCIe switches above them,
running below their maximum speed or width.

A link that trains at fewer lanes or a lower generation than it can cuts host<->device and
GPUDirect RDMA bandwidth (a Gen5 x16 link carries ~63 GB/s; at x8 a 400 Gb/s NIC can no
longer be fed). Usual causes: a badly seated card or riser, a failing retimer, a BIOS slot
setting. NVIDIA GPUs also drop their link generation on purpose when idle and retrain to the
maximum under load; that is not a fault. The P-state does not tell idle from busy (Hopper
idles in P0), so a GPU's speed is judged only when NVML's utilization at capture says it was
busy. GPUs never drop lanes to save power, so a narrow link is always judged.

For NICs sysfs `max_link_speed` is the card's own maximum, not the slot's: a Gen4 card in
a Gen3 slot reads "below maximum" although nothing is broken, so a slow NIC link is a
warning by default; packs of platforms whose slots are known (DGX H100: Gen5) fail it.
SR-IOV virtual functions are judged through their physical function's link.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.inventory.model import Gpu, Hca, Inventory, PciPathFunction, PcieLink
from netdoctor.inventory.queries import path_from_root, pci_endpoints, virtual_function_note
from netdoctor.records import record
from netdoctor.report.model import STATUS_SEVERITY
from netdoctor.util import natural_key
from netdoctor_plugins.remedy_words import bridge_above

CHECK_ID = "pcie-link"
LINK_STATE = "`lspci -vv -s {address} | grep -E 'LnkCap|LnkSta'`"
NIC_REMEDY = ("reseat the NIC or its riser, check the slot's BIOS link setting; " + LINK_STATE
              + " shows capability and state")
NIC_SPEED_REMEDY = ("compare with the slot: " + LINK_STATE + " gives the card's own maximum and the trained speed; "
                    "{upstream} shows the slot's in its LnkCap. If the slot's LnkCap is the lower speed the "
                    "slot is the limit (move the card to a faster slot); if not, reseat the card or riser and "
                    "check the slot's BIOS link setting")
# Software RDMA devices have no PCI function: soft-RoCE (rxe) and soft-iWARP (siw).
SOFTWARE_DEVICE_PREFIXES = ("rxe", "siw")


@record(frozen=True)
class Verdict:
    """One aspect of a link's judgement: the status, the sentence and the rule that decided it."""

    status: Status
    sentence: str
    rule: str | None = None




def _describe(link: PcieLink, current: bool) -> str:
    gen = link.current_gen if current else link.max_gen
    width = link.current_width if current else link.max_width
    speed = link.current_speed_gts if current else link.max_speed_gts
    speed_text = f"{speed:g} GT/s " if speed is not None else ""
    return f"{speed_text}Gen{gen} x{width}"


def _link_evidence(link: PcieLink) -> dict[str, Any]:
    return {
        "current_gen": link.current_gen, "max_gen": link.max_gen,
        "current_width": link.current_width, "max_width": link.max_width,
        "current_speed_gts": link.current_speed_gts, "max_speed_gts": link.max_speed_gts,
        "source": link.source,
    }


def _complete(link: PcieLink | None) -> bool:
    return link is not None and None not in (link.current_gen, link.max_gen, link.current_width, link.max_width)


def _combine(ctx: CheckContext, subject: str, verdicts: list[Verdict], evidence: dict[str, Any],
             remedy: str | None, pass_summary: str) -> Finding:
    """One finding per link: the worst aspect decides the status and the rule."""
    problems = [verdict for verdict in verdicts if verdict.status is not Status.PASS]
    if not problems:
        summary = "; ".join([pass_summary] + [verdict.sentence for verdict in verdicts if verdict.sentence])
        return ctx.passed(subject, summary, evidence=evidence)
    worst = max(problems, key=lambda verdict: STATUS_SEVERITY[verdict.status])
    summary = "; ".join(verdict.sentence for verdict in sorted(
        problems, key=lambda verdict: -STATUS_SEVERITY[verdict.status]))
    return ctx.finding(worst.status, subject, summary, evidence=evidence,
                       remedy=remedy if worst.status in (Status.FAIL, Status.WARN) else None, rule=worst.rule)


def _gpu_link(gpu: Gpu, inventory: Inventory) -> tuple[PcieLink | None, dict[str, Any]]:
    """The GPU's link, NVML preferred, and a note of where NVML and sysfs disagree.

    NVML reports the link's maximum (the lower of GPU and slot); sysfs `max_link_speed` is
    the GPU's own capability, so a Gen5 GPU in a Gen4 slot looks degraded in sysfs alone.
    """
    nvml = gpu.pcie if _complete(gpu.pcie) else None
    sysfs = inventory.pcie.get(gpu.pci_address) if gpu.pci_address else None
    sysfs = sysfs if _complete(sysfs) else None
    notes: dict[str, Any] = {}
    if nvml and sysfs:
        nvml_view = (nvml.current_gen, nvml.current_width, nvml.max_gen, nvml.max_width)
        sysfs_view = (sysfs.current_gen, sysfs.current_width, sysfs.max_gen, sysfs.max_width)
        if nvml_view != sysfs_view:
            notes["conflict"] = {"chosen": "nvml", "nvml": _link_evidence(nvml), "sysfs": _link_evidence(sysfs)}
    return nvml or sysfs, notes


def _judge_gpu(ctx: CheckContext, gpu: Gpu) -> Finding:
    inventory = ctx.inventory
    if gpu.lost:
        return ctx.graded(str(ctx.rule("lost_gpu_severity")), gpu.label,
                          f"NVML reports {gpu.label} ({gpu.pci_address or 'PCI address unknown'}) lost: "
                          "the GPU fell off the PCIe bus",
                          evidence={"pci_address": gpu.pci_address, "nvml_errors": gpu.nvml_errors},
                          remedy="look for Xid 79 in `dmesg`/`journalctl -k`; drain the node and power-cycle it "
                                 "(a GPU reset rarely recovers it); if it recurs, reseat or replace the GPU/riser",
                          rule="lost_gpu_severity")
    link, notes = _gpu_link(gpu, inventory)
    if link is None:
        reasons = [inventory.source("nvml").reason(), inventory.source("sysfs").reason()]
        return ctx.unknown(gpu.label, f"no complete PCIe link facts for {gpu.label} "
                           f"({gpu.pci_address or 'PCI address unknown'}): " + "; ".join(reasons),
                           evidence={"pci_address": gpu.pci_address})
    evidence = {"pci_address": gpu.pci_address, **_link_evidence(link),
                "performance_state": gpu.performance_state, "utilization_gpu": gpu.utilization_gpu, **notes}
    assert link.current_gen is not None and link.max_gen is not None  # _complete() holds
    assert link.current_width is not None and link.max_width is not None
    verdicts: list[Verdict] = []
    if link.current_width < link.max_width:
        verdicts.append(Verdict(ctx.severity("low_width_severity"),
                                f"PCIe link runs at x{link.current_width} of x{link.max_width} "
                                f"(lanes lost: never power saving)", "low_width_severity"))
    if link.current_gen < link.max_gen:
        verdicts.append(_judge_gpu_speed(ctx, gpu, link))
    if "conflict" in notes:
        verdicts.append(Verdict(Status.PASS, "NVML and sysfs disagree; NVML used"))
    return _combine(ctx, gpu.label, verdicts, evidence, _gpu_remedy(gpu),
                    f"{_describe(link, True)} (max {_describe(link, False)})")


def _gpu_remedy(gpu: Gpu) -> str:
    state = f" and {LINK_STATE.format(address=gpu.pci_address)} its capability and state" if gpu.pci_address else ""
    return ("reseat the GPU (or its baseboard/riser), check the slot's BIOS link setting and the retimers; "
            f"`nvidia-smi -q -d PCIE -i {gpu.index}` shows the link under load{state}")


def _judge_gpu_speed(ctx: CheckContext, gpu: Gpu, link: PcieLink) -> Verdict:
    """A GPU below its maximum generation, judged only against its own evidence of load.

    NVIDIA GPUs train the link down when not in use and back up under load, whatever the
    P-state says (Hopper idles in P0), so only NVML's utilization at capture tells a busy
    GPU; an idle one, or one whose load is unknown, is power saving. (The NCCL probe does
    not re-read the link under traffic, so it gives no evidence here.)
    """
    saving = f"Gen{link.current_gen} of Gen{link.max_gen} is power saving (retrains to Gen{link.max_gen} under load)"
    busy_from = int(ctx.rule("busy_min_utilization"))
    utilization = gpu.utilization_gpu
    if utilization is None:
        return Verdict(Status.PASS, f"{saving}; utilization unknown, so no evidence of load")
    if utilization < busy_from:
        return Verdict(Status.PASS, f"{saving}: idle ({utilization} % utilization)")
    return Verdict(ctx.severity("gpu_low_speed_severity"),
                   f"PCIe link runs at Gen{link.current_gen} of Gen{link.max_gen} while busy "
                   f"({utilization} % utilization)", "gpu_low_speed_severity")


def _judge_nic(ctx: CheckContext, address: str, hcas: list[Hca]) -> Finding:
    inventory = ctx.inventory
    names = ", ".join(hca.name for hca in hcas)
    link = inventory.pcie.get(address)
    if not _complete(link):
        return ctx.unknown(address, f"no complete PCIe link facts for {names} at {address}: "
                           f"{inventory.source('sysfs').reason()}", evidence={"hca": names})
    assert link is not None and link.current_gen is not None and link.max_gen is not None
    assert link.current_width is not None and link.max_width is not None
    evidence = {"hca": names, **_link_evidence(link)}
    verdicts: list[Verdict] = []
    if link.current_width < link.max_width:
        verdicts.append(Verdict(ctx.severity("low_width_severity"),
                                f"{names} PCIe link runs at x{link.current_width} of x{link.max_width}",
                                "low_width_severity"))
    # ConnectX NICs keep their link at the trained speed (no idle downclocking): a lower gen
    # is a slot slower than the card (max_link_speed is the card's, not the slot's) or a
    # link that trained down. Either caps RDMA bandwidth; only the pack knows the slots.
    slow_speed = link.current_gen < link.max_gen
    if slow_speed:
        verdicts.append(Verdict(ctx.severity("nic_low_speed_severity"),
                                f"{names} PCIe link runs at {_describe(link, True)}, below the card's maximum "
                                f"{_describe(link, False)}: a slower slot, or a link that trained down",
                                "nic_low_speed_severity"))
    remedies = []
    if link.current_width < link.max_width:
        remedies.append(NIC_REMEDY.format(address=address))
    if slow_speed:
        bridge = bridge_above(inventory, address)
        upstream = (f"the upstream port {bridge} (`lspci -vv -s {bridge} | grep LnkCap`)" if bridge
                    else f"the upstream port (the bridge above {address} in `lspci -tv`)")
        remedies.append(NIC_SPEED_REMEDY.format(address=address, upstream=upstream))
    remedy = "; ".join(remedies) or NIC_REMEDY.format(address=address)
    return _combine(ctx, address, verdicts, evidence, remedy,
                    f"{names}: {_describe(link, True)} (max {_describe(link, False)})")


@check(CHECK_ID, "GPU and NIC PCIe links run at their maximum speed and width (idle GPU downclocking allowed)",
       needs=("pcie",), order=30)
def pcie_link(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    if not inventory.gpus and not inventory.hcas:
        yield ctx.skip("node", "no GPUs and no RDMA NICs")
        return
    for gpu in sorted(inventory.gpus, key=lambda gpu: gpu.index):
        yield _judge_gpu(ctx, gpu)
    # Two RDMA devices can sit on one PCI function (a bond); judge each function once.
    functions: dict[str, list[Hca]] = {}
    for hca in inventory.hcas:
        through_pf = virtual_function_note(inventory, hca)
        if through_pf is not None:
            yield ctx.skip(hca.pci_address or hca.name, f"{hca.name}: {through_pf}",
                           evidence={"hca": hca.name, "physical_function": hca.physical_function})
        elif hca.pci_address:
            functions.setdefault(hca.pci_address, []).append(hca)
        elif _software_device(hca):
            yield ctx.skip(hca.name, f"{hca.name} has no PCI function (software RDMA device such as rxe/siw)",
                           evidence={"hca": hca.name, "ca_type": hca.ca_type})
        elif inventory.source("sysfs").usable:
            # A hardware HCA (it has a CA type) always sits on a PCI function; sysfs just did
            # not show which (no `device` link, e.g. a container's partial /sys).
            yield ctx.unknown(hca.name, f"{hca.name} ({hca.ca_type}): PCI address unknown (no device link in sysfs)",
                              evidence={"hca": hca.name, "ca_type": hca.ca_type})
        else:
            yield ctx.unknown(hca.name, f"PCI address of {hca.name} unknown: {inventory.source('sysfs').reason()}")
    for address in sorted(functions, key=lambda address: natural_key(functions[address][0].name)):
        yield _judge_nic(ctx, address, functions[address])
    yield from _judge_switch_uplinks(ctx)


def _uplink_limit(link: PcieLink, parent: PciPathFunction | None) -> tuple[int, str]:
    """The generation the uplink can train to, and what caps it ("": the switch itself).

    sysfs `max_link_speed` is the port's own capability (LnkCap) and `current_link_speed` what
    the link negotiated (LnkSta); a link trains to the lower of its two ends' speeds, so a Gen6
    switch on a Gen5 root port runs at Gen5 by design, not downtrained. Width is not capped so:
    a root port narrower than the switch is a bifurcation setting worth a look.
    """
    assert link.max_gen is not None
    other = parent.link if parent is not None else None
    if parent is None or other is None or other.max_gen is None or other.max_gen >= link.max_gen:
        return link.max_gen, ""
    kind = (parent.port_type or "port").replace("_", " ")
    return other.max_gen, f"{kind} {parent.address} above it tops out at Gen{other.max_gen}"


def _judge_switch_uplinks(ctx: CheckContext) -> Iterator[Finding]:
    """The uplink of each PCIe switch on a GPU/NIC path (its upstream port's link): a narrow
    or slow uplink caps every device behind the switch, though their own links look fine.
    Judged against what the link can train to: the lower of the switch's and its parent's maximum."""
    inventory = ctx.inventory
    tree = inventory.pci_tree or {}
    behind: dict[str, list[str]] = {}
    for address, (label, _) in pci_endpoints(inventory).items():
        for bridge in path_from_root(tree, address)[:-1]:
            behind.setdefault(bridge, []).append(label)
    for address in sorted(behind):
        function = tree[address]
        link = function.link
        if function.port_type != "upstream_port" or not _complete(link):
            continue
        assert link is not None and link.current_gen is not None and link.max_gen is not None
        assert link.current_width is not None and link.max_width is not None
        devices = ", ".join(sorted(behind[address], key=natural_key))
        parent = tree.get(function.parent) if function.parent else None
        max_gen, cause = _uplink_limit(link, parent)
        evidence = {"bridge": address, "behind": behind[address], **_link_evidence(link),
                    "parent": function.parent, "expected_gen": max_gen}
        if parent is not None and parent.link is not None:
            evidence["parent_max_gen"] = parent.link.max_gen
        verdicts: list[Verdict] = []
        if link.current_width < link.max_width:
            verdicts.append(Verdict(ctx.severity("low_width_severity"),
                                    f"PCIe switch uplink {address} runs at x{link.current_width} of x{link.max_width}: "
                                    f"{devices} behind it share {link.current_width * 100 // link.max_width} % of "
                                    "its bandwidth", "low_width_severity"))
        if link.current_gen < max_gen:
            verdicts.append(Verdict(ctx.severity("uplink_low_speed_severity"),
                                    f"PCIe switch uplink {address} runs at {_describe(link, True)}, below "
                                    + (f"Gen{max_gen}, the most it can train to (the {cause})" if cause
                                       else f"its maximum {_describe(link, False)}")
                                    + f" ({devices} behind it)", "uplink_low_speed_severity"))
        elif cause:
            verdicts.append(Verdict(Status.PASS, f"at the most the link can train to: the {cause}"))
        above = (f"its root port {function.parent}" if function.parent
                 else "its root port (not in the PCIe tree read: `lspci -tv` shows it)")
        remedy = (f"the link between the switch ({address}) and {above}: check the baseboard/riser cabling and "
                  "retimers, and the root port's BIOS link setting; " + LINK_STATE.format(address=address)
                  + " shows capability and state")
        yield _combine(ctx, address, verdicts, evidence, remedy,
                       f"PCIe switch uplink {_describe(link, True)} (max {_describe(link, False)}) for {devices}")


def _software_device(hca: Hca) -> bool:
    """rxe/siw: named so, or no CA type at all (hardware HCAs always report one, e.g. MT4129)."""
    return hca.name.startswith(SOFTWARE_DEVICE_PREFIXES) or not hca.ca_type
