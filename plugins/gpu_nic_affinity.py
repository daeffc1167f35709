"""`gpu-nic-affinity`: every GPU has a compute NIC close to it, and rails are not crossed.

NCCL sends a GPU's inter-node traffic through the NIC nearest to it. When that NIC sits
behind the other CPU socket (`SYS` in `nvidia-smi topo -m`), GPUDirect RDMA traffic crosses
the socket interconnect (UPI/xGMI): bandwidth drops and latency rises, and NCCL may even
disable GPUDirect RDMA for that pair (NCCL_NET_GDR_LEVEL defaults to PXB-ish distances).
On rail-optimised clusters (DGX/HGX) each GPU owns one NIC on its own PCIe switch (its
rail); two GPUs that must share one NIC halve each other's network bandwidth, and a GPU
whose own rail NIC sits across the socket crosses rails on every transfer. Causes in the field: a NIC
that died or lost its driver binding (the GPU's nearest NIC vanishes from the matrix), a
card moved to the wrong slot, a BIOS that renumbers NUMA nodes.

PCIe distance order, nearest first: PIX < PXB < PHB < NODE < SYS.

On Grace (GH200, GB200, GB300) the GPU attaches to its CPU over NVLink-C2C and `topo -m` prints
SYS between every GPU and every NIC by design; there (`placement_by`: `numa`, or `auto` where
the GPUs are NUMA nodes of their own) a NIC on the CPU socket of the GPU (its NUMA node) counts
as NODE, one on the other socket as SYS, and the rest of the judgement is the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.errors import RulesError
from netdoctor.inventory.model import Gpu, Hca, Inventory, Port, Topology
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.queries import (
    gpus_attached_by_c2c,
    pcie_level,
    unbound_efa_functions,
    virtual_function_note,
)
from netdoctor.packs import role_of
from netdoctor.util import natural_key
from netdoctor_plugins.remedy_words import commands

CHECK_ID = "gpu-nic-affinity"
LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
RANK = {level: rank for rank, level in enumerate(LEVELS)}
PLACEMENT_BASES = ("auto", "pcie", "numa")




def _cross_socket_remedy(inventory: Inventory, gpu: Gpu) -> str:
    """Find the NIC that belongs beside this GPU: on the bus, bound, in the slot the platform guide gives."""
    drivers = sorted({hca.driver for hca in inventory.hcas if hca.driver}) or ["mlx5_core"]
    where = f"`lspci -tv` shows what sits beside {gpu.pci_address}, " if gpu.pci_address else ""
    return (f"the GPU's nearest compute NIC is missing or placed behind the other socket: check that the NIC next "
            f"to {gpu.label} is present and bound to {' or '.join(drivers)} ({where}`lspci -nnk`, "
            "`ibdev2netdev`), and that cards sit in the slots the platform guide gives")


def _expected_rank(ctx: CheckContext) -> int:
    level = ctx.rule("expected_level")
    if level not in RANK:
        raise RulesError(f"[{CHECK_ID}] expected_level = {level!r}: expected one of {', '.join(LEVELS)}")
    return RANK[level]


def _placement_basis(ctx: CheckContext) -> str:
    """`pcie` (the topo -m matrix, the PCIe tree for EFA) or `numa` (the CPU socket: Grace)."""
    basis = ctx.rule("placement_by")
    if basis not in PLACEMENT_BASES:
        raise RulesError(f"[{CHECK_ID}] placement_by = {basis!r}: expected one of {', '.join(PLACEMENT_BASES)}")
    if basis == "auto":
        return "numa" if gpus_attached_by_c2c(ctx.inventory) else "pcie"
    return basis


def _numa_levels(gpus: list[Gpu], hcas: Mapping[str, Hca]) -> dict[str, dict[str, str]]:
    """GPU label -> {NIC: NODE (the GPU's CPU socket) or SYS (the other one)}, nearest first, for
    the GPUs and NICs whose NUMA node is known."""
    levels_by_gpu: dict[str, dict[str, str]] = {}
    for gpu in gpus:
        levels = {name: "NODE" if hca.numa_node == gpu.numa_node else "SYS" for name, hca in hcas.items()
                  if gpu.numa_node is not None and hca.numa_node is not None}
        if levels:
            levels_by_gpu[gpu.label] = dict(sorted(levels.items(), key=lambda item: (RANK[item[1]], natural_key(item[0]))))
    return levels_by_gpu


def _port_roles(ctx: CheckContext, port: Port, hca: Hca) -> set[str]:
    """The port's role from the rule pack's port classes (RDMA ports no class names count as
    compute), and the role it would have where its class asks for GPU proximity: a rail NIC
    moved away from its GPU loses the `near_gpu` compute class, and this check must still
    judge it as the rail it is (across the socket: fail)."""
    pack = ctx.pack
    return {role_of(pack.port_class(port, hca, ctx.inventory)), role_of(pack.port_class_ignoring_placement(port, hca))}


def compute_hcas(ctx: CheckContext) -> dict[str, Hca]:
    roles = set(ctx.rule("compute_roles"))
    selected: dict[str, Hca] = {}
    rdma_listed = ctx.inventory.source("sysfs").usable
    for hca in ctx.inventory.hcas:
        if virtual_function_note(ctx.inventory, hca) is not None:
            continue      # a VF shares its PF's link: it is not a rail of its own
        if rdma_listed and hca.sources == ("nvidia-smi-topo-m",):
            continue      # in the PCIe matrix but no RDMA device: driver not bound or device failed
        ports = list(hca.ports.values())
        if not ports or any(_port_roles(ctx, port, hca) & roles for port in ports):
            selected[hca.name] = hca
    return selected


def _topology_problem(inventory: Inventory) -> str | None:
    """Why the GPU x NIC matrix cannot be used for the whole node, or None."""
    if inventory.topology is None:
        return inventory.source("nvidia-smi-topo-m").reason()
    if not inventory.topology.nic_names:
        return "nvidia-smi topo -m printed no NIC legend, so its NIC columns cannot be named"
    return None


def _nic_levels(topology: Topology, gpu: Gpu, hcas: Mapping[str, Hca]) -> dict[str, str]:
    """Compute NIC name -> PCIe distance level from this GPU, nearest first, for the cells the matrix has."""
    levels: dict[str, str] = {}
    for label, name in topology.nic_names.items():
        level = topology.link(gpu.label, label)
        if name in hcas and level in RANK:
            levels[name] = level
    return dict(sorted(levels.items(), key=lambda item: (RANK[item[1]], natural_key(item[0]))))


def assign_rails(levels_by_gpu: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Give each GPU a NIC of its own, nearest first: GPU label -> NIC name.

    Stage by stage (PIX, then PXB, ... SYS) every GPU still without a rail looks for a NIC
    within that distance, by augmenting paths (Kuhn). A GPU that already has a rail may be
    moved to make room, but only to a NIC no farther than its own, so a well-placed GPU is
    never blamed for a neighbour's missing NIC. GPUs left over had no NIC to spare.
    """
    owner: dict[str, str] = {}        # NIC -> GPU
    rail: dict[str, str] = {}         # GPU -> NIC

    def augment(gpu: str, limit: int, seen: set[str]) -> bool:
        candidates = [nic for nic, level in levels_by_gpu[gpu].items() if RANK[level] <= limit]
        # A free NIC first (nearest first); only then move another GPU along.
        for nic in sorted(candidates, key=lambda nic: nic in owner):
            if nic in seen:
                continue
            seen.add(nic)
            holder = owner.get(nic)
            if holder is None or augment(holder, RANK[levels_by_gpu[holder][nic]], seen):
                owner[nic], rail[gpu] = gpu, nic
                return True
        return False

    for limit in range(len(LEVELS)):
        for gpu in levels_by_gpu:
            if gpu not in rail:
                augment(gpu, limit, set())
    return rail


def _placement_finding(ctx: CheckContext, gpu: Gpu, levels: Mapping[str, str], rails: Mapping[str, str] | None,
                       evidence: dict[str, Any], expected_rank: int) -> Finding:
    """Judge a GPU by the PCIe matrix: by its nearest NIC, or by its own rail where one rail per GPU is expected."""
    best = min(RANK[level] for level in levels.values())
    nearest = [name for name, level in levels.items() if RANK[level] == best]
    evidence.update(levels=dict(levels), nearest_nics=nearest, level=LEVELS[best])
    where = f"nearest compute NIC {', '.join(nearest)} ({LEVELS[best]})"
    taken_note = ""
    if rails is not None:
        rail_of = {nic: other for other, nic in rails.items()}
        if gpu.label not in rails:
            holders = sorted({rail_of[nic] for nic in nearest if nic in rail_of}, key=natural_key)
            evidence.update(rail_nic=None, shared_with=holders)
            nics = ", ".join(nearest)
            return ctx.graded(
                ctx.severity("shared_rail_severity"), gpu.label,
                f"{gpu.label} has no rail NIC of its own: its nearest "
                f"{'NICs ' + nics + ' are' if len(nearest) > 1 else 'NIC ' + nics + ' is'} already the rail of "
                f"{', '.join(holders)}", evidence=evidence, rule="one_rail_per_gpu",
                remedy="one NIC per GPU is expected on this platform: look for a missing, unbound or down NIC "
                       "on this GPU's PCIe switch"
                       + (f" (`lspci -tv` shows what sits beside {gpu.pci_address})" if gpu.pci_address else ""))
        rail = rails[gpu.label]
        rank = RANK[levels[rail]]
        evidence.update(rail_nic=rail, rail_level=levels[rail])
        where = f"rail NIC {rail} ({levels[rail]})"
        if rank > best:
            holders = sorted({rail_of[nic] for nic in nearest if nic in rail_of}, key=natural_key)
            taken_note = (f"; the nearer {', '.join(nearest)} ({LEVELS[best]}) "
                          f"{'are the rails' if len(nearest) > 1 else 'is the rail'} of {', '.join(holders)}")
    else:
        rank = best
    if rank == RANK["SYS"]:
        return ctx.graded(ctx.severity("cross_socket_severity"), gpu.label,
                          f"{where} is across the CPU socket{taken_note}", evidence=evidence,
                          remedy=_cross_socket_remedy(ctx.inventory, gpu), rule="cross_socket_severity")
    if rank > expected_rank:
        return ctx.graded(ctx.severity("above_expected_severity"), gpu.label,
                          f"{where}, expected {LEVELS[expected_rank]} or closer{taken_note}", evidence=evidence,
                          remedy=_cross_socket_remedy(ctx.inventory, gpu), rule="expected_level")
    numa_text = f", NUMA node {gpu.numa_node}" if gpu.numa_node is not None else ""
    return ctx.passed(gpu.label, f"{where}{numa_text}", evidence=evidence)


def _numa_finding(ctx: CheckContext, gpu: Gpu, hcas: Mapping[str, Hca], problem: str, node_wide: bool,
                  evidence: dict[str, Any]) -> Finding:
    """Judge a GPU without the PCIe matrix: NUMA ids still show a crossed socket."""
    expected_rank = _expected_rank(ctx)
    nic_numa = evidence["nic_numa_nodes"]
    same_numa = [name for name, numa in nic_numa.items() if gpu.numa_node is not None and numa == gpu.numa_node]
    evidence["topology"] = problem
    if gpu.numa_node is None or all(numa is None for numa in nic_numa.values()):
        return ctx.unknown(gpu.label, f"cannot place {gpu.label} against the NICs: {problem}; "
                           "NUMA node of the GPU or the NICs unknown", evidence=evidence)
    if same_numa:
        # NODE means "same NUMA node", so a shared NUMA node meets a pack that accepts NODE. A
        # pack expecting closer gets one node-wide `unknown` for the missing matrix instead.
        if expected_rank >= RANK["NODE"] or node_wide:
            return ctx.passed(gpu.label, f"NUMA node {gpu.numa_node} shared with {', '.join(same_numa)} "
                              f"(PCIe distance unknown: {problem})", evidence=evidence)
        return ctx.unknown(gpu.label, f"PCIe distance unknown ({problem}); NUMA node {gpu.numa_node} "
                           f"is shared with {', '.join(same_numa)}, but the pack expects {LEVELS[expected_rank]}",
                           evidence=evidence)
    if any(numa is None for numa in nic_numa.values()):
        return ctx.unknown(gpu.label, f"no compute NIC known on NUMA node {gpu.numa_node} of {gpu.label}, and the "
                           f"NUMA node of some NICs is unknown ({problem})", evidence=evidence)
    placed = ", ".join(f"{name} on node {numa}" for name, numa in nic_numa.items())
    return ctx.graded(ctx.severity("numa_mismatch_severity"), gpu.label,
                      f"no compute NIC on NUMA node {gpu.numa_node} of {gpu.label} ({placed})",
                      evidence=evidence, remedy=_cross_socket_remedy(ctx.inventory, gpu), rule="numa_mismatch_severity")


def _efa_tree_levels(inventory: Inventory, gpus: list[Gpu], hcas: Mapping[str, Hca]) -> dict[str, dict[str, str]] | None:
    """GPU label -> {EFA device: level} from the PCIe tree, nearest first; None where the node has
    no EFA compute device, or the tree puts no GPU and EFA device under one bridge below a root
    port (a VM that shows a flat bus: nothing to read placement from)."""
    efa = {name: hca for name, hca in hcas.items() if is_efa(hca) and hca.pci_address}
    if not efa:
        return None
    levels_by_gpu: dict[str, dict[str, str]] = {}
    for gpu in gpus:
        levels = {name: level for name, hca in efa.items() if gpu.pci_address
                  and (level := pcie_level(inventory, gpu.pci_address, hca.pci_address or "")) is not None}
        if levels:
            levels_by_gpu[gpu.label] = dict(sorted(levels.items(), key=lambda item: (RANK[item[1]], natural_key(item[0]))))
    below_root = any(RANK[level] <= RANK["PXB"] for levels in levels_by_gpu.values() for level in levels.values())
    return levels_by_gpu if below_root else None


def _too_few_near_nics(ctx: CheckContext, gpu: Gpu, levels: Mapping[str, str], evidence: dict[str, Any],
                       limit: int) -> Finding | None:
    """A platform with several NICs per GPU (`min_near_nics`: 4 EFA per H100 on p5) and a GPU that has
    fewer within `expected_level`: it lost bandwidth, and the finding names what it lost."""
    wanted = int(ctx.rule("min_near_nics"))
    if wanted <= 0 or not levels:
        return None
    inventory = ctx.inventory
    near = [name for name, level in levels.items() if RANK[level] <= limit]
    working = [name for name in near
               if (hca := inventory.hca(name)) is not None and any(port.is_active for port in hca.ports.values())]
    if len(working) >= wanted:
        evidence["near_nics"] = near
        return None
    down = [name for name in near if name not in working]
    lost = [address for address in unbound_efa_functions(inventory)
            if gpu.pci_address and (level := pcie_level(inventory, gpu.pci_address, address)) is not None
            and RANK[level] <= limit]
    evidence.update(near_nics=working, not_active=down, min_near_nics=wanted, levels=dict(levels), lost_functions=lost)
    parts = [f"{', '.join(down)} not ACTIVE"] if down else []
    if lost:
        parts.append(f"{', '.join(lost)} on its PCIe switch without an RDMA device")
    lost_text = "; lost: " + "; ".join(parts) if parts else "; the others are not on its PCIe switch or not on the PCI bus at all"
    return ctx.graded(ctx.severity("too_few_nics_severity"), gpu.label,
                      f"{gpu.label} has {len(working)} of {wanted} working compute NICs at {LEVELS[limit]} or closer "
                      f"({', '.join(working) or 'none'}){lost_text}", evidence=evidence, rule="min_near_nics",
                      remedy="a NIC next to this GPU is missing or unbound: "
                             + ("the driver in use: " + commands("`lspci -k -s {}`", lost) + "; " if lost else
                                f"`lspci -tv` shows what sits beside {gpu.pci_address or gpu.label}; ")
                             + "`dmesg | grep -i efa`; on a cloud instance stop and start it to move to healthy hardware")


@check(CHECK_ID, "each GPU has a compute NIC on its own PCIe switch / NUMA node; rails are not crossed or shared",
       needs=("gpus", "rdma", "placement"), order=80)
def gpu_nic_affinity(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    if not inventory.gpus or not inventory.hcas:
        yield ctx.skip("node", "needs both GPUs and RDMA NICs")
        return
    hcas = compute_hcas(ctx)
    if not hcas:
        yield ctx.skip("node", "no compute-role RDMA NICs (all are classed storage, management or unused)")
        return
    expected_rank = _expected_rank(ctx)
    basis = _placement_basis(ctx)
    if basis == "numa":
        # A NUMA node tells no distance closer than NODE: a pack's PIX/PXB cannot be judged here.
        expected_rank = max(expected_rank, RANK["NODE"])
    expected_level = LEVELS[expected_rank]
    one_rail = bool(ctx.rule("one_rail_per_gpu"))
    gpus = sorted(inventory.gpus, key=lambda gpu: gpu.index)
    tree_levels = _efa_tree_levels(inventory, gpus, hcas) if basis == "pcie" else _numa_levels(gpus, hcas)
    # nvidia-smi never shows EFA devices: the PCIe tree is where they are placed.
    problem = _topology_problem(inventory) if tree_levels is None else None
    if problem is not None and any(is_efa(hca) for hca in hcas.values()):
        problem = ("nvidia-smi never shows EFA devices, and the PCIe tree puts no GPU and EFA device under one "
                   "switch (a VM with a flat bus, or the tree not read)")
    if problem is not None:
        undecided: list[str] = []
        if RANK[expected_level] < RANK["NODE"]:
            undecided.append(f"whether each GPU has a compute NIC at {expected_level} or closer")
        if one_rail:
            undecided.append("whether each GPU has a rail NIC of its own")
        if undecided:
            # NUMA ids (judged per GPU below) only show a crossed socket; the rest needs the matrix.
            yield ctx.unknown("node", f"PCIe distances unknown ({problem}): cannot tell {' or '.join(undecided)}",
                              evidence={"topology": problem, "expected_level": expected_level})
    levels_by_gpu: dict[str, dict[str, str]] = {}
    topology = inventory.topology
    if tree_levels is not None:
        levels_by_gpu = tree_levels
    elif problem is None and topology is not None:
        for gpu in gpus:
            levels = _nic_levels(topology, gpu, hcas) if gpu.label in topology.gpus else {}
            if levels:
                levels_by_gpu[gpu.label] = levels
    rails = assign_rails(levels_by_gpu) if one_rail else None
    nic_numa = {name: hcas[name].numa_node for name in sorted(hcas, key=natural_key)}
    for gpu in gpus:
        evidence: dict[str, Any] = {"numa_node": gpu.numa_node, "nic_numa_nodes": dict(nic_numa),
                                    "expected_level": expected_level, "placement_by": basis}
        if gpu.memory_numa_node is not None:
            evidence["memory_numa_node"] = gpu.memory_numa_node
        too_few = _too_few_near_nics(ctx, gpu, levels_by_gpu.get(gpu.label, {}), evidence, expected_rank)
        if too_few is not None:
            yield too_few
        elif gpu.label in levels_by_gpu:
            yield _placement_finding(ctx, gpu, levels_by_gpu[gpu.label], rails, evidence, expected_rank)
        elif basis == "numa":
            yield _numa_finding(ctx, gpu, hcas, "placed by NUMA node (Grace: topo -m shows SYS to every NIC)",
                                True, evidence)
        elif problem is not None:
            yield _numa_finding(ctx, gpu, hcas, problem, True, evidence)
        elif topology is not None and gpu.label not in topology.gpus:
            yield _numa_finding(ctx, gpu, hcas, f"{gpu.label} is not in the nvidia-smi topo -m matrix", False,
                                evidence)
        else:
            yield _numa_finding(ctx, gpu, hcas, f"nvidia-smi topo -m has no PCIe distance from {gpu.label} "
                                "to any compute NIC", False, evidence)
