"""docs/adding-a-check.md stays true: its example plugin, pack keys, fixture, test, entry
point and site pack are extracted from the page and run here."""

from __future__ import annotations

import importlib
import re
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest

import inventory_factory
from inventory_factory import dgx_h100
from netdoctor.checks.api import CheckContext
from netdoctor.checks.registry import ENTRY_POINT_GROUP, Registry
from netdoctor.errors import RulesError
from netdoctor.packs import RulePack, load_rules
from netdoctor.report.model import Status

PAGE = Path(__file__).parents[1] / "docs" / "adding-a-check.md"
EXAMPLE = re.compile(r"<!-- example: (?P<name>[\w-]+) -->\n```(?P<language>\w+)\n(?P<code>.*?)```", re.DOTALL)


def examples() -> dict[str, str]:
    found = {match["name"]: match["code"] for match in EXAMPLE.finditer(PAGE.read_text(encoding="utf-8"))}
    assert set(found) == {"plugin", "default-toml", "fixture", "test", "pyproject", "site-pack"}, sorted(found)
    return found


def pack_with_example_keys(tmp_path: Path) -> RulePack:
    """The default pack with the page's [hca-firmware] section added, as step 2 does."""
    path = tmp_path / "default-with-example.toml"
    path.write_text('[pack]\nname = "default"\n\n' + examples()["default-toml"])
    return load_rules(str(path), env={})


def test_the_plugin_registers_with_its_metadata(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "hca_firmware.py").write_text(examples()["plugin"])
    registry = Registry()
    registry.load_directory(plugins, enforce_ownership=False)
    assert not registry.problems
    check = registry.get("hca-firmware")
    assert check is not None and check.needs == ("rdma",) and check.order == 55


def test_the_pack_keys_are_a_valid_section_of_the_default_pack(tmp_path: Path) -> None:
    section = pack_with_example_keys(tmp_path).section("hca-firmware")
    assert dict(section) == {"mismatch_severity": "warn", "ignore_types": []}


def test_the_example_test_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = examples()
    plugin = types.ModuleType("netdoctor_plugins.hca_firmware")
    exec(compile(code["plugin"], "adding-a-check.md:plugin", "exec"), plugin.__dict__)
    monkeypatch.setitem(sys.modules, "netdoctor_plugins.hca_firmware", plugin)
    # `run_check` takes the bundled default pack; give it the keys step 2 adds to default.toml.
    monkeypatch.setitem(inventory_factory._PACKS, "default", pack_with_example_keys(tmp_path))
    namespace: dict[str, Any] = {"__name__": "test_check_hca_firmware"}
    exec(compile(code["test"] + "\n" + code["fixture"], "adding-a-check.md:test", "exec"), namespace)
    tests = [function for name, function in namespace.items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()


def test_the_entry_point_plugin_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = examples()
    project = tomllib.loads(code["pyproject"])["project"]
    points = project["entry-points"][ENTRY_POINT_GROUP]
    module = points["hca-firmware"]
    site = tmp_path / "site"
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(code["plugin"])
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n"
                                           + "".join(f"{name} = {value}\n" for name, value in points.items()))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    registry = Registry()
    registry.load_entry_points()
    check = registry.get("hca-firmware")
    assert check is not None, registry.problems
    assert check.origin == "entry point hca-firmware = netdoctor_hca_firmware of netdoctor-hca-firmware"
    assert registry.is_third_party("hca-firmware")
    sys.modules.pop(module, None)


def test_the_site_pack_carries_the_settings_and_without_it_the_key_is_named(tmp_path: Path) -> None:
    code = examples()
    plugin = types.ModuleType("hca_firmware_example")
    exec(compile(code["plugin"], "adding-a-check.md:plugin", "exec"), plugin.__dict__)
    path = tmp_path / "site-dgx.toml"
    path.write_text(code["site-pack"])
    site_pack = load_rules(str(path), env={})
    inventory = dgx_h100()
    inventory.hca("mlx5_3").firmware = "28.36.1010"
    findings = list(plugin.hca_firmware(CheckContext("hca-firmware", inventory, site_pack)))
    assert [finding.subject for finding in findings if finding.status is Status.WARN] == ["mlx5_3"]
    bundled = load_rules("dgx-h100", env={})
    message = "rule pack 'dgx-h100' has no setting [hca-firmware] ignore_types"
    assert message in " ".join(PAGE.read_text(encoding="utf-8").split())    # the page quotes it
    with pytest.raises(RulesError, match=re.escape(message)):
        list(plugin.hca_firmware(CheckContext("hca-firmware", inventory, bundled)))
