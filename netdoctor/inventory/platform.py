"""Which platform a node is: a small catalog of DMI names and GPU SKUs.

A platform is known from what the node *is*, never from how many devices happen to be
present (a DGX H100 that lost a GPU is still a DGX H100):

1. DMI: NVIDIA's DGX systems name themselves (`sys_vendor` NVIDIA, `product_name` `DGXH100`,
   `DGXA100 920-23687-2530-000`, ...); the big OEMs' HGX 8-GPU servers are named by model
   (`PowerEdge XE9680`, `SYS-821GE-TNHR`, ...), and since one OEM model takes several GPU
   generations (an XE9680 holds H100, H200 or A100 boards, or AMD GPUs), the generation comes
   from the NVIDIA SXM GPUs on the PCI bus — no NVIDIA SXM GPU there, no platform;
2. the PCI bus: SXM GPUs (full NVML name, or PCI device id where NVML is down) *and* NVSwitches
   on the bus are an HGX 8-GPU baseboard of that generation (4-GPU boards have no NVSwitch);
   Blackwell's need no NVSwitch on the bus, which they never show (below);
3. otherwise the platform is unknown, and only the pack's `[inventory]` pins say what to expect.

Blackwell: "In the NVIDIA HGX B300/B200/B100 baseboard PCIe topology, NVSwitches are not recognized
as PCIe devices on the host system. To manage NVLinks, the NVSwitches are connected to a CX7 Bridge
device" (NVIDIA Fabric Manager User Guide, "NVIDIA HGX B200/B300 GPU Baseboard"), and the B200 and
B300 SXM GPUs come only on those 8-GPU baseboards: the GPU alone names HGX_B200_8GPU/HGX_B300_8GPU
(a DGX B300 too, whose DMI name has not been seen). A Grace Blackwell GPU (`NVIDIA GB200`,
`NVIDIA GB300`: 4 per NVL72 compute tray, DGX GB200 User Guide "Hardware") names its compute tray,
whose NVSwitches sit in the rack's switch trays, never on the tray's bus.

What a platform must have (GPUs, NVSwitches, compute NICs) is in the rule packs
(`[inventory.platforms.ID]` of rules/default.toml), not here: this module only names platforms.
H100 NVL, H100 PCIe, H200 NVL and other PCIe GPUs are never HGX, whatever sits beside them.
"""

from __future__ import annotations

import re

from netdoctor.inventory.hardware import NVIDIA_GPU_MODELS
from netdoctor.inventory.model import Inventory
from netdoctor.records import record

# NVML's names of SXM GPUs -> the HGX 8-GPU baseboard platform they make with NVSwitches.
# (NVML names: "NVIDIA H100 80GB HBM3" is the H100 SXM5; "NVIDIA H200" the H200 SXM; "NVIDIA H100
# NVL", "NVIDIA H100 PCIe" and "NVIDIA H200 NVL" are PCIe cards, never HGX.)
HGX_OF_SXM: dict[str, str] = {
    "NVIDIA A100-SXM4-40GB": "HGX_A100_8GPU",
    "NVIDIA A100-SXM4-80GB": "HGX_A100_8GPU",
    "NVIDIA H100 80GB HBM3": "HGX_H100_8GPU",
    "NVIDIA H800": "HGX_H100_8GPU",
    "NVIDIA H20": "HGX_H100_8GPU",
    "NVIDIA H200": "HGX_H200_8GPU",
    "NVIDIA B200": "HGX_B200_8GPU",
    "NVIDIA B300 SXM6 AC": "HGX_B300_8GPU",
}
# Baseboards whose NVSwitches are behind the ConnectX-7 bridge, never on the host's PCI bus.
NVSWITCHES_OFF_BUS = ("HGX_B200_8GPU", "HGX_B300_8GPU")
# Their GPUs (NVML names): they come only on those baseboards, so they name a node with the bridge.
NVSWITCH_BRIDGE_GPUS = tuple(name for name, board in HGX_OF_SXM.items() if board in NVSWITCHES_OFF_BUS)
# Grace Blackwell GPUs (NVML names) -> the NVL72 compute tray they make (4 GPUs, 2 Grace CPUs).
TRAY_OF_GPU: dict[str, str] = {
    "NVIDIA GB200": "GB200_NVL72",
    "NVIDIA GB300": "GB300_NVL72",
}

# NVIDIA DGX systems: normalized DMI product_name prefix -> (platform id, its GPUs' NVML names).
DGX_PRODUCTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("DGXH100", "DGXH100", ("NVIDIA H100 80GB HBM3",)),
    ("DGXH200", "DGXH200", ("NVIDIA H200",)),
    ("DGXB200", "DGXB200", ("NVIDIA B200",)),
    ("DGXA100", "DGXA100", ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB")),
)
# OEM servers built on an HGX 8-GPU baseboard: normalized DMI product_name (or board_name)
# prefixes (vendors' model names, e.g. Supermicro `SYS-821GE-TNHR`, Dell `PowerEdge XE9680`).
HGX_8GPU_PRODUCTS: tuple[str, ...] = (
    "POWEREDGEXE9680",            # Dell: HGX H100/H200/A100 8-GPU
    "POWEREDGEXE9685",            # Dell (AMD host): HGX H200/B200 8-GPU
    "SYS821GETNHR",               # Supermicro 8U: HGX H100/H200 8-GPU
    "AS8125GSTNHR",               # Supermicro 8U (AMD host): HGX H100/H200 8-GPU
    "SYS420GPTNAR",               # Supermicro 4U: HGX A100 8-GPU
    "AS4124GONART",               # Supermicro 4U (AMD host): HGX A100 8-GPU
    "SYSA21GENBRT",               # Supermicro 10U: HGX B200 8-GPU
    "HPECRAYXD670",               # HPE Cray XD670: HGX H100/H200 8-GPU
    "G593",                       # Gigabyte G593 series: HGX H100/H200/B200 8-GPU
)
# Findings name a DGX as its firmware does (`DGXH100`); an HGX platform by its baseboard.
PLATFORM_NAMES = {
    "HGX_A100_8GPU": "HGX A100 8-GPU", "HGX_H100_8GPU": "HGX H100 8-GPU", "HGX_H200_8GPU": "HGX H200 8-GPU",
    "HGX_B200_8GPU": "HGX B200 8-GPU", "HGX_B300_8GPU": "HGX B300 8-GPU",
    "GB200_NVL72": "GB200 NVL72 compute tray", "GB300_NVL72": "GB300 NVL72 compute tray",
}


@record(frozen=True)
class NodePlatform:
    id: str                        # the key of `[inventory.platforms]` in the rule packs
    basis: str                     # how it is known, for findings: "DMI product_name 'DGXH100'"
    gpu_names: tuple[str, ...]     # the NVML names of the platform's GPUs

    @property
    def name(self) -> str:
        return PLATFORM_NAMES.get(self.id, self.id)


def normalized(text: str | None) -> str:
    """`PowerEdge XE9680` -> `POWEREDGEXE9680`: case, spaces, `-`, `_` and `.` do not tell models apart."""
    return re.sub(r"[\s\-_.]", "", text or "").upper()


def gpu_names(inventory: Inventory) -> list[str]:
    """Every GPU name the node shows: NVML's, and the PCI bus's by device id (NVML down or hiding GPUs)."""
    names = [gpu.name for gpu in inventory.gpus if gpu.name]
    names += [NVIDIA_GPU_MODELS[device] for device in (inventory.pci_gpus or {}).values() if device in NVIDIA_GPU_MODELS]
    return names


def _hgx_of_gpus(inventory: Inventory) -> tuple[str, str] | None:
    """(HGX platform, SXM GPU name) when the node's GPUs are of one HGX generation."""
    platforms = {HGX_OF_SXM[name]: name for name in gpu_names(inventory) if name in HGX_OF_SXM}
    if len(platforms) != 1:
        return None
    return next(iter(platforms.items()))


def _tray_of_gpus(inventory: Inventory) -> NodePlatform | None:
    """A Grace Blackwell NVL72 compute tray, by its GPUs (NVML names or PCI device ids)."""
    trays = {TRAY_OF_GPU[name]: name for name in gpu_names(inventory) if name in TRAY_OF_GPU}
    if len(trays) != 1:
        return None
    platform, name = next(iter(trays.items()))
    return NodePlatform(platform, f"{name} GPUs (an NVL72 compute tray: its NVSwitches are in the rack's switch "
                                  "trays)", (name,))


def node_platform(inventory: Inventory) -> NodePlatform | None:
    """The node's platform by DMI, else by SXM GPUs with NVSwitches on the bus (Blackwell: the GPUs
    alone), else a Grace Blackwell tray by its GPUs; None: unknown."""
    dmi = inventory.dmi
    product = normalized(dmi.product_name if dmi else None)
    board = normalized(dmi.board_name if dmi else None)
    for prefix, platform, names in DGX_PRODUCTS:
        if product.startswith(prefix):
            return NodePlatform(platform, f"DMI product_name {dmi.product_name!r}" if dmi else "", names)
    hgx = _hgx_of_gpus(inventory)
    if hgx is None:
        return _tray_of_gpus(inventory)
    platform, name = hgx
    for prefix in HGX_8GPU_PRODUCTS:
        for field, value in (("product_name", product), ("board_name", board)):
            if value.startswith(prefix) and dmi is not None:
                raw = getattr(dmi, field)
                return NodePlatform(platform, f"DMI {field} {raw!r} (an HGX 8-GPU server) with {name} GPUs", (name,))
    if platform in NVSWITCHES_OFF_BUS:
        return NodePlatform(platform, f"{name} GPUs (only on an HGX 8-GPU baseboard, whose NVSwitches are "
                                      "managed through its ConnectX-7 bridge, not on the PCI bus)", (name,))
    switches = len(inventory.nvswitches or ())
    if switches:
        return NodePlatform(platform, f"{name} GPUs and {switches} NVSwitch{'es' if switches != 1 else ''} on the "
                                      "PCI bus (an HGX 8-GPU baseboard)", (name,))
    return None
