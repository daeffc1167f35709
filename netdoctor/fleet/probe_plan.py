"""`fleet probe`'s schedule and verdicts: who pairs with whom, and who is to blame.

Pure: hosts and measurements in, groups, suspects and node verdicts out (the coordinator,
netdoctor.fleet.probe_run, runs the traffic; benchmarks/fleet_probe_sim.py drives this with
a simulated fabric).

Three rounds at most, each one all-reduce per group, all groups of a round at once:

1. hosts in name order, paired neighbour by neighbour: (h0,h1), (h2,h3), ...
2. the same, shifted by one: (h1,h2), (h3,h4), ..., (hn-1,h0), without the nodes that did
   not answer in round 1. Every node has now met two different partners (an odd count ends
   in a group of three). A node slow with every partner is a *suspect*; one slow pair alone
   blames neither of its nodes.
3. every suspect with a node that passed both rounds, one communicator per rail in parallel
   (rail k of one node to rail k of the other, NCCL_IB_HCA one port each): a rail far below
   the node's other rails is the suspect (`kind: rail`); every rail slow keeps the node.

A group's expected bus bandwidth comes from what its nodes report (compute rails x port
rate, the slower node's), times the pack's efficiency; where no node reports a rate the
round's median stands in.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ROUND_PAIRS, ROUND_SHIFTED, ROUND_RAILS = 1, 2, 3


@dataclass(frozen=True)
class NodeFabric:
    """What a node's `check` report says of its fabric: GPUs, compute rails and their rates."""

    gpus: int
    rails: tuple[tuple[str, float | None], ...] = ()     # (port, Gb/s) in the node's rail order

    @property
    def rail_gbps(self) -> float | None:
        rates = [rate for _, rate in self.rails if rate]
        return sum(rates) if rates and len(rates) == len(self.rails) else None


@dataclass(frozen=True)
class Group:
    hosts: tuple[str, ...]
    port: int                        # the bootstrap root's TCP port on hosts[0]
    rails: bool = False              # one communicator per rail instead of one over all GPUs

    def to_json(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "port": self.port, "rails": self.rails}


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Thresholds:
    efficiency: float = 0.9           # share of rails x rate a healthy pair reaches
    pass_fraction: float = 0.8
    warn_fraction: float = 0.5
    rail_fraction: float = 0.7        # a rail below this share of its siblings' median


@dataclass(frozen=True)
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


def pair_round(hosts: Sequence[str], shift: int, port: int) -> list[Group]:
    """Neighbours in name order, starting `shift` along; an odd count ends in a group of three."""
    ordered = list(hosts[shift:]) + list(hosts[:shift])
    groups = [tuple(ordered[index:index + 2]) for index in range(0, len(ordered) - len(ordered) % 2, 2)]
    if len(ordered) % 2 and groups:
        groups[-1] = (*groups[-1], ordered[-1])
    return [Group(tuple(group), port) for group in groups if len(group) >= 2]


def expected_busbw(group: Sequence[str], fabrics: Mapping[str, NodeFabric], thresholds: Thresholds) -> float | None:
    """GB/s an all-reduce across `group` should reach: the slowest node's rails x rate / 8 x efficiency."""
    rates = [fabrics[host].rail_gbps if host in fabrics else None for host in group]
    if not rates or any(rate is None for rate in rates):
        return None
    return round(min(rates) / 8 * thresholds.efficiency, 1)   # type: ignore[type-var]


def ratio_of(measurement: Measurement, reference: float | None) -> float | None:
    if measurement.status != "ok" or measurement.busbw_gbps is None or not reference:
        return None
    return measurement.busbw_gbps / reference


def references(measurements: Sequence[Measurement], fabrics: Mapping[str, NodeFabric],
               thresholds: Thresholds) -> dict[tuple[str, ...], float | None]:
    """Each group's yardstick: its expected busbw, else the median of its round's groups."""
    medians: dict[int, float | None] = {}
    for number in {measurement.round for measurement in measurements}:
        values = [m.busbw_gbps for m in measurements if m.round == number and m.status == "ok" and m.busbw_gbps]
        medians[number] = statistics.median(values) if values else None
    return {measurement.hosts: expected_busbw(measurement.hosts, fabrics, thresholds) or medians[measurement.round]
            for measurement in measurements}


def node_suspects(measurements: Sequence[Measurement], fabrics: Mapping[str, NodeFabric],
                  thresholds: Thresholds) -> list[Suspect]:
    """Nodes slow with every partner (two partners at least); a lone slow pair blames neither."""
    yardsticks = references(measurements, fabrics, thresholds)
    ratios: dict[str, list[tuple[float, tuple[str, ...]]]] = {}
    for measurement in measurements:
        ratio = ratio_of(measurement, yardsticks[measurement.hosts])
        if ratio is None or measurement.round == ROUND_RAILS:
            continue
        for host in measurement.hosts:
            ratios.setdefault(host, []).append((ratio, measurement.hosts))
    suspects = []
    for host, seen in sorted(ratios.items()):
        partners = {other for _, hosts in seen for other in hosts if other != host}
        if len(partners) >= 2 and all(ratio < thresholds.pass_fraction for ratio, _ in seen):
            detail = ", ".join(f"{ratio:.0%} with {'+'.join(other for other in hosts if other != host)}"
                               for ratio, hosts in seen)
            suspects.append(Suspect("node", host, None, f"every group with {host} ran slow: {detail} of the "
                                    "expected bus bandwidth"))
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
    """Run up to three rounds through `measure(round, groups)`; every measurement and the suspects."""
    ordered = sorted(hosts)
    measurements: list[Measurement] = []
    if len(ordered) < 2:
        return measurements, []
    measurements += measure(ROUND_PAIRS, pair_round(ordered, 0, port))
    # A node that did not answer is not asked again: its partners get partners that answer.
    silent = {host for measurement in measurements for host in measurement.silent}
    answering = [host for host in ordered if host not in silent]
    if len(ordered) > 2 and len(answering) >= 2:
        measurements += measure(ROUND_SHIFTED, pair_round(answering, 1, port))
    suspects = node_suspects(measurements, fabrics, thresholds)
    if not suspects:
        return measurements, suspects
    accused = {suspect.host for suspect in suspects}
    yardsticks = references(measurements, fabrics, thresholds)
    by_host: dict[str, list[float | None]] = {}
    for measurement in measurements:
        for host in measurement.hosts:
            by_host.setdefault(host, []).append(ratio_of(measurement, yardsticks[measurement.hosts]))
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


def node_grades(hosts: Sequence[str], measurements: Sequence[Measurement], suspects: Sequence[Suspect],
                fabrics: Mapping[str, NodeFabric], thresholds: Thresholds) -> dict[str, tuple[str, str]]:
    """Each host's probe verdict (pass/warn/fail/unknown/unreachable) and its one-line why."""
    yardsticks = references(measurements, fabrics, thresholds)
    mine: dict[str, list[Measurement]] = {}
    for measurement in measurements:
        if measurement.round != ROUND_RAILS:
            for host in measurement.hosts:
                mine.setdefault(host, []).append(measurement)
    return {host: _grade(host, mine.get(host, []), [s for s in suspects if s.host == host], yardsticks, thresholds)
            for host in hosts}


def _grade(host: str, mine: list[Measurement], accused: list[Suspect],
           yardsticks: Mapping[tuple[str, ...], float | None], thresholds: Thresholds) -> tuple[str, str]:
    silent = next((m for m in mine if host in m.silent), None)
    if silent is not None:
        return "unreachable", silent.why
    ratios = [ratio for m in mine if (ratio := ratio_of(m, yardsticks[m.hosts])) is not None]
    if accused:
        best = max(ratios, default=0.0)
        return ("fail" if best < thresholds.warn_fraction or accused[0].kind == "rail" else "warn"), accused[0].why
    if not ratios:
        failed = next((m for m in mine if m.status != "ok"), None)
        return "unknown", failed.why if failed is not None else "not measured"
    best = max(ratios)
    partner = next(m for m in mine if ratio_of(m, yardsticks[m.hosts]) == best)
    text = f"{best:.0%} of the expected bus bandwidth with {'+'.join(h for h in partner.hosts if h != host)}"
    return ("pass" if best >= thresholds.pass_fraction else "warn"), text
