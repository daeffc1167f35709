"""The PCIe tree above the GPUs and NICs, and whether the node is a virtual machine.

For every GPU and RDMA NIC the kernel's place of the function (`bus/pci/devices/ADDR ->
devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/ADDR`) names the bridges P2P
traffic crosses; each of them is read once: ids, link, config space (ACS, ATS, port type:
all of it only as root) and IOMMU group. `lspci -vvv` fills what the config space did not
give (`join_lspci`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from netdoctor.errors import ParseError
from netdoctor.inventory.from_sysfs import read_pcie
from netdoctor.inventory.hardware import FABRIC_NETDEV_DRIVERS, hypervisor_in_dmi
from netdoctor.inventory.merge import Draft, clean
from netdoctor.inventory.model import PciPathFunction
from netdoctor.parsers.lspci import LspciFunction
from netdoctor.parsers.pci_config import parse_pci_config

VM_GPU_MODES = ("passthrough", "vgpu")


def _endpoint_addresses(draft: Draft) -> list[str]:
    inventory = draft.inventory
    addresses = {gpu.pci_address for gpu in inventory.gpus if gpu.pci_address}
    addresses |= {hca.pci_address for hca in inventory.hcas if hca.pci_address}
    addresses |= set(inventory.pci_gpus or {})
    # Cloud fabric NICs nvidia-smi does not show: EFA functions (bound or not) and gVNICs.
    addresses |= set(inventory.pci_efa or {})
    addresses |= {netdev.pci_address for netdev in inventory.netdevs if netdev.driver in FABRIC_NETDEV_DRIVERS
                  and netdev.pci_address}
    return sorted(addresses)


def read_pci_tree(draft: Draft) -> None:
    """Inventory.pci_tree: each endpoint and every bridge above it (None when no path is known)."""
    tree: dict[str, PciPathFunction] = {}
    for endpoint in _endpoint_addresses(draft):
        path = draft.sys.pci_path(endpoint)
        if not path:
            continue
        parent: str | None = None
        for address in path:
            if address not in tree:
                tree[address] = _read_function(draft, address, parent)
            parent = address
    draft.inventory.pci_tree = tree or None


def _read_function(draft: Draft, address: str, parent: str | None) -> PciPathFunction:
    base = f"bus/pci/devices/{address}"
    read = draft.sys.read
    capabilities = None
    config = draft.sys.read_binary(f"{base}/config")
    if config is not None:
        try:
            capabilities = parse_pci_config(config)
        except ParseError:
            capabilities = None
    group = draft.sys.link_name(f"{base}/iommu_group")
    return PciPathFunction(
        address=address, parent=parent,
        vendor=clean(read(f"{base}/vendor")), device=clean(read(f"{base}/device")), pci_class=clean(read(f"{base}/class")),
        port_type=capabilities.port_type if capabilities else None,
        link=read_pcie(draft, address),
        acs=capabilities.acs if capabilities else None,
        has_acs=capabilities.has_acs if capabilities else None,
        ats_enabled=capabilities.ats_enabled if capabilities else None,
        iommu_group=group,
        iommu_type=clean(read(f"kernel/iommu_groups/{group}/type")) if group else None,
        capabilities_from="config" if capabilities and capabilities.extended_read else None,
    )


def join_lspci(draft: Draft, functions: dict[str, LspciFunction], fields: Mapping[str, str]) -> None:
    """`lspci -vvv` fills the capabilities of tree functions whose config space was not read whole."""
    tree = draft.inventory.pci_tree
    if not tree:
        return
    for address, function in list(tree.items()):
        seen = functions.get(address)
        if seen is None or function.capabilities_from == "config" or not seen.capabilities_read:
            continue
        tree[address] = replace(function, port_type=function.port_type or seen.port_type, acs=seen.acs,
                                has_acs=seen.acs is not None, ats_enabled=seen.ats_enabled,
                                iommu_group=function.iommu_group or seen.iommu_group, capabilities_from="lspci")


def read_virtualization(draft: Draft) -> None:
    """Inventory.virtualization: `none` on bare metal, else the evidence of a hypervisor."""
    inventory = draft.inventory
    modes = sorted({gpu.virtualization_mode for gpu in inventory.gpus if gpu.virtualization_mode})
    vm_modes = [mode for mode in modes if mode in VM_GPU_MODES]
    hypervisor = clean(draft.sys.read("hypervisor/type"))
    # DMI as from_platform.read_dmi read it (build_inventory runs that first): one reader, one cleaning.
    vendor, product = (inventory.dmi.sys_vendor, inventory.dmi.product_name) if inventory.dmi else (None, None)
    dmi = hypervisor_in_dmi(vendor, product)
    if vm_modes:
        inventory.virtualization = f"GPU virtualization mode {', '.join(vm_modes)} (NVML)"
    elif hypervisor:
        inventory.virtualization = f"hypervisor {hypervisor} (/sys/hypervisor/type)"
    elif dmi:
        inventory.virtualization = f"DMI system {dmi}"
    elif modes == ["none"] or vendor or product:
        inventory.virtualization = "none"
