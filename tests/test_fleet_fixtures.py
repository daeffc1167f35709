"""Fleets built from the fixture nodes, judged end to end: each node's snapshot goes
through `check` (versions from sysfs/NVML/tools, neighbours from the recorded direct-route
smpquery), the reports through `fleet report`; drift, rails and --since name exactly the
planted nodes.

- 12 DGX H100 nodes: node05 has older HCA firmware, node08's mlx5_3 cable lands on the
  leaf of rail mlx5_0.
- 6 DGX H100 + 6 HGX A100 nodes: other firmware per model is not drift.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from netdoctor.fleet.cli import main as fleet_main
from netdoctor.report.render import render
from netdoctor.run import CheckOptions, run_check

NODES = Path(__file__).resolve().parent / "fixtures" / "nodes"
H100_FIRMWARE = "28.39.1002"


def _node(fixture: str, host: str, root: Path) -> Path:
    snapshot = root / "snapshots" / host
    shutil.copytree(NODES / fixture, snapshot, symlinks=True)
    meta = json.loads((snapshot / "snapshot.json").read_text())
    (snapshot / "snapshot.json").write_text(json.dumps({**meta, "host": host}))
    return snapshot


def _older_firmware(snapshot: Path) -> None:
    """Every ConnectX-7 of the node on 28.37.1014, in sysfs and the tools alike."""
    for path in [*snapshot.glob("sys/class/infiniband/*/fw_ver"), *snapshot.glob("commands/ib*.out")]:
        path.write_text(path.read_text().replace(H100_FIRMWARE, "28.37.1014"))


def _miswire(snapshot: Path, port: str, onto: str) -> None:
    """`port`'s cable lands on `onto`'s leaf (switch port 2 of it): the direct-route answers say so."""
    commands = snapshot / "commands"
    for query in ("nodeinfo", "nodedesc"):
        text = (commands / f"smpquery-{query}-{onto}-1.out").read_text()
        (commands / f"smpquery-{query}-{port}-1.out").write_text(re.sub(r"(LocalPort:\.+)1\b", r"\g<1>2", text))


def _reports(snapshots: list[Path], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for snapshot in snapshots:
        report = run_check(CheckOptions(snapshot=snapshot, no_probe=True, deadline_s=60.0), env={})
        (directory / f"{snapshot.name}.json").write_text(render(report, "json"))
    return directory


def _fleet(directory: Path, capsys, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = fleet_main(["report", str(directory), "-F", "json", *extra])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def dgx_fleet(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dgx-fleet")
    snapshots = [_node("dgx-h100", f"node{index:02d}", root) for index in range(1, 13)]
    _older_firmware(snapshots[4])
    _miswire(snapshots[7], "mlx5_3", onto="mlx5_0")
    return _reports(snapshots, root / "day2")


def test_node_reports_carry_versions_and_neighbours(dgx_fleet):
    report = json.loads((dgx_fleet / "node01.json").read_text())
    assert report["versions"]["hca_firmware"]["MT4129 MT_0000000838"] == H100_FIRMWARE
    assert {"driver", "vbios", "kernel", "ofed", "fabric_manager"} <= set(report["versions"])
    assert report["neighbors"]["mlx5_3:1"]["switch_name"] == "leaf-r1-01"
    assert [rail["port"] for rail in report["fabric"]["rails"]][:2] == ["mlx5_0:1", "mlx5_3:1"]


def test_twelve_dgx_nodes_name_exactly_the_odd_firmware_and_the_miswired_rail(dgx_fleet, capsys):
    code, fleet = _fleet(dgx_fleet, capsys)
    assert code == 1
    drifted = [entry for entry in fleet["drift"] if entry["minority"]]
    assert [(entry["what"], entry["majority"], entry["minority"]) for entry in drifted] == [
        ("hca_firmware", H100_FIRMWARE, {"28.37.1014": ["node05"]})]
    odd = [leaf for leaf in fleet["rails"] if leaf["odd"]]
    assert [(leaf["leaf"], leaf["rail"], leaf["odd"]) for leaf in odd] == [("leaf-r0-01", "mlx5_0", {"mlx5_3": ["node08"]})]
    assert all(node["grade"] == "pass" for node in fleet["nodes"])   # neither changes a node's grade


def test_since_over_two_saved_sweeps_names_the_planted_changes(dgx_fleet, tmp_path, capsys):
    # Yesterday: the same fleet, node05 still on the fleet's firmware and node11 healthy;
    # today node11's port mlx5_4 is down (the dgx-h100-port-down fixture's state).
    day1 = tmp_path / "day1"
    shutil.copytree(dgx_fleet, day1)
    yesterday = json.loads((day1 / "node05.json").read_text())
    yesterday["versions"]["hca_firmware"] = {"MT4129 MT_0000000838": H100_FIRMWARE}
    (day1 / "node05.json").write_text(json.dumps(yesterday))
    history = tmp_path / "history"
    history.mkdir()
    assert fleet_main(["report", str(day1), "-F", "json", "-o", str(history / "day1.json")]) in (0, 1)
    day2 = tmp_path / "day2"
    shutil.copytree(dgx_fleet, day2)
    down = run_check(CheckOptions(snapshot=NODES / "dgx-h100-port-down", no_probe=True, deadline_s=60.0), env={})
    (day2 / "node11.json").write_text(render(down, "json").replace('"host": "dgx-h100-port-down"', '"host": "node11"'))
    code, fleet = _fleet(day2, capsys, "--since", str(tmp_path / "history"))
    changes = fleet["changes"]
    assert code == 2
    assert changes["grades"] == [{"host": "node11", "was": "pass", "now": "fail"}]
    assert {(item["host"], item["check"], item["subject"]) for item in changes["new_findings"]} >= {
        ("node11", "port-state", "mlx5_4:1")}
    assert {item["host"] for item in changes["new_findings"]} == {"node11"}
    assert changes["versions"] == [{"host": "node05", "what": "hca_firmware MT4129 MT_0000000838",
                                    "was": H100_FIRMWARE, "now": "28.37.1014"}]
    assert changes["new_nodes"] == [] and changes["gone_nodes"] == []


def test_mixed_h100_and_a100_fleet_has_no_drift(tmp_path, capsys):
    snapshots = ([_node("dgx-h100", f"h{index}", tmp_path) for index in range(1, 7)]
                 + [_node("hgx-a100", f"a{index}", tmp_path) for index in range(1, 7)])
    code, fleet = _fleet(_reports(snapshots, tmp_path / "reports"), capsys)
    assert [entry for entry in fleet["drift"] if entry["minority"]] == []
    firmware = {entry["among"]: entry["majority"] for entry in fleet["drift"] if entry["what"] == "hca_firmware"}
    assert len(firmware) >= 2 and firmware["MT4129 MT_0000000838"] == H100_FIRMWARE
    vbios_models = {entry["among"] for entry in fleet["drift"] if entry["what"] == "vbios"}
    assert len(vbios_models) == 2
    assert code in (0, 1) and not [leaf for leaf in fleet["rails"] if leaf["odd"]]


def test_p5_fleet_names_the_node_on_an_older_efa_driver(tmp_path, capsys):
    """Six p5.48xlarge: p5-03 runs an older efa driver (drift of the `efa` kind, not of the
    placeholder EFA firmware 0.0.0.0), p5-05 lost three EFA devices (its grade)."""
    snapshots = [_node("aws-p5", f"p5-{index:02d}", tmp_path) for index in range(1, 7)]
    (snapshots[2] / "sys/module/efa/version").write_text("2.13.0g\n")
    shutil.rmtree(snapshots[4])
    snapshots[4] = _node("aws-p5-efa-unbound", "p5-05", tmp_path)
    code, fleet = _fleet(_reports(snapshots, tmp_path / "reports"), capsys)
    assert code == 2
    drifted = [(entry["what"], entry["majority"], entry["minority"]) for entry in fleet["drift"] if entry["minority"]]
    assert drifted == [("efa", "2.17.1g", {"2.13.0g": ["p5-03"]})]
    assert {node["host"]: node["grade"] for node in fleet["nodes"]} == {
        "p5-01": "pass", "p5-02": "pass", "p5-03": "pass", "p5-04": "pass", "p5-05": "fail", "p5-06": "pass"}
    assert fleet["rails"] == []     # EFA has no first-hop switch a node can see: rails are not judged
