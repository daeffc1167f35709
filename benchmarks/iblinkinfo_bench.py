"""Benchmark parse_iblinkinfo on a generated 2,000-switch fabric (target: <= 1 s).

The text follows the grouped `iblinkinfo` form of the corpus
(tests/data/corpus/iblinkinfo/824380210-Linpack__edr76_linpack_WI_iblinkinfo.txt):
40-port NDR switches, each with 20 host ports to CAs, 16 uplinks to other switches,
unconnected `Down/ Polling` ports, some links degraded to 2X or HDR with
`( Could be 4X Could be 106.25 Gbps)` hints, and one `CA:` block per host port.
The parse is checked (link count, degraded links found) before it is timed.

    python benchmarks/iblinkinfo_bench.py [--switches 2000] [--runs 7] [--markdown FILE] [--before SECONDS]

--before takes the median of an earlier version and adds a before/after line to the table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from netdoctor.parsers import parse_iblinkinfo

PORTS_PER_SWITCH = 40
HOST_PORTS = 20            # ports 1-20: to HCAs
UPLINKS = 16               # ports 21-36: to other switches; 37-40 unconnected
NDR = "( 4X        106.25 Gbps Active/  LinkUp)"
DEGRADED_WIDTH = "( 2X        106.25 Gbps Active/  LinkUp)"
DEGRADED_SPEED = "( 4X       53.125 Gbps Active/  LinkUp)"
DOWN = "(                Down/ Polling)"


def generate(switches: int) -> tuple[str, int, int]:
    """(iblinkinfo text, links in it, degraded links with a Could-be hint)."""
    lines: list[str] = []
    ca_blocks: list[str] = []
    links = degraded = 0
    next_ca_lid = switches + 1
    for index in range(switches):
        lid = index + 1
        guid = f"0x{0xfc6a1c0300a00000 + index:016x}"
        name = f"MF0;leaf{index:04d}:MQM9700/U1"
        lines.append(f"Switch: {guid} {name}:")
        for port in range(1, PORTS_PER_SWITCH + 1):
            if port <= HOST_PORTS:
                ca_lid = next_ca_lid
                next_ca_lid += 1
                host = f"gpu{(ca_lid - switches):05d} mlx5_{port % 8}"
                state, hint = NDR, "( )"
                if (index * PORTS_PER_SWITCH + port) % 97 == 0:
                    state, hint = DEGRADED_WIDTH, "( Could be 4X)"
                    degraded += 1
                elif (index * PORTS_PER_SWITCH + port) % 89 == 0:
                    state, hint = DEGRADED_SPEED, "( Could be 106.25 Gbps)"
                    degraded += 1
                lines.append(f"        {lid:5d} {port:4d}[  ] =={state}==> {ca_lid:7d}    1[  ] \"{host}\" {hint}")
                ca_blocks.append(f"CA: {host}:")
                ca_blocks.append(f"      0x{0xa088c20300100000 + ca_lid:016x} {ca_lid:6d}    1[  ] =={state}==> "
                                 f"{lid:7d} {port:4d}[  ] \"{name}\" {hint}")
                links += 2
            elif port <= HOST_PORTS + UPLINKS:
                peer = (index + port) % switches + 1
                lines.append(f"        {lid:5d} {port:4d}[  ] =={NDR}==> {peer:7d} {port:4d}[  ] "
                             f"\"MF0;leaf{peer - 1:04d}:MQM9700/U1\" ( )")
                links += 1
            else:
                lines.append(f"        {lid:5d} {port:4d}[  ] =={DOWN}==>             [  ] \"\" ( )")
                links += 1
    # iblinkinfo prints CAs and switches interleaved in discovery order; CAs first here.
    return "\n".join(ca_blocks + lines) + "\n", links, degraded * 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--markdown", type=Path, help="write the result table here")
    parser.add_argument("--before", type=float, metavar="SECONDS",
                        help="median of an earlier version, for a before/after line in the markdown")
    args = parser.parse_args()

    text, expected_links, expected_degraded = generate(args.switches)
    parsed = parse_iblinkinfo(text)
    hinted = [link for link in parsed if link.could_be_width is not None or link.could_be_lane_gbps is not None]
    assert len(parsed) == expected_links, (len(parsed), expected_links)
    assert len(hinted) == expected_degraded, (len(hinted), expected_degraded)

    timings = []
    for _ in range(args.runs):
        started = time.perf_counter()
        parse_iblinkinfo(text)
        timings.append(time.perf_counter() - started)
    median = statistics.median(timings)
    lines = text.count("\n")
    summary = (f"parse_iblinkinfo: {args.switches} switches, {lines} lines, {len(text) / 1e6:.1f} MB, "
               f"{len(parsed)} links ({len(hinted)} with Could-be hints): median {median:.3f} s, "
               f"min {min(timings):.3f} s, max {max(timings):.3f} s over {args.runs} runs")
    print(summary)
    if args.markdown:
        before_after = (f"- before/after: median {args.before:.3f} s (earlier version, same machine) -> {median:.3f} s "
                        f"({(1 - median / args.before) * 100:.0f}% less)\n" if args.before else "")
        args.markdown.write_text(
            "# iblinkinfo parsing benchmark\n\n"
            f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}\n"
            f"- machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
            f"Python {platform.python_version()}\n"
            f"- command: `python benchmarks/iblinkinfo_bench.py --switches {args.switches} --runs {args.runs}`\n"
            "- input: generated grouped `iblinkinfo`, 40-port switches (20 host ports, 16 uplinks, 4 Down/Polling), "
            "one `CA:` block per host port, 1 in ~45 host links degraded with a Could-be hint\n"
            "- target: <= 1 s\n"
            f"{before_after}\n"
            "| switches | lines | MB | links | hinted | median s | min s | max s |\n"
            "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            f"| {args.switches} | {lines} | {len(text) / 1e6:.1f} | {len(parsed)} | {len(hinted)} | "
            f"{median:.3f} | {min(timings):.3f} | {max(timings):.3f} |\n")
    return 0 if median <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
