#!/usr/bin/env python3
"""Build netdoctor.pyz: one file an operator copies to every node (pdcp) and runs with python3.

    python3 packaging/build-zipapp.py [-o dist/netdoctor.pyz]

It holds netdoctor, netdoctor_plugins (plugins/), netdoctor_rules (rules/) and the pure-
Python dependencies, copied from the environment this script runs in (no network).
It runs on Python 3.10 and later: tomli (the backport of 3.11's tomllib) is bundled, so the
build environment needs it whatever its own version (`pip install -e '.[test]'` has it), and
a bundled distribution whose Requires-Python excludes 3.10 stops the build. Compiled modules
cannot be imported from a zip, so psutil (C) is left out: netdoctor imports it lazily and
works without it on `check --snapshot`; a node with python3-psutil installed still gets it
from its own site-packages. rich is not bundled: netdoctor imports typer and structlog
without it (plain help and tracebacks).
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
# The archive's __main__.py (a version guard every Python parses) and the start it imports.
START = REPO / "packaging" / "zipapp"
# The oldest Python the archive runs on: as pyproject's requires-python and START's MINIMUM.
MINIMUM_PYTHON = "3.10"

# Pure-Python distributions bundled, with what they need at run time. tomli: Python 3.10
# has no tomllib (netdoctor.packs.load falls back to it); its compiled build is .py + .so.
BUNDLED = (
    "typer", "click", "shellingham", "typing_extensions", "structlog", "ClusterShell", "nvidia-ml-py", "tomli",
)
# Compiled or not needed at run time: never copied even when a file list names them.
EXCLUDED_SUFFIXES = (".so", ".pyd", ".dylib", ".pyc")


def copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", ".*"))


def _refuses_minimum(requires_python: str | None) -> str | None:
    """The Requires-Python of a distribution when it excludes MINIMUM_PYTHON, else None."""
    if not requires_python:
        return None
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:
        print(f"build-zipapp: 'packaging' is not installed: Requires-Python {requires_python!r} not checked",
              file=sys.stderr)
        return None
    try:
        admitted = SpecifierSet(requires_python).contains(f"{MINIMUM_PYTHON}.0")
    except InvalidSpecifier:
        return requires_python
    return None if admitted else requires_python


def copy_distribution(name: str, stage: Path) -> list[str]:
    try:
        distribution = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError as error:
        raise SystemExit(f"{name} is not installed in {sys.executable}; pip install it first") from error
    refusal = _refuses_minimum(distribution.metadata.get("Requires-Python"))
    if refusal:
        raise SystemExit(f"{name} {distribution.version} needs Python {refusal}: the zipapp runs on "
                         f"{MINIMUM_PYTHON}; install a release of {name} that supports it")
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
        shutil.copy2(START / "_netdoctor_pyz.py", stage / "_netdoctor_pyz.py")
        digest = hashlib.sha256()
        for path in sorted(stage.rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(stage)).encode() + b"\0" + path.read_bytes())
        main = (START / "__main__.py").read_text(encoding="utf-8")
        if '"@BUILD_ID@"' not in main:
            raise SystemExit(f"{START / '__main__.py'} lost its BUILD_ID line")
        (stage / "__main__.py").write_text(main.replace("@BUILD_ID@", digest.hexdigest()[:16]), encoding="utf-8")
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
