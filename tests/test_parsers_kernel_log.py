"""The kernel log parser: Xid, SXid, link, AER and NVIDIA driver load lines in the three time
formats, and the recovery action an Xid 154 names."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.parsers.kernel_log import Nvlink5Fault, nvlink5_fault, parse_kernel_log, recovery_action
from netdoctor.vocabulary import KernelEventKind

DEVICE = Path(__file__).parent / "data" / "device" / "nvidia-h200-x2" / "raw-fabric"


def test_a_real_healthy_h200_boot_log_has_only_the_driver_load_and_reaches_back_to_boot() -> None:
    for name in ("dmesg.out", "dmesg-plain.out"):
        parsed = parse_kernel_log((DEVICE / name).read_text(encoding="utf-8"))
        assert [(event.kind, event.subject) for event in parsed.events] == [(KernelEventKind.DRIVER_LOAD, "580.159.04")]
        assert parsed.events[0].message.startswith("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04")
    iso = parse_kernel_log((DEVICE / "dmesg.out").read_text(encoding="utf-8"))
    assert iso.first_time == datetime(2026, 11, 23, 22, 58, 17, 595436, tzinfo=timezone.utc)
    assert iso.events[0].time == datetime(2026, 11, 23, 22, 58, 18, 238174, tzinfo=timezone.utc)
    plain = parse_kernel_log((DEVICE / "dmesg-plain.out").read_text(encoding="utf-8"))
    assert plain.first_time is None and plain.first_since_boot_s == 0.0


CORPUS = Path(__file__).parent / "data" / "corpus" / "dmesg"


def test_every_dmesg_corpus_file_is_asserted_here() -> None:
    assert sorted(path.name for path in CORPUS.iterdir()) == [
        "device-h200x2__dmesg-plain.txt", "device-h200x2__dmesg-time-format-iso.txt",
        "gpu-notes__dmesg-plain-xid-79-sxid-20034.txt", "kubuntu-forum__dmesg-plain-xid-62.txt",
        "leptonai-gpud__dmesg-T-xid-119.txt", "leptonai-gpud__dmesg-plain-xid-149-154.txt",
        "leptonai-gpud__kmsg-no-timestamp-xid-145-149-gb200.txt"]


def test_a_real_gb200_xid_149_then_154_names_each_recovery_action() -> None:
    parsed = parse_kernel_log((CORPUS / "leptonai-gpud__dmesg-plain-xid-149-154.txt").read_text())
    assert [(event.subject, event.code) for event in parsed.events] == [
        ("0009:01:00.0", 149), ("0009:01:00.0", 154), ("0008:01:00.0", 149), ("0019:01:00.0", 154),
        ("0009:01:00.0", 149), ("0009:01:00.0", 149), ("0008:01:00.0", 149), ("0018:01:00.0", 154),
        ("0008:01:00.0", 154)]
    actions = [recovery_action(event.message) for event in parsed.events if event.code == 154]
    assert [(action.action, action.value, action.words) for action in actions if action is not None] == [
        ("drain_and_reset", 4, "Drain and Reset"), ("gpu_reset", 1, "GPU Reset Required"),
        ("gpu_reset", 1, "GPU Reset Required"), ("gpu_reset", 1, "GPU Reset Required")]
    assert all(recovery_action(event.message) is None for event in parsed.events if event.code == 149)
    # The driver pads the unit and the word ("NETIR_LINK_EVT  Fatal   XC0"): each 149 is read as fatal,
    # with its link; a 154 says no fatality.
    assert [event.fatal for event in parsed.events] == [True, None, True, None, True, True, True, None, None]
    assert [nvlink5_fault(event.message) for event in parsed.events if event.code == 149] == [
        Nvlink5Fault("NETIR_LINK_EVT", True, link) for link in (1, 1, 0, 15, 14)]


def test_real_gb200_nvlink5_xid_lines_say_fatal_or_nonfatal_unit_and_link() -> None:
    # The source (gpud's test of production lines) holds messages without a time stamp: each is
    # given a plain dmesg one here (derived), one second apart.
    lines = (CORPUS / "leptonai-gpud__kmsg-no-timestamp-xid-145-149-gb200.txt").read_text().splitlines()
    parsed = parse_kernel_log("".join(f"[{100 + n:5d}.000000] {line}\n" for n, line in enumerate(lines)))
    assert len(parsed.events) == len(lines) == 19
    assert [(event.subject, event.code, event.fatal) for event in parsed.events[:8]] == [
        ("0018:01:00.0", 149, False), ("0018:01:00.0", 145, False), ("0019:01:00.0", 145, False),
        ("0008:01:00.0", 149, False), ("0019:01:00.0", 145, False), ("0019:01:00.0", 149, True),
        ("0008:01:00.0", 145, False), ("0008:01:00.0", 145, False)]
    assert sum(event.fatal is False for event in parsed.events) == 9
    assert sum(event.fatal is True for event in parsed.events) == 10
    faults = [nvlink5_fault(event.message) for event in parsed.events]
    assert faults[:6] == [Nvlink5Fault("NETIR_BER_EVENT", False, 3), Nvlink5Fault("RLW_RXPIPE", False, 13),
                          Nvlink5Fault("RLW_RXPIPE", False, 12), Nvlink5Fault("NETIR_BER_EVENT", False, 1),
                          Nvlink5Fault("RLW_SRC_TRACK", False, 12), Nvlink5Fault("NETIR", True, -1)]
    assert faults[11] == Nvlink5Fault("NETIR_LINK_EVT", True, 8)
    assert parsed.events[1].message.startswith("NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, "
                                               "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2")


@pytest.mark.parametrize(("said", "expected"), [
    ("RLW_SRC_TRACK Non-fatal XC1 i0 Link 03 (0x040868e2 0x00000008)", Nvlink5Fault("RLW_SRC_TRACK", False, 3)),
    ("TLW_RX/TLW_RX_PIPE0 Nonfatal XC0 i0 Link 00 (0x0000000a 0x00000001)", Nvlink5Fault("TLW_RX/TLW_RX_PIPE0", False, 0)),
    ("NETIR_LINK_EVT Fatal XC 1 i 2 Link 01 [0x0000000a]", Nvlink5Fault("NETIR_LINK_EVT", True, 1)),   # pre-R575 form
    ("MSE_WATCHDOG Fatal XC0 i0", Nvlink5Fault("MSE_WATCHDOG", True, None)),
    ("driver-specific detail", None),                                   # an NVLink5 Xid that says neither
    ("pid=1, name=Fatal, GPU has fallen off the bus.", None),           # "Fatal" without the XC form
    ("GPU Fatal Timeout", None),
])
def test_the_fatal_word_is_read_only_in_the_nvlink5_form(said: str, expected: Nvlink5Fault | None) -> None:
    [event] = parse_kernel_log(f"[    5.000000] NVRM: Xid (PCI:0008:01:00): 145, {said}\n").events
    assert nvlink5_fault(event.message) == expected
    assert event.fatal == (expected.fatal if expected is not None else None)


def test_a_real_incident_xid_79_then_sxid_20034_from_three_nvswitches() -> None:
    parsed = parse_kernel_log((CORPUS / "gpu-notes__dmesg-plain-xid-79-sxid-20034.txt").read_text())
    assert [(event.kind, event.subject, event.code, event.fatal, event.since_boot_s) for event in parsed.events] == [
        (KernelEventKind.XID, "0000:91:00.0", 79, None, 6781741.548779),
        (KernelEventKind.SXID, "0000:06:00.0", 20034, True, 6781753.400584),
        (KernelEventKind.SXID, "0000:05:00.0", 20034, True, 6781753.404587),
        (KernelEventKind.SXID, "0000:07:00.0", 20034, True, 6781753.407899),
        (KernelEventKind.SXID, "0000:05:00.0", 20034, True, 6781753.408138)]   # Severity/Data lines are details


def test_a_real_xid_62_in_plain_form() -> None:
    parsed = parse_kernel_log((CORPUS / "kubuntu-forum__dmesg-plain-xid-62.txt").read_text())
    assert [(event.kind, event.subject, event.code, event.since_boot_s) for event in parsed.events] == [
        (KernelEventKind.XID, "0000:01:00.0", 62, 121.331414)]
    assert parsed.events[0].message == "NVRM: Xid (PCI:0000:01:00): 62, 12b2(1fa0) 00000000 00000000"


def test_real_dmesg_T_output_is_refused_for_its_zoneless_local_times() -> None:
    # `dmesg -T` of a real H100 node with Xid 119: local time, no zone, so no window can be
    # placed; netdoctor itself runs `dmesg --time-format iso`.
    with pytest.raises(ParseError, match="no dmesg or journal time stamp"):
        parse_kernel_log((CORPUS / "leptonai-gpud__dmesg-T-xid-119.txt").read_text())


def test_each_event_kind_with_its_subject_code_and_time() -> None:
    text = (
        "2026-11-23T10:01:02,123456+00:00 NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
        "2026-11-23T10:02:02,000000+01:00 nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 LTSSM Fault Up\n"
        "2026-11-23T10:02:03,000000+00:00 nvidia-nvswitch1: SXid (PCI:0000:08:00.0): 12028, Non-fatal, Link 18 egress\n"
        "2026-11-23T10:03:02,000000+00:00 mlx5_core 0000:1a:00.0 ibp26s0: Link down\n"
        "2026-11-23T10:03:05,000000+00:00 pcieport 0000:00:01.1: AER: Corrected error received: 0000:18:00.0\n"
        "2026-11-23T10:03:07,000000+00:00 pcieport 0000:00:01.1: AER: Multiple Uncorrected (Non-Fatal) error received: 0000:1a:00.0\n"
        "2026-11-23T10:03:09+0000 node017 kernel: mlx5_core 0000:1a:00.0 ibp26s0: Link up\n"
        "2026-11-23T10:03:10,000000+00:00 audit: type=1400 Link upgrades are not events\n"
    )
    events = parse_kernel_log(text).events
    assert [(event.kind, event.subject, event.code) for event in events] == [
        (KernelEventKind.XID, "0000:18:00.0", 79), (KernelEventKind.SXID, "0000:07:00.0", 20034),
        (KernelEventKind.SXID, "0000:08:00.0", 12028), (KernelEventKind.LINK_DOWN, "ibp26s0", None),
        (KernelEventKind.AER_CORRECTED, "0000:18:00.0", None), (KernelEventKind.AER_UNCORRECTED, "0000:1a:00.0", None),
        (KernelEventKind.LINK_UP, "ibp26s0", None)]
    assert events[1].time == datetime(2026, 11, 23, 9, 2, 2, tzinfo=timezone.utc)        # +01:00 placed in UTC
    assert (events[1].fatal, events[2].fatal) == (True, False)
    assert events[6].time == datetime(2026, 11, 23, 10, 3, 9, tzinfo=timezone.utc)        # journalctl short-iso


def test_plain_dmesg_keeps_seconds_since_boot() -> None:
    event = parse_kernel_log("[   12.345678] NVRM: Xid (PCI:0000:2a:00): 13, pid=9, Graphics Exception\n").events[0]
    assert (event.time, event.since_boot_s, event.subject, event.code) == (None, 12.345678, "0000:2a:00.0", 13)


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_output_is_nothing_to_parse(text: str) -> None:
    with pytest.raises(NothingToParse):
        parse_kernel_log(text)


@pytest.mark.parametrize("text", ["dmesg: read kernel buffer failed: Operation not permitted\n", "\x00\x01garbage" * 50])
def test_output_without_time_stamps_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_kernel_log(text)


def test_hostile_lines_do_not_break_the_scan() -> None:
    text = ("[    0.000000] Linux version\n" + "[    1.000000] mlx5_core 0000:1a:00.0 " + "x" * 1_000_000 + ": Link down\n"
            + "[    2.000000] NVRM: Xid (PCI:zzzz): 79, bad address\n")
    events = parse_kernel_log(text).events
    assert [event.kind for event in events] == [KernelEventKind.LINK_DOWN]


@pytest.mark.parametrize(("said", "expected"), [
    ("from 0x0 (None) to 0x2 (Node Reboot Required)", ("node_reboot", 2, "Node Reboot Required")),
    ("from 0x0 (None) to 0x1 (GPU Reset Required)", ("gpu_reset", 1, "GPU Reset Required")),
    ("from 0x1 (GPU Reset Required) to 0x0 (None)", ("none", 0, "None")),
    ("from 0x0 (None) to 0x3 (Drain P2P)", ("drain_p2p", 3, "Drain P2P")),
    ("from 0x0 (None) to 0x4 (Drain and Reset)", ("drain_and_reset", 4, "Drain and Reset")),
    ("from 0 (None) to 2 (Node Reboot Required)", ("node_reboot", 2, "Node Reboot Required")),
    ("from 0x0 (None) to 0x9 (Something New)", (None, 9, "Something New")),     # a value NVML does not name
])
def test_xid_154_names_the_action_it_changed_to(said: str, expected: tuple[object, ...]) -> None:
    # The form NVIDIA's Xid catalog gives and real logs show:
    # "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    line = f"[  9.5] NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed {said}\n"
    [event] = parse_kernel_log(line).events
    action = recovery_action(event.message)
    assert action is not None and (action.action, action.value, action.words) == expected


@pytest.mark.parametrize("message", ["NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed",
                                     "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to",
                                     "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0xZZ (x)",
                                     ""])
def test_an_xid_154_that_does_not_say_its_action_reads_as_none(message: str) -> None:
    assert recovery_action(message) is None


def test_driver_loads_in_both_flavours_and_xids_in_the_catalogs_older_form() -> None:
    text = ("[    6.852458] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.120  Fri Sep 13 10:10:01 UTC 2024\n"
            "[   12.100000] NVRM: Xid (0000:03:00): 14, Channel 00000001\n"
            "[ 1843.439669] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  "
            "(dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025\n"
            "[ 1844.000000] NVRM: loading NVIDIA UNIX Open Kernel Module for aarch64  570.158.01  Release Build\n")
    events = parse_kernel_log(text).events
    assert [(event.kind, event.subject, event.code, event.since_boot_s) for event in events] == [
        (KernelEventKind.DRIVER_LOAD, "550.120", None, 6.852458), (KernelEventKind.XID, "0000:03:00.0", 14, 12.1),
        (KernelEventKind.DRIVER_LOAD, "570.158.01", None, 1843.439669),
        (KernelEventKind.DRIVER_LOAD, "570.158.01", None, 1844.0)]


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:18:00): abc, GPU has fallen off the bus.",      # no number
    "NVRM: Xid (PCI:0000:18:00) 79, GPU has fallen off the bus.",        # no colon after the address
    "NVRM: Xid (PCI:zz:18:00): 79, bad address",
    "NVRM: Xid (PCI:0000:18:00): ",                                      # cut off
    "NVRM: Xid error: xyz, invalid data",
    "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  Release Build",   # no version
    "Xid (PCI:0000:01:00): 79, not from NVRM",
])
def test_malformed_xid_and_driver_lines_are_no_events(line: str) -> None:
    assert parse_kernel_log(f"[    1.000000] {line}\n").events == ()
