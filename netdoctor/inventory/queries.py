"""Questions about one inventory that several checks (and pack selection) ask.

Pure functions of the inventory model: where an HCA sits relative to the GPUs, which RDMA
device is an SR-IOV VF's physical function, why a source gave no fact, the versions a node
reports and its ports' first-hop switches, and the GPUs and NICs of the PCIe tree with their
paths to the root port.
"""

from __future__ import annotations

from typing import Any

from netdoctor.inventory.hardware import FABRIC_NETDEV_DRIVERS, efa_generation, is_efa
from netdoctor.inventory.model import Gpu, Hca, Inventory, PciPathFunction, Port
from netdoctor.parsers.nccl_env import nccl_integer
from netdoctor.records import record
from netdoctor.util import natural_key

# PCIe distances from `nvidia-smi topo -m` that put a NIC next to a GPU: at most one bridge
# (PIX) or several bridges of one PCIe switch tree (PXB), never through the CPU's root complex.
NEAR_GPU_LEVELS = ("PIX", "PXB")
# Bridges between a device and its root port: two levels of switch on real GPU servers; the
# bound keeps a walk up a hostile snapshot's tree short.
MAX_PCI_DEPTH = 64


def gpus_attached_by_c2c(inventory: Inventory) -> bool:
    """Grace (GH200/GB200/GB300): the GPUs are NUMA nodes of their own (`memory_numa_node`) and
    attach to the CPU over NVLink-C2C, so `nvidia-smi topo -m` prints SYS between every GPU and
    every NIC by design; the CPU socket (NUMA node) is what places a NIC beside a GPU there."""
    return any(gpu.memory_numa_node is not None for gpu in inventory.gpus)


@record(frozen=True)
class GpuProximity:
    """Whether an HCA sits next to a GPU, and on what evidence (`basis`, for findings)."""

    near: bool | None          # None: cannot be told
    basis: str


def gpu_proximity(inventory: Inventory, hca: Hca) -> GpuProximity:
    """Is `hca` PIX or PXB to at least one GPU in `nvidia-smi topo -m`?

    Without a usable matrix (nvidia-smi missing or hung, no NIC legend, the HCA not in it)
    the fallback is weaker: the HCA shares a NUMA node with a GPU. On a two-socket node with
    GPUs on both sockets every NIC passes it, so the basis says which one was used.
    """
    topology = inventory.topology
    if topology is None:
        why = f"no nvidia-smi topo -m matrix ({inventory.source('nvidia-smi-topo-m').reason()})"
    elif not topology.nic_names:
        why = "nvidia-smi topo -m printed no NIC legend"
    else:
        label = topology.nic_label(hca.name)
        levels = {gpu: topology.link(gpu, label) for gpu in topology.gpus} if label else {}
        known = {gpu: level for gpu, level in levels.items() if level is not None}
        if known:
            near = [gpu for gpu, level in known.items() if level in NEAR_GPU_LEVELS]
            if near:
                return GpuProximity(True, f"{known[near[0]]} to {near[0]} in nvidia-smi topo -m")
            summary = ", ".join(sorted(set(known.values())))
            if not gpus_attached_by_c2c(inventory):
                return GpuProximity(False, f"no GPU at PIX/PXB in nvidia-smi topo -m (only {summary})")
            why = f"Grace GPUs attach over NVLink-C2C, nvidia-smi topo -m shows only {summary} to NICs"
        else:
            why = f"{hca.name} is not in the nvidia-smi topo -m matrix"
    if not inventory.gpus:
        return GpuProximity(None, f"no GPUs known and {why}")
    gpu_nodes = {gpu.numa_node for gpu in inventory.gpus if gpu.numa_node is not None}
    if hca.numa_node is None or not gpu_nodes:
        return GpuProximity(None, f"{why}, and the NUMA node of {hca.name} or of the GPUs is unknown")
    sharing = [gpu.label for gpu in sorted(inventory.gpus, key=lambda gpu: gpu.index)
               if gpu.numa_node == hca.numa_node]
    if sharing:
        return GpuProximity(True, f"NUMA node {hca.numa_node} shared with {sharing[0]} "
                                  f"(NUMA fallback: {why})")
    return GpuProximity(False, f"no GPU on NUMA node {hca.numa_node} (NUMA fallback: {why})")


# `nvidia-smi topo -m` distances, nearest first.
TOPO_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def nearest_gpu(inventory: Inventory, hca: Hca) -> tuple[Gpu | None, str]:
    """The GPU nearest `hca` (the one whose traffic it carries in a rail-optimised job) and
    the evidence: the topo matrix level, else a shared NUMA node, else none (None)."""
    gpus = sorted((gpu for gpu in inventory.gpus if not gpu.lost), key=lambda gpu: gpu.index)
    topology = inventory.topology
    label = topology.nic_label(hca.name) if topology is not None and topology.nic_names else None
    if label:
        ranked = [(TOPO_LEVELS.index(level), gpu) for gpu in gpus
                  if (level := topology.link(gpu.label, label)) in TOPO_LEVELS]
        if ranked:
            rank, gpu = min(ranked, key=lambda item: (item[0], item[1].index))
            # Grace: SYS to every NIC by design (NVLink-C2C); the NUMA node places the NIC instead.
            if TOPO_LEVELS[rank] != "SYS" or not gpus_attached_by_c2c(inventory):
                return gpu, f"{TOPO_LEVELS[rank]} in nvidia-smi topo -m"
    if is_efa(hca) and hca.pci_address:
        # nvidia-smi does not show EFA devices: the PCIe tree places them.
        ranked = [(TOPO_LEVELS.index(level), gpu) for gpu in gpus if gpu.pci_address
                  and (level := pcie_level(inventory, gpu.pci_address, hca.pci_address)) in NEAR_GPU_LEVELS]
        if ranked:
            rank, gpu = min(ranked, key=lambda item: (item[0], item[1].index))
            return gpu, f"{TOPO_LEVELS[rank]} in the PCIe tree"
    same_node = [gpu for gpu in gpus if hca.numa_node is not None and gpu.numa_node == hca.numa_node]
    if same_node:
        return same_node[0], f"NUMA node {hca.numa_node}"
    return None, "no GPU shares its PCIe switch or NUMA node"


def physical_function(inventory: Inventory, hca: Hca) -> Hca | None:
    """The RDMA device of an SR-IOV VF's physical function, when this node has it.

    A VF shares its PF's physical link (its port state follows the PF and the vport, its
    PCIe link is the PF's): such a VF is judged through its PF. A VF whose PF is not an RDMA
    device here (a cloud VM sees only VFs, and no `physfn` link) is judged itself.
    """
    if hca.physical_function is None:
        return None
    return next((other for other in inventory.hcas
                 if other is not hca and other.pci_address == hca.physical_function), None)


def virtual_function_note(inventory: Inventory, hca: Hca) -> str | None:
    """The skip sentence for a VF judged through its PF, or None when `hca` is judged itself."""
    parent = physical_function(inventory, hca)
    if parent is None:
        return None
    return (f"SR-IOV virtual function of {hca.physical_function} ({parent.name}): judged through its "
            "physical function")


def unavailable_reason(inventory: Inventory, *source_names: str) -> str:
    """Why none of these sources gave a fact: `ibstat is not available; sysfs failed: ...`."""
    reasons = [inventory.source(name).reason() for name in source_names if not inventory.source(name).usable]
    if reasons:
        return "; ".join(reasons)
    return f"not reported by {' or '.join(source_names)}"


def versions(inventory: Inventory, nccl: str | None = None, net_plugin: str | None = None) -> dict[str, Any]:
    """The software and firmware versions the node reports (CONTRACT 6.3 `versions`): what a
    fleet compares to find the odd node. Several values of one kind on one node are all kept.

    `nccl`: the NCCL library version the probe (or the NIC loopback) loaded, where one ran;
    `net_plugin`: the network plugin it loaded (`aws-ofi-nccl 1.14.2`, `GPUDirectTCPX 3.1.8`).
    `ofed` is what `ofed_info -s` printed; `mlx5_core` the loaded module's version where it has
    one (MLNX_OFED's modules do, `23.10-1.1.9`; inbox ones do not)."""
    found: dict[str, Any] = {}
    if inventory.driver_version:
        found["driver"] = inventory.driver_version
    cuda = inventory.cuda_driver_version
    if cuda:
        found["cuda_driver"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
    # EFA has no firmware a node sees (fw_ver 0.0.0.0 everywhere): its drift is the efa driver's.
    for key, pairs in (("hca_firmware", [(f"{hca.ca_type or hca.model or '?'} {hca.board_id or '?'}", hca.firmware)
                                         for hca in inventory.hcas if not hca.is_virtual_function and not is_efa(hca)]),
                       ("vbios", [(gpu.name or "?", gpu.vbios_version) for gpu in inventory.gpus])):
        values: dict[str, set[str]] = {}
        for what, version in pairs:
            if version:
                values.setdefault(what, set()).add(version)
        if values:
            found[key] = {what: ", ".join(sorted(seen)) for what, seen in sorted(values.items())}
    # `mlx5_core` is a kind of its own: a node whose ofed_info hung must not look like drift
    # against `ofed`. `efa`/`libfabric` are AWS EFA's stack; aws-ofi-nccl shows in NCCL's own log.
    for key, value in (("kernel", inventory.kernel_release), ("ofed", inventory.ofed_version),
                       ("mlx5_core", inventory.rdma_driver_version),
                       ("fabric_manager", inventory.fabric_manager_version), ("efa", inventory.efa_driver_version),
                       ("libfabric", inventory.libfabric_version), ("nccl", nccl), ("nccl_net_plugin", net_plugin)):
        if value:
            found[key] = value
    return found


def neighbors(inventory: Inventory) -> dict[str, dict[str, Any]]:
    """Each RDMA port's first-hop switch (CONTRACT 6.3 `neighbors`), where a source named one:
    `{"mlx5_3:1": {"switch_guid": "0x...", "switch_name": "leaf-07", "switch_port": 17,
    "source": "smpquery"}}`. A virtual function shares its physical function's cable: left out."""
    found: dict[str, dict[str, Any]] = {}
    for hca in inventory.hcas:
        if hca.is_virtual_function:
            continue
        for number in sorted(hca.ports):
            hop = hca.ports[number].neighbor
            if hop is None:
                continue
            entry: dict[str, Any] = {"switch_guid": hop.switch_guid, "switch_name": hop.switch_name,
                                     "switch_port": hop.switch_port, "source": hop.source}
            if hop.port_id is not None and hop.switch_port is None:
                entry["switch_port_id"] = hop.port_id
            found[hca.ports[number].name] = entry
    return found


def pci_endpoints(inventory: Inventory) -> dict[str, tuple[str, str]]:
    """PCI address -> (label, kind) of the GPUs (`GPU0`, "gpu") and RDMA NICs (`mlx5_0`, "nic")
    the PCIe tree holds, GPUs first; a function two RDMA devices share is named once."""
    tree = inventory.pci_tree or {}
    found: dict[str, tuple[str, str]] = {}
    for gpu in sorted(inventory.gpus, key=lambda gpu: gpu.index):
        if gpu.pci_address in tree:
            found[gpu.pci_address] = (gpu.label, "gpu")
    for hca in inventory.hcas:
        if hca.pci_address in tree and hca.pci_address not in found:
            found[hca.pci_address] = (hca.name, "nic")
    return found


def path_from_root(tree: dict[str, PciPathFunction], address: str) -> list[str]:
    """The PCI functions from the root port down to `address` (which is in `tree`)."""
    path = [address]
    while (parent := tree[path[-1]].parent) is not None and parent in tree and len(path) < MAX_PCI_DEPTH:
        path.append(parent)
    return path[::-1]


def unbound_efa_functions(inventory: Inventory) -> dict[str, str]:
    """EFA PCI functions with no RDMA device (address -> `efa1`): the driver is not bound to them
    or they failed to initialise. Empty where the PCI bus was not read, and where some EFA device's
    PCI function is unknown (then no function can be told unbound)."""
    if any(is_efa(hca) and not hca.pci_address for hca in inventory.hcas):
        return {}
    bound = {hca.pci_address for hca in inventory.hcas if hca.pci_address}
    return {address: efa_generation(device) or device
            for address, device in sorted((inventory.pci_efa or {}).items()) if address not in bound}


def pcie_level(inventory: Inventory, first: str, second: str) -> str | None:
    """The `nvidia-smi topo -m` distance between two PCI functions, read from the PCIe tree:
    PIX (on the ports of one switch), PXB (through more switch levels), PHB (only the root port
    shared), NODE/SYS (other root ports, by NUMA node). None where the tree does not hold both, or either sits on a root
    bus with no bridge above it (a flattened virtual machine: no place to read)."""
    tree = inventory.pci_tree or {}
    if first not in tree or second not in tree:
        return None
    path_a, path_b = path_from_root(tree, first), path_from_root(tree, second)
    if len(path_a) < 2 or len(path_b) < 2:
        return None
    shared = 0
    while shared < min(len(path_a), len(path_b)) - 1 and path_a[shared] == path_b[shared]:
        shared += 1
    if shared == 0:
        numa_a, numa_b = _numa_of(inventory, first), _numa_of(inventory, second)
        if numa_a is None or numa_b is None:
            return None
        return "NODE" if numa_a == numa_b else "SYS"
    if shared == 1 and tree[path_a[0]].port_type in (None, "root_port"):
        return "PHB"
    # nvidia-smi counts a PCIe switch as one bridge: two devices on ports of the switch they share
    # are PIX; a further switch level between them is PXB.
    return "PIX" if len(path_a) - shared <= 2 and len(path_b) - shared <= 2 else "PXB"


def _numa_of(inventory: Inventory, address: str) -> int | None:
    for gpu in inventory.gpus:
        if gpu.pci_address == address:
            return gpu.numa_node
    for hca in inventory.hcas:
        if hca.pci_address == address:
            return hca.numa_node
    for netdev in inventory.netdevs:
        if netdev.pci_address == address:
            return netdev.numa_node
    return None


def gpu_fabric_netdevs(inventory: Inventory) -> dict[str, list[str]] | None:
    """The netdevs that carry a GPU fabric without RDMA (GCP gVNIC for GPUDirect-TCPX/TCPXO):
    netdev -> the GPUs on its PCIe switch, for each fabric-driver netdev that shares a switch with
    a GPU. The primary gVNIC, on the root bus, is not one of them. None where the node has no such
    netdev, or the PCIe tree cannot place them."""
    candidates = [netdev for netdev in inventory.netdevs if netdev.driver in FABRIC_NETDEV_DRIVERS and netdev.pci_address]
    if not candidates or not inventory.pci_tree:
        return None
    placed: dict[str, list[str]] = {}
    for netdev in sorted(candidates, key=lambda item: natural_key(item.name)):
        near = [gpu.label for gpu in sorted(inventory.gpus, key=lambda gpu: gpu.index) if gpu.pci_address
                and pcie_level(inventory, gpu.pci_address, netdev.pci_address or "") in NEAR_GPU_LEVELS]
        if near:
            placed[netdev.name] = near
    return placed or None


@record(frozen=True)
class TrafficClass:
    """The ToS byte NCCL's RoCE QPs on a port are sent with, and what set it."""

    tos: int
    why: str          # "NCCL_IB_TC unset", "NCCL_IB_TC=106 (environment)", "mlx5_0 tc/1/traffic_class 106 (...)"
    # Set where netdoctor sees it (the port, NCCL's files, this process's environment); False:
    # NCCL's default, which a job's own environment may still change.
    configured: bool = True

    @property
    def dscp(self) -> int:
        return self.tos >> 2      # the low two bits are ECN


def nccl_traffic_class(inventory: Inventory, port: Port | None) -> TrafficClass | None:
    """MLNX_OFED's per-port override (`tc/N/traffic_class`: it rewrites every QP's, NCCL's
    included) where set; else NCCL_IB_TC as NCCL reads it (src/transport/net_ib.cc: the GRH
    traffic_class, one byte; -1, NCCL 2.28's "unset", and no setting mean 0); None where NCCL's
    settings were not read. rdma_cm's default_roce_tos never reaches NCCL (it uses no rdma_cm)."""
    if port is not None and port.traffic_class_override is not None:
        return TrafficClass(port.traffic_class_override,
                            f"{port.hca} tc/{port.number}/traffic_class {port.traffic_class_override} (overrides NCCL_IB_TC)")
    if inventory.nccl is None:
        return None
    setting = inventory.nccl.get("NCCL_IB_TC")
    value = nccl_integer(setting.value) if setting is not None else None
    if setting is None or value is None or value == -1:
        return TrafficClass(0, "NCCL_IB_TC unset" if setting is None else f"NCCL_IB_TC={setting.value!r} (NCCL's default)",
                            configured=False)
    return TrafficClass(value & 0xFF, f"NCCL_IB_TC={setting.value} ({setting.origin})")
