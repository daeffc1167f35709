"""Benchmark `netdoctor fleet report` over 10,000 synthetic nodes: before/after in one run.

Two fleets, each written in the four input forms (`write_inputs`): honest nodes shaped like a
DGX H100's report, and nodes each at the per-node bounds of what the fleet keeps (`at_limits`).
Each input goes to the real CLI (`fleet report FILE --format json`) in a child process, the
old code (`--tree DIR` or `--rev REV`, put first on sys.path without the editable finder) and
this tree taking turns, and the child's wall time, CPU time (user + system) and peak RSS
(VmHWM) are recorded: median wall of --repeat runs (3; --limits-repeat 1 for the nodes at the
limits), best CPU (the child's own children too), largest RSS; where a large sweep's second half
is read ahead by a forked child (netdoctor.fleet.ahead), that child's peak RSS is shown beside
(`+ N MiB ahead`: pages shared since the fork count in both; its PSS at the end of its work,
shared pages counted half, beside). `--decoders` adds this tree with the standard library's json
alone (msgspec turned off), so the decoder's share shows in the same run. Usage:

    python benchmarks/fleet_report_bench.py --tree /work/before --work /tmp/fbench [--decoders]
        [--nodes 10000] [--limits-nodes 10000] [--repeat 3] [--limits-repeat 1] [--only honest|limits]

With --work DIR the inputs are kept there and reused when already written for as many nodes.
Without --tree/--rev only this tree runs. `--flood-mib N` instead streams N MiB of one node's
output to `fleet report -` (once as a single line, once as many short lines) beside two healthy
nodes, and records the peak RSS. `--rails-nodes N` instead times rail wiring alone
(`find_rails`, CPU time of a child, best and median of --repeat) over N synthetic nodes in
three shapes, for the `--rev`/`--tree` packages (before) and this tree (after):

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
import resource
import shutil
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


def at_limits(index: int, rng: random.Random) -> dict[str, Any]:
    """A report at the per-node bounds of what the fleet keeps (netdoctor.fleet.model, .kept):
    150-200 check ids of 64 characters no other node has (200 is the bound), each warn, fail
    or unknown; the 32 findings kept, each with a 128-character subject and a 200-character
    summary; a 500-character `host` (an alias beside the sender's name). Nodes differ in their
    count of checks, so that the report's memory budget keeps the lighter ones."""
    tag = f"{index:05d}"
    checks = [f"check-{number:03d}-{tag}-".ljust(64, "x") for number in range(150 + index * 7919 % 51)]
    statuses = ("warn", "fail", "unknown")
    return {"schema": "netdoctor.report/1", "host": f"node{tag}.".ljust(500, "a"), "grade": "fail",
            "checks": [{"check": check, "status": statuses[number % 3]} for number, check in enumerate(checks)],
            "findings": [{"check": checks[number], "status": statuses[number % 3], "subject": f"{number}-{tag}-".ljust(128, "s"),
                          "summary": f"{number} {tag} ".ljust(200, "y")} for number in range(32)]}


def write_inputs(work: Path, nodes: int, make: Any = synthetic_report, name: str = "") -> dict[str, Path]:
    """The inputs of `make`'s nodes: pdsh output as `check --format json` prints it (short
    lines), as one line per node, pretty-printed (0.1's form, and what a terminal shows), and a
    directory of report files as `check --format json -o` writes them."""
    from netdoctor.report.json_report import short_lines

    rng = random.Random(20261121)
    paths = {"pdsh, as `check --format json` prints": work / f"sweep{name}-short-lines.out",
             "pdsh, one JSON line per node": work / f"sweep{name}-compact.out",
             "pdsh, pretty-printed JSON (indent 2)": work / f"sweep{name}-pretty.out"}
    directory = work / f"reports{name}-short-lines"
    inputs = {**paths, "directory of report files": directory}
    marker = work / f".written{name}-{nodes}-v3"
    if marker.exists():
        return inputs
    directory.mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        short, compact, pretty = (stack.enter_context(path.open("w")) for path in paths.values())
        for index in range(1, nodes + 1):
            report = make(index, rng)
            host = f"node{index:05d}"
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


def _prelude(tree: Path | None, stdlib_json: bool = False) -> str:
    """Imports the fleet CLI from `tree` (dropping the editable install's finder) or as installed;
    `stdlib_json`: this tree with msgspec turned off (netdoctor.fleet.bounded)."""
    code = _PEAK_RSS + "import sys\n"
    if tree is not None:
        code += ("sys.meta_path[:] = [finder for finder in sys.meta_path if 'editable' not in repr(finder)]\n"
                 f"sys.path.insert(0, {str(tree)!r})\n")
    if stdlib_json:
        code += "import netdoctor.fleet.bounded as bounded\nbounded.use_fast_decoder(False)\n"
    return code


# The peak RSS of the child that reads a large sweep's second half ahead (netdoctor.fleet.ahead),
# written where BENCH_AHEAD_RSS says once its work is done (code without it writes nothing).
_AHEAD_RSS = (
    "import os\n"
    "try:\n"
    "    import netdoctor.fleet.ahead as _ahead\n"
    "except ImportError:\n"
    "    _ahead = None\n"
    "if _ahead is not None:\n"
    "    _take = _ahead._take_ahead\n"
    "    def _measured(*args):\n"
    "        _take(*args)\n"
    "        pss = [line.split()[1] for line in open('/proc/self/smaps_rollup') if line.startswith('Pss:')]\n"
    "        with open(os.environ['BENCH_AHEAD_RSS'], 'w') as out:\n"
    "            out.write(f'{peak_rss_kib()} {pss[0] if pss else 0}')\n"
    "    _ahead._take_ahead = _measured\n"
)


def _child(tree: Path | None, *args: str, stdlib_json: bool = False) -> list[str]:
    code = (_prelude(tree, stdlib_json) + _AHEAD_RSS + "from netdoctor.fleet.cli import main\ncode=main(sys.argv[1:])\n"
            "sys.stderr.write('PEAK_RSS_KIB %d\\n' % peak_rss_kib())\nsys.exit(code)")
    return [sys.executable, "-c", code, *args]


def run_once(path: Path, repo: Path, tree: Path | None = None, stdlib_json: bool = False) -> tuple[float, float, float, dict[str, Any]]:
    """Wall seconds, CPU seconds, child peak RSS in MiB, and what the fleet report says (counts,
    outliers, drift, odd leaves, nodes dropped as too large), for one CLI run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    ahead_rss = Path(tempfile.mkdtemp()) / "ahead-rss"
    started = time.perf_counter()
    with tempfile.TemporaryFile() as stdout:
        done = subprocess.run(_child(tree, "report", str(path), "--format", "json", stdlib_json=stdlib_json),
                              stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=repo, timeout=1200,
                              env={**os.environ, "BENCH_AHEAD_RSS": str(ahead_rss)})
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in (0, 1, 2):
            raise SystemExit(f"fleet report failed ({done.returncode}): {done.stderr[-2000:]}")
        stdout.seek(0)
        report = json.load(stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rss_kib = int(done.stderr.rsplit("PEAK_RSS_KIB ", 1)[1].split()[0])
    ahead_kib, ahead_pss_kib = map(int, ahead_rss.read_text().split()) if ahead_rss.exists() else (0, 0)
    shutil.rmtree(ahead_rss.parent)
    drift = [entry for entry in report.get("drift", []) if entry["minority"]]
    too_large = sum(1 for node in report["nodes"] if (node.get("top") or {}).get("summary", "").startswith("too large"))
    return wall, cpu, rss_kib / 1024, {
        "counts": report["counts"], "outliers": len(report["outliers"]), "nodes": len(report["nodes"]),
        "drift": {entry["what"]: sum(map(len, entry["minority"].values())) for entry in drift},
        "odd_leaves": [entry["leaf"] for entry in report.get("rails", []) if entry["odd"]], "too_large": too_large,
        "ahead_mib": round(ahead_kib / 1024), "ahead_pss_mib": round(ahead_pss_kib / 1024)}


def compare(inputs: dict[str, Path], repo: Path, variants: dict[str, tuple[Path | None, bool]], repeat: int,
            nodes: int) -> None:
    """One table row per input: each variant's median wall, best CPU and peak RSS, the variants
    taking turns run by run (a load that comes and goes weighs on each alike)."""
    print("| input | size | " + " | ".join(f"{label}: wall / CPU / peak RSS" for label in variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    for label, path in inputs.items():
        size = sum(entry.stat().st_size for entry in path.iterdir()) if path.is_dir() else path.stat().st_size
        runs: dict[str, list[tuple[float, float, float, dict[str, Any]]]] = {variant: [] for variant in variants}
        for _ in range(repeat):
            for variant, (tree, stdlib_json) in variants.items():
                runs[variant].append(run_once(path, repo, tree, stdlib_json))
        cells = []
        for variant, done in runs.items():
            said = done[0][3]
            if said["nodes"] != nodes:
                raise SystemExit(f"{label}, {variant}: {said['nodes']} nodes in the fleet report, expected {nodes}")
            ahead, ahead_pss = (max(run[3][key] for run in done) for key in ("ahead_mib", "ahead_pss_mib"))
            cells.append(f"{statistics.median(run[0] for run in done):.2f} s / {min(run[1] for run in done):.2f} s / "
                         f"{max(run[2] for run in done):.0f} MiB" + (f" + {ahead} MiB ahead (PSS {ahead_pss})" if ahead else ""))
            print(f"  [{label}, {variant}] walls {', '.join(f'{run[0]:.2f}' for run in done)}; {said}", file=sys.stderr)
        print(f"| {label} | {size / 2**20:.0f} MiB | " + " | ".join(cells) + " |", flush=True)


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
    parser.add_argument("--limits-nodes", type=int, default=10_000)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limits-repeat", type=int, default=1)
    parser.add_argument("--only", choices=("honest", "limits"), default=None)
    parser.add_argument("--tree", type=Path, default=None, help="the old code: the netdoctor package found in this directory")
    parser.add_argument("--rev", default=None, help="the old code: this git revision's packages (fixture_reports.tree_of)")
    parser.add_argument("--label", default="before")
    parser.add_argument("--decoders", action="store_true", help="also this tree with the standard library's json alone")
    parser.add_argument("--flood-mib", type=int, default=0)
    parser.add_argument("--rails-nodes", type=int, default=0, help="time rail wiring alone over this many nodes")
    arguments = parser.parse_args()
    repo = Path(__file__).resolve().parent.parent
    print(f"{platform.python_implementation()} {platform.python_version()} ({sys.executable}), {os.cpu_count()} CPUs, "
          f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as scratch:
        if arguments.rev:
            arguments.tree = tree_of(arguments.rev, Path(scratch) / "tree")
        if arguments.rails_nodes:
            trees = {arguments.label: arguments.tree, "this tree": None} if arguments.tree else {"this tree": None}
            rails_bench(repo, trees, arguments.rails_nodes, arguments.repeat)
            return
        if arguments.flood_mib:
            for one_line in (True, False):
                shape = "one line" if one_line else "short lines of an open JSON object"
                print(f"one node sends {arguments.flood_mib} MiB as {shape}: "
                      f"{flood_once(repo, arguments.tree, arguments.flood_mib, one_line)}", flush=True)
            return
        work = arguments.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        variants: dict[str, tuple[Path | None, bool]] = {arguments.label: (arguments.tree, False)} if arguments.tree else {}
        variants["after"] = (None, False)
        if arguments.decoders:
            variants["after, json alone"] = (None, True)
        from netdoctor.fleet.bounded import FAST_DECODER
        print(f"old code: {arguments.tree or 'none'}; this tree's fast JSON decoder: {FAST_DECODER or 'none'}")
        if arguments.only != "limits":
            print(f"\n{arguments.nodes:,} honest nodes (--repeat {arguments.repeat}):\n")
            compare(write_inputs(work, arguments.nodes), repo, variants, arguments.repeat, arguments.nodes)
        if arguments.only != "honest":
            print(f"\n{arguments.limits_nodes:,} nodes at the per-node limits (--limits-repeat {arguments.limits_repeat}):\n")
            # (json alone against msgspec is shown on the honest fleet: here it would only add minutes.)
            compare(write_inputs(work, arguments.limits_nodes, at_limits, "-limits"), repo,
                    {label: variant for label, variant in variants.items() if not variant[1]},
                    arguments.limits_repeat, arguments.limits_nodes)
        print(f"\nload average at the end {' '.join(f'{load:.2f}' for load in os.getloadavg())}")


if __name__ == "__main__":
    main()
