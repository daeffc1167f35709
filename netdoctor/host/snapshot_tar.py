"""Reading a snapshot archive (`.tar.gz`, or any tar) as hostile input.

Members are validated one by one by our own rules (not the standard library's
`data_filter`, which 3.10 before 3.10.12 and 3.11 before 3.11.4 lack) and written by our own code into a
private directory: only regular files, directories and links; no `..`, no absolute
names, no links that leave the snapshot, no device files, no sparse files; names, depth,
sizes and counts capped. The archive's modes, owners and times are never applied.
Extended headers (PAX, GNU long names) are bounded before tarfile holds them in memory.
The size and count limits are the snapshot module's (one set for directories and archives).
"""

from __future__ import annotations

import io
import lzma
import os
import stat
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

from netdoctor.errors import SnapshotError
from netdoctor.host import snapshot_limits as limits
from netdoctor.host.snapshot_files import read_regular as _read_regular

# Limits on an archive's metadata, so a hostile tar costs bounded memory and never a
# RecursionError: a PAX or GNU long-name header holds a path and a few keys (never
# megabytes); sysfs paths in a snapshot are a dozen levels deep.
MAX_READ_BYTES = 1024 * 1024          # the most tarfile may ask of the stream in one read
MAX_NAME_CHARS = 4096                 # PATH_MAX
MAX_METADATA_BYTES = 32 * 1024 * 1024  # names, link targets and PAX keys of all members together
STREAM_SLACK_BYTES = 256 * 1024 * 1024   # headers and padding beyond the data itself
_WRITE_CHUNK = 256 * 1024


def _stream_limit() -> int:
    return limits.MAX_TOTAL_BYTES + STREAM_SLACK_BYTES


def _member_parts(name: str, archive: Path) -> list[str]:
    if name.startswith("/"):
        raise SnapshotError(f"snapshot {archive}: member {name[:200]!r} has an absolute path")
    if "\x00" in name:
        raise SnapshotError(f"snapshot {archive}: member name contains a NUL byte")
    if len(name) > MAX_NAME_CHARS:
        raise SnapshotError(f"snapshot {archive}: a member name is {len(name)} characters long, "
                            f"more than {MAX_NAME_CHARS}")
    parts = [part for part in PurePosixPath(name).parts if part not in ("", ".")]
    if ".." in parts:
        raise SnapshotError(f"snapshot {archive}: member {name[:200]!r} contains '..'")
    if len(parts) > limits.MAX_DEPTH:
        raise SnapshotError(f"snapshot {archive}: member {name[:80]!r}... is {len(parts)} levels deep, "
                            f"more than {limits.MAX_DEPTH}")
    return parts


def _safe_directory(root: Path, parts: list[str], archive: Path) -> Path:
    """Create (or walk) directories under root, refusing to pass through anything but a real directory."""
    current = root
    for part in parts:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current, 0o700)
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise SnapshotError(f"snapshot {archive}: {'/'.join(parts)} passes through a non-directory member")
    return current


class _BoundedStream(io.RawIOBase):
    """The decompressed archive as tarfile reads it, refusing any one read larger than
    MAX_READ_BYTES and any position past _stream_limit().

    tarfile reads a PAX or GNU long-name header's payload in one read of its full
    declared size; this makes a 600 MB header an error before it is held in memory.
    Member data is read in chunks below the limit (_WRITE_CHUNK); skipped data is sought
    over, which the decompressor does in small steps.
    """

    def __init__(self, raw: Any, archive: Path) -> None:
        super().__init__()
        self._raw = raw
        self._archive = archive

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > MAX_READ_BYTES:
            raise SnapshotError(f"snapshot {self._archive}: a tar header declares {size} bytes of extended "
                                f"header (PAX or GNU long name), more than the {MAX_READ_BYTES}-byte limit")
        if self._raw.tell() + size > _stream_limit():
            raise SnapshotError(f"snapshot {self._archive}: more than {_stream_limit()} bytes uncompressed")
        return bytes(self._raw.read(size))

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self._raw.tell() + offset if whence == io.SEEK_CUR else None
        if target is None or target > _stream_limit():
            raise SnapshotError(f"snapshot {self._archive}: more than {_stream_limit()} bytes uncompressed")
        return int(self._raw.seek(target))

    def tell(self) -> int:
        return int(self._raw.tell())


def _decompressed(archive: Path, handle: Any) -> Any:
    """The archive's tar stream: gzip, bzip2, xz or plain, by its magic bytes."""
    magic = handle.read(6)
    handle.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        import gzip

        return gzip.GzipFile(fileobj=handle, mode="rb")
    if magic.startswith(b"BZh"):
        import bz2

        return bz2.BZ2File(handle)
    if magic.startswith(b"\xfd7zXZ"):
        return lzma.LZMAFile(handle)
    return handle


def _check_member(member: tarfile.TarInfo, parts: list[str], archive: Path) -> None:
    """Our own member rules (not the standard library's data_filter, which Python 3.10
    before 3.10.12 and 3.11 before 3.11.4 lack): only files, directories and links; no sparse files; sizes
    capped. Modes, owners and times in the archive are never applied (files 0600,
    directories 0700)."""
    name = "/".join(parts)
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise SnapshotError(f"snapshot {archive}: member {name!r} is a device, FIFO or other special file")
    if member.issparse():
        raise SnapshotError(f"snapshot {archive}: member {name!r} is a sparse file")
    if member.size > limits.MAX_MEMBER_BYTES:
        raise SnapshotError(f"snapshot {archive}: member {name!r} is {member.size} bytes, "
                            f"more than the {limits.MAX_MEMBER_BYTES}-byte limit")
    if member.issym() or member.islnk():
        _check_link(member, parts, archive)


def _metadata_bytes(member: tarfile.TarInfo) -> int:
    return len(member.name) + len(member.linkname) + sum(
        len(key) + len(value) for key, value in member.pax_headers.items())


def extract_tar(archive: Path, destination: Path) -> None:
    """Extract a snapshot archive member by member, validating each before it touches the disk."""
    total = count = metadata = 0
    files: set[tuple[str, ...]] = set()
    try:
        with open(archive, "rb") as handle, _decompressed(archive, handle) as stream:
            try:
                tar = tarfile.open(fileobj=_BoundedStream(stream, archive), mode="r:")
            except tarfile.ReadError as error:
                raise SnapshotError(f"snapshot {archive} is not a snapshot directory and not a readable tar archive "
                                    f"({str(error).splitlines()[0].rstrip(':') or 'unreadable'})") from error
            with tar:
                for member in tar:
                    count += 1
                    if count > limits.MAX_MEMBERS:
                        raise SnapshotError(f"snapshot {archive}: more than {limits.MAX_MEMBERS} members")
                    metadata += _metadata_bytes(member)
                    if metadata > MAX_METADATA_BYTES:
                        raise SnapshotError(f"snapshot {archive}: more than {MAX_METADATA_BYTES} bytes of member "
                                            "names and extended headers")
                    tar.members.clear()   # tarfile would keep every header; we look each up ourselves
                    parts = _member_parts(member.name, archive)
                    if not parts:
                        continue
                    _check_member(member, parts, archive)
                    total += member.size
                    if total > limits.MAX_TOTAL_BYTES:
                        raise SnapshotError(f"snapshot {archive}: more than {limits.MAX_TOTAL_BYTES} bytes in all")
                    _write_member(tar, member, parts, destination, archive, files)
    except SnapshotError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError, UnicodeError, ValueError) as error:
        raise SnapshotError(f"snapshot {archive} is not a readable tar archive (truncated or corrupt): "
                            f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from error


def _check_link(member: tarfile.TarInfo, parts: list[str], archive: Path) -> None:
    target = member.linkname
    name = "/".join(parts)
    if not target or target.startswith("/"):
        raise SnapshotError(f"snapshot {archive}: link {name!r} -> {target[:200]!r} is absolute")
    if "\x00" in target or len(target) > MAX_NAME_CHARS:
        raise SnapshotError(f"snapshot {archive}: link {name!r} has a malformed target")
    # Symlink targets are relative to the link's directory; hard link targets to the archive root.
    base = parts[:-1] if member.issym() else []
    depth = len(base)
    for part in PurePosixPath(target).parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                raise SnapshotError(f"snapshot {archive}: link {name!r} -> {target[:200]!r} leaves the snapshot")
        elif part not in ("", "."):
            depth += 1


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, parts: list[str], destination: Path,
                  archive: Path, files: set[tuple[str, ...]]) -> None:
    """Write one checked member. `files` holds the regular files written so far: a hard
    link may only name one of them (never a path through a symbolic link)."""
    parent = _safe_directory(destination, parts[:-1], archive)
    target = parent / parts[-1]
    if member.isdir():
        _safe_directory(destination, parts, archive)
        return
    if os.path.lexists(target):
        raise SnapshotError(f"snapshot {archive}: member {'/'.join(parts)!r} appears twice")
    if member.issym():
        os.symlink(member.linkname, target)
        return
    if member.islnk():
        linked = tuple(_member_parts(member.linkname, archive))
        if linked not in files:
            raise SnapshotError(f"snapshot {archive}: hard link {'/'.join(parts)!r} points to no earlier file member")
        data = _read_regular(destination.joinpath(*linked), limits.MAX_MEMBER_BYTES, f"hard link target {member.linkname!r}")
        stream: io.BufferedIOBase | None = io.BytesIO(data or b"")  # type: ignore[assignment]
    else:
        stream = tar.extractfile(member)  # type: ignore[assignment]
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    files.add(tuple(parts))
    written = 0
    with os.fdopen(descriptor, "wb") as handle:
        while stream is not None:
            chunk = stream.read(_WRITE_CHUNK)
            if not chunk:
                break
            written += len(chunk)
            if written > limits.MAX_MEMBER_BYTES:
                raise SnapshotError(f"snapshot {archive}: member {'/'.join(parts)!r} is larger than its header says")
            handle.write(chunk)
