"""The fleet JSON's node lines come from one C encoder made once (netdoctor.fleet.render): the
same text as `json.dumps` gives each value, and `json.dumps` itself where there is no C encoder."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import netdoctor.fleet.render as render
from netdoctor.fleet.report import build_fleet_report
from test_fleet_trust_rails import honest, summaries

SCALARS = (st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(st.characters(blacklist_categories=()), max_size=20) | st.sampled_from(["\ud800", "é", "\x00", "\u2028"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                      max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_a_line_is_what_json_dumps_gives(value: Any) -> None:
    assert render._json_line(value) == json.dumps(value)


def test_non_finite_floats_and_a_failed_value_leave_the_encoder_as_it_was() -> None:
    assert render._json_line([math.nan, -math.inf, 1e16, 0.1]) == "[NaN, -Infinity, 1e+16, 0.1]"
    with pytest.raises(TypeError):
        render._json_line({"a": [object()]})
    assert render._json_line({"a": [1, {"b": None}]}) == json.dumps({"a": [1, {"b": None}]})


def test_the_fleet_json_is_byte_for_byte_what_json_dumps_made(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = summaries([honest(f"n{index}", index // 4, wired={3: 2} if index == 5 else None) for index in range(12)])
    report = build_fleet_report(nodes, generated_at="2026-11-26T00:00:00Z")
    ours = render.render_json(report)
    monkeypatch.setattr(render, "_json_line", json.dumps)
    assert ours == render.render_json(report)
    assert json.loads(ours)["rails"] and json.loads(ours)["nodes"]


def test_without_a_c_encoder_the_lines_are_json_dumps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    assert render._line_encoder() is json.dumps
