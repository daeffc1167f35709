"""`fleet probe` at scale, in simulation: how many rounds and groups it takes to name a planted
slow node and a planted slow rail among N nodes, and what the planner costs.

The fabric is simulated (each group's bus bandwidth from the slowest member's node factor and
its slowest rail, +/-3 % noise; a rails round per rail); the schedule and the verdicts are the
real ones (netdoctor.fleet.probe_plan.localise, node_grades; an odd count shows the top-up
pair as a second round 2). The traffic time of a round is
bounded by construction: every node's worker gets `--budget` seconds (default 10) and is
killed at it; the measured cost of one two-rank round on an H100 is in
benchmarks/results/fleet-probe.md. Usage:

    python benchmarks/fleet_probe_sim.py [--nodes 1000 10000] [--seed 7]    # --nodes 1001 9999: odd counts
"""

from __future__ import annotations

import argparse
import json
import random
import time
import tracemalloc

from netdoctor.fleet.probe_plan import Group, Measurement, NodeFabric, Thresholds, localise, node_grades

RAILS = tuple((f"mlx5_{index}:1", 400.0) for index in (0, 3, 4, 5, 6, 9, 10, 11))


def simulate(count: int, seed: int) -> dict[str, object]:
    hosts = [f"node{index:05d}" for index in range(count)]
    chooser = random.Random(seed)
    slow_node, slow_rail_host = chooser.sample(hosts, 2)
    slow_rail = chooser.choice(RAILS)[0]
    noise = random.Random(seed + 1)
    rounds: list[tuple[int, int]] = []

    def factor(host: str, rail: str | None = None) -> float:
        node = 0.45 if host == slow_node else 1.0
        if rail is None:
            return node * (0.5 if host == slow_rail_host else 1.0)
        return node * (0.5 if (host, rail) == (slow_rail_host, slow_rail) else 1.0)

    def measure(number: int, groups: list[Group]) -> list[Measurement]:
        rounds.append((number, len(groups)))
        out = []
        for group in groups:
            jitter = noise.uniform(0.97, 1.03)
            if group.rails:
                rails = {port: 45.0 * jitter * min(factor(host, port) for host in group.hosts) for port, _ in RAILS}
                out.append(Measurement(group.hosts, number, min(rails.values()) * 8, rails))
            else:
                out.append(Measurement(group.hosts, number, 360.0 * jitter * min(map(factor, group.hosts))))
        return out

    fabrics = {host: NodeFabric(8, RAILS) for host in hosts}
    tracemalloc.start()
    started = time.perf_counter()
    measurements, suspects = localise(hosts, fabrics, Thresholds(), measure)
    grades = node_grades(hosts, measurements, suspects, fabrics, Thresholds())
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    named = sorted((suspect.kind, suspect.host, suspect.subject) for suspect in suspects)
    planted = sorted([("node", slow_node, None), ("rail", slow_rail_host, slow_rail)])
    return {"nodes": count, "rounds": rounds, "suspects": named, "planted": planted, "exact": named == planted,
            "not_pass": sorted(host for host, (grade, _) in grades.items() if grade != "pass"),
            "planner_s": round(elapsed, 3), "planner_peak_mib": round(peak / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--seed", type=int, default=7)
    arguments = parser.parse_args()
    for count in arguments.nodes:
        print(json.dumps(simulate(count, arguments.seed)))


if __name__ == "__main__":
    main()
