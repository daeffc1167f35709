"""Static hardware knowledge: PCI device ids and CA types to product names."""

from __future__ import annotations

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
    return HCA_MODELS.get(ca_type.strip().upper())


def ca_type_from_part_id(vendor_part_id: int | None) -> str | None:
    return f"MT{vendor_part_id}" if vendor_part_id else None
