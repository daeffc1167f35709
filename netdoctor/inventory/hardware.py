"""Static hardware knowledge: PCI device ids and CA types to product names."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the model imports nothing of this module; only the type is named here
    from netdoctor.inventory.model import Hca

# Mellanox/NVIDIA CA types as `ibstat` and sysfs `hca_type` print them (MT + PCI device id
# in decimal, which is also ibv_devinfo's `vendor_part_id`).
HCA_MODELS: dict[str, str] = {
    "MT4099": "ConnectX-3",
    "MT4103": "ConnectX-3 Pro",
    "MT4113": "Connect-IB",
    "MT4115": "ConnectX-4",
    "MT4116": "ConnectX-4 VF",
    "MT4117": "ConnectX-4 Lx",
    "MT4118": "ConnectX-4 Lx VF",
    "MT4119": "ConnectX-5",
    "MT4120": "ConnectX-5 VF",
    "MT4121": "ConnectX-5 Ex",
    "MT4122": "ConnectX-5 Ex VF",
    "MT4123": "ConnectX-6",
    "MT4124": "ConnectX-6 VF",
    "MT4125": "ConnectX-6 Dx",
    "MT4126": "ConnectX VF",
    "MT4127": "ConnectX-6 Lx",
    "MT4129": "ConnectX-7",
    "MT4131": "ConnectX-8",
    "MT41682": "BlueField",
    "MT41686": "BlueField-2",
    "MT41692": "BlueField-3",
}


def hca_model(ca_type: str | None) -> str | None:
    if not ca_type:
        return None
    return HCA_MODELS.get(ca_type.strip().upper()) or EFA_MODELS.get(ca_type.strip().lower())


def ca_type_from_part_id(vendor_part_id: int | None) -> str | None:
    """`MT4129` from ibv_devinfo's vendor_part_id (Mellanox numbers it in decimal); EFA's is its
    PCI device id (61345 = 0xefa1), named `efa1` like its generation."""
    if not vendor_part_id:
        return None
    return efa_generation(f"0x{vendor_part_id:x}") or f"MT{vendor_part_id}"


# Drivers of netdevs that carry a GPU fabric without RDMA: GCP's gVNIC (GPUDirect-TCPX/TCPXO).
FABRIC_NETDEV_DRIVERS = ("gve",)

# AWS Elastic Fabric Adapter: Amazon's PCI vendor id (ENA shares it; only EFA has an RDMA
# device), and the EFA generations by PCI device id (amzn-drivers efa_main.c efa_pci_tbl).
AMAZON_VENDOR = "0x1d0f"
EFA_MODELS: dict[str, str] = {
    "efa0": "EFA (gen 1)",
    "efa1": "EFA (gen 2)",
    "efa2": "EFA (gen 3)",
    "efa3": "EFA (gen 4)",
}


def efa_generation(pci_device: str | None) -> str | None:
    """`0xefa1` -> `efa1`; None for anything that is not an EFA device id."""
    name = (pci_device or "").strip().lower().removeprefix("0x")
    return name if name in EFA_MODELS else None


def is_efa_function(vendor: str | None, device: str | None) -> bool:
    """An EFA PCI function (bound to its driver or not)."""
    return (vendor or "").strip().lower() == AMAZON_VENDOR and efa_generation(device) is not None


def is_efa(hca: "Hca") -> bool:
    """An EFA RDMA device: its driver says so, or its PCI ids do (a snapshot without the driver link)."""
    return hca.driver == "efa" or is_efa_function(hca.pci_vendor, hca.pci_device) or (hca.ca_type or "") in EFA_MODELS


NVIDIA_VENDOR = "0x10de"

# NVIDIA data-center GPUs by PCI device id, named as NVML names them, so that a node whose
# driver is broken (NVML down) still gets its rule pack and its GPUs counted. Blackwell (pci.ids,
# pciutils/pciids @c1c12547: 2901 "GB100 [B200]", 2941 "GB100 [HGX GB200]", 3182 "GB110 [B300 SXM6
# AC]", 31c2/31c3 "GB110 [GB300]"): the NVML names of 2901, 2941 and 31c2 are paired with their ids in
# real `nvidia-smi -q -x` (tests/data/corpus/nvidia-smi-q-x/NVIDIA-k8s-test-infra__qx-*.xml); 3182's
# name is the one real `nvidia-smi` prints on an HGX B300 (tests/data/corpus/nvidia-smi-nvlink/
# dell-xe9780-*), and 31c3 is named as pci.ids names it (no capture pairs it with NVML).
NVIDIA_GPU_MODELS: dict[str, str] = {
    "0x20b0": "NVIDIA A100-SXM4-40GB",
    "0x20b2": "NVIDIA A100-SXM4-80GB",
    "0x20b5": "NVIDIA A100 80GB PCIe",
    "0x20f1": "NVIDIA A100-PCIE-40GB",
    "0x2321": "NVIDIA H100 NVL",
    "0x2330": "NVIDIA H100 80GB HBM3",
    "0x2331": "NVIDIA H100 PCIe",
    "0x2335": "NVIDIA H200",
    "0x233b": "NVIDIA H200 NVL",
    "0x2901": "NVIDIA B200",
    "0x2941": "NVIDIA GB200",
    "0x3182": "NVIDIA B300 SXM6 AC",
    "0x31c2": "NVIDIA GB300",
    "0x31c3": "NVIDIA GB300",
    "0x26b5": "NVIDIA L40",
    "0x26b9": "NVIDIA L40S",
    "0x27b8": "NVIDIA L4",
}


# Mellanox (NVIDIA networking) PCI vendor id: ConnectX and BlueField functions. Their CA type
# is `MT` + the PCI device id in decimal (0x1021 -> MT4129, ConnectX-7).
MELLANOX_VENDOR = "0x15b3"


def ca_type_of_device(device_id: str | None) -> str | None:
    """`MT4129` for PCI device `0x1021`; None for anything that is not a hex device id."""
    try:
        return f"MT{int((device_id or '').strip(), 16)}"
    except ValueError:
        return None


def is_nvidia_gpu_function(vendor: str | None, pci_class: str | None) -> bool:
    """An NVIDIA VGA (0x0300) or 3D controller (0x0302) function; NVSwitches are bridges (0x0680)."""
    return (vendor or "").strip().lower() == NVIDIA_VENDOR and (pci_class or "").strip().lower()[:6] in ("0x0300", "0x0302")


def is_nvswitch_function(vendor: str | None, pci_class: str | None) -> bool:
    """An NVSwitch: NVIDIA's PCI class 0x0680 "Bridge: Other" function (device 22a3 on HGX/DGX
    H100, four of them at 05:00.0-08:00.0 on a DGX H100, `lspci | grep NVIDIA`)."""
    return (vendor or "").strip().lower() == NVIDIA_VENDOR and (pci_class or "").strip().lower().startswith("0x0680")


# DMI system vendor/product strings of hypervisors (`/sys/class/dmi/id/sys_vendor`,
# `product_name`), lower case: in a guest the ACS a GPUDirect path depends on is the host's.
HYPERVISOR_DMI = ("qemu", "kvm", "vmware", "virtualbox", "innotek", "xen", "bochs", "parallels",
                  "amazon ec2", "google compute engine", "openstack", "virtual machine", "cloud hypervisor",
                  "firecracker")


def hypervisor_in_dmi(*texts: str | None) -> str | None:
    """The DMI text that names a hypervisor, or None."""
    for text in texts:
        if text and any(word in text.lower() for word in HYPERVISOR_DMI):
            return text.strip()
    return None
