"""Build the one inventory of a node: apply the discovery plan, join what the sources said.

The plan (`netdoctor.inventory.plan`) picks rows of the source table
(`netdoctor.host.sources`); sysfs, NVML and tool facts are read by `from_sysfs`,
`from_nvml` and `from_tools` and merged in the order of trust (`merge.Draft`).

Live runs overlap the work: the node-wide tools start first, sysfs and NVML are read
while they run, then the per-port/per-netdev tools (perfquery, mlnx_qos) start as soon
as sysfs has named the ports.
"""

from __future__ import annotations

import functools

from netdoctor.host.sources import Scope
from netdoctor.host.types import CommandResult, NodeSource
from netdoctor.inventory.from_nccl_env import read_nccl_env
from netdoctor.inventory.from_neighbors import place_lldp_neighbors
from netdoctor.inventory.from_nvml import ask_nvml, read_nvml
from netdoctor.inventory.from_pci import read_pci_tree, read_virtualization
from netdoctor.inventory.from_platform import read_dmi, read_visibility
from netdoctor.inventory.from_sysfs import (
    gpus_from_pci_bus,
    read_netdevs,
    read_pci_gpus,
    read_proc,
    read_pcie,
    read_peer_memory,
    read_sysfs_rdma,
)
from netdoctor.inventory.from_tools import JOINERS, parser_of, qos_of_bonds
from netdoctor.inventory.bridge import mark_switch_management
from netdoctor.inventory.gpu_numa import settle_gpu_numa
from netdoctor.inventory.hardware import hca_model
from netdoctor.inventory.merge import Draft, quiet
from netdoctor.inventory.model import Inventory, Netdev, PcieLink, SourceState
from netdoctor.inventory.plan import Job, Plan
from netdoctor.parsers import sysfs_values
from netdoctor.util import Background, natural_key


def build_inventory(source: NodeSource, *, deadline: float | None = None, fabric_scan: bool | None = None,
                    needs: frozenset[str] | None = None) -> Inventory:
    """Discover the node behind `source` (live or snapshot) within `deadline` (monotonic).

    `fabric_scan` runs `iblinkinfo`, a sweep of the whole IB fabric. None (the default):
    not on a live node, but a snapshot's recorded scan is used when it has one.
    `needs` (the check needs of `netdoctor.checks.api.NEEDS`) limits discovery to the
    sources serving them; None collects everything.
    """
    draft = Draft(source)
    plan = Plan.of(needs, fabric_scan=source.is_snapshot if fabric_scan is None else fabric_scan,
                   is_snapshot=source.is_snapshot)
    for name, reason in plan.left_out():
        draft.status(name, SourceState.NOT_RUN, reason)
    node_jobs = plan.commands(draft.inventory, Scope.NODE)
    nvml = ask_nvml(source) if plan.wants("nvml") else None    # beside netlink and sysfs
    # The tools run in their own threads, beside the reads below (concurrent.futures would cost
    # ~10 ms of imports, the stdlib logging package with it, in every run).
    node_tools = Background("netdoctor-discover-node-tools", functools.partial(
        source.run, [job.spec for job in node_jobs], deadline))
    read_sysfs_rdma(draft)
    read_netdevs(draft)
    read_peer_memory(draft)
    read_pci_gpus(draft)
    read_dmi(draft)
    read_visibility(draft)
    read_proc(draft)
    port_jobs = _device_jobs(plan, draft.inventory)
    port_tools = Background("netdoctor-discover-port-tools", functools.partial(
        source.run, [job.spec for job in port_jobs], deadline))
    if nvml is not None:
        read_nvml(draft, wait_until=deadline, question=nvml)
    if plan.wants("nccl-env"):
        read_nccl_env(draft)
    if plan.serves("pcie-tree"):
        read_pci_tree(draft)
        read_virtualization(draft)   # after read_dmi and read_nvml: it judges their facts
    sysfs_named_hcas = bool(draft.inventory.hcas)
    node_results = node_tools.result(None)
    port_results = port_tools.result(None)
    _join_commands(draft, node_jobs, node_results)
    if not sysfs_named_hcas:
        # sysfs named no HCA: per-port tools follow what ibstat found instead.
        port_jobs = _device_jobs(plan, draft.inventory)
        port_results = source.run([job.spec for job in port_jobs], deadline) if port_jobs else {}
    _join_commands(draft, port_jobs, port_results)
    qos_of_bonds(draft)
    gpus_from_pci_bus(draft)
    _join(draft)
    return draft.inventory


def _device_jobs(plan: Plan, inventory: Inventory) -> list[Job]:
    return plan.commands(inventory, Scope.IB_PORT, Scope.ROCE_NETDEV, Scope.RDMA_DEVICE, Scope.EFA)


def _join_commands(draft: Draft, jobs: list[Job], results: dict[str, CommandResult]) -> None:
    """Parse each command's result and join its facts, in the table's order of trust."""
    for job in jobs:
        parsed = draft.parse_command(results[job.spec.name], parser_of(job.row), answer_on_stderr=job.row.answer_on_stderr)
        if parsed is not None:
            JOINERS[job.row.name](draft, parsed, job.fields)


def _sysfs_link(draft: Draft, address: str) -> PcieLink | None:
    """A GPU's or NIC's sysfs link: the one the PCIe tree read already, else read now."""
    function = (draft.inventory.pci_tree or {}).get(address)
    return function.link if function is not None else read_pcie(draft, address)


def _join(draft: Draft) -> None:
    """Facts that relate sources: HCA models, PCIe links of HCAs and GPUs, netdevs <-> RDMA ports."""
    inventory = draft.inventory
    inventory.hcas.sort(key=lambda hca: natural_key(hca.name))
    for hca in inventory.hcas:
        hca.model = hca.model or hca_model(hca.ca_type)
        if hca.pci_address and hca.pci_address not in inventory.pcie:
            link = _sysfs_link(draft, hca.pci_address)
            if link:
                inventory.pcie[hca.pci_address] = link
    mark_switch_management(inventory)   # again with what the tools added (an ibstat-only snapshot)
    sysfs_numa: dict[str, int | None] = {}
    for gpu in inventory.gpus:
        if gpu.pci_address:
            link = _sysfs_link(draft, gpu.pci_address)
            if link:
                inventory.pcie[gpu.pci_address] = link
            sysfs_numa[gpu.label] = quiet(sysfs_values.parse_numa_node,
                                          draft.sys.read(f"bus/pci/devices/{gpu.pci_address}/numa_node"))
    settle_gpu_numa(draft, sysfs_numa)   # the CPU's node; on Grace NVML's is the GPU memory's
    # Netdev <-> RDMA port: ibdev2netdev / RoCE GID 0 already set Port.netdev; IPoIB
    # and single-port functions are found through the PCI function's net/ directory.
    netdevs_by_pci: dict[str, list[Netdev]] = {}
    for netdev in inventory.netdevs:
        if netdev.pci_address:
            netdevs_by_pci.setdefault(netdev.pci_address, []).append(netdev)
    for hca in inventory.hcas:
        candidates = netdevs_by_pci.get(hca.pci_address or "", [])
        for port in hca.ports.values():
            if port.netdev is None and len(candidates) == 1 and len(hca.ports) == 1:
                port.netdev = candidates[0].name
            netdev = inventory.netdev(port.netdev) if port.netdev else None
            if netdev is not None:
                netdev.rdma_port = port.name
    place_lldp_neighbors(inventory)
