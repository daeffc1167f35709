"""Fleet report renderers: text for terminals, JSON (CONTRACT §5), a self-contained HTML page."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from netdoctor.fleet.model import BUSBW_METRIC, GRADE_ORDER, NodeGrade, NodeSummary
from netdoctor.fleet.probe_render import probe_html, probe_text_lines
from netdoctor.fleet.report import FleetReport
from netdoctor.fleet.svg import busbw_dotplot_svg, busbw_histogram_svg
from netdoctor.textsafe import safe_text

# Text output lists at most this many nodes per section, then folds the rest.
_TEXT_LIST_LIMIT = 100

# A section's first heading with an id: the contents line links to it.
_HEADING = re.compile(r'<h2 id="([\w-]+)">([^<]*)</h2>')

# (The text and HTML parts and host folding, with ClusterShell, are imported where a text or HTML page is
# rendered: ~20 ms that `--format json` of a large fleet does not spend.)

_PROBLEM_GRADES = (NodeGrade.FAIL, NodeGrade.UNREACHABLE, NodeGrade.INVALID)
_ATTENTION_GRADES = (NodeGrade.UNKNOWN, NodeGrade.WARN)


def _line_encoder() -> Callable[[Any], str]:
    """`json.dumps` with its defaults, from one C encoder made once: `json.dumps` makes one per call,
    ~4 us, a third of the time for 10,000 nodes' lines (benchmarks/results/fleet.md). The same
    encoder, arguments and bytes (tests/test_fleet_render_json.py), but no check for circular
    references (the report has none); `json.dumps` where the interpreter has no C encoder."""
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if make_encoder is None:
        return json.dumps
    encode = make_encoder(None, json.JSONEncoder().default, json.encoder.encode_basestring_ascii, None, ": ", ", ",
                          False, False, True)
    return lambda value: "".join(encode(value, 0))


_json_line = _line_encoder()


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
            lines.append(f"  {_json_line(key)}: [")
            lines.append(",\n".join(["    " + _json_line(item) for item in value]))
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {_json_line(key)}: {_json_line(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_text(report: FleetReport) -> str:
    from netdoctor.fleet.text_sections import changes_lines, domain_lines, drift_lines, rail_lines
    lines: list[str] = []
    counts = report.counts
    lines.append(f"netdoctor fleet: {_nodes(len(report.nodes))} (generated {report.generated_at})")
    lines.append("  " + "  ".join(f"{grade} {counts[grade]}" for grade in counts))
    # What an on-call engineer reads first: the news since the previous report.
    lines += changes_lines(report.changes)
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
    lines += drift_lines(report.drift)
    lines += rail_lines(report.rails)
    lines += domain_lines(report.nvlink_domains)
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
    from netdoctor.fleet.views import fold_hosts
    return safe_text(fold_hosts(hosts))


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
td.hosts{max-width:90ch;overflow-wrap:anywhere;font:11px/1.3 ui-monospace,monospace}
.st{display:inline-block;padding:0 5px;border-radius:3px;color:#fff}.st.s-warn{color:#000}
#drift tr.minority td,#drift tr.below td,#rails tr.odd td,#nvlink-domains tr.odd td{background:#fff3e0}
#grid tr.fold td.host{font-weight:400;font-style:italic}
.note{color:#616161;margin:2px 0}
#busbw-dots .d-fail{fill:var(--fail)}#busbw-dots .d-warn{fill:var(--warn)}#busbw-dots .d-unknown{fill:var(--unknown)}
#busbw-dots .d-out{fill:#fff;stroke:var(--fail);stroke-width:2}#busbw-dots text.label{fill:var(--fail)}
#contents{margin:4px 0;color:#616161}#contents a{color:#1565c0}
#wrong td{vertical-align:top}#fleet-wrong{margin:4px 0;padding-left:18px}
details>summary{cursor:pointer;color:#424242;margin:2px 0}ul.alike{margin:2px 0;padding-left:18px}
"""

_SCRIPT = """
(function(){
  var q=document.getElementById('q'),only=document.getElementById('only'),shown=document.getElementById('shown');
  var rows=Array.prototype.slice.call(document.querySelectorAll('#grid tbody tr'));
  var text=rows.map(function(r){return r.textContent.toLowerCase()+' '+r.getAttribute('data-g');});
  var weight=rows.map(function(r){return +(r.getAttribute('data-n')||1);});
  function apply(){
    var terms=q.value.toLowerCase().split(/\\s+/).filter(Boolean),problems=only.checked,n=0;
    for(var i=0;i<rows.length;i++){
      var ok=!(problems&&rows[i].getAttribute('data-g')==='pass');
      for(var j=0;ok&&j<terms.length;j++){ok=text[i].indexOf(terms[j])>=0;}
      rows[i].style.display=ok?'':'none'; if(ok)n+=weight[i];
    }
    shown.textContent=n;
  }
  q.addEventListener('input',apply);only.addEventListener('change',apply);apply();
})();
"""


def render_html(report: FleetReport) -> str:
    """What is wrong and the node × check grid first; then what changed, the traffic, the bus
    bandwidth, the fleet against itself (what agrees everywhere folded away)."""
    from netdoctor.fleet.html_parts import changes_html, domains_html, drift_html, escape, rails_html, wrong_html
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
    sections = [wrong_html(report), _grid_section(report), changes_html(report.changes), probe_html(report.probe),
                _busbw_section(report), _tallies_section(report), drift_html(report.drift), rails_html(report.rails),
                domains_html(report.nvlink_domains)]
    sections = [section for section in sections if section]
    parts.append(_contents(sections))
    parts += sections
    parts.append(f"<script>{_SCRIPT}</script></body></html>\n")
    return "".join(parts)


def _contents(sections: list[str]) -> str:
    """A line of links to the page's sections, by their headings."""
    links = [(match[1], match[2].split(" (")[0]) for section in sections for match in [_HEADING.search(section)] if match]
    return ("<nav id=\"contents\">" + " · ".join(f"<a href=\"#{anchor}\">{title}</a>" for anchor, title in links)
            + "</nav>") if links else ""


def _grid_section(report: FleetReport) -> str:
    from netdoctor.fleet.html_parts import folded_note, grid_html
    return (
        "<h2 id=\"grid-heading\">Nodes × checks</h2><div id=\"controls\"><input id=\"q\" type=\"search\" "
        "placeholder=\"filter: host, grade, check or text (space = and)\" autocomplete=\"off\"> "
        "<label><input id=\"only\" type=\"checkbox\"> only nodes that did not pass</label> "
        f"&nbsp; <span id=\"shown\">{len(report.nodes)}</span> of {len(report.nodes)} shown</div>"
        + folded_note(report) + grid_html(report))


def _busbw_section(report: FleetReport) -> str:
    from netdoctor.fleet.html_parts import escape
    parts: list[str] = []
    busbw = [node.metrics[BUSBW_METRIC] for node in report.nodes if BUSBW_METRIC in node.metrics]
    if busbw:
        parts.append("<h2 id=\"busbw-heading\">NCCL bus bandwidth (GB/s) across the fleet</h2>")
        parts.append(busbw_histogram_svg(busbw, {o.host for o in report.outliers if o.metric == BUSBW_METRIC}))
        parts.append("<h2>NCCL bus bandwidth (GB/s) per node</h2>")
        parts.append(busbw_dotplot_svg(report.nodes, report.outliers, report.outlier_threshold))
    if report.outliers:
        parts.append(f"<h2 id=\"outliers-heading\">Fleet outliers (robust z-score beyond {report.outlier_threshold:g})</h2>"
                     "<table class=\"small\" id=\"outliers\">")
        parts.append("<tr><th>host</th><th>metric</th><th>value</th><th>fleet median</th><th>z</th></tr>")
        for outlier in report.outliers:
            parts.append(
                f"<tr><td>{escape(outlier.host)}</td><td>{escape(outlier.metric)}</td><td>{outlier.value:g}</td>"
                f"<td>{outlier.fleet_median:g}</td><td>{outlier.robust_z:+.1f}</td></tr>"
            )
        parts.append("</table>")
    return "".join(parts)


def _tallies_section(report: FleetReport) -> str:
    from netdoctor.fleet.html_parts import escape
    tallies = report.check_tallies()
    if not tallies:
        return ""
    parts = ["<h2 id=\"tallies-heading\">Checks failing most</h2><table class=\"small\" id=\"tallies\"><tr><th>check</th>"
             "<th>fail</th><th>unknown</th><th>warn</th></tr>"]
    for tally in tallies:
        parts.append(f"<tr><td>{escape(tally.check)}</td><td>{tally.fail}</td><td>{tally.unknown}</td><td>{tally.warn}</td></tr>")
    parts.append("</table>")
    return "".join(parts)


RENDERERS = {"text": render_text, "json": render_json, "html": render_html}
