"""The check registry: built-ins, entry points, plugin directories, duplicates, unsafe paths, order."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from pathlib import Path

import pytest

from netdoctor.checks.api import Check, CheckContext
from netdoctor.checks import check
from netdoctor.checks.registry import (
    ENTRY_POINT_GROUP,
    Registry,
    builtin_check_order,
    checks_in_module,
    load_registry,
)
from netdoctor.errors import PluginError
from netdoctor.host.trust import unsafe_path_reason
from netdoctor.packs import load_rules
from netdoctor.report.model import Status

IS_ROOT = os.geteuid() == 0


def _noop(context: CheckContext) -> list:
    return []


def _plugin(directory: Path, name: str, check_id: str, body: str = "yield ctx.passed('node')") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(f"""
        from netdoctor.checks import check

        @check({check_id!r}, "test check {check_id}")
        def run(ctx):
            {body}
    """))
    return path


def test_order_is_declared_order_then_by_id() -> None:
    registry = Registry()
    for check_id, order in [("zeta", None), ("nccl-probe", 90), ("alpha", None), ("port-state", 10), ("mtu", 50),
                            ("link-speed", 20)]:
        registry.register(Check(check_id, "x", _noop, order=order))
    assert registry.ids() == ["port-state", "link-speed", "mtu", "nccl-probe", "alpha", "zeta"]
    assert [check.id for check in registry] == registry.ids()


def test_check_decorator_carries_the_order() -> None:
    @check("ordered-extra", "x", order=5)
    def ordered(ctx: CheckContext) -> list:
        return []

    assert ordered.__netdoctor_check__.order == 5  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="order must be an integer"):
        Check("bad-order", "x", _noop, order="10")  # type: ignore[arg-type]


def test_a_plugin_file_with_a_bad_order_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    directory = tmp_path / "plugins"
    directory.mkdir()
    (directory / "bad.py").write_text(textwrap.dedent("""
        from netdoctor.checks import check

        @check("bad-order", "x", order="first")
        def run(ctx):
            return []
    """))
    registry = Registry()
    registry.load_directory(directory, enforce_ownership=False)
    assert registry.ids() == []
    assert "order must be an integer" in registry.problems[0].message


def test_builtin_plugins_load_and_are_in_order() -> None:
    registry = Registry()
    registry.load_builtins()
    ids = registry.ids()
    assert len(ids) >= 1
    # The order reports have always listed the built-ins in, now declared on each check.
    assert ids == ["inventory", "port-state", "link-speed", "fabric-netdevs", "transceiver", "pcie-link", "error-counters", "phy", "mtu", "pfc-ecn",
                   "gpudirect", "nvlink", "nvswitch-fabric", "pcie-p2p-path", "gpu-nic-affinity", "nccl-env", "nccl-probe",
                   "nic-loopback", "kernel-events", "gpu-health", "gpu-driver"]
    orders = [check.order for check in registry]
    assert None not in orders and len(set(orders)) == len(orders)
    assert builtin_check_order() == tuple(ids)
    for check in registry:
        assert check.origin.startswith("netdoctor_plugins."), check.origin
        assert not registry.is_third_party(check.id)
    assert registry.problems == []


def _package(root: Path, name: str, modules: dict[str, str]) -> str:
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for module, text in modules.items():
        (package / f"{module}.py").write_text(textwrap.dedent(text))
    return name


CHECK_SOURCE = """
    from netdoctor.checks import check

    @check("{id}", "desc")
    def run(ctx):
        return []
"""


def test_two_builtins_with_one_id_is_an_error_naming_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _package(tmp_path, "dup_builtins_pkg", {"first": CHECK_SOURCE.format(id="same"),
                                                   "second": CHECK_SOURCE.format(id="same")})
    with pytest.raises(PluginError) as raised:
        Registry().load_builtins(name)
    message = str(raised.value)
    assert "duplicate check id 'same'" in message
    assert "dup_builtins_pkg.first" in message and "dup_builtins_pkg.second" in message


def test_broken_builtin_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _package(tmp_path, "broken_builtins_pkg", {"bad": "import no_such_module_xyz\n"})
    with pytest.raises(PluginError, match="broken_builtins_pkg.bad cannot be imported: ModuleNotFoundError"):
        Registry().load_builtins(name)


def test_imported_check_is_not_collected_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = _package(tmp_path, "reexport_pkg", {
        "a": CHECK_SOURCE.format(id="only-once"),
        "b": "from reexport_pkg.a import run as borrowed\n",
    })
    registry = Registry()
    registry.load_builtins(name)
    assert registry.ids() == ["only-once"]
    assert checks_in_module(importlib.import_module("reexport_pkg.b")) == []


def test_plugin_directory_loads_checks_with_file_origin(tmp_path: Path) -> None:
    path = _plugin(tmp_path / "plugins", "site_extra", "site-extra")
    registry = Registry()
    registry.load_directory(tmp_path / "plugins", enforce_ownership=False)
    check = registry.get("site-extra")
    assert check is not None
    assert check.origin == f"file {path}"
    assert registry.is_third_party("site-extra")
    context = CheckContext("site-extra", None, load_rules("default", env={}))  # type: ignore[arg-type]
    assert list(check.function(context))[0].status is Status.PASS


def test_broken_plugin_file_is_skipped_and_reported(tmp_path: Path) -> None:
    directory = tmp_path / "plugins"
    _plugin(directory, "good", "good-one")
    (directory / "bad.py").write_text("raise RuntimeError('plugin exploded')\n")
    (directory / "exits.py").write_text("import sys\nsys.exit(4)\n")
    registry = Registry()
    registry.load_directory(directory, enforce_ownership=False)
    assert registry.ids() == ["good-one"]
    subjects = {problem.subject: problem.message for problem in registry.problems}
    assert subjects[str(directory / "bad.py")] == "plugin failed to load: RuntimeError: plugin exploded"
    assert subjects[str(directory / "exits.py")] == "plugin failed to load: SystemExit: 4"
    findings = registry.problem_findings()
    assert {finding.check for finding in findings} == {"plugins"}
    assert all(finding.status is Status.UNKNOWN for finding in findings)
    assert {finding.subject for finding in findings} == set(subjects)


def test_third_party_duplicate_of_builtin_is_skipped(tmp_path: Path) -> None:
    registry = Registry()
    registry.register(Check("port-state", "built-in", _noop, origin="netdoctor_plugins.port_state"))
    path = _plugin(tmp_path / "plugins", "mine", "port-state")
    registry.load_directory(tmp_path / "plugins", enforce_ownership=False)
    assert registry.get("port-state").origin == "netdoctor_plugins.port_state"  # type: ignore[union-attr]
    assert len(registry.problems) == 1
    message = registry.problems[0].message
    assert "duplicate check id 'port-state'" in message
    assert "netdoctor_plugins.port_state" in message and f"file {path}" in message


def test_missing_plugin_directory_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    registry = Registry()
    registry.load_directory(tmp_path / "nope", enforce_ownership=False)
    assert registry.problems[0].subject == str(tmp_path / "nope")


def test_world_writable_plugin_dir_refused_when_enforced(tmp_path: Path) -> None:
    directory = tmp_path / "plugins"
    _plugin(directory, "evil", "evil-check")
    directory.chmod(0o777)
    registry = Registry()
    registry.load_directory(directory, enforce_ownership=True)
    assert registry.ids() == []
    assert len(registry.problems) == 1
    assert "plugin directory refused" in registry.problems[0].message
    assert "writable by group and other (mode 0777)" in registry.problems[0].message \
        or "not root" in registry.problems[0].message


@pytest.mark.skipif(not IS_ROOT, reason="ownership rules apply to root")
def test_root_loads_safe_dir_and_refuses_group_writable_or_foreign_file(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    directory = tmp_path / "plugins"
    _plugin(directory, "a_safe", "safe-check").chmod(0o644)
    _plugin(directory, "b_group", "group-check").chmod(0o664)
    foreign = _plugin(directory, "c_foreign", "foreign-check")
    os.chown(foreign, 4321, -1)
    directory.chmod(0o755)
    registry = Registry()
    registry.load_directory(directory)     # enforced by default: we are root
    assert registry.ids() == ["safe-check"]
    messages = sorted(problem.message for problem in registry.problems)
    assert any("b_group.py is writable by group (mode 0664)" in message for message in messages)
    assert any("c_foreign.py is owned by uid 4321, not root" in message for message in messages)


@pytest.mark.skipif(not IS_ROOT, reason="ownership rules apply to root")
def test_unsafe_parent_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "shared"
    directory = parent / "plugins"
    directory.mkdir(parents=True)
    tmp_path.chmod(0o755)
    parent.chmod(0o777)       # no sticky bit: anyone can swap `plugins` for their own
    assert unsafe_path_reason(directory) == f"{parent} is writable by group and other (mode 0777)"
    parent.chmod(0o1777)      # sticky: only root may rename root's entry
    assert unsafe_path_reason(directory) is None


def test_entry_point_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "ep_checks_mod.py").write_text(textwrap.dedent("""
        from netdoctor.checks import check
        from netdoctor.checks.api import Check

        @check("ep-function", "from a function entry point")
        def function_check(ctx):
            yield ctx.passed("node")

        def _object(ctx):
            return []

        OBJECT = Check("ep-object", "from a Check object", _object)
    """))
    (site / "ep_checks_module.py").write_text(textwrap.dedent("""
        from netdoctor.checks import check

        @check("ep-module", "from a module entry point")
        def module_check(ctx):
            return []
    """))
    info = site / "ep_checks-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-checks\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("""
        [netdoctor.checks]
        a_function = ep_checks_mod:function_check
        b_object = ep_checks_mod:OBJECT
        c_module = ep_checks_module
        d_broken = ep_checks_missing_module
        e_duplicate = ep_checks_mod:function_check
    """))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    registry = Registry()
    registry.load_entry_points()
    assert registry.ids() == ["ep-function", "ep-module", "ep-object"]
    assert registry.get("ep-function").origin == "entry point a_function = ep_checks_mod:function_check of ep-checks"  # type: ignore[union-attr]
    assert all(registry.is_third_party(check_id) for check_id in registry.ids())
    problems = {problem.subject: problem.message for problem in registry.problems}
    broken = "entry point d_broken = ep_checks_missing_module of ep-checks"
    assert problems[broken].startswith("plugin failed to load: ModuleNotFoundError")
    duplicate = "entry point e_duplicate = ep_checks_mod:function_check of ep-checks"
    assert "duplicate check id 'ep-function'" in problems[duplicate]
    for name in ("ep_checks_mod", "ep_checks_module"):
        sys.modules.pop(name, None)


def test_load_registry_includes_plugin_dirs(tmp_path: Path) -> None:
    _plugin(tmp_path / "more", "zz_extra", "zz-extra")
    tmp_path.chmod(0o755)
    (tmp_path / "more").chmod(0o755)
    registry = load_registry([tmp_path / "more"], system_dir=None, entry_points=False)
    assert registry.ids()[-1] == "zz-extra"


def test_whether_distributions_declare_checks_is_told_as_importlib_metadata_tells_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run asks whether third-party checks exist; netdoctor.host.entry_points answers
    without importing importlib.metadata, and must agree with it."""
    import importlib.metadata

    from netdoctor.checks.registry import third_party_configured
    from netdoctor.host.entry_points import declares_entry_points

    for group in ("console_scripts", "pytest11", ENTRY_POINT_GROUP, "netdoctor.no-such-group"):
        assert declares_entry_points(group) == bool(importlib.metadata.entry_points(group=group)), group
    assert third_party_configured((), system_dir=None) is False
    site = tmp_path / "site"
    (site / "other-1.0.dist-info").mkdir(parents=True)
    (site / "other-1.0.dist-info" / "entry_points.txt").write_text("[console_scripts]\nx = y:z\n")
    (site / "old-1.0.egg-info").mkdir()
    (site / "old-1.0.egg-info" / "entry_points.txt").write_text(f"  [{ENTRY_POINT_GROUP}]  \nold = old_checks\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    assert third_party_configured((), system_dir=None) is True
    assert bool(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def test_what_the_quick_scan_cannot_read_is_left_to_importlib_metadata(tmp_path: Path) -> None:
    """A zip or an `.egg` directory on sys.path, or an entry_points.txt that cannot be read,
    may declare checks: the scan says yes and importlib.metadata decides, as before."""
    import zipfile

    from netdoctor.host.entry_points import declares_entry_points

    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("zipped-1.0.dist-info/entry_points.txt", f"[{ENTRY_POINT_GROUP}]\nz = zipped\n")
    assert declares_entry_points(ENTRY_POINT_GROUP, [str(archive)]) is True
    egg = tmp_path / "old-1.0-py3.11.EGG"
    (egg / "EGG-INFO").mkdir(parents=True)
    assert declares_entry_points(ENTRY_POINT_GROUP, [str(egg)]) is True
    unreadable = tmp_path / "site" / "odd-1.0.dist-info"
    (unreadable / "entry_points.txt").mkdir(parents=True)          # a directory where a file should be
    assert declares_entry_points(ENTRY_POINT_GROUP, [str(tmp_path / "site")]) is True
    assert declares_entry_points(ENTRY_POINT_GROUP, [str(tmp_path / "absent"), str(tmp_path)]) is False
