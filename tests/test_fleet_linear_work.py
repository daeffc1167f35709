"""What a node's lines cost the fleet reader grows with their size, not with its square.

Two patterns cost hours at the per-node limit (16 MiB) before: `}` lines at column 0 that
close only inner objects (each made the reader decode the whole report so far), and hosts
whose lines alternate in a saved sweep (each line made a look to the end of the chunk for a
block's close). The work is counted here, not timed: decodes tried and characters searched.
Whatever the reader now skips, each node's verdict is the one the line path gives.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from netdoctor.fleet import collect
from netdoctor.fleet.blocks import SCANS_PER_CHAR
from netdoctor.fleet.bounded import FREE_CLOSE_TRIES
from netdoctor.fleet.collect import FleetCollector
from test_fleet_collect import MTU_WARN, make_report, prefixed


def verdicts(collector: FleetCollector) -> dict[str, tuple[str, str]]:
    return {node.host: (str(node.grade), node.top.summary if node.top else "") for node in collector.finish()}


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the collector tried to decode a report's lines (the length of each try)."""
    tried: list[int] = []
    decode = collect.decode_report

    def counted(text: str, position: int = 0) -> tuple[object, str]:
        tried.append(len(text))
        return decode(text, position)

    monkeypatch.setattr(collect, "decode_report", counted)
    return tried


def inner_closes(host: str, pairs: int, tail: str) -> list[str]:
    """A report whose `}` lines at column 0 close inner objects, `pairs` of them, then `tail`."""
    body = "".join(f'{host}: "k{number}": {{\n{host}: }}\n{host}: ,\n' for number in range(pairs))
    return [f"{host}: {{\n", *body.splitlines(keepends=True), f"{host}: {tail}\n"]


@pytest.mark.parametrize("feed", ["feed_lines", "feed_text"])
@pytest.mark.parametrize("tail", ['"schema": "netdoctor.report/1", "grade": "warn", "findings": []}', '"k": }'])
def test_close_lines_of_inner_objects_are_not_each_a_decode_of_the_whole(decodes: list[int], feed: str, tail: str) -> None:
    healthy = prefixed("n2", json.dumps(make_report("n2", "warn", [MTU_WARN]), indent=2))
    lines = inner_closes("n1", 3000, tail) + healthy
    collector = FleetCollector()
    getattr(collector, feed)(lines if feed == "feed_lines" else ["".join(lines)])
    said = verdicts(collector)
    # 3,000 inner `}` lines: a try at each of the first few, then one where the brackets close.
    assert len(decodes) <= FREE_CLOSE_TRIES + 4
    assert said["n2"][0] == "warn"
    if tail.startswith('"schema"'):
        assert said["n1"] == ("warn", "")                  # the whole report, read as one
    else:
        assert said["n1"][0] == "invalid" and "garbled" in said["n1"][1]


def test_a_report_broken_before_its_end_is_not_decoded_again_at_each_close_line(decodes: list[int]) -> None:
    lines = ['n1: {"a": "x",\n'] + ['n1: "b": 1,\n', "n1: }\n"] * 5000
    collector = FleetCollector()
    collector.feed_lines(lines)
    said = verdicts(collector)
    assert said["n1"][0] == "invalid" and "Expecting property name" in said["n1"][1]
    assert len(decodes) <= 3                               # the first `}` line, and once at the end


@pytest.mark.parametrize("lines", [
    # nested objects closed at column 0 (`}` then `}`): brackets that close only at the very end
    ["n1: {\n"] + ['n1: "a": {\n'] * 50 + ["n1: }\n"] * 50 + ['n1: , "schema": "netdoctor.report/1", "grade": "pass", "findings": []\n', "n1: }\n"],
    # a `{` or `}` inside strings, and an escaped quote before it, are no brackets
    ["n1: {\n"] + ['n1: "x\\" {": {\n', "n1: }\n", 'n1: , "y": "}}}",\n'] * 20
    + ['n1: "schema": "netdoctor.report/1", "grade": "fail", "findings": []\n', "n1: }\n"],
    # the first value ends inside a line (`} {`): what follows is text after the report
    ["n1: {\n"] + ['n1: "a": {\n', "n1: }\n", "n1: ,\n"] * 20 + ['n1: "schema": "netdoctor.report/1", "grade": "pass"} {\n', "n1: }\n"],
])
def test_skipping_tries_never_changes_a_verdict(lines: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bounded_tries = FleetCollector()
    bounded_tries.feed_lines(lines)
    monkeypatch.setattr("netdoctor.fleet.bounded.FREE_CLOSE_TRIES", 10**9)   # a try at every `}` line, as before
    every_try = FleetCollector()
    every_try.feed_lines(lines)
    assert verdicts(bounded_tries) == verdicts(every_try)


class SearchedText(str):
    """A chunk that counts the characters its `find` calls look at."""

    searched = 0

    def find(self, sub: str, start: Any = None, end: Any = None) -> int:   # type: ignore[override]
        begin = 0 if start is None else start
        stop = len(self) if end is None else min(end, len(self))
        found = super().find(sub, begin, stop)
        SearchedText.searched += (found if found >= 0 else stop) - begin
        return found


def test_hosts_whose_lines_alternate_cost_a_bounded_search_per_chunk() -> None:
    lines = [f"n{number % 2}: {{\n" for number in range(6000)]
    chunk = SearchedText("".join(lines))
    SearchedText.searched = 0
    blocks = FleetCollector()
    blocks.feed_text([chunk])
    # Each line was a look to the end of the chunk for a block's close: ~900 times the chunk.
    # (The line path's own search for each line's end is one look at the chunk.)
    assert SearchedText.searched <= (SCANS_PER_CHAR + 2) * len(chunk)
    by_line = FleetCollector()
    by_line.feed_lines(lines)
    assert verdicts(blocks) == verdicts(by_line)
    assert {grade for grade, _ in verdicts(blocks).values()} == {"invalid"}
