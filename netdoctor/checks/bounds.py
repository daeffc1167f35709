"""What one check may put in the report: how many findings, and how much text in each.

The engine's safety net under every check, built-in or third-party. A check that yields more
than MAX_FINDINGS findings (one per port of a hostile snapshot's 100,000 ports, one per
device a kernel-log storm names) keeps MAX_FINDINGS - 1 of them, in the order it yielded them:
the first of each status (an `unknown` saying what could not be judged is not lost among a
thousand fails), then the worst. One more finding says how many were folded and with which
statuses; it takes the status that keeps the grade the whole list would have given. While the
check runs at most 2 x MAX_FINDINGS findings are held, so memory stays bounded however many
it yields. Each finding's subject, summary and remedy are cut to a bounded length (saying how
much was cut), and its evidence to a bounded number of items and characters.

These are engineering defaults, not thresholds (they judge nothing); a real node's checks stay
far inside them: the largest built-in check output is one finding per port or GPU, the longest
fixture summary 242 characters, the largest evidence 1.5 KB.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from itertools import islice
from typing import Any

from netdoctor.report.model import STATUS_SEVERITY, Finding, Status
from netdoctor.util import cut_text as cut

MAX_FINDINGS = 256
MAX_SUBJECT_CHARS = 200
MAX_TEXT_CHARS = 2_000              # summary and remedy
MAX_EVIDENCE_STRING = 1_000         # one string in the evidence
MAX_EVIDENCE_ITEMS = 64             # entries of one list or object in the evidence
MAX_EVIDENCE_DEPTH = 6
MAX_EVIDENCE_CHARS = 16 * 1024      # all strings and keys of one finding's evidence
MAX_EVIDENCE_NODES = 2_000          # values of one finding's evidence
FOLDED_SUBJECTS = 16                # subjects of folded findings named in the folding finding


class _Room:
    """What is left of one finding's evidence budget."""

    def __init__(self) -> None:
        self.nodes = MAX_EVIDENCE_NODES
        self.chars = MAX_EVIDENCE_CHARS

    @property
    def spent(self) -> bool:
        return self.nodes <= 0 or self.chars <= 0

    def text(self, value: str) -> str:
        kept = cut(value, max(0, min(MAX_EVIDENCE_STRING, self.chars)))
        self.chars -= len(kept)
        return kept


def _bounded(value: Any, room: _Room, depth: int) -> Any:
    room.nodes -= 1
    if isinstance(value, str):
        return room.text(value)
    if isinstance(value, Mapping):
        if depth >= MAX_EVIDENCE_DEPTH or room.spent:
            return f"({len(value):,} entries not kept)"
        result: dict[Any, Any] = {}
        for position, (key, item) in enumerate(islice(value.items(), MAX_EVIDENCE_ITEMS + 1)):
            if position == MAX_EVIDENCE_ITEMS or room.spent:
                result["..."] = f"{len(value) - position:,} more entries not kept"
                break
            result[room.text(key) if isinstance(key, str) else key] = _bounded(item, room, depth + 1)
        return result
    if isinstance(value, (list, tuple, set, frozenset)):
        if depth >= MAX_EVIDENCE_DEPTH or room.spent:
            return f"({len(value):,} items not kept)"
        items: list[Any] = []
        for position, item in enumerate(islice(value, MAX_EVIDENCE_ITEMS + 1)):
            if position == MAX_EVIDENCE_ITEMS or room.spent:
                items.append(f"{len(value) - position:,} more items not kept")
                break
            items.append(_bounded(item, room, depth + 1))
        return tuple(items) if isinstance(value, tuple) else items     # a tuple stays one (equal when uncut)
    return value          # numbers, booleans, None (and whatever a renderer already handles)


def bounded_evidence(evidence: Mapping[str, Any]) -> dict[str, Any]:
    bounded = _bounded(evidence, _Room(), 0)
    return bounded if isinstance(bounded, dict) else {"evidence": bounded}


def bounded_finding(finding: Finding) -> Finding:
    """The finding with its text and evidence within bounds (itself when already within them)."""
    subject, summary = cut(finding.subject, MAX_SUBJECT_CHARS), cut(finding.summary, MAX_TEXT_CHARS)
    remedy = cut(finding.remedy, MAX_TEXT_CHARS) if finding.remedy else finding.remedy
    evidence = bounded_evidence(finding.evidence) if finding.evidence else finding.evidence
    if (subject, summary, remedy) == (finding.subject, finding.summary, finding.remedy) and evidence == finding.evidence:
        return finding
    return replace(finding, subject=subject, summary=summary, remedy=remedy, evidence=evidence)


def _rank(entry: tuple[int, Finding]) -> tuple[bool, int, int]:
    """Worst first: graded before shadow, then by status severity, then in yield order."""
    index, finding = entry
    return finding.shadow, -STATUS_SEVERITY[finding.status], index


class FindingBuffer:
    """The findings of one check as it yields them, bounded in number and size."""

    def __init__(self, check_id: str, limit: int = MAX_FINDINGS,
                 shadowed: Callable[[Finding], bool] = lambda finding: False) -> None:
        self.check_id = check_id
        self.limit = max(2, limit)
        self.shadowed = shadowed
        self._kept: list[tuple[int, Finding]] = []
        self._count = 0
        self._folded: Counter[tuple[Status, bool]] = Counter()
        self._folded_subjects: list[str] = []

    def add(self, finding: Finding) -> None:
        if not finding.shadow and self.shadowed(finding):
            finding = replace(finding, shadow=True)
        self._kept.append((self._count, bounded_finding(finding)))
        self._count += 1
        if len(self._kept) >= 2 * self.limit:
            self._fold(self.limit)

    def _fold(self, keep: int) -> None:
        """Keep `keep` findings: the first of each status (an `unknown` saying what could not be
        judged is not lost among a thousand fails), then the worst; count the rest."""
        self._kept.sort(key=_rank)
        firsts: dict[tuple[bool, Status], int] = {}
        for position, (_, finding) in enumerate(self._kept):
            firsts.setdefault((finding.shadow, finding.status), position)
        chosen = set(firsts.values())
        for position in range(len(self._kept)):
            if len(chosen) >= keep:
                break
            chosen.add(position)
        kept: list[tuple[int, Finding]] = []
        for position, entry in enumerate(self._kept):
            if position in chosen:
                kept.append(entry)
                continue
            finding = entry[1]
            self._folded[finding.status, finding.shadow] += 1
            if len(self._folded_subjects) < FOLDED_SUBJECTS:
                self._folded_subjects.append(finding.subject)
        self._kept = kept

    def findings(self) -> list[Finding]:
        """The kept findings in yield order, and the folding finding last where any were folded."""
        if self._count > self.limit:
            self._fold(self.limit - 1)
        kept = [finding for _, finding in sorted(self._kept, key=lambda entry: entry[0])]
        return kept + [self._folding()] if self._folded else kept

    def _folding(self) -> Finding:
        folded = sum(self._folded.values())
        graded = {status for (status, shadow), count in self._folded.items() if not shadow}
        statuses = graded or {status for status, _ in self._folded}
        # The status the folded findings give the grade: any fail, else any warn (an unknown
        # counts only for a required check, whose kept findings are then unknown or worse).
        status = (Status.FAIL if Status.FAIL in statuses else Status.WARN if Status.WARN in statuses
                  else max(statuses, key=STATUS_SEVERITY.__getitem__))
        by_status: Counter[str] = Counter()
        for (each, _), count in self._folded.items():
            by_status[str(each)] += count
        tally = ", ".join(f"{count:,} {name}" for name, count in sorted(
            by_status.items(), key=lambda item: -STATUS_SEVERITY[Status(item[0])]))
        return Finding(self.check_id, status, "node",
                       f"{folded:,} more findings of this check are not listed ({tally}): the report keeps "
                       f"a check's {self.limit - 1} worst findings",
                       evidence={"folded": folded, "statuses": dict(by_status),
                                 "first_subjects": self._folded_subjects},
                       shadow=not graded)
