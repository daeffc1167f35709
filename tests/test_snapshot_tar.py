"""Hostile snapshot archives: extended-header bombs, deep nesting, member rules that do not
depend on the standard library's tar `data_filter` (absent before Python 3.10.12 and, in 3.11, before 3.11.4)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from netdoctor.errors import SnapshotError
from netdoctor.host.snapshot import open_snapshot

REPO = Path(__file__).resolve().parent.parent
META = json.dumps({"format": "netdoctor.snapshot/1", "host": "n", "captured_at": "2026-11-21T22:40:00Z",
                   "netdoctor": "0.1.0"}).encode()


def _header(name: str, size: int, kind: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.type = kind
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def extended_header_bomb(path: Path, kind: bytes, payload_bytes: int) -> Path:
    """A small .tar.gz whose first member's PAX (`x`) or GNU long-name (`L`) header holds
    `payload_bytes` of data, streamed through the compressor without holding it."""
    if kind == tarfile.XHDTYPE:   # one PAX record "LEN comment=aaa...\n", LEN counting itself
        length = len(" comment=") + payload_bytes + 1
        length += len(str(length + len(str(length))))
        head, tail, size = f"{length} comment=".encode(), b"\n", length
    else:                         # a GNU long name: NUL-terminated
        head, tail, size = b"", b"\0", payload_bytes + 1
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)   # 31: gzip framing
    chunk = b"a" * (1 << 20)
    with open(path, "wb") as out:
        out.write(compressor.compress(_header("././@LongLink", size, kind) + head))
        for start in range(0, payload_bytes, len(chunk)):
            out.write(compressor.compress(chunk[:min(len(chunk), payload_bytes - start)]))
        out.write(compressor.compress(tail + b"\0" * (-size % 512)))
        out.write(compressor.compress(_header("snapshot.json", len(META), tarfile.REGTYPE) + _padded(META)))
        out.write(compressor.compress(b"\0" * 1024) + compressor.flush())
    return path


PROBE_RSS = """
import re, sys
from netdoctor.errors import SnapshotError
from netdoctor.host.snapshot import open_snapshot
try:
    open_snapshot(sys.argv[1]).close()
    print("accepted")
except SnapshotError as error:
    print("refused:", error)
# VmHWM, not ru_maxrss: Linux carries the parent's peak across fork and exec into ru_maxrss.
print(int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) // 1024)
"""


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME], ids=["pax", "gnu-longname"])
def test_extended_header_bomb_refused_in_bounded_memory(tmp_path: Path, kind: bytes) -> None:
    bomb = extended_header_bomb(tmp_path / "bomb.tar.gz", kind, 200 * 1024 * 1024)
    assert bomb.stat().st_size < 1024 * 1024
    done = subprocess.run([sys.executable, "-c", PROBE_RSS, str(bomb)], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    verdict, peak_mib = done.stdout.strip().rsplit("\n", 1)
    assert verdict.startswith("refused:") and "extended header" in verdict, done.stdout + done.stderr
    # The interpreter with netdoctor imported is well under 100 MiB; holding the header would add 200+.
    assert int(peak_mib) < 150, done.stdout


def deep_archive(path: Path, levels: int) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("snapshot.json")
        info.size = len(META)
        tar.addfile(info, io.BytesIO(META))
        leaf = tarfile.TarInfo("sys/" + "d/" * levels + "f")
        leaf.size = 1
        tar.addfile(leaf, io.BytesIO(b"x"))
    return path


def test_deep_nesting_refused_with_a_message(tmp_path: Path) -> None:
    archive = deep_archive(tmp_path / "deep.tar.gz", 2000)
    with pytest.raises(SnapshotError, match="levels deep"):
        open_snapshot(archive)
    done = subprocess.run([sys.executable, "-m", "netdoctor", "check", "--no-probe", "--format", "json",
                           "--snapshot", str(archive)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 3
    assert "levels deep" in done.stderr and "Traceback" not in done.stderr and "RecursionError" not in done.stderr


def test_deep_directory_snapshot_refused(tmp_path: Path) -> None:
    root = tmp_path / "snap"
    (root / "sys").mkdir(parents=True)
    (root / "snapshot.json").write_bytes(META)
    deep = root / "sys"
    for _ in range(100):   # past the limit, and shallow enough for pytest's own tmp cleanup
        deep = deep / "d"
        deep.mkdir()
    with pytest.raises(SnapshotError, match="levels deep"):
        open_snapshot(root)


def test_ordinary_nesting_still_reads(tmp_path: Path) -> None:
    with open_snapshot(deep_archive(tmp_path / "ok.tar.gz", 20)) as source:
        assert source.host == "n"


def _members(path: Path, members: list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("snapshot.json")
        info.size = len(META)
        tar.addfile(info, io.BytesIO(META))
        for member in members:
            if isinstance(member, tuple):
                member[0].size = len(member[1])
                tar.addfile(member[0], io.BytesIO(member[1]))
            else:
                tar.addfile(member)
    return path


def _link(name: str, kind: bytes, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _sparse(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.GNUTYPE_SPARSE
    return info


HOSTILE = {
    # sys/a/up points at the root (allowed alone), sys/a/w through it above the root; a hard
    # link that names a path through them must not read a file outside the snapshot.
    "hardlink-through-symlinks": ([_link("sys/a/up", tarfile.SYMTYPE, "../.."),
                                   _link("sys/a/w", tarfile.SYMTYPE, "up/../.."),
                                   _link("sys/stolen", tarfile.LNKTYPE, "sys/a/w/etc/hostname")],
                                  "no earlier file member"),
    "hardlink-to-directory": ([tarfile.TarInfo("sys/dir"), _link("sys/x", tarfile.LNKTYPE, "sys")],
                              "no earlier file member"),
    "sparse": ([_sparse("sys/holes")], "sparse"),
    "block-device": ([_link("sys/sda", tarfile.BLKTYPE, "")], "device, FIFO"),
    "long-name": ([(tarfile.TarInfo("sys/" + "x" * 5000), b"x")], "characters long"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("with_filter", [True, False], ids=["stdlib-filter", "no-stdlib-filter"])
def test_member_rules_are_our_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str,
                                  with_filter: bool) -> None:
    if not with_filter:   # as on Python 3.10.0-3.10.11 and 3.11.0-3.11.3
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    members, message = HOSTILE[case]
    archive = _members(tmp_path / f"{case}.tar.gz", members)
    with pytest.raises(SnapshotError, match=message):
        open_snapshot(archive)


def test_hard_link_to_an_earlier_file_still_reads(tmp_path: Path) -> None:
    archive = _members(tmp_path / "ok.tar.gz", [(tarfile.TarInfo("sys/mtu"), b"4096\n"),
                                                _link("sys/mtu2", tarfile.LNKTYPE, "sys/mtu")])
    with open_snapshot(archive) as source:
        assert (source.directory / "sys" / "mtu2").read_bytes() == b"4096\n"


def test_archive_modes_are_never_applied(tmp_path: Path) -> None:
    setuid = tarfile.TarInfo("sys/tool")
    setuid.mode = 0o4777
    archive = _members(tmp_path / "modes.tar.gz", [(setuid, b"#!/bin/sh\n")])
    with open_snapshot(archive) as source:
        assert (source.directory / "sys" / "tool").stat().st_mode & 0o7777 == 0o600


def test_not_an_archive_says_what_it_is(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# a readme\n" * 100)
    with pytest.raises(SnapshotError) as caught:
        open_snapshot(readme)
    message = str(caught.value)
    assert "not a snapshot directory and not a readable tar archive" in message
    assert "\n" not in message and not message.rstrip().endswith(":")


def test_directory_holding_an_archive_gets_a_hint(tmp_path: Path) -> None:
    (tmp_path / "capture.tar.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(SnapshotError, match=r"pass the archive, e\.g\. --snapshot .*capture\.tar\.gz"):
        open_snapshot(tmp_path)
