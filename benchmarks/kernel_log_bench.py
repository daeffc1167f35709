"""Parse a 100,000-line kernel log (`dmesg --time-format iso`) and time it.

The log is the real boot log of the device tool's 2x H200 VM
(tests/data/device/nvidia-h200-x2/raw-fabric/dmesg.out) repeated, with a link flap and an
application Xid after every copy, so the scan meets real lines and real events. Prints the
median of --repeat runs (default 9). Target: <= 0.2 s (issue 11).

    python benchmarks/kernel_log_bench.py [--lines 100000] [--repeat 9]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from netdoctor.parsers.kernel_log import parse_kernel_log

REAL_LOG = Path(__file__).resolve().parent.parent / "tests/data/device/nvidia-h200-x2/raw-fabric/dmesg.out"
EVENTS = ("2026-11-23T23:00:00,000000+00:00 mlx5_core 0000:1a:00.0 ibp26s0: Link down",
          "2026-11-23T23:00:02,000000+00:00 mlx5_core 0000:1a:00.0 ibp26s0: Link up",
          "2026-11-23T23:00:03,000000+00:00 NVRM: Xid (PCI:0000:18:00): 13, pid=4711, name=python3, Graphics Exception")


def synthetic_log(lines: int) -> str:
    base = REAL_LOG.read_text(encoding="utf-8").splitlines()
    out: list[str] = []
    while len(out) < lines:
        out += base + list(EVENTS)
    return "\n".join(out[:lines]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=9)
    arguments = parser.parse_args()
    text = synthetic_log(arguments.lines)
    runs = []
    for _ in range(arguments.repeat):
        started = time.perf_counter()
        parsed = parse_kernel_log(text)
        runs.append(time.perf_counter() - started)
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    print(f"{arguments.lines} lines ({len(text) / 2**20:.1f} MiB), {len(parsed.events)} events: median "
          f"{statistics.median(runs):.3f} s (runs {', '.join(f'{run:.3f}' for run in runs)})")


if __name__ == "__main__":
    main()
