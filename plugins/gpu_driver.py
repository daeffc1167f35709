"""gpu-driver: every NVIDIA GPU on the PCI bus is visible to the driver (NVML).

A node whose driver is broken — user-space library upgraded without reloading the
kernel module ("Driver/library version mismatch"), module not loaded, a GPU that fell
off the bus or was never bound — looks empty to every GPU check, which then skip or say
`unknown`. The PCI bus still shows the GPUs, so this check compares the two.
"""

from __future__ import annotations

from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.inventory.model import SourceState

DRIVER_REMEDY = ("a driver/library version mismatch means the user-space driver was upgraded without reloading "
                 "the kernel module: drain the node and reboot it (or unload and reload the nvidia modules); "
                 "otherwise load the driver (`modprobe nvidia`) and read `dmesg` for NVRM errors")
UNBOUND_REMEDY = ("look for Xid 79 (fallen off the bus) or NVRM probe errors in `dmesg`; check `lspci -k -s {address}` "
                  "(driver in use); power-cycle the node; reseat or replace the GPU if it recurs")


@check("gpu-driver", "every NVIDIA GPU on the PCI bus is visible to the driver (NVML answers for it)",
       order=100)
def gpu_driver(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    nvml = inventory.source("nvml")
    on_bus = inventory.pci_gpus
    nvml_gpus = [gpu for gpu in inventory.gpus if "nvml" in gpu.sources]
    if not on_bus and not nvml_gpus:
        reason = "no NVIDIA GPUs on the PCI bus" if on_bus is not None else "no NVIDIA GPUs (PCI bus not read)"
        yield ctx.skip("node", reason)
        return
    if nvml.state is not SourceState.OK:
        library_missing = "library not found" in nvml.detail.lower() and inventory.nvidia_module_loaded
        if "pynvml" in nvml.detail or library_missing:
            # The kernel driver is there but netdoctor cannot reach NVML (no nvidia-ml-py, or a
            # container without the driver's user-space libraries): the tool is incomplete, not the node.
            yield ctx.unknown("node", f"{len(on_bus or {})} NVIDIA GPU(s) on the PCI bus, but NVML cannot be "
                              f"asked: {nvml.reason()}",
                              remedy="install nvidia-ml-py where netdoctor runs, and make the driver's libnvidia-ml.so "
                                     "visible to it (in containers: the NVIDIA container runtime)")
            return
        yield ctx.graded(str(ctx.rule("driver_unusable_severity")), "node",
                         f"{len(on_bus or {})} NVIDIA GPU(s) on the PCI bus, but the driver does not answer: {nvml.reason()}",
                         evidence={"pci_gpus": sorted(on_bus or {}), "nvml": nvml.detail},
                         remedy=DRIVER_REMEDY, rule="driver_unusable_severity")
        return
    seen = {gpu.pci_address for gpu in nvml_gpus}
    for gpu in nvml_gpus:
        yield ctx.passed(gpu.label, f"visible to the driver at {gpu.pci_address or 'an unknown PCI address'}")
    if on_bus is None:
        return
    for address in sorted(set(on_bus) - seen):
        yield ctx.graded(str(ctx.rule("gpu_not_visible_severity")), address,
                         f"NVIDIA GPU at {address} is on the PCI bus but NVML does not list it "
                         f"({len(nvml_gpus)} of {len(on_bus)} GPUs visible)",
                         evidence={"pci_address": address, "pci_device_id": on_bus[address],
                                   "visible": len(nvml_gpus), "on_bus": len(on_bus)},
                         remedy=UNBOUND_REMEDY.format(address=address), rule="gpu_not_visible_severity")
