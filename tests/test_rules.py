"""Rule-pack loader: bundled packs, extends, auto-selection, site overrides, shadow, port classes."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from inventory_factory import dgx_h100, h100_gpus, ib_hca, port_of, roce_node
from netdoctor.errors import RulesError
from netdoctor.inventory.model import (
    Dmi,
    Gpu,
    Hca,
    Inventory,
    LinkLayer,
    LinkRate,
    PhysState,
    Port,
    PortState,
    SourceState,
    SourceStatus,
    Topology,
)
from netdoctor.inventory.queries import GpuProximity, gpu_proximity
from netdoctor.packs import bundled_packs, load_rules, match_reasons, pack_toml

STRUCTURE = {"pack", "grade", "port-classes"}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- bundled packs -----------------------------------------------------------------------

def test_bundled_packs_are_found_through_the_installed_package() -> None:
    packs = bundled_packs()
    assert set(packs) == {"default", "dgx-h100", "hgx-a100", "pcie-only", "roce", "aws-p4d", "aws-p5", "aws-p5en",
                          "gcp-a3-high", "gcp-a3-mega", "hgx-b200", "hgx-b300", "gb200-nvl72", "gb300-nvl72"}
    assert all(path.name == f"{name}.toml" and path.is_file() for name, path in packs.items())


@pytest.mark.parametrize("name", ["default", "dgx-h100", "hgx-a100", "pcie-only", "roce", "aws-p4d", "aws-p5",
                                  "aws-p5en", "gcp-a3-high", "gcp-a3-mega", "hgx-b200", "hgx-b300", "gb200-nvl72",
                                  "gb300-nvl72"])
def test_every_bundled_pack_loads_and_names_itself(name: str) -> None:
    pack = load_rules(name, env={})
    assert pack.name == name
    assert pack.selection_reason == f"--rules {name}"
    assert pack.files[0].name == "default.toml"
    assert pack.files[-1].name == f"{name}.toml"
    expected_required = {"default": {"port-state", "link-speed"}, "pcie-only": {"pcie-link"},
                         "roce": {"port-state", "link-speed", "pfc-ecn"}, "gcp-a3-high": {"fabric-netdevs"},
                         "gcp-a3-mega": {"fabric-netdevs"}}
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
    assert pack.data["pack"]["match"]["gpu_name"] == "^NVIDIA (H100 80GB HBM3|H200|H800|H20)$"
    assert [port_class.name for port_class in pack.port_classes] == ["compute", "storage"]
    assert pack.port_classes[0].expected_rate_gbps == 400.0 and pack.port_classes[0].expected_width == 4


def test_section_of_an_absent_check_is_empty_and_read_only() -> None:
    pack = load_rules("default", env={})
    section = pack.section("no-such-check")
    assert dict(section) == {}
    with pytest.raises(TypeError):
        pack.section("mtu")["ib_mtu"] = 2048  # type: ignore[index]


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
    ('[pack]\nname = "x"\n[port-classes.c]\nlink_layer = "OmniPath"\n', "InfiniBand, Ethernet or Unspecified"),
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

def dgx_node() -> Inventory:
    """The factory's DGX H100 as its firmware names it (DMI): the dgx-h100 pack is for 8-GPU platforms."""
    inventory = dgx_h100()
    inventory.dmi = Dmi("NVIDIA", "DGXH100")
    return inventory


def a100_node() -> Inventory:
    hcas = []
    for index in range(8):
        hca = ib_hca(index, rate=LinkRate(200, 4, "HDR"))
        hcas.append(Hca(hca.name, ca_type="MT4123", ports=hca.ports))
    gpus = [Gpu(index, name="NVIDIA A100-SXM4-80GB") for index in range(8)]
    return Inventory("a100-01", "2026-11-21T22:40:00Z", gpus=gpus, hcas=hcas)


@pytest.mark.parametrize(("inventory", "expected"), [
    (dgx_node(), "dgx-h100"),
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
    reason = load_rules(None, dgx_node(), env={}).selection_reason
    assert "priority 50" in reason and "platform DGXH100 (DMI product_name 'DGXH100')" in reason
    assert "GPU 'NVIDIA H100 80GB HBM3' matches '^NVIDIA (H100 80GB HBM3|H200|H800|H20)$'" in reason
    assert "HCA type MT4129" in reason and "compute ports are InfiniBand" in reason


def test_four_gpu_h100_node_does_not_get_the_eight_gpu_pack() -> None:
    inventory = dgx_h100()
    inventory.gpus = h100_gpus(4)
    assert load_rules(None, inventory, env={}).name == "default"


def test_link_layer_match_ignores_storage_ports_of_the_packs_own_classes() -> None:
    # 8 IB rails and many Ethernet storage ports: the storage class keeps them out of the vote.
    inventory = dgx_node()
    for index in range(10):
        hca = ib_hca(20 + index, link_layer=LinkLayer.ETHERNET)
        inventory.hcas.append(hca)
    assert load_rules(None, inventory, env={}).name == "dgx-h100"


def l40s_node(*hcas: Hca) -> Inventory:
    gpus = [Gpu(index, name="NVIDIA L40S", numa_node=index // 2) for index in range(4)]
    return Inventory("l40s-01", "2026-11-21T22:40:00Z", gpus=gpus, hcas=list(hcas))


def ethernet_hca(name: str, ca_type: str, gbps: float, *, state: PortState = PortState.ACTIVE) -> Hca:
    port = Port(name, 1, state, PhysState.LINK_UP if state is PortState.ACTIVE else PhysState.POLLING,
                LinkRate(gbps, 1), LinkLayer.ETHERNET)
    return Hca(name, ca_type=ca_type, numa_node=1, ports={1: port})


def test_pcie_gpu_node_with_a_25g_management_nic_gets_pcie_only_not_roce() -> None:
    # /tmp/rv/pcieeth: 4x L40S and one ConnectX-6 Lx (MT4127) 25GbE port that is RDMA-capable.
    pack = load_rules(None, l40s_node(ethernet_hca("mlx5_0", "MT4127", 25)), env={})
    assert pack.name == "pcie-only"
    assert "0 RDMA ports >= 100 Gb/s" in pack.selection_reason
    assert [(port_class.name, port_class.role) for port_class in pack.port_classes] == [("management", "management")]


@pytest.mark.parametrize(("hcas", "expected", "why"), [
    # Two fast ConnectX-6 Dx ports next to GPUs: a RoCE fabric.
    ((ethernet_hca("mlx5_0", "MT4125", 100), ethernet_hca("mlx5_1", "MT4125", 100)), "roce",
     "2 RDMA ports Ethernet >= 100 Gb/s on MT4125/MT4129/MT4131/MT41692"),
    # One 400G port is not a GPU fabric (and not pcie-only either: it is a fast RDMA port).
    ((ethernet_hca("mlx5_0", "MT4129", 400),), "default", ""),
    # Two 25G ConnectX-6 Lx ports: management NICs.
    ((ethernet_hca("mlx5_0", "MT4127", 25), ethernet_hca("mlx5_1", "MT4127", 25)), "pcie-only", ""),
    # Rails down report a placeholder rate: they count by HCA type.
    ((ethernet_hca("mlx5_0", "MT4129", 40, state=PortState.DOWN),
      ethernet_hca("mlx5_1", "MT4129", 40, state=PortState.DOWN)), "roce", ""),
])
def test_roce_pack_needs_two_fast_ports_on_gpu_fabric_nics(hcas: tuple[Hca, ...], expected: str, why: str) -> None:
    pack = load_rules(None, l40s_node(*hcas), env={})
    assert pack.name == expected
    assert why in pack.selection_reason


def test_roce_pack_needs_gpus() -> None:
    inventory = roce_node()
    inventory.gpus = []
    assert load_rules(None, inventory, env={}).name == "default"


def test_fast_ib_on_a_pcie_gpu_node_is_not_pcie_only() -> None:
    hcas = [ib_hca(index) for index in range(2)]
    pack = load_rules(None, l40s_node(*hcas), env={})
    assert pack.name == "default"


def test_match_reasons_say_which_fabric_count_failed() -> None:
    roce = load_rules("roce", env={})
    holds, reasons = match_reasons(roce.data, roce.port_classes, l40s_node(ethernet_hca("mlx5_0", "MT4129", 400)))
    assert not holds
    assert reasons == ["1 RDMA ports Ethernet >= 100 Gb/s on MT4125/MT4129/MT4131/MT41692, fewer than 2"]
    pcie = load_rules("pcie-only", env={})
    holds, reasons = match_reasons(pcie.data, pcie.port_classes, l40s_node(ib_hca(0)))
    assert not holds and reasons == ["1 RDMA ports >= 100 Gb/s, more than 0"]


def test_virtual_functions_do_not_count_twice_as_fabric_ports() -> None:
    pf = ethernet_hca("mlx5_0", "MT4129", 400)
    pf.pci_address = "0000:18:00.0"
    vf = ethernet_hca("mlx5_1", "MT4126", 400)
    vf.ca_type, vf.pci_address, vf.physical_function = "MT4129", "0000:18:00.1", "0000:18:00.0"
    roce = load_rules("roce", env={})
    holds, reasons = match_reasons(roce.data, roce.port_classes, l40s_node(pf, vf))
    assert not holds and reasons[0].startswith("1 RDMA ports")


def test_fabric_match_keys_are_type_checked(tmp_path: Path) -> None:
    path = write(tmp_path, "x.toml", '[pack]\nname = "x"\n[pack.match]\nmin_port_rate_gbps = true\n')
    with pytest.raises(RulesError, match="min_port_rate_gbps = True has the wrong type"):
        load_rules(str(path), env={})
    path.write_text('[pack]\nname = "x"\n[pack.match]\nmin_fabric_ports = 1.5\n')
    with pytest.raises(RulesError, match="min_fabric_ports = 1.5 has the wrong type"):
        load_rules(str(path), env={})


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
    assert pack.port_class(bond.ports[1], bond, inventory).name == "storage"
    assert pack.port_class(port_of(inventory, "mlx5_0:1"), inventory.hcas[0], inventory).name == "compute"
    # An IB port of another HCA type is not a rail: the storage class catches the rest.
    other = Hca("mlx5_9", ca_type="MT4123")
    ib_port = Port("mlx5_9", 1, PortState.ACTIVE, link_layer=LinkLayer.INFINIBAND)
    assert pack.port_class(ib_port, other, inventory).name == "storage"
    # In the roce pack (Ethernet classes only) it matches no class; nor does an unknown link layer.
    roce = load_rules("roce", env={})
    assert roce.port_class(ib_port, other, inventory) is None
    assert roce.port_class(Port("mlx5_0", 1), inventory.hcas[0], inventory) is None
    assert roce.port_class(Port("mlx5_0", 1, link_layer=LinkLayer.ETHERNET), other, inventory).name == "frontend"


# -- near_gpu ----------------------------------------------------------------------------

def topology_of(levels: dict[str, dict[str, str]]) -> Topology:
    """A `nvidia-smi topo -m` matrix: HCA name -> {GPU label -> level}; NIC labels in order."""
    names = {f"NIC{index}": name for index, name in enumerate(levels)}
    links = {(gpu, label): level for label, name in names.items() for gpu, level in levels[name].items()}
    gpus = tuple(sorted({gpu for row in levels.values() for gpu in row}))
    return Topology(gpus, tuple(names), links, names)


def storage_ib_node() -> Inventory:
    """DGX H100 whose dual-port ConnectX-7 storage card runs InfiniBand (NDR200 2X), PCIe NODE to the GPUs."""
    inventory = dgx_h100(storage=None)
    for index in (8, 9):
        inventory.hcas.append(ib_hca(index, rate=LinkRate(200, 2, "NDR")))
    rows = {f"mlx5_{index}": {f"GPU{gpu}": ("PIX" if gpu == index else "NODE" if (gpu < 4) == (index < 4) else "SYS")
                              for gpu in range(8)} for index in range(8)}
    rows.update({name: {f"GPU{gpu}": "SYS" if gpu < 4 else "NODE" for gpu in range(8)}
                 for name in ("mlx5_8", "mlx5_9")})
    inventory.topology = topology_of(rows)
    return inventory


def test_near_gpu_keeps_ib_storage_ports_out_of_the_compute_rails() -> None:
    inventory = storage_ib_node()
    pack = load_rules("dgx-h100", env={})
    classes = {port.name: port_class.name for _, port, port_class in pack.classified_ports(inventory)}
    assert classes == {**{f"mlx5_{index}:1": "compute" for index in range(8)},
                       "mlx5_8:1": "storage", "mlx5_9:1": "storage"}
    assert gpu_proximity(inventory, inventory.hcas[3]) == GpuProximity(True, "PIX to GPU3 in nvidia-smi topo -m")
    assert gpu_proximity(inventory, inventory.hcas[8]) == GpuProximity(
        False, "no GPU at PIX/PXB in nvidia-smi topo -m (only NODE, SYS)")
    # The class ignoring placement still calls the storage card a compute-class card (for gpu-nic-affinity).
    assert pack.port_class_ignoring_placement(inventory.hcas[8].ports[1], inventory.hcas[8]).name == "compute"
    storage_class = pack.port_class(inventory.hcas[8].ports[1], inventory.hcas[8], inventory)
    # A pack whose classes never ask for GPU proximity gives no proximity evidence.
    management = load_rules("pcie-only", env={})
    assert management.class_evidence(inventory, inventory.hcas[8], management.port_classes[0]) == {
        "port_class": "management", "role": "management"}
    # A pack that classes by placement says why the storage card is not a rail.
    assert pack.class_evidence(inventory, inventory.hcas[8], storage_class) == {
        "port_class": "storage", "role": "storage",
        "gpu_proximity": "no GPU at PIX/PXB in nvidia-smi topo -m (only NODE, SYS)"}


def test_near_gpu_without_topology_falls_back_to_numa_and_says_so() -> None:
    inventory = storage_ib_node()
    inventory.topology = None
    inventory.sources["nvidia-smi-topo-m"] = SourceStatus("nvidia-smi-topo-m", SourceState.TIMEOUT, "after 10 s")
    inventory.hcas[8].numa_node = 3          # a socket without GPUs
    near = gpu_proximity(inventory, inventory.hcas[0])
    assert near.near is True
    assert near.basis == ("NUMA node 0 shared with GPU0 (NUMA fallback: no nvidia-smi topo -m matrix "
                          "(nvidia-smi-topo-m timed out: after 10 s))")
    far = gpu_proximity(inventory, inventory.hcas[8])
    assert far.near is False and far.basis.startswith("no GPU on NUMA node 3 (NUMA fallback: ")
    pack = load_rules("dgx-h100", env={})
    port_class = pack.port_class(inventory.hcas[0].ports[1], inventory.hcas[0], inventory)
    assert pack.class_evidence(inventory, inventory.hcas[0], port_class)["gpu_proximity"] == near.basis
    # No NUMA facts either: cannot tell, and the first class (compute) takes the port.
    inventory.hcas[8].numa_node = None
    assert gpu_proximity(inventory, inventory.hcas[8]).near is None
    assert pack.port_class(inventory.hcas[8].ports[1], inventory.hcas[8], inventory).name == "compute"
    # An HCA missing from a matrix that has a NIC legend also falls back to NUMA.
    inventory.topology = topology_of({"mlx5_0": {"GPU0": "PIX"}})
    assert gpu_proximity(inventory, inventory.hcas[1]).basis == (
        "NUMA node 0 shared with GPU0 (NUMA fallback: mlx5_1 is not in the nvidia-smi topo -m matrix)")


def test_near_gpu_must_be_a_boolean(tmp_path: Path) -> None:
    path = write(tmp_path, "x.toml", '[pack]\nname = "x"\n[port-classes.c]\nnear_gpu = "yes"\n')
    with pytest.raises(RulesError, match="near_gpu = 'yes' has the wrong type"):
        load_rules(str(path), env={})
    path.write_text('[pack]\nname = "x"\n[port-classes.c]\nnear_gpu = false\n')
    assert load_rules(str(path), env={}).port_classes[0].near_gpu is False


def test_to_toml_round_trips_the_merged_pack(tmp_path: Path) -> None:
    site = write(tmp_path, "rules.toml", '[port-classes.spare]\nhca_names = ["mlx5_7"]\nrole = "unused"\n')
    pack = load_rules("dgx-h100", site_path=site, env={})
    text = pack_toml(pack)
    assert text.startswith("# rule pack: dgx-h100\n# selected: --rules dgx-h100, site overrides")
    assert tomllib.loads(text) == pack.data
    assert text.index("[pack]") < text.index("[grade]") < text.index("[port-classes.spare]") < text.index("[port-state]")


def test_a_site_pack_without_extends_stands_on_default_and_rejects_typos(tmp_path) -> None:
    pack = tmp_path / "site.toml"
    pack.write_text('[pack]\nname = "site"\ndescription = "one threshold"\n[mtu]\nib_mtu = 2048\n')
    loaded = load_rules(str(pack), env={})
    assert loaded.section("mtu")["ib_mtu"] == 2048
    assert loaded.section("mtu")["roce_min_mtu"] == 4200            # from default.toml
    assert "symbol_error_absolute" in loaded.section("error-counters")
    pack.write_text('[pack]\nname = "site"\ndescription = "typo"\n[mtu]\nib_active_mtu = 2048\n')
    with pytest.raises(RulesError, match="ib_active_mtu"):
        load_rules(str(pack), env={})
