"""The needs gate: may a check run on this inventory, and if not, why.

Each need of `netdoctor.checks.api.NEEDS` is judged from the inventory alone (its facts
and `Inventory.sources`): `None` means available; `(Status.SKIP, reason)` means the
thing is not on this node (pfc-ecn on a pure InfiniBand node); `(Status.UNKNOWN, reason)`
means we could not find out (a tool timed out, NVML failed), with that source's reason.
"""

from __future__ import annotations

from collections.abc import Callable

from netdoctor.checks.api import Check
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import Inventory, LinkLayer, SourceState, SourceStatus
from netdoctor.inventory.queries import unbound_efa_functions
from netdoctor.probe.result import ProbeNotRun, ProbeResult
from netdoctor.report.model import Status

Verdict = tuple[Status, str] | None

# What the pipeline hands the checks of the probe: nothing (not run), why not, or its result.
ProbeInput = ProbeResult | ProbeNotRun | None

_BAD_STATES = (SourceState.TIMEOUT, SourceState.ERROR, SourceState.PARSE_ERROR, SourceState.TOO_LARGE)
_RDMA_TOOLS = ("ibstat", "ibv_devinfo-v")


def _first_bad(sources: list[SourceStatus]) -> SourceStatus | None:
    return next((source for source in sources if source.state in _BAD_STATES), None)


def _sources_with_prefix(inventory: Inventory, prefix: str) -> list[SourceStatus]:
    return [inventory.sources[name] for name in sorted(inventory.sources) if name.startswith(prefix)]


def need_rdma(inventory: Inventory, probe: ProbeInput) -> Verdict:
    # EFA functions whose driver is not bound are RDMA devices the node should have (port-state fails them).
    if inventory.hcas or unbound_efa_functions(inventory):
        return None
    sysfs = inventory.source("sysfs")
    # The kernel's /sys/class/infiniband is authoritative: when it was read (or is absent
    # because no RDMA driver registered a device) an ibstat error only echoes "no CA".
    if sysfs.state in (SourceState.OK, SourceState.MISSING):
        return (Status.SKIP, "no RDMA devices on this node")
    tools = [inventory.source(name) for name in _RDMA_TOOLS]
    bad = _first_bad([sysfs, *tools])
    if bad is not None:
        return (Status.UNKNOWN, bad.reason())
    if any(tool.state in (SourceState.OK, SourceState.MISSING) for tool in tools):
        return (Status.SKIP, "no RDMA devices on this node")
    return (Status.UNKNOWN, f"RDMA devices were not discovered ({sysfs.reason()})")


def _link_layer_need(layer: LinkLayer, what: str) -> Callable[[Inventory, ProbeInput], Verdict]:
    def need(inventory: Inventory, probe: ProbeInput) -> Verdict:
        verdict = need_rdma(inventory, probe)
        if verdict is not None:
            return verdict
        ports = inventory.ports
        if any(port.link_layer is layer for port in ports):
            return None
        if ports and all(port.link_layer is None for port in ports):
            return (Status.UNKNOWN, "the link layer of the RDMA ports is not known")
        return (Status.SKIP, f"no {what} ports")

    return need


def need_gpus(inventory: Inventory, probe: ProbeInput) -> Verdict:
    if inventory.gpus:
        return None
    nvml = inventory.source("nvml")
    if nvml.state is SourceState.MISSING:
        # No NVML library, but nvidia-smi is installed and hung: a wedged driver stack
        # (nvidia-smi blocks in the kernel when a GPU is stuck), not a GPU-less node.
        topology = inventory.source("nvidia-smi-topo-m")
        if topology.state is SourceState.TIMEOUT:
            return (Status.UNKNOWN, topology.reason())
        return (Status.SKIP, "no NVIDIA GPUs (no NVIDIA driver)")
    if nvml.state is SourceState.OK:
        return (Status.SKIP, "no NVIDIA GPUs")
    return (Status.UNKNOWN, nvml.reason())


def need_topology(inventory: Inventory, probe: ProbeInput) -> Verdict:
    verdict = need_gpus(inventory, probe)
    if verdict is not None:
        return verdict
    if inventory.topology is not None:
        return None
    return (Status.UNKNOWN, inventory.source("nvidia-smi-topo-m").reason())


def _no_gpus_or_nics(inventory: Inventory, probe: ProbeInput) -> Verdict:
    """Neither GPUs nor RDMA NICs were found: why not (unknown), or that there are none (skip)."""
    gpus = need_gpus(inventory, probe)
    rdma = need_rdma(inventory, probe)
    unknown = next((v for v in (gpus, rdma) if v is not None and v[0] is Status.UNKNOWN), None)
    return unknown or (Status.SKIP, "no GPUs or RDMA NICs on this node")


def need_pcie(inventory: Inventory, probe: ProbeInput) -> Verdict:
    if inventory.pcie or any(gpu.pcie is not None for gpu in inventory.gpus):
        return None
    if not inventory.gpus and not inventory.hcas:
        return _no_gpus_or_nics(inventory, probe)
    return (Status.UNKNOWN, "no PCIe link facts for the GPUs and NICs "
                            f"({inventory.source('sysfs').reason()}; {inventory.source('nvml').reason()})")


def need_counters(inventory: Inventory, probe: ProbeInput) -> Verdict:
    verdict = need_rdma(inventory, probe)
    if verdict is not None:
        return verdict
    # EFA has no IBTA counters (no PMA): its hw_counters are all its counters.
    if any(port.counters or (port.hw_counters and is_efa(hca)) for hca in inventory.hcas for port in hca.ports.values()):
        return None
    bad = _first_bad(_sources_with_prefix(inventory, "perfquery-x-"))
    if bad is not None:
        return (Status.UNKNOWN, bad.reason())
    return (Status.UNKNOWN, "no port counters: sysfs counters/ not readable and perfquery gave none")


def need_qos(inventory: Inventory, probe: ProbeInput) -> Verdict:
    verdict = need_roce(inventory, probe)
    if verdict is not None:
        return verdict
    if any(netdev.qos is not None for netdev in inventory.netdevs):
        return None
    sources = _sources_with_prefix(inventory, "mlnx_qos-")
    bad = _first_bad(sources) or next((source for source in sources if not source.usable), None)
    if bad is not None:
        return (Status.UNKNOWN, bad.reason())
    return (Status.UNKNOWN, "no PFC/trust settings for the RoCE netdevs (mlnx_qos was not run)")


def need_probe(inventory: Inventory, probe: ProbeInput, what: str = "the NCCL probe") -> Verdict:
    """The probe's outcome: None (not run), ProbeNotRun (not run, or no result: why), or a result."""
    if probe is None:
        return (Status.SKIP, f"{what} was not run")
    if isinstance(probe, ProbeNotRun):
        if probe.unknown:
            return (Status.UNKNOWN, f"{what} did not give a result: {probe.reason}")
        return (Status.SKIP, f"{what} was not run: {probe.reason}")
    return None


def need_loopback(inventory: Inventory, loopback: ProbeInput) -> Verdict:
    return need_probe(inventory, loopback, "the NIC loopback")


def _unknown_from(inventory: Inventory, names: tuple[str, ...], what: str) -> Verdict:
    """UNKNOWN with the first named source's reason that explains why `what` is missing."""
    statuses = [inventory.source(name) for name in names]
    bad = _first_bad(statuses) or next((status for status in statuses if status.state is not SourceState.OK), None)
    return (Status.UNKNOWN, f"{what}: {bad.reason()}" if bad is not None else what)


def need_nvlink(inventory: Inventory, probe: ProbeInput) -> Verdict:
    verdict = need_gpus(inventory, probe)
    if verdict is not None:
        return verdict
    gpus = inventory.gpus
    if any(gpu.nvlinks or gpu.nvlink_total for gpu in gpus):
        return None
    if all(gpu.nvlink_total == 0 for gpu in gpus):
        return (Status.SKIP, "no NVLinks (PCIe GPUs)")
    return _unknown_from(inventory, ("nvml", "nvidia-smi-nvlink-s"), "NVLink state is not known")


def need_fabric(inventory: Inventory, probe: ProbeInput) -> Verdict:
    verdict = need_gpus(inventory, probe)
    if verdict is not None:
        return verdict
    if any(gpu.fabric is not None for gpu in inventory.gpus) or inventory.nvswitches is not None:
        return None
    return _unknown_from(inventory, ("nvml", "sysfs"), "neither NVML's fabric state nor the PCI bus was read")


def need_kernel_log(inventory: Inventory, probe: ProbeInput) -> Verdict:
    if inventory.kernel_log is not None:
        return None
    return _unknown_from(inventory, ("dmesg",), "the kernel log was not read")


def need_pcie_tree(inventory: Inventory, probe: ProbeInput) -> Verdict:
    if inventory.pci_tree:
        return None
    if not inventory.gpus and not inventory.hcas and not inventory.pci_gpus:
        return _no_gpus_or_nics(inventory, probe)
    return _unknown_from(inventory, ("sysfs",), "the PCIe tree above the GPUs and NICs is not known (a snapshot "
                                                 "taken before netdoctor 0.2 keeps PCI functions without their bridges)")


def need_transceiver(inventory: Inventory, probe: ProbeInput) -> Verdict:
    """(transceiver, phy) The RDMA ports; which of them need a reading only the pack's port classes say,
    so the check itself says which readings are missing, and why."""
    return need_rdma(inventory, probe)


def need_nccl_env(inventory: Inventory, probe: ProbeInput) -> Verdict:
    if inventory.nccl is not None:
        return None
    return _unknown_from(inventory, ("nccl-env",), "NCCL's settings are not known")


def need_versions(inventory: Inventory, probe: ProbeInput) -> Verdict:
    """Versions are reported as found (each source's status says why one is absent)."""
    return None


def need_neighbors(inventory: Inventory, probe: ProbeInput) -> Verdict:
    """First-hop switches are found per RDMA port; which ports have one the report says."""
    return need_rdma(inventory, probe)


def need_netdevs(inventory: Inventory, probe: ProbeInput) -> Verdict:
    netdevs = inventory.source("netdevs")
    return (Status.UNKNOWN, netdevs.reason()) if netdevs.state in _BAD_STATES else None


def need_nothing(inventory: Inventory, probe: ProbeInput) -> Verdict:
    """A need that only widens what discovery reads; the check says what it could not judge."""
    return None


need_ib = _link_layer_need(LinkLayer.INFINIBAND, "InfiniBand")
need_roce = _link_layer_need(LinkLayer.ETHERNET, "RoCE")

NEED_JUDGES: dict[str, Callable[[Inventory, ProbeInput], Verdict]] = {
    "rdma": need_rdma,
    "ib": need_ib,
    "roce": need_roce,
    "gpus": need_gpus,
    "topology": need_topology,
    "pcie": need_pcie,
    "counters": need_counters,
    "qos": need_qos,
    "probe": need_probe,
    "nvlink": need_nvlink,
    "fabric": need_fabric,
    "kernel-log": need_kernel_log,
    "pcie-tree": need_pcie_tree,
    "transceiver": need_transceiver,
    "phy": need_transceiver,
    "nccl-env": need_nccl_env,
    "loopback": need_loopback,
    "versions": need_versions,
    "neighbors": need_neighbors,
    "netdevs": need_netdevs,
    "efa": need_nothing,
    "placement": need_nothing,
}


def gate(check: Check, inventory: Inventory, probe: ProbeInput = None,
         loopback: ProbeInput = None) -> tuple[Status, str, str] | None:
    """None when every need of `check` is available, else (status, reason, need).

    A need that is not applicable (skip) wins over one that is unknown: a check whose
    subject does not exist on this node is skipped whatever else is missing.
    """
    unknown: tuple[Status, str, str] | None = None
    for need in check.needs:
        # The loopback is the one need judged from its own traffic result.
        verdict = NEED_JUDGES[need](inventory, loopback if need == "loopback" else probe)
        if verdict is None:
            continue
        if verdict[0] is Status.SKIP:
            return (verdict[0], verdict[1], need)
        if unknown is None:
            unknown = (verdict[0], verdict[1], need)
    return unknown
