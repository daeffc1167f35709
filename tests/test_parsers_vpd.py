"""PCI VPD parser: the resource tags of PCI Local Bus 3.0 section 6.4 and the SW_MNG mark of the
HGX B200/B300 ConnectX-7 bridge's Limited PFs.

No real VPD dump of a bridge function was found (no `lspci -vvv` showing SMDL either): the bytes
here are DERIVED, built from the spec's layout (0x82 identifier, 0x90 VPD-R with an `RV` checksum,
0x91 VPD-W with `RW`, 0x78 end tag), with fields shaped like a ConnectX-7's as `lspci -vvv` names
them (PN, EC, SN, V2, VA). Where the bridge puts `SMDL=SW_MNG` is not documented (the Fabric
Manager User Guide says only "a vendor-specific field called SMDL, with a non-zero value defined
as SW_MNG"), so it is tried in a VA field and in a VPD-W field.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netdoctor.errors import ParseError
from netdoctor.inventory.bridge import switch_management_of_vpd
from netdoctor.parsers.pci_vpd import PciVpd, parse_pci_vpd


def _large(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + len(body).to_bytes(2, "little") + body


def _field(keyword: str, value: bytes) -> bytes:
    return keyword.encode() + bytes([len(value)]) + value


def vpd(read_only: dict[str, bytes], writable: dict[str, bytes] | None = None, *,
        identifier: bytes = b"NVIDIA ConnectX-7 HHHL adapter card", checksum_delta: int = 0,
        end: bytes = b"\x78") -> bytes:
    """VPD bytes as the spec lays them out, with a correct RV checksum (off by `checksum_delta`)."""
    head = _large(0x82, identifier)
    fields = b"".join(_field(key, value) for key, value in read_only.items())
    # VPD-R: the fields, then RV: checksum byte + 2 reserved bytes; the RV length counts both.
    body_before_checksum = fields + b"RV" + bytes([3])
    vpd_r_header = bytes([0x90]) + (len(body_before_checksum) + 3).to_bytes(2, "little")
    partial = head + vpd_r_header + body_before_checksum
    checksum = (-sum(partial) + checksum_delta) % 256
    vpd_r = vpd_r_header + body_before_checksum + bytes([checksum]) + b"\x00\x00"
    vpd_w = b""
    if writable is not None:
        vpd_w = _large(0x91, b"".join(_field(key, value) for key, value in writable.items()) + _field("RW", b"\x00" * 8))
    return head + vpd_r + vpd_w + end + b"\xff" * 16


FC_PF = {"PN": b"MCX75310AAS-NEAT", "EC": b"A7", "SN": b"MT2342XZ0ABC", "V2": b"MCX75310AAS-NEAT",
         "VA": b"MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX75310A"}
LPF = {**FC_PF, "VA": b"MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX75310A:SMDL=SW_MNG"}


def test_a_limited_pf_is_told_by_its_smdl_field() -> None:
    parsed = parse_pci_vpd(vpd(LPF, {"V1": b"\x00" * 4}))
    assert parsed.identifier == "NVIDIA ConnectX-7 HHHL adapter card"
    assert parsed.text("PN") == "MCX75310AAS-NEAT" and parsed.text("SN") == "MT2342XZ0ABC"
    assert "RV" not in parsed.read_only and "RW" not in parsed.writable and "V1" in parsed.writable
    assert parsed.checksum_ok is True
    assert parsed.switch_management is True
    assert switch_management_of_vpd(vpd(LPF)) is True


def test_a_full_pf_or_a_nic_is_not() -> None:
    parsed = parse_pci_vpd(vpd(FC_PF))
    assert parsed.switch_management is False
    assert switch_management_of_vpd(vpd(FC_PF)) is False


def test_the_token_may_sit_in_a_writable_field_but_must_be_a_whole_token() -> None:
    assert parse_pci_vpd(vpd(FC_PF, {"V1": b"SMDL=SW_MNG\x00\x00"})).switch_management is True
    assert parse_pci_vpd(vpd({**FC_PF, "V3": b"SW_MNGX"})).switch_management is False
    assert parse_pci_vpd(vpd({**FC_PF, "V3": b"XSW_MNG"})).switch_management is False


def test_a_wrong_checksum_is_reported_not_fatal() -> None:
    parsed = parse_pci_vpd(vpd(LPF, checksum_delta=1))
    assert parsed.checksum_ok is False and parsed.switch_management is True


def test_bytes_after_the_end_tag_are_ignored_and_small_resources_skipped() -> None:
    data = vpd(FC_PF, end=b"\x78")
    assert parse_pci_vpd(data + b"SMDL=SW_MNG").switch_management is False
    with_small = data[:-17] + b"\x22\xab\xcd" + b"\x79\x00"      # a small item (name 4, 2 bytes), end tag 0x79
    assert parse_pci_vpd(with_small).text("PN") == "MCX75310AAS-NEAT"


@pytest.mark.parametrize(("data", "message"), [
    (b"", "empty"),
    (b"\xff" * 64, "past the data"),                    # a function without VPD reads all-ones
    (b"\x00" * 16, "must start with a large resource"),
    (vpd(FC_PF)[:45], "past the data"),                  # cut inside the VPD-R resource
    (vpd(FC_PF, end=b""), "must start|past the data|End Tag"),
    (_large(0x82, b"x") + _large(0x90, b"P"), "cut short"),
    (_large(0x82, b"x") + _large(0x90, b"\x01\x02\x00") + b"\x78", "not two ASCII characters"),
    (_large(0x82, b"x") + _large(0x90, b"PN\x09abc") + b"\x78", "runs past its resource"),
    (_large(0x82, b"x"), "no End Tag"),
])
def test_what_is_not_vpd_is_a_parse_error_and_unknown_to_the_inventory(data: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_pci_vpd(data)
    assert switch_management_of_vpd(data) is None


def test_nothing_read_is_unknown() -> None:
    assert switch_management_of_vpd(None) is None
    with pytest.raises(ParseError):
        parse_pci_vpd("not bytes")  # type: ignore[arg-type]


def test_describe_names_the_fields() -> None:
    assert isinstance(parse_pci_vpd(vpd(LPF)), PciVpd)
    assert "VA='MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX75310A:SMDL=SW_MNG'" in parse_pci_vpd(vpd(LPF)).describe()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=2048),
                 st.builds(lambda fields, tail: vpd(fields) + tail,
                           st.dictionaries(st.sampled_from(["PN", "SN", "V0", "VA", "Y1"]), st.binary(max_size=40),
                                           max_size=4), st.binary(max_size=32))))
def test_vpd_parser_takes_any_bytes(data: bytes) -> None:
    try:
        parsed = parse_pci_vpd(data)
    except ParseError:
        assert switch_management_of_vpd(data) is None
        return
    assert isinstance(parsed.switch_management, bool) and switch_management_of_vpd(data) is parsed.switch_management
