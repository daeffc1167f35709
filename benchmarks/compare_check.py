"""`netdoctor check --no-probe --snapshot` of the 8-GPU fixture: an older revision against this tree.

Runs of the two codes alternate (old, new, old, new, ...) so that load on a shared machine
falls on both alike; prints medians and writes a markdown section.

    python benchmarks/compare_check.py --rev 19c181b [--runs 40] [--markdown benchmarks/results/check.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from check_bench import ARGS, REPO, command, peak_rss_kib, update_markdown  # noqa: E402
from fixture_reports import tree_of  # noqa: E402  (a revision's packages, laid out as installed)


def timed(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=False)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", required=True, help="the older revision")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--markdown", type=Path)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        old, new = command(tree_of(options.rev, Path(temporary))), command(None)
        for cmd in (old, new):
            exit_codes = {subprocess.run(cmd, capture_output=True, check=False).returncode for _ in range(3)}
            if exit_codes != {0}:
                sys.stderr.write(f"the benchmarked command failed: {cmd}\n")
                return 3
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(options.runs):
            times["old"].append(timed(old))
            times["new"].append(timed(new))
        rss = {"old": peak_rss_kib(old)[0], "new": peak_rss_kib(new)[0]}
    load = os.getloadavg()
    rows = [f"| {label} | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} | {rss[key] / 1024:.1f} |"
            for key, label, values in (("old", f"before ({options.rev})", times["old"]),
                                       ("new", "after (this tree)", times["new"]))]
    ratio = statistics.median(times["new"]) / statistics.median(times["old"])
    section = "\n".join([
        "<!-- check_bench:compare:begin -->",
        "## before / after, alternating runs",
        "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}; machine: nproc {os.cpu_count()}, "
        f"Python {platform.python_version()}; load average at the end {load[0]:.2f}",
        f"- command: `netdoctor {' '.join(ARGS).replace(str(REPO) + '/', '')}`, {options.runs} runs each, alternating",
        "",
        "| code | median s | min s | max s | peak RSS MB |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
        f"after / before (median): **{ratio:.2f}**",
        "<!-- check_bench:compare:end -->",
    ]) + "\n"
    sys.stdout.write(section)
    if options.markdown:
        update_markdown(options.markdown, "compare", section)
    return 0 if ratio <= 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
