"""The one set of hand-built inventories for check unit tests, shaped like real nodes.

`dgx_h100()` is a DGX H100: 8 H100 GPUs and 8 ConnectX-7 (MT4129) NDR InfiniBand rails
mlx5_0..7 (4X, 400 Gb/s, LID 0x11.., SM LID 0x1, P_Key 0xffff, IB MTU 4096, IPoIB ibp*s0
at 4092), GPU i and rail i on one PCIe switch (real DGX H100 PCI addresses; PIX in
`nvidia-smi topo -m`), PCIe Gen5 links, nvidia_peermem loaded. Its storage NIC is, by
`storage`: a BlueField-3 (MT41692) `mlx5_bond_0` Ethernet port at 200 Gb/s (2X NDR) with
netdev bond0 ("bluefield", the default), a ConnectX-7 InfiniBand `mlx5_8` ("cx7-ib"), or none.
`roce_node()` has 8 ConnectX-7 400GbE RoCE ports with netdevs at MTU 9000; `roce_hca()` and
`roce_netdev()` build single RoCE ports with their QoS settings.
`run_check()` runs one check function the way the engine does: with a real bundled pack
(its port classes included), optionally with some of the check's settings overridden.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from netdoctor.checks.api import CheckContext, CounterHistory
from netdoctor.inventory.model import (
    Gpu,
    Hca,
    Inventory,
    LinkLayer,
    LinkRate,
    Netdev,
    PcieLink,
    PeerMemory,
    PhysState,
    Port,
    PortState,
    QosConfig,
    SourceState,
    SourceStatus,
    Topology,
)
from netdoctor.packs import RulePack, load_rules
from netdoctor.parsers.fi_info import FiProvider
from netdoctor.parsers.nccl_env import nccl_settings
from netdoctor.report.model import Finding, Status

CAPTURED_AT = "2026-11-21T22:40:00Z"
BOOT_ID = "5f2c1e3a-8a0b-4a8e-9d3c-2b7f4f0e9a11"

NDR = LinkRate(400, 4, "NDR", 106.25)
HDR = LinkRate(200, 4, "HDR", 53.125)

# PCI addresses of a DGX H100: GPU i and its rail NIC mlx5_i share one PCIe switch.
GPU_ADDRESSES = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                 "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
NIC_ADDRESSES = ("0000:1a:00.0", "0000:2c:00.0", "0000:3c:00.0", "0000:5e:00.0",
                 "0000:9c:00.0", "0000:ad:00.0", "0000:bc:00.0", "0000:dc:00.0")
STORAGE_NIC_ADDRESS = "0000:c0:00.0"
GEN_SPEED_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}

# A clean port's counters as the mlx5 sysfs counters/ directory gives them.
CLEAN_COUNTERS: dict[str, int | None] = {
    "symbol_error": 0,
    "link_error_recovery": 0,
    "link_downed": 0,
    "port_rcv_errors": 0,
    "port_rcv_remote_physical_errors": 0,
    "port_rcv_switch_relay_errors": 0,
    "port_xmit_discards": 0,
    "port_xmit_constraint_errors": 0,
    "port_rcv_constraint_errors": 0,
    "local_link_integrity_errors": 0,
    "excessive_buffer_overrun_errors": 0,
    "VL15_dropped": 0,
    "port_xmit_data": 93482015839,
    "port_rcv_data": 93467110426,
    "port_xmit_wait": 1204,
}
CLEAN_HW_COUNTERS: dict[str, int] = {
    "out_of_sequence": 0,
    "packet_seq_err": 0,
    "local_ack_timeout_err": 0,
    "rnr_nak_retry_err": 0,
    "out_of_buffer": 0,
    "roce_adp_retrans": 3,
}


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


def h100_gpus(count: int = 8) -> list[Gpu]:
    return [gpu(index) for index in range(count)]


def ib_port(hca: str, number: int = 1, *, lid: int | None = 0x11, netdev: str | None = None, **changes: Any) -> Port:
    values: dict[str, Any] = dict(
        state=PortState.ACTIVE, phys_state=PhysState.LINK_UP, rate=NDR, link_layer=LinkLayer.INFINIBAND,
        lid=lid, sm_lid=0x1, lmc=0, active_mtu=4096, max_mtu=4096, netdev=netdev, pkeys=("0xffff",),
        counters=dict(CLEAN_COUNTERS), counters_source="sysfs", hw_counters=dict(CLEAN_HW_COUNTERS),
        sources=("sysfs", "ibstat"),
    )
    values.update(changes)
    return Port(hca, number, **values)


def ib_hca(index: int, *, name: str | None = None, address: str | None = None, numa_node: int | None = None,
           **port_changes: Any) -> Hca:
    """A ConnectX-7 NDR InfiniBand HCA; rails 0-7 sit at the DGX H100 addresses."""
    name = name or f"mlx5_{index}"
    port = ib_port(name, lid=0x11 + index, netdev=f"ibp{index}s0", **port_changes)
    if address is None:
        address = NIC_ADDRESSES[index] if index < len(NIC_ADDRESSES) else f"0000:{0xe0 + index:02x}:00.0"
    return Hca(name, ca_type="MT4129", model="ConnectX-7", firmware="28.39.1002", pci_address=address,
               numa_node=(0 if index < 4 else 1) if numa_node is None else numa_node,
               ports={1: port}, sources=("sysfs", "ibstat"))


def storage_hca() -> Hca:
    """The DGX H100's BlueField-3 in-band storage/management port, bonded."""
    port = Port("mlx5_bond_0", 1, PortState.ACTIVE, PhysState.LINK_UP, LinkRate(200, 2, "NDR"), LinkLayer.ETHERNET,
                active_mtu=4096, max_mtu=4096, netdev="bond0", pkeys=("0xffff",),
                counters=dict(CLEAN_COUNTERS), counters_source="sysfs", hw_counters=dict(CLEAN_HW_COUNTERS),
                sources=("sysfs",))
    return Hca("mlx5_bond_0", ca_type="MT41692", model="BlueField-3", pci_address=STORAGE_NIC_ADDRESS, numa_node=1,
               ports={1: port}, sources=("sysfs",))


# mlnx_qos's default dscp2prio map (trust dscp): DSCP 0-7 -> priority 0, 8-15 -> 1, ... 56-63 -> 7.
DEFAULT_DSCP_MAP = tuple(dscp >> 3 for dscp in range(64))


def roce_hca(name: str, netdev: str, address: str, numa_node: int = 0, *, traffic_class: int | None = 106) -> Hca:
    """A RoCE CX-7 whose QPs leave with ToS 106 (DSCP 26 -> priority 3: MLNX_OFED's tc/1/traffic_class)."""
    port = Port(name, 1, PortState.ACTIVE, PhysState.LINK_UP, LinkRate(400, 4), LinkLayer.ETHERNET, netdev=netdev,
                traffic_class_override=traffic_class)
    return Hca(name, ca_type="MT4129", model="ConnectX-7", pci_address=address, numa_node=numa_node,
               ports={1: port}, sources=("sysfs",))


def roce_netdev(name: str, rdma_port: str, *, trust: str | None = "dscp", pfc: tuple[int, ...] = (3,),
                ecn_np: Mapping[int, bool] | None = None, ecn_rp: Mapping[int, bool] | None = None,
                qos: bool = True) -> Netdev:
    all_on = {priority: priority == 3 for priority in range(8)}
    return Netdev(name, mtu=4200, operstate="up", speed_mbps=400000, arp_type=1, rdma_port=rdma_port,
                  qos=QosConfig(trust, pfc, "OS controlled", DEFAULT_DSCP_MAP if trust == "dscp" else ()) if qos else None,
                  ecn_np=dict(all_on if ecn_np is None else ecn_np),
                  ecn_rp=dict(all_on if ecn_rp is None else ecn_rp), sources=("sysfs",))


# `nvidia-smi topo -m` of a DGX H100: GPUi is PIX to NICi, NODE to the other NICs of its
# socket, SYS across; NIC8 (storage, named by `storage_name`) is SYS to GPUs 0-3 and NODE to 4-7.
def dgx_topology(override: Mapping[tuple[str, str], str] | None = None, nic_count: int = 9,
                 storage_name: str = "mlx5_8") -> Topology:
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
    nic_names = {f"NIC{i}": (storage_name if i == 8 else f"mlx5_{i}") for i in range(nic_count)}
    return Topology(tuple(f"GPU{i}" for i in range(8)), tuple(f"NIC{i}" for i in range(nic_count)),
                    links, nic_names)


def dgx_h100(*, storage: str | None = "bluefield", host: str = "node017", gpus: Iterable[Gpu] | None = None,
             hcas: Iterable[Hca] | None = None, topology: Topology | None | str = "default",
             peer_memory: PeerMemory | None = None) -> Inventory:
    """A DGX H100 (see the module docstring). `hcas` replaces the rails and the storage NIC;
    `storage` still names NIC8 of the default matrix (mlx5_bond_0, else mlx5_8)."""
    gpu_list = list(gpus) if gpus is not None else h100_gpus()
    if hcas is not None:
        hca_list = list(hcas)
    else:
        hca_list = [ib_hca(index) for index in range(8)]
        if storage == "bluefield":
            hca_list.append(storage_hca())
        elif storage == "cx7-ib":
            hca_list.append(ib_hca(8, address=STORAGE_NIC_ADDRESS, numa_node=1))
        elif storage is not None:
            raise ValueError(f"storage={storage!r}: bluefield, cx7-ib or None")
    netdevs = [Netdev(port.netdev, mtu=4092, operstate="up", arp_type=32, rdma_port=port.name)
               for hca in hca_list for port in hca.ports.values()
               if port.netdev and port.link_layer is LinkLayer.INFINIBAND]
    if any(hca.name == "mlx5_bond_0" for hca in hca_list):
        netdevs.append(Netdev("bond0", mtu=9000, operstate="up", arp_type=1, rdma_port="mlx5_bond_0:1"))
    storage_name = "mlx5_bond_0" if storage == "bluefield" else "mlx5_8"
    pcie = {link.address: link for link in
            [pcie_link(item.pci_address) for item in gpu_list if item.pci_address]
            + [pcie_link(item.pci_address) for item in hca_list if item.pci_address]}
    return Inventory(
        host=host, captured_at=CAPTURED_AT, boot_id=BOOT_ID, driver_version="580.95.05",
        gpus=gpu_list, hcas=hca_list, netdevs=netdevs, pcie=pcie,
        topology=dgx_topology(storage_name=storage_name) if topology == "default" else topology,  # type: ignore[arg-type]
        peer_memory=peer_memory or PeerMemory(nvidia_peermem=True, nv_peer_mem=False, gdrdrv=False),
        sources=sources("sysfs", "nvml", "ibstat", "ibv_devinfo-v", "ibdev2netdev", "nvidia-smi-topo-m"),
    )


def roce_node(*, mtu: int = 9000) -> Inventory:
    hcas = []
    netdevs = []
    for index in range(8):
        name = f"mlx5_{index}"
        netdev = f"ens{index + 1}f0np0"
        port = Port(name, 1, PortState.ACTIVE, PhysState.LINK_UP, LinkRate(400, 4), LinkLayer.ETHERNET,
                    active_mtu=4096, max_mtu=4096, netdev=netdev, pkeys=("0xffff",),
                    counters=dict(CLEAN_COUNTERS), counters_source="sysfs", hw_counters=dict(CLEAN_HW_COUNTERS),
                    sources=("sysfs",))
        hcas.append(Hca(name, ca_type="MT4129", model="ConnectX-7", ports={1: port}, sources=("sysfs",)))
        netdevs.append(Netdev(netdev, mtu=mtu, operstate="up", arp_type=1, rdma_port=f"{name}:1"))
    return Inventory(host="roce03", captured_at=CAPTURED_AT, boot_id=BOOT_ID, gpus=h100_gpus(), hcas=hcas,
                     netdevs=netdevs, sources=sources("sysfs", "nvml", "ibstat", "ibv_devinfo-v", "ibdev2netdev"))


# AWS EFA port statistics (amzn-drivers efa_verbs.c EFA_DEFINE_PORT_STATS) and the device's.
EFA_PORT_COUNTERS = ("tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs", "recv_bytes",
                     "recv_wrs", "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err", "rdma_read_resp_bytes",
                     "rdma_write_wrs", "rdma_write_bytes", "rdma_write_wr_err", "rdma_write_recv_bytes",
                     "retrans_bytes", "retrans_pkts", "retrans_timeout_events", "unresponsive_remote_events",
                     "impaired_remote_conn_events", "submitted_cmds", "completed_cmds", "cmds_err",
                     "no_completion_cmds", "keep_alive_rcvd")


def efa_hca(gpu_index: int, slot: int, *, rate_gbps: float = 100) -> Hca:
    """One EFA device of a p5.48xlarge: four per GPU (GPU0's at 4f..52:00.0, rdmap79s0..82s0)."""
    bus = (0x4f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6)[gpu_index] + slot
    name = f"rdmap{bus}s0"
    width, speed = (4, "HDR") if rate_gbps == 200 else (4, "EDR")
    port = Port(name, 1, PortState.ACTIVE, PhysState.LINK_UP, LinkRate(rate_gbps, width, speed), LinkLayer.UNSPECIFIED,
                lid=0, sm_lid=0, active_mtu=4096, max_mtu=4096, pkeys=("0xffff",),
                hw_counters={counter: 0 for counter in EFA_PORT_COUNTERS}, sources=("sysfs",))
    return Hca(name, ca_type="efa1", model="EFA (gen 2)", firmware="0.0.0.0", pci_address=f"0000:{bus:02x}:00.0",
               numa_node=0 if gpu_index < 4 else 1, driver="efa", pci_vendor="0x1d0f", pci_device="0xefa1",
               p2p_providers=("NVIDIA",), ports={1: port}, sources=("sysfs",))


def efa_node(**environ: str) -> Inventory:
    """A p5.48xlarge: 8 H100s and 32 EFA devices; NCCL settings from `environ`."""
    hcas = [efa_hca(gpu_index, slot) for gpu_index in range(8) for slot in range(4)]
    return Inventory(host="p5-01", captured_at=CAPTURED_AT, boot_id=BOOT_ID, gpus=h100_gpus(), hcas=hcas,
                     libfabric_providers=tuple(FiProvider("efa", "efa", f"{hca.name}-rdm", "122.0", "FI_EP_RDM",
                                                          "FI_PROTO_EFA") for hca in hcas),
                     nccl=nccl_settings(environ, {}),
                     sources=sources("sysfs", "nvml", "ibstat", "ibv_devinfo-v", "fi_info-p-efa", "nccl-env"))


def port_of(inventory: Inventory, name: str) -> Port:
    port = inventory.port(name)
    assert port is not None, f"no port {name} in the test inventory"
    return port


def history_of(inventory: Inventory, *, elapsed_s: float = 3600.0,
               changes: dict[str, dict[str, int | None]] | None = None) -> CounterHistory:
    """A previous reading equal to this inventory's counters, `elapsed_s` earlier, minus `changes`."""
    ports: dict[str, dict[str, int | None]] = {}
    for port in inventory.ports:
        values: dict[str, int | None] = dict(port.counters)
        values.update({f"hw_counters/{name}": value for name, value in port.hw_counters.items()})
        values.update((changes or {}).get(port.name, {}))
        ports[port.name] = values
    return CounterHistory(taken_at="2026-11-21T21:40:00Z", elapsed_s=elapsed_s, ports=ports)


_PACKS: dict[str, RulePack] = {}


def pack(name: str = "default") -> RulePack:
    """A bundled pack (no site overrides), loaded once per test session."""
    if name not in _PACKS:
        _PACKS[name] = load_rules(name, env={})
    return _PACKS[name]


def with_overrides(rule_pack: RulePack, check_id: str, overrides: Mapping[str, Any]) -> RulePack:
    """A copy of the pack with some of `check_id`'s settings changed (only settings it has: a typo fails)."""
    section = rule_pack.data.get(check_id, {})
    unknown = sorted(set(overrides) - set(section))
    assert not unknown, f"[{check_id}] has no setting {unknown} in pack {rule_pack.name}"
    changed = copy.deepcopy(rule_pack)
    changed.data[check_id] = {**section, **overrides}
    return changed


def run_check(function: Callable[[CheckContext], Iterable[Finding]], check_id: str, inventory: Inventory, *,
              pack_name: str = "default", history: CounterHistory | None = None,
              overrides: Mapping[str, Any] | None = None, rule_pack: RulePack | None = None,
              probe: Mapping[str, Any] | None = None) -> list[Finding]:
    """Run a check function like the engine: a real pack, optional per-test overrides of its section."""
    chosen = rule_pack if rule_pack is not None else pack(pack_name)
    if overrides:
        chosen = with_overrides(chosen, check_id, overrides)
    return list(function(CheckContext(check_id, inventory, chosen, history=history, probe=probe)))


def site_pack(tmp_path: Path, base: str, text: str) -> RulePack:
    """A bundled pack with a site override file written from `text`."""
    site = tmp_path / "site-rules.toml"
    site.write_text(text)
    return load_rules(base, site_path=site, env={})


def by_subject(findings: list[Finding]) -> dict[str, list[Finding]]:
    grouped: dict[str, list[Finding]] = {}
    for finding in findings:
        grouped.setdefault(finding.subject, []).append(finding)
    return grouped


def statuses(findings: list[Finding], subject: str) -> list[Status]:
    return [finding.status for finding in findings if finding.subject == subject]


def only(findings: list[Finding], subject: str, status: Status | None = None) -> Finding:
    """The single finding of `subject` (of `status`, when given)."""
    hits = [finding for finding in findings
            if finding.subject == subject and (status is None or finding.status is status)]
    assert len(hits) == 1, f"expected one finding for {subject} ({status}), got {hits}"
    return hits[0]


def efa_instance(*, gpu_name: str = "NVIDIA H100 80GB HBM3", gpus_with_efa: Iterable[int] = range(8),
                 per_gpu: int = 4, rate_gbps: float = 100) -> Inventory:
    """An EFA node shaped by instance type: efa_node() with its GPUs named `gpu_name` and `per_gpu`
    EFA devices at `rate_gbps` beside each GPU of `gpus_with_efa` (p5en: H200, 2 per GPU at 200;
    p4d: A100, one beside every other GPU), libfabric opening each of them."""
    inventory = efa_node()
    for item in inventory.gpus:
        item.name = gpu_name
    inventory.hcas = [efa_hca(index, slot, rate_gbps=rate_gbps) for index in gpus_with_efa for slot in range(per_gpu)]
    inventory.libfabric_providers = tuple(FiProvider("efa", "efa", f"{hca.name}-rdm", "122.0", "FI_EP_RDM",
                                                     "FI_PROTO_EFA") for hca in inventory.hcas)
    return inventory
