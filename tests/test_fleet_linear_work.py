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

from netdoctor.fleet import bounded, collect
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


def test_an_unterminated_string_is_read_once_not_once_per_quote() -> None:
    # After the free tries, a line of 30,000 `\"` and no closing quote: a string pattern that can
    # fail started again at each quote, to the line's end (13 s for 64 KB). This one matches at any
    # quote (to the line's end at worst), so each character is looked at once.
    line = '"x": "' + '\\"' * 30_000 + '\n"y": "a"}\n'
    for quote in range(len(line)):
        if line[quote] == '"' and (quote == 0 or line[quote - 1] != "\\"):
            assert bounded._STRING.match(line, quote) is not None
    collector = FleetCollector()
    collector.feed_lines(inner_closes("n1", FREE_CLOSE_TRIES, line.split("\n")[0]) + ["n1: }\n"])
    assert verdicts(collector)["n1"][0] == "invalid"


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
    monkeypatch.setattr(bounded.Run, "try_close", lambda run: True)   # a try at every `}` line, as before
    every_try = FleetCollector()
    every_try.feed_lines(lines)
    assert verdicts(bounded_tries) == verdicts(every_try)


def test_a_line_without_its_newline_may_go_on_in_the_next() -> None:
    # `feed_line` called with lines of which one has no "\n": it and the next are one line of
    # the text decoded, so a string may go on in it; the report is never taken for broken.
    lines = ["n1: {\n", 'n1: "schema": "netdoctor.report/1", "host": "n1", "grade": "pass", "findings": [], "x": "a',
             "n1: }", 'n1: b",\n', 'n1: "y": 1\n', "n1: }\n", "n1: done\n"]
    collector = FleetCollector()
    collector.feed_lines(lines)
    assert verdicts(collector)["n1"] == ("pass", "")


class SearchedText(str):
    """A chunk that counts the characters its `find` calls look at."""

    searched = 0

    def find(self, sub: str, start: Any = None, end: Any = None) -> int:   # type: ignore[override]
        begin = 0 if start is None else min(start, len(self))
        stop = len(self) if end is None else min(end, len(self))
        found = super().find(sub, begin, stop)
        SearchedText.searched += max(0, (found if found >= 0 else stop) - begin)
        return found


@pytest.mark.parametrize("before", ["", "large"])
def test_hosts_whose_lines_alternate_cost_a_bounded_search_per_chunk(before: str) -> None:
    # `large`: first a report taken whole whose length, where the next block's close is looked for
    # first, lies past the chunk's end (the look there once added to the budget instead).
    large = prefixed("n0", json.dumps(make_report("n0") | {"pad": "x" * 100_000}, indent=2)) if before else []
    lines = large + [f"n{1 + number % 2}: {{\n" for number in range(6000)]
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
    assert {host: grade for host, (grade, _) in verdicts(blocks).items()} == {"n1": "invalid", "n2": "invalid"} | (
        {"n0": "pass"} if before else {})


def test_a_block_taken_whole_counts_its_lines_as_the_line_path_does(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under the report limit in characters, over it with what each line costs beside its text:
    # `invalid` whether the block is taken whole (in one chunk) or line by line (across chunks).
    monkeypatch.setattr(collect, "MAX_REPORT_CHARS", 100_000)
    monkeypatch.setattr("netdoctor.fleet.blocks.MAX_REPORT_CHARS", 100_000)
    report = make_report("n1", findings=[]) | {"samples": [1234567] * 4000}   # no inner `}` line: one block
    lines = prefixed("n1", json.dumps(report, indent=0))
    assert sum(map(len, lines)) < 100_000 < sum(map(len, lines)) + 64 * len(lines)
    whole, by_line = FleetCollector(), FleetCollector()
    whole.feed_text(["".join(lines)])
    by_line.feed_lines(lines)
    assert verdicts(whole) == verdicts(by_line)
    assert verdicts(whole)["n1"][0] == "invalid"


@pytest.mark.parametrize("offset", [0, 1, 77, 150, 399])
def test_a_saved_line_over_the_limit_is_cut_at_the_limit_wherever_the_pieces_end(offset: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from netdoctor.fleet.bounded import bounded_lines, chunks
    monkeypatch.setattr(bounded, "CHUNK_CHARS", 400)
    text = "a: short\n" * (offset // 9) + "b: " + "x" * 5000 + "\nc: after\n"
    cut = [line for chunk in chunks(io.StringIO(text), limit=1000) for line in chunk.splitlines(keepends=True)]
    assert cut == list(bounded_lines(io.StringIO(text), limit=1000))
    assert [line for line in cut if line.startswith("b: ")] == ["b: " + "x" * 997 + "\n"]
