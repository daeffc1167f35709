"""A node's report decoded by msgspec into typed Structs: what the summary skips is never built.

A plain report's findings are ~60 objects of five keys each, their `evidence` the most values
of the report and never read but for the two checks that give metrics. Decoded into the
Structs below, each finding's `evidence` stays raw (`msgspec.Raw`, a slice of the text), but
the metric checks' (decoded at once, as `bounded.decode_first` would); the report's other
values are decoded as `decode_first` would. Only the plain case is taken this way: a key no
report has, a check id, status, subject or summary that is no string, a findings list that is
no list of objects, more than `_MAX_FINDINGS` findings, anything msgspec or then `json` refuses,
or an `evidence` longer than `_raw_bound()` makes `decode_report` raise, and the report goes
`decode_first`'s way.

Exactness: skipping a value, msgspec checks its syntax (NaN, control characters, bad escapes,
lone surrogates, nesting past the recursion limit: refused as when it decodes), but not the
digits of an integer: a 5,000-digit integer, which `json` refuses (the interpreter's limit,
`sys.get_int_max_str_digits()`, 4,300 by default), would pass. An `evidence` no longer than
that limit holds no integer that long; a longer one (the longest of the fixture nodes' reports
is 1,470 characters) sends the report the other way (tests/test_fleet_typed.py holds both ways
equal). One difference is left, on purpose: a key given twice keeps its last value on both
ways, but a 5,000-digit integer in the value it replaces is not refused here (a node that
writes its report so is summarised by its last values, as `json` would were the integer
shorter). The limit guards the interpreter's int parsing, which a skipped value never reaches,
and finding such a run in every report would cost ~0.1 s per 10,000 nodes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import msgspec

# The longest `evidence` taken unread, where the interpreter's integer limit is not lower
# (engineering default: under the default limit, 4,300 digits).
_RAW_BOUND = 4096
# The most findings a report decoded this way may have (engineering default: a DGX-class node's
# report has ~60-200); a longer list, junk from a hostile node, goes `decode_first`'s way, where
# each finding costs a dict and no more.
_MAX_FINDINGS = 4096
_NULL = msgspec.Raw(b"null")


class Finding(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One finding as `netdoctor.report.model.Finding.to_json` writes it; `None` where absent
    (the summary reads a missing key as `None` too)."""

    check: str | None = None
    status: str | None = None
    subject: str | None = None
    summary: str | None = None
    evidence: msgspec.Raw = _NULL
    remedy: Any = None
    rule: Any = None
    shadow: Any = None
    internal: Any = None


class Report(msgspec.Struct, forbid_unknown_fields=True):
    """A report as `netdoctor.report.model.Report.to_json` writes it."""

    schema: Any = None
    host: Any = None
    grade: Any = None
    started_at: Any = None
    duration_s: Any = None
    rules: Any = None
    findings: list[Finding] | None = None
    checks: Any = None
    netdoctor: Any = None
    probe: Any = None
    snapshot: Any = None
    snapshot_captured_at: Any = None
    required_not_run: Any = None
    versions: Any = None
    neighbors: Any = None
    fabric: Any = None


class TypedReport(dict):  # type: ignore[type-arg]
    """The keys of a `Report` the summary reads, as a dict would give them, its `findings` a
    list of `Finding`s; `summary_split` gives what `model.summarize_report` takes of those."""

    __slots__ = ("measured",)

    def summary_split(self, findings: list[Finding], judged: frozenset[str]) \
            -> tuple[set[str], list[dict[str, Any]], list[dict[str, Any]]]:
        """The checks of the non-shadow findings that pass; the non-shadow findings of a check
        with a status in `judged` (those the summary counts), as dicts (their `evidence`, never
        read, None); and the metric checks' findings, as dicts of their check, status and evidence."""
        passed = {finding.check for finding in findings if finding.status == "pass" and not finding.shadow}
        passed.discard(None)
        rest = [{"check": finding.check, "status": finding.status, "subject": finding.subject,
                 "summary": finding.summary, "shadow": finding.shadow, "evidence": None}
                for finding in findings
                if finding.status in judged and finding.check is not None and not finding.shadow]
        return passed, rest, self.measured


_EVIDENCE = attrgetter("evidence")


def _raw_bound() -> int:
    """The longest `evidence` that cannot hold an integer `json` refuses (`sys.set_int_max_str_digits`
    may have lowered the limit; 0 is none)."""
    # (The limit came with 3.11 and 3.10.7; before it json took any integer, and the bound holds.)
    limit_of = getattr(sys, "get_int_max_str_digits", None)
    limit = limit_of() if limit_of is not None else 0
    return min(_RAW_BOUND, limit) if limit else _RAW_BOUND


def typed_decoder(decode_plain: Callable[[bytes], Any], metric_checks: tuple[str, ...]) -> Callable[[str], TypedReport]:
    """A decoder of whole reports into a `TypedReport`; it raises for anything not plain (see the
    module docstring). The evidence of the findings of `metric_checks` is decoded with
    `decode_plain` (`bounded`'s exact way), here where a failure still sends the report the other way."""
    decode = msgspec.json.Decoder(Report).decode

    def decode_report(text: str) -> TypedReport:
        report = decode(text)
        findings = report.findings
        typed = TypedReport(schema=report.schema, host=report.host, grade=report.grade, findings=findings,
                            checks=report.checks, probe=report.probe, versions=report.versions,
                            neighbors=report.neighbors, fabric=report.fabric)
        metric: list[Finding] = []
        if findings:
            if len(findings) > _MAX_FINDINGS:
                raise ValueError("more findings than a report has")
            if max(map(len, map(_EVIDENCE, findings))) > _raw_bound():
                raise ValueError("an evidence too long to be taken unread")
            metric = [finding for finding in findings if finding.check in metric_checks]
        evidence = decode_plain(b"[" + b",".join(map(_EVIDENCE, metric)) + b"]") if metric else ()
        typed.measured = [{"check": finding.check, "status": finding.status, "evidence": value}
                          for finding, value in zip(metric, evidence)]
        return typed

    return decode_report
