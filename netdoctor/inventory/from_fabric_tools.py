"""Facts about the NVLink domain from tools: `nvidia-imex-ctl -N` and `nvidia-smi -q` (CONTRACT 8).

`nvidia-smi -q` is a second source beside NVML for each GPU's fabric registration (state,
status, clique, cluster UUID, health), its platform info and its recovery action: it fills what
NVML did not give (no NVML, or nvidia-ml-py bindings without fabric info v3 / platform info);
where both give a value and they differ, NVML's stands and a `Conflict` keeps both. GPUs are
matched by PCI address (Grace trays use domains such as 0008 and 0018).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import types
from collections.abc import Mapping
from typing import Any

from netdoctor.inventory.merge import Draft
from netdoctor.inventory.model import Gpu, GpuFabric, GpuPlatform, Inventory
from netdoctor.parsers.nvidia_imex_ctl import ImexDomain, ImexNode
from netdoctor.parsers.nvidia_smi_q import SmiGpu, SmiQuery

SMI_Q = "nvidia-smi-q"
_FABRIC_FIELDS = tuple(field.name for field in dataclasses.fields(GpuFabric))
_PLATFORM_FIELDS = tuple(field.name for field in dataclasses.fields(GpuPlatform))


def join_imex_ctl(draft: Draft, domain: ImexDomain, fields: Mapping[str, str]) -> None:
    draft.inventory.imex = domain


def this_imex_node(inventory: Inventory) -> ImexNode | None:
    """The node the answering daemon starred as its own (`* ADDRESS *`), else the IMEX node with
    one of this node's IP addresses (or its host name); None if none matches (the node's
    addresses not read, or IMEX configured with names it does not carry, as a ComputeDomain
    daemon's DNS names are, and no star)."""
    if inventory.imex is None:
        return None
    starred = [node for node in inventory.imex.nodes if node.local]
    if len(starred) == 1:
        return starred[0]
    mine = {inventory.host, inventory.host.split(".", 1)[0]}
    for netdev in inventory.netdevs:
        mine.update(address.split("/", 1)[0] for address in netdev.addresses or ())
    for node in inventory.imex.nodes:
        name = node.address.split()[0]
        try:
            name = str(ipaddress.ip_address(name))
        except ValueError:
            pass
        if name in mine:
            return node
    return None


def join_nvidia_smi_q(draft: Draft, query: SmiQuery, fields: Mapping[str, str]) -> None:
    """Each GPU block onto the GPU of its PCI address. Without NVML's GPUs, a GPU nvidia-smi
    lists is added (nvidia-smi numbers GPUs in PCI order, as its blocks come)."""
    inventory = draft.inventory
    by_pci = {gpu.pci_address: gpu for gpu in inventory.gpus if gpu.pci_address}
    from_nvml = any("nvml" in gpu.sources for gpu in inventory.gpus)
    for position, entry in enumerate(query.gpus):
        gpu = by_pci.get(entry.pci_address or "")
        if gpu is None:
            if from_nvml or entry.pci_address is None:
                continue            # NVML's list of GPUs stands; a GPU it does not show is not added here
            gpu = next((gpu for gpu in inventory.gpus if gpu.index == position and gpu.pci_address is None), None)
            if gpu is None:
                gpu = Gpu(index=position)
                inventory.gpus.append(gpu)
            gpu.pci_address = entry.pci_address
        if SMI_Q not in gpu.sources:
            gpu.sources += (SMI_Q,)
        draft.merge(gpu, {"name": entry.name, "uuid": entry.uuid, "recovery_action": entry.recovery_action},
                    SMI_Q, gpu.label)
        _join_fabric(draft, gpu, entry)
    inventory.gpus.sort(key=lambda gpu: gpu.index)


def _join_fabric(draft: Draft, gpu: Gpu, entry: SmiGpu) -> None:
    if entry.fabric is not None:
        facts = {name: getattr(entry.fabric, name) for name in _FABRIC_FIELDS}
        gpu.fabric = _combined(draft, gpu, gpu.fabric, facts, "fabric", GpuFabric)
    if entry.platform is not None and entry.platform.placed:
        facts = {name: getattr(entry.platform, name) for name in _PLATFORM_FIELDS}
        gpu.platform = _combined(draft, gpu, gpu.platform, facts, "platform", GpuPlatform)


def _combined(draft: Draft, gpu: Gpu, current: Any, facts: dict[str, Any], fact: str, kind: type) -> Any:
    """`current` with the facts it lacked filled in; a fact both give differently is a conflict
    (`fabric.clique_id`), by Draft.merge's rule, on a mutable copy of the frozen `current`."""
    if all(value is None for value in facts.values()):
        return current
    if current is None:
        return kind(**facts)
    first = gpu.sources[0] if gpu.sources and gpu.sources[0] != SMI_Q else "nvml"
    known = types.SimpleNamespace(sources=(first,), **{f"{fact}.{name}": getattr(current, name) for name in facts})
    draft.merge(known, {f"{fact}.{name}": value for name, value in facts.items()}, SMI_Q, gpu.label)
    return kind(**{name: getattr(known, f"{fact}.{name}") for name in facts})
