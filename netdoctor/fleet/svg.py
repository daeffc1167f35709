"""Inline SVG charts of the fleet's NCCL bus bandwidth: a histogram, and a dot per node.

The dot plot draws every node that has the metric, in host name order (neighbours in name
are usually neighbours in the rack), with the fleet median and the band within which
`outliers.py` does not flag a node (median ± threshold × its robust scale). It stays small
at 10,000 nodes: the passing dots are one `<path>` of zero-length segments (round caps draw
them as dots), each a relative move in tenths of a pixel (`m.1-2.3h0`, ~9 bytes); only the
nodes that did not pass, or are outliers, are `<circle>`s with a tooltip, and only outliers
get a label.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Sequence

from netdoctor.fleet.model import BUSBW_METRIC, NodeGrade, NodeSummary
from netdoctor.fleet.outliers import MIN_SAMPLES, Outlier, robust_z_scores
from netdoctor.textsafe import safe_text
from netdoctor.util import natural_key

_WIDTH, _HEIGHT = 960, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 16, 14, 36
# Outliers named on the plot (the most extreme first); the rest keep their tooltip.
MAX_LABELS = 40


def _escape(text: str) -> str:
    return html.escape(safe_text(text))


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count:,} nodes"


def outlier_band(values: Sequence[float], threshold: float) -> tuple[float, float]:
    """(median, half width of the band no outlier is inside: threshold × the robust scale).

    The scale is read back from `robust_z_scores` itself (z = (x - median) / scale for the
    farthest value), so the band is the outlier rule's own, MAD and its stand-in alike."""
    median, scores = robust_z_scores(values)
    farthest = max(range(len(values)), key=lambda index: abs(scores[index]))
    score = scores[farthest]
    scale = (values[farthest] - median) / score if score else 0.0
    return median, threshold * abs(scale)


def _tenths(count: int) -> str:
    """A length given in tenths of a pixel, as short as SVG reads it: 12, 1.5, .5, -.5."""
    whole, tenth = divmod(abs(count), 10)
    text = f"{whole}.{tenth}" if tenth else str(whole)
    if text.startswith("0."):
        text = text[1:]
    return f"-{text}" if count < 0 and text != "0" else text


def busbw_dotplot_svg(nodes: Sequence[NodeSummary], outliers: Sequence[Outlier], threshold: float) -> str:
    """One dot per node with an NCCL bus bandwidth, the median line, the outlier band shaded."""
    plotted = sorted(((node.host, node.metrics[BUSBW_METRIC], node.grade) for node in nodes if BUSBW_METRIC in node.metrics),
                     key=lambda item: natural_key(item[0]))
    if not plotted:
        return ""
    values = [value for _, value, _ in plotted]
    banded = len(values) >= MIN_SAMPLES
    median, half_band = outlier_band(values, threshold) if banded else (statistics.median(values), 0.0)
    low, high = min(values), max(values)
    if banded and math.isfinite(half_band):
        low, high = min(low, max(median - half_band, 0.0 if low >= 0 else -math.inf)), max(high, median + half_band)
    span = high - low or max(abs(high) * 0.05, 1.0)
    low, high = low - span * 0.04, high + span * 0.04
    plot_width, plot_height = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    step = plot_width / len(plotted)

    def y_of(value: float) -> float:
        return _TOP + (high - value) / (high - low) * plot_height

    flagged = {outlier.host: outlier for outlier in outliers if outlier.metric == BUSBW_METRIC}
    labelled = {outlier.host for outlier in list(flagged.values())[:MAX_LABELS]}
    parts = [f"<svg id=\"busbw-dots\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{_WIDTH}\" height=\"{_HEIGHT}\" "
             f"role=\"img\" data-nodes=\"{len(plotted)}\" aria-label=\"NCCL bus bandwidth per node\">"]
    if banded and half_band > 0:
        top, bottom = max(y_of(median + half_band), _TOP), min(y_of(median - half_band), _TOP + plot_height)
        parts.append(f"<rect class=\"band\" x=\"{_LEFT}\" y=\"{top:.1f}\" width=\"{plot_width}\" height=\"{bottom - top:.1f}\" "
                     f"fill=\"#1565c0\" fill-opacity=\".12\"><title>no outlier inside: median ± {threshold:g} × robust scale "
                     f"({median - half_band:.1f}–{median + half_band:.1f} GB/s)</title></rect>")
    median_y = y_of(median)
    parts.append(f"<line class=\"median\" x1=\"{_LEFT}\" x2=\"{_WIDTH - _RIGHT}\" y1=\"{median_y:.1f}\" y2=\"{median_y:.1f}\" "
                 f"stroke=\"#c62828\" stroke-dasharray=\"4 3\"/>")
    path: list[str] = []
    marks: list[str] = []
    last_x = last_y = None
    for position, (host, value, grade) in enumerate(plotted):
        x, y = _LEFT + (position + 0.5) * step, y_of(value)
        if grade == NodeGrade.PASS and host not in flagged:
            tenth_x, tenth_y = round(x * 10), round(y * 10)
            if last_x is None or last_y is None:
                path.append(f"M{_tenths(tenth_x)} {_tenths(tenth_y)}h0")
            else:
                dy = _tenths(tenth_y - last_y)
                path.append(f"m{_tenths(tenth_x - last_x)}{'' if dy.startswith('-') else ' '}{dy}h0")
            last_x, last_y = tenth_x, tenth_y
            continue
        outlier = flagged.get(host)
        kind = "out" if outlier else str(grade)
        why = f", robust z {outlier.robust_z:+.1f}" if outlier else ""
        marks.append(f"<circle class=\"d-{kind}\" cx=\"{x:.1f}\" cy=\"{y:.1f}\" r=\"{3.5 if outlier else 2.5}\">"
                     f"<title>{_escape(host)}: {value:g} GB/s ({grade}{why})</title></circle>")
        if host in labelled:
            marks.append(f"<text class=\"label\" x=\"{x + 5:.1f}\" y=\"{y + 3:.1f}\">{_escape(host)}</text>")
    if path:
        parts.append(f"<path class=\"pass-dots\" d=\"{''.join(path)}\" fill=\"none\" stroke=\"#1565c0\" stroke-opacity=\".6\" "
                     f"stroke-width=\"3\" stroke-linecap=\"round\"/>")
    parts += marks
    bottom_y = _HEIGHT - _BOTTOM
    parts.append(f"<text x=\"{_LEFT - 4}\" y=\"{_TOP + 8}\" text-anchor=\"end\">{high:.1f}</text>"
                 f"<text x=\"{_LEFT - 4}\" y=\"{median_y + 3:.1f}\" text-anchor=\"end\">{median:.1f}</text>"
                 f"<text x=\"{_LEFT - 4}\" y=\"{bottom_y:.1f}\" text-anchor=\"end\">{low:.1f}</text>"
                 f"<text x=\"{_LEFT}\" y=\"{bottom_y + 14}\">{_escape(plotted[0][0])}</text>"
                 f"<text x=\"{_WIDTH - _RIGHT}\" y=\"{bottom_y + 14}\" text-anchor=\"end\">{_escape(plotted[-1][0])}</text>"
                 f"<text x=\"{_WIDTH / 2:.0f}\" y=\"{_HEIGHT - 6}\" text-anchor=\"middle\">{_nodes(len(plotted))} in name order, "
                 f"GB/s; dashed: median {median:.1f}; shaded: no outlier inside (robust z within ±{threshold:g}); "
                 f"{len(flagged)} low outlier{'' if len(flagged) == 1 else 's'}</text></svg>")
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
