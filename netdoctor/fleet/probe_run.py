"""`netdoctor fleet probe`: NCCL traffic between nodes, scheduled to name the slow node or rail.

1. `netdoctor check --no-probe --format json` on every node (the sweep, netdoctor.fleet.sweep):
   nodes that fail it, or do not answer, are left out of the pairs, with why; the others'
   reports say how many GPUs and which rails (`fabric`) they have.
2. Up to three rounds, and a top-up pair after round 2 where a node has met fewer than two
   partners (netdoctor.fleet.probe_plan): each runs `netdoctor fleet probe-node`
   on every node of the round at once through the same parallel shell, the round plan on
   the command line; each node prints a report whose `probe` is its part of its group.
   A pair's two nodes must start together, so a round asks all its nodes at once (no
   fan-out batches); a node that hangs is killed at the round's timeout and is `unreachable`.
3. The fleet report: every node's probe verdict, `probe.pairs` and `probe.suspects`.

Attribution is the sweep's (CONTRACT 6.4): a node's line belongs to the host the shell says
sent it; a group's numbers are its members' own, the slower one counting; its expectation is
the pack's or the fleet majority's, never its members' claims (probe_plan.fleet_expectation).
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from ClusterShell.NodeSet import NodeSet

from netdoctor.fleet.model import NodeGrade, NodeSummary, TopFinding
from netdoctor.fleet.probe_node import encode_plan
from netdoctor.fleet.probe_plan import (Group, Measurement, NodeFabric, Thresholds, fleet_expectation, localise,
                                        node_grades, on_sockets, references)
from netdoctor.fleet.report import FleetReport, build_fleet_report
from netdoctor.fleet.settings import fleet_settings
from netdoctor.fleet.sweep import SweepOptions, parse_hosts, run_sweep
from netdoctor.logging import get_logger
from netdoctor.parsers.nccl import network_kind
from netdoctor.records import record

log = get_logger(__name__)

NODE_COMMAND = "netdoctor fleet probe-node"
# Beyond the traffic budget: ssh/srun start, Python and netdoctor start, discovery (~3 s).
ROUND_MARGIN_S = 20.0


@record(frozen=True)
class FleetProbeOptions:
    hosts: str
    via: str = "pdsh"
    fanout: int = 64
    timeout_s: float = 120.0              # per node, for the `check --no-probe` sweep
    rcmd: str | None = None
    rules: str | None = None
    round_budget_s: float = 10.0          # traffic per round, on each node
    port: int = 29400                     # bootstrap roots: port (group), port+1+k (rail k)
    check_command: str | None = None      # replaces `netdoctor check --format json --no-probe`
    node_command: str = NODE_COMMAND      # the node side (`--plan`/`--as` are appended)
    round_timeout_s: float | None = None  # per node and round; None: round_budget_s + ROUND_MARGIN_S


def fabric_of(node: NodeSummary) -> NodeFabric | None:
    if not node.gpus:
        return None
    return NodeFabric(node.gpus, tuple((rail[0], rail[1]) for rail in node.rails))


def run_fleet_probe(options: FleetProbeOptions) -> FleetReport:
    settings = fleet_settings(options.rules)
    thresholds, sharp_expected = settings.probe, settings.sharp_expected
    asked = parse_hosts(options.hosts)
    check = run_sweep(SweepOptions(options.hosts, options.via, options.fanout, options.timeout_s, options.rcmd,
                                   remote_command=options.check_command, no_probe=options.check_command is None,
                                   rules=options.rules if options.check_command is None else None), label="check")
    fabrics: dict[str, NodeFabric] = {}
    left_out: dict[str, NodeSummary] = {}
    for node in check.nodes:
        fabric = fabric_of(node)
        if node.grade in (NodeGrade.PASS, NodeGrade.WARN) and fabric is not None:
            fabrics[node.host] = fabric
        else:
            why = ("no GPUs in its report" if fabric is None and node.grade in (NodeGrade.PASS, NodeGrade.WARN)
                   else f"check --no-probe: {node.grade}: {node.headline() or 'no report'}")
            left_out[node.host] = replace(node, top=TopFinding(f"left out of the probe: {why}"[:500],
                                                               node.top.check if node.top else None))
    rounds: list[dict[str, Any]] = []

    def measure(number: int, groups: list[Group]) -> list[Measurement]:
        outcome = _run_round(options, number, groups, fabrics, sharp_expected)
        rounds.append({"round": number, "groups": len(groups)})
        return outcome

    measurements, suspects = localise(sorted(fabrics), fabrics, thresholds, measure, options.port)
    grades = node_grades(sorted(fabrics), measurements, suspects, fabrics, thresholds)
    checked = {node.host: node for node in check.nodes}
    nodes = [NodeSummary(host, NodeGrade(grade), TopFinding(why[:500], "fleet-probe"), gpus=checked[host].gpus,
                         rails=checked[host].rails, versions=checked[host].versions,
                         rails_guessed=checked[host].rails_guessed, nvlink_domain=checked[host].nvlink_domain)
             for host, (grade, why) in grades.items()]
    nodes += list(left_out.values())
    missing = [host for host in asked if host not in grades and host not in left_out]
    nodes += [NodeSummary(host, NodeGrade.UNREACHABLE, TopFinding("no answer to check --no-probe")) for host in missing]
    report = build_fleet_report(nodes, minimum_versions=settings.minimum_versions, rail_thresholds=settings.rails)
    report.probe = {"pairs": pair_rows(measurements, fabrics, thresholds, sharp_expected),
                    "suspects": [suspect.to_json() for suspect in suspects], "rounds": rounds}
    return report


def _run_round(options: FleetProbeOptions, number: int, groups: list[Group],
               fabrics: dict[str, NodeFabric], sharp_expected: bool = False) -> list[Measurement]:
    members = sorted({host for group in groups for host in group.hosts})
    plan = {"round": number, "budget_s": options.round_budget_s, "groups": [group.to_json() for group in groups],
            "nodes": {host: {"gpus": fabrics[host].gpus, "rails": len(fabrics[host].rails)} for host in members}}
    command = f"{options.node_command} --as {{host}} --plan {shlex.quote(encode_plan(plan))}"
    log.info("fleet probe round", round=number, groups=len(groups), nodes=len(members))
    timeout_s = options.round_timeout_s or options.round_budget_s + ROUND_MARGIN_S
    result = run_sweep(SweepOptions(str(NodeSet.fromlist(members)), options.via, max(len(members), 1), timeout_s,
                                    options.rcmd, remote_command=command), label=f"round {number}")
    answers = {node.host: node for node in result.nodes}
    return [_group_measurement(number, group, answers, sharp_expected) for group in groups]


def _group_measurement(number: int, group: Group, answers: dict[str, NodeSummary],
                       sharp_expected: bool = False) -> Measurement:
    """A group's outcome from its members' own reports: the slower member's busbw."""
    parts = [answers.get(host) for host in group.hosts]
    silent = tuple(host for host, part in zip(group.hosts, parts)
                   if part is None or part.grade in (NodeGrade.UNREACHABLE, NodeGrade.INVALID))
    if silent:
        why = "; ".join(f"{host}: {(answers[host].headline() if host in answers else 'no answer')}" for host in silent)
        return Measurement(group.hosts, number, status="unreachable", why=why[:300], silent=silent)
    facts = [part.probe for part in parts if part is not None]
    failed = next((fact for fact in facts if fact.get("status") != "ok" or "busbw_gbps" not in fact), None)
    if failed is not None:
        return Measurement(group.hosts, number, status="error", why=str(failed.get("reason", "no measurement"))[:300])
    transports = [fact.get("transport") for fact in facts if fact.get("transport")]
    transport = next((kind for kind in transports if not kind.endswith("/GDRDMA")), transports[0] if transports else None)
    rails = facts[0].get("rails", {}) if group.rails else {}
    # NCCL quietly on TCP (no plugin, FI_PROVIDER, NCCL_NET=Socket): said, whatever the busbw.
    socket = ("NCCL ran over TCP sockets (NET/Socket), not the GPU fabric" if network_kind(transport) == "socket"
              else "")
    sharp = _sharp(facts, transport, sharp_expected)
    return Measurement(group.hosts, number, min(fact["busbw_gbps"] for fact in facts), rails, transport,
                       sharp=sharp, algorithm=facts[0].get("algorithm"),
                       why="; ".join(part for part in (socket, _sharp_why(facts) if sharp is False else "") if part))


# Networks NCCL cannot reduce in over SHARP (SHARP is InfiniBand switches' in-network reduction).
_NO_SHARP = ("socket", "ofi", "tcpx", "tcpxo")


def _sharp(facts: list[dict[str, Any]], transport: str | None, sharp_expected: bool) -> bool | None:
    """True: SHARP carried the measured size on every member; False: it did not, on a fabric that
    could use it; None: not said, the fabric not known to offer SHARP. Could use it: the pack says
    the fabric offers it (`[fleet-probe] sharp_expected`, a site's word: Quantum switches and an
    aggregation manager), or NCCL's own log on a member shows it there (the SHARP plugin
    initialised, CollNet channels connected); never on sockets, EFA or GPUDirect-TCPX. An
    installed plugin or NCCL_COLLNET_ENABLE=1 alone say what a node has or asks, not what the
    switches offer: without a pack's word or NCCL's, nothing is claimed."""
    if facts and all(fact.get("sharp") for fact in facts):
        return True
    if network_kind(transport) in _NO_SHARP:
        return None
    return False if sharp_expected or any(fact.get("sharp_initialized") for fact in facts) else None


def _sharp_why(facts: list[dict[str, Any]]) -> str:
    if any(fact.get("net_plugin_missing") for fact in facts):
        return "SHARP not used: NCCL found no net plugin (libnccl-net.so of nccl-rdma-sharp-plugins)"
    if not all(fact.get("collnet_enable") == "1" for fact in facts):
        return "SHARP not used: NCCL_COLLNET_ENABLE is not 1"
    chose = f": NCCL chose {facts[0]['algorithm']} for the measured size" if facts[0].get("algorithm") else ""
    if any(fact.get("sharp_initialized") for fact in facts):
        return f"SHARP plugin initialised, not used{chose}"
    return f"SHARP not used (no CollNet or NVLS algorithm for the measured size in NCCL's log){chose}"


def pair_rows(measurements: list[Measurement], fabrics: dict[str, NodeFabric], thresholds: Thresholds,
              sharp_expected: bool) -> list[dict[str, Any]]:
    """`probe.pairs` of the fleet report (CONTRACT 6.3), one row per group and round."""
    yardsticks = references(measurements, fabrics, thresholds)
    # Null where no pack value or rail rate sets one (CONTRACT 6.3: the key stays); the round's
    # median then stands in as the yardstick, said as `round_median_gbps`.
    expected = fleet_expectation(fabrics, thresholds)
    rows = []
    for measurement in measurements:
        yardstick = yardsticks.get(measurement.hosts)
        row: dict[str, Any] = {"hosts": list(measurement.hosts), "round": measurement.round,
                               "busbw_gbps": measurement.busbw_gbps, "expected_gbps": expected,
                               "transport": measurement.transport}
        if expected is None and yardstick:
            row["round_median_gbps"] = round(yardstick, 3)
        if measurement.status == "unreachable":
            row.update(status="unreachable", why=measurement.why)
        elif measurement.status != "ok" or measurement.busbw_gbps is None or not yardstick:
            nothing = ("" if measurement.status != "ok" or measurement.busbw_gbps is None else
                       "no expectation (no rail rate in the nodes' reports, no [fleet-probe] expected_busbw_gbps) "
                       "and no other group in its round to compare with")
            row.update(status="unknown", why="; ".join(filter(None, (nothing, measurement.why))) or "no expected level")
        else:
            ratio = measurement.busbw_gbps / yardstick
            row["status"] = ("pass" if ratio >= thresholds.pass_fraction else
                             "warn" if ratio >= thresholds.warn_fraction else "fail")
            if on_sockets(measurement):
                # On sockets the fabric carried nothing: never a pass, whatever the yardstick said.
                row.update(status="warn" if row["status"] == "pass" else row["status"], why=measurement.why)
            elif sharp_expected and measurement.sharp is False and row["status"] == "pass":
                row.update(status="warn", why=measurement.why)
        if measurement.rails:
            row["rails"] = dict(measurement.rails)
        if measurement.algorithm:
            row["algorithm"] = measurement.algorithm
        if measurement.sharp is not None:
            row["sharp"] = measurement.sharp
        rows.append(row)
    return rows

