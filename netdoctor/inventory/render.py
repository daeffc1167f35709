"""Show an inventory: the `discover` text view and its JSON form."""

from __future__ import annotations

import dataclasses
import enum
from datetime import datetime
from typing import Any

from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import FirstHop, Gpu, Inventory, LinkLayer, SourceState
from netdoctor.inventory.render_domain import nvlink_domain_lines
from netdoctor.inventory.queries import (
    gpu_fabric_netdevs,
    nccl_traffic_class,
    nearest_gpu,
    path_from_root,
    pci_endpoints,
)
from netdoctor.vocabulary import NVML_NVLINK_VERSIONS
from netdoctor.textsafe import safe_text
from netdoctor.util import iso_utc, natural_key

SCHEMA = "netdoctor.inventory/1"


def inventory_to_json(inventory: Inventory) -> dict[str, Any]:
    """A JSON-ready dict; the topology's pair keys become a nested row -> column map."""
    data = _plain(inventory)
    data = {"schema": SCHEMA, **data}
    if inventory.topology is not None:
        topology = data["topology"]
        matrix: dict[str, dict[str, str]] = {}
        for (row, column), kind in inventory.topology.links.items():
            matrix.setdefault(row, {})[column] = kind
        topology["links"] = matrix
    for hca in data["hcas"]:
        hca["ports"] = [hca["ports"][key] for key in sorted(hca["ports"], key=int)]
    return data


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(key) if not isinstance(key, tuple) else ",".join(map(str, key)): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return value


def _table(headers: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    rows = [[safe_text(cell) for cell in row] for row in rows]   # names from the node, escaped before measuring
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = [indent + "  ".join(header.ljust(width) for header, width in zip(headers, widths, strict=False)).rstrip()]
    for row in rows:
        lines.append(indent + "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip())
    return lines


def _or_dash(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _pcie(link: Any) -> str:
    if link is None:
        return "-"

    def one(gen: int | None, width: int | None) -> str:
        return f"Gen{_or_dash(gen)} x{_or_dash(width)}"

    return f"{one(link.current_gen, link.current_width)} / {one(link.max_gen, link.max_width)}"


def _nvlink(gpu: Gpu) -> str:
    """`18/18 NVLink 4.0 26.6 GB/s`, `16/18 ... down: 7,13`, or `-` (PCIe GPUs, unknown)."""
    if gpu.nvlink_total is None:
        return "-"
    text = f"{_or_dash(gpu.nvlink_active)}/{gpu.nvlink_total}"
    if gpu.nvlink_total:
        text += f" NVLink {_or_dash(NVML_NVLINK_VERSIONS.get(gpu.nvlink_version or -1, gpu.nvlink_version))}"
        speeds = {link.speed_mbps for link in gpu.nvlinks if link.active and link.speed_mbps}
        if len(speeds) == 1:
            text += f" {speeds.pop() / 1000:.1f} GB/s"
        down = [str(link.link) for link in gpu.nvlinks if link.active is False]
        if down:
            text += f" down: {','.join(down)}"
    return text


def _nvlink5_lines(inventory: Inventory) -> list[str]:
    """NVLink 5's own counters (NVML): `GPU0 symbol errors 0, effective BER max 1e-15 (18 links)`,
    one line per GPU whose links carry them, links with symbol errors named."""
    lines: list[str] = []
    for gpu in inventory.gpus:
        links = [link for link in gpu.nvlinks
                 if link.errors.get("symbol_errors") is not None or link.effective_ber is not None]
        if not links:
            continue
        symbols = {link.link: link.errors.get("symbol_errors") for link in links}
        known = [value for value in symbols.values() if value is not None]
        text = f"symbol errors {sum(known)}" if known else "symbol errors -"
        named = [f"link {link} {value}" for link, value in symbols.items() if value]
        if named:
            text += f" ({', '.join(named[:4])}{', ...' if len(named) > 4 else ''})"
        bers = [(link.effective_ber, link.link) for link in links if link.effective_ber is not None]
        if bers:
            worst, at = max(bers)
            text += f", effective BER max {_ber(worst)}" + (f" (link {at})" if worst else "")
        lines.append(f"  {gpu.label} NVLink 5 counters: {text} ({len(links)} links)")
    return lines


def _switch(hop: FirstHop | None) -> str:
    """`leaf-07 17 (smpquery)`: the first-hop switch's name (else its GUID), its port, the source."""
    if hop is None:
        return "-"
    port = hop.switch_port if hop.switch_port is not None else hop.port_id
    return f"{_or_dash(hop.switch_name or hop.switch_guid)} {_or_dash(port)} ({hop.source})"


def _fabric_lines(inventory: Inventory) -> list[str]:
    """NVSwitches, the fabric services, VBIOS/virtualization, the kernel log in brief."""
    lines: list[str] = []
    if inventory.nvswitches:
        lines.append(f"  NVSwitches ({len(inventory.nvswitches)}): {' '.join(inventory.nvswitches)}")
    services = [f"{unit} {_or_dash(state.active_state)}/{_or_dash(state.sub_state)}"
                + (f" ({state.restarts} restarts)" if state.restarts else "")
                for unit, state in sorted(inventory.services.items()) if state.active_state not in (None, "inactive")]
    if services:
        lines.append("  services: " + "; ".join(services))
    vbios = sorted({gpu.vbios_version for gpu in inventory.gpus if gpu.vbios_version})
    modes = sorted({gpu.virtualization_mode for gpu in inventory.gpus if gpu.virtualization_mode})
    if vbios or modes:
        lines.append(f"  VBIOS {', '.join(vbios) or '-'}; virtualization {', '.join(modes) or '-'}")
    log = inventory.kernel_log
    if log is not None:
        counts: dict[str, int] = {}
        for event in log.events:
            counts[event.kind.value] = counts.get(event.kind.value, 0) + 1
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(counts.items())) or "none"
        reach = f", log from {iso_utc(log.first_time)}" if log.first_time else ""
        lines.append(f"  kernel log events this boot: {kinds}{reach}")
    stack = [f"{name} {version}" for name, version in (("OFED", inventory.ofed_version),
                                                        ("fabric manager", inventory.fabric_manager_version)) if version]
    if stack:
        lines.append("  " + "; ".join(stack))
    if inventory.kernel_release or inventory.uptime_s is not None:
        uptime = f", up {inventory.uptime_s / 3600:.1f} h" if inventory.uptime_s is not None else ""
        lines.append(f"  kernel {_or_dash(inventory.kernel_release)}{uptime}")
    return lines


def _cloud_fabric_lines(inventory: Inventory) -> list[str]:
    """AWS EFA and GCP GPUDirect-TCPX/TCPXO: which fabric NICs each GPU has, and the software NCCL goes through."""
    lines: list[str] = []
    efa = [hca for hca in inventory.hcas if is_efa(hca)]
    if efa:
        by_gpu: dict[str, list[str]] = {}
        for hca in efa:
            gpu, _ = nearest_gpu(inventory, hca)
            by_gpu.setdefault(gpu.label if gpu is not None else "no GPU near", []).append(hca.name)
        lines += ["", f"AWS EFA ({len(efa)} devices; the driver reports every device ACTIVE, so counters tell its health)"]
        lines += [f"  {label}: {' '.join(names)}" for label, names in sorted(by_gpu.items(), key=lambda item: natural_key(item[0]))]
        providers = sorted({", ".join(hca.p2p_providers) or "none" for hca in efa if hca.p2p_providers is not None})
        lines.append(f"  GPUDirect (efa p2p): {'; '.join(providers) or '-'}; efa driver {_or_dash(inventory.efa_driver_version)}")
        opened = {entry.domain for entry in inventory.libfabric_providers or ()
                  if entry.provider == "efa" and entry.ep_type == "FI_EP_RDM"}
        libfabric = (f"efa provider opens {len(opened)} devices (RDM)" if inventory.libfabric_providers is not None
                     else inventory.source("fi_info-p-efa").reason())
        lines.append(f"  libfabric {_or_dash(inventory.libfabric_version)}: {libfabric}")
    placed = gpu_fabric_netdevs(inventory)
    if placed:
        lines += ["", f"GPU NICs without RDMA (gVNIC, GPUDirect-TCPX/TCPXO): {len(placed)}"]
        lines += [f"  {name}: {' '.join(gpus)}" for name, gpus in placed.items()]
        settings = sorted(name for name in (inventory.nccl.settings if inventory.nccl else {})
                          if name.startswith(("NCCL_GPUDIRECTTCPX_", "NCCL_FASTRAK_")))
        lines.append(f"  plugin settings: {', '.join(settings) or 'none (no NCCL_GPUDIRECTTCPX_* / NCCL_FASTRAK_*)'}")
    return lines


def _module_lines(inventory: Inventory) -> list[str]:
    """Each RDMA port's module: what it is, its temperature and the spread of its lanes."""
    if not inventory.transceivers:
        return []

    def spread(reading: Any, unit: str) -> str:
        if reading is None:
            return "-"
        low, high = min(reading.values), max(reading.values)
        return f"{low:g} {unit}" if low == high else f"{low:g}..{high:g} {unit}"

    rows = [[port, _or_dash(module.identifier), _or_dash(module.vendor), _or_dash(module.part_number),
             spread(module.temperature_c, "C"), spread(module.bias_ma, "mA"), spread(module.rx_power_dbm, "dBm"),
             spread(module.tx_power_dbm, "dBm"), module.source]
            for port, module in sorted(inventory.transceivers.items())]
    return ["", f"Port modules ({len(rows)})"] + _table(
        ["port", "type", "vendor", "part", "temperature", "bias", "rx power", "tx power", "read by"], rows)


def _ber(value: float | None) -> str:
    return "-" if value is None else ("0" if value == 0 else f"{value:.0e}".replace("e-0", "e-"))


def _phy_lines(inventory: Inventory) -> list[str]:
    """Each port's physical layer as the firmware counts it (mlxlink -c), and each RoCE netdev's
    PHY counters (ethtool -S) and where its RDMA traffic lands (the ToS -> DSCP -> priority chain)."""
    lines: list[str] = []
    if inventory.phy:
        rows = []
        for port, phy in sorted(inventory.phy.items(), key=lambda item: natural_key(item[0])):
            window = f"{phy.since_clear_s / 3600:.1f} h" if phy.since_clear_s is not None else "-"
            lanes = ",".join(map(str, phy.raw_errors_per_lane)) if phy.raw_errors_per_lane else "-"
            after = max((ber for ber in (phy.effective_ber, phy.symbol_ber) if ber is not None), default=None)
            status = "ok" if phy.status_opcode == 0 else (
                f"{phy.status_opcode}: {phy.recommendation or '-'}" if phy.status_opcode is not None else "-")
            rows.append([port, _or_dash(phy.speed), _or_dash(phy.fec), window, _ber(phy.raw_ber), _ber(after), lanes,
                         _or_dash(phy.link_down), _or_dash(phy.link_error_recovery), status])
        lines += ["", f"Physical layer (mlxlink -c, since the counters' last clear; {len(rows)} ports)"] + _table(
            ["port", "speed", "FEC", "window", "BER before FEC", "after FEC", "raw errors per lane", "link down",
             "recoveries", "firmware diagnosis"], rows)
    stats_rows = []
    for netdev in sorted(inventory.netdevs, key=lambda item: natural_key(item.name)):
        stats = netdev.stats
        if stats is None:
            continue
        discards = sum(value for name, value in stats.items() if "discard" in name and name.startswith("rx_prio"))
        stats_rows.append([netdev.name, _or_dash(stats.get("rx_corrected_bits_phy")),
                           _or_dash(stats.get("rx_pcs_symbol_err_phy")), _or_dash(stats.get("link_down_events_phy")),
                           _or_dash(stats.get("tx_pause_storm_error_events")), str(discards)])
    if stats_rows:
        lines += ["", "RoCE PHY counters (ethtool -S, since the driver loaded)"] + _table(
            ["netdev", "corrected bits", "uncorrected symbols", "link down", "pause storms", "per-priority discards"],
            stats_rows)
    chains = []
    for port in inventory.ports:
        netdev = inventory.netdev(port.netdev) if port.netdev else None
        if port.link_layer is not LinkLayer.ETHERNET or netdev is None or netdev.qos is None:
            continue
        qos = netdev.qos
        traffic = nccl_traffic_class(inventory, port)
        chain = "NCCL's settings not read" if traffic is None else f"{traffic.why} → ToS {traffic.tos} → DSCP {traffic.dscp}"
        priority = qos.priority_of(traffic.dscp) if traffic is not None else None
        if qos.trust == "dscp" and priority is not None:
            chain += f" → priority {priority}"
        elif qos.trust != "dscp":
            chain = f"trust {_or_dash(qos.trust)}: the priority comes from the VLAN tag"
        cnp_priority = qos.priority_of(netdev.cnp_dscp) if netdev.cnp_dscp is not None else None
        cnp = (f"; CNPs DSCP {netdev.cnp_dscp}" + (f" → priority {cnp_priority}" if cnp_priority is not None else "")
               if netdev.cnp_dscp is not None else "")
        pfc = ",".join(map(str, qos.pfc_enabled)) or "off"
        chains.append(f"  {netdev.name} ({port.name}): {chain}; PFC on {pfc}{cnp}")
    if chains:
        lines += ["", "RoCE priority of NCCL's traffic"] + chains
    return lines


_ACS_SHORT = {"SrcValid": "SV", "TransBlk": "TB", "ReqRedir": "RR", "CmpltRedir": "CR", "UpstreamFwd": "UF",
              "EgressCtrl": "EC", "DirectTrans": "DT"}


def _pcie_tree_lines(inventory: Inventory) -> list[str]:
    """Each GPU's and NIC's path from its root port, ACS/ATS marked; the IOMMU mode; VM or not."""
    tree = inventory.pci_tree
    if not tree:
        return []
    rows = []
    for address, (label, _) in pci_endpoints(inventory).items():
        marked = []
        for hop in path_from_root(tree, address):
            function = tree[hop]
            marks = []
            if function.acs is not None and function.acs.bits:
                marks.append("ACS " + ",".join(short for name, short in _ACS_SHORT.items() if function.acs.on(name)))
            if function.ats_enabled is not None:
                marks.append(f"ATS{'+' if function.ats_enabled else '-'}")
            marked.append(hop + (f" [{'; '.join(marks)}]" if marks else ""))
        endpoint = tree[address]
        rows.append([label, " > ".join(marked), _or_dash(endpoint.iommu_group), _or_dash(endpoint.iommu_type)])
    iommu = sorted({function.iommu_type for function in tree.values() if function.iommu_type})
    groups = any(function.iommu_group for function in tree.values())
    mode = ", ".join(iommu) if iommu else ("off (no IOMMU groups)" if not groups else "-")
    virtual = {None: "unknown", "none": "bare metal"}.get(inventory.virtualization, inventory.virtualization)
    lines = ["", f"PCIe paths from the root port ([ACS flags on], ATS+/-; IOMMU {mode}; {virtual})"]
    lines += _table(["device", "path", "IOMMU group", "type"], rows)
    return lines


def render_inventory_text(inventory: Inventory) -> str:
    lines: list[str] = []
    driver = f"   driver {inventory.driver_version}" if inventory.driver_version else ""
    if inventory.cuda_driver_version:
        driver += f" (CUDA {inventory.cuda_driver_version // 1000}.{inventory.cuda_driver_version % 1000 // 10})"
    lines.append(f"host {inventory.host}   captured {inventory.captured_at}{driver}")
    not_found: list[str] = []

    if inventory.gpus:
        lines += ["", f"GPUs ({len(inventory.gpus)})"]
        rows = []
        for gpu in inventory.gpus:
            pcie = gpu.pcie or inventory.pcie.get(gpu.pci_address or "")
            pstate = f"P{gpu.performance_state}" if gpu.performance_state is not None else "-"
            fabric = gpu.fabric.state if gpu.fabric and gpu.fabric.state else "-"
            # Grace: the CPU's node the GPU hangs off, then the GPU memory's own node (`0 (mem 2)`).
            numa = _or_dash(gpu.numa_node) + (f" (mem {gpu.memory_numa_node})" if gpu.memory_numa_node is not None else "")
            rows.append([gpu.label, _or_dash(gpu.name), _or_dash(gpu.pci_address), numa,
                         _or_dash(gpu.cpu_affinity), _pcie(pcie), _nvlink(gpu), fabric, pstate])
        lines += _table(["GPU", "name", "PCI", "NUMA", "CPUs", "PCIe now / max", "NVLink", "fabric", "P-state"], rows)
        lines += _nvlink5_lines(inventory)
        lines += _fabric_lines(inventory)
        lines += nvlink_domain_lines(inventory)
    else:
        not_found.append(f"no NVIDIA GPUs ({inventory.source('nvml').reason()})")

    if inventory.hcas:
        lines += ["", f"RDMA devices ({len(inventory.hcas)}) and ports ({len(inventory.ports)})"]
        rows = []
        for hca in inventory.hcas:
            model = hca.model or hca.ca_type
            device = [hca.name, _or_dash(model), _or_dash(hca.firmware), _or_dash(hca.pci_address), _or_dash(hca.numa_node),
                      _pcie(inventory.pcie.get(hca.pci_address or ""))]
            if not hca.ports:
                rows.append(device + ["-"] * 9)
            for port in sorted(hca.ports.values(), key=lambda p: p.number):
                layer = "EFA" if is_efa(hca) else (
                    {LinkLayer.INFINIBAND: "IB", LinkLayer.ETHERNET: "Eth"}.get(port.link_layer, "-") if port.link_layer else "-")
                state = f"{_or_dash(port.state)}/{_or_dash(port.phys_state)}"
                rows.append(device + [str(port.number), state, port.rate.describe() if port.rate else "-", layer,
                                      _or_dash(port.lid), _or_dash(port.sm_lid), _or_dash(port.active_mtu), _or_dash(port.netdev),
                                      _switch(port.neighbor)])
        lines += _table(["HCA", "model", "firmware", "PCI", "NUMA", "PCIe now / max", "port", "state", "rate", "layer",
                         "LID", "SM", "MTU", "netdev", "first-hop switch"], rows)
    else:
        reasons = [inventory.source(name).reason() for name in ("sysfs", "ibstat") if inventory.source(name).state is not SourceState.NOT_RUN]
        not_found.append("no RDMA devices" + (f" ({'; '.join(reasons)})" if reasons else ""))

    if inventory.netdevs:
        lines += ["", f"Network interfaces ({len(inventory.netdevs)})"]
        rows = []
        for netdev in inventory.netdevs:
            kind = "IPoIB" if netdev.is_ipoib else ("Ethernet" if netdev.arp_type == 1 else _or_dash(netdev.arp_type))
            speed = f"{netdev.speed_mbps // 1000} Gb/s" if netdev.speed_mbps and netdev.speed_mbps >= 1000 else _or_dash(netdev.speed_mbps)
            qos = "-"
            if netdev.qos:
                qos = f"trust {_or_dash(netdev.qos.trust)}, PFC {','.join(map(str, netdev.qos.pfc_enabled)) or 'off'}"
            ecn = ",".join(str(prio) for prio, on in sorted(netdev.ecn_np.items()) if on) or ("off" if netdev.ecn_np else "-")
            rows.append([netdev.name, kind, _or_dash(netdev.mtu), _or_dash(netdev.operstate), speed,
                         _or_dash(netdev.pci_address), _or_dash(netdev.driver), _or_dash(netdev.rdma_port), qos, ecn])
        lines += _table(["netdev", "type", "MTU", "state", "speed", "PCI", "driver", "RDMA port", "QoS", "ECN prio"], rows)
    lines += _cloud_fabric_lines(inventory)

    topology = inventory.topology
    if topology is not None and topology.gpus:
        lines += ["", "GPU <-> GPU/NIC matrix (nvidia-smi topo -m)"]
        columns = list(topology.gpus) + list(topology.nics)
        rows = []
        for gpu in topology.gpus:
            rows.append([gpu] + [_or_dash(topology.link(gpu, column)) for column in columns]
                        + [_or_dash(topology.numa_affinity.get(gpu)), _or_dash(topology.cpu_affinity.get(gpu))])
        lines += _table([""] + columns + ["NUMA", "CPU affinity"], rows)
        if topology.nic_names:
            lines.append("  " + "  ".join(f"{label}={name}" for label, name in topology.nic_names.items()))
    elif inventory.gpus:
        lines += ["", f"GPU <-> NIC matrix: {inventory.source('nvidia-smi-topo-m').reason()}"]

    lines += _module_lines(inventory)
    lines += _phy_lines(inventory)
    lines += _pcie_tree_lines(inventory)

    peer = inventory.peer_memory
    if peer.nvidia_peermem is None:
        gpudirect = "unknown (no module list)"
    else:
        loaded = [name for name, on in (("nvidia_peermem", peer.nvidia_peermem), ("nv_peer_mem", peer.nv_peer_mem), ("gdrdrv", peer.gdrdrv)) if on]
        gpudirect = ", ".join(loaded) + " loaded" if loaded else "nvidia_peermem / nv_peer_mem not loaded"
    dmabuf = {gpu.dmabuf_supported for gpu in inventory.gpus}
    if dmabuf == {True}:
        gpudirect += "; DMA-BUF supported by every GPU"
    elif False in dmabuf:
        gpudirect += "; DMA-BUF not supported"
    if any(is_efa(hca) for hca in inventory.hcas):
        gpudirect += " (EFA does not use them: see its p2p provider above)"
    lines += ["", f"GPUDirect RDMA: {gpudirect}"]

    if not_found:
        lines += ["", "Not found: " + "; ".join(not_found)]
    problems = [status for status in inventory.sources.values() if status.state not in (SourceState.OK, SourceState.NOT_RUN)]
    if problems:
        lines += ["", "Sources that gave nothing usable:"]
        lines += [f"  {status.reason()}" for status in sorted(problems, key=lambda status: status.name)]
    if inventory.conflicts:
        lines += ["", "Sources disagree:"]
        for conflict in inventory.conflicts:
            values = ", ".join(f"{source}={value}" for source, value in conflict.values.items())
            lines.append(f"  {conflict.subject} {conflict.fact}: {values} (using {conflict.chosen})")
    # Every line holds names and tool output from the node: no control character reaches the terminal.
    return "\n".join(safe_text(line) for line in lines) + "\n"
