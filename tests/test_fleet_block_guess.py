"""Whole blocks of a saved sweep (`FleetCollector.feed_text`) against the line path (`feed_lines`).

A host's block of pretty-printed lines is taken whole where it ends in its own `host: }` line;
that line is looked for first around where the last block ended (`fleet.blocks`), so a close
found there may not be the first one. Whatever the block holds (two reports of one sender, an
indent=0 report whose inner `}` lines stand alone, braces and `host: }` inside strings, another
host's line in the middle, a report cut short), the verdicts are the line path's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from netdoctor.fleet.blocks import GUESS_SLACK
from netdoctor.fleet.collect import FleetCollector
from test_fleet_collect import LINK_FAIL, MTU_WARN, make_report, prefixed


def padded(host: str, grade: str = "pass", chars: int = 0, findings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A report of about `chars` characters more, in a finding's summary (braces and a close line in it)."""
    report = make_report(host, grade, findings)
    report["findings"].append({"check": "mtu", "status": "pass", "subject": "mlx5_1:1",
                               "summary": ("{ } ] n2: }\\n " * (chars // 13 + 1))[:chars], "evidence": {}})
    return report


def verdicts(lines: list[str]) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    """Each host's (grade, top summary) through whole blocks, and through the line path."""
    def said(collector: FleetCollector) -> dict[str, tuple[str, str]]:
        return {node.host: (str(node.grade), node.top.summary if node.top else "") for node in collector.finish()}

    blocks, by_line = FleetCollector(), FleetCollector()
    blocks.feed_text(["".join(lines)])
    by_line.feed_lines(lines)
    return said(blocks), said(by_line)


def pretty(host: str, report: dict[str, Any], indent: int = 2) -> list[str]:
    return prefixed(host, json.dumps(report, indent=indent))


def test_a_later_close_of_the_same_sender_is_never_taken_for_the_first() -> None:
    # n1's block sets where n2's close is looked for first: past n2's first (short) report, at
    # the close of its second. The two together fail to decode whole; the line path says why.
    first = pretty("n1", padded("n1", chars=20_000))
    n2_short = pretty("n2", padded("n2", "fail", 100, [LINK_FAIL]))
    size = sum(map(len, first)) - sum(map(len, n2_short))
    n2_second = pretty("n2", padded("n2", chars=size - 600))
    lines = first + n2_short + n2_second
    # (the case holds what it claims: n2's second close is where n1's block ended, its first is not)
    start = sum(map(len, first))
    second_close = start + sum(map(len, n2_short)) + sum(map(len, n2_second)) - len("n2: }\n")
    assert abs(second_close - (start + sum(map(len, first)))) < GUESS_SLACK
    assert sum(map(len, n2_short)) < sum(map(len, first)) - GUESS_SLACK
    blocks, by_line = verdicts(lines)
    assert blocks == by_line
    assert blocks["n1"][0] == "pass"
    assert blocks["n2"][0] == "invalid" and "more than one report" in blocks["n2"][1]
    assert "fail" in blocks["n2"][1]            # the first report's verdict is kept beside


def test_an_indent_0_report_whose_inner_close_stands_alone_is_one_report() -> None:
    report = padded("n2", "warn", 3000, [MTU_WARN])
    report["probe"] = {"busbw_gbps": 450.0, "rails": {"mlx5_0": 1.0}}     # the last member: its `}` alone on a line
    lines = pretty("n1", padded("n1", chars=3000)) + pretty("n2", report, indent=0)
    assert "n2: }\n" in lines[:-1]                 # an inner close line before the last
    blocks, by_line = verdicts(lines)
    assert blocks == by_line and blocks["n2"][0] == "warn"


@pytest.mark.parametrize("where", [0.1, 0.5, 0.97])
def test_another_hosts_line_in_the_middle_is_that_hosts(where: float) -> None:
    n2 = pretty("n2", padded("n2", "fail", 8000, [LINK_FAIL]))
    cut = int(len(n2) * where)
    lines = pretty("n1", padded("n1", chars=8000)) + n2[:cut] + ["n3: {\"schema\": 1}\n"] + n2[cut:]
    blocks, by_line = verdicts(lines)
    assert blocks == by_line
    assert blocks["n2"][0] == "fail" and blocks["n3"][0] == "invalid"


def test_a_report_cut_short_ends_with_its_host_invalid() -> None:
    n2 = pretty("n2", padded("n2", chars=8000))
    lines = pretty("n1", padded("n1", chars=8000)) + n2[:len(n2) // 2] + pretty("n3", padded("n3", "fail", 8000, [LINK_FAIL]))
    blocks, by_line = verdicts(lines)
    assert blocks == by_line
    assert blocks["n2"][0] == "invalid" and blocks["n3"][0] == "fail" and blocks["n1"][0] == "pass"
