"""Facts from tool output: each source row's parser, and the joiner that adds what it parsed.

`JOINERS` maps a row name of `netdoctor.host.sources.SOURCES` to the function that puts
that row's parsed output into the draft inventory (through `Draft.merge`, so every
difference from an earlier, more trusted source is kept as a conflict). A joiner gets
the parsed value and the row's template fields (`{"dev": "mlx5_0", "port": "1"}`).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from netdoctor.host.sources import Source
from netdoctor.inventory.from_neighbors import (
    iblinkinfo_neighbor,
    join_smpquery_nodedesc,
    join_smpquery_nodeinfo,
    switch_guids_by_lid,
)
from netdoctor.inventory.from_pci import join_lspci
from netdoctor.inventory.hardware import AMAZON_VENDOR, ca_type_from_part_id
from netdoctor.inventory.from_fabric_tools import join_imex_ctl, join_nvidia_smi_q
from netdoctor.inventory.merge import Draft, seen_by
from netdoctor.inventory.model import (
    Conflict,
    Gpu,
    KernelEvent,
    KernelLog,
    LinkLayer,
    LinkRate,
    ModuleDiagnostics,
    NvLink,
    QosConfig,
    ServiceState,
    Topology,
)
from netdoctor.parsers import sysfs_values
from netdoctor.parsers.ibdev2netdev import NetdevMapping
from netdoctor.parsers.iblinkinfo import FabricLink
from netdoctor.parsers.ip_addr import InterfaceAddresses
from netdoctor.parsers.ibstat import IbstatCa
from netdoctor.parsers.ibv_devinfo import IbvDevice
from netdoctor.parsers.mlnx_qos import MlnxQos
from netdoctor.parsers.mlxlink_counters import PhyCounters
from netdoctor.parsers.perfquery import PerfqueryBlock, counters_as_sysfs
from netdoctor.parsers.kernel_log import KernelLogLines
from netdoctor.parsers.lldpctl import LldpNeighbor
from netdoctor.parsers.nvidia_smi_nvlink import GpuNvlinks
from netdoctor.parsers.systemctl import UnitState
from netdoctor.parsers.versions import OfedVersion
from netdoctor.util import parse_iso_utc

PARSERS_PACKAGE = "netdoctor.parsers."

Joiner = Callable[[Draft, Any, Mapping[str, str]], None]


@functools.cache
def parser_of(row: Source) -> Callable[[str], Any]:
    """The parser a row names (`netdoctor.parsers.ibstat:parse_ibstat`); only parsers are importable."""
    module_name, _, function_name = (row.parser or "").partition(":")
    if not module_name.startswith(PARSERS_PACKAGE) or not function_name:
        raise ValueError(f"source {row.name!r}: parser {row.parser!r} is not a `netdoctor.parsers.MODULE:FUNCTION`")
    parser: Callable[[str], Any] = getattr(importlib.import_module(module_name), function_name)
    return parser


def join_ibstat(draft: Draft, cas: list[IbstatCa], fields: Mapping[str, str]) -> None:
    for ca in cas:
        hca = draft.hca(ca.name, "ibstat")
        draft.merge(hca, {"ca_type": ca.ca_type, "firmware": ca.firmware, "node_guid": ca.node_guid,
                          "sys_image_guid": ca.sys_image_guid}, "ibstat", hca.name)
        for entry in ca.ports:
            port = draft.port(hca, entry.number, "ibstat")
            draft.merge(port, {"state": entry.state, "phys_state": entry.phys_state, "link_layer": entry.link_layer,
                               "port_guid": entry.port_guid, "capability_mask": entry.capability_mask}, "ibstat", port.name)
            if port.is_active or entry.state is None or port.state is None:
                # Down ports print placeholder LIDs/rates: compare only on live links.
                rate = LinkRate(gbps=entry.rate_gbps) if entry.rate_gbps is not None else None
                draft.merge(port, {"lid": entry.base_lid, "sm_lid": entry.sm_lid, "lmc": entry.lmc, "rate": rate},
                            "ibstat", port.name)


def join_ibv_devinfo(draft: Draft, devices: list[IbvDevice], fields: Mapping[str, str]) -> None:
    for device in devices:
        hca = draft.hca(device.hca_id, "ibv_devinfo-v")
        draft.merge(hca, {"firmware": device.firmware, "vendor_part_id": device.vendor_part_id,
                          "ca_type": ca_type_from_part_id(device.vendor_part_id), "board_id": device.board_id,
                          "node_guid": device.node_guid}, "ibv_devinfo-v", hca.name)
        efa = device.vendor_id == int(AMAZON_VENDOR, 16)
        if efa and device.vendor_part_id:
            # EFA: ibv_devinfo's ids are the PCI function's (elsewhere vendor_id is an IEEE OUI).
            draft.merge(hca, {"pci_vendor": AMAZON_VENDOR, "pci_device": f"0x{device.vendor_part_id:04x}"},
                        "ibv_devinfo-v", hca.name)
        for entry in device.ports:
            port = draft.port(hca, entry.number, "ibv_devinfo-v")
            # Older rdma-core printed EFA's unspecified link layer as InfiniBand (rdma-core PR #884's capture).
            layer = None if efa and entry.link_layer is LinkLayer.INFINIBAND else entry.link_layer
            draft.merge(port, {"state": entry.state, "phys_state": entry.phys_state, "link_layer": layer,
                               "active_mtu": entry.active_mtu, "max_mtu": entry.max_mtu}, "ibv_devinfo-v", port.name)
            if port.is_active:
                draft.merge(port, {"lid": entry.port_lid, "sm_lid": entry.sm_lid, "rate": entry.rate},
                            "ibv_devinfo-v", port.name)


def join_ibdev2netdev(draft: Draft, mappings: list[NetdevMapping], fields: Mapping[str, str]) -> None:
    for mapping in mappings:
        port = draft.port(draft.hca(mapping.hca, "ibdev2netdev"), mapping.port, "ibdev2netdev")
        draft.merge(port, {"netdev": mapping.netdev}, "ibdev2netdev", port.name)


def join_topology(draft: Draft, topology: Topology, fields: Mapping[str, str]) -> None:
    inventory = draft.inventory
    inventory.topology = topology
    by_index = {gpu.index: gpu for gpu in inventory.gpus}
    for label in topology.gpus:
        index = int(label.removeprefix("GPU"))
        gpu = by_index.get(index)
        if gpu is None:
            gpu = Gpu(index=index)
            inventory.gpus.append(gpu)
        gpu.sources += ("nvidia-smi-topo-m",)
        gpu.cpu_affinity = topology.cpu_affinity.get(label) or gpu.cpu_affinity
        # numa_node: topology.numa_affinity is joined with NVML's and the kernel's in build._join
        # (gpu_numa.settle_gpu_numa): on Grace NVML's is the GPU memory's node, not the CPU's.
    inventory.gpus.sort(key=lambda gpu: gpu.index)
    for name in topology.nic_names.values():
        if inventory.hca(name) is None:
            draft.hca(name, "nvidia-smi-topo-m")


def join_iblinkinfo(draft: Draft, links: list[FabricLink], fields: Mapping[str, str]) -> None:
    """Peers, first-hop switches and "could be" rates of local ports, found in the fabric dump
    by port GUID or LID."""
    ports = draft.inventory.ports
    by_guid = {port.port_guid: port for port in ports if port.port_guid}
    by_lid = {port.lid: port for port in ports if port.lid and port.link_layer is not LinkLayer.ETHERNET}
    switch_guids = switch_guids_by_lid(links)
    for link in links:
        if link.node_kind != "CA":
            continue
        port = by_guid.get(link.node_guid) if link.node_guid else None
        if port is None and link.lid is not None:
            port = by_lid.get(link.lid)
        if port is None:
            continue
        port.peer = " ".join(str(part) for part in (link.peer_description, f"port {link.peer_port}" if link.peer_port else None) if part) or None
        port.neighbor = port.neighbor or iblinkinfo_neighbor(link, switch_guids)
        if link.could_be_width or link.could_be_lane_gbps:
            port.could_be = sysfs_values.rate_from_lanes(
                link.could_be_width or link.width, link.could_be_lane_gbps or link.lane_gbps
            )
        seen_by(port, "iblinkinfo")


def join_perfquery(draft: Draft, blocks: list[PerfqueryBlock], fields: Mapping[str, str]) -> None:
    """Counters sysfs lacks (a kernel without counters/, or single counters it cannot read)."""
    port = draft.inventory.port(f"{fields['dev']}:{fields['port']}")
    if not blocks or port is None:
        return
    counters = counters_as_sysfs(blocks[-1])
    if not port.counters:
        port.counters = dict(counters)
        port.counters_source = "perfquery"
    else:
        for name, value in counters.items():
            port.counters.setdefault(name, value)
    seen_by(port, "perfquery")


def join_mlnx_qos(draft: Draft, qos: MlnxQos, fields: Mapping[str, str]) -> None:
    netdev = draft.inventory.netdev(fields["netdev"])
    if netdev is None:
        return
    dscp_map = qos.dscp_to_priority
    netdev.qos = QosConfig(trust=qos.trust, pfc_enabled=tuple(qos.pfc_enabled), dcbx_mode=qos.dcbx_mode,
                           dscp_to_priority=tuple(dscp_map[dscp] for dscp in range(64))
                           if all(dscp in dscp_map for dscp in range(64)) else ())
    if netdev.cnp_dscp is None:
        netdev.cnp_dscp = qos.cnp_dscp      # a wrapper script's `QOS for CNP: .../cnp_dscp = 48` line
    netdev.sources += ("mlnx_qos",)


def _mlxlink_port(draft: Draft, dev: str) -> str:
    """The port `mlxlink -d DEV` reads: the device's first (mlx5 gives each port a device of its own)."""
    hca = draft.inventory.hca(dev)
    return f"{dev}:{min(hca.ports) if hca is not None and hca.ports else 1}"


def join_mlxlink_module(draft: Draft, module: ModuleDiagnostics, fields: Mapping[str, str]) -> None:
    draft.inventory.transceivers.setdefault(_mlxlink_port(draft, fields["dev"]), module)


def join_ethtool_module(draft: Draft, module: ModuleDiagnostics, fields: Mapping[str, str]) -> None:
    """Keyed by the RDMA port the netdev belongs to (a bond slave keeps its own name); a port
    mlxlink already read keeps mlxlink's reading."""
    netdev = fields["netdev"]
    port = next((port.name for port in draft.inventory.ports if port.netdev == netdev), netdev)
    draft.inventory.transceivers.setdefault(port, module)


def join_mlxlink_counters(draft: Draft, phy: PhyCounters, fields: Mapping[str, str]) -> None:
    draft.inventory.phy[_mlxlink_port(draft, fields["dev"])] = phy


# The `ethtool -S` counters a check reads (mlx5 names: the kernel's
# Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst); the per-queue
# rest (thousands on a many-channel NIC) is not kept.
PHY_STATS = re.compile(
    r"(?:rx_corrected_bits_phy|rx_pcs_symbol_err_phy|rx_err_lane_[0-7]_phy|link_down_events_phy"
    r"|tx_pause_storm_(?:warning|error)_events"
    r"|rx_prio[0-7]_(?:pause|discards|buf_discard|cong_discard)|tx_prio[0-7]_pause)")


def join_ethtool_stats(draft: Draft, stats: dict[str, int], fields: Mapping[str, str]) -> None:
    netdev = draft.inventory.netdev(fields["netdev"])
    if netdev is None:
        return
    netdev.stats = {name: value for name, value in stats.items() if PHY_STATS.fullmatch(name)}
    netdev.sources += ("ethtool -S",)


def join_nvlink_status(draft: Draft, gpus: list[GpuNvlinks], fields: Mapping[str, str]) -> None:
    """Per-link state and speed where NVML gave none; where both tell, a different count of
    active links is kept as a conflict (NVML's stands)."""
    by_index = {gpu.index: gpu for gpu in draft.inventory.gpus}
    for entry in gpus:
        gpu = by_index.get(entry.index)
        if gpu is None:
            continue
        active = sum(link.active for link in entry.links)
        if gpu.nvlinks:
            if gpu.nvlink_active is not None and gpu.nvlink_active != active:
                draft.inventory.conflicts.append(Conflict(gpu.label, "nvlink_active", {"nvml": gpu.nvlink_active,
                                                          "nvidia-smi-nvlink-s": active}, chosen="nvml"))
            continue
        gpu.nvlinks = tuple(NvLink(link.link, active=link.active, version=gpu.nvlink_version,
                                   speed_mbps=round(link.speed_gbs * 1000) if link.speed_gbs else None)
                            for link in entry.links)
        draft.merge(gpu, {"nvlink_total": len(entry.links), "nvlink_active": active}, "nvidia-smi-nvlink-s", gpu.label)
        gpu.sources += ("nvidia-smi-nvlink-s",)


def join_kernel_log(draft: Draft, log: KernelLogLines, fields: Mapping[str, str]) -> None:
    """Events with UTC times; a plain-dmesg line is placed from the boot time (capture time
    minus /proc/uptime) where that is known, else it stays without a time."""
    inventory = draft.inventory
    boot_time = None
    if inventory.uptime_s is not None:
        boot_time = parse_iso_utc(inventory.captured_at) - timedelta(seconds=inventory.uptime_s)

    def placed(seconds: float | None) -> datetime | None:
        return boot_time + timedelta(seconds=seconds) if boot_time is not None and seconds is not None else None

    events = tuple(KernelEvent(line.kind, line.subject, line.time or placed(line.since_boot_s), line.code, line.message,
                               line.fatal) for line in log.events)
    inventory.kernel_log = KernelLog(events, boot_time, log.first_time or placed(log.first_since_boot_s), "dmesg",
                                     log.skipped, log.whole_from or placed(log.whole_from_since_boot_s))


def _join_service(unit: str) -> Joiner:
    def join(draft: Draft, state: UnitState, fields: Mapping[str, str]) -> None:
        draft.inventory.services[unit] = ServiceState(unit, state.active_state, state.sub_state, state.result,
                                                      state.restarts, state.active_since, state.unit_file_state)
    return join


def join_ip_addr(draft: Draft, interfaces: dict[str, InterfaceAddresses], fields: Mapping[str, str]) -> None:
    """Each known netdev's IP addresses (the netdevs source names the interfaces: one only `ip`
    lists is not added, and a netdev `ip` does not list keeps None, not read)."""
    for netdev in draft.inventory.netdevs:
        entry = interfaces.get(netdev.name)
        if entry is not None:
            draft.merge(netdev, {"addresses": entry.addresses}, "ip-j-addr", netdev.name)
            netdev.sources += ("ip-j-addr",)


def join_lldpctl(draft: Draft, neighbors: dict[str, LldpNeighbor], fields: Mapping[str, str]) -> None:
    """What lldpd heard per interface; placed on the RDMA ports once netdevs are known (build._join)."""
    draft.inventory.lldp = dict(neighbors)


def join_ofed_info(draft: Draft, version: OfedVersion, fields: Mapping[str, str]) -> None:
    draft.inventory.ofed_version = version.text


def join_fabric_manager_version(draft: Draft, version: str, fields: Mapping[str, str]) -> None:
    draft.inventory.fabric_manager_version = version


def join_fi_info(draft: Draft, providers: list[Any], fields: Mapping[str, str]) -> None:
    """libfabric's efa provider entries (`fi_info -p efa`): which devices NCCL's OFI plugin can open."""
    draft.inventory.libfabric_providers = tuple(providers)


def join_fi_info_version(draft: Draft, version: str, fields: Mapping[str, str]) -> None:
    draft.inventory.libfabric_version = version


JOINERS: dict[str, Joiner] = {
    "ibstat": join_ibstat,
    "ibv_devinfo-v": join_ibv_devinfo,
    "ibdev2netdev": join_ibdev2netdev,
    "nvidia-smi-topo-m": join_topology,
    "iblinkinfo": join_iblinkinfo,
    "perfquery-x-{dev}-{port}": join_perfquery,
    "mlnx_qos-{netdev}": join_mlnx_qos,
    "nvidia-smi-nvlink-s": join_nvlink_status,
    "nvidia-imex-ctl-N": join_imex_ctl,
    "nvidia-smi-q": join_nvidia_smi_q,
    "dmesg": join_kernel_log,
    "systemctl-show-nvidia-fabricmanager": _join_service("nvidia-fabricmanager"),
    "systemctl-show-nvidia-imex": _join_service("nvidia-imex"),
    "lspci-vvv": join_lspci,
    "fi_info-p-efa": join_fi_info,
    "fi_info-version": join_fi_info_version,
    "mlxlink-m-{dev}": join_mlxlink_module,
    "ethtool-m-{netdev}": join_ethtool_module,
    "mlxlink-c-{dev}": join_mlxlink_counters,
    "ethtool-S-{netdev}": join_ethtool_stats,
    "smpquery-nodeinfo-{dev}-{port}": join_smpquery_nodeinfo,
    "smpquery-nodedesc-{dev}-{port}": join_smpquery_nodedesc,
    "lldpctl-json": join_lldpctl,
    "ip-j-addr": join_ip_addr,
    "ofed_info-s": join_ofed_info,
    "nv-fabricmanager-version": join_fabric_manager_version,
}


def qos_of_bonds(draft: Draft) -> None:
    """A RoCE LAG bond has no QoS or ECN of its own (mlnx_qos and ecn/ live on the slaves).

    The bond gets what holds on every slave: PFC (and ECN) counts as enabled on a
    priority only when all slaves have it, a trust mode only when all agree; slaves
    that differ are also recorded as a conflict. One bad slave so fails the bond.
    """
    inventory = draft.inventory
    for bond in inventory.netdevs:
        slaves = [netdev for name in bond.bond_slaves if (netdev := inventory.netdev(name)) is not None]
        if not slaves:
            continue
        settings = {slave.name: slave.qos for slave in slaves if slave.qos is not None}
        if len(settings) == len(slaves):
            qos = list(settings.values())
            trusts = {entry.trust for entry in qos}
            dcbx = {entry.dcbx_mode for entry in qos}
            maps = {entry.dscp_to_priority for entry in qos}
            bond.qos = QosConfig(
                trust=trusts.pop() if len(trusts) == 1 else None,
                pfc_enabled=tuple(sorted(set.intersection(*(set(entry.pfc_enabled) for entry in qos)))),
                dcbx_mode=dcbx.pop() if len(dcbx) == 1 else None,
                dscp_to_priority=maps.pop() if len(maps) == 1 else (),
            )
            if len(set(qos)) > 1:
                inventory.conflicts.append(Conflict(bond.name, "qos", {name: str(entry) for name, entry in settings.items()},
                                                    chosen="what holds on every slave"))
        for point in ("cnp_dscp", "cnp_802p_prio"):
            values = {getattr(slave, point) for slave in slaves}
            if getattr(bond, point) is None and len(values) == 1:
                setattr(bond, point, values.pop())
        for point in ("ecn_np", "ecn_rp"):
            per_slave = [getattr(slave, point) for slave in slaves]
            if all(per_slave) and not getattr(bond, point):
                priorities = set().union(*per_slave)
                setattr(bond, point, {prio: all(ecn.get(prio, False) for ecn in per_slave) for prio in priorities})
        bond.sources += ("bond slaves",)
