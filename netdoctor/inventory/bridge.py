"""The ConnectX-7 "bridge" of an HGX B200/B300 baseboard: which RDMA devices are not rails.

NVIDIA Fabric Manager User Guide, "NVIDIA HGX B200/B300 GPU Baseboard": the NVSwitches of these
baseboards are not on the host's PCI bus; "the NVSwitches are connected to a CX7 Bridge device",
integrated into the baseboard, with "two physical ports. Each port exposes one physical function
(FC PF) and one Limited physical function (LPF) to the host system, which totals four PFs" (its
example: `05:00.0`..`05:00.3`, MT2910 [ConnectX-7]). The bridge and a ConnectX-7 NIC "share
identical hardware"; "the LPF VPD information includes a vendor-specific field called SMDL, with
a non-zero value defined as SW_MNG". Fabric Manager and the NVLink subnet manager (NVLSM) run
over the LPFs; none of the four carries a job's traffic.

So `Hca.switch_management` is, per RDMA device:

1. read: the PCI VPD of a ConnectX-7 physical function (root only) holds `SW_MNG` (an LPF), or
   not (False);
2. a sibling: a function of the same PCI device, or of the same system image GUID, as an LPF
   (its FC PF, whose VPD has no SMDL by the guide's words) is the bridge too;
3. inferred where no VPD was read (not root): on a node whose GPUs are B200/B300 SXM (the only
   boards with the bridge), exactly four InfiniBand ConnectX-7 physical functions sharing one
   system image GUID. That is the guide's "four PFs", and what a real HGX B300 shows without
   VPD: four MT4129 sharing System image GUID 0x7425540300353de9, Active at Rate 100, with the
   host's NVLSM as their SM, beside its ConnectX-8 rails (tests/data/corpus/ibstat/dell-b300-
   notes__*). A compute ConnectX-7 is one function per port with a GUID of its own (a dual-port
   card: two). An inference, not a reading: a node whose rails are wrongly taken for the bridge
   comes up short of compute NICs in `inventory`, never silently passes.

Where neither holds the value stays None: ports are classed as before.
"""

from __future__ import annotations

from collections import defaultdict

from netdoctor.errors import ParseError
from netdoctor.inventory.hardware import NVIDIA_GPU_MODELS
from netdoctor.inventory.model import Hca, Inventory, LinkLayer
from netdoctor.inventory.platform import NVSWITCH_BRIDGE_GPUS
from netdoctor.logging import get_logger
from netdoctor.parsers.pci_vpd import parse_pci_vpd

log = get_logger(__name__)

BRIDGE_CA_TYPE = "MT4129"            # ConnectX-7 (PCI device 0x1021)
BRIDGE_PCI_DEVICE = "0x1021"
BRIDGE_FUNCTIONS = 4                 # 2 ports x (FC PF + LPF)


def reads_vpd(hca: Hca) -> bool:
    """Whether the host reads this device's VPD: a ConnectX-7 physical function (the bridge's kind)."""
    return hca.physical_function is None and hca.pci_device == BRIDGE_PCI_DEVICE


def switch_management_of_vpd(data: bytes | None) -> bool | None:
    """The VPD's verdict: True (`SW_MNG` in a field), False (VPD read, no such field), None (not read
    or not VPD)."""
    if not data:
        return None
    try:
        return parse_pci_vpd(data).switch_management
    except ParseError as error:
        log.debug("pci vpd not parsed", error=str(error))
        return None


def _device(address: str | None) -> str | None:
    """`0000:05:00.2` -> `0000:05:00` (the PCI device whose functions the address names)."""
    return address.rpartition(".")[0] if address and "." in address else None


def _bridge_board(inventory: Inventory) -> bool:
    names = {gpu.name for gpu in inventory.gpus if gpu.name}
    names |= {NVIDIA_GPU_MODELS.get(device, "") for device in (inventory.pci_gpus or {}).values()}
    return any(name in NVSWITCH_BRIDGE_GPUS for name in names)


def _candidate(hca: Hca) -> bool:
    """A ConnectX-7 physical function whose ports are all InfiniBand."""
    return (hca.ca_type == BRIDGE_CA_TYPE and hca.physical_function is None and bool(hca.ports)
            and all(port.link_layer is LinkLayer.INFINIBAND for port in hca.ports.values()))


def mark_switch_management(inventory: Inventory) -> None:
    """Set Hca.switch_management from the VPD already read, its siblings, and the inference above."""
    hcas = [hca for hca in inventory.hcas if hca.physical_function is None]
    lpfs = [hca for hca in hcas if hca.switch_management]
    devices = {_device(hca.pci_address) for hca in lpfs} - {None}
    guids = {hca.sys_image_guid for hca in lpfs} - {None}
    for hca in hcas:
        if not hca.switch_management and (_device(hca.pci_address) in devices or hca.sys_image_guid in guids):
            hca.switch_management = True
    if not _bridge_board(inventory):
        return
    groups: dict[str, list[Hca]] = defaultdict(list)
    for hca in hcas:
        if hca.sys_image_guid:
            groups[hca.sys_image_guid].append(hca)
    for guid, members in groups.items():
        if (len(members) == BRIDGE_FUNCTIONS and all(_candidate(hca) for hca in members)
                and all(hca.switch_management is None for hca in members)):
            for hca in members:
                hca.switch_management = True
            log.debug("nvswitch bridge inferred", sys_image_guid=guid, hcas=[hca.name for hca in members])
