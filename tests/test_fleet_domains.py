"""NVLink domains across the fleet (CONTRACT 8 `nvlink_domains`): the node's `fabric.nvlink_domain`
from its GPUs' fabric and platform info, and the fleet's judgement per cluster UUID and chassis.

GPU values are those of NVIDIA's own GB200 `nvidia-smi -q -x` (tests/data/corpus/nvidia-smi-q-x/
NVIDIA-k8s-test-infra__qx-gb200.xml: cluster UUID 00000001-0000-0000-0000-000000000001, clique 2,
chassis 1820000000001, slot 14, tray 4) and of its B200 (zero UUID and clique, empty chassis
serial); the other trays of the rack are derived from it (tray index and slot changed).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from netdoctor.fleet.cli import main as fleet_main
from netdoctor.fleet.domains import find_domains
from netdoctor.fleet.model import summarize_report
from netdoctor.fleet.render import render_html, render_json, render_text
from netdoctor.fleet.report import build_fleet_report
from netdoctor.inventory.model import Gpu, GpuFabric, GpuPlatform, Inventory
from netdoctor.packs import load_rules
from netdoctor.traffic import fabric_summary, nvlink_domain
from test_fleet_drift import report

UUID = "00000001-0000-0000-0000-000000000001"      # the GB200 sample's cluster UUID
OTHER_UUID = "00000002-0000-0000-0000-000000000002"   # derived: a second rack
CHASSIS = "1820000000001"
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def tray_gpus(tray: int, clique: int = 2, uuid: str = UUID, chassis: str = CHASSIS, cliques=None) -> list[Gpu]:
    """The 4 Blackwell GPUs of a GB200 tray, as NVML's fabric and platform info give them."""
    cliques = cliques or (clique,) * 4
    return [Gpu(index, name="NVIDIA GB200", fabric=GpuFabric("completed", "success", cliques[index], uuid, "healthy", "full"),
                platform=GpuPlatform(chassis, 10 + tray, tray, 1, "switch_connected", index + 1)) for index in range(4)]


def tray_inventory(gpus: list[Gpu]) -> Inventory:
    return Inventory(host="node000", captured_at="2026-11-24T06:00:00Z", gpus=gpus)


def tray_report(host: str, tray: int, **gpus: Any) -> dict[str, Any]:
    """A node report whose `fabric` is what netdoctor.traffic.fabric_summary makes of the tray."""
    item = report(host)
    item["fabric"] = fabric_summary(tray_inventory(tray_gpus(tray, **gpus)), load_rules("default", None))
    return item


def fleet(reports: list[dict[str, Any]]):
    return build_fleet_report([summarize_report(item, host_hint=item["host"]) for item in reports],
                              generated_at="2026-11-24T06:00:00Z")


# ---- the node's side ----------------------------------------------------------------------

def test_a_gb200_tray_reports_its_domain_clique_and_place_in_the_rack():
    fabric = fabric_summary(tray_inventory(tray_gpus(4)), load_rules("default", None))
    assert fabric["nvlink_domain"] == {"cluster_uuid": UUID, "clique_id": 2, "chassis_serial_number": CHASSIS,
                                       "slot_number": 14, "tray_index": 4}
    assert fabric["gpus"] == 4 and fabric["rails"] == []   # the keys before stay


def test_gpus_of_one_tray_in_two_cliques_give_the_majority_and_mixed():
    assert nvlink_domain(tray_gpus(4, cliques=(2, 2, 3, 2))) == {
        "cluster_uuid": UUID, "clique_id": 2, "chassis_serial_number": CHASSIS, "slot_number": 14, "tray_index": 4,
        "mixed": True}


def test_hgx_b200_has_no_domain_and_a_tray_out_of_its_domain_keeps_its_chassis():
    # The B200 sample: a zero UUID and clique, an empty chassis serial: no key at all.
    b200 = [Gpu(index, fabric=GpuFabric("completed", "success", 0, ZERO_UUID),
                platform=GpuPlatform("", None, None, 1, "switch_connected", index + 1)) for index in range(8)]
    assert "nvlink_domain" not in fabric_summary(tray_inventory(b200), load_rules("default", None))
    assert nvlink_domain([Gpu(0), Gpu(1, fabric=GpuFabric("not_supported"))]) is None
    outside = tray_gpus(7, clique=0, uuid=ZERO_UUID)
    assert nvlink_domain(outside) == {"cluster_uuid": None, "clique_id": None, "chassis_serial_number": CHASSIS,
                                      "slot_number": 17, "tray_index": 7}


# ---- the fleet's side ---------------------------------------------------------------------

def test_six_trays_one_in_another_clique_is_named_and_makes_the_exit_code_1():
    reports = [tray_report(f"node{tray:03d}", tray, clique=3 if tray == 4 else 2) for tray in range(6)]
    result = fleet(reports)
    assert result.nvlink_domains == [{"cluster_uuid": UUID, "clique_id": 2, "nodes": 6,
                                      "hosts": ["node000", "node001", "node002", "node003", "node004", "node005"],
                                      "odd": {"node004": "clique 3"}, "trays": {"node004": 4},
                                      "chassis_serials": [CHASSIS]}]
    assert result.exit_code == 1 and {node.grade for node in result.nodes} == {"pass"}   # no node's grade changes
    assert json.loads(render_json(result))["nvlink_domains"] == result.nvlink_domains
    text = render_text(result)
    assert (f"NVLink domains (1 of 1 with nodes in another clique or domain):\n"
            f"  cluster {UUID} (chassis {CHASSIS}): tray 4 (node004) in clique 3, the other 5 in clique 2\n") in text
    page = render_html(result)
    assert "<table class=\"small\" id=\"nvlink-domains\">" in page and "<b>clique 3</b>: tray 4 (node004)" in page


def test_a_consistent_rack_lists_its_domain_with_nothing_odd_and_one_summary_line():
    result = fleet([tray_report(f"node{tray:03d}", tray) for tray in range(6)]
                   + [tray_report(f"rack2-{tray:03d}", tray, uuid=OTHER_UUID, chassis="1820000000002") for tray in range(3)])
    assert [(entry["cluster_uuid"], entry["clique_id"], entry["nodes"], entry["odd"]) for entry in result.nvlink_domains] \
        == [(UUID, 2, 6, {}), (OTHER_UUID, 2, 3, {})]
    assert result.exit_code == 0
    assert "NVLink domains: 2 (9 nodes), none with a node in another clique or domain\n" in render_text(result)
    assert "<td>2 domains</td><td>one clique each</td><td>9</td>" in render_html(result)


def test_no_domain_anywhere_is_an_empty_list():
    result = fleet([report(f"node{index:03d}") for index in range(4)])
    assert result.nvlink_domains == [] and result.to_json()["nvlink_domains"] == []
    assert "NVLink" not in render_text(result) and "id=\"nvlink-domains\"" not in render_html(result)


def test_a_chassis_with_a_tray_outside_the_domain_is_its_own_entry():
    reports = [tray_report(f"node{tray:03d}", tray, clique=3 if tray == 3 else 2) for tray in range(5)]
    reports.append(tray_report("node005", 5, clique=0, uuid=ZERO_UUID))          # its tray never joined the domain
    reports.append(tray_report("node006", 6, uuid=OTHER_UUID))                   # derived: in another rack's domain
    domains = fleet(reports).nvlink_domains
    chassis = next(entry for entry in domains if "chassis" in entry)
    assert chassis == {"chassis": CHASSIS, "cluster_uuid": UUID, "clique_id": 2, "nodes": 7,
                       "hosts": [f"node{tray:03d}" for tray in range(7)],
                       "odd": {"node005": "no NVLink domain", "node006": f"cluster {OTHER_UUID} clique 2"},
                       "trays": {"node005": 5, "node006": 6}}
    # A clique split inside one UUID is that UUID's entry, never the chassis's too.
    assert [entry["odd"] for entry in domains if "chassis" not in entry] == [{"node003": "clique 3"}, {}]
    text = render_text(fleet(reports))
    assert (f"  chassis {CHASSIS}: tray 6 (node006) in cluster {OTHER_UUID} clique 2; tray 5 (node005) in no NVLink domain, "
            f"the other 5 in cluster {UUID}\n") in text


def test_a_tray_whose_gpus_disagree_is_odd_and_an_even_split_is_a_partition_not_a_fault():
    reports = [tray_report(f"node{tray:03d}", tray) for tray in range(5)]
    reports[2] = tray_report("node002", 2, cliques=(2, 2, 2, 3))
    [entry] = fleet(reports).nvlink_domains
    assert entry["odd"] == {"node002": "clique 2 (its GPUs in several cliques)"}
    halves = fleet([tray_report(f"node{tray:03d}", tray, clique=2 if tray < 3 else 5) for tray in range(6)])
    [entry] = halves.nvlink_domains
    assert entry["odd"] == {} and entry["split"] == {"clique 2": ["node000", "node001", "node002"], "clique 5": ["node003", "node004", "node005"]}
    assert halves.exit_code == 0
    assert f"    cluster {UUID} (chassis {CHASSIS}): clique 2 on 3 nodes: node[000-002]; clique 5 on 3 nodes: node[003-005]" in render_text(halves)


def test_the_entries_do_not_depend_on_node_order():
    reports = [tray_report(f"node{tray:03d}", tray, clique=3 if tray in (1, 4) else 2) for tray in range(6)]
    assert fleet(reports).nvlink_domains == fleet(reports[::-1]).nvlink_domains


@pytest.mark.parametrize("hostile", [
    {"cluster_uuid": "x" * 10**6, "clique_id": 3, "chassis_serial_number": CHASSIS},
    {"cluster_uuid": UUID, "clique_id": "3", "tray_index": 10**400},
    {"cluster_uuid": UUID, "clique_id": 2**40, "chassis_serial_number": ["A07"], "mixed": "yes"},
    {"cluster_uuid": ZERO_UUID, "clique_id": 3},
    {"cluster_uuid": 7, "clique_id": True, "chassis_serial_number": " " * 100},
    "rack A07", [UUID], None,
])
def test_hostile_values_are_dropped_and_never_crash_or_sway_the_others(hostile, tmp_path, capsys):
    reports = [tray_report(f"node{tray:03d}", tray) for tray in range(5)]
    attacker = tray_report("node005", 5)
    attacker["fabric"]["nvlink_domain"] = hostile
    for item in [*reports, attacker]:
        (tmp_path / f"{item['host']}.json").write_text(json.dumps(item))
    for output_format in ("json", "text", "html"):
        assert fleet_main(["report", str(tmp_path), "-F", output_format]) in (0, 1)
    capsys.readouterr()
    assert fleet_main(["report", str(tmp_path), "-F", "json"]) in (0, 1)
    data = json.loads(capsys.readouterr().out)
    assert {node["grade"] for node in data["nodes"]} == {"pass"}
    [entry, *chassis] = data["nvlink_domains"]
    # The honest trays keep their domain; the attacker is at worst one odd node of it, never its majority.
    assert entry["cluster_uuid"] == UUID and entry["clique_id"] == 2
    assert set(entry["odd"]) <= {"node005"} and all(set(more["odd"]) <= {"node005"} for more in chassis)
    assert all(len(json.dumps(more)) < 2000 for more in data["nvlink_domains"])


def test_a_fabric_that_is_not_an_object_or_lacks_the_key_is_no_domain():
    for fabric in (None, [], {"gpus": 4}, {"nvlink_domain": {}}, {"nvlink_domain": {"chassis_serial_number": "y" * 65}}):
        item = report("node000")
        item["fabric"] = fabric
        assert summarize_report(item, host_hint="node000").nvlink_domain is None
    assert find_domains([]) == []


def test_trays_in_no_domain_are_odd_in_their_chassis_however_many_they_are():
    # 3 trays that never joined (zero UUID, as the B200 sample gives it) and 1 in the domain: the 3 are the fault.
    outside = [tray_report(f"node{tray:03d}", tray, clique=0, uuid=ZERO_UUID) for tray in range(3)]
    result = fleet([*outside, tray_report("node009", 9)])
    chassis = next(entry for entry in result.nvlink_domains if "chassis" in entry)
    assert chassis == {"chassis": CHASSIS, "cluster_uuid": UUID, "clique_id": 2, "nodes": 4,
                       "hosts": ["node000", "node001", "node002", "node009"],
                       "odd": {f"node{tray:03d}": "no NVLink domain" for tray in range(3)},
                       "trays": {"node000": 0, "node001": 1, "node002": 2}}
    assert result.exit_code == 1
    assert (f"  chassis {CHASSIS}: trays 0, 1, 2 (node[000-002]) in no NVLink domain, the other 1 in cluster {UUID}\n"
            in render_text(result))
    # 2 and 2: no partition, the 2 outside are odd.
    result = fleet([*outside[:2], tray_report("node008", 8), tray_report("node009", 9)])
    chassis = next(entry for entry in result.nvlink_domains if "chassis" in entry)
    assert chassis["cluster_uuid"] == UUID and "split" not in chassis
    assert chassis["odd"] == {"node000": "no NVLink domain", "node001": "no NVLink domain"}
    assert "Partitioned" not in render_text(result) and result.exit_code == 1
    # A chassis none of whose trays is in a domain has no entry.
    assert fleet(outside).nvlink_domains == []


def test_a_chassis_partitioned_between_clusters_still_names_its_tray_in_no_domain():
    reports = [tray_report("node000", 0), tray_report("node001", 1),
               tray_report("node002", 2, uuid=OTHER_UUID), tray_report("node003", 3, uuid=OTHER_UUID),
               tray_report("node004", 4, clique=0, uuid=ZERO_UUID)]
    result = fleet(reports)
    chassis = next(entry for entry in result.nvlink_domains if "chassis" in entry)
    assert chassis["cluster_uuid"] == UUID and chassis["odd"] == {"node004": "no NVLink domain"}
    assert chassis["split"] == {f"cluster {UUID}": ["node000", "node001"], f"cluster {OTHER_UUID}": ["node002", "node003"]}
    assert fleet(reports[::-1]).nvlink_domains == result.nvlink_domains and result.exit_code == 1
    text = render_text(result)
    assert f"  chassis {CHASSIS}: tray 4 (node004) in no NVLink domain, the other 4 in partitions (below)\n" in text
    assert f"    chassis {CHASSIS}: cluster {UUID} on node[000-001]; cluster {OTHER_UUID} on node[002-003]" in text
    page = render_html(result)
    assert "<td>partitioned: see below</td>" in page and "<tr class=\"split\"><td>chassis 1820000000001</td>" in page
