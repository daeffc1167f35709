"""The zipapp's start: unpack the archive once into a cache directory and run from there,
so code that reads its own data files by path (rule packs, examples) works as when installed.

Imported by the archive's __main__.py once the interpreter is new enough.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import sys
import tempfile
import zipfile


def _cache_root() -> str:
    configured = os.environ.get("NETDOCTOR_PYZ_CACHE")
    if configured:
        return configured
    if os.geteuid() == 0:
        return "/var/cache/netdoctor"
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "netdoctor")


def _trusted(path: str, owners: tuple[int, ...] | None = None) -> bool:
    # Never run code from a directory someone else could have written: a real directory
    # (not a symlink), owned by us (the cache root: or root), not group/other-writable.
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid in (owners or (os.geteuid(),))
            and not info.st_mode & 0o022)


def _ready(target: str) -> bool:
    return _trusted(target) and os.path.isfile(os.path.join(target, ".complete"))


def _extract(archive: str, directory: str) -> None:
    mask = os.umask(0o022)
    try:
        os.chmod(directory, 0o755)
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(directory)
        open(os.path.join(directory, ".complete"), "w").close()
    finally:
        os.umask(mask)


def _private(archive: str, staging: str | None = None) -> str:
    # A fresh directory only this process knows, removed when it exits.
    if staging is None:
        staging = tempfile.mkdtemp(prefix="netdoctor-pyz-")
        _extract(archive, staging)
    atexit.register(shutil.rmtree, staging, True)
    return staging


def _unpacked(archive: str, build_id: str) -> str:
    root = _cache_root()
    target = os.path.join(root, f"pyz-{build_id}")
    try:
        os.makedirs(root, mode=0o755, exist_ok=True)
    except OSError:
        return _private(archive)
    if not _trusted(root, (os.geteuid(), 0)):
        print(f"netdoctor: not using cache {root}: not a directory owned by this user or root, or writable by "
              "others; unpacking privately", file=sys.stderr)
        return _private(archive)
    if _ready(target):
        return target
    try:
        staging = tempfile.mkdtemp(prefix=".unpack-", dir=root)
    except OSError:
        return _private(archive)
    _extract(archive, staging)
    try:
        os.rename(staging, target)
    except OSError:
        # Another run unpacked it first, or something else holds the name: use it only
        # if it is complete and trusted, else run from our own copy.
        if _ready(target):
            shutil.rmtree(staging, ignore_errors=True)
            return target
        print(f"netdoctor: not using {target}: incomplete, not owned by this user, or writable by others "
              "(remove it); unpacking privately", file=sys.stderr)
        return _private(archive, staging)
    return target


def run(build_id: str) -> None:
    archive = os.path.dirname(os.path.abspath(__file__))
    directory = _unpacked(archive, build_id)
    sys.path[:] = [directory] + [entry for entry in sys.path if os.path.abspath(entry or ".") != archive]
    from netdoctor.cli import main

    main()
