"""RootedSysTree: reads inside the root only, newline handling, odd files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from netdoctor.errors import SnapshotError
from netdoctor.host.sysfs import MAX_READ_BYTES, RootedSysTree, UnsafePathError

GPUD_SYSFS = Path(__file__).resolve().parent / "data" / "corpus" / "sysfs" / "leptonai-gpud__sys-class-infiniband-h100.0"


def _tree(root: Path) -> Path:
    port = root / "devices/pci0000:17/0000:17:01.0/0000:18:00.0/infiniband/mlx5_0/ports/1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("400 Gb/sec (4X NDR)")          # no newline, like gpud's fixtures
    (port / "two_newlines").write_text("value\n\n")
    (port.parent.parent / "device").symlink_to("../../../0000:18:00.0")
    (root / "devices/pci0000:17/0000:17:01.0/0000:18:00.0/numa_node").write_text("1\n")
    (root / "class/infiniband").mkdir(parents=True)
    (root / "class/infiniband/mlx5_0").symlink_to("../../devices/pci0000:17/0000:17:01.0/0000:18:00.0/infiniband/mlx5_0")
    return root


def test_reads_through_links_and_strips_one_newline(tmp_path: Path) -> None:
    tree = RootedSysTree(_tree(tmp_path))
    assert tree.strict is True
    assert tree.read("class/infiniband/mlx5_0/ports/1/state") == "4: ACTIVE"
    assert tree.read("class/infiniband/mlx5_0/ports/1/rate") == "400 Gb/sec (4X NDR)"
    assert tree.read("class/infiniband/mlx5_0/ports/1/two_newlines") == "value\n"
    assert tree.read("class/infiniband/mlx5_0/device/numa_node") == "1"
    assert tree.link_name("class/infiniband/mlx5_0/device") == "0000:18:00.0"
    assert tree.link_name("class/infiniband/mlx5_0/ports/1/state") is None
    assert tree.listdir("class/infiniband") == ["mlx5_0"]
    assert tree.listdir("class/infiniband/mlx5_0/ports/1") == ["rate", "state", "two_newlines"]
    assert tree.is_dir("class/infiniband/mlx5_0/ports") is True
    assert tree.is_dir("class/infiniband/mlx5_0/ports/1/state") is False
    assert tree.exists("class/infiniband/mlx5_0/ports/1/state") is True
    # `..` after a link climbs the physical tree, like the kernel: from mlx5_0 to the PCI function.
    assert tree.read("class/infiniband/mlx5_0/../../numa_node") == "1"


def test_missing_things_are_none_or_empty(tmp_path: Path) -> None:
    tree = RootedSysTree(_tree(tmp_path))
    assert tree.read("class/infiniband/mlx5_9/ports/1/state") is None
    assert tree.read("class/infiniband/mlx5_0/ports") is None             # a directory is not a file
    assert tree.listdir("class/nothing") == []
    assert tree.listdir("class/infiniband/mlx5_0/ports/1/state") == []
    assert tree.exists("module/nvidia_peermem") is False
    assert tree.is_dir("module/nvidia_peermem") is False
    assert tree.link_name("class/net/eth0/device") is None
    assert RootedSysTree(tmp_path / "no-such-root").read("class/net/eth0/mtu") is None


def test_caller_paths_cannot_leave_the_root(tmp_path: Path) -> None:
    tree = RootedSysTree(_tree(tmp_path / "sys"))
    (tmp_path / "secret").write_text("top secret")
    for path in ("../secret", "class/../../secret", "/etc/passwd", "class/infiniband/mlx5_0/../../../../../secret"):
        with pytest.raises(UnsafePathError):
            tree.read(path)
    assert issubclass(UnsafePathError, SnapshotError)


@pytest.mark.parametrize("target", ["../../../../secret", "../../../../../../../../secret"])
def test_relative_link_escape_refused_in_strict_mode(tmp_path: Path, target: str) -> None:
    root = tmp_path / "snap" / "sys"
    (root / "class/net/eth0").mkdir(parents=True)
    (tmp_path / "snap/secret").write_text("secret")
    (tmp_path / "secret").write_text("secret")
    (root / "class/net/eth0/mtu").symlink_to(target)
    tree = RootedSysTree(root)
    with pytest.raises(SnapshotError, match="climbs out of the root"):
        tree.read("class/net/eth0/mtu")
    with pytest.raises(SnapshotError):
        tree.link_name("class/net/eth0/mtu")


def test_absolute_link_refused_in_strict_mode(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    (root / "class/net").mkdir(parents=True)
    (root / "class/net/eth0").symlink_to("/etc")
    (root / "class/net/eth1").symlink_to(str(root / "class"))     # absolute even when it points inside
    tree = RootedSysTree(root)
    with pytest.raises(SnapshotError, match="is absolute"):
        tree.read("class/net/eth0/hostname")
    with pytest.raises(SnapshotError, match="is absolute"):
        tree.listdir("class/net/eth1")
    with pytest.raises(SnapshotError, match="is absolute"):
        tree.exists("class/net/eth0")


def test_live_mode_reroots_absolute_links_and_hides_escapes(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    (root / "devices/virtual/net/lo").mkdir(parents=True)
    (root / "devices/virtual/net/lo/mtu").write_text("65536\n")
    (root / "class/net").mkdir(parents=True)
    (root / "class/net/lo").symlink_to(str(root / "devices/virtual/net/lo"))
    (root / "class/net/out").symlink_to("/etc")
    tree = RootedSysTree(root, strict=False)
    assert tree.read("class/net/lo/mtu") == "65536"
    assert tree.read("class/net/out/hostname") is None
    assert tree.exists("class/net/out/hostname") is False


def test_link_loop_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    root.mkdir()
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")
    with pytest.raises(SnapshotError, match="too many levels of links"):
        RootedSysTree(root).read("a/x")
    assert RootedSysTree(root, strict=False).read("a/x") is None


def test_fifo_and_unreadable_and_huge_files(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    root.mkdir()
    os.mkfifo(root / "fifo")                  # opening must not block, reading gives None
    (root / "locked").write_text("x\n")
    (root / "locked").chmod(0)
    (root / "huge").write_bytes(b"y" * (MAX_READ_BYTES + 1000))
    (root / "binary").write_bytes(b"\xff\xfe ok\n")
    tree = RootedSysTree(root)
    assert tree.read("fifo") is None
    if os.geteuid() != 0:                    # root reads mode-0 files anyway
        assert tree.read("locked") is None
    # Over the budget: unreadable, never cut (a cut value would be parsed as if whole).
    assert tree.read("huge") is None
    (root / "full").write_bytes(b"z" * MAX_READ_BYTES)
    assert len(tree.read("full") or "") == MAX_READ_BYTES
    assert tree.read("binary") == "\ufffd\ufffd ok"


def test_gpud_fixture_without_trailing_newlines() -> None:
    tree = RootedSysTree(GPUD_SYSFS)
    assert tree.listdir("")[:2] == ["mlx5_0", "mlx5_1"]
    assert tree.read("mlx5_0/ports/1/rate") == "400 Gb/sec (4X NDR)"
    assert tree.read("mlx5_0/ports/1/state") == "4: ACTIVE"
    assert tree.read("mlx5_1/ports/1/counters/link_downed") == "255"


def test_live_sys_reads() -> None:
    tree = RootedSysTree("/sys")
    assert tree.strict is False
    names = tree.listdir("class/net")
    assert "lo" in names
    assert tree.read("class/net/lo/mtu") is not None and int(tree.read("class/net/lo/mtu") or 0) > 0
    assert tree.read("class/net/lo/type") == "772"
