"""The fleet's JSON decoder: msgspec where installed, the standard library's json always behind it.

Whatever a node sends, both paths give the same value, or the same error with the same message
(netdoctor.fleet.bounded): msgspec's successes are taken, everything it refuses goes to json.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netdoctor.fleet import bounded
from netdoctor.fleet.bounded import decode_first, decode_whole
from netdoctor.fleet.collect import FleetCollector
from netdoctor.fleet.render import render_json
from netdoctor.fleet.report import build_fleet_report
from test_fleet_collect import LINK_FAIL, make_report, prefixed

msgspec = pytest.importorskip("msgspec", reason="the fast path needs msgspec (pip install 'netdoctor[fast]')")


def outcome(text: str, fast: bool, whole: bool = False) -> tuple[str, str, str]:
    """(value or error class, repr of the value or the error's message, the rest) of one decode."""
    bounded.use_fast_decoder(fast)
    try:
        if whole:
            return "value", repr(decode_whole(text)), ""
        data, rest = decode_first(text)
    except (ValueError, RecursionError) as error:
        return type(error).__name__, str(error), ""
    finally:
        bounded.use_fast_decoder(True)
    return "value", repr(data), rest.strip()


def same_on_both_paths(text: str) -> tuple[str, str, str]:
    fast, plain = outcome(text, True), outcome(text, False)
    assert fast == plain, text[:200]
    assert outcome(text, True, whole=True) == outcome(text, False, whole=True)
    return plain


HOSTILE = {
    "NaN": '{"a": NaN}',
    "Infinity": '{"a": Infinity}',
    "-Infinity": '[-Infinity]',
    "a float beyond a double": '[1e400, -1e400]',
    "an exponent beyond any": '[1e99999999999999999999]',
    "a float below the smallest": '[1e-400]',
    "an int beyond 64 bits": '[123456789012345678901, -9223372036854775809, 18446744073709551616]',
    "an int of 5,000 digits": "[" + "9" * 5000 + "]",
    "duplicate keys": '{"a": 1, "b": 2, "a": {"c": 3}}',
    "a lone surrogate escape": '["\\ud800", "\\udfff x"]',
    "a surrogate pair escape": '["\\ud83d\\ude00"]',
    "a raw lone surrogate": '["\ud800"]',
    "a control character": '["a\x01b"]',
    "a tab in a string": '["a\tb"]',
    "the replacement character (invalid UTF-8 read with errors=replace)": b'["\xff\xfe"]'.decode("utf-8", "replace"),
    "a byte order mark": '\ufeff{"a": 1}',
    "a form feed before": '\f{"a": 1}',
    "text after": '{"a": 1} n2: {"b": 2}',
    "a second value": '{"a": 1}\n{"b": 2}',
    "truncated": '{"a": [1, 2',
    "empty": "",
    "blanks": " \n\t ",
    "leading zero": "[01]",
    "trailing comma": "[1,]",
    "single quotes": "['a']",
    "a key that is no string": "{1: 2}",
    "nested 500 deep": "[" * 500 + "]" * 500,
    "nested 1,000 deep": "[" * 1000 + "]" * 1000,
    "nested 100,000 deep": "[" * 100_000 + "]" * 100_000,
    "objects nested 1,000 deep": '{"a": ' * 1000 + "1" + "}" * 1000,
    "escapes": '["\\/\\b\\f\\n\\r\\t\\"\\\\", "\\u00e9\\u20ac"]',
    "numbers": "[0, -0, -0.0, 1.0, 1E2, 1e+2, 10E-1, 0.1, 5e-324, 1.7976931348623157e308, 2.2250738585072014e-308]",
    "a report": json.dumps(make_report("n1", "fail", [LINK_FAIL])),
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_json_decodes_alike_on_both_paths(text: str) -> None:
    same_on_both_paths(text)


def test_what_json_refuses_is_refused_as_before() -> None:
    assert same_on_both_paths(HOSTILE["NaN"])[:2] == ("BadJson", "non-finite number NaN")
    assert same_on_both_paths(HOSTILE["nested 100,000 deep"])[:2] == ("BadJson", "JSON nested deeper than the fleet reader takes")
    assert same_on_both_paths(HOSTILE["an int of 5,000 digits"])[0] == "BadJson"
    # msgspec refuses these; json takes them (the fleet then judges the value).
    assert same_on_both_paths(HOSTILE["a float beyond a double"])[:2] == ("value", "[inf, -inf]")
    assert same_on_both_paths(HOSTILE["a lone surrogate escape"])[:2] == ("value", "['\\ud800', '\\udfff x']")
    assert same_on_both_paths(HOSTILE["duplicate keys"])[:2] == ("value", "{'a': {'c': 3}, 'b': 2}")
    assert same_on_both_paths(HOSTILE["an int beyond 64 bits"])[1] == "[123456789012345678901, -9223372036854775809, 18446744073709551616]"


def nested(depth: int) -> str:
    return '{"a": ' + "[" * depth + "]" * depth + "}"


def deepest(fast: bool) -> int:
    """The deepest nesting taken (the interpreter's recursion limit, less the frames in use)."""
    low, high = 1, 5000
    while low < high:
        middle = (low + high + 1) // 2
        if outcome(nested(middle), fast)[0] == "value":
            low = middle
        else:
            high = middle - 1
    return low


def test_msgspec_gives_up_on_nesting_before_json_does() -> None:
    """Both count nesting against the interpreter's recursion limit; msgspec is called a few
    frames deeper, so json decides wherever the two would disagree."""
    assert 500 < deepest(True) == deepest(False) < 5000
    depth = deepest(False)
    for around in range(depth - 5, depth + 6):
        assert outcome(nested(around), True) == outcome(nested(around), False)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30)


def mutations(text: str, cut: int, insert: str) -> Iterator[str]:
    """The text, cut short, with a character put in, and with a NaN or a big exponent for a number."""
    yield text
    yield text[:cut % (len(text) + 1)]
    position = cut % (len(text) + 1)
    yield text[:position] + insert + text[position:]
    yield text.replace("1", "1e999", 1).replace("2", "NaN", 1)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.integers(min_value=0), st.sampled_from(['"', ",", "]", "}", "{", "\\", "\x00", "\ud800", "é", " ", "1", "e"]))
def test_random_and_broken_json_decodes_alike_on_both_paths(value: Any, cut: int, insert: str) -> None:
    for text in mutations(json.dumps(value, ensure_ascii=bool(cut % 2)), cut, insert):
        same_on_both_paths(text)


def test_a_fleet_reads_alike_on_both_paths() -> None:
    lines = (prefixed("n1", json.dumps(make_report("n1", "fail", [LINK_FAIL]), indent=2))
             + prefixed("n2", json.dumps(make_report("n2")) + " trailing")
             + prefixed("n3", json.dumps(make_report("n3")).replace('"findings"', '"x": 1e400, "findings"'))
             + prefixed("n4", '{"schema": "netdoctor.report/1", "grade": NaN}')
             + prefixed("n5", nested(100_000))
             + prefixed("n6", json.dumps(make_report("n6")).replace('"n6"', '"n\\ud800"')))
    rendered = []
    for fast in (True, False):
        bounded.use_fast_decoder(fast)
        try:
            collector = FleetCollector()
            collector.feed_lines(lines)
            rendered.append(render_json(build_fleet_report(collector.finish(), generated_at="2026-11-26T00:00:00Z")))
        finally:
            bounded.use_fast_decoder(True)
    assert rendered[0] == rendered[1]
    grades = {node["host"]: node["grade"] for node in json.loads(rendered[0])["nodes"]}
    assert grades == {"n1": "fail", "n2": "invalid", "n3": "pass", "n4": "invalid", "n5": "invalid", "n6": "pass"}
