"""Hand-built inventories for the checks-B tests (pcie-link, pfc-ecn, gpudirect, gpu-nic-affinity).

The shapes follow real nodes: an 8-GPU H100 box with 8 ConnectX-7 NDR compute NICs and
one storage NIC (DGX H100 layout), a dual-port RoCE node, and plain variations of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from netdoctor.checks.api import CheckContext
from netdoctor.inventory.model import (
    Gpu,
    Hca,
    Inventory,
    LinkLayer,
    LinkRate,
    Netdev,
    PcieLink,
    PeerMemory,
    Port,
    PortState,
    PhysState,
    QosConfig,
    SourceState,
    SourceStatus,
    Topology,
)
from netdoctor.report.model import Finding

CAPTURED_AT = "2026-11-21T22:40:00Z"

# PCI addresses of a DGX H100: GPU i and its rail NIC mlx5_i share one PCIe switch.
GPU_ADDRESSES = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                 "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
NIC_ADDRESSES = ("0000:1a:00.0", "0000:2c:00.0", "0000:3c:00.0", "0000:5e:00.0",
                 "0000:9c:00.0", "0000:ad:00.0", "0000:bc:00.0", "0000:dc:00.0")
STORAGE_NIC_ADDRESS = "0000:c0:00.0"
GEN_SPEED_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}


def sources(*names: str, state: SourceState = SourceState.OK, detail: str = "") -> dict[str, SourceStatus]:
    return {name: SourceStatus(name, state, detail) for name in names}


def pcie_link(address: str, current_gen: int = 5, current_width: int = 16, *, max_gen: int = 5,
              max_width: int = 16, source: str = "sysfs") -> PcieLink:
    # NVML reports generations only; sysfs reports speeds in GT/s (the builder derives gens).
    nvml = source == "nvml"
    return PcieLink(address, current_gen, max_gen, current_width, max_width,
                    None if nvml else GEN_SPEED_GTS[current_gen], None if nvml else GEN_SPEED_GTS[max_gen], source)


def gpu(index: int, *, numa_node: int | None = None, pstate: int | None = 0, pcie: PcieLink | None = None,
        dmabuf: bool | None = None, address: str | None = None) -> Gpu:
    address = address or GPU_ADDRESSES[index]
    return Gpu(index, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{index:08x}", pci_address=address,
               numa_node=(0 if index < 4 else 1) if numa_node is None else numa_node,
               pcie=pcie if pcie is not None else pcie_link(address, source="nvml"),
               performance_state=pstate, dmabuf_supported=dmabuf, sources=("nvml",))


def ib_hca(index: int, *, address: str | None = None, numa_node: int | None = None,
           name: str | None = None) -> Hca:
    name = name or f"mlx5_{index}"
    port = Port(name, 1, PortState.ACTIVE, PhysState.LINK_UP, LinkRate(400, 4, "NDR"), LinkLayer.INFINIBAND,
                lid=index + 1, sm_lid=1, netdev=f"ibp{index}s0")
    return Hca(name, ca_type="MT4129", model="ConnectX-7", firmware="28.39.1002",
               pci_address=address or NIC_ADDRESSES[index],
               numa_node=(0 if index < 4 else 1) if numa_node is None else numa_node,
               ports={1: port}, sources=("sysfs",))


def roce_hca(name: str, netdev: str, address: str, numa_node: int = 0) -> Hca:
    port = Port(name, 1, PortState.ACTIVE, PhysState.LINK_UP, LinkRate(400, 4), LinkLayer.ETHERNET, netdev=netdev)
    return Hca(name, ca_type="MT4129", model="ConnectX-7", pci_address=address, numa_node=numa_node,
               ports={1: port}, sources=("sysfs",))


def roce_netdev(name: str, rdma_port: str, *, trust: str | None = "dscp", pfc: tuple[int, ...] = (3,),
                ecn_np: Mapping[int, bool] | None = None, ecn_rp: Mapping[int, bool] | None = None,
                qos: bool = True) -> Netdev:
    all_on = {priority: priority == 3 for priority in range(8)}
    return Netdev(name, mtu=4200, operstate="up", speed_mbps=400000, arp_type=1, rdma_port=rdma_port,
                  qos=QosConfig(trust, pfc, "OS controlled") if qos else None,
                  ecn_np=dict(all_on if ecn_np is None else ecn_np),
                  ecn_rp=dict(all_on if ecn_rp is None else ecn_rp), sources=("sysfs",))


# `nvidia-smi topo -m` of a DGX H100: GPUi is PIX to NICi, NODE to the other NICs of its
# socket, SYS across; NIC8 (storage) is SYS to GPUs 0-3 and NODE to 4-7.
def dgx_topology(override: Mapping[tuple[str, str], str] | None = None, nic_count: int = 9) -> Topology:
    links: dict[tuple[str, str], str] = {}
    for gpu_index in range(8):
        for nic_index in range(nic_count):
            if nic_index == 8:
                level = "SYS" if gpu_index < 4 else "NODE"
            elif nic_index == gpu_index:
                level = "PIX"
            elif (nic_index < 4) == (gpu_index < 4):
                level = "NODE"
            else:
                level = "SYS"
            links[(f"GPU{gpu_index}", f"NIC{nic_index}")] = level
    links.update(override or {})
    nic_names = {f"NIC{i}": f"mlx5_{i}" for i in range(nic_count)}
    return Topology(tuple(f"GPU{i}" for i in range(8)), tuple(f"NIC{i}" for i in range(nic_count)),
                    links, nic_names)


def dgx_inventory(*, gpus: Iterable[Gpu] | None = None, hcas: Iterable[Hca] | None = None,
                  topology: Topology | None | str = "default", peer_memory: PeerMemory | None = None,
                  with_storage_nic: bool = True) -> Inventory:
    gpu_list = list(gpus) if gpus is not None else [gpu(i) for i in range(8)]
    if hcas is None:
        hca_list = [ib_hca(i) for i in range(8)]
        if with_storage_nic:
            hca_list.append(ib_hca(8, address=STORAGE_NIC_ADDRESS, numa_node=1))
    else:
        hca_list = list(hcas)
    pcie = {link.address: link for link in
            [pcie_link(g.pci_address) for g in gpu_list if g.pci_address]
            + [pcie_link(h.pci_address) for h in hca_list if h.pci_address]}
    return Inventory(
        host="node017", captured_at=CAPTURED_AT, boot_id="b0", driver_version="580.95.05",
        gpus=gpu_list, hcas=hca_list, pcie=pcie,
        topology=dgx_topology() if topology == "default" else topology,  # type: ignore[arg-type]
        peer_memory=peer_memory or PeerMemory(nvidia_peermem=True, nv_peer_mem=False, gdrdrv=False),
        sources=sources("sysfs", "nvml", "ibstat", "nvidia-smi-topo-m"),
    )


def run_check(function: Any, check_id: str, inventory: Inventory, rules: Mapping[str, Any]) -> list[Finding]:
    ctx = CheckContext(check_id, inventory, rules=rules)
    return list(function(ctx))


def by_subject(findings: list[Finding]) -> dict[str, list[Finding]]:
    grouped: dict[str, list[Finding]] = {}
    for finding in findings:
        grouped.setdefault(finding.subject, []).append(finding)
    return grouped


def pack_section(check_id: str, pack: str = "default") -> dict[str, Any]:
    """The section of `check_id` in a bundled rule pack, through the real loader."""
    from netdoctor.checks.rules import load_rules

    return dict(load_rules(pack, env={}).section(check_id))


def pack_rules(check_id: str, pack: str = "default", **overrides: Any) -> Mapping[str, Any]:
    """The section as checks get it from the engine (it knows its pack's port classes), plus overrides."""
    from netdoctor.checks.rules import RuleSection, load_rules

    loaded = load_rules(pack, env={})
    return RuleSection({**loaded.section(check_id), **overrides}, loaded)
