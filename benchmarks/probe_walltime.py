"""Wall time of the whole `netdoctor probe` command, process start to exit (median of N runs).

Usage (on a GPU node): python3 benchmarks/probe_walltime.py --runs 5 [-- extra netdoctor probe args]
Prints one JSON object: every run's seconds, exit code and busbw, and the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("extra", nargs="*", help="extra arguments for `netdoctor probe`")
    arguments = parser.parse_args()
    runs = []
    for _ in range(arguments.runs):
        started = time.perf_counter()
        completed = subprocess.run([sys.executable, "-m", "netdoctor", "probe", "--format", "json", *arguments.extra],
                                   capture_output=True, text=True, timeout=120, check=False)
        elapsed = time.perf_counter() - started
        try:
            report = json.loads(completed.stdout)
            probe = report.get("probe") or {}
            busbw, grade, timings = probe.get("busbw_gbps"), report.get("grade"), probe.get("timings")
        except json.JSONDecodeError:
            busbw, grade, timings = None, None, completed.stderr[-500:]
        runs.append({"seconds": round(elapsed, 3), "exit": completed.returncode, "grade": grade, "busbw_gbps": busbw,
                     "worker_timings": timings})
    print(json.dumps({"median_s": statistics.median(run["seconds"] for run in runs), "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
