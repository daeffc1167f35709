"""Whether a rule pack's `[pack.match]` holds for a node's inventory, and what held
(`match_reasons`, for auto-selection in netdoctor.packs.select and for `netdoctor rules`).

A node keeps its platform's pack when hardware is lost: GPU names come from NVML, from the PCI
bus (device ids) and from the platform DMI names (netdoctor.inventory.platform); HCA types from
the RDMA devices and from the ConnectX functions on the PCI bus (with or without `mlx5_ib`);
the `platforms` and `min_nvswitches` keys ask what the node is, not how many devices it shows.
The ConnectX-7 bridge to a Blackwell baseboard's NVSwitches (`Hca.switch_management`) is no
HCA of the node's fabric: it names no HCA type, link layer or fabric port here.
So a DGX H100 with 7 GPUs, or with its RDMA stack unloaded, still gets `dgx-h100`, whose
`inventory` check then fails. `min_gpus` counts the GPUs on the bus or in NVML, whichever is
more (a site pack's form; the bundled packs do not use it).

Apart from netdoctor.packs.select so that a pack read by name (`fleet report`'s settings)
imports no inventory model.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from netdoctor.inventory.hardware import ca_type_of_device
from netdoctor.inventory.model import Inventory, Port, PortState
from netdoctor.inventory.platform import gpu_names, node_platform
from netdoctor.inventory.queries import gpu_fabric_netdevs, physical_function
from netdoctor.packs.model import PortClass


def _compute_link_layers(inventory: Inventory, classes: list[PortClass]) -> set[str]:
    """The most common link layer of the ports a pack would class as compute (or leave unclassed)."""
    layers: Counter[str] = Counter()
    for hca in inventory.hcas:
        if hca.switch_management:
            continue
        for port in hca.ports.values():
            port_class = next((item for item in classes if item.matches(port, hca, inventory)), None)
            if port_class is not None and port_class.role != "compute":
                continue
            if port.link_layer is not None:
                layers[str(port.link_layer)] += 1
    if not layers:
        return set()
    top = max(layers.values())
    return {layer for layer, count in layers.items() if count == top}


def _fabric_ports(match: Mapping[str, Any], inventory: Inventory) -> list[Port]:
    """The RDMA ports that could carry a GPU fabric, for `min_fabric_ports`/`max_fabric_ports`.

    A port counts when it has the match's `link_layer` and its HCA one of the match's
    `hca_types` (where given), and it runs at `min_port_rate_gbps` or more. A port that is
    not ACTIVE reports a placeholder rate (40 on a down 400G port), so it counts by its HCA
    type alone, and only when the match names `hca_types`. The pack's port classes are not
    consulted: a pack that classes every port as management must still be told apart from a
    node with a real fabric. SR-IOV VFs whose physical function is here are not counted twice.
    """
    layer = match.get("link_layer")
    types = match.get("hca_types")
    minimum = match.get("min_port_rate_gbps")
    counted: list[Port] = []
    for hca in inventory.hcas:
        if physical_function(inventory, hca) is not None or hca.switch_management:
            continue
        if types is not None and hca.ca_type not in types:
            continue
        for port in hca.ports.values():
            if layer is not None and (port.link_layer is None or str(port.link_layer).lower() != layer.lower()):
                continue
            if minimum is not None:
                if port.state is not PortState.ACTIVE:
                    if types is None:
                        continue
                elif port.rate is None or port.rate.gbps is None or port.rate.gbps < minimum:
                    continue
            counted.append(port)
    return counted


def _describe_fabric_filter(match: Mapping[str, Any]) -> str:
    parts = []
    if "link_layer" in match:
        parts.append(str(match["link_layer"]))
    if "min_port_rate_gbps" in match:
        parts.append(f">= {match['min_port_rate_gbps']:g} Gb/s")
    if "hca_types" in match:
        parts.append(f"on {'/'.join(match['hca_types'])}")
    return " ".join(["RDMA ports", *parts])


def _bus_ca_types(inventory: Inventory) -> set[str]:
    """CA types of the ConnectX functions on the PCI bus, whether or not an RDMA device came of them
    (the NVSwitch bridge's functions left out)."""
    bridge = {hca.pci_address for hca in inventory.hcas if hca.switch_management}
    return {ca_type for address, (device, _driver) in (inventory.pci_nics or {}).items()
            if address not in bridge and (ca_type := ca_type_of_device(device)) is not None}


def _identity_reasons(match: Mapping[str, Any], inventory: Inventory) -> tuple[bool, list[str]]:
    """`platforms`, `gpu_name`, `min_nvswitches`: what the node is."""
    held: list[str] = []
    platform = node_platform(inventory)
    if "platforms" in match:
        if platform is None or platform.id not in match["platforms"]:
            have = f"{platform.id} ({platform.basis})" if platform else "not known"
            return False, [f"platform is not {' or '.join(match['platforms'])} (platform {have})"]
        held.append(f"platform {platform.id} ({platform.basis})")
    if "gpu_name" in match:
        pattern = re.compile(match["gpu_name"])
        names = list(dict.fromkeys(gpu_names(inventory) + list(platform.gpu_names if platform else ())))
        hit = next((name for name in names if pattern.search(name)), None)
        if hit is None:
            return False, [f"no GPU name matches {match['gpu_name']!r} (have {', '.join(names) or 'none'})"]
        held.append(f"GPU {hit!r} matches {match['gpu_name']!r}")
    if "min_nvswitches" in match:
        switches = len(inventory.nvswitches or ())
        if switches < match["min_nvswitches"]:
            return False, [f"{switches} NVSwitches on the PCI bus, fewer than {match['min_nvswitches']}"]
        held.append(f"{switches} NVSwitches on the PCI bus")
    return True, held


def match_reasons(data: Mapping[str, Any], classes: list[PortClass] | Callable[[], list[PortClass]],
                  inventory: Inventory) -> tuple[bool, list[str]]:
    """Whether a pack's `[pack.match]` holds for this inventory, and what held (or first failed).

    `classes`: the pack's port classes, or what reads them when a `link_layer` match needs them."""
    match = data.get("pack", {}).get("match", {})
    holds, held = _identity_reasons(match, inventory)
    if not holds:
        return False, held
    if "hca_types" in match:
        rdma_types = {hca.ca_type for hca in inventory.hcas if hca.ca_type and not hca.switch_management}
        types = sorted(rdma_types | _bus_ca_types(inventory))
        hit_types = [ca_type for ca_type in types if ca_type in match["hca_types"]]
        if not hit_types:
            return False, [f"no HCA of type {', '.join(match['hca_types'])} (have {', '.join(types) or 'none'})"]
        on_bus_only = [ca_type for ca_type in hit_types if ca_type not in rdma_types]
        held.append(f"HCA type {', '.join(hit_types)}" + (" (on the PCI bus, no RDMA device)" if on_bus_only else ""))
    if "link_layer" in match:
        layers = _compute_link_layers(inventory, classes() if callable(classes) else classes)
        if not layers and not inventory.ports and inventory.pci_nics:
            # ConnectX functions without RDMA devices (mlx5_ib not loaded): no port tells the
            # link layer, and the node keeps its pack so that `inventory` names what is missing.
            held.append(f"no RDMA port to tell the link layer ({len(inventory.pci_nics)} ConnectX functions on the "
                        "PCI bus)")
        elif match["link_layer"] not in layers:
            return False, [f"compute ports are not {match['link_layer']} (have {', '.join(sorted(layers)) or 'none'})"]
        else:
            held.append(f"compute ports are {match['link_layer']}")
    if "min_gpus" in match:
        count = max(len(inventory.gpus), len(inventory.pci_gpus or {}))
        if count < match["min_gpus"]:
            return False, [f"{count} GPUs, fewer than {match['min_gpus']}"]
        held.append(f"{count} GPUs")
    if "has_rdma" in match:
        has_rdma = bool(inventory.ports)
        if has_rdma != match["has_rdma"]:
            return False, ["node has RDMA ports" if has_rdma else "node has no RDMA ports"]
        held.append("has RDMA ports" if has_rdma else "no RDMA ports")
    if "min_fabric_ports" in match or "max_fabric_ports" in match:
        count = len(_fabric_ports(match, inventory))
        what = _describe_fabric_filter(match)
        if "min_fabric_ports" in match and count < match["min_fabric_ports"]:
            return False, [f"{count} {what}, fewer than {match['min_fabric_ports']}"]
        if "max_fabric_ports" in match and count > match["max_fabric_ports"]:
            return False, [f"{count} {what}, more than {match['max_fabric_ports']}"]
        held.append(f"{count} {what}")
    if "min_gpu_netdevs" in match or "max_gpu_netdevs" in match:
        # GPU NICs without RDMA (gVNIC for GCP's GPUDirect-TCPX/TCPXO), placed on the PCIe tree.
        netdevs = len(gpu_fabric_netdevs(inventory) or {})
        if "min_gpu_netdevs" in match and netdevs < match["min_gpu_netdevs"]:
            return False, [f"{netdevs} GPU NICs without RDMA (gVNIC on a GPU's PCIe switch), fewer than "
                           f"{match['min_gpu_netdevs']}"]
        if "max_gpu_netdevs" in match and netdevs > match["max_gpu_netdevs"]:
            return False, [f"{netdevs} GPU NICs without RDMA, more than {match['max_gpu_netdevs']}"]
        held.append(f"{netdevs} GPU NICs without RDMA (gVNIC)")
    return True, held
