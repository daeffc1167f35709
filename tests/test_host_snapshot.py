"""Snapshots: capture a fake live tree, reopen as directory and archive; hostile archives refused."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from netdoctor.errors import SnapshotError
from netdoctor.host.live import LiveSource
from netdoctor.host.snapshot import open_snapshot, write_snapshot
from netdoctor.host.recording import Recording
from netdoctor.host.types import CommandSpec, CommandState

FAKEBIN = Path(__file__).parent / "fakebin"
PATH = f"{FAKEBIN}:/usr/bin:/bin"
BRIDGE = "devices/pci0000:17/0000:17:01.0"
HCA_PCI = f"{BRIDGE}/0000:18:00.0"
NETDEV_PCI = f"{BRIDGE}/0000:18:00.1"


def _write(root: Path, path: str, text: str) -> None:
    full = root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)


def _link(root: Path, path: str, target: str) -> None:
    full = root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.symlink_to(target)


def fake_live_sys(root: Path) -> Path:
    """A /sys stand-in with the real layout: class/* entries are links into devices/..."""
    hca = f"{HCA_PCI}/infiniband/mlx5_0"
    for port, state, rate in ((1, "4: ACTIVE", "400 Gb/sec (4X NDR)"), (2, "1: DOWN", "10 Gb/sec (4X SDR)")):
        _write(root, f"{hca}/ports/{port}/state", f"{state}\n")
        _write(root, f"{hca}/ports/{port}/rate", f"{rate}\n")
        _write(root, f"{hca}/ports/{port}/link_layer", "InfiniBand\n")
        _write(root, f"{hca}/ports/{port}/counters/symbol_error", "0\n")
        _write(root, f"{hca}/ports/{port}/counters/link_downed", f"{port * 3}\n")
    _write(root, f"{hca}/fw_ver", "28.41.1000\n")
    _write(root, f"{hca}/hca_type", "MT4129\n")
    _link(root, f"{hca}/device", "../../../0000:18:00.0")
    for function in (HCA_PCI, NETDEV_PCI):
        _write(root, f"{function}/numa_node", "1\n")
        _write(root, f"{function}/current_link_speed", "32.0 GT/s PCIe\n")
        _write(root, f"{function}/current_link_width", "16\n")
        _write(root, f"{function}/max_link_width", "16\n")
        _link(root, f"{function}/driver", "../../../../bus/pci/drivers/mlx5_core")
    (root / "bus/pci/drivers/mlx5_core").mkdir(parents=True)
    net = f"{NETDEV_PCI}/net/ens1f1np1"
    for name, value in (("mtu", "9000"), ("operstate", "up"), ("address", "b8:3f:d2:aa:bb:01"), ("type", "1"),
                        ("speed", "400000")):
        _write(root, f"{net}/{name}", value + "\n")
    _link(root, f"{net}/device", "../../../0000:18:00.1")
    _write(root, "devices/virtual/net/lo/mtu", "65536\n")
    _write(root, "devices/virtual/net/veth0/mtu", "1500\n")
    _write(root, "devices/virtual/net/veth0/operstate", "down\n")
    _write(root, "devices/virtual/net/veth0/speed", "-1\n")
    _write(root, "devices/virtual/net/veth0/type", "1\n")
    _link(root, "class/infiniband/mlx5_0", f"../../{hca}")
    _link(root, "class/net/ens1f1np1", f"../../{net}")
    _link(root, "class/net/veth0", "../../devices/virtual/net/veth0")
    _link(root, "class/net/lo", "../../devices/virtual/net/lo")
    for function in ("0000:18:00.0", "0000:18:00.1"):
        _link(root, f"bus/pci/devices/{function}", f"../../../{BRIDGE}/{function}")
    _write(root, "module/nvidia_peermem/refcnt", "0\n")
    return root


def observe(source: Any) -> dict[str, Any]:
    """What an inventory builder would ask; must read the same live and from the snapshot."""
    sys = source.sys
    seen: dict[str, Any] = {"hcas": sys.listdir("class/infiniband")}
    for hca in seen["hcas"]:
        base = f"class/infiniband/{hca}"
        seen[hca] = {
            "fw": sys.read(f"{base}/fw_ver"),
            "pci": sys.link_name(f"{base}/device"),
            "numa": sys.read(f"{base}/device/numa_node"),
            "ports": {port: {name: sys.read(f"{base}/ports/{port}/{name}") for name in ("state", "rate", "link_layer")}
                      for port in sys.listdir(f"{base}/ports")},
            "counters": {name: sys.read(f"{base}/ports/1/counters/{name}")
                         for name in sys.listdir(f"{base}/ports/1/counters")},
            "driver": sys.link_name(f"{base}/device/driver"),
        }
    seen["gpu_pcie"] = sys.read("bus/pci/devices/0000:18:00.1/current_link_speed")
    seen["pci_path"] = sys.pci_path("0000:18:00.1")
    seen["peermem"] = sys.exists("module/nvidia_peermem")
    seen["peermem_dir"] = sys.is_dir("module/nvidia_peermem")
    seen["nv_peer_mem"] = sys.exists("module/nv_peer_mem")
    seen["netdevs"] = source.netdevs()
    results = source.run([CommandSpec("ibstat", ("ibstat",)), CommandSpec("ibdev2netdev", ("ibdev2netdev-not-here",)),
                          CommandSpec("hang", ("hang",), timeout_s=0.3)])
    seen["commands"] = {name: (result.state, result.returncode, result.stdout, result.stderr)
                        for name, result in results.items()}
    seen["nvml"] = source.nvml()[0]
    return seen


@pytest.fixture()
def captured(tmp_path: Path) -> tuple[dict[str, Any], LiveSource]:
    live = LiveSource(sys_root=fake_live_sys(tmp_path / "sys"), record=True, path_env=PATH)
    return observe(live), live


def test_live_observation_has_the_tree_values(captured: tuple[dict[str, Any], LiveSource]) -> None:
    seen, _ = captured
    assert seen["hcas"] == ["mlx5_0"]
    assert seen["mlx5_0"]["pci"] == "0000:18:00.0"
    assert seen["mlx5_0"]["numa"] == "1"
    assert seen["mlx5_0"]["ports"]["2"] == {"state": "1: DOWN", "rate": "10 Gb/sec (4X SDR)", "link_layer": "InfiniBand"}
    assert seen["mlx5_0"]["counters"] == {"link_downed": "3", "symbol_error": "0"}
    assert seen["mlx5_0"]["driver"] == "mlx5_core"
    assert seen["pci_path"] == ("0000:17:01.0", "0000:18:00.1")
    assert seen["peermem"] is True and seen["nv_peer_mem"] is False
    assert [(n.name, n.mtu, n.operstate, n.speed_mbps, n.pci_address) for n in seen["netdevs"]] == [
        ("ens1f1np1", 9000, "up", 400000, "0000:18:00.1"), ("veth0", 1500, "down", None, None)]
    assert seen["commands"]["ibstat"][:2] == (CommandState.ERROR, 255)
    assert seen["commands"]["hang"][0] is CommandState.TIMEOUT
    assert seen["commands"]["ibdev2netdev"][0] is CommandState.MISSING


@pytest.mark.parametrize("name", ["snap", "snap.tar.gz", "snap.tgz"])
def test_round_trip_reads_the_same(captured: tuple[dict[str, Any], LiveSource], tmp_path: Path, name: str) -> None:
    seen, live = captured
    assert live.recording is not None
    target = write_snapshot(live.recording, tmp_path / name, host="node017", captured_at="2026-11-21T22:40:00Z",
                            boot_id="b00t", version="0.1.0")
    with open_snapshot(target) as snapshot:
        assert (snapshot.host, snapshot.captured_at, snapshot.boot_id, snapshot.is_snapshot) == (
            "node017", "2026-11-21T22:40:00Z", "b00t", True)
        again = observe(snapshot)
        extracted = snapshot.directory
        hang = snapshot.run([CommandSpec("hang", ("hang",))])["hang"]
        assert hang.describe() == "hang timed out after 0.3 s"
        assert snapshot.run([CommandSpec("perfquery-x-mlx5_0-1", ("perfquery",))])["perfquery-x-mlx5_0-1"].stderr \
            == "not in snapshot"
        assert snapshot.nvml()[1] == live.nvml()[1]
    assert again == seen
    if name != "snap":
        assert not extracted.exists(), "extracted archive not cleaned up"


def test_snapshot_layout(captured: tuple[dict[str, Any], LiveSource], tmp_path: Path) -> None:
    _, live = captured
    assert live.recording is not None
    target = write_snapshot(live.recording, tmp_path / "snap", host="node017", captured_at="2026-11-21T22:40:00Z",
                            boot_id=None, version="0.1.0")
    sys = target / "sys"
    assert (sys / "class/infiniband/mlx5_0").is_dir() and not (sys / "class/infiniband/mlx5_0").is_symlink()
    # A PCI function keeps its place under its bridges (the path P2P traffic takes); the
    # bus entry and the class link lead there, as they do live.
    assert os.readlink(sys / "class/infiniband/mlx5_0/device") == f"../../../{BRIDGE}/0000:18:00.0"
    assert os.readlink(sys / "bus/pci/devices/0000:18:00.0") == f"../../../{BRIDGE}/0000:18:00.0"
    assert (sys / "bus/pci/devices/0000:18:00.0/numa_node").read_text() == "1\n"
    assert (sys / f"{BRIDGE}/0000:18:00.0/numa_node").read_text() == "1\n"
    assert (sys / "class/infiniband/mlx5_0/ports/1/rate").read_text() == "400 Gb/sec (4X NDR)\n"
    assert os.readlink(sys / "bus/pci/devices/0000:18:00.0/driver") == "../../../../bus/pci/drivers/mlx5_core"
    assert (sys / "module/nvidia_peermem").is_dir()
    assert (sys / "class/net/ens1f1np1/mtu").read_text() == "9000\n"
    assert (target / "commands/ibstat.status").read_text() == "255\n"
    assert (target / "commands/ibstat.err").read_text().startswith("ibpanic:")
    assert (target / "commands/hang.status").read_text() == "timeout\n"
    assert (target / "commands/ibdev2netdev.status").read_text() == "missing\n"
    assert not (target / "nvml.json").exists()     # no NVIDIA driver on the test machine
    meta = json.loads((target / "snapshot.json").read_text())
    assert (meta["format"], meta["host"], meta["netdoctor"]) == ("netdoctor.snapshot/1", "node017", "0.1.0")
    assert "boot_id" not in meta
    modes = {oct(path.lstat().st_mode & 0o777) for path in target.rglob("*") if not path.is_symlink()}
    assert modes == {"0o755", "0o644"}
    with pytest.raises(SnapshotError, match="already exists"):
        write_snapshot(live.recording, target, host="x", captured_at="2026-11-21T22:40:00Z", boot_id=None, version="0")
    assert [entry.name for entry in tmp_path.iterdir() if entry.name.startswith(".")] == []


def test_archive_replaces_a_symlink_instead_of_writing_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "out.tar.gz").symlink_to(victim)
    write_snapshot(Recording(), tmp_path / "out.tar.gz", host="n", captured_at="2026-11-21T22:40:00Z",
                   boot_id=None, version="0")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "out.tar.gz").is_symlink()
    with open_snapshot(tmp_path / "out.tar.gz") as snapshot:
        assert snapshot.host == "n"
        assert snapshot.sys.listdir("class/net") == []


def test_nvml_json_round_trip(tmp_path: Path) -> None:
    recording = Recording()
    report = {"driver_version": "580.95.05", "cuda_driver_version": 13000,
              "gpus": [{"index": 0, "pci_bus_id": "00000000:18:00.0", "numa_node": 0}]}
    recording.set_nvml(report, "ok")
    write_snapshot(recording, tmp_path / "s", host="n", captured_at="2026-11-21T22:40:00Z", boot_id=None, version="0")
    with open_snapshot(tmp_path / "s") as snapshot:
        assert snapshot.nvml() == (report, "ok")


# -- hostile and malformed snapshots --------------------------------------------------------

META = json.dumps({"format": "netdoctor.snapshot/1", "host": "n", "captured_at": "2026-11-21T22:40:00Z",
                   "netdoctor": "0.1.0"}).encode()


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


HOSTILE = {
    "dotdot": ([_file("snapshot.json", META), _file("sys/../../evil")], "contains '..'"),
    "absolute": ([_file("snapshot.json", META), _file("/tmp/netdoctor-evil")], "absolute path"),
    "symlink-out": ([_file("snapshot.json", META), _special("sys/class", tarfile.SYMTYPE, "../../../etc")],
                    "leaves the snapshot"),
    "symlink-absolute": ([_file("snapshot.json", META), _special("sys/class", tarfile.SYMTYPE, "/etc")], "absolute"),
    "write-through-link": ([_file("snapshot.json", META), _special("sys", tarfile.SYMTYPE, "."),
                            _file("sys/sys/x")], "non-directory"),
    "hardlink-out": ([_file("snapshot.json", META), _special("sys/x", tarfile.LNKTYPE, "../etc/passwd")], "leaves the snapshot"),
    "device": ([_file("snapshot.json", META), _special("sys/null", tarfile.CHRTYPE)], "device, FIFO"),
    "fifo": ([_file("snapshot.json", META), _special("sys/pipe", tarfile.FIFOTYPE)], "device, FIFO"),
    "duplicate": ([_file("snapshot.json", META), _file("snapshot.json", META)], "appears twice"),
    "bad-json": ([_file("snapshot.json", b"{not json")], "not valid JSON"),
    "not-utf8": ([_file("snapshot.json", b"\xff\xfe{}")], "not UTF-8"),
    "wrong-format": ([_file("snapshot.json", json.dumps({"format": "sosreport/1"}).encode())], "format is 'sosreport/1'"),
    "no-meta": ([_file("sys/class/net/eth0/mtu", b"1500")], "no snapshot.json"),
    "bad-time": ([_file("snapshot.json", META.replace(b"2026-11-21T22:40:00Z", b"yesterday"))], "not an ISO 8601"),
    "bad-status": ([_file("snapshot.json", META), _file("commands/ibstat.status", b"maybe")], "expected an exit status"),
    "bad-nvml": ([_file("snapshot.json", META), _file("nvml.json", b"[1, 2]")], "must hold a JSON object"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archive_refused(tmp_path: Path, case: str) -> None:
    members, message = HOSTILE[case]
    archive = _archive(tmp_path / f"{case}.tar.gz", members)
    with pytest.raises(SnapshotError, match=message):
        open_snapshot(archive)
    assert not Path("/tmp/netdoctor-evil").exists()
    assert not (tmp_path / "evil").exists()


def test_huge_member_refused_before_reading_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import netdoctor.host.snapshot_limits as limits

    monkeypatch.setattr(limits, "MAX_MEMBER_BYTES", 1000)
    archive = _archive(tmp_path / "huge.tar.gz", [_file("snapshot.json", META), _file("sys/big", b"z" * 5000)])
    with pytest.raises(SnapshotError, match="5000 bytes, more than the 1000-byte limit"):
        open_snapshot(archive)


def test_too_many_members_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import netdoctor.host.snapshot_limits as limits

    monkeypatch.setattr(limits, "MAX_MEMBERS", 10)
    archive = _archive(tmp_path / "many.tar.gz", [_file("snapshot.json", META)] + [_file(f"sys/f{i}") for i in range(20)])
    with pytest.raises(SnapshotError, match="more than 10 members"):
        open_snapshot(archive)


def test_truncated_gzip_refused(tmp_path: Path) -> None:
    whole = _archive(tmp_path / "whole.tar.gz", [_file("snapshot.json", META), _file("sys/a", os.urandom(200_000))])
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(SnapshotError, match="truncated or corrupt"):
        open_snapshot(cut)
    garbage = tmp_path / "garbage.tgz"
    garbage.write_bytes(gzip.compress(b"this is not a tar archive at all" * 100))
    with pytest.raises(SnapshotError, match="not a readable tar archive"):
        open_snapshot(garbage)


def test_directory_snapshot_with_escaping_link_refused_on_read(tmp_path: Path) -> None:
    root = tmp_path / "snap"
    (root / "sys/class/net/eth0").mkdir(parents=True)
    (root / "snapshot.json").write_bytes(META)
    (root / "sys/class/net/eth0/mtu").symlink_to("../../../../../outside")
    (tmp_path / "outside").write_text("9000")
    with open_snapshot(root) as snapshot:
        with pytest.raises(SnapshotError, match="climbs out"):
            snapshot.sys.read("class/net/eth0/mtu")


def test_directory_snapshot_with_linked_metadata_refused(tmp_path: Path) -> None:
    root = tmp_path / "snap"
    root.mkdir()
    (tmp_path / "meta.json").write_bytes(META)
    (root / "snapshot.json").symlink_to(tmp_path / "meta.json")
    with pytest.raises(SnapshotError, match="symbolic link"):
        open_snapshot(root)


def test_archive_with_top_level_directory_and_in_root_links(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "nested.tgz", [
        _file("node017/snapshot.json", META),
        _file("node017/sys/bus/pci/devices/0000:18:00.0/numa_node", b"1\n"),
        _special("node017/sys/class/infiniband/mlx5_0/device", tarfile.SYMTYPE, "../../../bus/pci/devices/0000:18:00.0"),
        _file("node017/commands/ibstat.out", b"CA 'mlx5_0'\n"),
    ])
    with open_snapshot(archive) as snapshot:
        assert snapshot.sys.read("class/infiniband/mlx5_0/device/numa_node") == "1"
        assert snapshot.sys.link_name("class/infiniband/mlx5_0/device") == "0000:18:00.0"
        result = snapshot.run([CommandSpec("ibstat", ("ibstat",))])["ibstat"]
        # NAME.out without NAME.status: a run that succeeded.
        assert (result.state, result.stdout) == (CommandState.OK, "CA 'mlx5_0'\n")


def test_missing_snapshot_path(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="does not exist"):
        open_snapshot(tmp_path / "nope.tar.gz")


def test_capture_of_this_machines_real_sys_reads_back_the_same(tmp_path: Path) -> None:
    live = LiveSource(record=True)
    seen = {
        "netdevs": live.netdevs(),
        "net": live.sys.listdir("class/net"),
        "devices": {name: live.sys.link_name(f"class/net/{name}/device") for name in live.sys.listdir("class/net")},
        "pci": {address: live.sys.read(f"bus/pci/devices/{address}/class")
                for address in live.sys.listdir("bus/pci/devices")[:5]},
        "modules": live.sys.is_dir("module/nvidia_peermem"),
    }
    assert live.recording is not None
    write_snapshot(live.recording, tmp_path / "real.tgz", host=live.host, captured_at=live.captured_at,
                   boot_id=live.boot_id, version="0.1.0")
    with open_snapshot(tmp_path / "real.tgz") as snapshot:
        again = {
            "netdevs": snapshot.netdevs(),
            "net": snapshot.sys.listdir("class/net"),
            "devices": {name: snapshot.sys.link_name(f"class/net/{name}/device") for name in snapshot.sys.listdir("class/net")},
            "pci": {address: snapshot.sys.read(f"bus/pci/devices/{address}/class")
                    for address in snapshot.sys.listdir("bus/pci/devices")[:5]},
            "modules": snapshot.sys.is_dir("module/nvidia_peermem"),
        }
        assert snapshot.boot_id == live.boot_id
    assert again == seen
    assert seen["net"] and any(value is not None for value in seen["pci"].values())
