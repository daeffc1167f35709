"""A chunk's node summaries as msgpack or JSON and back, exactly: what a forked child (`fleet.ahead`)
sends its parent.

Never pickle: what is read back is data and nothing else (tests/test_security.py). Every field
is a string, number, bool, None, list or string-keyed map once the tuples, the grades and the top
findings are spelled out; those are made again on the way back, so the summary read back equals
the one sent (tests/test_fleet_ahead.py). What nodes alike have alike (their checks' statuses,
rails and versions: a few distinct values per chunk) is sent once per chunk and named by number:
read back, those nodes share one object (never changed: `NodeSummary` is read-only), and reading a
node costs ~1.5 us instead of ~19 (5,000 summaries, 921 -> 166 bytes each).
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


Entry = tuple[int, str, int, NodeSummary]     # (position, first line, end, summary): `fleet.ahead`'s blocks


def encode_chunk(texts: list[str] | None, entries: list[Entry]) -> bytes:
    """A chunk's text around its blocks (or None) and the blocks' entries, as msgpack or JSON (the
    first byte says which)."""
    shared = _Shared()
    nodes = [[position, line, end, _wire(summary, shared)] for position, line, end, summary in entries]
    wire = [texts, shared.values, nodes]
    if _pack is not None:
        try:
            return _MSGPACK + _pack(wire)
        except Exception:              # noqa: BLE001, S110  (what msgpack cannot hold goes as JSON)
            pass
    return _JSON + _ENCODER.encode(wire).encode("ascii")


def decode_chunk(data: bytes | memoryview) -> tuple[list[str] | None, list[Entry]]:
    """`encode_chunk`'s texts and entries."""
    data = memoryview(data)
    texts, values, entries = _unpack(data[1:]) if data[:1] == _MSGPACK else json.loads(bytes(data[1:]))
    shared = [tuple(map(tuple, value)) if kind == _RAILS else value for kind, value in values]
    for index, (position, line, end, wire) in enumerate(entries):
        # (Each entry's lists replaced as its summary is made: at the per-node limits 258 -> 239-244 MiB at peak.)
        entries[index] = (position, line, end, _summary(wire, shared))
    return texts, entries


_CHECKS, _RAILS, _VERSIONS = "c", "r", "v"


class _Shared:
    """The values sent once per chunk, each as [kind, value], and their numbers by value."""

    def __init__(self) -> None:
        self.values: list[list[Any]] = []
        self._numbers: dict[tuple[str, Any], int] = {}

    def number(self, kind: str, value: Any, key: Any) -> int:
        """`value`'s number (`key`: it, hashable; one type per field, so equal keys are equal values)."""
        number = self._numbers.get((kind, key))
        if number is None:
            number = self._numbers[kind, key] = len(self.values)
            self.values.append([kind, value])
        return number


def _wire(node: NodeSummary, shared: _Shared) -> list[Any]:
    versions = node.versions
    return [node.host, str(node.grade), _top(node.top),
            shared.number(_CHECKS, node.check_statuses, tuple(node.check_statuses.items())),
            node.check_summaries, node.metrics, node.source, node.reported_host, node.other_findings, node.gpus,
            shared.number(_RAILS, node.rails, node.rails), node.rails_guessed, node.platform, node.nvlink_domain,
            node.probe,
            shared.number(_VERSIONS, versions, tuple((kind, tuple(value.items()) if value.__class__ is dict else value)
                                                     for kind, value in versions.items())),
            node.findings, [[source, str(grade), _top(top)] for source, grade, top in node.reports]]


def _summary(wire: list[Any], shared: list[Any]) -> NodeSummary:
    """The summary `_wire` spelled out. Its maps are the decoded ones, names not interned again:
    making them anew left the parent ~15 MiB above reading whole at the per-node limits (the
    decoded copies freed among the summaries kept), for ~13 MiB saved on 10,000 honest nodes."""
    (host, grade, top, check_statuses, check_summaries, metrics, source, reported_host, other_findings, gpus, rails,
     rails_guessed, platform, nvlink_domain, probe, versions, findings, reports) = wire
    return NodeSummary(
        host=host, grade=NodeGrade(grade), top=_top_back(top), check_statuses=shared[check_statuses],
        check_summaries=check_summaries, metrics=metrics, source=source, reported_host=reported_host,
        other_findings=other_findings, gpus=gpus, rails=shared[rails], rails_guessed=rails_guessed,
        platform=tuple(platform) if platform is not None else None,
        nvlink_domain=tuple(nvlink_domain) if nvlink_domain is not None else None,
        probe=probe, versions=shared[versions], findings=tuple(map(tuple, findings)),
        reports=tuple((source, NodeGrade(grade), _top_back(top)) for source, grade, top in reports))


def _top(top: TopFinding | None) -> list[str | None] | None:
    return None if top is None else [top.summary, top.check, top.subject]


def _top_back(top: list[str | None] | None) -> TopFinding | None:
    return None if top is None else TopFinding(summary=top[0], check=top[1], subject=top[2])   # type: ignore[arg-type]
