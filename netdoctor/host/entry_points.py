"""Whether any installed distribution declares entry points of a group, without importlib.metadata.

Every `check` asks this (are there third-party checks to load?), and importlib.metadata
costs ~20 ms to import and ~8 ms to walk on a Python with a hundred distributions
(benchmarks/results/check.md). Here each directory on sys.path is listed once and only
the `entry_points.txt` of its `*.dist-info` / `*.egg-info` directories are read, for the
group's section header. A distribution that declares the group is then loaded through
importlib.metadata as before, so a yes here costs nothing of what it did.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from netdoctor.host.files import read_regular

# entry_points.txt is a few lines; a larger one is left to importlib.metadata (engineering default).
MAX_ENTRY_POINTS_BYTES = 1024 * 1024
METADATA_SUFFIXES = (".dist-info", ".egg-info")


def declares_entry_points(group: str, path: Iterable[str] | None = None) -> bool:
    """True when a distribution on `path` (default sys.path) may declare entry points of `group`.

    Only a plain directory of `*.dist-info` / `*.egg-info` directories is answered here;
    anything else importlib.metadata would look into (a zip on sys.path, an `.egg` directory,
    a file that cannot be read or is refused as untrusted, one too large) answers True, and
    importlib.metadata then decides, as before."""
    header = f"[{group}]".encode()
    for entry in sys.path if path is None else path:
        directory = entry or "."
        if directory.lower().endswith(".egg"):
            return True
        try:
            with os.scandir(directory) as listing:
                names = [item.name for item in listing if item.name.lower().endswith(METADATA_SUFFIXES)]
        except NotADirectoryError:   # a zip (or another archive) on sys.path
            return True
        except OSError:              # gone, or not listable: importlib.metadata skips it too
            continue
        for name in names:
            try:
                data = read_regular(Path(directory, name, "entry_points.txt"), MAX_ENTRY_POINTS_BYTES)
            except (ValueError, OSError) as error:
                if isinstance(error, FileNotFoundError) or getattr(error, "errno", None) == errno.ENOTDIR:
                    continue
                return True          # too large, refused (UnsafePath) or unreadable: not decided here
            if data is not None and any(line.strip() == header for line in data.splitlines()):
                return True
    return False
