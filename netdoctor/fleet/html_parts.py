"""Parts of the fleet HTML page: what changed since the previous report, version drift, rail
wiring, NVLink domains, and the node × check grid, whose plain passing nodes fold into ranges of consecutive
names (`node[0001-0420]`, one row each) from FOLD_AT nodes on. Every string a node supplied
(hosts, versions, switch names, summaries) goes through `escape`."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

from netdoctor.fleet.model import GRADE_ORDER, NodeGrade, NodeSummary, grade_severity
from netdoctor.fleet.report import FleetReport
from netdoctor.fleet.views import (NOT_JUDGED_WHY, alike_text, changes_heading, clean_leaves_by_rail, contiguous_ranges,
                                   domain_rows, drift_rows, finding_groups, fold_hosts, grade_groups, host_list,
                                   hosts_phrase, not_judged_hosts, rail_rows, trays_phrase, version_groups)
from netdoctor.textsafe import safe_text
from netdoctor.util import natural_key

# From this many nodes on, the grid folds plain passing nodes into ranges: 9,900 rows of
# green cells tell less than 60 rows of ranges, and cost most of the page.
FOLD_AT = 1000
# Rows per kind of change shown; the rest are counted.
ROW_LIMIT = 500

_STATUS_LETTER = {"pass": "·", "warn": "W", "fail": "F", "unknown": "U", "skip": "–"}
_GRADES = {str(grade) for grade in GRADE_ORDER}
_STATUSES = set(_STATUS_LETTER)
# Characters of a folded host list shown before it folds away behind a click.
_SHORT_LIST = 300
# Statuses of a check that a folded row can stand for: nothing to say about the node.
_PLAIN = (None, "pass", "skip")


def escape(text: Any) -> str:
    """Markup and control characters of node text escaped for the page."""
    return html.escape(safe_text(text))


def _grade_badge(grade: str) -> str:
    css = f" g-{grade}" if grade in _GRADES else ""
    return f"<span class=\"badge{css}\">{escape(grade or '?')}</span>"


def _status(status: str) -> str:
    css = f" s-{status}" if status in _STATUSES else ""
    return f"<span class=\"st{css}\">{escape(status or '?')}</span>"


def _hosts(hosts: list[str], noun: str = "nodes") -> str:
    """Folded hosts (and how many, from 3 on); a long list (a rolling upgrade half done)
    opens on a click."""
    folded = fold_hosts(hosts)
    if len(folded) <= _SHORT_LIST:
        return escape(hosts_phrase(hosts, folded, noun))
    return (f"<details><summary>{len(hosts):,} {noun}: {escape(folded[:_SHORT_LIST // 2])}…</summary>"
            f"{escape(folded)}</details>")


def _capped(rows: list[str], columns: int, what: str) -> list[str]:
    if len(rows) <= ROW_LIMIT:
        return rows
    return rows[:ROW_LIMIT] + [f"<tr><td colspan=\"{columns}\">... and {len(rows) - ROW_LIMIT:,} more {what}</td></tr>"]


def changes_html(changes: Mapping[str, Any] | None) -> str:
    """What changed since the previous report, one row per change alike across hosts."""
    if changes is None:
        return ""
    rows: list[str] = []
    rows += _capped([f"<tr class=\"grade\"><td>grade</td><td>{_grade_badge(was)} → {_grade_badge(now)}</td>"
                     f"<td class=\"hosts\">{_hosts(hosts)}</td></tr>"
                     for was, now, hosts in grade_groups(changes.get("grades"))], 3, "grade changes")
    for key, label in (("new_findings", "new finding"), ("cleared_findings", "cleared")):
        rows += _capped([f"<tr class=\"{key.split('_')[0]}\"><td>{label}</td><td>{_status(status)} {escape(what)}</td>"
                         f"<td class=\"hosts\">{_hosts(hosts)}</td></tr>"
                         for status, what, hosts in finding_groups(changes.get(key))], 3, "kinds of finding")
    rows += _capped([f"<tr class=\"version\"><td>version</td><td>{escape(what)} {escape(was)} → {escape(now)}</td>"
                     f"<td class=\"hosts\">{_hosts(hosts)}</td></tr>"
                     for what, was, now, hosts in version_groups(changes.get("versions"))], 3, "version changes")
    for key, label in (("new_nodes", "new nodes"), ("gone_nodes", "gone nodes")):
        hosts = host_list(changes, key)
        if hosts:
            rows.append(f"<tr class=\"{key.split('_')[0]}-nodes\"><td>{label}</td><td></td>"
                        f"<td class=\"hosts\">{_hosts(hosts)}</td></tr>")
    heading = f"<h2 id=\"changes-heading\">{escape(changes_heading(changes))}</h2>"
    if not rows:
        return heading + "<p id=\"changes\">nothing: the same grades, findings, versions and nodes</p>"
    return (heading + "<table class=\"small\" id=\"changes\"><tr><th>change</th><th>what</th><th>nodes</th></tr>"
            + "".join(rows) + "</table>")


def drift_html(drift: Iterable[Any]) -> str:
    """The kinds and models of versions where nodes differ, minorities first, their hosts folded;
    the kinds alike on every node folded away (a closed `<details>`, one line each inside)."""
    rows = drift_rows(drift, only_differing=False)
    if not rows:
        return ""
    differing = [row for row in rows if row.differs]
    alike = [row for row in rows if not row.differs]
    parts = [f"<h2 id=\"drift-heading\">Version drift ({len(differing)} of {len(rows)} differ)</h2>"]
    if differing:
        parts.append("<table class=\"small\" id=\"drift\"><tr><th>version of</th><th>among</th><th>majority</th>"
                     "<th>nodes</th><th>minority</th><th>below the minimum</th></tr>")
        for row in differing:
            minority = "".join(f"<div><b>{escape(version)}</b>: {_hosts(hosts)}</div>" for version, hosts in row.minority)
            below = (f"<b>{escape(row.minimum or '?')}</b>: {_hosts(row.below_minimum)}" if row.below_minimum else "")
            parts.append(f"<tr class=\"{'minority' if row.minority else 'below'}\"><td>{escape(row.what)}</td>"
                         f"<td>{escape(row.among)}</td><td>{escape(row.majority)}</td><td>{_count(row.majority_nodes)}</td>"
                         f"<td class=\"hosts\">{minority}</td><td class=\"hosts\">{below}</td></tr>")
        parts.append("</table>")
    if alike:
        kinds = ", ".join(dict.fromkeys(row.what for row in alike))
        parts.append(f"<details id=\"drift-alike\"><summary>{len(alike)} alike on every node: {escape(kinds)}</summary>"
                     "<ul class=\"alike\">")
        parts += [f"<li>{escape(alike_text(row))}</li>" for row in alike]
        parts.append("</ul></details>")
    return "".join(parts)


def _count(nodes: int | None) -> str:
    return "" if nodes is None else f"{nodes:,}"


_RAIL_HEADER = ("<tr><th>leaf switch</th><th>switch GUID</th><th>rail</th><th>ports</th>"
                "<th>ports of another rail</th></tr>")


def rails_html(rails: Iterable[Any]) -> str:
    """Leaves with ports of another rail, one row each, and the nodes not judged; the leaves wired
    as expected folded away by their rail (a closed `<details>`). Each leaf is in one row."""
    odd, clean = rail_rows(rails)
    if not odd and not clean:
        return ""
    total = len(odd) + len(clean)
    parts = [f"<h2 id=\"rails-heading\">Rail wiring ({len(odd)} of {total:,} leaf switches with ports of another rail)</h2>"]
    unjudged = not_judged_hosts(odd + clean)
    if odd or unjudged:
        parts.append(f"<table class=\"small\" id=\"rails\">{_RAIL_HEADER}")
        parts += _capped([f"<tr class=\"odd\"><td>{escape(row.leaf)}</td><td>{escape(row.switch_guid)}</td>"
                          f"<td>{escape(row.rail)}</td><td>{'' if row.ports is None else row.ports}</td><td class=\"hosts\">"
                          + "".join(f"<div><b>{escape(rail)}</b> of {_hosts(hosts)}</div>" for rail, hosts in row.odd)
                          + "</td></tr>" for row in odd], 5, "leaves")
        if unjudged:
            parts.append(f"<tr class=\"not-judged\"><td colspan=\"4\">not judged ({escape(NOT_JUDGED_WHY)})</td>"
                         f"<td class=\"hosts\">{_hosts(unjudged)}</td></tr>")
        parts.append("</table>")
    groups = clean_leaves_by_rail(clean)
    if groups:
        parts.append(f"<details id=\"rails-alike\"><summary>{len(clean):,} leaf switch{'' if len(clean) == 1 else 'es'} "
                     f"with no port of another rail</summary><table class=\"small\" id=\"rails-clean\">{_RAIL_HEADER}")
        parts += [f"<tr class=\"clean\"><td class=\"hosts\">{_hosts(leaves, 'leaves')}</td><td></td>"
                  f"<td>{escape(rail)}</td><td>{ports:,}</td><td>none</td></tr>" for rail, leaves, ports in groups]
        parts.append("</table></details>")
    return "".join(parts)


def domains_html(domains: Iterable[Any]) -> str:
    """Domains and chassis with nodes in another clique or domain, one row each; partitioned
    domains one row each; the domains in one clique folded into one row."""
    odd, clean = domain_rows(domains)
    if not odd and not clean:
        return ""
    parts = [f"<h2 id=\"domains-heading\">NVLink domains ({len(odd)} of {len(odd) + len(clean):,} with nodes in another clique or domain)</h2>"
             "<table class=\"small\" id=\"nvlink-domains\"><tr><th>domain or chassis</th><th>most nodes in</th>"
             "<th>nodes</th><th>nodes elsewhere</th></tr>"]
    # A chassis whose trays in a domain are partitioned has no majority; its partitions have a row below.
    parts += _capped([f"<tr class=\"odd\"><td>{escape(row.what)}</td>"
                      f"<td>{'partitioned: see below' if row.split else escape(row.majority)}</td>"
                      f"<td>{'' if row.nodes is None else f'{row.nodes:,}'}</td><td class=\"hosts\">"
                      + "".join(f"<div><b>{escape(there)}</b>: {escape(trays_phrase(hosts, row.trays))}</div>"
                                for there, hosts in row.odd) + "</td></tr>" for row in odd], 4, "domains")
    split = [row for row in odd + clean if row.split]
    parts += _capped([f"<tr class=\"split\"><td>{escape(row.what)}</td><td>partitioned: not judged</td>"
                      f"<td>{'' if row.nodes is None else f'{row.nodes:,}'}</td><td class=\"hosts\">"
                      + "".join(f"<div><b>{escape(there)}</b>: {_hosts(hosts)}</div>" for there, hosts in row.split)
                      + "</td></tr>" for row in split], 4, "domains")
    alike = [row for row in clean if not row.split]
    if alike:
        parts.append(f"<tr class=\"clean\"><td>{len(alike):,} domains</td><td>one clique each</td>"
                     f"<td>{sum(row.nodes or 0 for row in alike):,}</td><td>none</td></tr>")
    parts.append("</table>")
    return "".join(parts)


# Kinds of finding listed in "What is wrong" before the rest is counted (the grid lists every node).
WRONG_LIMIT = 50
_NOT_PASSING = tuple(grade for grade in GRADE_ORDER if grade != NodeGrade.PASS)


def wrong_html(report: FleetReport) -> str:
    """What the page leads with: the nodes that did not pass, grouped by grade and top finding
    (worst grade first, then the most nodes), and a line per fleet-wide section below that found
    something: counts only, so that a leaf, version or suspect is named once, in its section."""
    groups: dict[tuple[str, str], list[str]] = {}
    for node in report.nodes:
        if node.grade in _NOT_PASSING:
            groups.setdefault((str(node.grade), node.top.describe() if node.top else ""), []).append(node.label())
    ranked = sorted(groups.items(), key=lambda item: (-grade_severity(item[0][0]), -len(item[1]), item[0][1]))
    parts = ["<h2 id=\"wrong-heading\">What is wrong</h2>"]
    if ranked:
        failing = sum(len(hosts) for _, hosts in ranked)
        parts.append(f"<table class=\"small\" id=\"wrong\"><tr><th>grade</th><th>nodes ({failing:,} of "
                     f"{len(report.nodes):,})</th><th>top finding</th></tr>")
        parts += [f"<tr data-g=\"{escape(grade)}\"><td>{_grade_badge(grade)}</td><td class=\"hosts\">{_hosts(hosts)}</td>"
                  f"<td>{escape(finding)}</td></tr>" for (grade, finding), hosts in ranked[:WRONG_LIMIT]]
        if len(ranked) > WRONG_LIMIT:
            rest = sum(len(hosts) for _, hosts in ranked[WRONG_LIMIT:])
            parts.append(f"<tr><td colspan=\"3\">... and {len(ranked) - WRONG_LIMIT:,} more kinds of finding on "
                         f"{rest:,} nodes: the grid below lists every node</td></tr>")
        parts.append("</table>")
    else:
        parts.append(f"<p id=\"wrong\">nothing on the nodes: all {len(report.nodes):,} passed</p>" if report.nodes
                     else "<p id=\"wrong\">no node in the report</p>")
    pointers = _fleet_pointers(report)
    if pointers:
        parts.append("<ul id=\"fleet-wrong\">" + "".join(f"<li><a href=\"#{anchor}\">{escape(text)}</a></li>"
                                                         for anchor, text in pointers) + "</ul>")
    return "".join(parts)


def _fleet_pointers(report: FleetReport) -> list[tuple[str, str]]:
    """(anchor, line) for each fleet-wide judgement below that found something."""
    pointers = []
    suspects = report.probe.get("suspects") or []
    if suspects:
        pointers.append(("traffic-heading", f"traffic between nodes: {len(suspects)} suspect{'' if len(suspects) == 1 else 's'}"))
    if report.outliers:
        hosts = len({outlier.host for outlier in report.outliers})
        pointers.append(("outliers-heading", f"fleet outliers: {hosts:,} node{'' if hosts == 1 else 's'} "
                                             f"beyond robust z {report.outlier_threshold:g}"))
    drift = drift_rows(report.drift)
    if drift:
        pointers.append(("drift-heading", f"version drift: {len(drift)} version kind{'' if len(drift) == 1 else 's'} "
                                          "where like nodes differ"))
    odd, clean = rail_rows(report.rails)
    if odd:
        pointers.append(("rails-heading", f"rail wiring: {len(odd):,} of {len(odd) + len(clean):,} leaf switches "
                                          "with ports of another rail"))
    domains, _ = domain_rows(report.nvlink_domains)
    if domains:
        pointers.append(("domains-heading", f"NVLink domains: {len(domains):,} with nodes in another clique or domain"))
    return pointers


def _cells(node: NodeSummary, checks: list[str]) -> str:
    cells = []
    for check in checks:
        status = node.check_statuses.get(check)
        if status is None:
            cells.append("<td class=\"c s-none\"></td>")
            continue
        summary = node.check_summaries.get(check)
        title = f" title=\"{escape(check)}: {escape(summary)}\"" if summary else ""
        cells.append(f"<td class=\"c s-{escape(status)}\"{title}>{_STATUS_LETTER.get(status, '?')}</td>")
    return "".join(cells)


def grid_html(report: FleetReport) -> str:
    """The node × check table; `data-n` on a row counts the nodes it stands for."""
    checks = report.checks
    parts = ["<table id=\"grid\"><thead><tr><th>host</th><th>grade</th>"]
    parts += [f"<th class=\"check\" title=\"{escape(check)}\">{escape(check)}</th>" for check in checks]
    parts.append("<th>worst finding</th></tr></thead><tbody>")
    outlier_hosts = {outlier.host for outlier in report.outliers}
    fold = len(report.nodes) >= FOLD_AT
    plain: dict[tuple[str | None, ...], list[str]] = {}
    for node in report.nodes:
        signature = tuple(node.check_statuses.get(check) for check in checks)
        if (fold and node.grade == NodeGrade.PASS and node.host not in outlier_hosts and node.reported_host is None
                and all(status in _PLAIN for status in node.check_statuses.values())):
            plain.setdefault(signature, []).append(node.host)
            continue
        flag = " outlier" if node.host in outlier_hosts else ""
        parts.append(f"<tr data-g=\"{node.grade}\"><td class=\"host\">{escape(node.label())}</td>"
                     f"<td class=\"g g-{node.grade}{flag}\">{node.grade}</td>{_cells(node, checks)}"
                     f"<td class=\"top\">{escape(node.headline())}</td></tr>")
    folded: list[tuple[tuple[int | str, ...], str]] = []
    for signature, hosts in plain.items():
        cells = "".join("<td class=\"c s-none\"></td>" if status is None else f"<td class=\"c s-{status}\">{_STATUS_LETTER[status]}</td>"
                        for status in signature)
        for name, count, first in contiguous_ranges(hosts):
            what = "1 passing node" if count == 1 else f"{count:,} passing nodes"
            folded.append((natural_key(first), f"<tr data-g=\"pass\" data-n=\"{count}\" class=\"fold\"><td class=\"host\">"
                                               f"{escape(name)}</td><td class=\"g g-pass\">pass</td>{cells}"
                                               f"<td class=\"top\">{what}</td></tr>"))
    folded.sort(key=lambda item: item[0])
    parts += [row for _, row in folded]
    parts.append("</tbody></table>")
    return "".join(parts)


def folded_note(report: FleetReport) -> str:
    """Said above the grid when it folds."""
    if len(report.nodes) < FOLD_AT:
        return ""
    return (f"<p class=\"note\">{len(report.nodes):,} nodes: passing nodes with nothing to say are folded into ranges of "
            "consecutive names, one row each (the JSON report lists every node)</p>")
