"""Issue 13, the node side: each port's first-hop switch (`neighbors`) and the OFED, fabric
manager and NCCL versions (`versions`) in every node report.

Parsers on the real corpus (tests/data/corpus/{smpquery,lldpctl,ofed_info,nv-fabricmanager},
PROVENANCE.tsv), the order of trust of the join (smpquery > a recorded iblinkinfo > LLDP),
the report, and the live path with fake tools: replaying, hanging, not installed.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corpus_util import corpus_files
from fake_tools import live_source_for
from inventory_factory import roce_node
from netdoctor.errors import ParseError
from netdoctor.host.snapshot import open_snapshot
from netdoctor.inventory.build import build_inventory
from netdoctor.inventory.from_neighbors import place_lldp_neighbors
from netdoctor.inventory.model import FirstHop, Inventory, Netdev, SourceState
from netdoctor.inventory.plan import report_only
from netdoctor.inventory.queries import neighbors, versions
from netdoctor.parsers.lldpctl import LldpNeighbor, parse_lldpctl_json
from netdoctor.parsers.smpquery import parse_smpquery_nodedesc, parse_smpquery_nodeinfo, switch_name
from netdoctor.parsers.versions import parse_fabricmanager_version, parse_ofed_info
from netdoctor.probe.loopback import LoopbackResult, RailResult
from netdoctor.probe.result import ProbeNotRun, ProbeResult
from netdoctor.run import CheckOptions, loaded_nccl, run_check

NODES = Path(__file__).resolve().parent / "fixtures" / "nodes"

# The dgx-h100 fixture: rail k (the k-th IB HCA in rail order) on leaf-r{k}-01, port 1; the
# storage ports on their own Ethernet leaf, heard over LLDP (switch port ids, not numbers).
DGX_LEAF_GUIDS = {"mlx5_0": "0xa088c203003dd02b", "mlx5_3": "0xa088c2030046ce58", "mlx5_4": "0xa088c203001aacec"}
DGX_RAILS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")


# --- the parsers, on every corpus file ----------------------------------------------------

def _expect_nodeinfo(node_type: str, guid: str, local_port: int | None, **more: Any) -> Callable[[str], None]:
    def check(text: str) -> None:
        info = parse_smpquery_nodeinfo(text)
        assert (info.node_type, info.node_guid, info.local_port) == (node_type, guid, local_port)
        for key, value in more.items():
            assert getattr(info, key) == value, key
    return check


def _expect_error(parser: Callable[[str], Any], words: str) -> Callable[[str], None]:
    def check(text: str) -> None:
        with pytest.raises(ParseError, match=words):
            parser(text)
    return check


def _expect(parser: Callable[[str], Any], expected: Any) -> Callable[[str], None]:
    def check(text: str) -> None:
        assert parser(text) == expected
    return check


EXPECTATIONS: dict[str, dict[str, Callable[[str], None]]] = {
    "smpquery": {
        "ompi-users-18821__smpquery-nodeinfo-lid4-ca-port1.txt": _expect_nodeinfo(
            "Channel Adapter", "0x0002c90300336fe0", 1, port_guid="0x0002c90300336fe1", num_ports=2,
            system_guid="0x0002c90300336fe3", device_id="0x1003", vendor_id="0x0002c9", address="Lid 4", is_switch=False),
        "ompi-users-18821__smpquery-nodeinfo-lid5-ca-port2.txt": _expect_nodeinfo(
            "Channel Adapter", "0x0002c90300336fe0", 2, port_guid="0x0002c90300336fe2"),
        "ompi-users-18821__smpquery-nodeinfo-unreachable-stderr.txt": _expect_error(
            parse_smpquery_nodeinfo, "iberror.*node info query failed"),
        "ucar-ib-cable-tool__smpquery-nodeinfo-guid-switch-localport17.txt": _expect_nodeinfo(
            "Switch", "0xe41d2d03004bef70", 17, num_ports=30, device_id="0xcb20", is_switch=True, address="Lid 1627"),
        "ibsim-tutorial__smpquery-nodeinfo-lid3-sim-switch.txt": _expect_nodeinfo(
            "Switch", "0x0000000000200001", 0, num_ports=8, vendor_id="0x000000"),
        "python-rdma-slides__ibtool-smpquery-ni-dr-0-2.txt": _expect_nodeinfo(
            "Switch", "0x001777fffef96e79", 1, address="DR Path (0, 2)"),
        "ib-notes-cn__smpquery-nd-lid37.txt": _expect(parse_smpquery_nodedesc, "b1nstcx02 HCA-1"),
    },
    "lldpctl": {
        "pica8-gjson-example__lldpctl-json-one-interface-object.json": _expect(parse_lldpctl_json, {
            "eth0": LldpNeighbor("eth0", "B2-Tor", "cc:37:ab:60:cd:c1", "mac", "ge-1/1/28", "ifname", "ge-1/1/28")}),
        "voxpupuli-puppet-lldpd__lldp_spec-output1-interface-list.json": _expect(parse_lldpctl_json, {
            "eno1": LldpNeighbor("eno1", "router", "10:0e:7e:aa:aa:aa", "mac", "ge-1/0/1", "ifname", "host:eno1 {#}")}),
        "voxpupuli-puppet-lldpd__lldp_spec-output2-chassis-without-name.json": _expect(parse_lldpctl_json, {
            "enp3s0": LldpNeighbor("enp3s0", None, "44:94:fc:9d:55:0a", "mac", "g17", "local", None)}),
        "voxpupuli-puppet-lldpd__lldp_spec-output3-no-neighbor.json": _expect(parse_lldpctl_json, {}),
        "scanopy__lldpcli-json-two-interfaces-trimmed.json": _expect(parse_lldpctl_json, {
            # A MAC is lower-cased; a blank port description (" ") is none.
            "eno1": LldpNeighbor("eno1", "netlab-leaf2", "c0:c9:89:ef:20:d2", "mac", "swp1", "ifname", None),
            "eno3": LldpNeighbor("eno3", "netlab-mgmt0", "dc:da:4d:86:f4:ea", "mac", "Ethernet2", "local",
                                 "netlab-server : OS")}),
    },
    "ofed_info": {
        "azure-hpc-notes__ofed_info-s-mlnx-ofed-23.10.txt": _expect(lambda text: parse_ofed_info(text).text,
                                                                   "MLNX_OFED_LINUX-23.10-1.1.9.0"),
        "rsocket-notes__ofed_info-s-mlnx-ofed-4.0.txt": _expect(lambda text: (parse_ofed_info(text).distribution,
                                                                              parse_ofed_info(text).version),
                                                                ("MLNX_OFED_LINUX", "4.0-2.0.0.1")),
        "exa-dgx-os-notes__ofed_info-s-doca-ofed-24.10.txt": _expect(lambda text: (parse_ofed_info(text).distribution,
                                                                                   parse_ofed_info(text).version),
                                                                     ("OFED-internal", "24.10-1.1.4.0.200")),
        "network-operator-docs__ofed_info-s-mofed-container-24.07.txt": _expect(
            lambda text: parse_ofed_info(text).text, "OFED-internal-24.07-0.6.1"),
        "ib-install-notes__ofed_info-s-mlnx-ofed-5.4-three-part.txt": _expect(
            lambda text: parse_ofed_info(text).version, "5.4-3.6.8"),
    },
    "nv-fabricmanager": {
        "k8s-a100-notes__nv-fabricmanager-version-450.txt": _expect(parse_fabricmanager_version, "450.102.04"),
        "dell-gpu-server-notes__nv-fabricmanager-version-610-build-info.txt": _expect(parse_fabricmanager_version,
                                                                                      "610.57.04"),
        "attestation-tests__nv-fabricmanager-version-580.txt": _expect(parse_fabricmanager_version, "580.159.03"),
    },
}


@pytest.mark.parametrize(("kind", "path"), [pytest.param(kind, path, id=f"{kind}/{path.name}")
                                            for kind in EXPECTATIONS for path in corpus_files(kind)])
def test_corpus_file(kind: str, path: Path) -> None:
    assert path.name in EXPECTATIONS[kind], f"no expectation for new corpus file {kind}/{path.name}"
    EXPECTATIONS[kind][path.name](path.read_text())


def test_every_corpus_file_has_an_expectation_and_no_stale_one() -> None:
    for kind, table in EXPECTATIONS.items():
        assert {path.name for path in corpus_files(kind)} == set(table), kind


def test_nodedesc_padding_is_read_exactly() -> None:
    # smpquery pads dots and name to 32 characters; from 32 characters on there is one dot.
    long_name = "MF0;a-very-long-leaf-name-07:MQM9700/U1"
    assert parse_smpquery_nodedesc(f"Node Description:.{long_name}\n") == long_name
    assert parse_smpquery_nodedesc("Node Description:" + "." * 7 + "MF0;leaf-r1-01:MQM9700/U1\n") == \
        "MF0;leaf-r1-01:MQM9700/U1"
    assert parse_smpquery_nodedesc("Node Description:" + "." * 32 + "\n") == ""
    assert switch_name("MF0;leaf-r1-01:MQM9700/U1") == "leaf-r1-01"
    assert switch_name("MF0;SB7700:MSB7700/U1") == "SB7700"       # the corpus iblinkinfo's switch
    assert switch_name("Quantum Mellanox Technologies") == "Quantum Mellanox Technologies"
    for bad in ("Node Description:.x\nNode Description:.y\n", "garbage\n", "Node Description:." + "x" * 80):
        with pytest.raises(ParseError):
            parse_smpquery_nodedesc(bad)


def test_nodeinfo_refuses_what_is_not_nodeinfo() -> None:
    for bad in ("# Port info: Lid 4 port 1\nLid:.............................4\n",
                "NodeType:........................Switch\n",                       # no Guid
                "NodeType:........................Hub\nGuid:............................0x1\n",
                "NodeType:........................Switch\nGuid:............................0xzz\n",
                "# Node info: Lid 1\nGuid:...0x1\nNodeType:...Switch\n# Node info: Lid 2\n",
                "NodeType:...Switch\nGuid:...0x1\nLocalPort:...seventeen\n"):
        with pytest.raises(ParseError):
            parse_smpquery_nodeinfo(bad)


def test_lldp_shapes_json0_and_refusals() -> None:
    json0 = {"lldp": [{"interface": [
        {"name": "eno1", "via": "LLDP", "chassis": [{"id": [{"type": "mac", "value": "00:00:00:00:00:01"}],
                                                      "name": [{"value": "switch-a"}]}],
         "port": [{"id": [{"type": "ifname", "value": "Ethernet1"}], "descr": [{"value": "to eno1"}]}]}]}]}
    assert parse_lldpctl_json(json.dumps(json0)) == {
        "eno1": LldpNeighbor("eno1", "switch-a", "00:00:00:00:00:01", "mac", "Ethernet1", "ifname", "to eno1")}
    # Two neighbours heard on one port (a repeater, or a wider multicast scope): the first.
    two = {"lldp": {"interface": [{"eth0": {"chassis": {"a": {"id": {"type": "mac", "value": "aa"}}}}},
                                  {"eth0": {"chassis": {"b": {"id": {"type": "mac", "value": "bb"}}}}}]}}
    assert parse_lldpctl_json(json.dumps(two))["eth0"].chassis_name == "a"
    assert parse_lldpctl_json('{"lldp": {"interface": []}}') == {}
    assert parse_lldpctl_json('{"lldp": []}') == {}
    for bad in ("not json {", '{"lldp": "x"}', '{"other": {}}', "[1, 2]", '{"lldp": {"interface": "eth0"}}',
                "[" * 100_000 + "]" * 100_000):
        with pytest.raises(ParseError):
            parse_lldpctl_json(bad)


def test_version_lines_refuse_other_text() -> None:
    for bad in ("ofed_info: command not found\n", "MLNX_OFED_LINUX\n", "23.10-1.1.9.0\n",
                "bash: line 1: ofed_info: command not found\n", "x" * 500 + "-1.0:\n"):
        with pytest.raises(ParseError):
            parse_ofed_info(bad)
    for bad in ("nv-fabricmanager: error while loading shared libraries\n", "Fabric Manager version is : \n"):
        with pytest.raises(ParseError):
            parse_fabricmanager_version(bad)


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda children: st.lists(children, max_size=4)
                     | st.dictionaries(st.sampled_from(["lldp", "interface", "chassis", "port", "id", "name", "value",
                                                        "type", "descr", "eth0"]) | st.text(max_size=8),
                                       children, max_size=4), max_leaves=30)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_JSON)
def test_any_json_under_lldp_gives_neighbors_or_a_parse_error(body: Any) -> None:
    """A structure-aware complement of the fuzz suite: lldpd's keys with anything under them."""
    for document in ({"lldp": body}, {"lldp": {"interface": body}}, {"lldp": {"interface": {"eth0": body}}}):
        try:
            found = parse_lldpctl_json(json.dumps(document))
        except ParseError:
            continue
        assert all(isinstance(neighbor, LldpNeighbor) for neighbor in found.values())


# --- the join: smpquery > a recorded fabric scan > LLDP --------------------------------------

def _inventory(snapshot: Path) -> Inventory:
    with open_snapshot(snapshot) as source:
        return build_inventory(source)


def _copy(tmp_path: Path, fixture: str) -> Path:
    copy = tmp_path / fixture
    shutil.copytree(NODES / fixture, copy, symlinks=True)
    return copy


def test_dgx_fixture_neighbors_come_from_smpquery_and_agree_with_the_recorded_scan() -> None:
    inventory = _inventory(NODES / "dgx-h100")
    found = neighbors(inventory)
    for rail, hca in enumerate(DGX_RAILS):
        hop = found[f"{hca}:1"]
        assert (hop["switch_name"], hop["switch_port"], hop["source"]) == (f"leaf-r{rail}-01", 1, "smpquery")
        assert hop["switch_guid"].startswith("0xa088c20300") and len(hop["switch_guid"]) == 18
    for hca, guid in DGX_LEAF_GUIDS.items():
        assert found[f"{hca}:1"]["switch_guid"] == guid
    assert len({found[f"{hca}:1"]["switch_guid"] for hca in DGX_RAILS}) == 8      # one leaf per rail
    assert found["mlx5_1:1"] == found["mlx5_2:1"] | {"switch_port_id": "Ethernet0"} and \
        found["mlx5_2:1"]["switch_port_id"] == "Ethernet8"
    assert {key: found["mlx5_1:1"][key] for key in ("switch_name", "switch_port", "source")} == {
        "switch_name": "storage-leaf-01", "switch_port": None, "source": "lldp"}
    # The fixture's iblinkinfo names the same leaves and ports: no conflict.
    assert inventory.conflicts == []
    assert inventory.port("mlx5_3:1").neighbor.description == "MF0;leaf-r1-01:MQM9700/U1"


def test_smpquery_beats_the_recorded_fabric_scan_and_the_difference_is_kept(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path, "dgx-h100")
    nodeinfo = snapshot / "commands" / "smpquery-nodeinfo-mlx5_3-1.out"
    # The cable was moved since the scan was recorded: mlx5_3 now lands on port 17 of another leaf.
    text = nodeinfo.read_text().replace(DGX_LEAF_GUIDS["mlx5_3"], "0xb83fd203000abcde")
    nodeinfo.write_text(text.replace("LocalPort:.......................1\n", "LocalPort:.......................17\n"))
    (snapshot / "commands" / "smpquery-nodedesc-mlx5_3-1.out").write_text(
        "Node Description:......MF0;leaf-r9-02:MQM9700/U1\n")
    inventory = _inventory(snapshot)
    hop = inventory.port("mlx5_3:1").neighbor
    assert hop == FirstHop("0xb83fd203000abcde", "leaf-r9-02", 17, "smpquery", description="MF0;leaf-r9-02:MQM9700/U1")
    (conflict,) = inventory.conflicts
    assert (conflict.subject, conflict.fact, conflict.chosen) == ("mlx5_3:1", "neighbor", "smpquery")
    assert conflict.values == {"iblinkinfo": f"{DGX_LEAF_GUIDS['mlx5_3']} port 1", "smpquery": "0xb83fd203000abcde port 17"}


def test_without_smpquery_the_recorded_fabric_scan_names_the_switch(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path, "dgx-h100")
    for path in (snapshot / "commands").glob("smpquery-*"):
        path.unlink()
    inventory = _inventory(snapshot)
    found = neighbors(inventory)
    assert found["mlx5_3:1"] == {"switch_guid": DGX_LEAF_GUIDS["mlx5_3"], "switch_name": "leaf-r1-01",
                                 "switch_port": 1, "source": "iblinkinfo"}
    assert {found[f"{hca}:1"]["source"] for hca in DGX_RAILS} == {"iblinkinfo"}
    assert inventory.source("smpquery-nodeinfo-mlx5_3-1").state is SourceState.MISSING
    # A port whose CA is absent from the scan (down) has none.
    down = _copy(tmp_path / "down", "dgx-h100-port-down")
    for path in (down / "commands").glob("smpquery-*"):
        path.unlink()
    assert "mlx5_4:1" not in neighbors(_inventory(down))


def test_a_scan_in_the_one_line_form_names_the_peer_by_guid() -> None:
    from netdoctor.inventory.from_neighbors import iblinkinfo_neighbor, switch_guids_by_lid
    from netdoctor.parsers.iblinkinfo import parse_iblinkinfo

    links = parse_iblinkinfo('0x7cfe9003009ce5b0 "           ib-i1l1s01"   1719   10[  ] ==( 4X 25.78125 Gbps '
                             'Active/  LinkUp)==>  0x7cfe9003003b4bde  134    1[  ] "o0001 HCA-1" ( )\n'
                             '0x7cfe9003003b4bde "o0001 HCA-1"    134    1[  ] ==( 4X 25.78125 Gbps Active/  LinkUp)'
                             '==>  0x7cfe9003009ce5b0   1719   10[  ] "MF0;ib-i1l1s01:MSB7700/U1" ( )\n')
    assert switch_guids_by_lid(links) == {}             # `-l` does not say which node is a switch
    assert iblinkinfo_neighbor(links[1], {}) == FirstHop("0x7cfe9003009ce5b0", "ib-i1l1s01", 10, "iblinkinfo",
                                                         description="MF0;ib-i1l1s01:MSB7700/U1")


def test_smpquery_reaching_an_hca_is_no_switch(tmp_path: Path) -> None:
    """A back-to-back cable: the first hop is another node's HCA (the corpus' real CA NodeInfo)."""
    snapshot = _copy(tmp_path, "cpu-node")
    (snapshot / "commands" / "iblinkinfo.status").write_text("missing\n")
    (snapshot / "commands" / "iblinkinfo.out").unlink()
    ca = next(path for path in corpus_files("smpquery") if "lid4-ca-port1" in path.name).read_text()
    (snapshot / "commands" / "smpquery-nodeinfo-mlx5_0-1.out").write_text(ca)
    assert neighbors(_inventory(snapshot)) == {}


def test_a_failed_or_hung_query_leaves_that_port_without_a_neighbor_and_the_node_graded_as_before(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path, "dgx-h100")
    commands = snapshot / "commands"
    (commands / "iblinkinfo.out").unlink()
    (commands / "iblinkinfo.status").write_text("missing\n")
    (commands / "smpquery-nodeinfo-mlx5_5-1.status").write_text("timeout\n")
    (commands / "smpquery-nodeinfo-mlx5_5-1.out").write_text("")
    (commands / "smpquery-nodeinfo-mlx5_6-1.status").write_text("255\n")
    (commands / "smpquery-nodeinfo-mlx5_6-1.out").write_text("")
    (commands / "smpquery-nodeinfo-mlx5_6-1.err").write_text(
        "ibwarn: [11192] mad_rpc: _do_madrpc failed; dport (DR path slid 65535; dlid 65535; 0,1)\n"
        "smpquery: iberror: failed: operation nodeinfo: node info query failed\n")
    (commands / "ofed_info-s.status").write_text("timeout\n")
    (commands / "nv-fabricmanager-version.out").write_text("nv-fabricmanager: garbage\n")
    report = run_check(CheckOptions(snapshot=snapshot, no_probe=True, deadline_s=30.0), env={})
    data = report.to_json()
    assert data["grade"] == "pass"
    assert "mlx5_5:1" not in data["neighbors"] and "mlx5_6:1" not in data["neighbors"]
    assert data["neighbors"]["mlx5_9:1"]["source"] == "smpquery"
    assert "ofed" not in data["versions"] and "fabric_manager" not in data["versions"]
    # The hang is the source's status, not a finding: no check judged without it.
    assert not [finding for finding in data["findings"] if finding["check"] == "discovery"]
    inventory = _inventory(snapshot)
    assert inventory.source("smpquery-nodeinfo-mlx5_5-1").state is SourceState.TIMEOUT
    assert inventory.source("smpquery-nodeinfo-mlx5_6-1").state is SourceState.ERROR
    assert inventory.source("ofed_info-s").state is SourceState.TIMEOUT
    assert inventory.source("nv-fabricmanager-version").state is SourceState.PARSE_ERROR
    assert report_only("smpquery-nodedesc-mlx5_5-1") and not report_only("perfquery-x-mlx5_5-1")


def test_lldp_names_the_switch_of_each_roce_port_by_netdev() -> None:
    inventory = _inventory(NODES / "roce-h100")
    found = neighbors(inventory)
    assert sorted(found) == [f"mlx5_{rail}:1" for rail in range(8)]
    for rail in range(8):
        hop = found[f"mlx5_{rail}:1"]
        assert (hop["switch_name"], hop["switch_port"], hop["switch_port_id"], hop["source"]) == (
            f"leaf-r{rail}-01", None, "Ethernet0", "lldp")
        assert hop["switch_guid"].count(":") == 5      # the chassis id: the switch's MAC
    # One interface heard (the management port, no RDMA port): lldpd's object form, nothing placed.
    cpu = _inventory(NODES / "cpu-node")
    assert set(cpu.lldp) == {"eno1"} and neighbors(cpu)["mlx5_0:1"]["source"] == "smpquery"


def test_lldp_on_a_roce_lag_bond_is_read_from_its_slaves() -> None:
    inventory = roce_node()
    port = inventory.port("mlx5_0:1")
    port.netdev = "bond0"
    inventory.netdevs.append(Netdev("bond0", bond_slaves=("ens2f1np1", "ens2f0np0")))
    inventory.lldp = {"ens2f0np0": LldpNeighbor("ens2f0np0", "leaf-a", "0c:42:a1:00:00:01", "mac", "7", "ifname"),
                      "ens2f1np1": LldpNeighbor("ens2f1np1", "leaf-b", "0c:42:a1:00:00:02", "mac", "7", "ifname")}
    place_lldp_neighbors(inventory)
    assert port.neighbor == FirstHop("0c:42:a1:00:00:01", "leaf-a", 7, "lldp", port_id="7")
    assert neighbors(inventory)["mlx5_0:1"] == {"switch_guid": "0c:42:a1:00:00:01", "switch_name": "leaf-a",
                                                "switch_port": 7, "source": "lldp"}


def test_lldp_never_replaces_an_ib_neighbor_and_a_vf_is_left_out() -> None:
    inventory = _inventory(NODES / "dgx-h100")
    hca = inventory.hca("mlx5_3")
    inventory.lldp["ibp64s0"] = LldpNeighbor("ibp64s0", "not-me", "00:00:00:00:00:09", "mac", "1", "ifname")
    place_lldp_neighbors(inventory)
    assert hca.ports[1].neighbor.source == "smpquery"
    hca.physical_function = inventory.hca("mlx5_0").pci_address
    assert "mlx5_3:1" not in neighbors(inventory)


# --- the report ----------------------------------------------------------------------------------

def test_report_of_the_dgx_fixture_carries_neighbors_and_the_new_versions() -> None:
    data = run_check(CheckOptions(snapshot=NODES / "dgx-h100", no_probe=True, deadline_s=30.0), env={}).to_json()
    assert data["versions"]["ofed"] == "MLNX_OFED_LINUX-23.10-1.1.9.0"
    assert data["versions"]["fabric_manager"] == data["versions"]["driver"] == "580.95.05"
    assert "nccl" not in data["versions"]                      # --no-probe: no NCCL was loaded
    assert data["neighbors"]["mlx5_0:1"] == {"switch_guid": DGX_LEAF_GUIDS["mlx5_0"], "switch_name": "leaf-r0-01",
                                             "switch_port": 1, "source": "smpquery"}
    assert len(data["neighbors"]) == 10
    json.dumps(data)
    # Nothing found, nothing said: a node without RDMA ports has no `neighbors` key.
    bare = run_check(CheckOptions(snapshot=NODES / "pcie-only", no_probe=True, deadline_s=30.0), env={}).to_json()
    assert "neighbors" not in bare and "ofed" not in bare["versions"] and "fabric_manager" not in bare["versions"]


def test_versions_query_and_the_nccl_the_probe_loaded() -> None:
    inventory = _inventory(NODES / "cpu-node")
    assert {"ofed", "mlx5_core"}.isdisjoint(versions(inventory))   # inbox driver: no ofed_info, no module version
    inventory.rdma_driver_version = "23.10-1.1.9"
    # The module's version is a kind of its own: a node whose ofed_info hung is no `ofed` drift.
    assert versions(inventory)["mlx5_core"] == "23.10-1.1.9" and "ofed" not in versions(inventory)
    inventory.ofed_version = "MLNX_OFED_LINUX-23.10-1.1.9.0"
    assert versions(inventory, nccl="2.28.9")["ofed"] == "MLNX_OFED_LINUX-23.10-1.1.9.0"
    assert versions(inventory, nccl="2.28.9")["nccl"] == "2.28.9"
    loopback = LoopbackResult("nccl", rails=(RailResult("mlx5_0:1", 0, "nccl", "ok", nccl_version="2.27.7+cuda13.0"),))
    assert loaded_nccl(ProbeResult(status="ok", nccl_version="2.28.9"), loopback) == "2.28.9"
    assert loaded_nccl(ProbeNotRun("--no-probe"), loopback) == "2.27.7"
    assert loaded_nccl(ProbeNotRun("--no-probe"), ProbeNotRun("--no-probe")) is None


# --- the live path, with fake tools on PATH ---------------------------------------------------------

def _live(tmp_path: Path, fixture: str) -> dict[str, Any]:
    source = live_source_for(NODES / fixture, tmp_path / "bin")
    return run_check(CheckOptions(no_probe=True, deadline_s=15.0), source=source,
                     env={"NETDOCTOR_STATE": str(tmp_path / "state.json")}).to_json()


def test_live_run_with_a_fake_smpquery_replaying_the_recorded_outputs(tmp_path: Path) -> None:
    live = _live(tmp_path, "dgx-h100")
    recorded = run_check(CheckOptions(snapshot=NODES / "dgx-h100", no_probe=True, deadline_s=30.0), env={}).to_json()
    # No fabric scan runs live by default: every IB neighbour is smpquery's own, as in the snapshot.
    assert live["neighbors"] == recorded["neighbors"]
    assert {hop["source"] for hop in live["neighbors"].values()} == {"smpquery", "lldp"}
    assert live["versions"]["ofed"] == recorded["versions"]["ofed"] and live["grade"] == recorded["grade"] == "pass"


def test_live_run_with_a_fake_smpquery_replaying_real_captures(tmp_path: Path) -> None:
    """The fake answers mlx5_0's queries with the corpus' real switch NodeInfo (LocalPort 17) and
    real NodeDesc: what a real smpquery printed is what the report says."""
    fixture = _copy(tmp_path, "dgx-h100")
    real = {path.name: path.read_text() for path in corpus_files("smpquery")}
    (fixture / "commands" / "smpquery-nodeinfo-mlx5_0-1.out").write_text(
        real["ucar-ib-cable-tool__smpquery-nodeinfo-guid-switch-localport17.txt"])
    (fixture / "commands" / "smpquery-nodedesc-mlx5_0-1.out").write_text(real["ib-notes-cn__smpquery-nd-lid37.txt"])
    source = live_source_for(fixture, tmp_path / "bin")
    data = run_check(CheckOptions(no_probe=True, deadline_s=15.0), source=source,
                     env={"NETDOCTOR_STATE": str(tmp_path / "state.json")}).to_json()
    assert data["neighbors"]["mlx5_0:1"] == {"switch_guid": "0xe41d2d03004bef70", "switch_name": "b1nstcx02 HCA-1",
                                             "switch_port": 17, "source": "smpquery"}
    assert data["neighbors"]["mlx5_3:1"]["switch_name"] == "leaf-r1-01"


def test_live_run_with_a_hanging_smpquery_kills_it_at_its_timeout(tmp_path: Path) -> None:
    fixture = _copy(tmp_path, "dgx-h100")
    for path in (fixture / "commands").glob("smpquery-*.status"):
        path.write_text("timeout\n")      # the fake replays a recorded timeout by sleeping forever
    source = live_source_for(fixture, tmp_path / "bin")
    started = time.monotonic()
    data = run_check(CheckOptions(no_probe=True, deadline_s=15.0), source=source,
                     env={"NETDOCTOR_STATE": str(tmp_path / "state.json")}).to_json()
    elapsed = time.monotonic() - started
    # smpquery's own 3 s bound, not the run's 15 s deadline, ended the 16 queries (in parallel).
    assert elapsed < 3.0 + 4.0, elapsed
    assert data["grade"] == "pass"
    assert {hop["source"] for hop in data["neighbors"].values()} == {"lldp"}      # the storage ports only
    assert not [finding for finding in data["findings"] if finding["check"] == "discovery"]


def test_live_run_with_no_smpquery_lldpctl_or_ofed_info_installed(tmp_path: Path) -> None:
    source = live_source_for(NODES / "dgx-h100", tmp_path / "bin")
    for tool in ("smpquery", "lldpctl", "ofed_info", "nv-fabricmanager"):
        (tmp_path / "bin" / tool).unlink()
    data = run_check(CheckOptions(no_probe=True, deadline_s=15.0), source=source,
                     env={"NETDOCTOR_STATE": str(tmp_path / "state.json")}).to_json()
    assert data["grade"] == "pass" and "neighbors" not in data
    assert "ofed" not in data["versions"] and "fabric_manager" not in data["versions"]
    assert data["versions"]["driver"] == "580.95.05"


def test_check_only_a_port_check_collects_no_neighbors_or_versions() -> None:
    with open_snapshot(NODES / "dgx-h100") as source:
        inventory = build_inventory(source, needs=frozenset({"rdma"}))
    assert inventory.source("ofed_info-s").state is SourceState.NOT_RUN
    assert inventory.source("lldpctl-json").state is SourceState.NOT_RUN
    assert not any(name.startswith("smpquery-") for name in inventory.sources)
    # The snapshot's recorded fabric scan serves `rdma` (link facts): its neighbours come along.
    assert {hop["source"] for hop in neighbors(inventory).values()} == {"iblinkinfo"}
