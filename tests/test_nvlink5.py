"""NVLink 5.0 (NVML version 7: B200, B300, GB200, GB300) end to end: NVML's per-link symbol
errors and packed effective BER (host), nvml.json -> inventory, the `nvlink` check (symbol
errors by growth as replay is judged, effective BER against DCGM's 1e-12), `nvidia-smi nvlink -s`
at 53.125 GB/s, the probe's expectation and the `discover` view."""

from __future__ import annotations

import json
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest
from inventory_factory import dgx_h100, gpu, run_check
from netdoctor_plugins.nvlink import nvlink

from netdoctor.checks.api import CounterHistory
from netdoctor.checks.history import counter_readings
from netdoctor.host.nvml import collect_nvml, nvlink_ber
from netdoctor.inventory.from_nvml import read_nvml
from netdoctor.inventory.from_tools import join_nvlink_status
from netdoctor.inventory.merge import Draft
from netdoctor.inventory.model import Gpu, Inventory, NvLink
from netdoctor.inventory.render import render_inventory_text
from netdoctor.parsers.nvidia_smi_nvlink import parse_nvidia_smi_nvlink_status
from netdoctor.probe.expectation import GpuLinks, expected_busbw, nvlink_version_name
from netdoctor.report.model import Status
from tests.test_host_nvml import FakeGpu, FakeNvml, NVMLError

CORPUS = Path(__file__).parent / "data" / "corpus" / "nvidia-smi-nvlink"
B300 = CORPUS / "dell-xe9780-doc-63125688786__b300-sxm6-ac_7gpu_nvlink-status.txt"
GB200 = CORPUS / "k8s-test-infra-issue-371__gb200_nvlink-s_excerpt.txt"
ZERO_BER = (15 << 8) | 255          # mantissa 15, exponent 255: DCGM's "zero BER" (mlxlink's 15E-255)


def packed(mantissa: int, exponent: int) -> int:
    """nvml.h: NVLink BER bits [0:7] exponent, [8:11] mantissa."""
    return (mantissa << 8) | exponent


# ---- host: one field-values call per GPU, nvidia-ml-py's own ctypes structs ------------------

def blackwell_driver(symbols: dict[int, int], bers: dict[int, int], *, not_supported: frozenset[int] = frozenset(),
                     version: int = 7) -> tuple[types.ModuleType, list[list[Any]]]:
    """A B200 with 18 active links whose driver no longer answers the NVLink 1-4 error counters."""
    module = FakeNvml([FakeGpu("NVIDIA B200", "GPU-b200", "00000000:1B:00.0", 0, nvlinks=[1] * 18)]).module()
    module.nvmlDeviceGetNvLinkVersion = lambda handle, link: version
    calls: list[list[Any]] = []

    def error_counter(handle: Any, link: int, counter: int) -> int:
        raise NVMLError(3)                       # NOT_SUPPORTED on NVLink 5

    def field_values(handle: Any, fields: list[Any]) -> Any:
        calls.append(list(fields))
        values = (pynvml.c_nvmlFieldValue_t * len(fields))()
        for value, item in zip(values, fields):
            field, link = item if isinstance(item, tuple) else (item, 0)
            value.fieldId, value.scopeId, value.nvmlReturn = field, link, 0
            if field in (221, 220) and link in not_supported:
                value.nvmlReturn = 3
            elif field == 221:                   # NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS
                value.valueType, value.value.ullVal = 3, symbols.get(link, 0)
            elif field == 220:                   # NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER
                value.valueType, value.value.ullVal = 3, bers.get(link, ZERO_BER)
            else:                                # NVLINK_GET_SPEED (MB/s), recovery action
                value.valueType, value.value.uiVal = 1, 53125 if field == 164 else 0
        return values

    module.nvmlDeviceGetNvLinkErrorCounter = error_counter
    module.nvmlDeviceGetFieldValues = field_values
    return module, calls


def test_host_reads_symbol_errors_and_decodes_the_effective_ber_per_link() -> None:
    module, calls = blackwell_driver({5: 12}, {5: packed(2, 12), 6: 0}, not_supported=frozenset({7}))
    report, status = collect_nvml(module, dmabuf_query=lambda address: None)
    assert status == "ok" and report is not None
    gpu0 = report["gpus"][0]
    assert gpu0["nvlink"]["version"] == 7 and gpu0["errors"] == {}
    links = gpu0["nvlink"]["links"]
    # CONTRACT 8: the older four null, NVLink 5's two beside them.
    assert links[0]["errors"] == {"replay": None, "recovery": None, "crc_flit": None, "crc_data": None,
                                  "symbol_errors": 0, "effective_ber": 0.0}
    assert links[0]["speed_mbps"] == 53125
    assert links[5]["errors"]["symbol_errors"] == 12 and links[5]["errors"]["effective_ber"] == pytest.approx(2e-12)
    assert links[6]["errors"]["effective_ber"] == 0.0
    # A field the driver does not answer: null, and no error entry.
    assert (links[7]["errors"]["symbol_errors"], links[7]["errors"]["effective_ber"]) == (None, None)
    nvlink5_calls = [call for call in calls if (221, 0) in call]
    assert len(nvlink5_calls) == 1 and len(nvlink5_calls[0]) == 36    # one call per GPU, two fields per link


def test_older_links_do_not_ask_for_nvlink5_fields() -> None:
    module, calls = blackwell_driver({}, {}, version=6)
    report, _ = collect_nvml(module, dmabuf_query=lambda address: None)
    assert report is not None
    assert "symbol_errors" not in report["gpus"][0]["nvlink"]["links"][0]["errors"]
    assert not any(isinstance(item, tuple) and item[0] in (220, 221) for call in calls for item in call)


def test_a_failing_field_values_call_is_an_error_entry_not_an_exception() -> None:
    module, _ = blackwell_driver({}, {})
    speeds = module.nvmlDeviceGetFieldValues

    def failing(handle: Any, fields: list[Any]) -> Any:
        if any(isinstance(item, tuple) and item[0] == 221 for item in fields):
            raise NVMLError(15)
        return speeds(handle, fields)

    module.nvmlDeviceGetFieldValues = failing
    report, _ = collect_nvml(module, dmabuf_query=lambda address: None)
    assert report is not None
    gpu0 = report["gpus"][0]
    assert gpu0["errors"] == {"nvlink_counters": "GPU is lost"}
    assert gpu0["nvlink"]["links"][3]["errors"]["symbol_errors"] is None
    assert gpu0["nvlink"]["links"][3]["speed_mbps"] == 53125


# DCGM's own test vectors for its 1e-12 effective-BER limit (NVIDIA/DCGM
# common/tests/DcgmUtilitiesTests.cpp @72fa3fe, IsEffectiveBerThresholdExceeded).
DCGM_BER_CASES = [((15, 255), 0.0, False), ((1, 12), 1e-12, False), ((2, 12), 2e-12, True),
                  ((10, 13), 1e-12, False), ((11, 13), 1.1e-12, True), ((1, 11), 1e-11, True), ((0, 0), 0.0, False)]


@pytest.mark.parametrize(("fields", "value", "dcgm_fails"), DCGM_BER_CASES)
def test_ber_decoding_and_the_limit_agree_with_dcgm(fields: tuple[int, int], value: float, dcgm_fails: bool) -> None:
    assert nvlink_ber(packed(*fields)) == pytest.approx(value, rel=1e-12, abs=0)
    findings = judged(node(b200(0, bers={3: nvlink_ber(packed(*fields))})))
    if dcgm_fails:
        assert findings["GPU0"].status is Status.FAIL and findings["GPU0"].rule == "effective_ber_limit"
        assert f"link 3 {value:.1e}" in findings["GPU0"].summary
    else:
        assert "GPU0" not in findings


# ---- inventory -------------------------------------------------------------------------------

def read(report: dict[str, Any]) -> Inventory:
    source = types.SimpleNamespace(host="b200", captured_at="2026-11-26T12:00:00Z", boot_id="b", sys=None,
                                   nvml=lambda: (report, "ok"))
    draft = Draft(source)
    read_nvml(draft)
    return draft.inventory


def test_end_to_end_nvml_to_inventory_to_check() -> None:
    module, _ = blackwell_driver({5: 12}, {9: packed(5, 11)})
    report, _ = collect_nvml(module, dmabuf_query=lambda address: None)
    inventory = read(json.loads(json.dumps(report)))         # as a snapshot holds it
    b200_gpu = inventory.gpus[0]
    assert b200_gpu.nvlink_version == 7 and b200_gpu.nvlinks[5].errors["symbol_errors"] == 12
    assert b200_gpu.nvlinks[5].errors["replay"] is None
    assert b200_gpu.nvlinks[9].effective_ber == pytest.approx(5e-11)
    findings = run_check(nvlink, "nvlink", replace(inventory, uptime_s=3600.0), pack_name="default")
    assert [finding.status for finding in findings] == [Status.FAIL]
    assert findings[0].summary.startswith("NVLink effective BER past 1e-12 (errors left after FEC): link 9 5.0e-11")


@pytest.mark.parametrize(("errors", "symbol", "ber"), [
    ({"symbol_errors": -3, "effective_ber": -1e-12}, None, None),
    ({"symbol_errors": True, "effective_ber": float("inf")}, None, None),
    ({"symbol_errors": 1.5, "effective_ber": float("nan")}, None, None),
    ({"symbol_errors": "7", "effective_ber": "1e-13"}, None, None),
    ({"symbol_errors": 7, "effective_ber": 2.0}, 7, None),        # a BER is at most 1
    ({"symbol_errors": 0, "effective_ber": 0}, 0, 0.0),
])
def test_hostile_nvlink5_values_are_unknown(errors: dict[str, Any], symbol: int | None, ber: float | None) -> None:
    links = [{"link": 0, "state": "active", "errors": errors}]
    link = read({"gpus": [{"index": 0, "nvlink": {"active": 1, "total": 1, "version": 7, "links": links}}]}).gpus[0].nvlinks[0]
    assert (link.errors["symbol_errors"], link.effective_ber) == (symbol, ber)


def test_a_report_without_nvlink5_counters_keeps_the_four_old_ones() -> None:
    links = [{"link": 0, "state": "active", "errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 2}}]
    link = read({"gpus": [{"index": 0, "nvlink": {"active": 1, "total": 1, "version": 6, "links": links}}]}).gpus[0].nvlinks[0]
    assert link.errors == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 2} and link.effective_ber is None


# ---- the check ---------------------------------------------------------------------------------

def b200(index: int, *, symbols: dict[int, int] | None = None, bers: dict[int, float] | None = None,
         version: int = 7, active: bool = True, counters: bool = True) -> Gpu:
    links = tuple(NvLink(link, active=active, speed_mbps=53125 if active else None, version=version,
                         errors={"replay": None, "recovery": None, "crc_flit": None, "crc_data": None,
                                 **({"symbol_errors": (symbols or {}).get(link, 0)} if counters else {})},
                         effective_ber=(bers or {}).get(link, 0.0) if counters else None)
                  for link in range(18))
    return replace(gpu(index), name="NVIDIA B200", nvlink_active=18 if active else 0, nvlink_total=18,
                   nvlink_version=version, nvlinks=links)


def node(*gpus: Gpu) -> Inventory:
    return dgx_h100(gpus=[*gpus, *(b200(index) for index in range(len(gpus), 8))])


def judged(inventory: Inventory, history: CounterHistory | None = None, pack: str = "default") -> dict[str, Any]:
    findings = run_check(nvlink, "nvlink", inventory, pack_name=pack, history=history)
    return {finding.subject.split()[0]: finding for finding in findings if finding.status is not Status.PASS} | {
        "passed": [finding for finding in findings if finding.status is Status.PASS]}


def test_a_healthy_b200_passes_as_nvlink_5_even_with_the_old_counters_null() -> None:
    findings = run_check(nvlink, "nvlink", node(b200(0, bers={2: 3e-15}), b200(1, counters=False)), pack_name="default")
    assert [finding.status for finding in findings] == [Status.PASS] * 8      # no `unknown` for the null four
    assert findings[0].summary == "18/18 NVLinks active (NVLink 5.0, 53.125 GB/s each)"
    assert findings[0].evidence["effective_ber_max"] == 3e-15
    sixth = run_check(nvlink, "nvlink", dgx_h100(gpus=[b200(index, version=8) for index in range(8)]))
    assert sixth[0].summary == "18/18 NVLinks active (NVLink 6.0, 53.125 GB/s each)"


def test_a_b200_with_every_link_inactive_fails_without_a_pack() -> None:
    """gpud showed such a B200 healthy (issue 23): the majority of *total* links is the expectation."""
    result = judged(dgx_h100(gpus=[b200(index, active=False) for index in range(8)]))
    assert result["GPU0"].status is Status.FAIL and result["GPU0"].summary.startswith("0 of 18 NVLinks active")


def test_symbol_errors_are_judged_by_growth_like_replay() -> None:
    before = node(b200(0, symbols={4: 100}))
    readings = counter_readings(before)
    assert readings["nvlink 0000:18:00.0 4"] == {"replay": None, "recovery": None, "crc_flit": None,
                                                  "crc_data": None, "symbol_errors": 100}
    history = CounterHistory("2026-11-21T21:40:00Z", 3600, readings)
    assert len(judged(before, history)["passed"]) == 8                     # a level, no growth: pass
    grew = judged(node(b200(0, symbols={4: 103})), history)["GPU0"]
    assert grew.status is Status.WARN and grew.rule == "symbol_errors_growth"
    assert grew.summary.startswith("NVLink errors grew since the last run: link 4 symbol_errors +3 in 1.0 h, 3/h")
    storm = judged(node(b200(0, symbols={4: 100 + 120})), history)["GPU0"]          # 120/h
    assert storm.status is Status.FAIL and storm.rule == "symbol_errors_per_hour_fail"
    assert "(fails at 60/h)" in storm.summary


def test_symbol_errors_since_boot_count_only_by_their_rate() -> None:
    trained = node(b200(0, symbols={1: 50}))
    trained.uptime_s = 93784.0                                # 26 h: 2/h, link training at boot
    assert len(judged(trained)["passed"]) == 8
    burst = node(b200(0, symbols={1: 500}))
    burst.uptime_s = 1800.0                                   # 1000/h
    assert judged(burst)["GPU0"].rule == "symbol_errors_per_hour_fail"


def test_an_inactive_links_stale_ber_is_not_judged_but_the_link_is() -> None:
    down = b200(0, bers={6: 1e-6})
    down = replace(down, nvlink_active=17, nvlinks=tuple(replace(link, active=False) if link.link == 6 else link
                                                          for link in down.nvlinks))
    result = judged(node(down))
    assert result["GPU0"].rule == "expected_links" and "BER" not in result["GPU0"].summary


# ---- nvidia-smi nvlink -s, the joiner, the probe's expectation ------------------------------

def test_real_b300_and_gb200_nvlink_status_at_53_125() -> None:
    b300 = parse_nvidia_smi_nvlink_status(B300.read_text())
    assert [(entry.index, entry.name, len(entry.links)) for entry in b300] == [
        (index, "NVIDIA B300 SXM6 AC", 18) for index in range(7)]
    assert b300[6].uuid == "GPU-07634869-498e-829a-ecb5-9f1611c125fb"
    assert {link.speed_gbs for entry in b300 for link in entry.links} == {53.125}
    # The GB200 sample is a quote: its command line and the author's `...` are not output.
    quoted = GB200.read_text().splitlines()
    assert quoted[0] == "nvidia-smi nvlink -s" and quoted[-1] == "..."
    gb200 = parse_nvidia_smi_nvlink_status("\n".join(quoted[1:-1]))
    assert [(entry.name, len(entry.links)) for entry in gb200] == [("NVIDIA GB200", 18), ("NVIDIA GB200", 2)]
    assert {link.speed_gbs for entry in gb200 for link in entry.links} == {53.125}


def test_inactive_link_in_the_nvlink5_format() -> None:
    # Derived from the real B300 output: GPU 0's link 5 printed as nvidia-smi prints an inactive link.
    text = B300.read_text().replace("         Link 5: 53.125 GB/s\n", "         Link 5: <inactive>\n", 1)
    links = parse_nvidia_smi_nvlink_status(text)[0].links
    assert [link.link for link in links if not link.active] == [5] and links[5].speed_gbs is None


def test_nvidia_smi_alone_gives_a_b300_its_links_and_generation() -> None:
    entries = parse_nvidia_smi_nvlink_status(B300.read_text())
    source = types.SimpleNamespace(host="b300", captured_at="2026-08-28T00:33:07Z", boot_id=None, sys=None)
    draft = Draft(source)
    draft.inventory.gpus = [replace(gpu(index), name="NVIDIA B300 SXM6 AC") for index in range(7)]
    join_nvlink_status(draft, entries, {})
    joined = draft.inventory.gpus[0]
    assert (joined.nvlink_total, joined.nvlink_active) == (18, 18)
    assert {link.speed_mbps for link in joined.nvlinks} == {53125}
    findings = run_check(nvlink, "nvlink", dgx_h100(gpus=draft.inventory.gpus))
    assert [finding.status for finding in findings] == [Status.PASS] * 7
    assert findings[0].summary == "18/18 NVLinks active (NVLink 5.0, 53.125 GB/s each)"     # generation by name


def test_expectation_knows_nvlink_5_and_not_6() -> None:
    assert (nvlink_version_name(7), nvlink_version_name(8)) == ("5.0", "6.0")
    assert nvlink_version_name(None, "NVIDIA GB300") == "5.0" and nvlink_version_name(None, "NVIDIA B200") == "5.0"
    b200s = [GpuLinks(index, "NVIDIA B200", nvlink_version_name(7), 18, 18) for index in range(8)]
    expectation = expected_busbw(b200s, 1 << 30)
    assert expectation.interconnect == "NVLink" and expectation.nominal_gbps == 900.0
    sixth = expected_busbw([GpuLinks(index, "x", nvlink_version_name(8), 18, 18, pcie_gen=5, pcie_width=16)
                            for index in range(2)], 1 << 30)
    assert sixth.busbw_gbps is None and "NVLink 6.0 has no per-link bandwidth" in sixth.reasoning


# ---- discover ------------------------------------------------------------------------------------

def test_discover_shows_the_generation_and_the_nvlink5_counters() -> None:
    text = render_inventory_text(node(b200(0, symbols={5: 12, 9: 1}, bers={5: 2e-12}), b200(1, counters=False)))
    assert "18/18 NVLink 5.0 53.1 GB/s" in text
    assert "  GPU0 NVLink 5 counters: symbol errors 13 (link 5 12, link 9 1), effective BER max 2e-12 (link 5) (18 links)" in text
    assert "GPU2 NVLink 5 counters: symbol errors 0, effective BER max 0 (18 links)" in text
    assert "GPU1 NVLink 5 counters" not in text                     # no NVLink 5 counters read: no line

