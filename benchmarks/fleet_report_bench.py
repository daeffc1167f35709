"""Benchmark `netdoctor fleet report` over 10,000 synthetic node reports.

Writes four inputs (`write_inputs`), runs the real CLI
(`python -m netdoctor.fleet report ... --format json`) on each in a child process, and
records wall time (median of --repeat runs, 5 by default) and the child's peak RSS. Usage:

    python benchmarks/fleet_report_bench.py [--nodes 10000] [--repeat 5] [--work DIR]
        [--tree DIR | --rev REV] [--label before] [--flood-mib 1024]

With --work DIR the inputs are kept there and reused when already written for as many nodes.
`--tree DIR` runs the `netdoctor` package found in DIR instead of the installed one, `--rev
REV` that of a git revision (before/after). `--flood-mib N`
(0: skip) also streams N MiB of one node's output to `fleet report -`, once as a single
line and once as many short lines, with two healthy nodes, and records the peak RSS.

`--rails-nodes N` instead times rail wiring alone (`find_rails`, CPU time of a child, best and
median of --repeat) over N synthetic nodes in three shapes, for the `--rev`/`--tree` packages
(before) and the installed ones (after) in one run:

    python benchmarks/fleet_report_bench.py --rails-nodes 10000 --rev HEAD
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from fixture_reports import tree_of  # noqa: E402  (a revision's packages, laid out as installed)

PORTS = 8
GPUS = 8


def synthetic_report(index: int, rng: random.Random) -> dict[str, Any]:
    """A report shaped like a DGX H100's: ~60 findings with evidence, a probe result."""
    host = f"node{index:05d}"
    findings: list[dict[str, Any]] = []
    bad_port = rng.randrange(PORTS) if rng.random() < 0.01 else None
    for port in range(PORTS):
        subject = f"mlx5_{port}:1"
        failing = port == bad_port
        findings.append({"check": "port-state", "status": "pass", "subject": subject, "summary": "",
                         "evidence": {"state": "ACTIVE", "physical_state": "LinkUp"}})
        findings.append({"check": "link-speed", "status": "fail" if failing else "pass", "subject": subject,
                         "summary": "port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)" if failing else "",
                         "evidence": {"rate_gbps": 200 if failing else 400, "expected_gbps": 400, "width": "4X"}})
        growth = rng.choice([0, 0, 0, 0, 0, 0, 0, 1]) if rng.random() < 0.999 else 5000
        findings.append({"check": "error-counters", "status": "pass", "subject": subject, "summary": "",
                         "evidence": {"symbol_error_delta": growth, "link_downed_delta": 0, "port_rcv_errors_delta": 0,
                                      "error_growth": growth, "elapsed_s": 300}})
        findings.append({"check": "mtu", "status": "pass", "subject": subject, "summary": "", "evidence": {"active_mtu": 4096}})
    for gpu in range(GPUS):
        findings.append({"check": "pcie-link", "status": "pass", "subject": f"0000:{0x18 + gpu * 0x10:02x}:00.0", "summary": "",
                         "evidence": {"cur_gen": 5, "max_gen": 5, "cur_width": 16, "max_width": 16}})
        findings.append({"check": "gpu-nic-affinity", "status": "pass", "subject": f"GPU{gpu}", "summary": "",
                         "evidence": {"nic": f"mlx5_{gpu}", "path": "PIX", "numa_node": gpu // 4}})
    findings.append({"check": "gpudirect", "status": "pass", "subject": "node", "summary": "", "evidence": {"module": "nvidia_peermem"}})
    findings.append({"check": "pfc-ecn", "status": "skip", "subject": "node", "summary": "no RoCE ports", "evidence": {}})
    busbw = rng.gauss(452.0, 3.0) if rng.random() > 0.002 else rng.uniform(250, 350)
    findings.append({"check": "nccl-probe", "status": "pass", "subject": "node", "summary": "",
                     "evidence": {"busbw_gbps": round(busbw, 1), "expected_gbps": 360}})
    grade = "fail" if bad_port is not None else "pass"
    # Versions (1 node in ~1,000 on older HCA firmware) and first-hop neighbours of a
    # rail-optimised fabric (32 nodes per leaf, one leaf per rail), node 4242's rail 3 miswired.
    leaf_group = (index - 1) // 32
    neighbors = {f"mlx5_{port}:1": {"switch_guid": f"0xfc6a1c0300{leaf_group * PORTS + wired:06x}",
                                    "switch_name": f"leaf-r{wired}-{leaf_group:03d}", "switch_port": (index - 1) % 32 + 1}
                 for port in range(PORTS) for wired in [2 if (index, port) == (4242, 3) else port]}
    return {
        "schema": "netdoctor.report/1", "host": host, "grade": grade, "started_at": "2026-11-21T22:40:00Z",
        "duration_s": 2.31, "rules": "dgx-h100", "findings": findings,
        "checks": [{"check": check, "status": "pass", "duration_s": 0.01, "required": True}
                   for check in ("port-state", "link-speed", "pcie-link", "error-counters", "mtu", "pfc-ecn",
                                 "gpudirect", "gpu-nic-affinity", "nccl-probe")],
        "netdoctor": "0.1.0", "probe": {"busbw_gbps": round(busbw, 1), "algbw_gbps": round(busbw * 8 / 14, 1)},
        "versions": {"driver": "550.54.15", "cuda_driver": "12.4", "vbios": {"NVIDIA H100 80GB HBM3": "96.00.89.00.01"},
                     "hca_firmware": {"MT4129 MT_0000000838": "28.37.1014" if index % 997 == 0 else "28.39.1002"},
                     "ofed": "MLNX_OFED_LINUX-23.10-1.1.9.0", "nccl": "2.21.5+cuda12.4",
                     "kernel": "5.15.0-105-generic", "fabric_manager": "550.54.15"},
        "fabric": {"gpus": GPUS, "rails": [{"port": f"mlx5_{port}:1", "rate_gbps": 400.0, "gpu": port} for port in range(PORTS)]},
        "neighbors": neighbors,
    }


def write_inputs(work: Path, nodes: int) -> dict[str, Path]:
    """The inputs: pdsh output as `check --format json` prints it (short lines), as one
    line per node, pretty-printed (0.1's form, and what a terminal shows), and a directory
    of report files as `check --format json -o` writes them."""
    from netdoctor.report.json_report import short_lines

    rng = random.Random(20261121)
    paths = {"pdsh, as `check --format json` prints": work / "sweep-short-lines.out",
             "pdsh, one JSON line per node": work / "sweep-compact.out",
             "pdsh, pretty-printed JSON (indent 2)": work / "sweep-pretty.out"}
    directory = work / "reports-short-lines"
    inputs = {**paths, "directory of report files": directory}
    marker = work / f".written-{nodes}-v3"
    if marker.exists():
        return inputs
    directory.mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        short, compact, pretty = (stack.enter_context(path.open("w")) for path in paths.values())
        for index in range(1, nodes + 1):
            report = synthetic_report(index, rng)
            host = report["host"]
            text = short_lines(report)
            short.write("".join(f"{host}: {line}\n" for line in text.splitlines()))
            compact.write(f"{host}: {json.dumps(report)}\n")
            pretty.write("".join(f"{host}: {line}\n" for line in json.dumps(report, indent=2).splitlines()))
            (directory / f"{host}.json").write_text(text)
    marker.write_text("")
    return inputs


# The child's own peak RSS. Not ru_maxrss: Linux carries it over fork and exec, so a
# child would report the benchmark's own (growing) peak whenever that is larger.
_PEAK_RSS = (
    "def peak_rss_kib():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            return int(line.split()[1])\n"
    "    import resource\n"
    "    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
)


def _prelude(tree: Path | None) -> str:
    """Imports the fleet CLI from `tree` (dropping the editable install's finder) or as installed."""
    if tree is None:
        return _PEAK_RSS + "import sys\n"
    return (_PEAK_RSS + "import sys\n"
            "sys.meta_path[:] = [finder for finder in sys.meta_path if 'editable' not in repr(finder)]\n"
            f"sys.path.insert(0, {str(tree)!r})\n")


def _child(tree: Path | None, *args: str) -> list[str]:
    code = (_prelude(tree) + "from netdoctor.fleet.cli import main\ncode=main(sys.argv[1:])\n"
            "sys.stderr.write('PEAK_RSS_KIB %d\\n' % peak_rss_kib())\nsys.exit(code)")
    return [sys.executable, "-c", code, *args]


def run_once(path: Path, repo: Path, tree: Path | None = None) -> tuple[float, float, dict[str, Any]]:
    """Wall seconds, child peak RSS in MiB, and the fleet report's counts and outliers, for one CLI run."""
    started = time.perf_counter()
    done = subprocess.run(_child(tree, "report", str(path), "--format", "json"),
                          capture_output=True, text=True, cwd=repo, timeout=600)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1, 2):
        raise SystemExit(f"fleet report failed ({done.returncode}): {done.stderr}")
    rss_kib = int(done.stderr.rsplit("PEAK_RSS_KIB ", 1)[1].split()[0])
    report = json.loads(done.stdout)
    drift = [entry for entry in report.get("drift", []) if entry["minority"]]
    return wall, rss_kib / 1024, {"counts": report["counts"], "outliers": len(report["outliers"]),
                                  "nodes": len(report["nodes"]),
                                  "drift": {entry["what"]: sum(map(len, entry["minority"].values())) for entry in drift},
                                  "odd_leaves": [entry["leaf"] for entry in report.get("rails", []) if entry["odd"]]}


def flood_once(repo: Path, tree: Path | None, mib: int, one_line: bool) -> str:
    """Stream `mib` MiB of node n0's output (one line, or lines of a JSON object that never
    closes) and two healthy reports to `fleet report -`: wall, peak RSS and n0's verdict."""
    piece = b"x" * (1 << 20) if one_line else b'n0:   "k": 1,\n' * ((1 << 20) // 14)
    healthy = "".join(f"{host}: {json.dumps(synthetic_report(index, random.Random(index)) | {'host': host})}\n"
                      for index, host in ((1, "n1"), (2, "n2"))).encode()
    started = time.perf_counter()
    with tempfile.TemporaryFile() as stderr, tempfile.TemporaryFile() as stdout:
        child = subprocess.Popen(_child(tree, "report", "-", "--format", "json", "-w", "n[0-2]"), cwd=repo,
                                 stdin=subprocess.PIPE, stdout=stdout, stderr=stderr)
        assert child.stdin is not None
        try:
            child.stdin.write(healthy)
            child.stdin.write(b"n0: " if one_line else b"n0: {\n")
            for _ in range(mib):
                child.stdin.write(piece)
            child.stdin.write(b"\n")
            child.stdin.close()
        except BrokenPipeError:
            pass
        child.wait(timeout=1200)
        wall = time.perf_counter() - started
        stderr.seek(0)
        stdout.seek(0)
        errors = stderr.read().decode(errors="replace")
        if "PEAK_RSS_KIB " not in errors:
            return f"{wall:.1f} s, failed (exit {child.returncode}): {errors.strip().splitlines()[-1:]}"
        rss = int(errors.rsplit("PEAK_RSS_KIB ", 1)[1].split()[0]) / 1024
        nodes = {node["host"]: node for node in json.loads(stdout.read())["nodes"]}
    n0 = nodes["n0"]
    return (f"{wall:.1f} s, peak RSS {rss:.0f} MiB; n0 {n0['grade']} ({(n0.get('top') or {}).get('summary', '')[:60]!r}),"
            f" n1 {nodes['n1']['grade']}, n2 {nodes['n2']['grade']}")


# Rail wiring alone, in a child (so that `--rev` runs that revision's code): each shape's nodes
# built as the fleet keeps them (`NodeSummary.rails`), then `find_rails` timed in CPU seconds.
_RAILS_CHILD = """
import json, time
from netdoctor.fleet.model import NodeGrade, NodeSummary
from netdoctor.fleet.rails import find_rails
count, repeat = int(sys.argv[1]), int(sys.argv[2])
def node(index, rails):
    return NodeSummary(host=f"node{index:05d}", grade=NodeGrade.PASS, rails=tuple(rails))
shapes = {
    "one leaf: every node's rail 3, one node's rail 2": [
        node(i, [("mlx5_2:1" if i == 4242 else "mlx5_3:1", 400.0, 2 if i == 4242 else 3, "0xaa", "leaf-a")])
        for i in range(count)],
    "one leaf: every node's rail 3 and a rail of its own": [
        node(i, [("mlx5_3:1", 400.0, 3, "0xaa", "leaf-a"), (f"x{i}:1", 400.0, 100 + i, "0xaa", "leaf-a")])
        for i in range(count)],
    "rail-optimised: 8 rails, 32 nodes per leaf": [
        node(i, [(f"mlx5_{p}:1", 400.0, p, f"0x{(i // 32) * 8 + p:06x}", f"leaf-r{p}-{i // 32:03d}") for p in range(8)])
        for i in range(count)],
}
result = {}
for label, nodes in shapes.items():
    times = []
    for _ in range(repeat):
        started = time.process_time()
        leaves = find_rails(nodes)
        times.append(time.process_time() - started)
    result[label] = {"best_s": min(times), "median_s": sorted(times)[len(times) // 2], "leaves": len(leaves),
                     "odd_hosts": sum(len(hosts) for leaf in leaves for hosts in leaf["odd"].values())}
print(json.dumps(result))
"""


def rails_bench(repo: Path, trees: dict[str, Path | None], count: int, repeat: int) -> None:
    """`find_rails` over `count` nodes per shape, each tree in turn, printed as table rows."""
    results = {}
    for label, tree in trees.items():
        done = subprocess.run([sys.executable, "-c", _prelude(tree) + _RAILS_CHILD, str(count), str(repeat)],
                              capture_output=True, text=True, cwd=repo, check=True, timeout=3600)
        results[label] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"| rail wiring alone ({count:,} nodes) | " + " | ".join(f"{label}: best / median CPU" for label in results) + " |")
    for shape in next(iter(results.values())):
        cells = [f"{result[shape]['best_s']:.3f} / {result[shape]['median_s']:.3f} s "
                 f"({result[shape]['odd_hosts']:,} odd)" for result in results.values()]
        print(f"| {shape} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tree", type=Path, default=None, help="run the netdoctor package found in this directory")
    parser.add_argument("--rev", default=None, help="run this git revision's packages (laid out by fixture_reports.tree_of)")
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--flood-mib", type=int, default=0)
    parser.add_argument("--rails-nodes", type=int, default=0, help="time rail wiring alone over this many nodes")
    arguments = parser.parse_args()
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as scratch:
        if arguments.rev:
            arguments.tree = tree_of(arguments.rev, Path(scratch) / "tree")
            arguments.label = arguments.rev if arguments.label == "this tree" else arguments.label
        if arguments.rails_nodes:
            print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
                  f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
            trees = {arguments.label: arguments.tree, "this tree": None} if arguments.tree else {"this tree": None}
            rails_bench(repo, trees, arguments.rails_nodes, arguments.repeat)
            return
        work = arguments.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        inputs = write_inputs(work, arguments.nodes)
        baseline = subprocess.run(
            [sys.executable, "-c", _prelude(arguments.tree) + "import netdoctor.fleet.cli\nprint(peak_rss_kib())"],
            capture_output=True, text=True, cwd=repo, check=True)
        print(f"[{arguments.label}] netdoctor from {arguments.tree or 'the installed tree'}")
        print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
              f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
        print(f"python + netdoctor.fleet import alone: peak RSS {int(baseline.stdout) / 1024:.1f} MiB")
        for label, path in inputs.items():
            size = sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size
            runs = [run_once(path, repo, arguments.tree) for _ in range(arguments.repeat)]
            median = statistics.median(run[0] for run in runs)
            rss = max(run[1] for run in runs)
            report = runs[0][2]
            print(f"{label}: {arguments.nodes} nodes, {size / 2**20:.0f} MiB input: median wall {median:.2f} s "
                  f"(runs {', '.join(f'{run[0]:.2f}' for run in runs)}), peak RSS {rss:.1f} MiB "
                  f"(runs {', '.join(f'{run[1]:.0f}' for run in runs)}), "
                  f"counts {report['counts']}, outliers {report['outliers']}, drift {report['drift']}, "
                  f"odd leaves {report['odd_leaves']}")
            if report["nodes"] != arguments.nodes:
                raise SystemExit(f"{label}: {report['nodes']} nodes in the fleet report, expected {arguments.nodes}")
        if arguments.flood_mib:
            for one_line in (True, False):
                shape = "one line" if one_line else "short lines of an open JSON object"
                print(f"one node sends {arguments.flood_mib} MiB as {shape}: "
                      f"{flood_once(repo, arguments.tree, arguments.flood_mib, one_line)}", flush=True)


if __name__ == "__main__":
    main()
