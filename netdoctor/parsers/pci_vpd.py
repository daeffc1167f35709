"""PCI Vital Product Data (the bytes of sysfs `vpd`) -> its identifier string and keyword fields.

The format (PCI Local Bus Specification 3.0, section 6.4 and appendix I, "Vital Product Data"):
a list of resource data tags. A *large* resource starts with a byte whose bit 7 is set (bits
6:0 name it) and a 16-bit little-endian length: 0x82 the Identifier String (the product name),
0x90 VPD-R (read-only fields), 0x91 VPD-W (read/write fields). A *small* resource is one byte
(bit 7 clear, bits 6:3 name, bits 2:0 length); name 0xF is the End Tag (0x78, 0x79 with one
byte). VPD-R and VPD-W hold keyword fields: two ASCII characters, a length byte, the data.
`RV` carries the checksum (its first byte makes the bytes from the start of VPD through it sum
to 0); `RW` is the unused read/write space. `V0`..`VZ` and `Y0`..`YZ` are vendor specific.

NVIDIA's HGX B200/B300 baseboards carry a ConnectX-7 "bridge" to their NVSwitches whose
Limited PFs say so in their VPD: "the LPF VPD information includes a vendor-specific field
called SMDL, with a non-zero value defined as SW_MNG" (NVIDIA Fabric Manager User Guide,
"NVIDIA HGX B200/B300 GPU Baseboard"). Where in the vendor fields that token sits is not
documented; `switch_management` looks for the token `SW_MNG` in every keyword value, as the
fabric-manager start scripts' replicas do (they search the file for the bytes `SW_MNG`).

The kernel's `vpd` file is root-only (the same guide asks for read permission on
`/sys/class/infiniband/mlx5_X/device/vpd` to run FM as another user).
"""

from __future__ import annotations

import re
from dataclasses import field

from netdoctor.errors import ParseError
from netdoctor.records import record

SOURCE = "pci vpd"
IDENTIFIER_TAG = 0x82
VPD_R_TAG = 0x90
VPD_W_TAG = 0x91
END_NAME = 0xF
MAX_VPD_BYTES = 32768          # VPD addresses are 15 bits (PCI 3.0 section 6.4)
SWITCH_MANAGEMENT_TOKEN = "SW_MNG"
_TOKEN = re.compile(rf"(?<![A-Za-z0-9_]){SWITCH_MANAGEMENT_TOKEN}(?![A-Za-z0-9_])")


@record(frozen=True)
class PciVpd:
    """A function's VPD: its product name and keyword fields (`RV`/`RW` left out)."""

    identifier: str | None
    read_only: dict[str, bytes] = field(default_factory=dict)
    writable: dict[str, bytes] = field(default_factory=dict)
    checksum_ok: bool | None = None       # None: no RV field

    def text(self, keyword: str) -> str | None:
        """A field's value as text (ASCII, NULs and trailing blanks dropped); None if absent."""
        value = self.read_only.get(keyword, self.writable.get(keyword))
        return _text(value) if value is not None else None

    @property
    def switch_management(self) -> bool:
        """Some keyword field holds the token `SW_MNG` (`SMDL=SW_MNG`): a function through which
        NVSwitches are managed (the NVLink subnet manager's and Fabric Manager's port)."""
        return any(_TOKEN.search(_text(value)) for value in (*self.read_only.values(), *self.writable.values()))

    def describe(self) -> str:
        fields = [f"{key}={_text(value)!r}" for key, value in {**self.read_only, **self.writable}.items()]
        return f"{self.identifier or 'no identifier'}: {', '.join(fields) or 'no fields'}"


def _text(value: bytes) -> str:
    return value.decode("ascii", errors="replace").replace("\x00", "").rstrip()


def _keywords(data: bytes, start: int, end: int, whole: bytes) -> tuple[dict[str, bytes], bool | None]:
    """The keyword fields of one VPD-R/VPD-W resource, and whether its RV checksum holds."""
    fields: dict[str, bytes] = {}
    checksum: bool | None = None
    offset = start
    while offset < end:
        if end - offset < 3:
            raise ParseError(SOURCE, f"keyword field header cut short at byte {offset}")
        keyword = data[offset:offset + 2]
        length = data[offset + 2]
        if offset + 3 + length > end:
            raise ParseError(SOURCE, f"keyword field {keyword!r} at byte {offset} runs past its resource")
        if not all(0x20 < char < 0x7F for char in keyword):
            raise ParseError(SOURCE, f"keyword at byte {offset} is not two ASCII characters: {keyword!r}")
        name = keyword.decode("ascii")
        value = data[offset + 3:offset + 3 + length]
        if name == "RV":
            # The checksum byte makes every byte from VPD's start through it sum to 0 (mod 256).
            checksum = length >= 1 and sum(whole[:offset + 4]) % 256 == 0
        elif name != "RW":
            fields[name] = value
        offset += 3 + length
    return fields, checksum


def parse_pci_vpd(data: bytes) -> PciVpd:
    """Parse the bytes of `/sys/bus/pci/devices/ADDR/vpd` up to its End Tag.

    Raises ParseError where the bytes are not VPD (a function without VPD reads as 0xff or
    0x00 bytes), a resource runs past the data, or no End Tag ends it.
    """
    if not isinstance(data, (bytes, bytearray)):
        raise ParseError(SOURCE, f"expected bytes, got {type(data).__name__}")
    data = bytes(data[:MAX_VPD_BYTES])
    if not data:
        raise ParseError(SOURCE, "empty VPD (not readable, or the function has none)")
    identifier: str | None = None
    read_only: dict[str, bytes] = {}
    writable: dict[str, bytes] = {}
    checksum: bool | None = None
    offset = 0
    while offset < len(data):
        tag = data[offset]
        if not tag & 0x80:
            name, length = (tag >> 3) & 0xF, tag & 0x7
            if name == END_NAME:
                return PciVpd(identifier, read_only, writable, checksum)
            if offset == 0:
                raise ParseError(SOURCE, f"VPD must start with a large resource, got byte 0x{tag:02x}")
            offset += 1 + length          # another small resource: skipped
            continue
        if offset + 3 > len(data):
            raise ParseError(SOURCE, f"large resource 0x{tag:02x} at byte {offset} cut short")
        length = int.from_bytes(data[offset + 1:offset + 3], "little")
        start, end = offset + 3, offset + 3 + length
        if end > len(data):
            raise ParseError(SOURCE, f"large resource 0x{tag:02x} at byte {offset} is {length} bytes, past the data")
        if tag == IDENTIFIER_TAG:
            identifier = _text(data[start:end]) or None
        elif tag == VPD_R_TAG:
            fields, checksum = _keywords(data, start, end, data)
            read_only.update(fields)
        elif tag == VPD_W_TAG:
            writable.update(_keywords(data, start, end, data)[0])
        elif offset == 0:
            raise ParseError(SOURCE, f"VPD must start with the identifier string (0x82), got 0x{tag:02x}")
        offset = end
    raise ParseError(SOURCE, "no End Tag (0x78): VPD cut short")
