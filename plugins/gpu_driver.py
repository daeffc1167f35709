"""gpu-driver: every NVIDIA GPU on the PCI bus is visible to the driver (NVML).

A node whose driver is broken — user-space library upgraded without reloading the
kernel module ("Driver/library version mismatch"), module not loaded, a GPU that fell
off the bus or was never bound — looks empty to every GPU check, which then skip or say
`unknown`. The PCI bus still shows the GPUs, so this check compares the two. A GPU hidden from
this process on purpose is skipped, not failed: only where the capture found its device node
/dev/nvidiaN absent from this process's /dev (a container, a pod) or denied to it (a job step's
device cgroup) — `visibility.device_nodes`, netdoctor.inventory.visibility. A node that opens, or
was not probed, while NVML lacks the GPU is failed: SLURM_JOB_ID or a cgroup name alone never
hide a GPU (a prolog has both and sees every GPU).
"""

from __future__ import annotations

from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.inventory.model import SourceState
from netdoctor.inventory.visibility import device_node_state, hidden_gpus

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
    hidden_addresses, hidden_reason = hidden_gpus(inventory) or ([], "")
    for address in hidden_addresses:
        # Its device node is absent or denied here (a container, a job step's device cgroup): NVML
        # cannot answer for it, which says nothing of the driver. `inventory` says unknown.
        yield ctx.skip(address, f"NVIDIA GPU at {address} is hidden from this process ({hidden_reason}): "
                       "not judged here", evidence={"pci_address": address, "hidden_by": hidden_reason,
                                                    "device_node": device_node_state(inventory, address)})
    for address in sorted(set(on_bus) - seen - set(hidden_addresses)):
        node_state = device_node_state(inventory, address)
        opens = "; its device node opens, so the driver lost it" if node_state == "ok" else ""
        yield ctx.graded(str(ctx.rule("gpu_not_visible_severity")), address,
                         f"NVIDIA GPU at {address} is on the PCI bus but NVML does not list it "
                         f"({len(nvml_gpus)} of {len(on_bus)} GPUs visible){opens}",
                         evidence={"pci_address": address, "pci_device_id": on_bus[address],
                                   "visible": len(nvml_gpus), "on_bus": len(on_bus), "device_node": node_state},
                         remedy=UNBOUND_REMEDY.format(address=address), rule="gpu_not_visible_severity")
