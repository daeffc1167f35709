"""What a snapshot may hold, whether an archive or a directory: sizes, counts, depth, kinds.

The same limits hold for `open_snapshot` on a directory (`check_directory`, before anything
is read) and for the archive extraction (`snapshot_tar`), so a hostile snapshot costs a
bounded amount of time and memory either way.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from netdoctor.errors import SnapshotError

MAX_MEMBER_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 512 * 1024 * 1024
MAX_MEMBERS = 100_000
MAX_DEPTH = 64   # directory levels; sysfs paths in a snapshot are a dozen deep


def check_directory(root: Path) -> None:
    """A snapshot directory holds what an archive may: regular files, directories, symlinks,
    within the same size and count limits; a device, FIFO or socket is refused, as in a tar.

    os.scandir with plain strings: a snapshot holds thousands of entries (the PCIe tree,
    config spaces), and this walk runs before every `check --snapshot`."""
    count = total = 0
    base = str(root)
    pending: list[tuple[str, int]] = [(base, 0)]
    while pending:
        directory, depth = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                count += 1
                if count > MAX_MEMBERS:
                    raise SnapshotError(f"snapshot {root}: more than {MAX_MEMBERS} entries")
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if depth + 1 >= MAX_DEPTH:
                        raise SnapshotError(f"snapshot {root}: directories nested more than {MAX_DEPTH} levels deep")
                    pending.append((entry.path, depth + 1))
                    continue
                info = entry.stat(follow_symlinks=False)
                if not stat.S_ISREG(info.st_mode):
                    raise SnapshotError(f"snapshot {root}: {os.path.relpath(entry.path, base)} is not a regular file, "
                                        "directory or link (device, FIFO or socket)")
                if info.st_size > MAX_MEMBER_BYTES:
                    raise SnapshotError(f"snapshot {root}: {os.path.relpath(entry.path, base)} is {info.st_size} "
                                        f"bytes, more than the {MAX_MEMBER_BYTES}-byte limit")
                total += info.st_size
                if total > MAX_TOTAL_BYTES:
                    raise SnapshotError(f"snapshot {root}: more than {MAX_TOTAL_BYTES} bytes in all")
