"""Numbers a node's report gives the fleet's outlier view, read from its findings' evidence.

Measurements, not verdicts: shadow findings count too, and a value that is not what it
claims to be (a bool, a string, a number out of range) is ignored, never the report's death.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# The one number the error-counters check writes per judged port (on the port's first
# finding, when it had a previous reading): the IBTA error counters' growth since then.
ERROR_GROWTH_EVIDENCE = "error_growth"
# The pre-FEC BER phy writes on each judged port's findings.
PHY_BER_EVIDENCE = "pre_fec_ber"
# A BER of 0 (nothing counted) reads as this log10.
PHY_BER_FLOOR = -18.0
_MAX_GROWTH = 10**300


def counter_growth(findings: list[Any], statuses: Mapping[str, int]) -> float | None:
    """The sum of error-counters' `error_growth` over the report; None where no port had one."""
    total = 0.0
    saw_counters = False
    for finding in findings:
        if finding.__class__ is not dict or finding.get("check") != "error-counters" \
                or finding.get("status") not in statuses:
            continue
        evidence = finding.get("evidence")
        if evidence.__class__ is dict:
            growth = evidence.get(ERROR_GROWTH_EVIDENCE)
            growth_kind = growth.__class__
            # An int beyond a float's range would raise when added: not a counter.
            if (growth_kind is int and -_MAX_GROWTH < growth < _MAX_GROWTH) or (growth_kind is float and math.isfinite(growth)):
                saw_counters = True
                total += growth
    return total if saw_counters else None


def worst_pre_fec_ber_log10(findings: list[Any]) -> float | None:
    """log10 of the highest `pre_fec_ber` of the report's phy findings (BERs span decades: a
    port one decade worse than the fleet is the marginal link a sweep ranks first); None where
    phy judged no port. A value that is no BER (not a finite number in [0, 1]) is ignored."""
    worst: float | None = None
    for finding in findings:
        if finding.__class__ is not dict or finding.get("check") != "phy":
            continue
        evidence = finding.get("evidence")
        value = evidence.get(PHY_BER_EVIDENCE) if evidence.__class__ is dict else None
        if value.__class__ in (int, float) and math.isfinite(value) and 0 <= value <= 1:
            worst = value if worst is None else max(worst, value)
    if worst is None:
        return None
    return round(max(math.log10(worst), PHY_BER_FLOOR), 3) if worst > 0 else PHY_BER_FLOOR
