"""The PCIe path parsers on real data: `lspci -vvv` (tests/data/corpus/lspci, with
PROVENANCE.tsv) and config space bytes of a real H200 (the device tool's capture)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus_util import corpus_dir, corpus_files
from netdoctor.errors import ParseError
from netdoctor.parsers.lspci import parse_lspci_vvv
from netdoctor.parsers.pci_config import ACS_FLAG_NAMES, AcsControl, parse_pci_config

DEVICE_CONFIG = Path(__file__).parent / "data/device/nvidia-h200-x2/raw-fabric/pci-config.out"
H100_SERVER = "leptonai-gpud__lspci-vvv-8xH100-PEX890xx.txt"
MATISSE = "kvm-list__lspci-vvv-s-matisse-downstream-acs-and-access-denied.txt"
ALL_OFF = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"


def _lspci(name: str) -> str:
    return (corpus_dir("lspci") / name).read_text(encoding="utf-8")


def test_every_lspci_corpus_file_is_asserted_here() -> None:
    assert sorted(path.name for path in corpus_files("lspci")) == sorted([H100_SERVER, MATISSE])


def test_lspci_of_a_real_8x_h100_server() -> None:
    functions = parse_lspci_vvv(_lspci(H100_SERVER))
    assert len(functions) == 517
    gpus = sorted(address for address, function in functions.items() if "NVIDIA Corporation Device 2330" in function.description)
    assert gpus == ["0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0",
                    "0000:9b:00.0", "0000:bb:00.0", "0000:cb:00.0", "0000:db:00.0"]
    assert all(functions[gpu].port_type == "endpoint" for gpu in gpus)
    # GPU 19:00.0 and its ConnectX-7 1a:00.0 sit under one PEX890xx switch below root port 15:01.0.
    assert functions["0000:15:01.0"].port_type == "root_port"
    assert functions["0000:16:00.0"].port_type == "upstream_port"
    assert functions["0000:16:00.0"].acs is None           # an upstream port has no ACS capability
    switch_ports = [function for function in functions.values()
                    if "PEX890xx" in function.description and function.port_type == "downstream_port"]
    assert len(switch_ports) == 34           # awk over the file counts the same
    assert {function.acs.text() for function in switch_ports if function.acs} == {ALL_OFF}
    assert functions["0000:1a:00.0"].description.startswith("Ethernet controller: Mellanox Technologies MT2910")
    assert functions["0000:83:00.0"].description == "Bridge: NVIDIA Corporation Device 22a3 (rev a1)"   # NVSwitch
    assert all(function.capabilities_read for function in functions.values() if function.port_type)
    assert not any(function.iommu_group for function in functions.values())       # IOMMU off: no groups printed


def test_lspci_downstream_port_with_acs_redirect_and_a_user_run() -> None:
    functions = parse_lspci_vvv(_lspci(MATISSE))
    denied, port = functions["0000:03:05.0"], functions["0000:03:02.0"]
    assert (denied.capabilities_read, denied.port_type, denied.acs) == (False, None, None)
    assert port.port_type == "downstream_port" and port.capabilities_read
    assert port.acs is not None and port.acs.redirects
    assert port.acs.text() == "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"


def test_lspci_ats_iommu_group_and_domains() -> None:
    text = ("10000:e0:06.0 PCI bridge: Intel Corporation Device 2030\n"
            "\tIOMMU group: 24\n"
            "\tCapabilities: [40] Express (v2) Root Port (Slot+), MSI 00\n"
            "0000:1a:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
            "\tCapabilities: [60] Express (v2) Endpoint, MSI 00\n"
            "\tCapabilities: [480 v1] Address Translation Service (ATS)\n"
            "\t\tATSCap:\tInvalidate Queue Depth: 00\n"
            "\t\tATSCtl:\tEnable+, Smallest Translation Unit: 00\n")
    functions = parse_lspci_vvv(text)
    assert functions["00010000:e0:06.0"].iommu_group == "24"      # a VMD domain keeps its 5 digits
    assert functions["0000:1a:00.0"].ats_enabled is True
    with pytest.raises(ParseError):
        parse_lspci_vvv("lspci: Unable to load libkmod resources: error -2\n")


def _device_config() -> dict[str, bytes]:
    blocks = re.split(r"^== (\S+)\n", DEVICE_CONFIG.read_text(), flags=re.M)
    return {blocks[index]: bytes(int(byte, 16) for byte in blocks[index + 1].split())
            for index in range(1, len(blocks), 2)}


def test_config_space_of_a_real_h200() -> None:
    configs = _device_config()
    assert sorted(configs) == ["0000:00:06.0", "0000:00:07.0"]
    for data in configs.values():
        assert len(data) == 4096
        capabilities = parse_pci_config(data)
        # An endpoint passed through to a VM: no ACS, and the hypervisor shows no ATS capability.
        assert (capabilities.port_type, capabilities.acs, capabilities.has_acs, capabilities.ats_enabled) == (
            "endpoint", None, False, None)
        assert capabilities.extended_read


def _config(port_type: int, acs_control: int | None = None, ats_enabled: bool | None = None, size: int = 4096) -> bytes:
    data = bytearray(4096)
    data[0:4] = bytes([0xB5, 0x10, 0x87, 0xC0])                 # a PLX/Broadcom switch port
    data[0x06] = 0x10                                         # capabilities list
    data[0x34] = 0x40
    data[0x40:0x44] = bytes([0x10, 0x00, 0x02 | port_type << 4, 0x00])
    offset, pending = 0x100, []
    if acs_control is not None:
        pending.append((0x000D, acs_control))
    if ats_enabled is not None:
        pending.append((0x000F, 0x8000 if ats_enabled else 0))
    for index, (capability, control) in enumerate(pending):
        next_offset = offset + 0x10 if index + 1 < len(pending) else 0
        header = capability | 1 << 16 | next_offset << 20
        data[offset:offset + 4] = header.to_bytes(4, "little")
        data[offset + 6:offset + 8] = control.to_bytes(2, "little")
        offset = next_offset
    return bytes(data[:size])


def test_config_space_acs_and_ats() -> None:
    port = parse_pci_config(_config(0x6, acs_control=0b0011101))
    assert port.port_type == "downstream_port" and port.acs is not None and port.acs.redirects
    assert port.acs.text() == "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
    assert parse_pci_config(_config(0x4, acs_control=0)).acs == AcsControl(0)
    nic = parse_pci_config(_config(0x0, ats_enabled=True))
    assert (nic.ats_enabled, nic.has_acs) == (True, False)
    # A user reads 64 bytes: the capabilities are unknown, not absent.
    user = parse_pci_config(_config(0x6, acs_control=0b11101, size=64))
    assert (user.port_type, user.acs, user.has_acs, user.extended_read) == (None, None, None, False)


def test_config_space_refuses_what_is_not_a_function() -> None:
    with pytest.raises(ParseError):
        parse_pci_config(b"\xff" * 64)
    with pytest.raises(ParseError):
        parse_pci_config(b"\x86\x80")
    # A capability loop ends instead of spinning.
    data = bytearray(_config(0x6, acs_control=0))
    data[0x100:0x104] = (0x0001 | 1 << 16 | 0x100 << 20).to_bytes(4, "little")
    assert parse_pci_config(bytes(data)).acs is None


def test_acs_flag_names_round_trip() -> None:
    for index, name in enumerate(ACS_FLAG_NAMES):
        assert AcsControl.from_flags({name: True}).bits == 1 << index


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=4096))
def test_config_space_parser_takes_any_bytes(data: bytes) -> None:
    try:
        capabilities = parse_pci_config(data)
    except ParseError:
        return
    assert capabilities.extended_read == (len(data) >= 0x104)
