"""`phy` on RoCE netdevs: the driver's PHY, pause and per-priority counters (`ethtool -S`).

mlx5 counter meanings are the kernel's (Documentation/networking/device_drivers/ethernet/
mellanox/mlx5/counters.rst): `rx_corrected_bits_phy` bits FEC corrected (pre-FEC BER =
corrected bits / bits received), `rx_pcs_symbol_err_phy` symbol errors FEC did not correct,
`rx_err_lane_N_phy` errors before FEC per lane, `tx_pause_storm_warning_events` / `_error_events`
the NIC sending pauses so long that it hit its timeout and stopped sending them (a stalled
receiver holding the fabric), `rx_prioN_*discard*`
packets dropped on priority N. The driver reads running totals from the hardware, never
cleared: growth needs the earlier reading; without one a count over the uptime is a lower
bound of its rate (the driver loaded after boot).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netdoctor.checks import CheckContext, Finding, Status
from netdoctor.checks.history import netdev_key
from netdoctor.inventory.model import Netdev, Port
from netdoctor.util import duration_text
from netdoctor_plugins.phy_rates import (
    PortRate,
    Window,
    ber_text,
    fec_limit,
    link_down_finding,
    since_last_run,
    usable_interval,
)

DISCARDS = ("discards", "buf_discard", "cong_discard")
# 32-bit in mlx5 (en_stats.c): a decrease is a wrap, not a driver reload; its growth is lost this once.
WRAPPING = frozenset({"link_down_events_phy"})


def _window(ctx: CheckContext, netdev: Netdev) -> Window:
    stats = netdev.stats or {}
    uptime = ctx.inventory.uptime_s
    cumulative = Window(uptime, None, "since the driver loaded" + (f" (at most {duration_text(uptime)})" if uptime else ""))
    previous = ctx.history.ports.get(netdev_key(netdev.name)) if ctx.history is not None else None
    elapsed_s = usable_interval(ctx, previous)
    if elapsed_s is None or previous is None:
        return cumulative
    deltas = {}
    for name, value in stats.items():
        before = previous.get(name)
        if before is None:
            continue
        if value < before:
            if name in WRAPPING:
                continue           # judged again from the next run
            return cumulative      # the driver reloaded: the counts restarted, not an interval
        deltas[name] = value - before
    return since_last_run(ctx, elapsed_s, deltas)


def _lossless_priorities(netdev: Netdev) -> tuple[list[int], str]:
    """The priorities PFC protects: mlnx_qos's; else those the driver counts pauses on (mlx5
    prints `rx_prioN_pause` only for PFC-enabled priorities)."""
    if netdev.qos is not None:
        return list(netdev.qos.pfc_enabled), "mlnx_qos"
    stats = netdev.stats or {}
    return [prio for prio in range(8) if f"rx_prio{prio}_pause" in stats], "the driver's pause counters"


def _count(window: Window, stats: Mapping[str, int], name: str) -> int | None:
    if window.deltas is not None:
        return window.deltas.get(name)
    return stats.get(name)


def _worst_lane(window: Window, stats: Mapping[str, int], rate: PortRate, evidence: dict[str, Any]) -> str:
    """Each lane's pre-FEC BER from `rx_err_lane_N_phy` (errors before FEC per lane); the worst named."""
    lanes = [_count(window, stats, f"rx_err_lane_{lane}_phy") for lane in range(rate.lanes)]
    if not window.seconds or any(errors is None for errors in lanes) or rate.lanes < 2:
        return ""
    per_lane = [float(f"{errors / rate.lane_bits(window.seconds):.3g}") for errors in lanes]  # type: ignore[operator]
    evidence["pre_fec_ber_per_lane"] = per_lane
    worst = max(range(len(per_lane)), key=per_lane.__getitem__)
    return f"; worst lane {worst} at {ber_text(per_lane[worst])}"


def _remedy(netdev: Netdev, port: Port, what: str) -> str:
    return (f"{what} on {netdev.name} ({port.name}): reseat or replace its cable/transceiver, compare with "
            f"the switch port's counters, and re-read: `ethtool -S {netdev.name} | grep -E 'phy|pause|prio'`"
            f" and `mlxlink -d {port.hca} -c -e`")


def judge_ethtool(ctx: CheckContext, port: Port, netdev: Netdev, rate: PortRate | None, evidence: dict[str, Any],
                  *, mlxlink_read: bool) -> list[Finding]:
    stats = netdev.stats or {}
    window = _window(ctx, netdev)
    growth = window.deltas is not None
    at_least = "" if growth else "at least "
    evidence.setdefault("window", window.text)
    shown = {name: value for name, value in stats.items() if name.endswith("_phy") or "pause_storm" in name}
    evidence.setdefault("ethtool", {})[netdev.name] = shown
    findings: list[Finding] = []
    bits = rate.bits(window.seconds) if rate is not None and window.seconds else None

    def graded(severity: Status, summary: str, rule: str, remedy: str) -> None:
        findings.append(ctx.graded(severity, port.name, summary, evidence=dict(evidence), rule=rule,
                                   remedy=remedy))

    # BERs: mlxlink's reading of the same port is the firmware's own and stands where it was read.
    corrected = _count(window, stats, "rx_corrected_bits_phy")
    fec = fec_limit(ctx, None, rate)
    if not mlxlink_read and corrected is not None and bits and fec is not None and rate is not None:
        ber = corrected / bits
        evidence["pre_fec_ber"] = max(ber, evidence.get("pre_fec_ber", 0.0))
        limit, fec_name = fec
        warn_at = limit * float(ctx.rule("raw_ber_warn_fraction"))
        what = (f"BER before FEC {at_least}{ber_text(ber)} {window.text} ({corrected} corrected bits at "
                f"{rate.gbps:g} Gb/s){_worst_lane(window, stats, rate, evidence)}")
        if ber >= limit:
            graded(ctx.severity("raw_ber_fail_severity"), f"{what}: at or past what {fec_name} corrects ({limit:g})",
                   "raw_ber_fail_severity", _remedy(netdev, port, "a high BER before FEC"))
        elif ber >= warn_at:
            graded(ctx.severity("raw_ber_warn_severity"),
                   f"{what}: near what {fec_name} corrects ({limit:g}; warn from "
                   f"{warn_at:.2g})", "raw_ber_warn_fraction", _remedy(netdev, port, "a high BER before FEC"))
    uncorrected = _count(window, stats, "rx_pcs_symbol_err_phy")
    if not mlxlink_read and uncorrected is not None and bits:
        ber = uncorrected / bits
        evidence["post_fec_ber"] = max(ber, evidence.get("post_fec_ber", 0.0))
        limit = float(ctx.rule("effective_ber_limit"))
        if ber > limit:
            graded(ctx.severity("effective_ber_severity"), f"BER after FEC {at_least}{ber_text(ber)} {window.text}: "
                   f"{uncorrected} symbol errors FEC did not correct (limit {limit:g})", "effective_ber_limit",
                   _remedy(netdev, port, "errors after FEC"))
        elif growth and uncorrected:
            graded(ctx.severity("effective_errors_severity"),
                   f"{uncorrected} symbol errors FEC did not correct {window.text} "
                   f"(BER {ber_text(ber)}, under the {limit:g} limit): a healthy link counts none",
                   "effective_errors_severity", _remedy(netdev, port, "errors after FEC"))
    storms = _count(window, stats, "tx_pause_storm_error_events")
    if storms:
        key = "pause_storm_error_severity" if growth else "pause_storm_before_severity"
        severity = ctx.severity("pause_storm_error_severity") if growth else ctx.severity("pause_storm_before_severity")
        graded(severity, f"{storms} pause storm(s) {window.text} on {netdev.name}: the NIC sent pauses until its "
               "timeout and stopped (a receiver that stalls holds the whole lossless class of its link)", key,
               f"find what stalls the receiver (host memory pressure, a hung process, PCIe backpressure); "
               f"`ethtool -S {netdev.name} | grep pause` and the switch's PFC watchdog log")
    warnings = _count(window, stats, "tx_pause_storm_warning_events")
    if growth and warnings:
        graded(ctx.severity("pause_storm_warning_severity"),
               f"{warnings} pause-storm warning(s) {window.text} on {netdev.name}: "
               "the NIC sent pauses for a long time", "pause_storm_warning_severity",
               f"watch it; find what slows the receiver: `ethtool -S {netdev.name} | grep pause`")
    priorities, basis = _lossless_priorities(netdev)
    for prio in priorities:
        counts = [_count(window, stats, f"rx_prio{prio}_{kind}") for kind in DISCARDS]
        dropped = sum(count for count in counts if count)
        limit_key = "lossless_discards_per_hour" if growth else "lossless_discards_absolute"
        allowed = (float(ctx.rule("lossless_discards_per_hour")) * (window.seconds or 0) / 3600 if growth
                   else float(ctx.rule("lossless_discards_absolute")))
        if dropped > allowed:
            severity = (ctx.severity("lossless_discards_severity") if growth
                        else ctx.severity("lossless_discards_before_severity"))
            graded(severity, f"{dropped} packets dropped on lossless priority {prio} of {netdev.name} {window.text} "
                   f"(PFC is on there per {basis}): RoCE loses packets PFC should have held", limit_key,
                   f"check PFC headroom and the switch's PFC on priority {prio} (`mlnx_qos -i {netdev.name}`), "
                   f"and what drops: `ethtool -S {netdev.name} | grep prio{prio}`")
    link_downs = _count(window, stats, "link_down_events_phy")
    if growth and link_downs and not mlxlink_read:
        # Where mlxlink read the port its Link Down Counter is the same register: judged once.
        findings.append(link_down_finding(ctx, port.name, netdev.name, link_downs, window,
                                          _remedy(netdev, port, "link-down events")))
    return findings
