"""`fleet probe`'s schedule and verdicts: who pairs with whom, and who is to blame.

Pure: hosts and measurements in, groups, suspects and node verdicts out (the coordinator,
netdoctor.fleet.probe_run, runs the traffic; benchmarks/fleet_probe_sim.py drives this with
a simulated fabric).

**Schedule.** Groups are pairs; a node is in at most one group per round and all groups of
a round run at once. The one rule: no two nodes share every group, so a slow node can never
drag a partner down with it everywhere.

1. hosts in name order, paired neighbour by neighbour: (h0,h1), (h2,h3), ...; with an odd
   count the last node sits this round out.
2. among the nodes that answered round 1, each with the next free node in name order
   (starting one along, circularly) that it has not met: (h1,h2), (h3,h4), ..., (hn-1,h0).
   Then, only where a node still has fewer than two partners that answered (an odd count
   leaves h0 and hn-1 with one each; a partner went silent), a **top-up** (also numbered
   round 2, run after it): each such node with a node it has not met, those short of a
   partner first, else the next node in name order (already paired in round 2 or not: the
   top-up is a round of its own). So from 3 nodes on, all answering, every node meets two
   different partners; two nodes alone cannot be told apart and neither is named. There is
   one top-up only: a node whose partners went silent twice may end with one partner, and
   a node with one partner is never accused.
3. (only with suspects) every suspect with a node that passed all its groups, one
   communicator per rail in parallel (rail k to rail k, NCCL_IB_HCA one port each): a rail
   far below the node's other rails is the suspect (`kind: rail`); every rail slow keeps
   the node.

**Verdicts.** A group is slow below `pass_fraction` of its yardstick. A node is a *suspect*
only when every group it was in was slow, it had two partners at least, and in one of those
groups every partner was fine elsewhere (so the group is explained by this node alone). A
node with a group that was fine is never accused; one slow everywhere beside partners slow
elsewhere too is `warn`, not told apart from them (the middle of a run of slow nodes, or a
healthy node between two slow ones: the pairs cannot tell these apart).

**Expectation.** One yardstick for every group, never what a group's members say of
themselves: the pack's `[fleet-probe] expected_busbw_gbps` where set (> 0); else the fabric
most nodes report (the mode of GPU count and rail rates, held by more nodes than any other)
as rails x rate / 8 x `efficiency`; else, where that majority reports no rate or there is
no majority (a tie), there is no expectation (`expected_gbps` null) and each group is judged
against the median of its round's groups, which needs two groups at least: a group alone in
its round, with no expectation, is judged against nothing (`unknown`), never against itself.
A node claiming another fabric has one vote in the mode and cannot lower, or raise, any
group's expectation.

**Transport.** A group whose NCCL ran over TCP sockets (NET/Socket) never passes, and nor do
its nodes: the GPU fabric carried nothing, whatever the bus bandwidth.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from itertools import chain
from typing import Any

from netdoctor.records import record

ROUND_PAIRS, ROUND_SHIFTED, ROUND_RAILS = 1, 2, 3


@record(frozen=True)
class NodeFabric:
    """What a node's `check` report says of its fabric: GPUs, compute rails and their rates."""

    gpus: int
    rails: tuple[tuple[str, float | None], ...] = ()     # (port, Gb/s) in the node's rail order


@record(frozen=True)
class Group:
    hosts: tuple[str, ...]
    port: int                        # the bootstrap root's TCP port on hosts[0]
    rails: bool = False              # one communicator per rail instead of one over all GPUs

    def to_json(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "port": self.port, "rails": self.rails}


@record(frozen=True)
class Measurement:
    """One group's outcome, as its nodes reported it (the slower rank counts)."""

    hosts: tuple[str, ...]
    round: int
    busbw_gbps: float | None = None
    rails: Mapping[str, float] = field(default_factory=dict)   # rails round: rail -> busbw (GB/s)
    transport: str | None = None
    status: str = "ok"               # ok | error | timeout | unreachable
    why: str = ""
    silent: tuple[str, ...] = ()     # members that gave no answer at all (unreachable)
    sharp: bool | None = None
    algorithm: str | None = None


@record(frozen=True)
class Thresholds:
    efficiency: float = 0.9           # share of rails x rate a healthy pair reaches
    pass_fraction: float = 0.8
    warn_fraction: float = 0.5
    rail_fraction: float = 0.7        # a rail below this share of its siblings' median
    expected_busbw_gbps: float = 0.0  # > 0: every group's expectation (GB/s); 0: the fleet's majority fabric


@record(frozen=True)
class Suspect:
    kind: str                        # node | rail | leaf
    host: str | None
    subject: str | None
    why: str

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        if self.host is not None:
            data["host"] = self.host
        if self.subject is not None:
            data["subject"] = self.subject
        data["why"] = self.why
        return data


def pair_round(hosts: Sequence[str], met: Mapping[str, set[str]], shift: int, port: int) -> list[Group]:
    """Each host with the next free host in name order it has not met, starting `shift` along.

    Scans forward only (the circle is cut at `shift`): a host with no such partner sits the
    round out, for the top-up to catch."""
    ordered = list(hosts[shift:]) + list(hosts[:shift])
    taken: set[str] = set()
    groups = []
    for index, host in enumerate(ordered):
        if host in taken:
            continue
        partner = next((ordered[later] for later in range(index + 1, len(ordered))
                        if ordered[later] not in taken and ordered[later] not in met.get(host, ())), None)
        if partner is not None:
            taken.update((host, partner))
            groups.append(Group((host, partner), port))
    return groups


def top_up_round(hosts: Sequence[str], met: Mapping[str, set[str]], port: int) -> list[Group]:
    """A partner it has not met for each host with fewer than two: another such host first, else
    the next host in name order (the top-up is a round of its own: any host is free in it)."""
    short = [host for host in hosts if len(met.get(host, ())) < 2]
    if not short:
        return []
    position = {host: index for index, host in enumerate(hosts)}
    taken: set[str] = set()
    groups = []
    for host in short:
        if host in taken:
            continue
        after = position[host] + 1
        # Lazily: other short hosts after it, then before it, then every host after it, circularly.
        candidates = chain((other for other in short if position[other] > position[host]),
                           (other for other in short if position[other] < position[host]),
                           (hosts[index % len(hosts)] for index in range(after, after + len(hosts))))
        partner = next((other for other in candidates
                        if other != host and other not in taken and other not in met.get(host, ())), None)
        if partner is not None:
            taken.update((host, partner))
            groups.append(Group((host, partner), port))
    return groups


def partners_met(measurements: Sequence[Measurement]) -> dict[str, set[str]]:
    """Who met whom in groups where everyone answered (a silent partner is no partner)."""
    met: dict[str, set[str]] = {}
    for measurement in measurements:
        if measurement.silent or measurement.round == ROUND_RAILS:
            continue
        for host in measurement.hosts:
            met.setdefault(host, set()).update(other for other in measurement.hosts if other != host)
    return met


def _fabric_kind(fabric: NodeFabric) -> tuple[int, tuple[float, ...]]:
    """What makes nodes alike for the expectation: GPU count and rail rates (0: unknown), port names aside."""
    return fabric.gpus, tuple(sorted(float(rate or 0.0) for _, rate in fabric.rails))


def majority_fabric(fabrics: Mapping[str, NodeFabric]) -> tuple[int, tuple[float, ...]] | None:
    """The fabric more nodes report than any other (GPUs, rail rates); None on a tie or no node."""
    ranked = Counter(_fabric_kind(fabric) for fabric in fabrics.values()).most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def fleet_expectation(fabrics: Mapping[str, NodeFabric], thresholds: Thresholds) -> float | None:
    """GB/s every group should reach: the pack's, else the majority fabric's rails x rate / 8 x efficiency."""
    if thresholds.expected_busbw_gbps > 0:
        return thresholds.expected_busbw_gbps
    majority = majority_fabric(fabrics)
    if majority is None or not majority[1] or not all(majority[1]):
        return None
    return round(sum(majority[1]) / 8 * thresholds.efficiency, 1)


def ratio_of(measurement: Measurement, reference: float | None) -> float | None:
    if measurement.status != "ok" or measurement.busbw_gbps is None or not reference:
        return None
    return measurement.busbw_gbps / reference


def round_medians(measurements: Sequence[Measurement]) -> dict[int, float | None]:
    """Per round, the median busbw of its measured groups; None for a round of fewer than two
    (the median of one group is that group: it would pass against itself)."""
    medians: dict[int, float | None] = {}
    for number in {measurement.round for measurement in measurements}:
        values = [m.busbw_gbps for m in measurements if m.round == number and m.status == "ok" and m.busbw_gbps]
        medians[number] = statistics.median(values) if len(values) >= 2 else None
    return medians


def references(measurements: Sequence[Measurement], fabrics: Mapping[str, NodeFabric],
               thresholds: Thresholds) -> dict[tuple[str, ...], float | None]:
    """Each group's yardstick: the fleet's expectation, else the median of its round's groups
    (None where neither is: no expectation, and the group alone in its round)."""
    expected = fleet_expectation(fabrics, thresholds)
    medians = round_medians(measurements) if expected is None else {}
    return {measurement.hosts: expected or medians[measurement.round] for measurement in measurements}


def yardstick_words(fabrics: Mapping[str, NodeFabric], thresholds: Thresholds) -> str:
    """What a ratio is of, as the verdicts say it."""
    return ("the expected bus bandwidth" if fleet_expectation(fabrics, thresholds) is not None
            else "the round's median bus bandwidth (no expectation set)")


def on_sockets(measurement: Measurement) -> bool:
    """NCCL carried the group over TCP sockets, not the GPU fabric."""
    from netdoctor.parsers.nccl import network_kind   # here: `fleet report` never needs the parsers

    return network_kind(measurement.transport) == "socket"


def group_ratios(measurements: Sequence[Measurement], yardsticks: Mapping[tuple[str, ...], float | None],
                 ) -> dict[str, list[tuple[float, tuple[str, ...]]]]:
    """Per host, each measured group of rounds 1-2 it was in: (busbw / yardstick, the group's hosts)."""
    ratios: dict[str, list[tuple[float, tuple[str, ...]]]] = {}
    for measurement in measurements:
        ratio = ratio_of(measurement, yardsticks[measurement.hosts])
        if ratio is None or measurement.round == ROUND_RAILS:
            continue
        for host in measurement.hosts:
            ratios.setdefault(host, []).append((ratio, measurement.hosts))
    return ratios


def node_suspects(measurements: Sequence[Measurement], fabrics: Mapping[str, NodeFabric],
                  thresholds: Thresholds) -> list[Suspect]:
    """Nodes slow in every group (two partners at least) where, in one of those groups, every partner
    was fine elsewhere; a lone slow pair, or partners slow elsewhere too, blame no one."""
    ratios = group_ratios(measurements, references(measurements, fabrics, thresholds))
    fine = {host for host, seen in ratios.items() if any(ratio >= thresholds.pass_fraction for ratio, _ in seen)}
    suspects = []
    for host, seen in sorted(ratios.items()):
        partners = {other for _, hosts in seen for other in hosts if other != host}
        if len(partners) < 2 or host in fine:
            continue
        # The witnesses: partners in a group this node alone explains (every partner fine elsewhere).
        witnesses = sorted({other for _, hosts in seen if all(peer in fine for peer in hosts if peer != host)
                            for other in hosts if other != host})
        if not witnesses:
            continue
        detail = ", ".join(f"{ratio:.0%} with {'+'.join(other for other in hosts if other != host)}"
                           for ratio, hosts in seen)
        suspects.append(Suspect("node", host, None, f"every group with {host} ran slow: {detail} of "
                                f"{yardstick_words(fabrics, thresholds)}; {', '.join(witnesses)} ran fine with other nodes"))
    return suspects


def rail_round(suspects: Sequence[Suspect], healthy: Sequence[str], port: int) -> list[Group]:
    """Each node suspect with a healthy node (round robin), one communicator per rail."""
    if not healthy:
        return []
    return [Group((suspect.host, healthy[index % len(healthy)]), port, rails=True)
            for index, suspect in enumerate(suspect for suspect in suspects if suspect.host is not None)]


def rail_suspects(measurement: Measurement, suspect_host: str, thresholds: Thresholds) -> list[Suspect]:
    """From a rails round: the rails far below the node's other rails; none singled out: the node."""
    rails = dict(measurement.rails)
    partner = "+".join(host for host in measurement.hosts if host != suspect_host)
    if len(rails) < 2:
        return []
    found = []
    for rail, value in sorted(rails.items()):
        others = [other for name, other in rails.items() if name != rail]
        median = statistics.median(others)
        if median and value < thresholds.rail_fraction * median:
            found.append(Suspect("rail", suspect_host, rail, f"rail {rail} ran at {value / median:.0%} of "
                                 f"{suspect_host}'s other rails ({value:g} vs {median:g} GB/s) with {partner}"))
    return found


def localise(hosts: Sequence[str], fabrics: Mapping[str, NodeFabric], thresholds: Thresholds,
             measure: Callable[[int, list[Group]], list[Measurement]], port: int = 29400,
             ) -> tuple[list[Measurement], list[Suspect]]:
    """Run the rounds through `measure(round, groups)`; every measurement and the suspects."""
    ordered = sorted(hosts)
    measurements: list[Measurement] = []
    if len(ordered) < 2:
        return measurements, []
    measurements += measure(ROUND_PAIRS, pair_round(ordered, {}, 0, port))
    if len(ordered) > 2:
        # A node that did not answer is not asked again: its partners get partners that answer.
        second = pair_round(_answering(ordered, measurements), partners_met(measurements), 1, port)
        if second:
            measurements += measure(ROUND_SHIFTED, second)
        top_up = top_up_round(_answering(ordered, measurements), partners_met(measurements), port)
        if top_up:
            measurements += measure(ROUND_SHIFTED, top_up)
    suspects = node_suspects(measurements, fabrics, thresholds)
    if not suspects:
        return measurements, suspects
    accused = {suspect.host for suspect in suspects}
    yardsticks = references(measurements, fabrics, thresholds)
    by_host: dict[str, list[float | None]] = {}
    for measurement in measurements:
        for host in measurement.hosts:
            by_host.setdefault(host, []).append(ratio_of(measurement, yardsticks[measurement.hosts]))
    # A rails partner must have passed every group it was in (an unmeasured one disqualifies).
    healthy = [host for host in ordered if host not in accused and by_host.get(host)
               and all(ratio is not None and ratio >= thresholds.pass_fraction for ratio in by_host[host])]
    rail_groups = rail_round(suspects, healthy, port)
    if not rail_groups:
        return measurements, [Suspect(s.kind, s.host, s.subject, s.why + "; no healthy partner to test its rails with")
                              for s in suspects]
    rail_measurements = measure(ROUND_RAILS, rail_groups)
    measurements += rail_measurements
    refined: list[Suspect] = []
    for suspect in suspects:
        tested = next((m for m in rail_measurements if m.hosts[0] == suspect.host and m.status == "ok"), None)
        rails = rail_suspects(tested, suspect.host, thresholds) if tested is not None else []
        if rails:
            refined += rails
        else:
            note = "; every rail was slow with a healthy partner" if tested is not None else ""
            refined.append(Suspect(suspect.kind, suspect.host, suspect.subject, suspect.why + note))
    return measurements, refined


def _answering(hosts: Sequence[str], measurements: Sequence[Measurement]) -> list[str]:
    silent = {host for measurement in measurements for host in measurement.silent}
    return [host for host in hosts if host not in silent]


def node_grades(hosts: Sequence[str], measurements: Sequence[Measurement], suspects: Sequence[Suspect],
                fabrics: Mapping[str, NodeFabric], thresholds: Thresholds) -> dict[str, tuple[str, str]]:
    """Each host's probe verdict (pass/warn/fail/unknown/unreachable) and its one-line why."""
    yardsticks = references(measurements, fabrics, thresholds)
    words = yardstick_words(fabrics, thresholds)
    mine: dict[str, list[Measurement]] = {}
    for measurement in measurements:
        if measurement.round != ROUND_RAILS:
            for host in measurement.hosts:
                mine.setdefault(host, []).append(measurement)
    verdicts = {}
    for host in hosts:
        grade, why = _grade(host, mine.get(host, []), [s for s in suspects if s.host == host], yardsticks, thresholds,
                            words)
        verdicts[host] = _on_sockets(host, grade, why, mine.get(host, []))
    return verdicts


def _others(host: str, measurement: Measurement) -> str:
    return "+".join(other for other in measurement.hosts if other != host)


def _grade(host: str, mine: list[Measurement], accused: list[Suspect],
           yardsticks: Mapping[tuple[str, ...], float | None], thresholds: Thresholds, words: str) -> tuple[str, str]:
    silent = next((m for m in mine if host in m.silent), None)
    if silent is not None:
        return "unreachable", silent.why
    ratios = [ratio for m in mine if (ratio := ratio_of(m, yardsticks[m.hosts])) is not None]
    if accused:
        best = max(ratios, default=0.0)
        return ("fail" if best < thresholds.warn_fraction or accused[0].kind == "rail" else "warn"), accused[0].why
    if not ratios:
        failed = next((m for m in mine if m.status != "ok"), None)
        if failed is not None:
            return "unknown", failed.why
        measured = next((m for m in mine if m.busbw_gbps is not None), None)
        if measured is None:
            return "unknown", "not measured"
        return "unknown", (f"{measured.busbw_gbps:g} GB/s with {_others(host, measured)}, judged against nothing: no "
                           "expectation (no rail rate in the nodes' reports, no [fleet-probe] expected_busbw_gbps) "
                           "and no other group in its round to compare with")
    best = max(ratios)
    partner = next(m for m in mine if ratio_of(m, yardsticks[m.hosts]) == best)
    text = f"{best:.0%} of {words} with {_others(host, partner)}"
    if best >= thresholds.pass_fraction:
        return "pass", text
    # Slow in every group, yet no suspect: one partner only, or partners slow elsewhere too.
    partners = {other for m in mine if ratio_of(m, yardsticks[m.hosts]) is not None for other in m.hosts} - {host}
    alone = ("its only measured partner: the two are not told apart" if len(partners) < 2
             else "each partner was slow elsewhere too: not told apart from them")
    return "warn", f"{text}; {alone}"


def _on_sockets(host: str, grade: str, why: str, mine: list[Measurement]) -> tuple[str, str]:
    """A node whose group ran over TCP sockets is never `pass`, and says so whatever its grade."""
    socket = [m for m in mine if m.status == "ok" and on_sockets(m)]
    if not socket:
        return grade, why
    note = f"NCCL ran over TCP sockets (NET/Socket) with {', '.join(_others(host, m) for m in socket)}, not the GPU fabric"
    return ("warn" if grade == "pass" else grade), f"{why}; {note}" if why else note
