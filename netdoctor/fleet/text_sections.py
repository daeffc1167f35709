"""The fleet text report's sections on the fleet against itself and against its past: what
changed since the previous report (read first), version drift, rail wiring, NVLink domains.
Each returns no lines when it has nothing to say; every line goes through `safe_text`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from netdoctor.fleet.views import (NOT_JUDGED_WHY, changes_heading, domain_rows, domain_text, drift_rows, drift_text,
                                   finding_groups, fold_hosts, grade_groups, host_list, hosts_phrase, not_judged_hosts,
                                   rail_rows, rail_text, split_text, version_groups)
from netdoctor.textsafe import safe_text

# Lines per subsection before the rest is counted ("... and 12 more").
LIST_LIMIT = 100


def _limited(lines: list[str], what: str) -> list[str]:
    if len(lines) <= LIST_LIMIT:
        return lines
    return lines[:LIST_LIMIT] + [f"    ... and {len(lines) - LIST_LIMIT} more {what}"]


def changes_lines(changes: Mapping[str, Any] | None) -> list[str]:
    """`What changed since ...`: grade changes worst first, new and cleared findings, versions, nodes."""
    if changes is None:
        return []
    lines: list[str] = []
    grades = grade_groups(changes.get("grades"))
    if grades:
        lines.append(f"  Grades ({_count(sum(len(hosts) for *_, hosts in grades))}):")
        width = max(len(f"{was} -> {now}") for was, now, _ in grades)
        lines += _limited([f"    {f'{was} -> {now}':<{width}}  {hosts_phrase(hosts)}" for was, now, hosts in grades],
                          "grade changes")
    for key, title in (("new_findings", "New findings"), ("cleared_findings", "Cleared findings")):
        groups = finding_groups(changes.get(key))
        if groups:
            lines.append(f"  {title} ({sum(len(hosts) for *_, hosts in groups):,}):")
            lines += _limited([f"    {status:<7}  {what}  on {hosts_phrase(hosts)}" for status, what, hosts in groups],
                              "kinds of finding")
    versions = version_groups(changes.get("versions"))
    if versions:
        lines.append(f"  Versions ({_count(len({host for *_, hosts in versions for host in hosts}))}):")
        lines += _limited([f"    {what} {was} -> {now}  on {hosts_phrase(hosts)}" for what, was, now, hosts in versions],
                          "version changes")
    for key, title in (("new_nodes", "New nodes"), ("gone_nodes", "Gone nodes")):
        hosts = host_list(changes, key)
        if hosts:
            lines.append(f"  {title} ({len(hosts):,}): {fold_hosts(hosts)}")
    heading = changes_heading(changes)
    if not lines:
        return ["", safe_text(f"{heading}: nothing (the same grades, findings, versions and nodes)")]
    return [""] + [safe_text(line) for line in [f"{heading}:", *lines]]


def drift_lines(drift: Iterable[Any]) -> list[str]:
    """`Version drift`: only the kinds where some nodes differ, minorities first."""
    rows = drift_rows(drift)
    if not rows:
        return []
    return ["", "Version drift:"] + [safe_text(f"  {drift_text(row)}") for row in rows]


def rail_lines(rails: Iterable[Any]) -> list[str]:
    """`Rail wiring`: only the leaves where a port of another rail lands, and the nodes not judged."""
    entries = list(rails)
    odd, clean = rail_rows(entries)
    unjudged = not_judged_hosts(odd + clean)
    if not odd and not unjudged:
        return []
    header = f"Rail wiring ({_leaves(len(odd))} of {len(entries):,} with ports of another rail):"
    lines = _limited([safe_text(f"  {rail_text(row)}") for row in odd], "leaves")
    if unjudged:
        lines.append(safe_text(f"  Not judged ({NOT_JUDGED_WHY}): {hosts_phrase(unjudged)}"))
    return ["", header] + lines


def domain_lines(domains: Iterable[Any]) -> list[str]:
    """`NVLink domains`: each domain or chassis with nodes elsewhere, then the partitioned ones;
    one line where every domain is in one clique."""
    odd, clean = domain_rows(domains)
    if not odd and not clean:
        return []
    split = [row for row in odd + clean if row.split]
    if odd:
        lines = [f"NVLink domains ({len(odd):,} of {len(odd) + len(clean):,} with nodes in another clique or domain):"]
        # A chassis whose trays in a domain are partitioned has no majority: its other trays are below.
        lines += _limited([f"  {domain_text(replace(row, majority='partitions (below)') if row.split else row)}"
                           for row in odd], "domains")
    else:
        domains = [row for row in clean if not row.what.startswith("chassis ")]
        nodes = sum(row.nodes or 0 for row in domains)
        lines = [f"NVLink domains: {len(domains):,} ({_count(nodes)}), none with a node in another clique or domain"]
    if split:
        lines.append("  Partitioned (no clique holds most of the domain's nodes; not judged):")
        lines += _limited([f"    {split_text(row)}" for row in split], "domains")
    return [""] + [safe_text(line) for line in lines]


def _count(hosts: int) -> str:
    return "1 node" if hosts == 1 else f"{hosts:,} nodes"


def _leaves(count: int) -> str:
    return "1 leaf" if count == 1 else f"{count:,} leaves"
