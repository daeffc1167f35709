"""`nvswitch-fabric`: is the NVLink fabric up, every GPU in it, and (NVL72) this tray in its domain?

On HGX/DGX H100/H200 the NVSwitches are configured by nvidia-fabricmanager; until it has
run, every GPU's fabric state stays `not_started`/`in_progress` and CUDA refuses to start
work (or NCCL falls back to PCIe). HGX/DGX B200/B300 boards need it too, though their
NVSwitches are not on the PCI bus. A GB200/GB300 NVL72 tray's NVSwitches are in the rack: its
GPUs must be registered, in the rack's NVLink domain (non-zero clique and cluster UUID) and
healthy, and IMEX must run with its domain UP (netdoctor_plugins.nvswitch_domain says how each
kind is told). A VM that sees no NVSwitch but whose NVML reports `completed` passes on that
alone (the host runs the fabric manager; the real 2x H200 VM of the device tool is such a node).

This check reads NVML's fabric state (`nvidia-smi -q` where NVML gave none), platform info,
`systemctl show` and `nvidia-imex-ctl -N`; it never touches the switches' management ports
(reading some of their registers floods the kernel log on FM-managed systems:
`ACCESS_REG(0x805) failed`).
"""

from __future__ import annotations

from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.inventory.model import Gpu, GpuFabric
from netdoctor.report.model import Status
from netdoctor_plugins.nvswitch_domain import (
    fabric_evidence,
    health_problems,
    health_words,
    judge_imex,
    judge_service,
    judge_tray_gpu,
    nvl72_tray,
    nvlink5_board,
    subject_of,
    worst,
)

CHECK_ID = "nvswitch-fabric"
FABRIC_MANAGER = "nvidia-fabricmanager"
REMEDY_FABRIC = ("check `nvidia-smi -q -i {pci} | grep -A4 Fabric` and the fabric manager log "
                 "(/var/log/fabricmanager.log); restart it (`systemctl restart nvidia-fabricmanager`), then reset the "
                 "GPU (`nvidia-smi -r -i {pci}`) or reboot")


@check(CHECK_ID, "NVSwitch fabric: fabric manager (and IMEX in an NVLink domain) running, every GPU's fabric state "
       "completed with success, NVL72 trays in their NVLink domain", needs=("fabric",), order=74)
def nvswitch_fabric(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    switches = inventory.nvswitches or ()
    gpus = sorted(inventory.gpus, key=lambda gpu: gpu.index)
    reporting = [gpu for gpu in gpus if gpu.fabric is not None and gpu.fabric.state not in (None, "not_supported")]
    trays = {gpu.index for gpu in gpus if nvl72_tray(gpu)}
    boards = [gpu for gpu in gpus if nvlink5_board(gpu)]
    if not switches and not reporting and not trays and not boards:
        yield ctx.skip("node", "no NVSwitch on the PCI bus and NVML reports no fabric state for any GPU "
                       "(PCIe GPUs, NVLink bridges, or a GPU generation without fabric state)")
        return
    if switches:
        yield from judge_service(ctx, FABRIC_MANAGER, f"{len(switches)} NVSwitch{'es' if len(switches) != 1 else ''} "
                                 f"on the PCI bus")
    elif boards and inventory.virtualization in (None, "none"):
        yield from judge_service(ctx, FABRIC_MANAGER, f"{len(boards)} NVLink 5 GPUs whose NVSwitches sit on the "
                                 "baseboard, off the PCI bus; it also starts the NVLink subnet manager there")
    in_domain = [gpu for gpu in reporting if gpu.fabric is not None and gpu.fabric.in_nvlink_domain]
    if in_domain:
        yield from judge_imex(ctx, in_domain)
    managed_here = bool(switches) or bool(boards)
    judged = {gpu.index for gpu in reporting}
    for gpu in gpus:
        fabric = gpu.fabric
        if fabric is None or gpu.index not in judged:
            if gpu.index in trays:
                yield _tray_unknown(ctx, gpu, fabric)
            elif gpu in boards:
                yield ctx.unknown(subject_of(gpu), f"{gpu.name} on an NVLink 5 baseboard whose fabric registration is "
                                  "not known: " + "; ".join(ctx.inventory.source(name).reason()
                                                            for name in ("nvml", "nvidia-smi-q")))
            continue
        failed = _registration(ctx, gpu, fabric)
        if gpu.index in trays:
            yield judge_tray_gpu(ctx, gpu, fabric, failed)
        else:
            yield failed or _healthy(ctx, gpu, fabric, managed_here)


def _registration(ctx: CheckContext, gpu: Gpu, fabric: GpuFabric) -> Finding | None:
    """The finding for a GPU not (yet) registered with its fabric; None when completed with success."""
    if fabric.state == "completed" and fabric.status == "success":
        return None
    subject, evidence = subject_of(gpu), fabric_evidence(gpu, fabric)
    if fabric.state == "in_progress":
        return ctx.finding(ctx.severity("in_progress_severity"), subject,
                           "fabric registration still in progress: CUDA work waits until it completes",
                           evidence=evidence, remedy=_fabric_remedy(gpu), rule="in_progress_severity")
    detail = f"fabric state {fabric.state}" + (f", status {fabric.status}" if fabric.status else "")
    return ctx.finding(ctx.severity("fabric_failed_severity"), subject,
                       f"{detail}: the GPU is not part of the NVLink fabric (CUDA/NCCL cannot use its NVLinks)",
                       evidence=evidence, remedy=_fabric_remedy(gpu), rule="fabric_failed_severity")


def _healthy(ctx: CheckContext, gpu: Gpu, fabric: GpuFabric, managed_here: bool) -> Finding:
    """A registered GPU of a board or VM: its fabric health where NVML reports one."""
    subject, evidence = subject_of(gpu), fabric_evidence(gpu, fabric)
    problems = health_problems(ctx, fabric)
    if problems:
        status, rule = worst(problems)
        return ctx.finding(status, subject, "fabric registration completed, but " + "; ".join(
            words for _, _, words in problems), evidence=evidence, remedy=_fabric_remedy(gpu), rule=rule)
    where = "" if managed_here else " (no NVSwitch visible here: the host manages the fabric)"
    health = "" if fabric.health_summary in (None, "not_supported") else f"; {health_words(fabric)}"
    return ctx.passed(subject, f"fabric registration completed{where}{health}", evidence=evidence)


def _fabric_remedy(gpu: Gpu) -> str:
    return REMEDY_FABRIC.format(pci=gpu.pci_address or gpu.index)


def _tray_unknown(ctx: CheckContext, gpu: Gpu, fabric: GpuFabric | None) -> Finding:
    if fabric is not None and fabric.state == "not_supported":
        why = "NVML says NVLink fabric is not supported on it (not an NVL72 tray after all?)"
    else:
        why = "its fabric state was not read: " + "; ".join(
            ctx.inventory.source(name).reason() for name in ("nvml", "nvidia-smi-q"))
    return ctx.finding(Status.UNKNOWN, subject_of(gpu), f"NVL72 tray GPU ({gpu.name or 'GB200/GB300'}) whose NVLink "
                       f"domain is not known: {why}")
