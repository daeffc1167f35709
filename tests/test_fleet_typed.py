"""Reports decoded into typed Structs (netdoctor.fleet.typed): summarized as the plain decode is.

`bounded.decode_report` takes a plain report into msgspec Structs, its findings' `evidence`
left raw; anything else goes `decode_first`'s way. Whatever a node sends, the summary, or
the error and its message, is the one `json` alone gives, but for the one difference kept on
purpose (`test_a_replaced_value_is_not_digit_checked_on_the_typed_way`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netdoctor.fleet import bounded
from netdoctor.fleet.bounded import decode_report
from netdoctor.fleet.model import ERROR_GROWTH_METRIC, PHY_BER_METRIC, summarize_report
from netdoctor.report.render import render
from netdoctor.run import CheckOptions, run_check
from test_fleet_collect import LINK_FAIL, MTU_WARN, make_report

msgspec = pytest.importorskip("msgspec", reason="the typed path needs msgspec (pip install 'netdoctor[fast]')")
from netdoctor.fleet.typed import TypedReport  # noqa: E402  (imports msgspec)

NODES = Path(__file__).resolve().parent / "fixtures" / "nodes"
BIG = "9" * 5000


def outcome(text: str, fast: bool) -> tuple[Any, ...]:
    """("summary", the node's summary, the text after the report, whether it went the typed way),
    or (error class, message)."""
    bounded.use_fast_decoder(fast)
    try:
        data, rest = decode_report(text)
    except (ValueError, RecursionError) as error:
        return type(error).__name__, str(error)
    finally:
        bounded.use_fast_decoder(True)
    return "summary", summarize_report(data, "saved.json", "n1"), rest.strip(), isinstance(data, TypedReport)


def same_on_both_paths(text: str) -> tuple[Any, ...]:
    fast, plain = outcome(text, True), outcome(text, False)
    assert fast[:3] == plain[:3], text[:300]
    assert not plain[3:4] or not plain[3]
    return fast


def counters(growth: Any, status: str = "pass") -> dict[str, Any]:
    return {"check": "error-counters", "status": status, "subject": "mlx5_0:1", "summary": "",
            "evidence": {"symbol_error_delta": 1, "error_growth": growth}}


def report_text(findings: list[Any], **extra: Any) -> str:
    return json.dumps({**make_report("n1", "warn", findings), **extra})


@pytest.mark.parametrize("fixture", ["dgx-h100", "dgx-h100-link-flap", "dgx-h100-effective-ber-a", "dgx-h100-mtu-2048",
                                     "aws-p5-efa-down", "cpu-node"])
def test_real_reports_go_the_typed_way_and_summarize_alike(fixture: str) -> None:
    text = render(run_check(CheckOptions(snapshot=NODES / fixture, no_probe=True, deadline_s=60.0), env={}), "json")
    for form in (text, json.dumps(json.loads(text)), json.dumps(json.loads(text), indent=0)):
        kind, summary, rest, typed = same_on_both_paths(form)
        assert (kind, rest, typed) == ("summary", "", True)
        assert summary.check_statuses and summary.versions


def test_metrics_are_read_from_raw_evidence_alike() -> None:
    findings = [counters(3), counters(4.5, "warn"), counters(True), counters(10**400), counters(None),
                {"check": "phy", "status": "pass", "subject": "mlx5_0:1", "summary": "", "evidence": {"pre_fec_ber": 1e-9}},
                {"check": "phy", "status": "warn", "subject": "mlx5_1:1", "summary": "", "shadow": True,
                 "evidence": {"pre_fec_ber": 2e-6}}, LINK_FAIL, MTU_WARN]
    kind, summary, _, typed = same_on_both_paths(report_text(findings))
    assert typed and summary.metrics[ERROR_GROWTH_METRIC] == 7.5 and summary.metrics[PHY_BER_METRIC] == -5.699
    # `1e400` in an evidence: msgspec refuses it, json reads inf, which no metric takes.
    text = report_text([counters(1), counters(5)]).replace('"error_growth": 5', '"error_growth": 1e400')
    kind, summary, _, typed = same_on_both_paths(text)
    assert summary.metrics[ERROR_GROWTH_METRIC] == 1.0


HOSTILE = {
    "a 5,000-digit integer in an evidence": report_text([{**MTU_WARN, "evidence": {"mtu": 1}}]).replace('"mtu": 1', '"mtu": ' + BIG),
    "... in a metric's evidence": report_text([counters(1)]).replace('"error_growth": 1', '"error_growth": ' + BIG),
    "... in a long evidence": report_text([{**MTU_WARN, "evidence": {"pad": "x" * 5000, "n": 1}}]).replace('"n": 1', '"n": ' + BIG),
    "... in a key no report has": report_text([LINK_FAIL], extra=1).replace('"extra": 1', '"extra": ' + BIG),
    "... in a finding's key no report has": report_text([{**LINK_FAIL, "extra": 1}]).replace('"extra": 1', '"extra": ' + BIG),
    "... in started_at": report_text([LINK_FAIL]).replace('"2026-11-21T22:40:00Z"', BIG),
    "NaN in an evidence": report_text([{**MTU_WARN, "evidence": {"mtu": 1}}]).replace('"mtu": 1', '"mtu": NaN'),
    "a lone surrogate in an evidence": report_text([{**MTU_WARN, "evidence": {"mtu": "\\ud800"}}]),
    "a control character in an evidence": report_text([{**MTU_WARN, "evidence": {"mtu": "a\x01"}}]),
    "a bad escape in an evidence": report_text([{**MTU_WARN, "evidence": {"mtu": 1}}]).replace('"mtu": 1', '"mtu": "\\x"'),
    "a leading zero in an evidence": report_text([{**MTU_WARN, "evidence": {"mtu": 1}}]).replace('"mtu": 1', '"mtu": 01'),
    "duplicate keys in a finding": report_text([LINK_FAIL]).replace('"status": "fail"', '"status": "pass", "status": "fail"'),
    "duplicate findings keys": report_text([LINK_FAIL]).replace('"findings":', '"findings": [], "findings":'),
    "a check id that is a list": report_text([{**LINK_FAIL, "check": ["x"]}, MTU_WARN]),
    "a status that is an object": report_text([{**LINK_FAIL, "status": {"a": 1}}, MTU_WARN]),
    "a subject that is a number": report_text([{**LINK_FAIL, "subject": 7}]),
    "a summary that is a list": report_text([{**LINK_FAIL, "summary": ["a", ["b"]]}]),
    "a finding that is no object": report_text([LINK_FAIL, 3, None]),
    "findings that are no list": report_text([]).replace('"findings": []', '"findings": {"a": 1}'),
    "no findings": json.dumps({k: v for k, v in make_report("n1").items() if k != "findings"}),
    "shadow findings": report_text([{**LINK_FAIL, "shadow": 1}, {**MTU_WARN, "shadow": []}, {**MTU_WARN, "shadow": [0]}]),
    "text after the report": report_text([LINK_FAIL]) + ' {"a": 1}',
    "a report that is a list": json.dumps([make_report("n1")]),
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_reports_decode_alike_on_both_paths(text: str) -> None:
    same_on_both_paths(text)


def test_what_json_refuses_stays_refused() -> None:
    for name in ("a 5,000-digit integer in an evidence", "... in a metric's evidence", "... in a long evidence",
                 "... in a key no report has", "... in a finding's key no report has", "... in started_at"):
        assert same_on_both_paths(HOSTILE[name])[0] == "BadJson", name
    assert same_on_both_paths(HOSTILE["NaN in an evidence"]) == ("BadJson", "non-finite number NaN")
    # Plain ones go the typed way; odd ones the other.
    assert same_on_both_paths(HOSTILE["duplicate keys in a finding"])[3] is True
    assert same_on_both_paths(HOSTILE["a check id that is a list"])[3] is False


def nested(depth: int, where: str) -> str:
    deep = "[" * depth + "]" * depth
    if where == "evidence":
        return report_text([{**MTU_WARN, "evidence": {"x": 1}}]).replace('{"x": 1}', deep)
    if where == "a metric's evidence":     # decoded, where the others' is not
        return report_text([counters(1), {**counters(2), "evidence": {"x": 1}}]).replace('{"x": 1}', deep)
    return report_text([MTU_WARN], probe={"x": 1}).replace('{"x": 1}', deep)


@pytest.mark.parametrize("where", ["evidence", "a metric's evidence", "probe"])
def test_nesting_is_taken_as_deep_on_both_paths(where: str) -> None:
    def deepest(fast: bool) -> int:
        low, high = 1, 5000
        while low < high:
            middle = (low + high + 1) // 2
            if outcome(nested(middle, where), fast)[0] == "summary":
                low = middle
            else:
                high = middle - 1
        return low

    depth = deepest(False)
    assert 500 < depth == deepest(True) < 5000
    for around in range(depth - 3, depth + 4):
        same_on_both_paths(nested(around, where))


VALUES = st.recursive(st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
                      | st.floats(allow_nan=False) | st.text(max_size=8),
                      lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
                      max_leaves=10)
FINDINGS = st.lists(st.fixed_dictionaries(
    {"check": st.sampled_from(["error-counters", "phy", "mtu", "link-speed"]) | VALUES,
     "status": st.sampled_from(["pass", "warn", "fail", "unknown", "skip", "bad"]) | VALUES},
    optional={"subject": VALUES, "summary": VALUES, "shadow": VALUES, "remedy": VALUES,
              "evidence": VALUES | st.fixed_dictionaries({"error_growth": VALUES, "pre_fec_ber": VALUES})}), max_size=8)


@settings(max_examples=200, deadline=None)
@given(FINDINGS, st.sampled_from(["pass", "warn", "fail", "unknown"]))
def test_random_findings_summarize_alike(findings: list[dict[str, Any]], grade: str) -> None:
    text = json.dumps({**make_report("n1", grade, findings), "checks": [{"check": "mtu", "status": "pass", "required": True}]})
    same_on_both_paths(text)


def test_report_files_read_from_bytes_as_from_text(tmp_path: Path) -> None:
    """A plain report file is decoded from its bytes (`bounded.plain_report`); any other goes the
    text way. A directory of both kinds gives the nodes that reading them all as text gives."""
    from netdoctor.fleet.collect import FleetCollector
    from netdoctor.fleet.render import render_json
    from netdoctor.fleet.report import build_fleet_report

    plain = json.dumps(make_report("n1", "fail", [LINK_FAIL, counters(2)]), indent=2).encode()
    files = {
        "n1.json": plain,
        "n2.json": b"\n  " + plain.replace(b'"n1"', b'"n2"') + b"\n",
        "n3.json": b"\xef\xbb\xbf" + plain.replace(b'"n1"', b'"n3"'),                      # a byte order mark
        "n4.json": plain.replace(b'"n1"', b'"n4"').replace(b'"summary": ""', b'"summary": "\xff\xfe"'),  # not UTF-8
        "n5.json": plain.replace(b'"n1"', b'"n5"') + b' {"a": 1}',                        # a second value
        "n6.json": plain.replace(b'"n1"', b'"n6"').replace(b'"error_growth": 2', b'"error_growth": ' + BIG.encode()),
        "n7.json": plain.replace(b'"n1"', b'"n7"').replace(b'"duration_s": 0.4', b'"duration_s": 1e400'),
        "n8.json": b"{}",
        "n9.json": b"\x0c" + plain.replace(b'"n1"', b'"n9"'),                             # a form feed before
        "n10.json": plain.replace(b'"n1"', b'"n10"').replace(b'"rules"', b'"extra": 1, "rules"'),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    rendered, typed = [], []
    for fast in (True, False):
        bounded.use_fast_decoder(fast)
        try:
            typed.append([name for name, data in files.items() if bounded.plain_report(data) is not None])
            collector = FleetCollector()
            collector.add_path(tmp_path)
            rendered.append(render_json(build_fleet_report(collector.finish(), generated_at="2026-11-26T00:00:00Z")))
        finally:
            bounded.use_fast_decoder(True)
    assert rendered[0] == rendered[1]
    assert typed == [["n1.json", "n2.json", "n8.json"], []]
    grades = {node["host"]: node["grade"] for node in json.loads(rendered[0])["nodes"]}
    assert grades["n1"] == "fail" and grades["n5"] == "invalid" and grades["n6"] == "invalid" and grades["n4"] == "fail"


def test_a_lower_integer_limit_lowers_what_is_taken_unread() -> None:
    """`sys.set_int_max_str_digits(640)`: json refuses a 700-digit integer; so does the typed way."""
    import sys

    text = report_text([{**MTU_WARN, "evidence": {"mtu": 1}}]).replace('"mtu": 1', '"mtu": ' + "7" * 700)
    assert same_on_both_paths(text)[3] is True
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        assert same_on_both_paths(text)[0] == "BadJson"
    finally:
        sys.set_int_max_str_digits(limit)


def test_a_replaced_value_is_not_digit_checked_on_the_typed_way() -> None:
    """The one difference left on purpose (netdoctor.fleet.typed): a key given twice keeps its last
    value on both ways, but a 5,000-digit integer in the value it replaces is refused by json alone.
    The typed way then summarises the node by its last values, as json does the same report
    without the integer."""
    finding = json.dumps({**MTU_WARN, "evidence": {"mtu": 1}})
    doubled = finding.replace('"evidence":', '"evidence": ' + BIG + ', "evidence":', 1)
    text = report_text([]).replace('"findings": []', '"findings": [' + doubled + "]")
    assert outcome(text, False)[0] == "BadJson"
    typed = outcome(text, True)
    assert typed[0] == "summary" and typed[3] is True
    assert typed[1] == outcome(report_text([json.loads(finding)]), False)[1]


def test_a_junk_findings_list_goes_the_plain_way() -> None:
    """Thousands of empty findings (a hostile node under its size budget): no Struct and no dict
    each on the typed way; decoded as json decodes them, summarised alike."""
    text = report_text([{}] * 5000 + [MTU_WARN])
    fast = same_on_both_paths(text)
    assert fast[3] is False
    typed = decode_report(report_text([{"status": None}] * 100 + [MTU_WARN]))[0]
    passed, rest, measured = typed.summary_split(typed["findings"], frozenset({"warn"}))
    assert [finding["check"] for finding in rest] == [MTU_WARN["check"]]


def test_a_directory_named_dot_names_its_files_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fleet report .`: a file's source is `bad.json`, not `./bad.json` (a Path joined it so)."""
    from netdoctor.fleet.collect import FleetCollector

    (tmp_path / "bad.json").write_text("not json\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    collector = FleetCollector()
    collector.add_path(Path("."))
    [node] = collector.finish()
    assert node.source == "bad.json" and node.grade == "invalid"
