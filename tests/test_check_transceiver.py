"""transceiver: the module parsers on real outputs (tests/data/corpus/mlxlink, ethtool-m, with
PROVENANCE.tsv), and the check against the module's own limits and its like siblings."""

from __future__ import annotations

import pytest

from corpus_util import corpus_dir, corpus_files
from inventory_factory import dgx_h100, ib_hca, only, run_check
from netdoctor.checks.needs import NEED_JUDGES
from netdoctor.errors import ParseError
from netdoctor.inventory.model import Inventory, ModuleDiagnostics, ModuleReading, SourceState, SourceStatus
from netdoctor.parsers.transceiver import parse_ethtool_module, parse_mlxlink_module
from netdoctor.report.model import Status
from netdoctor_plugins.transceiver import transceiver

CHECK = "transceiver"
COPPER = "vylhome-csegpu__mlxlink-show-module-cx7-osfp-passive-copper.txt"
OPTICAL = "go-collector-comment__mlxlink-m-osfp-optical-module-info.txt"
SFP = "netdev-list__ethtool-m-sfp-ge-bx-fs.txt"
AOC = "sonic-design__ethtool-m-qsfp28-mellanox-aoc.txt"


def _text(kind: str, name: str) -> str:
    return (corpus_dir(kind) / name).read_text(encoding="utf-8")


def test_every_module_corpus_file_is_asserted_here() -> None:
    assert sorted(path.name for path in corpus_files("mlxlink")) == sorted([COPPER, OPTICAL])
    assert sorted(path.name for path in corpus_files("ethtool-m")) == sorted([SFP, AOC])


def test_mlxlink_of_a_real_passive_copper_cable_has_no_readings() -> None:
    module = parse_mlxlink_module(_text("mlxlink", COPPER))
    assert (module.identifier, module.vendor, module.part_number, module.serial, module.cable) == (
        "OSFP", "FS", "OSFPFL-400G-PC01", "C2604279049-2", "Passive copper cable")
    assert not module.monitored                       # `0 [0..0]`: no diagnostics, not zero degrees


def test_mlxlink_of_a_real_optical_module() -> None:
    module = parse_mlxlink_module(_text("mlxlink", OPTICAL))
    assert module.temperature_c == ModuleReading((54.0,), -5.0, 75.0)
    assert module.voltage_v == ModuleReading((pytest.approx(3.2612),), pytest.approx(2.97), pytest.approx(3.63))
    assert module.bias_ma == ModuleReading((8.38,) * 4, 2.0, 15.0)
    assert module.rx_power_dbm == ModuleReading((1.886, 1.989, 2.281, 1.976), -10.41, 6.0)
    assert module.tx_power_dbm is not None and module.tx_power_dbm.alarm_low == -8.508
    assert (module.vendor, module.part_number) == ("CLT", "T-F4GS-BV0")


def test_ethtool_of_a_real_sfp_with_alarm_and_warning_limits() -> None:
    module = parse_ethtool_module(_text("ethtool-m", SFP))
    assert (module.identifier, module.vendor, module.part_number) == ("SFP", "FS", "SFP-GE-BX")
    assert module.temperature_c == ModuleReading((47.3,), -45.0, 90.0, -40.0, 85.0)
    assert module.bias_ma == ModuleReading((17.65,), 1.0, 110.0, 1.0, 100.0)
    assert module.tx_power_dbm == ModuleReading((-6.71,), -10.5, -1.5, -10.0, -2.0)
    assert module.rx_power_dbm == ModuleReading((-5.62,), -25.53, -1.5, -24.95, -2.0)
    assert module.voltage_v == ModuleReading((3.2576,), 2.805, 3.795, 3.135, 3.465)


def test_ethtool_of_a_real_aoc_without_published_limits() -> None:
    module = parse_ethtool_module(_text("ethtool-m", AOC))
    assert (module.identifier, module.part_number) == ("QSFP28", "MFA1A00-C003")
    assert module.bias_ma == ModuleReading((6.75,) * 4)               # all-zero thresholds: none
    assert module.tx_power_dbm == ModuleReading((-40.0,) * 4)         # `-inf dBm`: no light
    assert module.rx_power_dbm == ModuleReading((-1.41, -1.41, -0.51, 0.3))   # Receiver signal OMA


def test_module_parsers_refuse_what_is_not_a_module_dump() -> None:
    with pytest.raises(ParseError):
        parse_mlxlink_module("-E- Failed to open device: mlx5_9\n")
    with pytest.raises(ParseError):
        parse_mlxlink_module("Temperature [C]                    : hot [a..b]\n")
    with pytest.raises(ParseError):
        parse_ethtool_module("netlink error: Operation not supported\n")


def _module(temperature: float = 45.0, rx: tuple[float, ...] = (-1.0, -0.9, -1.1, -1.0), *,
            part: str = "MMA4Z00-NS400", warning_high: float | None = None) -> ModuleDiagnostics:
    return ModuleDiagnostics("mlxlink", "OSFP", "NVIDIA", part, "MT0001", "Optical Module",
                             temperature_c=ModuleReading((temperature,), -5.0, 75.0, None, warning_high),
                             bias_ma=ModuleReading((7.5,) * 4, 2.0, 15.0),
                             rx_power_dbm=ModuleReading(rx, -10.41, 6.0), tx_power_dbm=ModuleReading((1.1,) * 4, -8.5, 5.0))


def node(modules: dict[str, ModuleDiagnostics]) -> Inventory:
    inventory = dgx_h100(hcas=[ib_hca(index) for index in range(4)], topology=None)
    inventory.transceivers = modules
    return inventory


def test_healthy_modules_pass() -> None:
    findings = run_check(transceiver, CHECK, node({f"mlx5_{i}:1": _module(44 + i) for i in range(4)}))
    assert {finding.status for finding in findings} == {Status.PASS}
    assert only(findings, "mlx5_0:1").summary == "OSFP MMA4Z00-NS400 (NVIDIA): 44 °C, within its limits and like its peers"


def test_limits_margin_and_peers() -> None:
    modules = {f"mlx5_{i}:1": _module(45) for i in range(4)}
    modules["mlx5_1:1"] = _module(76)                                    # above the alarm limit
    modules["mlx5_2:1"] = _module(45, rx=(-1.0, -5.5, -1.0, -1.0))       # one weak lane, inside the limits
    modules["mlx5_3:1"] = _module(72, warning_high=70.0)                 # above its warning limit
    findings = run_check(transceiver, CHECK, node(modules))
    hot = only(findings, "mlx5_1:1", Status.FAIL)
    assert hot.summary.startswith("OSFP MMA4Z00-NS400 (NVIDIA): temperature 76 °C above the module's alarm limit 75 °C")
    assert "31 °C hotter than the node's other MMA4Z00-NS400 modules" in hot.summary
    weak = only(findings, "mlx5_2:1", Status.WARN)
    assert "receive power of lane(s) 2 more than 3 dB below" in weak.summary
    assert only(findings, "mlx5_3:1", Status.WARN).rule == "warning_severity"
    # mlxlink gives only the alarm range: 71 °C is within the 5 °C margin of 75 °C.
    near = run_check(transceiver, CHECK, node({"mlx5_0:1": _module(71)}))
    assert only(near, "mlx5_0:1", Status.WARN).summary.endswith("temperature 71 °C within 5 °C of the module's alarm limit 75 °C")


def test_peers_need_enough_modules_of_the_same_part() -> None:
    modules = {"mlx5_0:1": _module(45), "mlx5_1:1": _module(66), "mlx5_2:1": _module(45, part="OTHER")}
    findings = run_check(transceiver, CHECK, node(modules))
    assert only(findings, "mlx5_1:1").status is Status.PASS             # 2 of one part: no comparison


def test_copper_passes_and_a_missing_reading_is_unknown() -> None:
    copper = ModuleDiagnostics("mlxlink", "OSFP", "FS", "OSFPFL-400G-PC01", cable="Passive copper cable")
    findings = run_check(transceiver, CHECK, node({"mlx5_0:1": copper, "mlx5_1:1": _module()}))
    assert only(findings, "mlx5_0:1").summary == ("OSFP OSFPFL-400G-PC01 (FS): no diagnostics to judge (Passive "
                                                  "copper cable)")
    assert only(findings, "mlx5_2:1", Status.UNKNOWN).summary.startswith("no module reading for mlx5_2:1: mlxlink-m-mlx5_2")


def test_no_reading_anywhere_is_one_unknown_saying_why() -> None:
    inventory = node({})
    inventory.sources["mlxlink-m-mlx5_0"] = SourceStatus("mlxlink-m-mlx5_0", SourceState.MISSING, "mlxlink is not installed")
    assert NEED_JUDGES["transceiver"](inventory, None) is None        # which ports count, only the pack says
    findings = run_check(transceiver, CHECK, inventory)
    assert [(finding.subject, finding.status) for finding in findings] == [("node", Status.UNKNOWN)]
    assert findings[0].summary == "no port module readings (4 ports): mlxlink-m-mlx5_0 is not available: mlxlink is not installed"


def test_ports_of_a_non_compute_class_are_not_judged() -> None:
    inventory = dgx_h100(topology=None)         # 8 rails and the BlueField storage bond
    inventory.transceivers = {f"mlx5_{index}:1": _module() for index in range(8)}
    findings = run_check(transceiver, CHECK, inventory, pack_name="dgx-h100")
    assert only(findings, "mlx5_bond_0:1").status is Status.SKIP
    assert {finding.status for finding in findings if finding.subject != "mlx5_bond_0:1"} == {Status.PASS}
