"""`fleet probe`'s part of the fleet report: suspects and pairs (text), and the pair matrix
as a heatmap (HTML, up to MATRIX_LIMIT nodes; beyond, the pairs that did not pass as a
table). Node text is escaped here as everywhere in the fleet report."""

from __future__ import annotations

import html
from typing import Any

from netdoctor.textsafe import safe_text

MATRIX_LIMIT = 64
_SHADES = {"pass": "#2e7d32", "warn": "#f9a825", "fail": "#c62828", "unknown": "#757575", "unreachable": "#4a148c"}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _pair_text(pair: dict[str, Any]) -> str:
    busbw, expected, median = pair.get("busbw_gbps"), pair.get("expected_gbps"), pair.get("round_median_gbps")
    measured = f"{busbw:g} GB/s" if _number(busbw) else "no result"
    # A null expectation is said as such, never shown as a number (the measured one least of all).
    of = (f" of {expected:g}" if _number(expected) else
          f" (no expectation; round median {median:g})" if _number(median) else " (no expectation)")
    why = f": {pair['why']}" if pair.get("why") else ""
    return (f"round {pair.get('round')}  {'+'.join(map(str, pair.get('hosts', [])))}  {measured}{of}  "
            f"{pair.get('transport') or ''}  {pair.get('status')}{why}")


def _suspect(item: dict[str, Any]) -> str:
    """Whom a suspect names, once: its host, else its leaf (CONTRACT 6.3: a leaf suspect has no
    host); its subject (a rail) only where it is another name the why does not already say."""
    who = str(item.get("host") or item.get("leaf") or "")
    subject = str(item.get("subject") or "")
    if subject and subject != who and subject not in str(item.get("why") or ""):
        return f"{who} {subject}".strip()
    return who


def probe_text_lines(probe: dict[str, Any]) -> list[str]:
    pairs, suspects = probe.get("pairs", []), probe.get("suspects", [])
    if not pairs:
        return []
    lines = ["", f"Traffic between nodes ({len(pairs)} groups in {len(probe.get('rounds', []))} rounds):"]
    if suspects:
        lines += [f"  suspect {item.get('kind')}: {_suspect(item)}: {item.get('why', '')}" for item in suspects]
    else:
        lines.append("  no suspect: no node was slow with every partner")
    slow = [pair for pair in pairs if pair.get("status") != "pass"]
    lines += [f"  {_pair_text(pair)}" for pair in slow[:40]]
    if len(slow) > 40:
        lines.append(f"  ... and {len(slow) - 40} more groups that did not pass")
    return [safe_text(line) for line in lines]


def probe_html(probe: dict[str, Any]) -> str:
    pairs, suspects = probe.get("pairs", []), probe.get("suspects", [])
    if not pairs:
        return ""
    escape = lambda text: html.escape(safe_text(str(text)))   # noqa: E731
    parts = ["<h2 id=\"traffic-heading\">Traffic between nodes</h2><ul id=\"suspects\">"]
    parts += [f"<li><b>{escape(item.get('kind'))}</b> {escape(_suspect(item))}: {escape(item.get('why', ''))}</li>"
              for item in suspects] or ["<li>no suspect</li>"]
    parts.append("</ul>")
    hosts = sorted({host for pair in pairs if pair.get("round") != 3 for host in pair.get("hosts", [])})
    expected = any(_number(pair.get("expected_gbps")) for pair in pairs)
    if len(hosts) <= MATRIX_LIMIT:
        cells: dict[tuple[str, str], dict[str, Any]] = {}
        for pair in pairs:
            members = pair.get("hosts", [])
            for first in members:
                for second in members:
                    if first != second:
                        cells[(first, second)] = pair
        parts.append("<p class=\"note\" id=\"pair-matrix-note\">"
                     + ("cells: % of the expected bus bandwidth" if expected else
                        "cells: GB/s measured; no expectation (no rail rate in the nodes' reports, no [fleet-probe] "
                        "expected_busbw_gbps): judged against the round's median") + "</p>")
        parts.append("<table id=\"pair-matrix\" class=\"small\"><tr><th></th>"
                     + "".join(f"<th class=\"check\">{escape(host)}</th>" for host in hosts) + "</tr>")
        for row in hosts:
            parts.append(f"<tr><td class=\"host\">{escape(row)}</td>")
            for column in hosts:
                pair = cells.get((row, column))
                if pair is None:
                    parts.append("<td></td>")
                    continue
                busbw, of = pair.get("busbw_gbps"), pair.get("expected_gbps")
                label = (f"{busbw / of:.0%}" if _number(busbw) and _number(of) and of else
                         f"{busbw:.3g}" if _number(busbw) and not expected else "-")
                parts.append(f"<td data-status=\"{escape(pair.get('status'))}\" title=\"{escape(_pair_text(pair))}\" "
                             f"style=\"background:{_SHADES.get(pair.get('status'), '#757575')};color:#fff\">{label}</td>")
            parts.append("</tr>")
        parts.append("</table>")
    else:
        slow = [pair for pair in pairs if pair.get("status") != "pass"][:500]
        parts.append("<table id=\"pairs\" class=\"small\"><tr><th>group</th><th>status</th></tr>")
        parts += [f"<tr><td>{escape(_pair_text(pair))}</td><td>{escape(pair.get('status'))}</td></tr>" for pair in slow]
        parts.append("</table>")
    return "".join(parts)
