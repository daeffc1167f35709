"""`pcie-p2p-path`: does peer-to-peer traffic between a GPU and its NIC (or a GPU without
NVLink to its peer) really go across the PCIe switch they share?

Two devices under one switch talk through it: up each one's path to the first bridge they
share, and down again. Access Control Services redirection (`ReqRedir+`/`CmpltRedir+`) on
a switch port below that point sends every such request up to the root complex instead:
GPUDirect RDMA still works, at a fraction of its bandwidth, or hangs. Linux turns ACS on
for every capable port when an IOMMU is active, so a BIOS or kernel update can bring it
back silently. Where two paths meet only at the root complex (another switch, another
socket), the traffic crosses it anyway and ACS on root ports is normal; ACS on a port no
such path crosses is no fault. In a virtual machine the ACS that counts is the host's (and
must stay on for isolation); there Address Translation Services on the GPU and NIC let
translated requests go direct, so ATS is judged instead. On bare metal an IOMMU that
translates the GPUs' and NICs' DMA (group type `DMA`/`DMA-FQ`, not `identity`) costs
GPUDirect bandwidth and is warned about.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.inventory.model import Inventory, PciPathFunction
from netdoctor.inventory.queries import path_from_root, pci_endpoints
from netdoctor_plugins.remedy_words import commands

CHECK_ID = "pcie-p2p-path"
TRANSLATED_IOMMU = ("DMA", "DMA-FQ")
REMEDY_ACS = ("clear it now with `setpci -s {bridge} ECAP_ACS+0x6.w=0000` (as root; lost at reboot); for good, "
              "disable ACS / \"PCIe ACS control\" (or IO virtualization, where it only serves VMs) in the BIOS, or run "
              "that setpci for every switch port at boot before jobs start. Keep ACS on hosts that pass GPUs to VMs")
REMEDY_IOMMU = ("boot bare-metal GPU nodes with the IOMMU in pass-through: `iommu=pt` (Intel: `intel_iommu=on "
                "iommu=pt`, AMD: `amd_iommu=on iommu=pt`) on the kernel command line, or disable it in the BIOS")
REMEDY_ATS_GPU = ("on the GPU as the hypervisor documents it, with ACS Direct Translated P2P on the host's switch "
                  "ports")


@check(CHECK_ID, "PCIe paths between GPUs and NICs (and GPUs without NVLink): no ACS redirection below the switch "
       "they share (bare metal), ATS in a VM, the IOMMU not translating GPUDirect DMA", needs=("pcie-tree",), order=76)
def pcie_p2p_path(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    tree = inventory.pci_tree or {}
    endpoints = pci_endpoints(inventory)
    pairs = _pairs(inventory, endpoints)
    virtual = inventory.virtualization not in (None, "none")
    if not pairs:
        gpus = sum(kind == "gpu" for _, kind in endpoints.values())
        if not endpoints:
            why = "the PCIe tree holds none of the GPUs or NICs"
        elif not gpus:
            why = "no GPUs: no GPUDirect peer-to-peer path"
        elif gpus == 1:
            why = "one GPU and no RDMA NIC"
        else:
            why = "no RDMA NIC, and the GPUs talk to each other over NVLink"
        yield ctx.skip("node", f"no peer-to-peer PCIe path to judge: {why}")
        return
    if virtual:
        yield from _judge_ats(ctx, endpoints, pairs)
        return
    yield from _judge_acs(ctx, tree, endpoints, pairs)
    if any(kind == "gpu" for _, kind in endpoints.values()) and any(kind == "nic" for _, kind in endpoints.values()):
        yield _judge_iommu(ctx, tree, endpoints)


def _pairs(inventory: Inventory, endpoints: dict[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """GPU<->NIC pairs, and GPU<->GPU pairs where the GPUs have no NVLink (their P2P is PCIe)."""
    without_nvlink = {gpu.pci_address for gpu in inventory.gpus if not gpu.nvlink_active and not
                      any(link.active for link in gpu.nvlinks)}
    gpus = [address for address, (_, kind) in endpoints.items() if kind == "gpu"]
    nics = [address for address, (_, kind) in endpoints.items() if kind == "nic"]
    pairs = [(gpu, nic) for gpu in gpus for nic in nics]
    pairs += [(a, b) for a, b in combinations(gpus, 2) if a in without_nvlink and b in without_nvlink]
    return pairs


def _judge_acs(ctx: CheckContext, tree: dict[str, PciPathFunction], endpoints: dict[str, tuple[str, str]],
               pairs: list[tuple[str, str]]) -> Iterator[Finding]:
    redirecting: dict[str, list[str]] = {}
    unread: dict[str, list[str]] = {}
    meet_in_switch = 0
    for a, b in pairs:
        path_a, path_b = path_from_root(tree, a), path_from_root(tree, b)
        shared = 0
        while shared < min(len(path_a), len(path_b)) - 1 and path_a[shared] == path_b[shared]:
            shared += 1
        if shared == 0:
            continue                      # they meet only at the root complex: P2P crosses it anyway
        meet_in_switch += 1
        pair = f"{endpoints[a][0]} <-> {endpoints[b][0]}"
        for bridge in path_a[shared:-1] + path_b[shared:-1]:
            function = tree[bridge]
            if function.acs is not None:
                if function.acs.redirects:
                    redirecting.setdefault(bridge, []).append(pair)
            elif function.has_acs is None:
                unread.setdefault(bridge, []).append(pair)
    for bridge, crossing in redirecting.items():
        function = tree[bridge]
        assert function.acs is not None
        kind = (function.port_type or "bridge").replace("_", " ")
        yield ctx.finding(
            ctx.severity("acs_redirect_severity"), bridge,
            f"ACS redirects peer-to-peer traffic at PCIe {kind} {bridge} ({_on_flags(function)}): "
            f"{_listed(crossing)} goes up to the root complex instead of across the switch",
            evidence={"bridge": bridge, "port_type": function.port_type, "acs_control": function.acs.text(),
                      "paths": crossing, "read_from": function.capabilities_from},
            remedy=REMEDY_ACS.format(bridge=bridge), rule="acs_redirect_severity")
    if unread:
        yield ctx.unknown("acs", f"the ACS state of {len(unread)} switch port(s) on peer-to-peer paths was not read "
                          f"({', '.join(sorted(unread))}): their config space is readable only by root, and no "
                          "`lspci -vvv` run as root was recorded",
                          evidence={"ports": {bridge: crossing for bridge, crossing in sorted(unread.items())}},
                          remedy="run netdoctor as root (the SLURM prolog does), or capture as root")
    if not redirecting and not unread:
        across_root = len(pairs) - meet_in_switch
        if meet_in_switch:
            text = (f"{meet_in_switch} peer-to-peer path(s) meet inside a PCIe switch with no ACS redirection below "
                    "that point")
        else:
            text = "no GPU shares a PCIe switch with its peers: P2P crosses the root complex (ACS there is normal)"
        yield ctx.passed("acs", text + (f"; {across_root} path(s) meet only at the root complex" if meet_in_switch
                                        and across_root else ""),
                         evidence={"paths_in_switch": meet_in_switch, "paths_via_root_complex": across_root})


def _judge_iommu(ctx: CheckContext, tree: dict[str, PciPathFunction], endpoints: dict[str, tuple[str, str]]) -> Finding:
    kernel_cmdline = ctx.inventory.kernel_cmdline
    types = {label: tree[address].iommu_type for address, (label, _) in endpoints.items()}
    groups = {label: tree[address].iommu_group for address, (label, _) in endpoints.items()}
    evidence = {"iommu_group_types": types, "kernel_cmdline": kernel_cmdline}
    if not any(groups.values()):
        return ctx.passed("iommu", "IOMMU off for the GPUs and NICs (no IOMMU groups)", evidence=evidence)
    translated = [label for label, kind in types.items() if kind in TRANSLATED_IOMMU]
    if translated:
        kinds = sorted({kind for kind in types.values() if kind in TRANSLATED_IOMMU})
        return ctx.finding(ctx.severity("iommu_translated_severity"), "iommu",
                           f"the IOMMU translates DMA ({'/'.join(kinds)}) for {_counted(translated, endpoints)} on "
                           "this bare-metal node: GPUDirect transfers pay for IOMMU translation", evidence=evidence,
                           remedy=REMEDY_IOMMU, rule="iommu_translated_severity")
    unknown = [label for label, kind in types.items() if kind is None and groups[label]]
    if unknown:
        return ctx.unknown("iommu", f"the IOMMU group type of {_listed(unknown)} is not known", evidence=evidence)
    return ctx.passed("iommu", f"IOMMU in pass-through ({', '.join(sorted(set(filter(None, types.values()))))}) for "
                      "the GPUs and NICs", evidence=evidence)


def _judge_ats(ctx: CheckContext, endpoints: dict[str, tuple[str, str]], pairs: list[tuple[str, str]]) -> Iterator[Finding]:
    tree = ctx.inventory.pci_tree or {}
    involved = sorted({address for pair in pairs for address in pair}, key=list(endpoints).index)
    ats = {endpoints[address][0]: tree[address].ats_enabled for address in involved}
    evidence = {"virtualization": ctx.inventory.virtualization, "ats_enabled": ats}
    off = [label for label, enabled in ats.items() if enabled is False]
    where = f"virtual machine ({ctx.inventory.virtualization}): ACS is the host's to set"
    if off:
        nics = [address for address in involved if endpoints[address][1] == "nic" and tree[address].ats_enabled is False]
        on_nics = (f"enable ATS on the NICs ({commands('`mlxconfig -d {} set ATS_ENABLED=true`', nics)}, then "
                   "reboot the host) and " if nics else "enable ATS ")
        yield ctx.finding(ctx.severity("vm_ats_disabled_severity"), "ats",
                          f"{where}, and ATS is off on {_listed(off)}: peer-to-peer requests cannot take the "
                          "direct translated route and go up to the host's root complex", evidence=evidence,
                          remedy=on_nics + REMEDY_ATS_GPU, rule="vm_ats_disabled_severity")
    elif any(enabled is None for enabled in ats.values()):
        unseen = [label for label, enabled in ats.items() if enabled is None]
        yield ctx.unknown("ats", f"{where}; no ATS capability is visible on {_listed(unseen)} (the hypervisor hides "
                          "it, or the config space was not read as root)", evidence=evidence)
    else:
        yield ctx.passed("ats", f"{where}; ATS is on for every GPU and NIC on a peer-to-peer path", evidence=evidence)


def _on_flags(function: PciPathFunction) -> str:
    assert function.acs is not None
    return " ".join(flag for flag in function.acs.text().split() if flag.endswith("+"))


def _counted(labels: list[str], endpoints: dict[str, tuple[str, str]]) -> str:
    """`8 GPUs and 10 NICs`, or the labels themselves when few."""
    if len(labels) <= 4:
        return _listed(labels)
    kinds = {label: kind for label, kind in endpoints.values()}
    gpus = sum(kinds.get(label) == "gpu" for label in labels)
    nics = len(labels) - gpus
    return " and ".join(part for part in (f"{gpus} GPU{'s' * (gpus != 1)}" if gpus else "",
                                         f"{nics} NIC{'s' * (nics != 1)}" if nics else "") if part)


def _listed(labels: list[str], limit: int = 6) -> str:
    shown = ", ".join(labels[:limit])
    return shown + (f" and {len(labels) - limit} more" if len(labels) > limit else "")
