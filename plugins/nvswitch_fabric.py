"""`nvswitch-fabric`: on an NVSwitch node, is the NVLink fabric up and every GPU in it?

On HGX/DGX H100/H200 the NVSwitches are configured by nvidia-fabricmanager; until it has
run, every GPU's fabric state stays `not_started`/`in_progress` and CUDA refuses to start
work (or NCCL falls back to PCIe). In a multi-node NVLink domain (GB200 NVL72) IMEX must
run too. A VM that sees no NVSwitch but whose NVML reports `completed` passes on that alone
(the host runs the fabric manager; the real 2x H200 VM of the device tool is such a node).

This check reads NVML's fabric state and `systemctl show`; it never touches the switches'
management ports (reading some of their registers floods the kernel log on FM-managed
systems: `ACCESS_REG(0x805) failed`).
"""

from __future__ import annotations

from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.inventory.model import Gpu, GpuFabric

CHECK_ID = "nvswitch-fabric"
FABRIC_MANAGER = "nvidia-fabricmanager"
IMEX = "nvidia-imex"
REMEDY_SERVICE = ("`systemctl restart {unit}` and read why it stopped: `journalctl -u {unit} -b`; its version must "
                  "match the NVIDIA driver's exactly (`nv-fabricmanager --version` vs `nvidia-smi`)")
REMEDY_FABRIC = ("check `nvidia-smi -q | grep -A4 Fabric` and the fabric manager log "
                 "(/var/log/fabricmanager.log); restart nvidia-fabricmanager, then reset the GPUs or reboot")


@check(CHECK_ID, "NVSwitch fabric: fabric manager (and IMEX in an NVLink domain) running, every GPU's fabric state "
       "completed with success", needs=("fabric",), order=74)
def nvswitch_fabric(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    switches = inventory.nvswitches or ()
    gpus = sorted(inventory.gpus, key=lambda gpu: gpu.index)
    reporting = [gpu for gpu in gpus if gpu.fabric is not None and gpu.fabric.state not in (None, "not_supported")]
    if not switches and not reporting:
        yield ctx.skip("node", "no NVSwitch on the PCI bus and NVML reports no fabric state for any GPU "
                       "(PCIe GPUs, NVLink bridges, or a GPU generation without fabric state)")
        return
    if switches:
        yield from _judge_service(ctx, FABRIC_MANAGER, f"{len(switches)} NVSwitch{'es' if len(switches) != 1 else ''} "
                                  f"on the PCI bus")
    if any(_in_nvlink_domain(gpu) for gpu in reporting):
        yield from _judge_service(ctx, IMEX, "the GPUs belong to a multi-node NVLink domain (cluster UUID set)")
    for gpu in reporting:
        if gpu.fabric is not None:
            yield _judge_gpu(ctx, gpu, gpu.fabric, bool(switches))


def _judge_service(ctx: CheckContext, unit: str, why_needed: str) -> Iterator[Finding]:
    service = ctx.inventory.services.get(unit)
    remedy = REMEDY_SERVICE.format(unit=unit)
    if service is None:
        yield ctx.unknown(unit, f"{unit} is needed ({why_needed}) but its state is not known: "
                          f"{ctx.inventory.source(f'systemctl-show-{unit}').reason()}")
        return
    evidence = {"active_state": service.active_state, "sub_state": service.sub_state, "result": service.result,
                "restarts": service.restarts}
    if service.active_state != "active" or service.sub_state not in (None, "running", "exited"):
        state = "/".join(part for part in (service.active_state, service.sub_state) if part)
        result = f", result {service.result}" if service.result and service.result != "success" else ""
        yield ctx.finding(ctx.severity("service_failed_severity"), unit,
                          f"{unit} is {state or 'not running'}{result} ({why_needed}): without it the NVLink "
                          "fabric is not configured", evidence=evidence, remedy=remedy, rule="service_failed_severity")
        return
    if service.restarts is not None and service.restarts > int(ctx.rule("max_restarts")):
        yield ctx.warn(unit, f"{unit} is running but restarted {service.restarts} times since it was started",
                       evidence=evidence, remedy=remedy, rule="max_restarts")
        return
    yield ctx.passed(unit, f"{unit} is running", evidence=evidence)


def _judge_gpu(ctx: CheckContext, gpu: Gpu, fabric: GpuFabric, switches_visible: bool) -> Finding:
    subject = f"{gpu.label} {gpu.pci_address}" if gpu.pci_address else gpu.label
    evidence = {"state": fabric.state, "status": fabric.status, "clique_id": fabric.clique_id,
                "cluster_uuid": fabric.cluster_uuid}
    if fabric.state == "completed" and fabric.status == "success":
        where = "" if switches_visible else " (no NVSwitch visible here: the host manages the fabric)"
        return ctx.passed(subject, f"fabric registration completed{where}", evidence=evidence)
    if fabric.state == "in_progress":
        return ctx.finding(ctx.severity("in_progress_severity"), subject,
                           "fabric registration still in progress: CUDA work waits until it completes",
                           evidence=evidence, remedy=REMEDY_FABRIC, rule="in_progress_severity")
    detail = f"fabric state {fabric.state}" + (f", status {fabric.status}" if fabric.status else "")
    return ctx.finding(ctx.severity("fabric_failed_severity"), subject,
                       f"{detail}: the GPU is not part of the NVLink fabric (CUDA/NCCL cannot use its NVLinks)",
                       evidence=evidence, remedy=REMEDY_FABRIC, rule="fabric_failed_severity")


def _in_nvlink_domain(gpu: Gpu) -> bool:
    """A multi-node NVLink domain gives its GPUs a non-zero cluster UUID."""
    uuid = gpu.fabric.cluster_uuid if gpu.fabric else None
    return bool(uuid) and uuid.replace("-", "").strip("0") != ""
