"""Benchmark `netdoctor check --no-probe --snapshot tests/fixtures/nodes/dgx-h100` as a whole process.

Targets (issue 24): median wall time <= 0.25 s, peak RSS <= 50 MB on a 2-core VM. Measures
wall time with hyperfine when installed (else a subprocess loop), peak RSS with
`/usr/bin/time -v` (else getrusage of the child), and the import time breakdown
(`python -X importtime`).

    python benchmarks/check_bench.py [--runs 20] [--markdown benchmarks/results/check.md]   # this working tree
    python benchmarks/check_bench.py --tree /work/before --label before                   # an older copy of the code

The code measured is this working tree, or with `--tree DIR` the `netdoctor`,
`netdoctor_plugins` and `netdoctor_rules` packages found in DIR (or a checkout's netdoctor/,
plugins/ and rules/), first on sys.path with the editable-install finder dropped: an
editable install may point at another checkout. Runs use compiled bytecode kept in a scratch
PYTHONPYCACHEPREFIX (as an installed netdoctor has its .pyc), never written into the tree.
With --markdown, only the section of this label (between its markers) is replaced. Time
the real interpreter, not a pyenv shim.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from startup_bench import bytecode_cached, installed_layout  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TARGET_S, TARGET_RSS_KIB = 0.25, 50 * 1024
FIXTURE = REPO / "tests" / "fixtures" / "nodes" / "dgx-h100"
ARGS = ["check", "--no-probe", "--snapshot", str(FIXTURE)]
HEAVY = ("typer", "click", "structlog", "asyncio", "rich", "pygments", "pydantic", "pynvml", "pyroute2", "ClusterShell",
         "psutil", "netdoctor.probe.engine")


def _prelude(tree: Path | None) -> str:
    if tree is None:
        return "import sys\nfrom netdoctor.cli import main\n"
    # Drop the editable-install finder so the packages of `tree` are imported instead.
    return ("import sys\n"
            "sys.meta_path[:] = [finder for finder in sys.meta_path if 'editable' not in repr(finder)]\n"
            f"sys.path.insert(0, {str(tree)!r})\n"
            "from netdoctor.cli import main\n")


def command(tree: Path | None, *python_flags: str) -> list[str]:
    return [sys.executable, *python_flags, "-c", _prelude(tree) + "main()", *ARGS]


def wall_times(cmd: list[str], runs: int) -> tuple[list[float], str]:
    hyperfine = shutil.which("hyperfine")
    if hyperfine:
        with tempfile.NamedTemporaryFile(suffix=".json") as export:
            subprocess.run([hyperfine, "-N", "-w", "3", "-r", str(runs), "-i", "--export-json", export.name,
                            "--", subprocess.list2cmdline(cmd)], check=True, capture_output=True)
            return json.loads(Path(export.name).read_text())["results"][0]["times"], "hyperfine -N -w 3"
    times = []
    for _ in range(runs + 3):
        started = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return times[3:], "subprocess loop (3 warm-up runs)"


def peak_rss_kib(cmd: list[str], runs: int = 5) -> tuple[int, str]:
    gnu_time = Path("/usr/bin/time")
    peaks = []
    for _ in range(runs):
        if gnu_time.exists():
            done = subprocess.run([str(gnu_time), "-v", *cmd], capture_output=True, text=True, check=False)
            match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
            if match:
                peaks.append(int(match[1]))
                continue
        child = subprocess.run([sys.executable, "-c",
                                "import resource, subprocess, sys; subprocess.run(sys.argv[1:], capture_output=True);"
                                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)", *cmd],
                               capture_output=True, text=True, check=False)
        peaks.append(int(child.stdout.strip()))
    return max(peaks), "/usr/bin/time -v" if gnu_time.exists() else "getrusage(RUSAGE_CHILDREN)"


def import_breakdown(tree: Path | None, top: int = 14) -> tuple[float, list[tuple[str, float]], list[str]]:
    """(total import ms, slowest top-level imports [(module, cumulative ms)], heavy modules loaded)."""
    done = subprocess.run(command(tree, "-X", "importtime"), capture_output=True, text=True, check=False)
    rows = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$", line)
        if match:
            rows.append((len(match[3]), match[4], int(match[2]) / 1000))
    heavy = loaded_heavy_modules(tree)
    top_level = sorted(((module, ms) for depth, module, ms in rows if depth <= 3), key=lambda row: -row[1])
    # `depth 1` entries are the imports the program itself triggered: their sum is the total.
    total = sum(ms for depth, _, ms in rows if depth == 1)
    return total, top_level[:top], heavy


def loaded_heavy_modules(tree: Path | None) -> list[str]:
    """HEAVY modules really in sys.modules after a run (-X importtime also lists refused imports)."""
    program = (_prelude(tree).replace("from netdoctor.cli import main", "from netdoctor.cli import run_cli")
               + f"run_cli({ARGS!r})\n"
               + "sys.stderr.write('MODULES=' + ','.join(sorted(name for name in sys.modules if sys.modules[name])))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=False)
    loaded = set(done.stderr.rsplit("MODULES=", 1)[-1].split(","))
    return [name for name in HEAVY if name in loaded]


def markdown(label: str, tree: Path | None, runs: int, times: list[float], timer: str, rss_kib: int, rss_tool: str,
             imports: tuple[float, list[tuple[str, float]], list[str]]) -> str:
    total, slowest, heavy = imports
    median = statistics.median(times)
    verdict = "meets" if median <= TARGET_S and rss_kib <= TARGET_RSS_KIB else "MISSES"
    lines = [
        f"<!-- check_bench:{label}:begin -->",
        f"## {label}",
        "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- machine: nproc {os.cpu_count()}, Python {platform.python_version()} ({platform.machine()})",
        f"- code: {'copy at ' + str(tree) if tree else 'this working tree'}",
        f"- command: `netdoctor {' '.join(ARGS).replace(str(REPO) + '/', '')}`",
        f"- wall time ({timer}, {len(times)} runs): median **{median:.3f} s**, min {min(times):.3f} s, "
        f"max {max(times):.3f} s",
        f"- peak RSS ({rss_tool}, max of 5 runs): **{rss_kib / 1024:.1f} MB**",
        f"- target (median <= {TARGET_S} s, RSS <= {TARGET_RSS_KIB // 1024} MB): {verdict}",
        f"- imports: {total:.0f} ms in all; heavy modules loaded: {', '.join(heavy) or 'none'}",
        "",
        "| module (cumulative, nested <= 3 levels) | ms |",
        "|---|---:|",
        *[f"| {'`' + module + '`'} | {ms:.1f} |" for module, ms in slowest],
        f"<!-- check_bench:{label}:end -->",
    ]
    return "\n".join(lines) + "\n"


def update_markdown(path: Path, label: str, section: str) -> None:
    text = path.read_text() if path.exists() else "# `netdoctor check --snapshot` benchmark\n\n"
    pattern = re.compile(rf"<!-- check_bench:{re.escape(label)}:begin -->.*?<!-- check_bench:{re.escape(label)}:end -->\n",
                         re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tree", type=Path, help="measure the packages in this directory instead")
    parser.add_argument("--label", default="after")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        bytecode_cached(Path(scratch))      # as installed: compiled once (by this first run), not per run
        tree = installed_layout((args.tree or REPO).resolve(), Path(scratch) / "tree")
        cmd = command(tree)
        check = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if check.returncode != 0:
            sys.stderr.write(f"the benchmarked command failed ({check.returncode}): {check.stderr}\n")
            return 3
        times, timer = wall_times(cmd, args.runs)
        rss_kib, rss_tool = peak_rss_kib(cmd)
        section = markdown(args.label, args.tree, args.runs, times, timer, rss_kib, rss_tool, import_breakdown(tree))
    sys.stdout.write(section)
    if args.markdown:
        update_markdown(args.markdown, args.label, section)
    return 0 if statistics.median(times) <= TARGET_S and rss_kib <= TARGET_RSS_KIB else 1


if __name__ == "__main__":
    sys.exit(main())
