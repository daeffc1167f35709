#!/usr/bin/env python3
"""Build netdoctor.pyz: one file an operator copies to every node (pdcp) and runs with python3.

    python3 packaging/build-zipapp.py [-o dist/netdoctor.pyz]

It holds netdoctor, netdoctor_plugins (plugins/), netdoctor_rules (rules/) and the pure-
Python dependencies, copied from the environment this script runs in (no network).
Compiled modules cannot be imported from a zip, so psutil (C) is left out: netdoctor
imports it lazily and works without it on `check --snapshot`; a node with python3-psutil
installed still gets it from its own site-packages. rich is not bundled: netdoctor
imports typer and structlog without it (plain help and tracebacks).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import shutil
import sys
import tempfile
import zipapp
from pathlib import Path, PurePosixPath

REPO = Path(__file__).resolve().parent.parent

# Pure-Python distributions bundled, with what they need at run time.
BUNDLED = (
    "typer", "click", "shellingham", "typing_extensions", "structlog", "ClusterShell", "nvidia-ml-py", "pyroute2",
)
# Compiled or not needed at run time: never copied even when a file list names them.
EXCLUDED_SUFFIXES = (".so", ".pyd", ".dylib", ".pyc")

MAIN = r'''"""netdoctor single-file build: python3 netdoctor.pyz check ...

The archive unpacks itself once into a cache directory and runs from there, so code
that reads its own data files by path (rule packs, examples) works as when installed.
"""
import atexit
import os
import shutil
import stat
import sys
import tempfile
import zipfile

BUILD_ID = "@BUILD_ID@"

if sys.version_info < (3, 11):
    sys.exit(f"netdoctor needs Python 3.11 or newer; this is {sys.version.split()[0]}")


def _cache_root():
    configured = os.environ.get("NETDOCTOR_PYZ_CACHE")
    if configured:
        return configured
    if os.geteuid() == 0:
        return "/var/cache/netdoctor"
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "netdoctor")


def _trusted(path, owners=None):
    # Never run code from a directory someone else could have written: a real directory
    # (not a symlink), owned by us (the cache root: or root), not group/other-writable.
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid in (owners or (os.geteuid(),))
            and not info.st_mode & 0o022)


def _ready(target):
    return _trusted(target) and os.path.isfile(os.path.join(target, ".complete"))


def _extract(archive, directory):
    mask = os.umask(0o022)
    try:
        os.chmod(directory, 0o755)
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(directory)
        open(os.path.join(directory, ".complete"), "w").close()
    finally:
        os.umask(mask)


def _private(archive, staging=None):
    # A fresh directory only this process knows, removed when it exits.
    if staging is None:
        staging = tempfile.mkdtemp(prefix="netdoctor-pyz-")
        _extract(archive, staging)
    atexit.register(shutil.rmtree, staging, True)
    return staging


def _unpacked(archive):
    root = _cache_root()
    target = os.path.join(root, f"pyz-{BUILD_ID}")
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


archive = os.path.dirname(os.path.abspath(__file__))
directory = _unpacked(archive)
sys.path[:] = [directory] + [entry for entry in sys.path if os.path.abspath(entry or ".") != archive]
from netdoctor.cli import main  # noqa: E402

main()
'''


def copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", ".*"))


def copy_distribution(name: str, stage: Path) -> list[str]:
    try:
        distribution = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError as error:
        raise SystemExit(f"{name} is not installed in {sys.executable}; pip install it first") from error
    copied: list[str] = []
    for file in distribution.files or ():
        relative = PurePosixPath(str(file))
        if relative.parts[0] in ("..", "bin") or relative.is_absolute() or "__pycache__" in relative.parts:
            continue
        if relative.suffix in EXCLUDED_SUFFIXES or ".dist-info" in relative.parts[0] and relative.name != "METADATA":
            continue
        source = Path(distribution.locate_file(file))
        if not source.is_file():
            continue
        target = stage / Path(*relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        copied.append(str(relative))
    if not copied:
        raise SystemExit(f"{name}: no files found to bundle")
    return copied


def build(output: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="netdoctor-zipapp-") as scratch:
        stage = Path(scratch)
        copy_tree(REPO / "netdoctor", stage / "netdoctor")
        copy_tree(REPO / "plugins", stage / "netdoctor_plugins")
        copy_tree(REPO / "rules", stage / "netdoctor_rules")
        for name in BUNDLED:
            copy_distribution(name, stage)
        if (stage / "typer" / "_adapters.py").exists():
            # pyproject pins typer < 0.16: newer typer needs pydantic-core, compiled.
            raise SystemExit("the installed typer needs pydantic (compiled) and cannot go into a zipapp")
        digest = hashlib.sha256()
        for path in sorted(stage.rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(stage)).encode() + b"\0" + path.read_bytes())
        (stage / "__main__.py").write_text(MAIN.replace("@BUILD_ID@", digest.hexdigest()[:16]))
        output.parent.mkdir(parents=True, exist_ok=True)
        zipapp.create_archive(stage, output, interpreter="/usr/bin/env python3", compressed=True)
    output.chmod(0o755)
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=REPO / "dist" / "netdoctor.pyz")
    arguments = parser.parse_args()
    path = build(arguments.output)
    print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
