"""The fleet report's memory, bounded as a whole: what the nodes cost together, and which are dropped.

What the fleet keeps of one node is bounded (netdoctor.fleet.model, .kept); ten thousand
nodes each at those bounds are not (1.2-1.4 GB before this budget). So each node is charged
what it keeps and what it adds to the report as it is written (a node's JSON is built as
objects, then text, then joined: ~4 times its text), and the rows it needs in the fleet's
tables: a column and a tally per check id, a leaf per rail, a drift entry per version. A row
is charged once however many nodes share it, so the total is what the nodes kept cost
together (within the margins measured in tests/test_fleet_report_budget.py).

While that total is over the budget, the heaviest node (its `weight`: the charge of a node
as if it shared no row; among equal weights the host name sorting first) is dropped, one at a
time: each becomes `invalid`, `too large`, with the verdict it gave itself kept beside, and any
later node before the last one dropped in that order is dropped as it arrives. Adding a node
never lowers the total, so whatever order the nodes arrive in, the same nodes are kept, only
as many go as must (a fleet of identical honest nodes over the budget loses its last few by
name, not all of them), and a node is only dropped while heavier ones are gone and the rest
still do not fit. An honest 8-GPU node weighs ~38 KiB and costs
~8 KiB (it shares its rows): 20,000 of them fit the default budget before any is dropped, and
`NETDOCTOR_FLEET_BUDGET_MIB` raises it for a larger fleet.
"""

from __future__ import annotations

import heapq
import os
import struct
import sys
from dataclasses import replace
from typing import Any

from netdoctor.fleet.model import NodeSummary, TopFinding
from netdoctor.fleet.saved import refusal

# Engineering default (benchmarks/results/fleet.md): with it, `fleet report` of 10,000 nodes at
# every per-node bound peaks under 300 MB. A larger fleet of honest nodes may raise it.
BUDGET_ENV = "NETDOCTOR_FLEET_BUDGET_MIB"
DEFAULT_BUDGET_MIB = 160

# Costs in bytes (CPython 3.11; tracemalloc's peak over summarizing, building and rendering
# ten thousand nodes of each shape, held below the charge by tests/test_fleet_report_budget.py).
# Kept objects are charged their size (`sys.getsizeof`); the JSON written of a node is charged
# `_WRITTEN` bytes per character (its line, the joined text and the text with its last newline
# live at once), a character that is not ASCII as the 12 that `\ud83d\ude00` takes; `_OBJECT`
# is a dict of the node's JSON (a finding's, its top's), `_NODE` the node's own and its fixed keys.
_WRITTEN = 3.5
_OBJECT = 240
_NODE = 1200
# Rows of the fleet's tables, each shared by the nodes that need it: a check's column, a check's
# tally (where some node does not pass it), a leaf of the rail wiring, a drift entry.
_COLUMN_ROW = 160
_TALLY_ROW = 900
_LEAF_ROW = 1400
_DRIFT_ROW = 1600
# What a dropped node keeps of each top finding it gave (its check, subject and summary).
_CUT_CHARS = 120

Row = tuple[str, ...]
_size = sys.getsizeof
_EMPTY_LIST, _POINTER = sys.getsizeof([]), struct.calcsize("P")
_FLAGGED = frozenset(("fail", "unknown", "warn"))


def budget_bytes() -> int:
    """The budget: `NETDOCTOR_FLEET_BUDGET_MIB` where set (a positive number), else the default."""
    value = os.environ.get(BUDGET_ENV, "")
    try:
        mib = float(value) if value.isascii() else 0.0      # `float` refuses '²', which isdigit takes
    except ValueError:
        mib = 0.0
    mib = mib if 0 < mib < float("inf") else DEFAULT_BUDGET_MIB
    return int(mib * (1 << 20))


def _chars(text: str) -> int:
    """Characters of `text` in JSON (`str.isascii` is a flag: free)."""
    return len(text) if text.isascii() else 12 * len(text)


def node_cost(node: NodeSummary) -> tuple[int, tuple[Row, ...]]:
    """What keeping `node` costs of its own but its groups', and its groups (`group_cost`): its
    checks with their statuses, its rails, its versions. Nodes alike share a group (a healthy
    fleet has a few of each), so a group is worked out once, by the first node that has it.
    Called for every node: what a healthy node has not (findings, reports) costs nothing here."""
    host, top, alias = node.host, node.top, node.reported_host
    host_chars = len(host) if host.isascii() else 12 * len(host)
    written = 60 + host_chars + 30 * len(node.metrics)
    kept = _NODE + _size(host) + _size(node.source) + 2 * _size(node.metrics)
    if top is not None:
        kept += _kept_top(top)
        written += _written_top(top)
    if alias is not None:
        kept += _size(alias)
        written += _chars(alias) + 20
    groups: list[Row] = []
    statuses = node.check_statuses
    if statuses:
        kept += 2 * _size(statuses)                      # and its copy in the node's JSON
        groups.append(("checks", *statuses.items()))
    if node.rails:
        groups.append(("rails", *node.rails))
    versions = node.versions
    if versions:
        kept += _size(versions)
        groups.append(("versions", node.gpus, host_chars, *[(kind, tuple(value.items()) if value.__class__ is dict else value)
                                                            for kind, value in versions.items()]))
    summaries = node.check_summaries
    if summaries:
        kept += _size(summaries) + sum(map(_size, summaries.values()))
    for check, subject, _status, summary in node.findings:
        kept += 72 + _OBJECT + _size(summary) + (_size(subject) if subject is not None else 0)
        written += 60 + _chars(check) + _chars(subject or "") + _chars(summary)
    if node.probe:
        kept += _facts(node.probe)
    for source, _grade, top in node.reports:
        kept += 64 + _OBJECT + _kept_top(top)
        written += 40 + _chars(source) + _written_top(top)
    return kept + int(_WRITTEN * written), tuple(groups)


def group_cost(group: Row) -> tuple[int, int]:
    """A group's cost to each node that has it, and its rows' in the fleet's tables (once)."""
    kind = group[0]
    kept = written = rows = 0
    if kind == "checks":
        for check, status in group[1:]:
            written += _chars(check) + 12
            rows += _COLUMN_ROW + _size(check) + (_TALLY_ROW + int(_WRITTEN * _chars(check)) if status in _FLAGGED else 0)
    elif kind == "rails":
        for port, _rate, _gpu, guid, name in group[1:]:
            kept += 104 + _size(port)
            if guid is not None or name is not None:
                rows += _LEAF_ROW + _size(guid or "") + _size(name or "") + int(
                    _WRITTEN * (_chars(guid or "") + _chars(name or "") + _chars(port)))
    else:
        # Versions, of nodes with one host name length: each version is in the node's JSON, and
        # names the node's host where it is in a drift entry's minority.
        host_chars = group[2]
        shape = str(group[1]) + "".join(model for kind, value in group[3:] if kind == "vbios" and value.__class__ is tuple
                                        for model, _ in value)
        for _kind, value in group[3:]:
            pairs = value if value.__class__ is tuple else ((shape, value),)
            kept += 64 + (_size(dict(pairs)) if value.__class__ is tuple else 0)
            for among, version in pairs:
                written += 12 + _chars(among) + _chars(version) + host_chars
                rows += _DRIFT_ROW + _size(among) + _size(version) + int(_WRITTEN * (_chars(among) + _chars(version)))
    return kept + int(_WRITTEN * written), rows


def _kept_top(top: TopFinding | None) -> int:
    if top is None:
        return 0
    return 64 + _OBJECT + _size(top.summary) + (_size(top.check) if top.check else 0) + (_size(top.subject) if top.subject else 0)


def _written_top(top: TopFinding | None) -> int:
    if top is None:
        return 12
    return 50 + _chars(top.summary) + _chars(top.check or "") + _chars(top.subject or "")


def _facts(value: object) -> int:
    """A probe report's facts (`bounded_facts`): lists and maps of short strings and numbers. A list
    is charged as if exactly sized: `getsizeof` counts the room a list was given as it was built
    (a comprehension's, or msgpack's exact one read back from `fleet.ahead`'s child), and the
    charge must not depend on how the file was read."""
    if value.__class__ is dict:
        return _size(value) + sum(_facts(key) + _facts(item) for key, item in value.items())   # type: ignore[attr-defined]
    if value.__class__ is list:
        return _EMPTY_LIST + _POINTER * len(value) + sum(_facts(item) for item in value)   # type: ignore[arg-type]
    return _size(value)


class NodeBudget:
    """The cost of the nodes kept, against `budget` bytes (see the module docstring).

    `admit` is told of each entry kept for a host (`release` the one it replaces first) and
    returns the hosts dropped to make room, heaviest first, the new one among them where it is
    dropped itself; the caller replaces each with `too_large`'s entry.
    """

    def __init__(self, budget: int | None = None) -> None:
        self.budget = budget_bytes() if budget is None else budget
        self.total = 0
        # The last node dropped, as (-weight, host): a node at or before it in that order
        # (heavier; as heavy and a host name sorting first) is dropped. One total order, so
        # the same nodes go whatever order they arrive in, and only as many as must.
        self.cutoff: tuple[int, str] | None = None
        self.dropped = 0
        self._kept: dict[str, tuple[int, int, list[list[Any]]]] = {}   # host -> weight, own cost, group entries
        self._groups: dict[Row, list[Any]] = {}   # group -> [nodes kept with it, its rows' cost, per node, group]
        self._heaviest: list[tuple[int, str]] | None = None   # max-heap (negated weight) of the hosts kept

    def release(self, host: str) -> None:
        """`host`'s entry is no longer kept (replaced, or dropped)."""
        kept = self._kept.pop(host, None)
        if kept is None:
            return
        self.total -= kept[1]
        for entry in kept[2]:
            entry[0] -= 1
            self.total -= entry[2]
            if not entry[0]:
                del self._groups[entry[3]]
                self.total -= entry[1]

    def admit(self, node: NodeSummary) -> list[tuple[str, int]]:
        """Charge `node`; the hosts (and weights) to drop, heaviest first, so that the rest fit."""
        own, groups = node_cost(node)
        known = self._groups
        weight = own
        entries = []
        for group in groups:
            # The node keeps the group's entry, not its key: one shared object, not ~20 per node.
            entry = known.get(group)
            if entry is None:
                entry = known[group] = [0, *reversed(group_cost(group)), group]
                self.total += entry[1]
            entry[0] += 1
            weight += entry[1] + entry[2]
            self.total += entry[2]
            entries.append(entry)
        self._kept[node.host] = (weight, own, entries)
        self.total += own
        if self.cutoff is not None and (-weight, node.host) <= self.cutoff:
            self.release(node.host)
            self.dropped += 1
            return [(node.host, weight)]
        if self._heaviest is not None:
            heapq.heappush(self._heaviest, (-weight, node.host))
        dropped: list[tuple[str, int]] = []
        while self.total > self.budget:
            if self._heaviest is None:        # the first time over: until then no node needed ordering
                self._heaviest = [(-kept[0], host) for host, kept in self._kept.items()]
                heapq.heapify(self._heaviest)
            heaviest = self._heaviest
            while heaviest and self._weight_of(heaviest[0][1]) != -heaviest[0][0]:
                heapq.heappop(heaviest)            # released or re-weighed since
            if not heaviest:
                break
            self.cutoff = heapq.heappop(heaviest)
            weight, host = -self.cutoff[0], self.cutoff[1]
            self.release(host)
            dropped.append((host, weight))
        self.dropped += len(dropped)
        return dropped

    def _weight_of(self, host: str) -> int | None:
        kept = self._kept.get(host)
        return kept[0] if kept is not None else None


def too_large(node: NodeSummary, weight: int, budget: int) -> NodeSummary:
    """`node`'s entry once dropped: `invalid`, too large, with the verdict(s) it gave itself kept
    beside (`refusal`), each top finding cut short: an entry of about a kilobyte."""
    cut = replace(node, top=_cut(node.top), reports=tuple((source, grade, _cut(top)) for source, grade, top in node.reports))
    return refusal(cut, f"too large: what the fleet keeps of its report ({weight >> 10} KiB) is over its share of the "
                        f"report's memory ({budget >> 20} MiB for all nodes)")


def _cut(top: TopFinding | None) -> TopFinding | None:
    if top is None:
        return None
    return TopFinding(top.summary[:_CUT_CHARS], top.check[:_CUT_CHARS] if top.check else top.check,
                      top.subject[:_CUT_CHARS] if top.subject else top.subject)
