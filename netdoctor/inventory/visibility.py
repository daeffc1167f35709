"""GPUs hidden from this process on purpose: pure questions about `Inventory.visibility`.

NVML lists only the GPUs this process may open: inside a SLURM job step under
`ConstrainDevices=yes` the job's (the device cgroup denies the others' /dev/nvidiaN), in a
container or Kubernetes pod the ones the runtime passed in (the others have no /dev/nvidiaN
there). The PCI bus (sysfs) still shows every GPU. A GPU on the bus that NVML does not list is
hidden on purpose ONLY when the capture found its device node "absent" or "denied" for this
process (`visibility.device_nodes`); then `inventory` says `unknown` and `gpu-driver` skips it.

A node that opens ("ok") while NVML lacks the GPU means the driver lost it: failed, whatever
the environment says (slurmd's prolog has SLURM_JOB_ID and a cgroup naming slurm, yet sees
every GPU). "unknown" or no record (an older snapshot, no /proc/driver/nvidia entry) is judged
as before visibility was recorded: `gpu-driver` fails a GPU the loaded driver does not list —
a guess may not pass a node whose driver lost a GPU, and a capture that cannot tell is rare
(a container without the driver's /proc entries; the legacy runtime's is recognised by the
host). The environment (SLURM job, pod, container) only says *who* hid a GPU.
"""

from __future__ import annotations

from netdoctor.inventory.model import Inventory, ProcessVisibility, SourceState

HIDING_STATES = ("denied", "absent")
STATE_TEXT = {"denied": "its device node is denied to this process (device cgroup)",
              "absent": "its device node is not in this process's /dev (not given to this container)"}


def hidden_by(seen: ProcessVisibility | None) -> str | None:
    """Who narrowed this process's GPUs, from its environment: explanation only, never evidence."""
    if seen is None:
        return None
    cgroup = seen.cgroup or ""
    if seen.slurm_job_id:
        step = f" step {seen.slurm_step_id}" if seen.slurm_step_id else ""
        gpus = f", given GPUs {seen.slurm_gpus}" if seen.slurm_gpus else ""
        return f"SLURM job {seen.slurm_job_id}{step}{gpus}"
    if "kubepods" in cgroup or seen.kubernetes_service_host:
        return f"a Kubernetes pod ({cgroup})" if "kubepods" in cgroup else "a Kubernetes pod"
    if seen.container:
        return f"a container ({seen.container})"
    if "slurm" in cgroup or "/job_" in cgroup:
        return f"a SLURM cgroup ({cgroup})"
    if seen.nvidia_visible_devices is not None and seen.nvidia_visible_devices.lower() not in ("all", ""):
        return f"NVIDIA_VISIBLE_DEVICES={seen.nvidia_visible_devices}"
    return None


def nvml_visible(node: Inventory) -> int:
    """GPUs NVML answered for (its device count where that is larger: GPUs it cannot open count)."""
    listed = sum(1 for gpu in node.gpus if "nvml" in gpu.sources)
    return max(listed, node.nvml_device_count or 0)


def device_node_state(node: Inventory, address: str) -> str:
    """"ok", "absent", "denied" or "unknown" (also where nothing was recorded)."""
    nodes = node.visibility.device_nodes if node.visibility is not None else None
    state = (nodes or {}).get(address, "unknown")
    return state if state in ("ok", "absent", "denied") else "unknown"


def missing_from_nvml(node: Inventory) -> list[str]:
    """The bus GPUs a working NVML does not list (none when NVML answers for as many as the bus shows)."""
    on_bus = node.pci_gpus
    if not on_bus or node.source("nvml").state is not SourceState.OK or nvml_visible(node) >= len(on_bus):
        return []
    listed = {gpu.pci_address for gpu in node.gpus if "nvml" in gpu.sources}
    return sorted(set(on_bus) - listed)


def hiding_reason(states: set[str]) -> str:
    """What keeps these device nodes (`HIDING_STATES`) from this process, in words."""
    return " / ".join(STATE_TEXT[state] for state in HIDING_STATES if state in states)


def hidden_gpus(node: Inventory) -> tuple[list[str], str] | None:
    """The bus GPUs NVML does not list whose device node this process may not open, and why;
    None when there are none."""
    hidden = [address for address in missing_from_nvml(node) if device_node_state(node, address) in HIDING_STATES]
    if not hidden:
        return None
    reason = hiding_reason({device_node_state(node, address) for address in hidden})
    who = hidden_by(node.visibility)
    return hidden, f"{reason}: {who}" if who else reason


def lost_gpus(node: Inventory) -> list[str]:
    """The bus GPUs NVML does not list although this process opens their device node: the driver lost them."""
    return [address for address in missing_from_nvml(node) if device_node_state(node, address) == "ok"]
