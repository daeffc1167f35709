"""The fleet judged against itself: version drift, rail wiring per leaf, what changed --since."""

from __future__ import annotations

import json
import os
import zlib

import pytest

from netdoctor.errors import UsageError
from netdoctor.fleet.cli import main as fleet_main
from netdoctor.fleet.drift import drifted, find_drift
from netdoctor.fleet.model import summarize_report
from netdoctor.fleet.rails import find_rails
from netdoctor.fleet.report import build_fleet_report
from netdoctor.fleet.since import changes_since, load_previous

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
CX7 = "MT4129 MT_0000000838"
CX6 = "MT4123 MT_0000000223"


def report(host: str, *, grade: str = "pass", gpu: str = H100, hca: str = CX7, firmware: str = "28.39.1002",
           driver: str = "550.54.15", rails: int = 8, leaf_of=None, findings=()) -> dict:
    """A node report as `netdoctor check --format json` writes it (the keys the fleet reads)."""
    ports = [f"mlx5_{index}:1" for index in range(rails)]
    leaf_of = leaf_of or (lambda port, index: f"leaf-r{index}")
    return {
        "schema": "netdoctor.report/1", "host": host, "grade": grade,
        "findings": [{"check": check, "subject": subject, "status": status, "summary": f"{check} {status}"}
                     for check, subject, status in findings],
        "checks": [{"check": "port-state", "status": "pass"}],
        "versions": {"driver": driver, "cuda_driver": "12.4", "vbios": {gpu: "96.00.89.00.01"},
                     "hca_firmware": {hca: firmware}, "kernel": "5.15.0-105-generic"},
        "fabric": {"gpus": 8, "rails": [{"port": port, "rate_gbps": 400.0, "gpu": index} for index, port in enumerate(ports)]},
        "neighbors": {port: {"switch_guid": f"0xfc6a1c0300{zlib.crc32(leaf_of(port, index).encode()) % 16**6:06x}",
                             "switch_name": leaf_of(port, index), "switch_port": 1 + int(host[-3:]) % 64}
                      for index, port in enumerate(ports)},
    }


def summaries(reports: list[dict]) -> list:
    return [summarize_report(item, host_hint=item["host"]) for item in reports]


def test_one_odd_firmware_in_a_thousand_is_drift_and_names_the_node():
    nodes = summaries([report(f"node{index:04d}", firmware="28.37.1014" if index in (17, 18) else "28.39.1002")
                       for index in range(1000)])
    entries = drifted(find_drift(nodes))
    assert entries == [{"what": "hca_firmware", "among": CX7, "majority": "28.39.1002",
                        "minority": {"28.37.1014": ["node0017", "node0018"]}, "nodes": 1000}]


def test_mixed_hardware_is_not_drift():
    # H100 nodes with ConnectX-7 and driver 550; A100 nodes with ConnectX-6 and driver 535: two groups each.
    nodes = summaries([report(f"h{index:03d}") for index in range(6)]
                      + [report(f"a{index:03d}", gpu=A100, hca=CX6, firmware="20.39.1002", driver="535.161.08")
                         for index in range(6)])
    entries = find_drift(nodes)
    assert drifted(entries) == []
    drivers = {entry["among"]: entry["majority"] for entry in entries if entry["what"] == "driver"}
    assert drivers == {f"8x {A100}": "535.161.08", f"8x {H100}": "550.54.15"}


def test_half_and_half_takes_the_newer_as_majority_and_pinned_minimum_lists_nodes_below():
    nodes = summaries([report(f"n{index:03d}", driver="550.54.15" if index % 2 else "535.161.08") for index in range(4)])
    entry = next(entry for entry in find_drift(nodes, {"driver": "550.0"}) if entry["what"] == "driver")
    assert entry["majority"] == "550.54.15"
    assert entry["minority"] == {"535.161.08": ["n000", "n002"]}
    assert entry["minimum"] == "550.0" and entry["below_minimum"] == ["n000", "n002"]
    # A pin for one group only; numbers compare as numbers (28.39 > 28.4).
    pinned = find_drift(nodes, {f"hca_firmware:{CX7}": "28.4.0"})
    firmware = next(entry for entry in pinned if entry["what"] == "hca_firmware")
    assert firmware["below_minimum"] == []


def test_a_miswired_rail_is_odd_on_its_leaf():
    def leaf_of(host):
        return lambda port, index: "leaf-r2" if host == "node007" and port == "mlx5_3:1" else f"leaf-r{index}"
    nodes = summaries([report(f"node{index:03d}", leaf_of=leaf_of(f"node{index:03d}")) for index in range(12)])
    leaves = find_rails(nodes)
    odd = [leaf for leaf in leaves if leaf["odd"]]
    assert [(leaf["leaf"], leaf["rail"], leaf["odd"], leaf["ports"]) for leaf in odd] == [
        ("leaf-r2", "mlx5_2", {"mlx5_3": ["node007"]}, 13)]
    assert len(leaves) == 8 and all("aligned" not in leaf for leaf in leaves)
    fleet = build_fleet_report(nodes)
    assert fleet.rails == leaves and fleet.exit_code == 1
    assert fleet.to_json()["rails"][0]["odd"] == {"mlx5_3": ["node007"]}


def test_every_rail_on_one_leaf_is_not_rail_aligned_and_not_judged():
    nodes = summaries([report(f"node{index:03d}", leaf_of=lambda port, index: "leaf-all") for index in range(4)])
    (leaf,) = find_rails(nodes)
    assert leaf["aligned"] is False and leaf["odd"] == {} and leaf["ports"] == 32


def test_rails_named_by_gpu_where_nodes_lay_their_hcas_out_differently():
    def swapped(item: dict) -> dict:
        # This node's mlx5_0 sits by GPU 1 and mlx5_1 by GPU 0; its cables follow the GPUs.
        rails = item["fabric"]["rails"]
        rails[0]["gpu"], rails[1]["gpu"] = 1, 0
        item["neighbors"]["mlx5_0:1"], item["neighbors"]["mlx5_1:1"] = item["neighbors"]["mlx5_1:1"], item["neighbors"]["mlx5_0:1"]
        return item
    nodes = summaries([report(f"node{index:03d}") for index in range(5)] + [swapped(report("node005"))])
    leaves = find_rails(nodes)
    assert all(not leaf["odd"] for leaf in leaves)
    assert {leaf["rail"] for leaf in leaves} == {f"GPU{index}" for index in range(8)}


def test_hostile_versions_and_neighbors_are_bounded_and_typed():
    item = report("node001")
    item["versions"] = {"driver": "x" * 10_000, "vbios": {"m": 5, "n": "ok"}, "evil": "dropped", "kernel": ["no"]}
    item["neighbors"] = {"mlx5_0:1": {"switch_guid": 7, "switch_name": "leaf", "switch_port": -1},
                         **{f"p{index}": {"switch_name": "s"} for index in range(500)}, "bad": "no"}
    item["fabric"]["rails"] += [{"port": "x" * 1000}, "junk", {"port": 5}] * 100
    node = summarize_report(item, host_hint="node001")
    assert len(node.versions["driver"]) == 128 and node.versions["vbios"] == {"n": "ok"}
    assert set(node.versions) == {"driver", "vbios"}
    assert node.rails[0] == ("mlx5_0:1", 400.0, 0, None, "leaf")
    assert node.rails[1][3:] == (None, None)   # no neighbour given for mlx5_1:1
    assert len(node.rails) <= 64 and max(len(rail[0]) for rail in node.rails) == 128


def _fleet_json(reports: list[dict]) -> dict:
    return build_fleet_report(summaries(reports), generated_at="2026-11-24T06:00:00Z").to_json()


def test_since_lists_grade_changes_new_and_cleared_findings_versions_and_nodes():
    yesterday = _fleet_json([report("n001"), report("n002", grade="warn", findings=[("link-speed", "mlx5_1:1", "warn")]),
                             report("n003"), report("n004")])
    today = build_fleet_report(summaries([
        report("n001", grade="fail", findings=[("port-state", "mlx5_0:1", "fail")]),
        report("n002"),                                   # its warning cleared
        report("n003", firmware="28.40.1000"),            # firmware updated
        report("n005")]))                                 # new; n004 is gone
    changes = changes_since(today, yesterday, "yesterday.json")
    assert changes["previous"] == {"source": "yesterday.json", "generated_at": "2026-11-24T06:00:00Z", "nodes": 4}
    assert changes["grades"] == [{"host": "n001", "was": "pass", "now": "fail"}, {"host": "n002", "was": "warn", "now": "pass"}]
    assert [(item["host"], item["check"], item["subject"]) for item in changes["new_findings"]] == [("n001", "port-state", "mlx5_0:1")]
    assert [(item["host"], item["check"]) for item in changes["cleared_findings"]] == [("n002", "link-speed")]
    assert changes["versions"] == [{"host": "n003", "what": f"hca_firmware {CX7}", "was": "28.39.1002", "now": "28.40.1000"}]
    assert changes["new_nodes"] == ["n005"] and changes["gone_nodes"] == ["n004"]


def test_since_an_older_report_compares_grades_only():
    yesterday = _fleet_json([report("n001")])
    del yesterday["drift"]
    for node in yesterday["nodes"]:
        node.pop("versions", None)
    today = build_fleet_report(summaries([report("n001", grade="warn", findings=[("mtu", "ib0", "warn")])]))
    changes = changes_since(today, yesterday, "old.json")
    assert changes["grades"] == [{"host": "n001", "was": "pass", "now": "warn"}]
    assert changes["new_findings"] == [] and changes["versions"] == []


def test_since_directory_takes_the_newest_report_and_rejects_garbage(tmp_path):
    older, newer = _fleet_json([report("n001")]), _fleet_json([report("n001"), report("n002")])
    newer["generated_at"] = "2026-11-25T06:00:00Z"
    (tmp_path / "a.json").write_text(json.dumps(newer))
    (tmp_path / "b.json").write_text(json.dumps(older))
    (tmp_path / "junk.json").write_text("{not json")
    os.utime(tmp_path / "a.json", (1, 1))               # the newest by its own time, not the file's
    previous, source = load_previous(tmp_path)
    assert source.endswith("a.json") and len(previous["nodes"]) == 2
    with pytest.raises(UsageError, match="not readable as a fleet report"):
        load_previous(tmp_path / "junk.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match="no netdoctor.fleet/1"):
        load_previous(empty)


def test_cli_report_since_and_drift_in_json_and_text(tmp_path, capsys):
    day1, day2 = tmp_path / "day1", tmp_path / "day2"
    day1.mkdir(), day2.mkdir()
    for index in range(6):
        host = f"node{index:03d}"
        (day1 / f"{host}.json").write_text(json.dumps(report(host)))
        changed = report(host, firmware="28.37.1014") if index == 4 else report(host)
        (day2 / f"{host}.json").write_text(json.dumps(changed))
    assert fleet_main(["report", str(day1), "-F", "json", "-o", str(tmp_path / "fleet1.json")]) == 0
    code = fleet_main(["report", str(day2), "-F", "json", "--since", str(tmp_path / "fleet1.json")])
    data = json.loads(capsys.readouterr().out)
    assert code == 1   # drift is worth a look: exit 1 like an outlier
    assert data["drift"][0]["minority"] == {"28.37.1014": ["node004"]}
    assert data["changes"]["versions"][0]["host"] == "node004"
    assert fleet_main(["report", str(day2), "--since", str(tmp_path / "nowhere.json")]) == 3
    assert "--since" in capsys.readouterr().err


# ---- hostile or odd reports: one node never breaks the fleet's judgement of the others ----

def test_odd_version_strings_and_huge_numbers_never_crash_the_report(tmp_path, capsys):
    reports = [report(f"node{index:03d}") for index in range(6)]
    reports[1]["versions"]["driver"] = "5²0"                      # a digit int() refuses
    reports[2]["versions"]["vbios"] = {"²": "1"}
    reports[3]["fabric"]["rails"][0]["rate_gbps"] = 10**400       # beyond a float
    reports[4]["probe"] = {"busbw_gbps": 1.7e308}
    for item in reports:
        (tmp_path / f"{item['host']}.json").write_text(json.dumps(item))
    for output_format in ("json", "text", "html"):
        assert fleet_main(["report", str(tmp_path), "-F", output_format]) in (1, 2)
    fleet = json.loads((capsys.readouterr(), fleet_main(["report", str(tmp_path), "-F", "json"]), capsys.readouterr().out)[2])
    grades = {node["host"]: node["grade"] for node in fleet["nodes"]}
    assert grades["node004"] == "invalid" and grades["node003"] == "pass"
    assert any(entry["minority"] == {"5²0": ["node001"]} for entry in fleet["drift"])


def test_one_node_cannot_outvote_a_leaf_or_vote_in_another_hardware_group():
    honest = [report(f"node{index:03d}") for index in range(7)]
    attacker = report("node007")
    attacker["fabric"]["rails"] = [{"port": "mlx5_5:1", "gpu": 5, "rate_gbps": 400.0}] * 64
    attacker["neighbors"] = {"mlx5_5:1": honest[0]["neighbors"]["mlx5_0:1"]}
    attacker["versions"]["driver"] = {f"8x {A100}": "999.0"}
    a100 = report("a001", gpu=A100, hca=CX6, driver="535.161.08")
    nodes = summaries([*honest, attacker, a100])
    odd = [leaf for leaf in find_rails(nodes) if leaf["odd"]]
    assert [(leaf["rail"], leaf["odd"]) for leaf in odd] == [("mlx5_0", {"mlx5_5": ["node007"]})]
    drivers = [entry for entry in find_drift(nodes) if entry["what"] == "driver" and A100 in entry["among"]]
    assert [(entry["majority"], entry["minority"]) for entry in drivers] == [("535.161.08", {})]


def test_a_node_that_does_not_know_its_rails_gpus_is_not_miswired():
    reports = [report(f"node{index:03d}") for index in range(8)]
    for rail in reports[7]["fabric"]["rails"]:
        rail["gpu"] = None
    assert [leaf for leaf in find_rails(summaries(reports)) if leaf["odd"]] == []


def test_since_keeps_the_hosts_it_compares_and_a_report_without_a_time_is_the_oldest(tmp_path):
    yesterday = _fleet_json([report("n001", grade="warn", findings=[("mtu", "ib0", "warn")])])
    yesterday["nodes"][0]["findings"][0]["host"] = "node999"     # a previous file's own words
    changes = changes_since(build_fleet_report(summaries([report("n001")])), yesterday, "y.json")
    assert [item["host"] for item in changes["cleared_findings"]] == ["n001"]
    good, timeless = _fleet_json([report("n001")]), _fleet_json([report("n002")])
    timeless["generated_at"] = None
    (tmp_path / "a.json").write_text(json.dumps(good))
    (tmp_path / "b.json").write_text(json.dumps(timeless))
    assert load_previous(tmp_path)[1].endswith("a.json")


def test_bad_pack_values_and_a_missing_since_fail_before_any_sweep(tmp_path, capsys):
    pack = tmp_path / "site.toml"
    pack.write_text('[pack]\nname = "site"\nextends = "default"\n\n[fleet-rails]\nmin_majority = "abc"\n')
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "n001.json").write_text(json.dumps(report("n001")))
    assert fleet_main(["report", str(tmp_path / "reports"), "--rules", str(pack)]) == 3
    assert "min_majority" in capsys.readouterr().err
    # No shell is started: the --since typo is reported at once.
    assert fleet_main(["sweep", "-w", "n[1-2]", "--via", "pdsh", "--since", str(tmp_path / "typo.json")]) == 3
    assert "typo.json" in capsys.readouterr().err


# ---- `gpus`: the GPU count among nodes of one DMI product (CONTRACT 7.3) ----

def with_platform(item: dict, product: object, gpus: int = 8, on_bus: object = None) -> dict:
    item["fabric"]["gpus"] = gpus
    item["fabric"]["product"] = product
    if on_bus is not None:
        item["fabric"]["gpus_on_bus"] = on_bus
    return item


def test_a_node_with_fewer_gpus_than_its_products_others_is_gpu_drift(tmp_path, capsys):
    reports = [with_platform(report(f"node{index:03d}"), "DGXH100", on_bus=7 if index == 44 else 8)
               for index in range(128)]
    entries = [entry for entry in drifted(find_drift(summaries(reports))) if entry["what"] == "gpus"]
    assert entries == [{"what": "gpus", "among": "DGXH100", "majority": "8", "minority": {"7": ["node044"]},
                        "nodes": 128}]
    for item in reports:
        (tmp_path / f"{item['host']}.json").write_text(json.dumps(item))
    assert fleet_main(["report", str(tmp_path)]) == 1
    assert "gpus among DGXH100: node044 has 7 GPUs where 127 DGXH100 have 8" in capsys.readouterr().out


def test_gpus_a_job_hides_from_the_sweep_still_count_from_the_bus():
    """`fleet sweep --via srun` inside a job: NVML sees 2, the bus 8: no drift."""
    reports = [with_platform(report(f"node{index:03d}"), "DGXH100", gpus=2 if index == 3 else 8, on_bus=8)
               for index in range(6)]
    assert not [entry for entry in drifted(find_drift(summaries(reports))) if entry["what"] == "gpus"]
    # Without the bus count (an older report), NVML's count is what there is.
    reports = [with_platform(report(f"node{index:03d}"), "DGXH100", gpus=7 if index == 3 else 8) for index in range(6)]
    assert [entry["minority"] for entry in drifted(find_drift(summaries(reports))) if entry["what"] == "gpus"] \
        == [{"7": ["node003"]}]


def test_gpu_counts_of_different_products_or_no_product_are_not_compared():
    reports = [with_platform(report(f"d{index:03d}"), "DGXH100", on_bus=8) for index in range(4)]
    reports += [with_platform(report(f"x{index:03d}"), "PowerEdge XE9680", on_bus=4) for index in range(4)]
    reports += [with_platform(report(f"n{index:03d}"), None, on_bus=3) for index in range(2)]
    entries = [entry for entry in find_drift(summaries(reports)) if entry["what"] == "gpus"]
    assert sorted((entry["among"], entry["majority"], entry["minority"]) for entry in entries) == [
        ("DGXH100", "8", {}), ("PowerEdge XE9680", "4", {})]


def test_hostile_products_and_counts_are_bounded_and_typed():
    nodes = summaries([with_platform(report("node001"), "P" * 10_000, on_bus=-1),
                       with_platform(report("node002"), ["DGXH100"], on_bus="8"),
                       with_platform(report("node003"), "DGXH100", on_bus=1 << 40)])
    assert nodes[0].platform == ("P" * 128, None)
    assert nodes[1].platform is None
    assert nodes[2].platform == ("DGXH100", None) and nodes[2].gpus == 8
