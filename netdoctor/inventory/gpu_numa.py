"""A GPU's NUMA node: the node of the CPU it hangs off, and on Grace the node of its own memory.

Three sources name a GPU's NUMA node, and on Grace (GH200, GB200, GB300) they do not name the
same thing:

- the kernel: the PCI function's `numa_node` (sysfs), the node of the root port's CPU socket;
- `nvidia-smi topo -m`: its `NUMA Affinity` column (the parser keeps the CPU's node of it);
- NVML's `nvmlDeviceGetNumaNodeId`, which "only applies to platforms where the GPUs are NUMA
  nodes" (nvml.h) and answers NOT_SUPPORTED elsewhere (the host then reads the same sysfs
  file). On Grace it is the GPU memory's node: 2/10/18/26 on a GB200 tray, whose CPU nodes are
  0 and 1, and which holds no CPU and no NIC.

Placement (which NIC a GPU's traffic should use) follows the CPU's node, so `Gpu.numa_node` is
that one, and NVML's memory node is kept in `Gpu.memory_numa_node`. NVML's value is read as a
memory node only where the kernel or topo name another node for the GPU AND no PCI function of
the node hangs off NVML's node; any other disagreement stays a Conflict, NVML's value chosen.
"""

from __future__ import annotations

from collections.abc import Mapping

from netdoctor.inventory.merge import Draft
from netdoctor.inventory.model import Conflict, Gpu

TOPO = "nvidia-smi-topo-m"


def settle_gpu_numa(draft: Draft, sysfs_numa: Mapping[str, int | None]) -> None:
    """Set each GPU's `numa_node` (CPU side) and `memory_numa_node` (Grace) from NVML's value
    (already on the GPU), `sysfs_numa` (GPU label -> the PCI function's numa_node) and topo -m."""
    inventory = draft.inventory
    topology = inventory.topology
    topo_numa = dict(topology.numa_affinity) if topology is not None else {}
    cpu_nodes = {node for node in (*sysfs_numa.values(), *topo_numa.values()) if node is not None}
    cpu_nodes |= {hca.numa_node for hca in inventory.hcas if hca.numa_node is not None}
    cpu_nodes |= {netdev.numa_node for netdev in inventory.netdevs if netdev.numa_node is not None}
    for gpu in inventory.gpus:
        _settle(draft, gpu, sysfs_numa.get(gpu.label), topo_numa.get(gpu.label), cpu_nodes)


def _settle(draft: Draft, gpu: Gpu, sysfs: int | None, topo: int | None, cpu_nodes: set[int]) -> None:
    facts = [(source, value) for source, value in (("sysfs", sysfs), (TOPO, topo)) if value is not None]
    chosen = (gpu.sources[0] if gpu.sources else "nvml") if gpu.numa_node is not None else None
    if chosen and facts and all(value != gpu.numa_node for _, value in facts) and gpu.numa_node not in cpu_nodes:
        gpu.memory_numa_node, gpu.numa_node, chosen = gpu.numa_node, None, None
    for source, value in facts:
        if gpu.numa_node is None:
            gpu.numa_node, chosen = value, source
        elif value != gpu.numa_node:
            draft.inventory.conflicts.append(Conflict(gpu.label, "numa_node", {chosen or "earlier source": gpu.numa_node,
                                                                              source: value}, chosen=chosen))
