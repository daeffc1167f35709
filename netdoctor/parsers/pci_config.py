"""PCI configuration space (the bytes of sysfs `config`) -> what the GPUDirect path depends on.

Read from the capability lists (PCI Local Bus 3.0 section 6.7, PCIe Base 6.0 section 7.6):
the PCI Express capability (id 0x10) gives the port type; the extended capabilities, from
offset 0x100, give Access Control Services (id 0x000D: capability and control registers
at +4/+6) and Address Translation Services (id 0x000F: control at +6, bit 15 = enable).

Only root reads the whole space: an unprivileged read of sysfs `config` returns the first
64 bytes, so the capabilities read as not known (None), never as absent.
"""

from __future__ import annotations


from netdoctor.errors import ParseError
from netdoctor.records import record

PCIE_CAPABILITY_ID = 0x10
ACS_EXTENDED_ID = 0x000D
ATS_EXTENDED_ID = 0x000F
STANDARD_HEADER_BYTES = 64
EXTENDED_START = 0x100

# Device/Port Type of the PCI Express Capabilities register (bits 7:4).
PORT_TYPES = {
    0x0: "endpoint",
    0x1: "legacy_endpoint",
    0x4: "root_port",
    0x5: "upstream_port",
    0x6: "downstream_port",
    0x7: "pcie_to_pci_bridge",
    0x8: "pci_to_pcie_bridge",
    0x9: "rc_integrated_endpoint",
    0xA: "rc_event_collector",
}

# The ACS Control register's bits, in lspci's words (`ACSCtl: SrcValid+ TransBlk- ...`).
ACS_FLAG_NAMES = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")


@record(frozen=True)
class AcsControl:
    """The ACS Control register: which ACS features are on (bit order as ACS_FLAG_NAMES)."""

    bits: int

    def on(self, name: str) -> bool:
        return bool(self.bits >> ACS_FLAG_NAMES.index(name) & 1)

    @property
    def redirects(self) -> bool:
        """Peer-to-peer requests or completions are sent up to the root complex."""
        return self.on("ReqRedir") or self.on("CmpltRedir")

    def text(self) -> str:
        """lspci's form: `SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-`."""
        return " ".join(f"{name}{'+' if self.on(name) else '-'}" for name in ACS_FLAG_NAMES)

    @classmethod
    def from_flags(cls, flags: dict[str, bool]) -> AcsControl:
        return cls(sum(1 << index for index, name in enumerate(ACS_FLAG_NAMES) if flags.get(name)))


@record(frozen=True)
class PciCapabilities:
    """What one function's config space says. None: not known (the bytes were not there)."""

    port_type: str | None          # PORT_TYPES value; None without a PCIe capability or unreadable
    acs: AcsControl | None         # None: no ACS capability, or the extended space was not read
    has_acs: bool | None           # False: the whole space was read and has no ACS capability
    ats_enabled: bool | None       # None: no ATS capability, or not read
    extended_read: bool            # the extended space (>= 256 bytes) was read: as root


def _u16(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset:offset + 2], "little")


def _u32(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset:offset + 4], "little")


def parse_pci_config(data: bytes) -> PciCapabilities:
    """Parse one function's config space (64, 256 or 4096 bytes)."""
    if len(data) < STANDARD_HEADER_BYTES:
        raise ParseError("pci-config", f"config space of {len(data)} bytes: the standard header is 64")
    vendor = _u16(data, 0)
    if vendor in (0xFFFF, 0x0000):
        raise ParseError("pci-config", f"no function answers (vendor id 0x{vendor:04x})")
    port_type = _pcie_port_type(data)
    extended_read = len(data) >= EXTENDED_START + 4
    acs: AcsControl | None = None
    ats: bool | None = None
    if extended_read:
        for capability_id, offset in _extended_capabilities(data):
            if capability_id == ACS_EXTENDED_ID and offset + 8 <= len(data):
                acs = AcsControl(_u16(data, offset + 6) & 0x7F)
            elif capability_id == ATS_EXTENDED_ID and offset + 8 <= len(data):
                ats = bool(_u16(data, offset + 6) & 0x8000)
    return PciCapabilities(port_type=port_type, acs=acs, has_acs=(acs is not None) if extended_read else None,
                           ats_enabled=ats, extended_read=extended_read)


def _pcie_port_type(data: bytes) -> str | None:
    if not _u16(data, 0x06) & 0x10:          # Status: no capabilities list
        return None
    pointer = data[0x34] & 0xFC
    seen: set[int] = set()
    while pointer >= 0x40 and pointer not in seen and pointer + 4 <= len(data):
        seen.add(pointer)
        if data[pointer] == PCIE_CAPABILITY_ID:
            return PORT_TYPES.get((_u16(data, pointer + 2) >> 4) & 0xF, "other")
        pointer = data[pointer + 1] & 0xFC
    return None


def _extended_capabilities(data: bytes) -> list[tuple[int, int]]:
    """(id, offset) of each extended capability; a loop or a pointer out of range ends the list."""
    found: list[tuple[int, int]] = []
    offset = EXTENDED_START
    seen: set[int] = set()
    while offset >= EXTENDED_START and offset not in seen and offset + 4 <= len(data):
        seen.add(offset)
        header = _u32(data, offset)
        if header in (0, 0xFFFFFFFF):
            break
        found.append((header & 0xFFFF, offset))
        offset = (header >> 20) & 0xFFC
    return found
