"""Rule-pack loader: bundled packs, extends, auto-selection, site overrides, shadow, port classes."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from inventory_factory import dgx_h100, h100_gpus, ib_hca, port_of, roce_node
from netdoctor.checks.rules import bundled_packs, load_rules
from netdoctor.errors import RulesError
from netdoctor.inventory.model import Gpu, Hca, Inventory, LinkLayer, LinkRate, Port, PortState

STRUCTURE = {"pack", "grade", "port-classes"}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- bundled packs -----------------------------------------------------------------------

def test_bundled_packs_are_found_through_the_installed_package() -> None:
    packs = bundled_packs()
    assert set(packs) == {"default", "dgx-h100", "hgx-a100", "pcie-only", "roce"}
    assert all(path.name == f"{name}.toml" and path.is_file() for name, path in packs.items())


@pytest.mark.parametrize("name", ["default", "dgx-h100", "hgx-a100", "pcie-only", "roce"])
def test_every_bundled_pack_loads_and_names_itself(name: str) -> None:
    pack = load_rules(name, env={})
    assert pack.name == name
    assert pack.selection_reason == f"--rules {name}"
    assert pack.files[0].name == "default.toml"
    assert pack.files[-1].name == f"{name}.toml"
    expected_required = {"default": {"port-state", "link-speed"}, "pcie-only": {"pcie-link"},
                         "roce": {"port-state", "link-speed", "pfc-ecn"}}
    assert pack.required >= expected_required.get(name, {"port-state", "link-speed", "error-counters"})


def test_child_packs_only_set_keys_the_default_pack_documents() -> None:
    # Every threshold lives in default.toml, so `netdoctor rules` shows it on every pack.
    default = tomllib.loads(bundled_packs()["default"].read_text())
    for name, path in bundled_packs().items():
        data = tomllib.loads(path.read_text())
        for section, values in data.items():
            if section in STRUCTURE:
                continue
            assert section in default, f"{name}: section [{section}] is not in default.toml"
            extra = set(values) - set(default[section])
            assert not extra, f"{name}: [{section}] keys {extra} are not in default.toml"


def test_extends_merges_thresholds_and_keeps_the_childs_identity() -> None:
    pack = load_rules("dgx-h100", env={})
    assert pack.section("error-counters")["ber_limit"] == 1e-12          # inherited
    assert "error-counters" in pack.required                              # child's [grade]
    assert "error-counters" not in load_rules("default", env={}).required
    assert pack.data["pack"]["priority"] == 50
    assert pack.data["pack"]["match"]["gpu_name"] == "H100|H200"
    assert [port_class.name for port_class in pack.port_classes] == ["compute", "storage"]
    assert pack.port_classes[0].expected_rate_gbps == 400.0 and pack.port_classes[0].expected_width == 4


def test_section_of_an_absent_check_is_empty_and_knows_its_pack() -> None:
    pack = load_rules("default", env={})
    section = pack.section("no-such-check")
    assert dict(section) == {}
    assert section.pack is pack


def test_unknown_pack_name_is_a_rules_error_listing_the_bundled_ones() -> None:
    with pytest.raises(RulesError, match="unknown rule pack 'dgx-h1000'.*dgx-h100"):
        load_rules("dgx-h1000", env={})


def test_pack_file_extending_a_bundled_pack_and_a_sibling_file(tmp_path: Path) -> None:
    write(tmp_path, "base.toml", '[pack]\nname = "base"\nextends = "dgx-h100"\n[mtu]\nib_mtu = 2048\n')
    site_pack = write(tmp_path, "site.toml", '[pack]\nname = "site"\nextends = "base"\n[mtu]\nroce_min_mtu = 9000\n')
    pack = load_rules(str(site_pack), env={})
    assert pack.name == "site"
    assert [path.name for path in pack.files] == ["default.toml", "dgx-h100.toml", "base.toml", "site.toml"]
    assert pack.section("mtu")["ib_mtu"] == 2048 and pack.section("mtu")["roce_min_mtu"] == 9000
    assert pack.port_classes[0].name == "compute"


def test_extends_cycle_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "a.toml", '[pack]\nname = "a"\nextends = "b"\n')
    write(tmp_path, "b.toml", '[pack]\nname = "b"\nextends = "a"\n')
    with pytest.raises(RulesError, match="cycle"):
        load_rules(str(tmp_path / "a.toml"), env={})


@pytest.mark.parametrize(("text", "message"), [
    ('[pack]\nname = "x"\n[port-classes.c]\nrole = "spare"\n', "role = 'spare'"),
    ('[pack]\nname = "x"\n[port-classes.c]\nexpected_speed = 400\n', "unknown key 'expected_speed'"),
    ('[pack]\nname = "x"\n[port-classes.c]\nlink_layer = "OmniPath"\n', "InfiniBand or Ethernet"),
    ('[pack]\nname = "x"\n[pack.match]\ngpu_name = "H100("\n', "not a valid regex"),
    ('[pack]\nname = "x"\n[pack.match]\nmin_gpu = 8\n', "unknown \\[pack.match\\] key 'min_gpu'"),
    ('[pack]\nname = "x"\n[grade]\nrequired = "port-state"\n', "must be a list"),
    ('[pack]\nname = "x"\nextends = "nope"\n', "extends 'nope'"),
    ('[pack]\nname = "x"\n[mtu\n', "not valid TOML"),
    ('[grade]\nrequired = []\n', "no \\[pack\\] table"),
])
def test_malformed_pack_files_are_refused_with_the_reason(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "bad.toml", text)
    with pytest.raises(RulesError, match=message):
        load_rules(str(path), env={})


def test_missing_pack_file_is_a_rules_error(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="does not exist"):
        load_rules(str(tmp_path / "absent.toml"), env={})


# -- auto-selection ----------------------------------------------------------------------

def a100_node() -> Inventory:
    hcas = []
    for index in range(8):
        hca = ib_hca(index, rate=LinkRate(200, 4, "HDR"))
        hcas.append(Hca(hca.name, ca_type="MT4123", ports=hca.ports))
    gpus = [Gpu(index, name="NVIDIA A100-SXM4-80GB") for index in range(8)]
    return Inventory("a100-01", "2026-11-21T22:40:00Z", gpus=gpus, hcas=hcas)


@pytest.mark.parametrize(("inventory", "expected"), [
    (dgx_h100(), "dgx-h100"),
    (roce_node(), "roce"),
    (a100_node(), "hgx-a100"),
    (Inventory("l40s-01", "2026-11-21T22:40:00Z", gpus=[Gpu(0, name="NVIDIA L40S")]), "pcie-only"),
    (Inventory("login-01", "2026-11-21T22:40:00Z"), "default"),
])
def test_auto_selection_picks_the_matching_pack(inventory: Inventory, expected: str) -> None:
    pack = load_rules(None, inventory, env={})
    assert pack.name == expected
    assert pack.selection_reason.startswith(f"auto-selected {expected}") or expected == "default"


def test_auto_selection_explains_what_matched() -> None:
    reason = load_rules(None, dgx_h100(), env={}).selection_reason
    assert "priority 50" in reason
    assert "GPU 'NVIDIA H100 80GB HBM3' matches 'H100|H200'" in reason
    assert "HCA type MT4129" in reason and "compute ports are InfiniBand" in reason and "8 GPUs" in reason


def test_four_gpu_h100_node_does_not_get_the_eight_gpu_pack() -> None:
    inventory = dgx_h100()
    inventory.gpus = h100_gpus(4)
    assert load_rules(None, inventory, env={}).name == "default"


def test_link_layer_match_ignores_storage_ports_of_the_packs_own_classes() -> None:
    # 8 IB rails and many Ethernet storage ports: the storage class keeps them out of the vote.
    inventory = dgx_h100()
    for index in range(10):
        hca = ib_hca(20 + index, link_layer=LinkLayer.ETHERNET)
        inventory.hcas.append(hca)
    assert load_rules(None, inventory, env={}).name == "dgx-h100"


def test_no_inventory_selects_default() -> None:
    pack = load_rules(None, None, env={})
    assert pack.name == "default"
    assert "no inventory" in pack.selection_reason


# -- site overrides ----------------------------------------------------------------------

def test_site_override_changes_a_threshold_and_is_listed(tmp_path: Path) -> None:
    site = write(tmp_path, "rules.toml", "[error-counters]\nber_limit = 1e-13\nlink_downed_absolute = 2\n")
    pack = load_rules("dgx-h100", site_path=site, env={})
    assert pack.section("error-counters")["ber_limit"] == 1e-13
    assert pack.section("error-counters")["link_downed_absolute"] == 2
    assert pack.section("error-counters")["symbol_error_absolute"] == 10
    assert pack.files[-1] == site
    assert f"site overrides from {site}" in pack.selection_reason


def test_site_override_from_environment(tmp_path: Path) -> None:
    site = write(tmp_path, "rules.toml", '[mtu]\nroce_min_mtu = 9000\n')
    pack = load_rules("roce", env={"NETDOCTOR_RULES": str(site)})
    assert pack.section("mtu")["roce_min_mtu"] == 9000


def test_site_override_named_by_environment_must_exist(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="NETDOCTOR_RULES"):
        load_rules("default", env={"NETDOCTOR_RULES": str(tmp_path / "absent.toml")})


def test_site_override_typo_is_refused_with_the_key(tmp_path: Path) -> None:
    site = write(tmp_path, "rules.toml", "[error-counters]\nlink_downed_per_hr = 1\n")
    with pytest.raises(RulesError, match="unknown setting 'error-counters.link_downed_per_hr'"):
        load_rules("default", site_path=site, env={})


def test_site_override_of_an_unknown_section_is_refused(tmp_path: Path) -> None:
    site = write(tmp_path, "rules.toml", "[error-counter]\nber_limit = 1e-13\n")
    with pytest.raises(RulesError, match="unknown setting 'error-counter'"):
        load_rules("default", site_path=site, env={})


def test_site_override_with_wrong_type_is_refused(tmp_path: Path) -> None:
    site = write(tmp_path, "rules.toml", '[mtu]\nib_mtu = "4096"\n')
    with pytest.raises(RulesError, match="wrong type"):
        load_rules("default", site_path=site, env={})


def test_site_cannot_override_the_pack_table(tmp_path: Path) -> None:
    site = write(tmp_path, "rules.toml", '[pack]\npriority = 99\n')
    with pytest.raises(RulesError, match="cannot be overridden"):
        load_rules("default", site_path=site, env={})


def test_site_may_add_port_classes_which_are_tried_first_and_change_grade_lists(tmp_path: Path) -> None:
    site = write(tmp_path, "rules.toml", """
[grade]
shadow = ["mtu", "error-counters.symbol_error_rate"]
[port-classes.spare]
hca_names = ["mlx5_7"]
role = "unused"
[port-classes.compute]
expected_rate_gbps = 200
""")
    pack = load_rules("dgx-h100", site_path=site, env={})
    assert [port_class.name for port_class in pack.port_classes] == ["spare", "compute", "storage"]
    assert pack.port_classes[1].expected_rate_gbps == 200.0
    inventory = dgx_h100()
    assert pack.port_class(port_of(inventory, "mlx5_7:1"), inventory.hcas[7]).name == "spare"
    assert pack.port_class(port_of(inventory, "mlx5_6:1"), inventory.hcas[6]).name == "compute"
    assert pack.is_shadow("mtu")
    assert pack.is_shadow("error-counters", "symbol_error_rate")
    assert pack.is_shadow("error-counters", "error-counters.symbol_error_rate")
    assert not pack.is_shadow("error-counters", "link_downed")
    assert not pack.is_shadow("error-counters")


def test_invalid_port_class_from_site_is_refused(tmp_path: Path) -> None:
    site = write(tmp_path, "rules.toml", '[port-classes.spare]\nrole = "spares"\n')
    with pytest.raises(RulesError, match="role = 'spares'"):
        load_rules("default", site_path=site, env={})


def test_explicit_site_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="does not exist"):
        load_rules("default", site_path=tmp_path / "none.toml", env={})


# -- port classes, output ----------------------------------------------------------------

def test_port_class_matching_by_link_layer_type_and_glob() -> None:
    pack = load_rules("dgx-h100", env={})
    inventory = dgx_h100()
    bond = inventory.hca("mlx5_bond_0")
    assert bond is not None
    assert pack.port_class(bond.ports[1], bond).name == "storage"
    assert pack.port_class(port_of(inventory, "mlx5_0:1"), inventory.hcas[0]).name == "compute"
    # An IB port of another HCA type matches no class.
    other = Hca("mlx5_9", ca_type="MT4123")
    assert pack.port_class(Port("mlx5_9", 1, PortState.ACTIVE, link_layer=LinkLayer.INFINIBAND), other) is None
    # Unknown link layer never matches a class that names one.
    assert pack.port_class(Port("mlx5_0", 1), inventory.hcas[0]) is None


def test_to_toml_round_trips_the_merged_pack(tmp_path: Path) -> None:
    site = write(tmp_path, "rules.toml", '[port-classes.spare]\nhca_names = ["mlx5_7"]\nrole = "unused"\n')
    pack = load_rules("dgx-h100", site_path=site, env={})
    text = pack.to_toml()
    assert text.startswith("# rule pack: dgx-h100\n# selected: --rules dgx-h100, site overrides")
    assert tomllib.loads(text) == pack.data
    assert text.index("[pack]") < text.index("[grade]") < text.index("[port-classes.spare]") < text.index("[port-state]")


class RecordingRules(dict):
    """A rules mapping that records every key a check asks for."""

    def __init__(self, values: dict, asked: set[str]) -> None:
        super().__init__(values)
        self.asked = asked

    def get(self, key, default=None):  # type: ignore[override]
        self.asked.add(key)
        return super().get(key, default)


def test_every_threshold_the_checks_read_is_in_the_default_pack() -> None:
    from inventory_factory import history_of, roce_node
    from netdoctor.checks.api import CheckContext
    from netdoctor_plugins.error_counters import error_counters
    from netdoctor_plugins.link_speed import link_speed
    from netdoctor_plugins.mtu import mtu
    from netdoctor_plugins.port_state import port_state

    default = load_rules("default", env={})
    # Nodes where every counter is high and grew, so every per-counter key is consulted.
    inventories = []
    for inventory in (dgx_h100(), roce_node()):
        for port in inventory.ports:
            port.counters = {name: 1000 for name in port.counters}
            port.hw_counters = {name: 1000 for name in port.hw_counters}
        inventories.append(inventory)
    for check_id, function in (("port-state", port_state), ("link-speed", link_speed),
                               ("error-counters", error_counters), ("mtu", mtu)):
        asked: set[str] = set()
        for inventory in inventories:
            grown = history_of(inventory, changes={port.name: {**{name: 1 for name in port.counters},
                                                             **{f"hw_counters/{name}": 1 for name in port.hw_counters}}
                                                   for port in inventory.ports})
            for history in (None, grown):
                rules = RecordingRules(dict(default.section(check_id)), asked)
                list(function(CheckContext(check_id, inventory, rules, history=history)))
        missing = asked - set(default.section(check_id))
        assert asked and not missing, f"{check_id} reads keys missing from default.toml: {sorted(missing)}"
