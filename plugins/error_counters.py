"""error-counters: port error counters by growth since the previous run, else by absolute level.

Reads Port.counters (sysfs `counters/` or `perfquery -x`), Port.hw_counters (mlx5
`hw_counters/`) and ctx.history (the previous reading: state file or --baseline). The
hardware counters only count up, saturate at their width instead of wrapping, and are
reset by reboots and by `perfquery -R`; so a saturated counter is `unknown` (growth cannot
be measured), and a counter that went down was cleared: it is judged by level, and said so.
`symbol_error` and `link_downed` are judged one way with or without history: their count in
a window (since the last run, else since boot) against ibqueryerrors' count and a rate.
See docs/checks.md (`error-counters`) for every threshold and the symbol-error BER derivation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import field
from typing import Any

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import Hca, LinkLayer, Port
from netdoctor.inventory.queries import unavailable_reason, virtual_function_note
from netdoctor.packs import PortClass
from netdoctor.records import record
from netdoctor.util import duration_text

HW_PREFIX = "hw_counters/"   # how netdoctor.checks.history keys hw counters in the history
PHYSICAL_REMEDY = ("physical-layer errors: reseat or replace the cable/transceiver, check `mlxlink -d {hca} -m` "
                   "(BER, FEC, eye), and the switch port's counters")


@record(frozen=True)
class CounterSpec:
    name: str
    bits: int           # the IBTA PortCounters width: the value it saturates at is 2**bits - 1
    meaning: str
    remedy: str

    @property
    def maximum(self) -> int:
        return 2 ** self.bits - 1


ERROR_COUNTERS = (
    CounterSpec("symbol_error", 16, "symbol errors on the wire (with FEC: errors FEC could not correct)",
                PHYSICAL_REMEDY),
    CounterSpec("link_downed", 8, "times the link went down", PHYSICAL_REMEDY
                + "; if the peer rebooted or a switch was serviced, confirm with the fabric team"),
    CounterSpec("link_error_recovery", 8, "link retrains (recovered without going down)", PHYSICAL_REMEDY),
    CounterSpec("port_rcv_errors", 16, "received packets with errors (CRC, malformed)", PHYSICAL_REMEDY),
    CounterSpec("port_rcv_remote_physical_errors", 16, "packets received marked bad by an upstream link (EBP)",
                "the physical fault is on another link of the path: run ibqueryerrors on the fabric"),
    CounterSpec("port_xmit_discards", 16, "packets discarded on transmit (link down, head-of-queue timeout)",
                "congestion or a stuck peer: check the peer/switch port and the fabric's congestion control"),
    CounterSpec("excessive_buffer_overrun_errors", 4, "receive buffer overruns (flow-control credit violations)",
                "flow control between the port and its peer is broken: check both ends' firmware and VL settings"),
    CounterSpec("local_link_integrity_errors", 4, "local physical errors above the link's integrity threshold",
                PHYSICAL_REMEDY),
)

# mlx5 hw_counters judged by growth only (they count since driver load, not since a clear).
HW_COUNTERS = (
    CounterSpec("out_of_sequence", 64, "packets received out of sequence (loss upstream; adaptive routing)",
                "packet loss on the path: check error-counters of the switch ports, PFC/ECN on RoCE"),
    CounterSpec("packet_seq_err", 64, "NAK-sequence errors received (the peer saw a gap: lost packets)",
                "packet loss on the path: check the fabric's error counters and congestion"),
    CounterSpec("local_ack_timeout_err", 64, "ACK timeouts on this side's QPs (retransmissions; job hangs)",
                "lost packets or an unresponsive peer: check the fabric, PFC on RoCE, and the peers' health"),
    CounterSpec("rnr_nak_retry_err", 64, "receiver-not-ready retries exhausted (QPs went to error)",
                "a peer did not post receive buffers in time: usually the application or an overloaded peer"),
    CounterSpec("out_of_buffer", 64, "packets dropped for lack of receive WQEs",
                "receivers are not keeping up: check CPU/IRQ affinity and the application's receive queues"),
    CounterSpec("roce_adp_retrans", 64, "RoCE adaptive retransmissions (timeouts on a lossy fabric)",
                "packet loss on the RoCE fabric: check PFC on the RDMA priority, ECN, and switch buffers"),
)
ETHERNET_ONLY = frozenset({"roce_adp_retrans"})
# AWS EFA hw_counters (amzn-drivers efa_verbs.c; port stats, and the device stats EFA drivers
# before r1.14 kept in one list), by growth only: they count since the driver loaded. EFA has
# no IBTA counters/ (no PMA), so these are all its link health there is.
EFA_REMEDY = ("EFA is judged through AWS's fabric: a node whose EFA counters climb alone is the suspect (stop and "
              "start the instance to move it to other hardware); counters climbing on many nodes at once point "
              "at the fabric or the job: compare with the fleet report and `fleet probe`")
EFA_COUNTERS = (
    CounterSpec("retrans_pkts", 64, "packets EFA's SRD transport retransmitted (loss on the path)", EFA_REMEDY),
    CounterSpec("retrans_timeout_events", 64, "retransmissions that timed out (a path or peer lost packets "
                "repeatedly)", EFA_REMEDY),
    CounterSpec("unresponsive_remote_events", 64, "peers that stopped answering", EFA_REMEDY),
    CounterSpec("impaired_remote_conn_events", 64, "connections to peers marked impaired", EFA_REMEDY),
    CounterSpec("rx_drops", 64, "packets the device dropped on receive", EFA_REMEDY),
    CounterSpec("rdma_read_wr_err", 64, "RDMA read work requests that failed", EFA_REMEDY),
    CounterSpec("rdma_write_wr_err", 64, "RDMA write work requests that failed", EFA_REMEDY),
    CounterSpec("cmds_err", 64, "admin commands the device failed", EFA_REMEDY),
    CounterSpec("no_completion_cmds", 64, "admin commands the device never completed (it stopped answering "
                "its driver)", EFA_REMEDY),
)
# Judged one way with or without history: a count in a window, against ibqueryerrors' count
# and a rate over the window (since the last run, else since boot).
WINDOWED = frozenset({"symbol_error", "link_downed"})
XMIT_WAIT = CounterSpec("port_xmit_wait", 32, "ticks with data to send but no flow-control credit", "")


def _rate(count: float) -> str:
    return f"{count:.0f}" if count >= 10 else f"{count:.2g}"


@record
class PortJudgement:
    """What one port's counters came to: findings (non-pass) and notes for the pass summary."""

    findings: list[Finding]
    notes: list[str]
    evidence: dict[str, Any]
    saturated: list[CounterSpec] = field(default_factory=list)


def _saturated_finding(ctx: CheckContext, hca: Hca, port: Port, saturated: list[CounterSpec]) -> Finding:
    """All of a port's saturated counters in one `unknown`: stuck at their maximum, growth unmeasurable."""
    names = ", ".join(f"{spec.name} at {spec.maximum} ({spec.bits}-bit)" for spec in saturated)
    physical = [spec for spec in saturated if spec.remedy == PHYSICAL_REMEDY or spec.name == "link_downed"]
    remedy = (f"record the counters, then clear them (`perfquery -x -R -C {hca.name} -P {port.number}`) so growth "
              "can be measured again")
    if physical:
        remedy += "; a link that saturated these has been bad for a long time: " + PHYSICAL_REMEDY.format(hca=hca.name)
    return ctx.unknown(port.name, f"counter saturated: {names}; growth cannot be measured",
                       evidence={"saturated": {spec.name: spec.maximum for spec in saturated},
                                 "bits": {spec.name: spec.bits for spec in saturated}},
                       remedy=remedy)


def _growth_limit(ctx: CheckContext, spec: CounterSpec, elapsed_s: float) -> tuple[float, str, str] | None:
    """(allowed increase over elapsed_s, how the limit reads, rule) or None when growth cannot be judged."""
    minimum_interval = float(ctx.rule("rate_min_interval_s"))
    per_hour = float(ctx.rule(f"{spec.name}_per_hour"))
    if per_hour <= 0:
        return 0.0, "limit: any increase", spec.name
    if elapsed_s < minimum_interval:
        return None
    return per_hour * elapsed_s / 3600, f"limit {per_hour:g}/h", spec.name


def _severity(ctx: CheckContext, rule: str) -> str:
    return str(ctx.rule(f"{rule}_severity"))


def _rate_limit(ctx: CheckContext, spec: CounterSpec, port: Port) -> tuple[float, str] | str:
    """(allowed per second, how it reads) for a windowed counter, or why there is none."""
    if spec.name == "symbol_error":
        if not port.is_active or port.rate is None or port.rate.gbps is None:
            return "the port is not active, so the BER limit has no rate to apply to"
        ber_limit = float(ctx.rule("ber_limit"))
        # Each symbol error is at least one bit error, so errors/s <= rate_bps x BER holds on a good link.
        per_second = port.rate.gbps * 1e9 * ber_limit
        return per_second, f"BER {ber_limit:g} at {port.rate.gbps:g} Gb/s allows {_rate(per_second * 3600)}/h"
    per_hour = float(ctx.rule(f"{spec.name}_per_hour"))
    return per_hour / 3600, f"limit {per_hour:g}/h"


def _judge_windowed(ctx: CheckContext, hca: Hca, port: Port, spec: CounterSpec, value: int,
                    previous: int | None, elapsed_s: float | None, no_history: str, out: PortJudgement) -> None:
    """symbol_error and link_downed, one way with or without history: the count in a window
    (since the last run; else since boot, when the port counters restarted) above
    `<counter>_absolute` (ibqueryerrors' count) warns; above the rate limit over that window
    as well it takes `<counter>_severity`."""
    saturated = value >= spec.maximum
    remedy = spec.remedy.format(hca=hca.name)
    out.evidence[spec.name] = value
    evidence: dict[str, Any] = {"counter": spec.name, "value": value}
    uptime = ctx.inventory.uptime_s
    if previous is not None and elapsed_s is not None and value >= previous:
        count, seconds, window, growth = value - previous, elapsed_s, f"in {duration_text(elapsed_s)}", True
        out.evidence[f"{spec.name}_delta"] = count
        evidence.update(previous=previous, delta=count, elapsed_s=round(elapsed_s, 1))
    elif previous is not None and elapsed_s is not None:
        # Cleared within the interval: the count is of a window no longer than it (a rate at least this high).
        out.notes.append(f"{spec.name} went down since the last run ({previous} -> {value}: cleared?)")
        out.evidence[f"{spec.name}_previous"] = previous
        count, seconds, growth = value, elapsed_s, False
        window = f"since it was cleared, within the {duration_text(elapsed_s)} since the last run"
        evidence.update(previous=previous, elapsed_s=round(elapsed_s, 1))
    elif uptime is not None and uptime > 0:
        count, seconds, window, growth = value, uptime, f"since boot {duration_text(uptime)} ago", False
        evidence["uptime_s"] = round(uptime, 1)
    else:
        count, seconds, window, growth = value, None, "", False
    if saturated and not growth:
        out.saturated.append(spec)     # a stuck count says nothing of when: clear it to measure again
        return
    limit = _rate_limit(ctx, spec, port)
    floor = int(ctx.rule(f"{spec.name}_absolute"))
    allowed = max(float(floor), limit[0] * seconds) if isinstance(limit, tuple) and seconds is not None else None
    verb = f"rose by {'at least ' if saturated else ''}{count}" if growth else f"is {count}"
    per_hour = count * 3600 / seconds if seconds else None
    rate = f"{_rate(per_hour)}/h; " if per_hour is not None else ""
    if per_hour is not None:
        evidence["per_hour"] = round(per_hour, 3)
    if allowed is not None and count > allowed and isinstance(limit, tuple):
        evidence["allowed"] = round(allowed, 3)
        rule = "symbol_error_rate" if spec.name == "symbol_error" else spec.name
        out.findings.append(ctx.graded(
            _severity(ctx, rule), port.name, f"{spec.name} {verb} {window} ({rate}{limit[1]}): {spec.meaning}",
            evidence=evidence, remedy=remedy, rule=rule))
        return
    if saturated:
        out.saturated.append(spec)
        return
    if count <= floor:
        return
    evidence["absolute_limit"] = floor
    if seconds is None:
        summary = f"{spec.name} is {count} (above {floor}), with no rate to judge ({no_history}; uptime unknown)"
    else:
        why = f"within {limit[1]}" if isinstance(limit, tuple) else limit
        summary = f"{spec.name} {verb} {window} (above {floor}; {rate}{why})"
        if not growth and previous is None and no_history:
            summary += f"; {no_history}"
    out.findings.append(ctx.graded(
        str(ctx.rule("absolute_severity")), port.name, f"{summary}: {spec.meaning}",
        evidence=evidence, remedy=f"watch it: run netdoctor again later; if it keeps growing: {remedy}",
        rule=f"{spec.name}_absolute"))


def _judge_counter(ctx: CheckContext, hca: Hca, port: Port, spec: CounterSpec, value: int,
                   previous: int | None, elapsed_s: float | None, no_history: str, out: PortJudgement,
                   absolute: bool) -> None:
    if spec.name in WINDOWED:
        _judge_windowed(ctx, hca, port, spec, value, previous, elapsed_s, no_history, out)
        return
    saturated = spec.bits < 64 and value >= spec.maximum
    remedy = spec.remedy.format(hca=hca.name)
    out.evidence[spec.name] = value
    if previous is not None and value < previous:
        out.notes.append(f"{spec.name} went down since the last run ({previous} -> {value}: cleared?)")
        out.evidence[f"{spec.name}_previous"] = previous
        previous, no_history = None, "the counter was cleared since the last run"
    if previous is not None and elapsed_s is not None:
        delta = value - previous
        out.evidence[f"{spec.name}_delta"] = delta
        limit = _growth_limit(ctx, spec, elapsed_s)
        if limit is not None:
            allowed, limit_text, rule = limit
            if delta > allowed:
                at_least = "at least " if saturated else ""
                per_hour = delta * 3600 / elapsed_s
                out.findings.append(ctx.graded(
                    _severity(ctx, rule), port.name,
                    f"{spec.name} rose by {at_least}{delta} in {duration_text(elapsed_s)} "
                    f"({_rate(per_hour)}/h; {limit_text}): {spec.meaning}",
                    evidence={"counter": spec.name, "value": value, "previous": previous, "delta": delta,
                              "elapsed_s": round(elapsed_s, 1), "per_hour": round(per_hour, 3),
                              "allowed": round(allowed, 3)},
                    remedy=remedy, rule=rule))
                return
            if not saturated:
                return
        elif not saturated:
            why = f"{duration_text(elapsed_s)} since the last run is shorter than rate_min_interval_s"
            if not absolute:
                out.notes.append(f"{spec.name} growth not judged: {why}")
                return
            no_history = why
    if saturated:
        out.saturated.append(spec)
        return
    if not absolute:
        return
    threshold = int(ctx.rule(f"{spec.name}_absolute"))
    if value > threshold:
        out.findings.append(ctx.graded(
            str(ctx.rule("absolute_severity")), port.name,
            f"{spec.name} is {value} (above {threshold}), with no rate to judge ({no_history}): {spec.meaning}",
            evidence={"counter": spec.name, "value": value, "absolute_limit": threshold},
            remedy=f"run netdoctor again later to measure growth; if it grows: {remedy}",
            rule=f"{spec.name}_absolute"))


def _judge_xmit_wait(ctx: CheckContext, port: Port, previous: Mapping[str, int | None] | None,
                     elapsed_s: float | None, out: PortJudgement) -> None:
    value = port.counters.get(XMIT_WAIT.name)
    if value is None:
        return
    out.evidence[XMIT_WAIT.name] = value
    before = previous.get(XMIT_WAIT.name) if previous else None
    if before is None or elapsed_s is None or value < before or elapsed_s <= 0:
        return
    per_second = (value - before) / elapsed_s
    out.evidence["port_xmit_wait_per_second"] = round(per_second, 1)
    if not ctx.rule("port_xmit_wait_judge"):
        return
    if value >= XMIT_WAIT.maximum:
        out.findings.append(ctx.unknown(port.name, f"counter saturated: port_xmit_wait stuck at {XMIT_WAIT.maximum}",
                                        evidence={"counter": "port_xmit_wait", "value": value}))
        return
    limit = float(ctx.rule("port_xmit_wait_per_second"))
    if per_second > limit and elapsed_s >= float(ctx.rule("rate_min_interval_s")):
        out.findings.append(ctx.graded(
            str(ctx.rule("port_xmit_wait_severity")), port.name,
            f"port_xmit_wait grew {per_second:.0f}/s over {duration_text(elapsed_s)} (limit {limit:g}/s): "
            "the port is often blocked by congestion", evidence={"counter": "port_xmit_wait",
                                                                 "per_second": round(per_second, 1)},
            remedy="congestion, not a link fault: check the fabric's congestion control and traffic placement",
            rule="port_xmit_wait"))


def _judge_port(ctx: CheckContext, hca: Hca, port: Port) -> list[Finding]:
    history = ctx.history
    previous = history.ports.get(port.name) if history is not None else None
    elapsed_s = history.elapsed_s if history is not None and previous is not None else None
    max_age_s = float(ctx.rule("history_max_age_s"))
    if history is None:
        no_history = "there is no earlier reading"
    elif previous is None:
        no_history = "there is no earlier reading of this port"
    elif elapsed_s is not None and elapsed_s > max_age_s:
        # A rate over weeks hides a burst of errors from the last hours: judge the level instead.
        no_history = f"the last reading is {duration_text(elapsed_s)} old (history_max_age_s {max_age_s:g})"
        previous, elapsed_s = None, None
    else:
        no_history = ""
    out = PortJudgement([], [], {"counters_source": port.counters_source})
    if elapsed_s is not None:
        out.evidence["elapsed_s"] = round(elapsed_s, 1)
        out.evidence["history"] = history.source if history else None

    available = [spec for spec in ERROR_COUNTERS if port.counters.get(spec.name) is not None]
    not_available = [spec.name for spec in ERROR_COUNTERS
                     if spec.name in port.counters and port.counters[spec.name] is None]
    efa = is_efa(hca)
    hw_specs = [spec for spec in (EFA_COUNTERS if efa else HW_COUNTERS) if spec.name in port.hw_counters
                and (spec.name not in ETHERNET_ONLY or port.link_layer is LinkLayer.ETHERNET)]
    if efa and not available and not hw_specs:
        return [ctx.unknown(port.name, "no EFA hw_counters to judge: " + unavailable_reason(ctx.inventory, "sysfs"),
                            remedy=f"EFA's statistics appear under /sys/class/infiniband/{hca.name}/ports/"
                                   f"{port.number}/hw_counters with the efa driver r1.14 or later (network counters "
                                   "from r2.17): `modinfo efa | grep ^version` shows the driver's")]
    if not available and not efa:
        if not_available:
            return [ctx.unknown(port.name, "error counters not available (N/A: the device has no PMA)",
                                evidence={"counters_not_available": not_available})]
        sources = ("sysfs", f"perfquery-x-{hca.name}-{port.number}")
        return [ctx.unknown(port.name, "no error counters: " + unavailable_reason(ctx.inventory, *sources))]
    if not_available:
        out.evidence["counters_not_available"] = not_available

    for spec in available:
        value = port.counters[spec.name]
        assert value is not None
        before = previous.get(spec.name) if previous else None
        _judge_counter(ctx, hca, port, spec, value, before, elapsed_s,
                       no_history or "there is no earlier reading of this counter", out, absolute=True)
    for spec in hw_specs:
        before = previous.get(HW_PREFIX + spec.name) if previous else None
        if before is None:
            out.evidence[spec.name] = port.hw_counters[spec.name]
            continue
        _judge_counter(ctx, hca, port, spec, port.hw_counters[spec.name], before, elapsed_s, no_history, out,
                       absolute=False)
    _judge_xmit_wait(ctx, port, previous, elapsed_s, out)
    if out.saturated:
        out.findings.append(_saturated_finding(ctx, hca, port, out.saturated))
    if not_available:
        # Some counters read, others not (N/A, or a malformed value): the others are not a pass.
        out.findings.append(ctx.unknown(port.name, f"error counter(s) not readable: {', '.join(not_available)}",
                                        evidence={"counters_not_available": not_available}))
    # One number per port for fleet-relative outliers: how much the IBTA error counters
    # grew since the last reading (hw_counters count normal events too, so they are left out).
    growth = [out.evidence[f"{spec.name}_delta"] for spec in ERROR_COUNTERS if f"{spec.name}_delta" in out.evidence]
    error_growth = sum(delta for delta in growth if delta > 0) if growth else None

    if out.findings:
        for note in out.notes:
            out.evidence.setdefault("notes", []).append(note)
        if error_growth is not None:
            out.findings[0].evidence["error_growth"] = error_growth   # once per port, not per finding
        return out.findings
    if error_growth is not None:
        out.evidence["error_growth"] = error_growth
    judged = len(available) + len(hw_specs)
    if efa and elapsed_s is None:
        summary = (f"{judged} EFA counters read ({no_history}); they count since the driver loaded, so they are "
                   "judged by growth from the next run")
    elif elapsed_s is not None:
        summary = f"no error growth beyond limits in {duration_text(elapsed_s)} ({judged} counters)"
    else:
        summary = f"error counters within absolute limits ({no_history}; growth not judged)"
    if out.notes:
        summary += "; " + "; ".join(out.notes)
    return [ctx.passed(port.name, summary, evidence=out.evidence)]


@check("error-counters", "port error counters by growth since the last run (as rates) and by absolute level",
       needs=("rdma", "counters"), order=40)
def error_counters(ctx: CheckContext) -> Iterator[Finding]:
    for hca, port, port_class in ctx.pack.classified_ports(ctx.inventory):
        through_pf = virtual_function_note(ctx.inventory, hca)
        if through_pf is not None:
            # A VF shares the PF's physical link: physical-layer errors are counted on the PF's port.
            yield ctx.skip(port.name, through_pf, evidence={"physical_function": hca.physical_function})
            continue
        if _unused_and_down(port, port_class):
            yield ctx.skip(port.name, f"port class '{port_class.name if port_class else ''}' is unused and the "
                                      "port is down", evidence={"state": str(port.state) if port.state else None})
            continue
        findings = _judge_port(ctx, hca, port)
        # Several problems on one port are separate findings (each with its own rule, for
        # shadow mode); a port with none gets one pass.
        yield from sorted(findings, key=lambda finding: finding.status is not Status.FAIL)


def _unused_and_down(port: Port, port_class: PortClass | None) -> bool:
    return port_class is not None and port_class.role == "unused" and not port.is_active
