"""A 6-tray GB200 NVL72 rack built from the fixture trays, judged node by node and then as a fleet.

Five copies of `gb200-nvl72-tray` (NVIDIA's GB200 sample values: cluster UUID 00000001-...-000000000001,
clique 2, chassis 1820000000001) with their own host, tray index and slot, and one copy of
`gb200-nvl72-tray-other-clique` (its GPUs in clique 3). Each snapshot is judged as
`netdoctor check --snapshot DIR --no-probe --format json` judges it (in process: run_check and the
JSON renderer), the reports are saved one file per node, and `netdoctor fleet report DIR` reads them
as a sweep's saved output. No tray alone can tell it is in another clique: every node passes, the
fleet names the odd tray in `nvlink_domains` and exits 1.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from netdoctor.fleet.cli import main as fleet_main
from netdoctor.report.json_report import render_json
from netdoctor.run import CheckOptions, run_check

NODES = Path(__file__).resolve().parent / "fixtures" / "nodes"
UUID = "00000001-0000-0000-0000-000000000001"
CHASSIS = "1820000000001"
# (host, source fixture, tray index, slot number): the odd tray is the fourth.
RACK = [(f"gb200-r07-t{tray:02d}", "gb200-nvl72-tray-other-clique" if tray == 4 else "gb200-nvl72-tray", tray, 10 + tray)
        for tray in range(1, 7)]


def placed_tray(snapshots: Path, host: str, source: str, tray: int, slot: int) -> Path:
    """A copy of a fixture tray with its own host name and its GPUs' platform tray index and slot."""
    target = snapshots / host
    shutil.copytree(NODES / source, target, symlinks=True)
    meta = json.loads((target / "snapshot.json").read_text(encoding="utf-8"))
    (target / "snapshot.json").write_text(json.dumps({**meta, "host": host}, indent=2) + "\n", encoding="utf-8")
    nvml = json.loads((target / "nvml.json").read_text(encoding="utf-8"))
    for gpu in nvml["gpus"]:
        gpu["platform"].update(tray_index=tray, slot_number=slot)
    (target / "nvml.json").write_text(json.dumps(nvml, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return target


@pytest.fixture(scope="module")
def rack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The six node reports, saved as a sweep saves them: one JSON file per node."""
    root = tmp_path_factory.mktemp("rack")
    reports = root / "reports"
    reports.mkdir()
    for host, source, tray, slot in RACK:
        report = run_check(CheckOptions(snapshot=placed_tray(root / "snapshots", host, source, tray, slot), no_probe=True),
                           env={})
        assert str(report.grade) == "pass", (host, report.to_json()["findings"])   # alone, every tray is healthy
        (reports / f"{host}.json").write_text(render_json(report), encoding="utf-8")
    return reports


def test_each_tray_reports_its_domain_clique_and_place(rack: Path) -> None:
    for host, source, tray, slot in RACK:
        domain = json.loads((rack / f"{host}.json").read_text(encoding="utf-8"))["fabric"]["nvlink_domain"]
        assert domain == {"cluster_uuid": UUID, "clique_id": 3 if source.endswith("other-clique") else 2,
                          "chassis_serial_number": CHASSIS, "slot_number": slot, "tray_index": tray}


def test_the_fleet_names_the_tray_in_another_clique_and_exits_1(rack: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fleet_main(["report", str(rack), "-F", "json"]) == 1
    fleet = json.loads(capsys.readouterr().out)
    hosts = [host for host, *_ in RACK]
    assert fleet["nvlink_domains"] == [{"cluster_uuid": UUID, "clique_id": 2, "nodes": 6, "hosts": hosts,
                                        "odd": {"gb200-r07-t04": "clique 3"}, "trays": {"gb200-r07-t04": 4},
                                        "chassis_serials": [CHASSIS]}]
    assert fleet_main(["report", str(rack)]) == 1
    text = capsys.readouterr().out
    assert f"cluster {UUID} (chassis {CHASSIS}): tray 4 (gb200-r07-t04) in clique 3, the other 5 in clique 2" in text


def test_a_rack_of_one_clique_has_nothing_odd(rack: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for report in rack.iterdir():
        if report.name != "gb200-r07-t04.json":
            shutil.copy(report, tmp_path / report.name)
    assert fleet_main(["report", str(tmp_path), "-F", "json"]) == 0
    (domain,) = json.loads(capsys.readouterr().out)["nvlink_domains"]
    assert (domain["clique_id"], domain["nodes"], domain["odd"]) == (2, 5, {})
