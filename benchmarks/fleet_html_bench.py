"""Benchmark the fleet report's HTML page (and text) at 10,000 nodes: size, render time, browser load.

Builds a synthetic 10,000-node `FleetReport` (about 1 % failing, some warn/unknown/
unreachable, NCCL bus bandwidth per node with a few slow outliers, version drift with
a 4,500-host minority, 2,500 leaf switches of which three have a miswired port, changes
since a previous sweep), renders it with each tree's `render_html`/`render_text` (median of
--repeat runs, in a child process per tree), then loads each page in headless Chromium
(`--dump-dom`, median of --loads runs): the process's wall time, and the page's own
DOMContentLoaded and load times from the Navigation Timing entry. Usage:

    python benchmarks/fleet_html_bench.py [--nodes 10000] [--repeat 5] [--loads 5]
        [--rev HEAD] [--keep DIR]

"before" is the renderer of git revision --rev (laid out with `git archive`, no checkout),
"after" the working tree. Both build the same report: the attributes a tree's
`FleetReport` does not declare are set on it all the same (an old renderer ignores them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from fixture_reports import tree_of  # noqa: E402  (a revision's packages, laid out as installed)

CHECKS = ("port-state", "link-speed", "pcie-link", "error-counters", "mtu", "pfc-ecn", "gpudirect",
          "gpu-nic-affinity", "nccl-probe")
RAILS = 8
PORTS_PER_LEAF = 32

# Appended to a copy of the page: the browser's own timing, read back from the dumped DOM.
TIMING_SCRIPT = ("<script>addEventListener('load',function(){var n=performance.getEntriesByType('navigation')[0];"
                 "document.body.setAttribute('data-dcl',n.domContentLoadedEventEnd.toFixed(1));"
                 "document.body.setAttribute('data-load',n.loadEventStart.toFixed(1));"
                 "document.body.setAttribute('data-elements',document.getElementsByTagName('*').length);});</script>")


def synthetic_report(nodes: int) -> Any:
    """The fleet, built with whichever `netdoctor` is first on sys.path."""
    from netdoctor.fleet.model import BUSBW_METRIC, NodeGrade, NodeSummary, TopFinding, no_report
    from netdoctor.fleet.report import build_fleet_report

    rng = random.Random(20261125)
    summaries = []
    for index in range(1, nodes + 1):
        host = f"node{index:05d}"
        statuses = {check: "pass" for check in CHECKS}
        statuses["pfc-ecn"] = "skip"
        draw = rng.random()
        busbw = round(rng.gauss(452.0, 3.0), 1) if index % 1500 else round(rng.uniform(250, 350), 1)
        if draw < 0.0005:
            summaries.append(no_report(host, NodeGrade.UNREACHABLE, "command timeout after 90 s"))
            continue
        if draw < 0.0105:
            statuses["link-speed"] = "fail"
            top = TopFinding("port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)", "link-speed", "mlx5_3:1")
            summaries.append(NodeSummary(host, NodeGrade.FAIL, top, statuses, {"link-speed": top.summary},
                                         {BUSBW_METRIC: busbw}, other_findings=1))
        elif draw < 0.0155:
            statuses["mtu"] = "warn"
            top = TopFinding("RoCE netdev MTU 1500 below 4200", "mtu", "eth3")
            summaries.append(NodeSummary(host, NodeGrade.WARN, top, statuses, {"mtu": top.summary}, {BUSBW_METRIC: busbw}))
        elif draw < 0.0175:
            statuses["gpudirect"] = "unknown"
            top = TopFinding("lsmod timed out", "gpudirect", "node")
            summaries.append(NodeSummary(host, NodeGrade.UNKNOWN, top, statuses, {}, {BUSBW_METRIC: busbw}))
        else:
            summaries.append(NodeSummary(host, NodeGrade.PASS, None, statuses, {}, {BUSBW_METRIC: busbw}))
    report = build_fleet_report(summaries, generated_at="2026-11-25T06:00:00Z")
    hosts = [f"node{index:05d}" for index in range(1, nodes + 1)]
    # A rolling kernel upgrade half done (every other rack of 20), an HCA firmware minority,
    # a driver below the pack's minimum on a few nodes, the other kinds alike everywhere.
    upgraded = [host for index, host in enumerate(hosts) if (index // 20) % 2 and index < nodes * 0.9]
    old_firmware = hosts[100:140]
    report.drift = [
        {"what": "kernel", "among": "", "majority": "5.15.0-122-generic", "minority": {"6.8.0-45-generic": upgraded},
         "nodes": nodes},
        {"what": "hca_firmware", "among": "MT4129 MT_0000000838", "majority": "28.39.1002",
         "minority": {"28.37.1014": old_firmware[:30], "28.36.1010": old_firmware[30:]}, "nodes": nodes},
        {"what": "driver", "among": "", "majority": "580.95.05", "minority": {"570.86.15": hosts[7:10]},
         "nodes": nodes, "minimum": "575.0", "below_minimum": hosts[7:10]},
        *({"what": what, "among": "", "majority": version, "minority": {}, "nodes": nodes}
          for what, version in (("cuda_driver", "13.0"), ("vbios", "96.00.89.00.01"), ("ofed", "MLNX_OFED_LINUX-24.10"),
                                ("nccl", "2.27.7"), ("fabric_manager", "580.95.05"))),
    ]
    report.rails = []
    leaves = nodes * RAILS // PORTS_PER_LEAF
    for leaf in range(leaves):
        rail = leaf % RAILS
        odd = {f"mlx5_{(rail + 1) % RAILS}": [hosts[(leaf * 37) % nodes]]} if leaf in (6, 700, 1999) else {}
        report.rails.append({"leaf": f"leaf-{leaf + 1:04d}", "switch_guid": f"0x{0xB8CEF603000A0000 + leaf:x}",
                             "rail": f"mlx5_{rail}", "ports": PORTS_PER_LEAF, "odd": odd})
    failing = [node.host for node in report.nodes if node.grade == "fail"]
    report.changes = {
        "previous": {"source": "sweep-2026-11-24.json", "generated_at": "2026-11-24T06:00:00Z", "nodes": nodes - 2},
        "grades": [{"host": host, "was": "pass", "now": "fail"} for host in failing[:25]]
        + [{"host": host, "was": "fail", "now": "pass"} for host in hosts[200:212]],
        "new_findings": [{"host": host, "check": "link-speed", "subject": "mlx5_3:1", "status": "fail",
                          "summary": "port runs at 200 Gb/s (4X HDR), expected 400 Gb/s (4X NDR)"} for host in failing[:25]],
        "cleared_findings": [{"host": host, "check": "port-state", "subject": "mlx5_1:1", "status": "fail",
                              "summary": "port is Down"} for host in hosts[200:212]],
        "versions": [{"host": host, "what": "kernel", "was": "5.15.0-122-generic", "now": "6.8.0-45-generic"}
                     for host in upgraded[:400]],
        "new_nodes": hosts[-2:],
        "gone_nodes": ["node10001", "node10002", "node10005"],
    }
    return report


def child(nodes: int, repeat: int, page: Path) -> None:
    """Render in this process (the tree is the first `netdoctor` on sys.path); print JSON."""
    from netdoctor.fleet.render import render_html, render_text

    started = time.perf_counter()
    report = synthetic_report(nodes)
    build_s = time.perf_counter() - started
    html_times, text_times = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        html = render_html(report)
        html_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        text = render_text(report)
        text_times.append(time.perf_counter() - started)
    page.write_text(html, encoding="utf-8")
    print(json.dumps({"build_s": build_s, "html_s": statistics.median(html_times), "html_runs": html_times,
                      "text_s": statistics.median(text_times), "html_bytes": len(html.encode()),
                      "text_bytes": len(text.encode()), "text_lines": text.count("\n")}))


def run_child(tree: Path, nodes: int, repeat: int, page: Path) -> dict[str, Any]:
    prelude = ("import sys\n"
               "sys.meta_path[:] = [finder for finder in sys.meta_path if 'editable' not in repr(finder)]\n"
               f"sys.path.insert(0, {str(tree)!r})\n"
               f"sys.path.insert(1, {str(Path(__file__).resolve().parent)!r})\n"
               "import fleet_html_bench\n"
               f"fleet_html_bench.child({nodes}, {repeat}, __import__('pathlib').Path({str(page)!r}))\n")
    done = subprocess.run([sys.executable, "-c", prelude], capture_output=True, text=True, cwd=tree, check=False)
    if done.returncode:
        raise SystemExit(f"render in {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def _attribute(body: str, name: str) -> float:
    found = re.search(f'{name}="([^"]*)"', body)
    return float(found.group(1)) if found else math.nan


def chromium_load(chromium: str, page: Path, loads: int, work: Path) -> dict[str, Any]:
    """Median wall time of `chromium --headless --dump-dom` and the page's own timing."""
    timed = page.with_suffix(".timed.html")
    timed.write_text(page.read_text(encoding="utf-8").replace("</body>", TIMING_SCRIPT + "</body>"), encoding="utf-8")
    walls: list[float] = []
    dcls: list[float] = []
    loaded: list[float] = []
    elements = 0
    for run in range(loads):
        profile = work / f"profile-{page.stem}-{run}"
        started = time.perf_counter()
        done = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--dump-dom", timed.as_uri()],
            capture_output=True, text=True, timeout=300, check=False)
        walls.append(time.perf_counter() - started)
        shutil.rmtree(profile, ignore_errors=True)
        body = done.stdout[done.stdout.find("<body"):][:400]
        dcls.append(_attribute(body, "data-dcl"))
        loaded.append(_attribute(body, "data-load"))
        elements = int(_attribute(body, "data-elements"))
    return {"wall_s": statistics.median(walls), "dcl_ms": statistics.median(dcls), "load_ms": statistics.median(loaded),
            "elements": elements}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--rev", default="HEAD", help="the 'before' revision (git archive of it)")
    parser.add_argument("--keep", type=Path, help="keep the pages in this directory")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with tempfile.TemporaryDirectory(prefix="fleet-html-bench-") as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        trees = {f"before ({args.rev})": tree_of(args.rev, Path(scratch) / "before"), "after (working tree)": REPO}
        blank = work / "blank.html"
        blank.write_text("<!DOCTYPE html><html><body></body></html>\n")
        baseline = chromium_load(chromium, blank, args.loads, work) if chromium else None
        rows = []
        for label, tree in trees.items():
            page = work / f"fleet-{label.split()[0]}.html"
            rendered = run_child(tree, args.nodes, args.repeat, page)
            loaded = chromium_load(chromium, page, args.loads, work) if chromium else None
            rows.append((label, rendered, loaded))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"{args.nodes:,} nodes; {os.cpu_count()} CPUs ({cpu}); Python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.1f}; render median of {args.repeat}, Chromium median of {args.loads}")
    if baseline:
        print(f"blank page in Chromium: {baseline['wall_s']:.2f} s wall (process start to DOM dump)")
    print()
    print("| renderer | HTML bytes | render_html | render_text (lines) | Chromium wall | DOMContentLoaded | load | DOM elements |")
    print("|---|---|---|---|---|---|---|---|")
    for label, rendered, loaded in rows:
        browser = (f"{loaded['wall_s']:.2f} s | {loaded['dcl_ms']:.0f} ms | {loaded['load_ms']:.0f} ms | {loaded['elements']:,}"
                   if loaded else "– | – | – | –")
        print(f"| {label} | {rendered['html_bytes']:,} | {rendered['html_s']:.3f} s | {rendered['text_s']:.3f} s "
              f"({rendered['text_lines']:,}) | {browser} |")


if __name__ == "__main__":
    main()
