"""Files netdoctor writes as root (`-o`, `--state`, `capture -o`) and the state file it reads back.

netdoctor runs as root in prologs and timers, often with paths under directories other
users can write (`/tmp`, a shared scratch). Everything here works on descriptors so that
nothing can be swapped between a check and a use:

* a new file is built as a temporary file beside the target (`O_EXCL`, mode set with
  `fchmod` on its descriptor, never `chmod` by name), fsync'd and renamed over the
  target; a symbolic link at the target is replaced, never written through;
* a FIFO or character device (`/dev/null`, `/dev/stdout`, a terminal) the operator names
  is written through, never replaced, but opened non-blocking and given up at the deadline,
  so a FIFO without a reader cannot hang the run;
* in a directory others can write, a link into a device, a FIFO or another user's file,
  and a device or FIFO another user put there, are refused: they are how an attacker
  redirects a root write (`UnsafePath`, an OSError, so callers report "cannot write X: why").
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import select
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, TextIO

# Waiting for a FIFO's reader when the caller names no deadline (the default --deadline).
DEFAULT_WAIT_S = 10.0
# Even a run that has used its whole budget gets this long to hand its report to a reader.
MINIMUM_WAIT_S = 0.5
_POLL_S = 0.05


class UnsafePath(OSError):
    """A path netdoctor refuses to write or read (planted link, device, another user's FIFO)."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(errno.EPERM, why, str(path))


def others_can_write(directory: Path) -> bool:
    """True when a user other than root and us may create or replace entries in `directory`."""
    try:
        info = os.stat(directory)
    except OSError:
        return False
    return bool(info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) or info.st_uid not in (0, os.geteuid())


def _foreign(info: os.stat_result) -> bool:
    return info.st_uid not in (0, os.geteuid())


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def inspect_target(path: Path) -> os.stat_result | None:
    """What a write to `path` would reach (following a link); None when nothing is there.

    Raises UnsafePath when the write could be redirected: in a directory others can write,
    a link into anything but our own regular file, or a device/FIFO another user owns;
    anywhere, a block device or socket (never a place for a report).
    """
    try:
        entry = os.lstat(path)
    except FileNotFoundError:
        return None
    try:
        reached = os.stat(path)
    except FileNotFoundError:
        return None if stat.S_ISLNK(entry.st_mode) else entry   # a dangling link is replaced
    shared = others_can_write(path.parent)
    if stat.S_ISLNK(entry.st_mode) and shared and (not stat.S_ISREG(reached.st_mode) or _foreign(reached)):
        owner = f" of uid {reached.st_uid}" if _foreign(reached) else ""
        raise UnsafePath(path, f"a symbolic link to {_kind(reached.st_mode)}{owner} in a directory other users can "
                               "write; refusing to follow it")
    if stat.S_ISBLK(reached.st_mode) or stat.S_ISSOCK(reached.st_mode) or stat.S_ISDIR(reached.st_mode):
        raise UnsafePath(path, f"{_kind(reached.st_mode)}, not a file to write")
    if not stat.S_ISREG(reached.st_mode) and shared and _foreign(reached):
        raise UnsafePath(path, f"{_kind(reached.st_mode)} of uid {reached.st_uid} in a directory other users can "
                               "write; refusing to write to it")
    return reached


def atomic_write(path: Path | str, data: bytes | str, mode: int = 0o644, *, deadline: float | None = None) -> None:
    """Write `data` to `path` so readers see the old file or the whole new one, never a part.

    A FIFO or character device at `path` (checked by inspect_target) is written through,
    giving up at `deadline` (monotonic; default DEFAULT_WAIT_S from now) when no reader
    takes it; everything else is replaced through a temporary file.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    reached = inspect_target(target)
    if reached is not None and (not stat.S_ISREG(reached.st_mode) or _names_a_descriptor(target)):
        wait_until = time.monotonic() + DEFAULT_WAIT_S if deadline is None else deadline
        write_through(target, payload, max(wait_until, time.monotonic() + MINIMUM_WAIT_S),
                      regular=stat.S_ISREG(reached.st_mode))
        return
    with replacement(target, mode) as handle:
        handle.write(payload)


@contextlib.contextmanager
def replacement(path: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """A binary handle whose content replaces `path` atomically when the block ends without error.

    The temporary file lives beside the target (same filesystem, so the rename is atomic);
    mkstemp opens it with O_EXCL, and its mode is set on the descriptor. On error it is
    removed and the old file stays.
    """
    inspect_target(path)
    if os.path.lexists(path) and _names_a_descriptor(path):
        raise UnsafePath(path, "the name of an open descriptor; it is written through or not at all, never replaced")
    import tempfile   # only where a file is written: ~5 ms of imports otherwise

    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _names_a_descriptor(path: Path) -> bool:
    """`/dev/stdout`, `/dev/fd/1`, `/proc/self/fd/1`: names of an open descriptor, whatever it is.

    Written through even when the descriptor is a regular file (`-o /dev/stdout >> file`),
    appended as the shell opened it: replacing the name would put a file in /dev in place
    of the link.
    """
    parent = os.path.realpath(path.parent)
    return parent == "/dev" and stat.S_ISLNK(os.lstat(path).st_mode) or parent.startswith("/proc/")


def write_through(path: Path, payload: bytes, wait_until: float, *, regular: bool = False) -> None:
    """Write to a FIFO or character device (a regular file only where `regular`: a descriptor's
    name) without ever blocking past `wait_until`."""
    descriptor = _open_nonblocking(path, os.O_WRONLY | (os.O_APPEND if regular else 0), wait_until)
    try:
        reached = os.fstat(descriptor)
        if (stat.S_ISREG(reached.st_mode) and not regular) or stat.S_ISBLK(reached.st_mode):
            raise UnsafePath(path, f"became {_kind(reached.st_mode)} while it was opened; refusing to write")
        view = memoryview(payload)
        while view:
            try:
                view = view[os.write(descriptor, view):]
            except BlockingIOError:
                left = wait_until - time.monotonic()
                if left <= 0:
                    raise TimeoutError(errno.ETIMEDOUT, "its reader did not take the output before the deadline",
                                       str(path)) from None
                select.select([], [descriptor], [], left)
    finally:
        os.close(descriptor)


def _open_nonblocking(path: Path, flags: int, wait_until: float) -> int:
    """open(O_NONBLOCK); a FIFO without a reader (ENXIO) is retried until `wait_until`."""
    while True:
        try:
            return os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError as error:
            if error.errno != errno.ENXIO or time.monotonic() >= wait_until:
                if error.errno == errno.ENXIO:
                    raise TimeoutError(errno.ETIMEDOUT, "a FIFO that no process read before the deadline",
                                       str(path)) from None
                raise
            time.sleep(_POLL_S)


def read_regular(path: Path, max_bytes: int) -> bytes | None:
    """The bytes of the regular file at `path`; None when it is absent.

    Opened non-blocking (a FIFO never blocks the read) and checked on the descriptor:
    raises UnsafePath for what inspect_target refuses, for anything but a regular file,
    and for another user's file in a directory others can write (its content is theirs);
    raises ValueError when it holds more than `max_bytes`.
    """
    read = read_regular_with_info(path, max_bytes)
    return None if read is None else read[0]


def read_regular_with_info(path: Path, max_bytes: int) -> tuple[bytes, os.stat_result] | None:
    """read_regular, with the file's stat taken on the descriptor it was read from (owner
    and mode of exactly the file read, whatever was renamed over the path meanwhile)."""
    if inspect_target(path) is None:
        return None
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePath(path, f"{_kind(info.st_mode)}, not a regular file")
        if _foreign(info) and others_can_write(path.parent):
            raise UnsafePath(path, f"owned by uid {info.st_uid} in a directory other users can write; not trusted")
        if info.st_size > max_bytes:
            raise ValueError(f"{info.st_size} bytes, more than the {max_bytes} allowed")
        chunks, size = [], 0
        while chunk := os.read(descriptor, min(1 << 20, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise ValueError(f"more than the {max_bytes} bytes allowed")
        return b"".join(chunks), info
    finally:
        os.close(descriptor)


def open_lock_file(path: Path) -> int:
    """A descriptor of the lock file at `path`, created 0644 if absent; never through a link.

    O_NOFOLLOW: a link planted at `STATE.lock` would otherwise make root create a file
    wherever it points. The descriptor must be a regular file (a FIFO would block).
    """
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError:
        # ELOOP, or EACCES where the kernel protects links in sticky directories.
        if os.path.islink(path):
            raise UnsafePath(path, "a symbolic link; a lock file is never followed") from None
        raise
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePath(path, f"{_kind(info.st_mode)}, not a lock file")
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def read_prefix(path: Path, max_bytes: int) -> tuple[bytes, bool]:
    """At most `max_bytes` of the file at `path`, and whether it holds more: one small read
    where a text stream would cost three times as much (ten thousand report files)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        chunks, size = [], 0
        while size <= max_bytes and (chunk := os.read(descriptor, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(descriptor)
    data = b"".join(chunks)
    return data[:max_bytes], size > max_bytes


def open_text(path: Path) -> TextIO:
    """The file at `path` as text whose lines end only at "\n" (a lone CR is data, as a parallel
    shell cut the lines), undecodable bytes replaced. For large inputs read as a stream."""
    return path.open("r", encoding="utf-8", errors="replace", newline="\n")


class _Span(io.RawIOBase):
    """Bytes `start` to `stop` (None: to its end, however long it grows) of an open file."""

    def __init__(self, descriptor: int, start: int, stop: int | None) -> None:
        super().__init__()
        self._descriptor, self._position, self._stop = descriptor, start, stop

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        wanted = len(buffer) if self._stop is None else min(len(buffer), self._stop - self._position)
        data = os.pread(self._descriptor, wanted, self._position) if wanted > 0 else b""
        buffer[:len(data)] = data
        self._position += len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self._descriptor)
        super().close()


class _TellingSpan(_Span):
    """A `_Span` whose text stream's `tell()` gives the file offset of what it has read so far
    (TextIOWrapper keeps what it needs for that only over a stream that says it is seekable, at
    some cost; `tell` is all it asks of it: `seek` stays unsupported)."""

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position


def open_span(descriptor: int, start: int, stop: int | None = None, *, telling: bool = False) -> TextIO:
    """Bytes `start` to `stop` of the open file `descriptor` (not moved; its own copy is closed with
    the stream) as `open_text` reads a file; `start` must be a line start: the text is then that
    of the whole file's lines from there. `telling`: the stream's `tell()` gives, at a line end,
    the file offset after that line."""
    span = (_TellingSpan if telling else _Span)(os.dup(descriptor), start, stop)
    return io.TextIOWrapper(io.BufferedReader(span, 1 << 20), encoding="utf-8", errors="replace", newline="\n")


def regular_size(descriptor: int) -> int:
    """The size of the open file `descriptor`, or -1 where it is not a regular file (a pipe)."""
    info = os.fstat(descriptor)
    return info.st_size if stat.S_ISREG(info.st_mode) else -1


def read_at(descriptor: int, offset: int, size: int) -> bytes:
    """At most `size` bytes of the open file `descriptor` from `offset` (its position not moved)."""
    return os.pread(descriptor, size, offset)
