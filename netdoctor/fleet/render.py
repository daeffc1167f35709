"""Fleet report renderers: text for terminals, JSON (CONTRACT §5), a self-contained HTML page."""

from __future__ import annotations

import html
import json
import math
import statistics

from ClusterShell.NodeSet import NodeSet

from netdoctor.fleet.probe_render import probe_html, probe_text_lines
from netdoctor.fleet.model import BUSBW_METRIC, GRADE_ORDER, NodeGrade, NodeSummary
from netdoctor.fleet.report import FleetReport
from netdoctor.textsafe import safe_text

# Text output lists at most this many nodes per section, then folds the rest.
_TEXT_LIST_LIMIT = 100

_PROBLEM_GRADES = (NodeGrade.FAIL, NodeGrade.UNREACHABLE, NodeGrade.INVALID)
_ATTENTION_GRADES = (NodeGrade.UNKNOWN, NodeGrade.WARN)


def render_json(report: FleetReport) -> str:
    """Indented at the top, one compact line per node: readable, diffable, and fast
    (the C encoder only runs without `indent`)."""
    data = report.to_json()
    lines = ["{"]
    keys = list(data)
    for position, key in enumerate(keys):
        comma = "," if position < len(keys) - 1 else ""
        value = data[key]
        if isinstance(value, list) and value:
            lines.append(f"  {json.dumps(key)}: [")
            lines.append(",\n".join("    " + json.dumps(item) for item in value))
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_text(report: FleetReport) -> str:
    lines: list[str] = []
    counts = report.counts
    lines.append(f"netdoctor fleet: {_nodes(len(report.nodes))} (generated {report.generated_at})")
    lines.append("  " + "  ".join(f"{grade} {counts[grade]}" for grade in counts))
    problem_nodes = [node for node in report.nodes if node.grade in _PROBLEM_GRADES]
    attention_nodes = [node for node in report.nodes if node.grade in _ATTENTION_GRADES]
    if problem_nodes:
        lines.append("")
        lines.append(f"Failing or not answering ({len(problem_nodes)}):")
        lines.extend(_node_lines(problem_nodes))
    if attention_nodes:
        lines.append("")
        lines.append(f"Unknown or warning ({len(attention_nodes)}):")
        lines.extend(_node_lines(attention_nodes))
    tallies = report.check_tallies()
    if tallies:
        lines.append("")
        lines.append("Checks failing most:")
        names = [safe_text(tally.check) for tally in tallies]
        width = max(map(len, names))
        for name, tally in zip(names, tallies):
            lines.append(f"  {name:<{width}}  fail {tally.fail:>5}  unknown {tally.unknown:>5}  warn {tally.warn:>5}")
    if report.outliers:
        lines.append("")
        lines.append(f"Fleet outliers (robust z-score beyond {report.outlier_threshold:g}):")
        hosts = [safe_text(outlier.host) for outlier in report.outliers]
        width = max(map(len, hosts))
        for host, outlier in zip(hosts, report.outliers):
            lines.append(
                f"  {host:<{width}}  {outlier.metric} {outlier.value:g}"
                f" (fleet median {outlier.fleet_median:g}, z {outlier.robust_z:+.1f})"
            )
    lines += probe_text_lines(report.probe)
    passing = [node.host for node in report.nodes if node.grade is NodeGrade.PASS]
    if passing:
        lines.append("")
        lines.append(f"Passing: {_fold(passing)}")
    return "\n".join(lines) + "\n"


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def _node_lines(nodes: list[NodeSummary]) -> list[str]:
    shown = nodes[:_TEXT_LIST_LIMIT]
    labels = [safe_text(node.label()) for node in shown]
    width = max(map(len, labels))
    lines = [f"  {label:<{width}}  {node.grade:<11}  {safe_text(node.headline())}".rstrip() for label, node in zip(labels, shown)]
    rest = nodes[_TEXT_LIST_LIMIT:]
    if rest:
        lines.append(f"  ... and {len(rest)} more: {_fold([node.host for node in rest])}")
    return lines


def _fold(hosts: list[str]) -> str:
    """The hosts as a folded host list (`node[001-128]`), safe to print."""
    try:
        folded = str(NodeSet.fromlist(hosts))
    except Exception:  # ClusterShell refuses some odd names; a plain list loses nothing.
        folded = ",".join(hosts)
    return safe_text(folded)


_STATUS_LETTER = {"pass": "·", "warn": "W", "fail": "F", "unknown": "U", "skip": "–"}

_CSS = """
:root{--pass:#2e7d32;--warn:#f9a825;--fail:#c62828;--unknown:#6a1b9a;--skip:#cfd8dc;--unreachable:#37474f;--invalid:#ad1457;--none:#f5f5f5}
body{font:13px/1.35 system-ui,sans-serif;margin:0 12px;color:#212121}
h1{font-size:18px;margin:10px 0 4px}h2{font-size:15px;margin:14px 0 4px}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;color:#fff;margin-right:4px}
.g-pass{background:var(--pass)}.g-warn{background:var(--warn);color:#000}.g-fail{background:var(--fail)}
.g-unknown{background:var(--unknown)}.g-unreachable{background:var(--unreachable)}.g-invalid{background:var(--invalid)}
table{border-collapse:collapse}
.small td,.small th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}
#grid{font:11px/1.2 ui-monospace,monospace}
#grid th{position:sticky;top:0;background:#fafafa;z-index:2;padding:3px 2px;border-bottom:1px solid #999;font-weight:600}
#grid th.check{writing-mode:vertical-rl;transform:rotate(180deg);height:96px;text-align:left}
#grid td{padding:0 3px;border:1px solid #fff;white-space:nowrap}
#grid td.host{position:sticky;left:0;background:#fff;z-index:1;font-weight:600}
#grid td.c{width:14px;text-align:center;color:#fff}
#grid td.top{max-width:60ch;overflow:hidden;text-overflow:ellipsis;color:#424242}
.s-pass{background:var(--pass)}.s-warn{background:var(--warn);color:#000!important}.s-fail{background:var(--fail)}
.s-unknown{background:var(--unknown)}.s-skip{background:var(--skip)}.s-none{background:var(--none)}
#controls{position:sticky;top:0;background:#fff;z-index:3;padding:6px 0}
#q{width:28em;padding:3px}
svg text{font:10px sans-serif}
"""

_SCRIPT = """
(function(){
  var q=document.getElementById('q'),only=document.getElementById('only'),shown=document.getElementById('shown');
  var rows=Array.prototype.slice.call(document.querySelectorAll('#grid tbody tr'));
  var text=rows.map(function(r){return r.textContent.toLowerCase()+' '+r.getAttribute('data-g');});
  function apply(){
    var terms=q.value.toLowerCase().split(/\\s+/).filter(Boolean),problems=only.checked,n=0;
    for(var i=0;i<rows.length;i++){
      var ok=!(problems&&rows[i].getAttribute('data-g')==='pass');
      for(var j=0;ok&&j<terms.length;j++){ok=text[i].indexOf(terms[j])>=0;}
      rows[i].style.display=ok?'':'none'; if(ok)n++;
    }
    shown.textContent=n;
  }
  q.addEventListener('input',apply);only.addEventListener('change',apply);apply();
})();
"""


def _escape(text: str) -> str:
    """Markup and control characters of node text escaped for the page."""
    return html.escape(safe_text(text))


def render_html(report: FleetReport) -> str:
    escape = _escape
    counts = report.counts
    parts: list[str] = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>netdoctor fleet: {_nodes(len(report.nodes))}</title><style>{_CSS}</style></head><body>",
        f"<h1>netdoctor fleet report: {_nodes(len(report.nodes))}</h1>",
        f"<div>generated {escape(report.generated_at)} &nbsp; ",
    ]
    for grade in GRADE_ORDER:
        parts.append(f"<span class=\"badge g-{grade}\" data-count=\"{counts[grade]}\">{grade} {counts[grade]}</span>")
    parts.append("</div>")

    busbw = [node.metrics[BUSBW_METRIC] for node in report.nodes if BUSBW_METRIC in node.metrics]
    if busbw:
        parts.append("<h2>NCCL bus bandwidth (GB/s) across the fleet</h2>")
        parts.append(busbw_histogram_svg(busbw, {o.host for o in report.outliers if o.metric == BUSBW_METRIC}))
    if report.outliers:
        parts.append(f"<h2>Fleet outliers (robust z-score beyond {report.outlier_threshold:g})</h2><table class=\"small\" id=\"outliers\">")
        parts.append("<tr><th>host</th><th>metric</th><th>value</th><th>fleet median</th><th>z</th></tr>")
        for outlier in report.outliers:
            parts.append(
                f"<tr><td>{escape(outlier.host)}</td><td>{escape(outlier.metric)}</td><td>{outlier.value:g}</td>"
                f"<td>{outlier.fleet_median:g}</td><td>{outlier.robust_z:+.1f}</td></tr>"
            )
        parts.append("</table>")
    parts.append(probe_html(report.probe))
    tallies = report.check_tallies()
    if tallies:
        parts.append("<h2>Checks failing most</h2><table class=\"small\" id=\"tallies\"><tr><th>check</th><th>fail</th><th>unknown</th><th>warn</th></tr>")
        for tally in tallies:
            parts.append(f"<tr><td>{escape(tally.check)}</td><td>{tally.fail}</td><td>{tally.unknown}</td><td>{tally.warn}</td></tr>")
        parts.append("</table>")

    parts.append(
        "<h2>Nodes × checks</h2><div id=\"controls\"><input id=\"q\" type=\"search\" "
        "placeholder=\"filter: host, grade, check or text (space = and)\" autocomplete=\"off\"> "
        "<label><input id=\"only\" type=\"checkbox\"> only nodes that did not pass</label> "
        f"&nbsp; <span id=\"shown\">{len(report.nodes)}</span> of {len(report.nodes)} shown</div>"
    )
    parts.append("<table id=\"grid\"><thead><tr><th>host</th><th>grade</th>")
    for check in report.checks:
        parts.append(f"<th class=\"check\" title=\"{escape(check)}\">{escape(check)}</th>")
    parts.append("<th>worst finding</th></tr></thead><tbody>")
    outlier_hosts = {outlier.host for outlier in report.outliers}
    for node in report.nodes:
        host = escape(node.label())
        flag = " outlier" if node.host in outlier_hosts else ""
        parts.append(f"<tr data-g=\"{node.grade}\"><td class=\"host\">{host}</td><td class=\"g g-{node.grade}{flag}\">{node.grade}</td>")
        for check in report.checks:
            status = node.check_statuses.get(check)
            if status is None:
                parts.append("<td class=\"c s-none\"></td>")
                continue
            summary = node.check_summaries.get(check)
            title = f" title=\"{escape(check)}: {escape(summary)}\"" if summary else ""
            parts.append(f"<td class=\"c s-{status}\"{title}>{_STATUS_LETTER.get(status, '?')}</td>")
        top = escape(node.headline())
        parts.append(f"<td class=\"top\">{top}</td></tr>")
    parts.append(f"</tbody></table><script>{_SCRIPT}</script></body></html>\n")
    return "".join(parts)


def busbw_histogram_svg(values: list[float], outlier_hosts: set[str]) -> str:
    """An inline SVG histogram of bus bandwidth with the fleet median marked."""
    width, height, margin = 640, 170, 28
    low, high = min(values), max(values)
    bins = max(5, min(40, int(math.sqrt(len(values))) + 1))
    span = high - low or 1.0
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, int((value - low) / span * bins))] += 1
    tallest = max(counts)
    bar_width = (width - 2 * margin) / bins
    median = statistics.median(values)
    parts = [f"<svg id=\"busbw-histogram\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" role=\"img\">"]
    for index, count in enumerate(counts):
        if not count:
            continue
        bar_height = (height - 2 * margin) * count / tallest
        x = margin + index * bar_width
        y = height - margin - bar_height
        bin_low = low + span * index / bins
        bin_high = low + span * (index + 1) / bins
        parts.append(
            f"<rect class=\"bar\" x=\"{x:.1f}\" y=\"{y:.1f}\" width=\"{max(bar_width - 1, 1):.1f}\" height=\"{bar_height:.1f}\" fill=\"#1565c0\">"
            f"<title>{bin_low:.1f}–{bin_high:.1f} GB/s: {_nodes(count)}</title></rect>"
        )
    median_x = margin + (median - low) / span * (width - 2 * margin)
    parts.append(f"<line x1=\"{median_x:.1f}\" x2=\"{median_x:.1f}\" y1=\"{margin - 6}\" y2=\"{height - margin}\" stroke=\"#c62828\" stroke-dasharray=\"4 3\"/>")
    parts.append(f"<text x=\"{median_x + 3:.1f}\" y=\"{margin - 8}\">median {median:.1f}</text>")
    parts.append(f"<text x=\"{margin}\" y=\"{height - 8}\">{low:.1f}</text>")
    parts.append(f"<text x=\"{width - margin}\" y=\"{height - 8}\" text-anchor=\"end\">{high:.1f}</text>")
    parts.append(f"<text x=\"{width / 2:.0f}\" y=\"{height - 8}\" text-anchor=\"middle\">{_nodes(len(values))}, {len(outlier_hosts)} low outliers</text>")
    parts.append("</svg>")
    return "".join(parts)


RENDERERS = {"text": render_text, "json": render_json, "html": render_html}
