"""The Prometheus output's values (docs/metrics.md): port rates, error counters and their
growth, NVLink errors, module temperature and optical power, BER, check durations and the
probe's bus bandwidth, on real fixture nodes; every family named by Prometheus' rules, every
label bounded; and the file read by a real node_exporter's textfile collector.

Expected values are read from the fixtures' own files (sysfs counters, mlxlink output,
nvml.json) with plain regexes here, not through netdoctor's parsers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from netdoctor.checks.metrics import (
    FAMILIES,
    HW_ERROR_COUNTERS,
    NVLINK_COUNTERS,
    PORT_ERROR_COUNTERS,
    port_labels,
)
from netdoctor.inventory.model import NVLINK5_ERROR_COUNTERS, NVLINK_ERROR_COUNTERS
from netdoctor.report.model import (
    CheckOutcome,
    Finding,
    Grade,
    MetricSample,
    Report,
    Status,
)
from netdoctor.report.render import render
from netdoctor.run import CheckOptions, run_check

NODES = Path(__file__).resolve().parent / "fixtures" / "nodes"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
STATUS_FAMILIES = ("netdoctor_grade", "netdoctor_check_status", "netdoctor_finding_status",
                   "netdoctor_run_duration_seconds", "netdoctor_last_run_timestamp_seconds", "netdoctor_info",
                   "netdoctor_nccl_busbw_gbps")
RENDERER_FAMILIES = ("netdoctor_check_duration_seconds", "netdoctor_probe_busbw_bytes_per_second")
VALUE_LABELS = {"host", "device", "port", "lane", "counter", "check"}

_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(?:,|$)')
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def parse(text: str) -> tuple[dict[str, str], dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """(family -> type, series -> value) of an exposition; every rule the textfile collector
    and the naming conventions hold is asserted on the way: HELP then TYPE once per family,
    its samples together right after them, no series twice, values that parse."""
    types: dict[str, str] = {}
    series: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    current, helped = None, set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in helped and name not in types, f"HELP twice: {line}"
            helped.add(name)
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name in helped and name not in types, f"TYPE out of place: {line}"
            assert (kind == "counter") == name.endswith("_total"), f"_total is for counters alone: {line}"
            types[name], current = kind, name
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample: {line!r}"
        name, braces, value = match.groups()
        assert name == current, f"{name} outside its family's block"
        labels: list[tuple[str, str]] = []
        if braces:
            inner, position = braces[1:-1], 0
            while position < len(inner):
                label = _LABEL.match(inner, position)
                assert label, f"bad labels: {line!r}"
                labels.append((label.group(1), label.group(2)))
                position = label.end()
        key = (name, frozenset(labels))
        assert key not in series, f"repeated series: {line}"
        series[key] = float(value)
    return types, series


def values(series: dict, name: str, **labels: str) -> dict[frozenset, float]:
    wanted = set(labels.items())
    return {key[1]: value for key, value in series.items() if key[0] == name and wanted <= key[1]}


def one(series: dict, name: str, **labels: str) -> float:
    found = values(series, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return next(iter(found.values()))


def _run(snapshot: str, baseline: str | None = None) -> Report:
    return run_check(CheckOptions(snapshot=NODES / snapshot, baseline=NODES / baseline if baseline else None,
                                  no_probe=True, deadline_s=30.0), env={})


@pytest.fixture(scope="module")
def symbol_errors() -> Report:
    """10 minutes apart, same boot: mlx5_6's symbol errors grew by 5,000."""
    return _run("dgx-h100-symbol-errors-b", "dgx-h100-symbol-errors-a")


def _text(path: Path) -> str:
    return path.read_text()


def _sysfs_counter(node: str, device: str, name: str, directory: str = "counters") -> int:
    return int(_text(NODES / node / "sys/class/infiniband" / device / "ports/1" / directory / name))


def _mlxlink(node: str, option: str, device: str, field: str) -> str:
    text = _text(NODES / node / "commands" / f"mlxlink-{option}-{device}.out")
    match = re.search(rf"^{re.escape(field)}\s*:\s*([^\[\n]+)", text, re.MULTILINE)
    assert match, field
    return match.group(1).strip()


def test_port_values_on_a_dgx_with_counter_history(symbol_errors: Report) -> None:
    types, series = parse(render(symbol_errors, "prometheus"))
    port = {"host": "dgx-h100-symbol-errors", "device": "mlx5_6", "port": "1"}
    now = _sysfs_counter("dgx-h100-symbol-errors-b", "mlx5_6", "symbol_error")
    before = _sysfs_counter("dgx-h100-symbol-errors-a", "mlx5_6", "symbol_error")
    assert (now, before) == (5120, 120)     # the fixture's fault, as INDEX.toml describes it
    assert one(series, "netdoctor_port_errors_total", counter="symbol_error", **port) == now
    assert one(series, "netdoctor_counter_window_seconds", host=port["host"]) == 600
    assert one(series, "netdoctor_port_errors_per_second", counter="symbol_error", **port) == pytest.approx((now - before) / 600)
    assert one(series, "netdoctor_port_errors_per_second", counter="link_downed", **port) == 0
    assert one(series, "netdoctor_port_errors_total", counter="out_of_sequence", **port) == \
        _sysfs_counter("dgx-h100-symbol-errors-b", "mlx5_6", "out_of_sequence", "hw_counters")
    # 400 Gb/s (4X NDR) in sysfs `rate`: 5e10 bytes per second, on every one of the 10 ports.
    assert "400 Gb/sec" in _text(NODES / "dgx-h100-symbol-errors-b/sys/class/infiniband/mlx5_6/ports/1/rate")
    assert set(values(series, "netdoctor_port_rate_bytes_per_second").values()) == {5e10}
    assert len(values(series, "netdoctor_port_rate_bytes_per_second")) == 10
    # The modules and the physical layer, as mlxlink printed them.
    node = "dgx-h100-symbol-errors-b"
    assert one(series, "netdoctor_transceiver_temperature_celsius", **port) == float(
        _mlxlink(node, "m", "mlx5_6", "Temperature [C]"))
    lanes = [float(value) for value in _mlxlink(node, "m", "mlx5_6", "Rx Power Current [dBm]").split(",")]
    assert [one(series, "netdoctor_transceiver_rx_power_dbm", lane=str(lane), **port) for lane in range(len(lanes))] == lanes
    assert len(values(series, "netdoctor_transceiver_rx_power_dbm", **port)) == len(lanes) == 4
    assert one(series, "netdoctor_phy_raw_bit_error_ratio", **port) == float(
        _mlxlink(node, "c", "mlx5_6", "Raw Physical BER"))
    assert types["netdoctor_port_errors_total"] == "counter" and types["netdoctor_port_errors_per_second"] == "gauge"


def test_nvlink_errors_and_their_growth() -> None:
    report = _run("dgx-h100-nvlink-replay-b", "dgx-h100-nvlink-replay-a")
    _, series = parse(render(report, "prometheus"))
    gpus = {}
    for node in ("dgx-h100-nvlink-replay-a", "dgx-h100-nvlink-replay-b"):
        data = json.loads(_text(NODES / node / "nvml.json"))
        gpus[node] = {gpu["index"]: gpu for gpu in data["gpus"]}

    def replays(node: str, index: int) -> int:
        return sum(link["errors"]["replay"] for link in gpus[node][index]["nvlink"]["links"])

    gpu5 = {"host": "dgx-h100-nvlink-replay", "device": "GPU5"}
    grown = replays("dgx-h100-nvlink-replay-b", 5) - replays("dgx-h100-nvlink-replay-a", 5)
    assert grown == 2000      # link 9's fault
    assert one(series, "netdoctor_nvlink_errors_total", counter="replay", **gpu5) == replays("dgx-h100-nvlink-replay-b", 5)
    assert one(series, "netdoctor_nvlink_errors_per_second", counter="replay", **gpu5) == pytest.approx(grown / 600)
    assert one(series, "netdoctor_nvlink_errors_per_second", counter="replay", host=gpu5["host"], device="GPU0") == 0
    assert one(series, "netdoctor_nvlink_active_links", **gpu5) == gpus["dgx-h100-nvlink-replay-b"][5]["nvlink"]["active"]
    assert len(values(series, "netdoctor_nvlink_errors_total")) == 8 * len(NVLINK_ERROR_COUNTERS)   # NVLink 4: no symbol_errors


def test_a_hot_module_and_efa_counters_are_there_to_trend() -> None:
    _, hot = parse(render(_run("dgx-h100-module-hot"), "prometheus"))
    temperatures = values(hot, "netdoctor_transceiver_temperature_celsius")
    assert one(hot, "netdoctor_transceiver_temperature_celsius", device="mlx5_6") == float(
        _mlxlink("dgx-h100-module-hot", "m", "mlx5_6", "Temperature [C]")) == 73
    assert max(temperatures.values()) == 73 and sorted(temperatures.values())[-2] < 50
    assert not values(hot, "netdoctor_port_errors_per_second")    # no history: no growth, no window
    assert not values(hot, "netdoctor_counter_window_seconds")
    _, efa = parse(render(_run("aws-p5"), "prometheus"))
    retrans = values(efa, "netdoctor_port_errors_total", counter="retrans_pkts")
    assert len(retrans) == 32
    assert one(efa, "netdoctor_port_errors_total", device="rdmap79s0", counter="retrans_pkts") == \
        _sysfs_counter("aws-p5", "rdmap79s0", "retrans_pkts", "hw_counters")


def test_check_durations_and_probe_bandwidth_keep_the_old_families(symbol_errors: Report) -> None:
    report = dataclasses.replace(symbol_errors, probe={"busbw_gbps": 452.7})
    text = render(report, "prometheus")
    _, series = parse(text)
    durations = values(series, "netdoctor_check_duration_seconds", host="dgx-h100-symbol-errors")
    assert {dict(labels)["check"] for labels in durations} == {outcome.check for outcome in report.checks}
    assert all(value == round(outcome.duration_s, 4) for outcome in report.checks
               for labels, value in durations.items() if dict(labels)["check"] == outcome.check)
    assert one(series, "netdoctor_probe_busbw_bytes_per_second") == pytest.approx(452.7e9)
    # The families that were there before keep their names and labels.
    assert one(series, "netdoctor_nccl_busbw_gbps") == 452.7
    assert series[("netdoctor_grade", frozenset())] == report.grade.exit_code
    assert ("netdoctor_info", frozenset({("version", report.netdoctor_version), ("rules", "dgx-h100")})) in series
    assert "netdoctor_grade 2\n" in text


def test_names_types_and_labels_follow_the_conventions(symbol_errors: Report) -> None:
    types, series = parse(render(symbol_errors, "prometheus"))
    sys_class = NODES / "dgx-h100-symbol-errors-b" / "sys" / "class"
    devices = {path.name for path in (sys_class / "infiniband").iterdir()} | {f"GPU{index}" for index in range(8)}
    counters = set(PORT_ERROR_COUNTERS + HW_ERROR_COUNTERS + NVLINK_COUNTERS)
    checks = {outcome.check for outcome in symbol_errors.checks}
    assert {sample.name for sample in symbol_errors.metrics} <= set(FAMILIES)    # none dropped unwritten
    for name, labels in series:
        assert re.fullmatch(r"netdoctor_[a-z0-9_]+", name)
        if name in STATUS_FAMILIES:
            continue
        label = dict(labels)
        assert set(label) <= VALUE_LABELS and label["host"] == symbol_errors.host, (name, label)
        assert label.get("counter", "symbol_error") in counters
        assert label.get("check", "inventory") in checks
        assert label.get("lane", "0") in {str(lane) for lane in range(8)}
        assert label.get("port", "1").isdigit()
        assert label.get("device", "mlx5_0") in devices, label
        assert not any(" " in value for value in label.values())      # never a sentence
    # Base units in the names, gauges for current values, counters for what only counts up.
    assert {name for name in types if name not in STATUS_FAMILIES} <= set(FAMILIES) | set(RENDERER_FAMILIES)
    assert all(re.search(r"_(total|seconds|per_second|celsius|dbm|ratio|links)$", name)
               for name in types if name not in STATUS_FAMILIES)
    assert [name for name, kind in types.items() if kind == "counter"] == [
        "netdoctor_port_errors_total", "netdoctor_nvlink_errors_total"]


def test_label_values_are_escaped_and_small_ratios_positional() -> None:
    hostile = 'node"7\\x\nforged 1'
    report = Report(host=hostile, grade=Grade.PASS, started_at="2026-11-21T22:40:00Z", duration_s=0.5, rules="default",
                    findings=[Finding("mtu", Status.PASS, "node")], checks=[CheckOutcome("mtu", Status.PASS, 0.25, True)],
                    metrics=(MetricSample("netdoctor_transceiver_temperature_celsius", port_labels("ens3np0"), 41.5),
                             MetricSample("netdoctor_phy_raw_bit_error_ratio", port_labels("mlx5_0:1"), 8.3e-10)))
    text = render(report, "prometheus")
    _, series = parse(text)
    escaped = 'node\\"7\\\\x\\nforged 1'
    assert one(series, "netdoctor_transceiver_temperature_celsius", host=escaped, device="ens3np0") == 41.5
    assert 'netdoctor_phy_raw_bit_error_ratio{host="' + escaped + '",device="mlx5_0",port="1"} 0.00000000083\n' in text
    with pytest.raises(AssertionError):     # the parser above does refuse what a collector refuses
        parse(text.replace("# TYPE netdoctor_grade gauge\n", ""))


def test_the_exported_counters_are_those_the_checks_judge_keyed_as_the_history_keys_them() -> None:
    from netdoctor.checks import history, metrics
    from netdoctor_plugins import error_counters

    assert PORT_ERROR_COUNTERS == tuple(spec.name for spec in error_counters.ERROR_COUNTERS)
    assert HW_ERROR_COUNTERS == tuple(spec.name for spec in error_counters.HW_COUNTERS + error_counters.EFA_COUNTERS)
    assert NVLINK_COUNTERS == NVLINK_ERROR_COUNTERS + NVLINK5_ERROR_COUNTERS
    assert metrics.HW_PREFIX == history.HW_PREFIX    # (NVLink keys: their growth is measured in a test above)


def test_docs_list_every_family() -> None:
    text = _text(DOCS)
    documented = set(re.findall(r"^\| `(netdoctor_[a-z0-9_]+)`", text, re.MULTILINE))
    assert documented == set(FAMILIES) | set(RENDERER_FAMILIES) | set(STATUS_FAMILIES)


# -- a real consumer: node_exporter's textfile collector -----------------------------------
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


@pytest.fixture(scope="module")
def node_exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    if NODE_EXPORTER is None:
        if os.environ.get("CI"):
            pytest.fail("node_exporter is not installed: scripts/test.sh installs prometheus-node-exporter")
        pytest.skip("node_exporter is not installed (apt-get install prometheus-node-exporter)")
    directory = tmp_path_factory.mktemp("textfile")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
                                f"--collector.textfile.directory={directory}", f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).read()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
                assert time.monotonic() < deadline, "node_exporter did not answer within 10 s"
                time.sleep(0.05)
        yield directory, url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _scrape(node_exporter: tuple[Path, str], text: str) -> dict:
    directory, url = node_exporter
    (directory / "netdoctor.prom").write_text(text)
    scraped = urllib.request.urlopen(url, timeout=5).read().decode()
    return _scraped_series(scraped)


def _scraped_series(text: str) -> dict[tuple[str, frozenset], float]:
    """Our families and the collector's error gauge from node_exporter's own exposition (its
    labels sorted, its numbers Go's)."""
    def ours(line: str) -> bool:
        name = line.split(" ")[2] if line.startswith("#") else re.split(r"[{ ]", line)[0]
        return name.startswith("netdoctor_") or name == "node_textfile_scrape_error"

    return parse("\n".join(line for line in text.splitlines() if ours(line)))[1]


def test_node_exporter_reads_every_value(node_exporter: tuple[Path, str], symbol_errors: Report) -> None:
    ours = render(symbol_errors, "prometheus")
    _, expected = parse(ours)
    scraped = _scrape(node_exporter, ours)
    assert scraped[("node_textfile_scrape_error", frozenset())] == 0
    ours_scraped = {key: value for key, value in scraped.items() if key[0].startswith("netdoctor_")}
    assert ours_scraped == pytest.approx(expected)       # every series, every value, as written
    assert ours_scraped[("netdoctor_port_errors_per_second", frozenset(
        {("host", "dgx-h100-symbol-errors"), ("device", "mlx5_6"), ("port", "1"), ("counter", "symbol_error")}))] \
        == pytest.approx(5000 / 600)


def test_node_exporter_takes_the_escaped_labels_and_refuses_a_broken_file(node_exporter: tuple[Path, str]) -> None:
    report = Report(host='node"7\\x\nb', grade=Grade.PASS, started_at="2026-11-21T22:40:00Z", duration_s=0.5,
                    rules="default", findings=[], checks=[CheckOutcome("mtu", Status.PASS, 0.25, True)])
    scraped = _scrape(node_exporter, render(report, "prometheus"))
    assert scraped[("node_textfile_scrape_error", frozenset())] == 0
    assert scraped[("netdoctor_check_duration_seconds", frozenset({("host", 'node\\"7\\\\x\\nb'), ("check", "mtu")}))] == 0.25
    # The same collector flags a file whose label is not escaped: the 0 above means something.
    broken = _scrape(node_exporter, render(report, "prometheus") + 'netdoctor_grade{host="node"7"} 0\n')
    assert broken[("node_textfile_scrape_error", frozenset())] == 1
