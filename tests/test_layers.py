"""The layers hold: what each package may import, and that only host touches the outside world.

host and parsers import nothing above them; checks and plugins never import host; only the
host layer (and the standalone probe worker, which runs in its own process) opens files,
starts processes or reads file descriptors. Failing lines are named with file and line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
PRODUCT = [REPOSITORY / "netdoctor", REPOSITORY / "plugins"]
# Below every layer: shared words, errors, logging setup, small pure helpers.
BASE = {"netdoctor", "netdoctor.vocabulary", "netdoctor.errors", "netdoctor.util", "netdoctor.logging", "netdoctor.records",
        "netdoctor.textsafe"}
# What each layer may import from netdoctor, besides BASE and itself. The first matching
# prefix is a module's layer: the probe's result types and bandwidth model are pure data and
# arithmetic that checks judge with, so they sit below checks although probe/ (the engines,
# which start processes through host) sits above.
ALLOWED = {
    "netdoctor.host": set(),
    "netdoctor.parsers": set(),
    "netdoctor.probe.expectation": set(),
    "netdoctor.probe.result": {"netdoctor.probe.expectation"},
    "netdoctor.inventory": {"netdoctor.host", "netdoctor.parsers"},
    "netdoctor.packs": {"netdoctor.inventory", "netdoctor.host.files", "netdoctor.host.trust"},
    # The registry loads third-party code from disk: it asks host whether root may trust it,
    # and whether any distribution declares checks.
    "netdoctor.checks.registry": {"netdoctor.checks", "netdoctor.inventory", "netdoctor.packs", "netdoctor.report.model",
                                  "netdoctor.probe.result", "netdoctor.host.trust", "netdoctor.host.entry_points"},
    "netdoctor.checks": {"netdoctor.inventory", "netdoctor.packs", "netdoctor.report.model",
                         "netdoctor.probe.result", "netdoctor.probe.expectation"},
    "netdoctor_plugins": {"netdoctor.inventory", "netdoctor.packs", "netdoctor.checks", "netdoctor.report.model",
                          "netdoctor.probe.result", "netdoctor.probe.expectation", "netdoctor.parsers",
                          "netdoctor.vocabulary"},
    "netdoctor.probe": {"netdoctor.host", "netdoctor.parsers", "netdoctor.inventory"},
    "netdoctor.report": {"netdoctor.checks", "netdoctor.probe.result", "netdoctor.probe.expectation",
                         "netdoctor.host.files"},
}
# Calls that reach the outside world: files, processes, raw descriptors.
WORLD_CALLS = {"open", "os.open", "os.read", "os.write", "os.fdopen", "os.popen", "os.system", "os.fork",
               "os.execv", "os.execve", "os.execvp", "os.spawnv", "os.posix_spawn", "io.open",
               "subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
               "subprocess.check_output"}
WORLD_METHODS = {"read_text", "read_bytes", "write_text", "write_bytes", "open"}
WORLD_ALLOWED = ("netdoctor/host/", "netdoctor/probe/worker.py")


def _modules() -> Iterator[tuple[str, Path]]:
    for root in PRODUCT:
        for path in sorted(root.rglob("*.py")):
            relative = path.relative_to(REPOSITORY).with_suffix("")
            parts = list(relative.parts)
            if parts[0] == "plugins":
                parts[0] = "netdoctor_plugins"
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


def _imports(module: str, tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if module.endswith("__init__") else 0)]
                yield node.lineno, ".".join([*base, node.module] if node.module else base)
            elif node.module:
                yield node.lineno, node.module
                for alias in node.names:
                    yield node.lineno, f"{node.module}.{alias.name}"


def _layer(module: str) -> str | None:
    return next((layer for layer in ALLOWED if module == layer or module.startswith(layer + ".")), None)


def _within(name: str, prefixes: set[str]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_layers_import_only_what_is_below_them() -> None:
    wrong = []
    for module, path in _modules():
        layer = _layer(module)
        if layer is None:
            continue
        for line, name in _imports(module, ast.parse(path.read_text())):
            if not (name.startswith("netdoctor.") or name.startswith("netdoctor_plugins")) or name in BASE:
                continue
            if _within(name, {layer}) or _within(name, ALLOWED[layer]) or name in BASE:
                continue
            # "from netdoctor import x" shows up as netdoctor.x: fine when x is a base module.
            if _within(name, BASE - {"netdoctor"}):
                continue
            wrong.append(f"{path.relative_to(REPOSITORY)}:{line}: {layer} imports {name}")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def _call_name(node: ast.Call) -> str | None:
    function = node.func
    if isinstance(function, ast.Name):
        return function.id
    if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name):
        return f"{function.value.id}.{function.attr}"
    return None


def test_only_host_touches_files_and_processes() -> None:
    wrong = []
    for _, path in _modules():
        relative = str(path.relative_to(REPOSITORY))
        if relative.startswith(WORLD_ALLOWED):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [alias.name for alias in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                if any(name in ("subprocess", "pty", "multiprocessing") for name in names):
                    wrong.append(f"{relative}:{node.lineno}: imports a process module")
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node)
            method = node.func.attr if isinstance(node.func, ast.Attribute) else None
            if name in WORLD_CALLS or (method in WORLD_METHODS and name not in ("tarfile.open", "gzip.open")):
                wrong.append(f"{relative}:{node.lineno}: {name or method}(")
    assert not wrong, "file or process access outside netdoctor/host/:\n" + "\n".join(wrong)


@pytest.mark.parametrize("module,path", [(module, path) for module, path in _modules()], ids=lambda value: str(value))
def test_product_modules_stay_small(module: str, path: Path) -> None:
    if path.name == "worker.py" and path.parent.name == "probe":
        return   # the standalone probe worker: one file run as its own process
    lines = len(path.read_text().splitlines())
    assert lines <= 450, f"{path.relative_to(REPOSITORY)} has {lines} lines (limit 450)"
