"""The check registry: one explicit object that knows every check and where it came from.

Three sources, loaded in this order:

1. built-in checks: every module of the `netdoctor_plugins` package;
2. third-party checks: the `netdoctor.checks` entry-point group (a module, a function
   decorated with `@check`, or a `Check` object);
3. plugin directories: `*.py` files of `--plugin-dir DIR` and `/etc/netdoctor/plugins.d`.

A built-in check that fails to import, or two built-ins with one id, is a bug in
netdoctor: `PluginError`. A third-party plugin that fails to import, sits in an unsafe
place (when running as root) or reuses a taken id is skipped with a warning and recorded
as a `PluginProblem`, which the runner reports as an `unknown` finding of check `plugins`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from netdoctor.checks.api import Check
from netdoctor.errors import PluginError
from netdoctor.host.trust import unsafe_path_reason
from netdoctor.logging import get_logger
from netdoctor.records import record
from netdoctor.report.model import Finding, Status

log = get_logger(__name__)

BUILTIN_PACKAGE = "netdoctor_plugins"
ENTRY_POINT_GROUP = "netdoctor.checks"
SYSTEM_PLUGIN_DIR = Path("/etc/netdoctor/plugins.d")
PLUGINS_CHECK_ID = "plugins"


@record(frozen=True)
class PluginProblem:
    """A third-party plugin that was not loaded: `subject` is its file or entry point."""

    subject: str
    message: str

    def to_finding(self) -> Finding:
        return Finding(PLUGINS_CHECK_ID, Status.UNKNOWN, self.subject, self.message,
                       evidence={"plugin": self.subject}, internal=True)


def _sort_key(check: Check) -> tuple[bool, int, str]:
    """Report order: checks that declare an `order` by it, then the others by id."""
    return (check.order is None, check.order or 0, check.id)


class Registry:
    """Checks by id, each with its origin; iteration follows the report order (`Check.order`)."""

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}
        self._third_party: set[str] = set()
        self.problems: list[PluginProblem] = []

    # -- registration --------------------------------------------------------------
    def register(self, check: Check, *, third_party: bool = False) -> bool:
        """Add one check. Returns False when a third-party check was skipped as a duplicate.

        Two built-ins with one id raise PluginError: that is a bug, not a site problem.
        """
        if not isinstance(check, Check):
            raise PluginError(f"{check!r} is not a netdoctor Check")
        existing = self._checks.get(check.id)
        if existing is not None:
            message = (f"duplicate check id {check.id!r}: defined by {existing.origin} "
                       f"and by {check.origin}")
            if not third_party:
                raise PluginError(message)
            log.warning("plugin check skipped", reason=message)
            self.problems.append(PluginProblem(check.origin, f"not loaded: {message}"))
            return False
        self._checks[check.id] = check
        if third_party:
            self._third_party.add(check.id)
        return True

    def problem(self, subject: str, message: str) -> None:
        log.warning("plugin skipped", plugin=subject, reason=message)
        self.problems.append(PluginProblem(subject, message))

    # -- loading -------------------------------------------------------------------
    def load_builtins(self, package: str = BUILTIN_PACKAGE) -> None:
        """Import every module of the built-in plugin package; an import error is a bug."""
        try:
            root = importlib.import_module(package)
        except ImportError as error:
            raise PluginError(f"built-in check package {package!r} cannot be imported: {error}") from error
        for module_info in sorted(pkgutil.iter_modules(root.__path__), key=lambda info: info.name):
            name = f"{package}.{module_info.name}"
            try:
                module = importlib.import_module(name)
            except Exception as error:  # a built-in that does not import is a netdoctor bug
                raise PluginError(f"built-in check module {name} cannot be imported: "
                                  f"{type(error).__name__}: {error}") from error
            for found in checks_in_module(module):
                self.register(found, third_party=False)

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> None:
        """Load third-party checks declared as entry points; broken ones become problems."""
        import importlib.metadata   # only here: its import is ~20 ms of every run otherwise

        for entry_point in sorted(importlib.metadata.entry_points(group=group),
                                  key=lambda point: (point.name, point.value)):
            dist = getattr(entry_point, "dist", None)
            dist_name = f" of {dist.name}" if dist is not None and getattr(dist, "name", None) else ""
            origin = f"entry point {entry_point.name} = {entry_point.value}{dist_name}"
            try:
                loaded = entry_point.load()
                found = list(_checks_from_object(loaded, origin))
            except (Exception, SystemExit) as error:
                self.problem(origin, f"plugin failed to load: {type(error).__name__}: {error}")
                continue
            if not found:
                self.problem(origin, "plugin defines no check")
            for item in found:
                self.register(item, third_party=True)

    def load_directory(self, directory: Path, *, enforce_ownership: bool | None = None) -> None:
        """Load every `*.py` file of `directory` by path (sorted by name).

        When running as root (or `enforce_ownership=True`), a directory or file that
        another user could modify is refused: loading it would run their code as root.
        """
        enforce = os.geteuid() == 0 if enforce_ownership is None else enforce_ownership
        directory = Path(directory)
        if not directory.is_dir():
            self.problem(str(directory), "plugin directory does not exist or is not a directory")
            return
        if enforce:
            reason = unsafe_path_reason(directory)
            if reason:
                self.problem(str(directory), f"plugin directory refused: {reason}")
                return
        for path in sorted(directory.glob("*.py")):
            self.load_file(path, enforce_ownership=enforce)

    def load_file(self, path: Path, *, enforce_ownership: bool | None = None) -> None:
        enforce = os.geteuid() == 0 if enforce_ownership is None else enforce_ownership
        origin = f"file {path}"
        if enforce:
            reason = unsafe_path_reason(path)
            if reason:
                self.problem(str(path), f"plugin file refused: {reason}")
                return
        # A unique module name per path, so two directories may both hold `extra.py`.
        import hashlib   # only for plugin directories: ~3 ms of imports otherwise

        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        module_name = f"netdoctor_site_plugin_{digest}_{path.stem}".replace("-", "_")
        try:
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise ImportError("not a loadable Python file")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as error:
            sys.modules.pop(module_name, None)
            self.problem(str(path), f"plugin failed to load: {type(error).__name__}: {error}")
            return
        found = [replace(item, origin=origin) for item in checks_in_module(module)]
        if not found:
            self.problem(str(path), "plugin file defines no check")
        for item in found:
            self.register(item, third_party=True)

    # -- queries -------------------------------------------------------------------
    def __iter__(self) -> Iterator[Check]:
        return iter(self.checks())

    def __len__(self) -> int:
        return len(self._checks)

    def __contains__(self, check_id: object) -> bool:
        return check_id in self._checks

    def checks(self) -> list[Check]:
        return [self._checks[check_id] for check_id in self.ids()]

    def ids(self) -> list[str]:
        return [check.id for check in sorted(self._checks.values(), key=_sort_key)]

    def get(self, check_id: str) -> Check | None:
        return self._checks.get(check_id)

    def is_third_party(self, check_id: str) -> bool:
        return check_id in self._third_party

    def problem_findings(self) -> list[Finding]:
        return [problem.to_finding() for problem in self.problems]


def checks_in_module(module: ModuleType) -> list[Check]:
    """The checks a module defines: `@check` functions and `Check` objects declared in it.

    Functions imported from elsewhere are left to their own module, so a plugin that
    imports a helper check does not register it twice.
    """
    found: list[Check] = []
    for value in vars(module).values():
        marker = getattr(value, "__netdoctor_check__", None)
        if isinstance(marker, Check) and getattr(value, "__module__", None) == module.__name__:
            found.append(marker)
        elif isinstance(value, Check) and getattr(value.function, "__module__", None) == module.__name__:
            found.append(value)
    return sorted(found, key=lambda item: item.id)


def _checks_from_object(loaded: Any, origin: str) -> Iterable[Check]:
    if isinstance(loaded, ModuleType):
        return [replace(item, origin=origin) for item in checks_in_module(loaded)]
    if isinstance(loaded, Check):
        return [replace(loaded, origin=origin)]
    marker = getattr(loaded, "__netdoctor_check__", None)
    if isinstance(marker, Check):
        return [replace(marker, origin=origin)]
    raise PluginError(f"{origin}: {loaded!r} is neither a module, a @check function nor a Check")


@functools.cache
def builtin_check_order() -> tuple[str, ...]:
    """The built-in check ids in report order, for views that order checks without a registry
    of their own (the fleet report)."""
    registry = Registry()
    registry.load_builtins()
    return tuple(registry.ids())


def third_party_configured(plugin_dirs: Sequence[Path] = (), system_dir: Path | None = SYSTEM_PLUGIN_DIR) -> bool:
    """Whether this run has third-party checks to load at all: plugin directories, or
    distributions that declare `netdoctor.checks` entry points (metadata only, nothing imported)."""
    if plugin_dirs or (system_dir is not None and system_dir.is_dir()):
        return True
    from netdoctor.host.entry_points import declares_entry_points   # ~3 ms, importlib.metadata ~30

    return declares_entry_points(ENTRY_POINT_GROUP)


def load_registry(plugin_dirs: Sequence[Path] = (), *, system_dir: Path | None = SYSTEM_PLUGIN_DIR,
                  entry_points: bool = True, builtin_package: str | None = BUILTIN_PACKAGE) -> Registry:
    """The registry a CLI run uses: built-ins, entry points, then plugin directories."""
    registry = Registry()
    if builtin_package:
        registry.load_builtins(builtin_package)
    if entry_points:
        registry.load_entry_points()
    directories = list(plugin_dirs)
    if system_dir is not None and system_dir.is_dir():
        directories.append(system_dir)
    for directory in directories:
        registry.load_directory(Path(directory))
    return registry
