"""LiveSource on this machine's /sys, with the fake tools; util helpers."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from netdoctor.host.live import LiveSource, read_boot_id
from netdoctor.host.types import CommandSpec, CommandState
from netdoctor.host.files import atomic_write
from netdoctor.util import canonical_pci_address, parse_iso_utc, utc_now_iso

FAKEBIN = Path(__file__).parent / "fakebin"


def test_live_source_identity_and_tools() -> None:
    source = LiveSource(tool_timeout_s=0.4, path_env=f"{FAKEBIN}:/usr/bin:/bin")
    assert source.is_snapshot is False and source.recording is None
    assert source.host and "." not in source.host
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", source.captured_at)
    assert source.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    started = time.monotonic()
    results = source.run([CommandSpec("hang", ("hang",), timeout_s=30), CommandSpec("nap", ("nap",))])
    assert time.monotonic() - started < 1.5            # capped at tool_timeout_s
    assert results["hang"].state is CommandState.TIMEOUT
    assert results["nap"].stdout == "rested\n"
    assert "lo" in source.sys.listdir("class/net")
    assert "lo" not in [netdev.name for netdev in source.netdevs()]
    first = source.nvml()
    assert source.nvml() is first                      # collected once


def test_recording_live_source_records_commands_and_nvml() -> None:
    source = LiveSource(record=True, path_env=str(FAKEBIN))
    source.run([CommandSpec("ibstat", ("ibstat",))])
    report, status = source.nvml()
    assert source.recording is not None
    assert source.recording.commands["ibstat"].returncode == 255
    assert (source.recording.nvml, source.recording.nvml_status) == (report, status)


def test_boot_id_unreadable(tmp_path: Path) -> None:
    assert read_boot_id(tmp_path / "absent") is None


def test_canonical_pci_address() -> None:
    assert canonical_pci_address("00000000:18:00.0") == "0000:18:00.0"
    assert canonical_pci_address("00000000:2A:00.0") == "0000:2a:00.0"
    assert canonical_pci_address("0000:18:00.1") == "0000:18:00.1"
    assert canonical_pci_address("18:00.0") == "0000:18:00.0"
    assert canonical_pci_address("00010000:01:00.0") == "00010000:01:00.0"   # VMD domains exceed 16 bits
    assert canonical_pci_address("virtio2") is None
    assert canonical_pci_address("0000:18:00.8") is None


def test_times() -> None:
    now = utc_now_iso()
    assert abs(parse_iso_utc(now).timestamp() - time.time()) < 5
    assert parse_iso_utc("2026-11-21T22:40:00Z").isoformat() == "2026-11-21T22:40:00+00:00"
    assert parse_iso_utc("2026-11-21T23:40:00+01:00").isoformat() == "2026-11-21T22:40:00+00:00"
    with pytest.raises(ValueError, match="not an ISO 8601 time"):
        parse_iso_utc("last tuesday")


def test_atomic_write_replaces_link_not_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "state.json").symlink_to(victim)
    atomic_write(tmp_path / "state.json", '{"a": 1}', mode=0o600)
    assert victim.read_text() == "keep"
    assert (tmp_path / "state.json").read_text() == '{"a": 1}'
    assert (tmp_path / "state.json").stat().st_mode & 0o777 == 0o600
    assert sorted(path.name for path in tmp_path.iterdir()) == ["state.json", "victim"]
