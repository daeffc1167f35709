"""Fleet-relative outliers: nodes that pass their absolute thresholds but sit far from their peers.

A robust z-score, 0.6745 * (x - median) / MAD (Iglewicz and Hoaglin), is not dragged
by the outliers themselves the way mean/stddev is. When more than half the fleet has
the same value (error-counter growth is usually 0 everywhere) the MAD is 0; then the
mean absolute deviation, scaled to match (1.2533), stands in. A node is flagged only
when it is also far in absolute or relative terms, so a very tight fleet does not
flag 0.5 % noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from netdoctor.fleet.model import BUSBW_METRIC, ERROR_GROWTH_METRIC, PHY_BER_METRIC, NodeSummary
from netdoctor.records import record

DEFAULT_THRESHOLD = 3.5
MIN_SAMPLES = 5

_MAD_SCALE = 0.6745
_MEAN_AD_SCALE = 1.2533


@record(frozen=True)
class OutlierRule:
    metric: str
    direction: str                     # "low": only low values are bad; "high": only high ones
    min_relative_deviation: float = 0.0
    min_absolute_deviation: float = 0.0


DEFAULT_RULES = (
    # Bus bandwidth below the fleet by more than 5 %: a slow rail, a PCIe downgrade, a bad cable.
    OutlierRule(BUSBW_METRIC, "low", min_relative_deviation=0.05),
    # Error counters growing where the rest of the fleet is quiet.
    OutlierRule(ERROR_GROWTH_METRIC, "high", min_absolute_deviation=1.0),
    # A worst-port pre-FEC BER a decade or more above the fleet's: a marginal link, still up.
    OutlierRule(PHY_BER_METRIC, "high", min_absolute_deviation=1.0),
)


@record(frozen=True)
class Outlier:
    host: str
    metric: str
    value: float
    fleet_median: float
    robust_z: float

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "metric": self.metric,
            "value": round(self.value, 3),
            "fleet_median": round(self.fleet_median, 3),
            "robust_z": round(self.robust_z, 2),
        }


def robust_z_scores(values: Sequence[float]) -> tuple[float, list[float]]:
    """The median and each value's robust z-score (0.0 everywhere when all values are equal)."""
    median = statistics.median(values)
    deviations = [abs(value - median) for value in values]
    mad = statistics.median(deviations)
    if mad > 0:
        scale = mad / _MAD_SCALE
    else:
        mean_deviation = sum(deviations) / len(deviations)
        if mean_deviation == 0:
            return median, [0.0] * len(values)
        scale = mean_deviation * _MEAN_AD_SCALE
    return median, [(value - median) / scale for value in values]


def find_outliers(
    nodes: Iterable[NodeSummary],
    threshold: float = DEFAULT_THRESHOLD,
    rules: Sequence[OutlierRule] = DEFAULT_RULES,
    min_samples: int = MIN_SAMPLES,
) -> list[Outlier]:
    """Outliers per rule, most extreme first within each metric."""
    nodes = list(nodes)
    found: list[Outlier] = []
    for rule in rules:
        hosts: list[str] = []
        values: list[float] = []
        for node in nodes:
            value = node.metrics.get(rule.metric)
            if value is not None:
                hosts.append(node.host)
                values.append(value)
        if len(values) < min_samples:
            continue
        median, scores = robust_z_scores(values)
        flagged: list[Outlier] = []
        for host, value, score in zip(hosts, values, scores):
            if rule.direction == "low" and score > -threshold:
                continue
            if rule.direction == "high" and score < threshold:
                continue
            deviation = abs(value - median)
            if deviation < rule.min_absolute_deviation:
                continue
            if median and deviation < rule.min_relative_deviation * abs(median):
                continue
            flagged.append(Outlier(host, rule.metric, value, median, score))
        flagged.sort(key=lambda outlier: -abs(outlier.robust_z))
        found.extend(flagged)
    return found
