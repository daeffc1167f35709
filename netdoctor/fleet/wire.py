"""A node's summary as msgpack or JSON and back, exactly: what a forked child (`fleet.ahead`)
sends its parent.

Never pickle: what is read back is data and nothing else (tests/test_security.py). Every field
is a string, number, bool, None, list or string-keyed map once the tuples, the grades and the top
findings are spelled out; those are made again on the way back, so the summary read back equals
the one sent (tests/test_fleet_ahead.py).
"""

from __future__ import annotations

import json
from typing import Any

from netdoctor.fleet.model import NodeGrade, NodeSummary, TopFinding

# msgspec, where installed, writes and reads msgpack: exact for every value a summary holds
# (a float as its 8 bytes), 4x faster to write than `json` and as fast to read (0.02 s for 5,500
# summaries on the 2-core VM). What msgpack cannot hold (a lone surrogate, an integer past 64 bits,
# which a node's `probe` may give) goes as JSON.
try:
    from msgspec.msgpack import decode as _unpack
    from msgspec.msgpack import encode as _pack
except ImportError:
    _pack = _unpack = None   # type: ignore[assignment]
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)   # (what is sent holds no cycle)
_MSGPACK, _JSON = b"M", b"J"


def encode_summaries(entries: list[tuple[int, str, int, NodeSummary]]) -> bytes:
    """(position, first line, end, summary) entries, as msgpack or JSON (the first byte says which)."""
    wire = [[position, line, end, _wire(summary)] for position, line, end, summary in entries]
    if _pack is not None:
        try:
            return _MSGPACK + _pack(wire)
        except Exception:              # noqa: BLE001, S110  (what msgpack cannot hold goes as JSON)
            pass
    return _JSON + _ENCODER.encode(wire).encode("ascii")


def decode_summaries(data: bytes | memoryview) -> dict[int, tuple[str, int, NodeSummary]]:
    """`encode_summaries`'s entries by position."""
    data = memoryview(data)
    entries = _unpack(data[1:]) if data[:1] == _MSGPACK else json.loads(bytes(data[1:]))
    summaries: dict[int, tuple[str, int, NodeSummary]] = {}
    for index, (position, line, end, wire) in enumerate(entries):
        entries[index] = None          # (its lists gone as it is made: at the per-node limits 258 -> 239-244 MiB at peak)
        summaries[position] = (line, end, _summary(wire))
    return summaries


def _wire(node: NodeSummary) -> list[Any]:
    return [node.host, str(node.grade), _top(node.top), node.check_statuses, node.check_summaries, node.metrics,
            node.source, node.reported_host, node.other_findings, node.gpus, node.rails, node.rails_guessed,
            node.platform, node.nvlink_domain, node.probe, node.versions, node.findings,
            [[source, str(grade), _top(top)] for source, grade, top in node.reports]]


def _summary(wire: list[Any]) -> NodeSummary:
    """The summary `_wire` spelled out. Its maps are the decoded ones, names not interned again:
    making them anew left the parent ~15 MiB above reading whole at the per-node limits (the
    decoded copies freed among the summaries kept), for ~13 MiB saved on 10,000 honest nodes."""
    (host, grade, top, check_statuses, check_summaries, metrics, source, reported_host, other_findings, gpus, rails,
     rails_guessed, platform, nvlink_domain, probe, versions, findings, reports) = wire
    return NodeSummary(
        host=host, grade=NodeGrade(grade), top=_top_back(top), check_statuses=check_statuses,
        check_summaries=check_summaries, metrics=metrics, source=source, reported_host=reported_host,
        other_findings=other_findings, gpus=gpus, rails=tuple(map(tuple, rails)), rails_guessed=rails_guessed,
        platform=tuple(platform) if platform is not None else None,
        nvlink_domain=tuple(nvlink_domain) if nvlink_domain is not None else None,
        probe=probe, versions=versions, findings=tuple(map(tuple, findings)),
        reports=tuple((source, NodeGrade(grade), _top_back(top)) for source, grade, top in reports))


def _top(top: TopFinding | None) -> list[str | None] | None:
    return None if top is None else [top.summary, top.check, top.subject]


def _top_back(top: list[str | None] | None) -> TopFinding | None:
    return None if top is None else TopFinding(summary=top[0], check=top[1], subject=top[2])   # type: ignore[arg-type]
