"""inventory: the hardware the node's platform must have, against what is there.

Every other check judges the devices it finds; none notices a device that is gone. A DGX H100
that came back from a reboot with 7 GPUs, or without its RDMA stack (`mlx5_ib` not loaded),
passes every check that looks at what is present. This check knows what must be there from
what the node *is* (netdoctor.inventory.platform: DMI, else SXM GPUs with NVSwitches on the PCI
bus), or from the pack's pins (`[inventory] gpus/nvswitches/compute_nics`, 0 = not pinned),
never from how many devices happen to be present, and fails what is missing, by name.

A GPU on the bus that NVML does not list is `unknown` when it is hidden from this process on
purpose: the capture found its device node /dev/nvidiaN absent (a container, a Kubernetes pod)
or denied (a SLURM job step's device cgroup); a prolog must not drain a node for it. Where the
node opens yet NVML lacks the GPU, the driver lost it: failed by address, whatever SLURM or
container variables say (netdoctor.inventory.visibility). Not probed: left to `gpu-driver`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import Hca, Inventory, Port, SourceState
from netdoctor.inventory.platform import NodePlatform, node_platform
from netdoctor.inventory.queries import NEAR_GPU_LEVELS, pcie_level, physical_function
from netdoctor.inventory.visibility import hidden_gpus, lost_gpus, nvml_visible
from netdoctor.packs.model import PortClass, or_bridge_class, role_of
from netdoctor.util import natural_key
from netdoctor_plugins.remedy_words import commands

CHECK_ID = "inventory"
KINDS = ("gpus", "nvswitches", "compute_nics")
GPU_REMEDY = ("a GPU missing from the PCI bus: read `dmesg` for Xid 79 / NVRM probe errors and `lspci -d 10de:`; "
              "cold-reboot the node (power off, not a warm reboot, retrains the links); if the GPU stays missing, "
              "reseat or replace it (open a case with the vendor with `nvidia-bug-report.sh`)")
LOST_REMEDY = ("the driver lost a GPU it is bound to: read `dmesg` for Xid 79 / Xid 48 / NVRM errors and "
               "`nvidia-smi -q -i {address}`; drain the node and reboot it; reseat or replace the GPU if it recurs")
NVSWITCH_REMEDY = ("an NVSwitch missing from the PCI bus: `lspci -d 10de: | grep -i bridge`, `dmesg | grep -i nvswitch`; "
                   "cold-reboot the node; if it stays missing the GPU baseboard needs service")
NIC_REMEDY = ("a compute NIC missing: `lspci -d 15b3:` and `dmesg | grep mlx5`; reseat the card or the cable, update its "
              "firmware (`mlxfwmanager`), or replace it")
MLX5_IB_REMEDY = ("load the RDMA stack: `modprobe mlx5_ib` (then `ibstat` lists the devices); if it does not load, "
                  "`dmesg | grep mlx5` and check that MLNX_OFED / rdma-core matches the running kernel (`ofed_info -s`)")
MLX5_CORE_REMEDY = ("no driver is bound to the ConnectX functions: `modprobe mlx5_core`, then `modprobe mlx5_ib`; "
                    "`dmesg | grep mlx5` says why a probe failed")


@check(CHECK_ID, "the platform's GPUs, NVSwitches and compute NICs (with their RDMA devices) are all there; "
       "GPUs hidden from this process on purpose (device node absent or denied) are unknown", order=5)
def inventory(ctx: CheckContext) -> Iterator[Finding]:
    node = ctx.inventory
    platform = node_platform(node)
    known = _platform_entry(ctx, platform)
    expected, why = _expectations(ctx, platform, known)
    evidence = {"platform": platform.id if platform else None, "platform_basis": platform.basis if platform else None,
                "expected_from": why}
    findings = [*_judge_gpus(ctx, node, expected, why, platform, known, evidence),
                *_judge_nvswitches(ctx, node, expected, why, evidence),
                *_judge_nics(ctx, node, expected, why, platform, known, evidence)]
    if not findings:
        dmi = node.dmi.product_name if node.dmi else None
        yield ctx.skip("node", "nothing to expect: the platform is not known "
                       f"({'DMI product ' + repr(dmi) if dmi else 'no DMI product name'}, no SXM GPUs with NVSwitches "
                       f"on the PCI bus) and the pack '{ctx.pack.name}' pins no GPUs, NVSwitches or compute NICs",
                       evidence=evidence)
    yield from findings


def _platform_entry(ctx: CheckContext, platform: NodePlatform | None) -> Mapping[str, Any]:
    """The pack's `[inventory.platforms.<id>]` table of the node's platform, looked up once ({}: none)."""
    table = ctx.rule("platforms")
    entry = table.get(platform.id) if platform is not None and isinstance(table, Mapping) else None
    return entry if isinstance(entry, Mapping) else {}


def _expectations(ctx: CheckContext, platform: NodePlatform | None,
                  known: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """What the node must have of each kind, and where each number comes from. A pack's pin (a
    site's `[inventory] gpus = 8`) wins over the platform's number; 0 is "not judged"."""
    expected: dict[str, int] = {}
    why: dict[str, str] = {}
    for kind in KINDS:
        pin, of_platform = _count(ctx.rule(kind)), _count(known.get(kind))
        if pin:
            expected[kind], why[kind] = pin, f"the pack '{ctx.pack.name}' pins {kind} = {pin}"
        elif of_platform and platform is not None:
            expected[kind], why[kind] = of_platform, f"{platform.name} has {of_platform}"
    return expected, why


def _count(value: Any) -> int:
    """A pinned count: a non-negative int; anything else (a malformed site value) is not a pin."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 4096 else 0


def _platform_addresses(known: Mapping[str, Any], key: str) -> list[str]:
    """The platform's PCI addresses of one kind (`gpu_addresses`, `rail_addresses`), in order."""
    addresses = known.get(key, [])
    return [address.lower() for address in addresses if isinstance(address, str)] \
        if isinstance(addresses, (list, tuple)) else []


# -- GPUs ------------------------------------------------------------------------------------------
def _judge_gpus(ctx: CheckContext, node: Inventory, expected: dict[str, int], why: dict[str, str],
                platform: NodePlatform | None, known: Mapping[str, Any], base: dict[str, Any]) -> Iterator[Finding]:
    on_bus = node.pci_gpus
    nvml_ok = node.source("nvml").state is SourceState.OK
    listed = {gpu.pci_address for gpu in node.gpus if "nvml" in gpu.sources and gpu.pci_address}
    # NVML answering for more GPUs than the bus shows means the bus was not read whole: the
    # larger count stands, so a short read never fails a node.
    present_addresses = set(on_bus or {}) | listed
    present = max(len(present_addresses), nvml_visible(node) if nvml_ok else 0)
    want = expected.get("gpus", 0)
    hidden = hidden_gpus(node)
    evidence = {**base, "expected": want or None, "on_pci_bus": len(on_bus) if on_bus is not None else None,
                "nvml_visible": nvml_visible(node) if nvml_ok else None}
    if want and on_bus is None and not nvml_ok:
        yield ctx.unknown("node", f"GPUs not counted: the PCI bus was not read and {node.source('nvml').reason()} "
                          f"({why['gpus']})", evidence=evidence)
        return
    if want and present < want:
        missing = [address for address in _platform_addresses(known, "gpu_addresses")
                   if address not in present_addresses]
        if on_bus is not None and platform is not None and len(missing) == want - present:
            for address in missing:
                yield ctx.graded(ctx.severity("missing_severity"), address,
                                 f"GPU at {address} expected by {platform.id}: not on the bus "
                                 f"({present} of {want} GPUs there)",
                                 evidence={**evidence, "pci_address": address}, remedy=GPU_REMEDY, rule="missing_severity")
            return
        where = "on the PCI bus" if on_bus is not None else "visible to NVML (the PCI bus was not read)"
        yield ctx.graded(ctx.severity("missing_severity"), "node", f"{present} GPUs {where}, {why['gpus']}",
                         evidence=evidence, remedy=GPU_REMEDY, rule="missing_severity")
        return
    lost = lost_gpus(node)
    for address in lost:
        yield ctx.graded(ctx.severity("missing_severity"), address,
                         f"GPU at {address} is on the PCI bus and this process opens its device node, but NVML does "
                         f"not list it: the driver lost it ({nvml_visible(node)} of {len(on_bus or {})} GPUs in NVML)",
                         evidence={**evidence, "pci_address": address, "device_node": "ok"},
                         remedy=LOST_REMEDY.format(address=address), rule="missing_severity")
    if hidden is not None:
        addresses, reason = hidden
        total = len(on_bus or {})
        yield ctx.unknown("node", f"this process sees {nvml_visible(node)} of {total} GPUs: {reason}; "
                          f"the other {len(addresses)} cannot be judged here",
                          evidence={**evidence, "hidden": addresses, "hidden_by": reason},
                          remedy=f"run outside the job step (a prolog, or `srun --gres=gpu:{total}`), or outside "
                                 "the container, to judge every GPU")
        return
    if want and not lost:
        yield ctx.passed("node", f"{present} GPUs on the PCI bus ({why['gpus']})", evidence=evidence)


# -- NVSwitches ------------------------------------------------------------------------------------
def _judge_nvswitches(ctx: CheckContext, node: Inventory, expected: dict[str, int], why: dict[str, str],
                      base: dict[str, Any]) -> Iterator[Finding]:
    want = expected.get("nvswitches", 0)
    if not want:
        return
    switches = node.nvswitches
    evidence = {**base, "expected": want, "nvswitches": list(switches) if switches is not None else None}
    if switches is None:
        yield ctx.unknown("node", f"NVSwitches not counted: the PCI bus was not read ({why['nvswitches']})",
                          evidence=evidence)
    elif len(switches) < want:
        yield ctx.graded(ctx.severity("missing_severity"), "node",
                         f"{len(switches)} NVSwitches on the PCI bus, {why['nvswitches']}",
                         evidence=evidence, remedy=NVSWITCH_REMEDY, rule="missing_severity")
    else:
        yield ctx.passed("node", f"{len(switches)} NVSwitches on the PCI bus ({why['nvswitches']})", evidence=evidence)


# -- compute NICs and their RDMA devices -------------------------------------------------------------
def _gpus_wanted(node: Inventory, expected: dict[str, int]) -> int:
    """How many GPUs a view must place before "next to none of them" is an answer."""
    return max(expected.get("gpus", 0), len(node.pci_gpus or {}), len([gpu for gpu in node.gpus if gpu.pci_address]))


def _near_gpu(node: Inventory, hca: Hca, gpus_wanted: int) -> bool | None:
    """Does `hca` share a PCIe switch (PIX/PXB) with a GPU: `nvidia-smi topo -m`, else the PCIe tree.
    "No" holds only where that view places every GPU the node should have: a GPU hidden from this
    process (a job step's cgroup) or gone from the bus takes its rail's neighbour away, and that
    rail is still a rail. None: neither view places the device (a NUMA node is no placement here:
    on a DGX every NIC shares one with a GPU)."""
    topology = node.topology
    label = topology.nic_label(hca.name) if topology is not None and topology.nic_names else None
    if label:
        levels = [level for gpu in topology.gpus if (level := topology.link(gpu, label)) is not None]
        if any(level in NEAR_GPU_LEVELS for level in levels):
            return True
        if levels and len(levels) >= gpus_wanted:
            return False
    if hca.pci_address and node.pci_tree:
        gpus = set(node.pci_gpus or ()) | {gpu.pci_address for gpu in node.gpus if gpu.pci_address}
        levels = [level for address in gpus if (level := pcie_level(node, address, hca.pci_address)) is not None]
        if any(level in NEAR_GPU_LEVELS for level in levels):
            return True
        if levels and len(levels) >= gpus_wanted:
            return False
    return None


def _placed_class(ctx: CheckContext, port: Port, hca: Hca, near: bool | None) -> PortClass | None:
    """The pack's class of the port with `near_gpu` asked of `near` (None: not asked)."""
    return or_bridge_class(next((port_class for port_class in ctx.pack.port_classes if port_class.matches(port, hca)
                                 and (port_class.near_gpu is None or near is None or port_class.near_gpu == near)),
                                None), hca)


def _compute_hcas(ctx: CheckContext, node: Inventory, expected: dict[str, int]) -> list[tuple[Hca, bool | None]]:
    """The compute rails, each with whether it sits next to a GPU (None: not placed): RDMA devices
    (physical functions; EFA too) with a port the pack classes compute (or leaves unclassed), its
    `near_gpu` asked where `_near_gpu` places the device. Under a pack that asks placement, a
    function of a multi-function card (a dual-port storage ConnectX, in InfiniBand mode too)
    counts only when placed next to a GPU. gpu-nic-affinity judges where each rail sits."""
    asks = any(port_class.near_gpu is not None for port_class in ctx.pack.port_classes)
    wanted = _gpus_wanted(node, expected)
    functions = {*(node.pci_nics or {}), *(hca.pci_address for hca in node.hcas if hca.pci_address)}
    cards = Counter(address.rpartition(".")[0] for address in functions)
    rails = []
    for hca in node.hcas:
        if physical_function(node, hca) is not None:
            continue
        near = _near_gpu(node, hca, wanted) if asks else None
        if not any(role_of(_placed_class(ctx, port, hca, near)) == "compute" for port in hca.ports.values()):
            continue
        if asks and near is not True and hca.pci_address and cards[hca.pci_address.rpartition(".")[0]] > 1:
            continue
        rails.append((hca, near))
    return sorted(rails, key=lambda item: natural_key(item[0].name))


def _judge_nics(ctx: CheckContext, node: Inventory, expected: dict[str, int], why: dict[str, str],
                platform: NodePlatform | None, known: Mapping[str, Any], base: dict[str, Any]) -> Iterator[Finding]:
    want = expected.get("compute_nics", 0)
    classes = [port_class.name for port_class in ctx.pack.port_classes if port_class.role == "compute"]
    if not want and not classes:
        return
    functions = node.pci_nics
    rdma = [hca for hca in node.hcas if not is_efa(hca)]
    rails = _compute_hcas(ctx, node, expected)
    compute = [hca for hca, _ in rails]
    unplaced = [hca.name for hca, near in rails
                if near is None and any(item.near_gpu is not None for item in ctx.pack.port_classes)]
    reason = why.get("compute_nics") or f"the pack '{ctx.pack.name}' expects compute ports (port class " \
                                         f"{', '.join(repr(name) for name in classes)})"
    evidence = {**base, "expected": want or None, "compute_nics": [hca.name for hca in compute],
                "counted_unplaced": unplaced, "rdma_devices": len(rdma),
                "connectx_functions": len(functions) if functions is not None else None}
    # A card none of whose functions has an RDMA device (a RoCE LAG bond is one device for two functions).
    with_rdma = {hca.pci_address.rpartition(".")[0] for hca in rdma if hca.pci_address}
    without_rdma = sorted(address for address in functions or {} if address.rpartition(".")[0] not in with_rdma)
    if functions and not rdma:
        drivers = sorted({driver for _, driver in functions.values() if driver})
        bound = f"bound to {', '.join(drivers)}" if drivers else "on the PCI bus"
        unbound = not drivers and any(driver is None for _, driver in functions.values())
        question = "is mlx5_ib loaded?" if "mlx5_core" in drivers else "are mlx5_core and mlx5_ib loaded?"
        yield ctx.graded(ctx.severity("missing_severity"), "node",
                         f"{len(functions)} ConnectX functions {bound}, no RDMA device: {question} ({reason})",
                         evidence={**evidence, "functions_without_rdma": without_rdma},
                         remedy=(MLX5_CORE_REMEDY if unbound and not drivers else MLX5_IB_REMEDY)
                         + _drivers_in_use(without_rdma), rule="missing_severity")
        return
    addresses = _platform_addresses(known, "rail_addresses")
    placed = [hca.pci_address for hca, near in rails if near is True]
    # The platform's layout holds where a rail sits at one of its addresses and no rail beside a GPU sits elsewhere.
    if (platform is not None and want and len(addresses) == want
            and any(hca.pci_address in addresses for hca in compute) and all(address in addresses for address in placed)):
        yield from _judge_rails_by_address(ctx, node, addresses, platform, reason, evidence)
        return
    count = len(compute)
    unknown = (f"; placement not known for {', '.join(unplaced)} (no nvidia-smi topo -m or PCIe tree places it "
               "beside a GPU): counted by port class alone, a storage port may be among them") if unplaced else ""
    if count < max(want, 1):
        detail = f"; ConnectX functions without an RDMA device: {', '.join(without_rdma)}" if without_rdma else ""
        bare = _gpus_without_rail(node, compute) if want else []
        detail += f"; no compute NIC at PIX/PXB to {', '.join(bare)} in nvidia-smi topo -m" if bare else ""
        summary = (f"{count} compute NICs with an RDMA device, {why['compute_nics']}" if want
                   else f"no compute port: {reason}, and the node has none")
        yield ctx.graded(ctx.severity("missing_severity"), "node", summary + detail + unknown,
                         evidence={**evidence, "functions_without_rdma": without_rdma},
                         remedy=MLX5_IB_REMEDY + _drivers_in_use(without_rdma) if without_rdma else NIC_REMEDY,
                         rule="missing_severity")
        return
    yield ctx.passed("node", f"{count} compute NICs with an RDMA device ({reason}){unknown}", evidence=evidence)


def _drivers_in_use(addresses: list[str]) -> str:
    """The command that shows which driver each ConnectX function without an RDMA device has."""
    return f"; the driver in use: {commands('`lspci -k -s {}`', addresses)}" if addresses else ""


def _gpus_without_rail(node: Inventory, compute: list[Hca]) -> list[str]:
    """The GPUs of `nvidia-smi topo -m` with no compute rail on their PCIe switch: where a lost rail was."""
    topology = node.topology
    if topology is None or not topology.nic_names:
        return []
    labels = [label for hca in compute if (label := topology.nic_label(hca.name))]
    if not labels:
        return []
    return [gpu for gpu in topology.gpus if not any(topology.link(gpu, label) in NEAR_GPU_LEVELS for label in labels)]


def _judge_rails_by_address(ctx: CheckContext, node: Inventory, addresses: list[str], platform: NodePlatform,
                            reason: str, evidence: dict[str, Any]) -> Iterator[Finding]:
    """The platform's rails by the PCI address each has (`rail_addresses`, GPU order): a missing one
    is named by its address and its GPU, and a port elsewhere never stands in for it. The address
    places the rail: one moved off its GPU's switch is still there (gpu-nic-affinity fails where it sits)."""
    present = {hca.pci_address for hca in node.hcas
               if hca.pci_address in addresses and physical_function(node, hca) is None
               and any(role_of(_placed_class(ctx, port, hca, None)) == "compute" for port in hca.ports.values())}
    missing = [(index, address) for index, address in enumerate(addresses) if address not in present]
    if not missing:
        yield ctx.passed("node", f"{len(present)} compute NICs with an RDMA device ({reason})", evidence=evidence)
        return
    for index, address in missing:
        device = next((hca for hca in node.hcas if hca.pci_address == address), None)
        function = (node.pci_nics or {}).get(address)
        if device is not None:
            port_class = next((_placed_class(ctx, port, device, None) for port in device.ports.values()), None)
            layers = ", ".join(sorted({str(port.link_layer) for port in device.ports.values() if port.link_layer}))
            state = (f"{device.name} is there but not a compute port (port class "
                     f"{port_class.name if port_class else None!r}, link layer {layers or 'unknown'})")
        elif function is not None:
            bound = f"bound to {function[1]}" if function[1] else "no driver"
            state = f"on the PCI bus ({bound}) without an RDMA device"
        else:
            state = "not on the PCI bus" if node.pci_nics is not None else "no RDMA device (the PCI bus was not read)"
        yield ctx.graded(ctx.severity("missing_severity"), address,
                         f"compute NIC at {address} (GPU{index}'s rail) expected by {platform.id}: {state} "
                         f"({len(present)} of {len(addresses)} rails there)",
                         evidence={**evidence, "pci_address": address, "gpu_index": index},
                         remedy=(MLX5_IB_REMEDY if function is not None and device is None else NIC_REMEDY)
                         + (_drivers_in_use([address]) if function is not None else ""),
                         rule="missing_severity")
