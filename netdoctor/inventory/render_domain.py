"""The `discover` view of the NVLink domain (CONTRACT 8): cluster, clique, fabric health, where
the tray sits in its rack, and IMEX. Shown where there is a domain to show: a GPU with a cluster
UUID, fabric health or rack placement, or an `nvidia-imex-ctl -N` answer (not on H100/H200)."""

from __future__ import annotations

from netdoctor.inventory.from_fabric_tools import this_imex_node
from netdoctor.inventory.model import Gpu, Inventory
from netdoctor.textsafe import safe_text


def nvlink_domain_lines(inventory: Inventory) -> list[str]:
    gpus = [gpu for gpu in sorted(inventory.gpus, key=lambda gpu: gpu.index) if _shown(gpu)]
    if not gpus and inventory.imex is None:
        return []
    lines = ["", "NVLink domain (fabric registration per GPU, NVML or nvidia-smi -q)"]
    clusters = sorted({gpu.fabric.cluster_uuid for gpu in gpus if gpu.fabric and gpu.fabric.cluster_uuid})
    cliques = sorted({gpu.fabric.clique_id for gpu in gpus if gpu.fabric and gpu.fabric.clique_id is not None})
    if clusters or cliques:
        lines.append(f"  cluster {', '.join(clusters) or '-'}; clique {', '.join(map(str, cliques)) or '-'}"
                     + ("  (all zero: in no multi-node domain)" if gpus and not any(
                         gpu.fabric and gpu.fabric.in_nvlink_domain for gpu in gpus) else ""))
    racks = sorted({(p.chassis_serial_number, _dash(p.slot_number), _dash(p.tray_index), _dash(p.host_id))
                    for gpu in gpus if (p := gpu.platform) is not None and p.chassis_serial_number})
    for chassis, slot, tray, host in racks:
        lines.append(f"  rack chassis {chassis}, slot {slot}, tray {tray}, host {host}")
    rows = [[gpu.label, _dash(gpu.pci_address), _dash(gpu.platform.module_id if gpu.platform else None),
             _state(gpu), _dash(gpu.fabric.clique_id if gpu.fabric else None),
             _dash(gpu.fabric.health_summary if gpu.fabric else None), _dash(gpu.fabric.bandwidth if gpu.fabric else None),
             _dash(gpu.platform.peer_type if gpu.platform else None), _dash(gpu.recovery_action)] for gpu in gpus]
    if rows:
        lines += _table(["GPU", "PCI", "module", "fabric", "clique", "health", "bandwidth", "peer", "recovery"], rows)
    service = inventory.services.get("nvidia-imex")
    if inventory.imex is not None or any(gpu.fabric and gpu.fabric.in_nvlink_domain for gpu in gpus) or (
            service is not None and service.active_state == "active"):
        lines.append("  IMEX: " + _imex(inventory))
    return lines


def _shown(gpu: Gpu) -> bool:
    fabric = gpu.fabric
    placed = gpu.platform is not None and (gpu.platform.chassis_serial_number is not None or gpu.platform.peer_type)
    return bool(placed) or (fabric is not None and (fabric.in_nvlink_domain or fabric.health_summary not in (
        None, "not_supported")))


def _state(gpu: Gpu) -> str:
    fabric = gpu.fabric
    if fabric is None or fabric.state is None:
        return "-"
    return fabric.state + (f"/{fabric.status}" if fabric.status and fabric.state == "completed" else "")


def _imex(inventory: Inventory) -> str:
    service = inventory.services.get("nvidia-imex")
    unit = (f"nvidia-imex {_dash(service.active_state)}/{_dash(service.sub_state)}" if service is not None
            else "nvidia-imex unit not read")
    domain = inventory.imex
    if domain is None:
        return f"{unit}; domain {inventory.source('nvidia-imex-ctl-N').reason()}"
    ready = sum(node.ready for node in domain.nodes)
    text = f"{unit}; Domain State {domain.state or '-'}, {len(domain.nodes)} nodes, {ready} READY"
    unconnected = domain.not_connected()
    text += f", {len(unconnected)} connections not C" if unconnected else ", all connected"
    me = this_imex_node(inventory)
    if me is not None:
        text += f"; this node #{me.index} {me.address} {me.status}"
    others = [f"#{node.index} {node.address} {node.status}" for node in domain.nodes if not node.ready]
    if others:
        text += "; not READY: " + ", ".join(others)
    return safe_text(text)


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    rows = [[safe_text(cell) for cell in row] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    return ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip()
            for row in [headers, *rows]]
