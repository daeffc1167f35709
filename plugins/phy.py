"""`phy`: each compute port's physical layer, before the port state and error counters move.

A link whose pre-FEC (raw) BER climbs is still ACTIVE at full rate with clean port counters:
FEC corrects the errors until the errors come in bursts it cannot correct, and then the link
flaps in the middle of a job. The firmware counts what the port state hides:

* `mlxlink -c` (IB and RoCE): raw errors per lane and the raw BER (before FEC), effective
  errors and BER (after FEC), symbol errors and BER (IB), link-down and recovery counts, and the
  firmware's own verdict (Troubleshooting Info), all since the last counter clear, whose age it prints;
* `ethtool -S` (RoCE): corrected bits (pre-FEC BER at the port's rate), uncorrectable symbol
  errors, pause storms, discards on the priorities PFC protects, link-down events, since the
  driver loaded.

With an earlier reading of the same boot (the counter history error-counters keeps, or
`--baseline`) a BER is the growth over that interval: what the link does now. Without one,
mlxlink's own window (since its last clear) is used as printed, and an ethtool count over the
uptime gives a lower bound of its rate (the driver loaded after boot). Thresholds and their
references are in rules/default.toml `[phy]`; docs/checks.md (`phy`) explains each.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.checks.history import PHY_PREFIX, phy_reading
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import Hca, LinkLayer, Netdev, Port
from netdoctor.inventory.queries import unavailable_reason, virtual_function_note
from netdoctor.parsers.mlxlink_counters import PhyCounters
from netdoctor.util import duration_text
from netdoctor_plugins.phy_ethtool import judge_ethtool
from netdoctor_plugins.phy_rates import (
    PortRate,
    Window,
    ber_text,
    fec_limit,
    link_down_finding,
    port_rate,
    since_last_run,
    usable_interval,
)
from netdoctor_plugins.remedy_words import commands, netdev_of

CHECK_ID = "phy"
SINCE_CLEAR = f"{PHY_PREFIX}since_clear_s"


def _remedy(hca: Hca, port: Port, what: str) -> str:
    return (f"{what} on {port.name}: reseat or replace the cable/transceiver of {port.name} (clean the "
            f"connectors of an optical link), then clear and re-read the counters: `mlxlink -d {hca.name} -c -e` "
            f"(`--pc` clears); check the switch side of the cable too; if it persists on a new cable, "
            f"`mlxlink -d {hca.name} --port_type` and the NIC's firmware")


def _mlxlink_window(ctx: CheckContext, phy: PhyCounters, rate: PortRate | None,
                    previous: Mapping[str, int | None] | None) -> Window:
    """The interval the BERs are judged over: since the last run where its reading is usable
    (same boot, not cleared since, long enough, the port's rate known), else mlxlink's own
    since-clear window (as printed)."""
    cumulative = Window(phy.since_clear_s, None, "since the counters were last cleared"
                        + (f" ({duration_text(phy.since_clear_s)} ago)" if phy.since_clear_s else ""))
    elapsed_s = usable_interval(ctx, previous)
    if elapsed_s is None or previous is None or rate is None:
        return cumulative
    # Cleared since the last run (the clear is younger than the interval): the counts are of the shorter window.
    if phy.since_clear_s is not None and phy.since_clear_s < elapsed_s - float(ctx.rule("min_window_s")):
        return cumulative
    deltas: dict[str, int] = {}
    for key, value in phy_reading(phy).items():
        before = previous.get(key)
        if key == SINCE_CLEAR or value is None or before is None:
            continue
        if value < before:
            return cumulative
        deltas[key.removeprefix(PHY_PREFIX)] = value - before
    if not deltas:
        return cumulative
    return since_last_run(ctx, elapsed_s, deltas)


def _raw_lanes(phy: PhyCounters, window: Window) -> list[int] | None:
    if window.deltas is not None:
        lanes = [window.deltas.get(f"raw_errors/{lane}") for lane in range(len(phy.raw_errors_per_lane or ()))]
        return None if any(value is None for value in lanes) else lanes   # type: ignore[return-value]
    return list(phy.raw_errors_per_lane) if phy.raw_errors_per_lane is not None else None


def _judge_mlxlink(ctx: CheckContext, hca: Hca, port: Port, phy: PhyCounters, rate: PortRate | None,
                   previous: Mapping[str, int | None] | None, evidence: dict[str, Any]) -> list[Finding]:
    findings: list[Finding] = []
    window = _mlxlink_window(ctx, phy, rate, previous)
    evidence.update(fec=phy.fec, window_s=round(window.seconds, 1) if window.seconds else None,
                    window=window.text, mlxlink_raw_ber=phy.raw_ber, mlxlink_effective_ber=phy.effective_ber)
    if window.seconds is not None and window.seconds < float(ctx.rule("min_window_s")):
        # A few errors right after a clear or a link-up are no rate: judged from the next run.
        evidence.setdefault("notes", []).append(f"counters cleared {window.seconds:.0f} s ago: too short a "
                                                "window for a BER")
        return findings
    bits = rate.bits(window.seconds) if rate is not None and window.seconds else None
    # After FEC: what reaches the link layer as errors (effective errors; IB's symbol errors likewise).
    post_fec: list[tuple[str, float, int | None]] = []
    for name, printed in (("effective_errors", phy.effective_ber), ("symbol_errors", phy.symbol_ber)):
        count = window.deltas.get(name) if window.deltas is not None else getattr(phy, name)
        # The count over the window where the rate is known; mlxlink's printed BER (one significant
        # digit) only where it is not.
        if bits and count is not None:
            post_fec.append((name, count / bits, count))
        elif window.deltas is None and printed is not None:
            post_fec.append((name, printed, count))
    limit = float(ctx.rule("effective_ber_limit"))
    worst = max(post_fec, key=lambda item: item[1], default=None)
    if worst is not None:
        name, ber, count = worst
        evidence["post_fec_ber"] = ber
        label = name.replace("_", " ")
        if ber > limit:
            findings.append(ctx.graded(
                ctx.severity("effective_ber_severity"), port.name,
                f"BER after FEC {ber_text(ber)} {window.text} (limit {limit:g}): {count if count is not None else '?'} "
                f"{label} FEC could not correct", evidence=dict(evidence), rule="effective_ber_limit",
                remedy=_remedy(hca, port, "errors after FEC")))
        elif window.deltas is not None and count:
            findings.append(ctx.graded(
                ctx.severity("effective_errors_severity"), port.name,
                f"{count} {label} after FEC {window.text} (BER {ber_text(ber)}, under the {limit:g} limit): a "
                "healthy link counts none", evidence=dict(evidence), rule="effective_errors_severity",
                remedy="watch it: run netdoctor again later; if it keeps growing: "
                       + _remedy(hca, port, "errors after FEC")))
    findings.extend(_judge_raw(ctx, hca, port, phy, rate, window, bits, evidence))
    link_downs = window.deltas.get("link_down") if window.deltas is not None else None
    if link_downs and port.link_layer is LinkLayer.ETHERNET and window.seconds:
        # On InfiniBand error-counters judges the port's own link_downed.
        findings.append(link_down_finding(ctx, port.name, port.name, link_downs, window,
                                          _remedy(hca, port, "link-down events")))
    if phy.status_opcode and port.is_active:
        findings.append(ctx.graded(
            ctx.severity("status_opcode_severity"), port.name,
            f"the NIC firmware's link diagnosis: opcode {phy.status_opcode}, "
            f"\"{phy.recommendation or 'no recommendation printed'}\"", evidence=dict(evidence),
            rule="status_opcode_severity", remedy=_remedy(hca, port, "the firmware reports a link problem")))
    return findings


def _judge_raw(ctx: CheckContext, hca: Hca, port: Port, phy: PhyCounters, rate: PortRate | None, window: Window,
               bits: float | None, evidence: dict[str, Any]) -> list[Finding]:
    """Raw (pre-FEC) BER against the FEC's correction limit: fail at it, warn at a fraction of it."""
    lanes = _raw_lanes(phy, window)
    if bits and lanes is not None:
        raw_ber: float | None = sum(lanes) / bits
    else:
        raw_ber = phy.raw_ber if window.deltas is None else None
    if raw_ber is None:
        return []
    evidence["pre_fec_ber"] = raw_ber
    if lanes and rate is not None and window.seconds and len(lanes) == rate.lanes:
        per_lane = [errors / rate.lane_bits(window.seconds) for errors in lanes]
        evidence["pre_fec_ber_per_lane"] = [float(f"{ber:.3g}") for ber in per_lane]
    fec = fec_limit(ctx, phy.fec, rate)
    if fec is None:
        evidence["fec_limit"] = None
        return []
    limit, fec_name = fec
    evidence["fec_limit"] = limit
    worst_lane = ""
    if "pre_fec_ber_per_lane" in evidence and len(evidence["pre_fec_ber_per_lane"]) > 1:
        values = evidence["pre_fec_ber_per_lane"]
        lane = max(range(len(values)), key=values.__getitem__)
        worst_lane = f"; worst lane {lane} at {ber_text(values[lane])}"
    warn_at = limit * float(ctx.rule("raw_ber_warn_fraction"))
    if raw_ber >= limit:
        status, rule, how = ctx.severity("raw_ber_fail_severity"), "raw_ber_fail_severity", "at or past"
    elif raw_ber >= warn_at:
        status, rule, how = ctx.severity("raw_ber_warn_severity"), "raw_ber_warn_fraction", "near"
    else:
        return []
    return [ctx.graded(
        status, port.name, f"BER before FEC {ber_text(raw_ber)} {window.text}{worst_lane}: {how} what {fec_name} "
        f"corrects ({limit:g}; warn from {warn_at:.2g}); errors FEC cannot correct and link flaps follow",
        evidence=dict(evidence), rule=rule, remedy=_remedy(hca, port, "a high BER before FEC"))]


def _netdevs_of(ctx: CheckContext, port: Port) -> list[Netdev]:
    """The netdev(s) whose ethtool counters are this port's: a RoCE LAG bond's slaves."""
    netdev = ctx.inventory.netdev(port.netdev) if port.netdev else None
    if netdev is None:
        return []
    slaves = [ctx.inventory.netdev(name) for name in netdev.bond_slaves]
    return [slave for slave in slaves if slave is not None] or [netdev]


def _unread(ctx: CheckContext, hca: Hca, port: Port) -> str | None:
    """Why nothing of this port's physical layer was read; None where something was."""
    netdevs = _netdevs_of(ctx, port) if port.link_layer is LinkLayer.ETHERNET else []
    if port.name in ctx.inventory.phy or any(netdev.stats is not None for netdev in netdevs):
        return None
    sources = [f"mlxlink-c-{hca.name}", *(f"ethtool-S-{netdev.name}" for netdev in netdevs)]
    return unavailable_reason(ctx.inventory, *sources)


def _judge_port(ctx: CheckContext, hca: Hca, port: Port) -> Iterator[Finding]:
    phy = ctx.inventory.phy.get(port.name)
    history = ctx.history
    rate = port_rate(port)
    evidence: dict[str, Any] = {"rate_gbps": rate.gbps if rate else None}
    netdevs = _netdevs_of(ctx, port) if port.link_layer is LinkLayer.ETHERNET else []
    with_stats = [netdev for netdev in netdevs if netdev.stats is not None]
    if not port.is_active:
        yield ctx.skip(port.name, "the link is down: no BER to judge (port-state judges the link)",
                       evidence={"state": str(port.state) if port.state else None})
        return
    findings: list[Finding] = []
    if phy is not None:
        previous = history.ports.get(port.name) if history is not None else None
        findings += _judge_mlxlink(ctx, hca, port, phy, rate, previous, evidence)
    # mlxlink's BERs stand for the one link it read; a RoCE LAG's slaves are each their own link
    # (mlxlink -d on the bond device reads its first PF only), so their ethtool BERs are judged.
    mlxlink_read = phy is not None and len(netdevs) == 1
    for netdev in with_stats:
        findings += judge_ethtool(ctx, port, netdev, rate, evidence, mlxlink_read=mlxlink_read)
    if findings:
        yield from sorted(findings, key=lambda finding: finding.status is not Status.FAIL)
        return
    parts = []
    if "pre_fec_ber" in evidence:
        parts.append(f"BER before FEC {ber_text(evidence['pre_fec_ber'])}")
    if "post_fec_ber" in evidence:
        parts.append(f"after FEC {ber_text(evidence['post_fec_ber'])}")
    window = evidence.get("window")
    summary = (", ".join(parts) + (f" {window}" if window and parts else "")) or "no physical-layer errors counted"
    notes = evidence.get("notes")
    yield ctx.passed(port.name, summary + (f"; {'; '.join(notes)}" if notes else ""), evidence=evidence)


@check(CHECK_ID, "each compute port's physical layer: BER before and after FEC, symbol errors, pause storms, "
                 "discards on the lossless priorities (mlxlink -c, ethtool -S), by growth since the last run",
       needs=("rdma", "phy"), order=42)
def phy(ctx: CheckContext) -> Iterator[Finding]:
    unread: list[tuple[str, str]] = []
    devices: dict[str, str] = {}        # port -> its RDMA device, for the unread ones
    for hca, port, port_class in ctx.pack.classified_ports(ctx.inventory):
        through_pf = virtual_function_note(ctx.inventory, hca)
        if through_pf is not None:
            yield ctx.skip(port.name, through_pf, evidence={"physical_function": hca.physical_function})
        elif port_class is not None and port_class.role != "compute":
            yield ctx.skip(port.name, f"port class '{port_class.name}' is not a compute rail (role {port_class.role}): "
                                      "its physical layer is not judged",
                           evidence={"port_class": port_class.name, "role": port_class.role})
        elif port.link_layer not in (LinkLayer.INFINIBAND, LinkLayer.ETHERNET) or is_efa(hca):
            yield ctx.skip(port.name, "not an InfiniBand or RoCE port (EFA, iWARP): no PHY counters read")
        elif (why := _unread(ctx, hca, port)) is not None:
            unread.append((port.name, why))
            devices[port.name] = hca.name
        else:
            yield from _judge_port(ctx, hca, port)
    if unread and not ctx.inventory.phy and not any(netdev.stats for netdev in ctx.inventory.netdevs):
        # Nothing read at all (no MFT, not root): one finding, not one per port.
        yield ctx.unknown("node", f"no physical-layer readings ({len(unread)} compute ports): {unread[0][1]}",
                          evidence={"ports": [name for name, _ in unread]},
                          remedy=_unread_remedy(ctx, [name for name, _ in unread], devices))
    else:
        for name, why in unread:
            yield ctx.unknown(name, f"physical layer of {name} not read: {why}",
                              remedy=_unread_remedy(ctx, [name], devices))


def _unread_remedy(ctx: CheckContext, ports: list[str], devices: Mapping[str, str]) -> str:
    """Run as root with MFT, and the commands that read these ports' physical layer."""
    netdevs = [name for port in ports if (found := ctx.inventory.port(port)) is not None
               and found.link_layer is LinkLayer.ETHERNET and (name := netdev_of(ctx.inventory, found))]
    ethtool = (f"; `ethtool -S` reads RoCE netdevs without it: {commands('`ethtool -S {}`', netdevs)}"
               if netdevs else "")
    return ("run netdoctor as root with NVIDIA MFT installed: "
            f"{commands('`mlxlink -d {} -c`', [devices[port] for port in ports])}{ethtool}")
