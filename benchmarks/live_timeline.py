"""Where a live `netdoctor check --no-probe` and `netdoctor probe` spend their wall time.

Each run is a whole process, timed from its spawn to its exit by this script's clock. Inside,
a post-import hook (set before netdoctor is imported, so the import order is unchanged) marks
when the command body starts, when discovery starts and ends, when each tool and the probe
worker are spawned, when the checks run, when the report is written and when the exit handlers
run; the process exit after that is the interpreter's and the driver's teardown.

    python3 benchmarks/live_timeline.py --tree head=OLD_TREE --tree after=. --runs 3 --json OUT.json

Each run is `-vv`: how long NVML and `nvidia-smi -q` took comes from the log.
A tree is a directory with netdoctor/, netdoctor_plugins/ and netdoctor_rules/ (or the
repository itself: plugins/ and rules/ are found as installed). Trees take turns run by run.
Needs a live node (a GPU node for the probe); `--sys-root` points discovery at a recorded
/sys tree instead (as $NETDOCTOR_SYSFS_ROOT), for a dry run anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = {"check": ["-vv", "check", "--no-probe", "--format", "json"], "probe": ["-vv", "probe", "--format", "json"]}
# From the -vv log: how long the two slowest sources of a GPU node took, as discovery saw them.
SOURCE_SECONDS = {"nvml": re.compile(r"nvml read +seconds=([0-9.]+)"),
                  "nvidia-smi -q": re.compile(r"'nvidia-smi-q': ([0-9.]+)")}

# Runs inside the measured process, before netdoctor is imported.
WRAPPER = r"""
import json, os, sys, time
marks = []
def mark(name):
    marks.append((name, time.time()))
mark("interpreter")
import atexit, importlib.abc, importlib.machinery, subprocess

def wrap(owner, attribute, before, after=None):
    original = getattr(owner, attribute)
    def wrapped(*args, **kwargs):
        mark(before)
        try:
            return original(*args, **kwargs)
        finally:
            if after:
                mark(after)
    setattr(owner, attribute, wrapped)

PATCHES = {
    "netdoctor.check_command": [("check", "command", None), ("probe", "command", None), ("emit", "emit", "emitted")],
    "netdoctor.run": [("run_check", "run_check", "run_check end"), ("discover", "discover", "discovered"),
                      ("run_checks", "checks", "checked")],
    "netdoctor.traffic": [("run_allreduce", "probe wait", "probe result")],
}

class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        execute = spec.loader.exec_module
        def exec_module(module):
            execute(module)
            for attribute, before, after in PATCHES[name]:
                if hasattr(module, attribute):
                    wrap(module, attribute, before, after)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Hook())
spawned = set()
popen_init = subprocess.Popen.__init__
def popen(self, args, *rest, **kwargs):
    words = [os.path.basename(str(word)) for word in (args if isinstance(args, (list, tuple)) else [args])]
    name = "spawn " + (" ".join(words[:2]) if not words[0].startswith("python") else "probe worker")
    if name not in spawned:
        spawned.add(name)
        mark(name)
    popen_init(self, args, *rest, **kwargs)
subprocess.Popen.__init__ = popen

def write():
    mark("exit handlers")
    with open(os.environ["ND_TIMELINE_OUT"], "w") as out:
        json.dump(marks, out)
atexit.register(write)      # registered first: runs last
from netdoctor.cli import main
main(sys.argv[1:])
"""


def run_once(python: str, tree: str, command: list[str], env: dict[str, str]) -> dict[str, float]:
    with tempfile.NamedTemporaryFile(suffix=".json") as marks_file:
        environment = dict(env, ND_TIMELINE_OUT=marks_file.name)
        if tree != ".":
            environment["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.abspath(tree), env.get("PYTHONPATH")]))
        spawned = time.time()
        done = subprocess.run([python, "-c", WRAPPER, *command], env=environment, cwd="/tmp",
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        exited = time.time()
        try:
            marks = json.load(open(marks_file.name))
        except ValueError:
            raise SystemExit(f"no marks from {command}: {done.stderr.decode(errors='replace')[-2000:]}") from None
    timeline = {name: round(at - spawned, 4) for name, at in marks}
    try:        # the probe worker's own phases, from its start (the report's probe.timings)
        phases = (json.loads(done.stdout).get("probe") or {}).get("timings") or {}
    except ValueError:
        phases = {}
    timeline.update({f"(worker {phase} after its start)": seconds for phase, seconds in phases.items()})
    log = done.stderr.decode(errors="replace")
    for source, pattern in SOURCE_SECONDS.items():
        found = pattern.search(log)
        if found:
            timeline[f"({source} took)"] = float(found.group(1))
    timeline["process exit"] = round(exited - spawned, 4)
    timeline["exit code"] = done.returncode
    return timeline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, metavar="LABEL=PATH")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--command", action="append", choices=sorted(COMMANDS))
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--sys-root", help="a recorded /sys tree ($NETDOCTOR_SYSFS_ROOT)")
    parser.add_argument("--json", help="write every run's marks here")
    args = parser.parse_args()
    trees = dict(pair.split("=", 1) for pair in args.tree)
    env = dict(os.environ)
    if args.sys_root:
        env["NETDOCTOR_SYSFS_ROOT"] = os.path.abspath(args.sys_root)
    runs: list[dict[str, object]] = []
    for command in args.command or sorted(COMMANDS):
        for label, tree in trees.items():       # once untimed: bytecode compiled, caches warm
            run_once(args.python, tree, COMMANDS[command], env)
        for number in range(args.runs):
            for label, tree in trees.items():
                runs.append({"command": command, "tree": label, "run": number + 1,
                             "marks": run_once(args.python, tree, COMMANDS[command], env)})
    if args.json:
        with open(args.json, "w") as out:
            json.dump(runs, out, indent=1)
    for command in args.command or sorted(COMMANDS):
        print(f"\n## {command}: seconds from spawn, median of {args.runs} (each run's marks in --json)\n")
        for label in trees:
            chosen = [run["marks"] for run in runs if run["command"] == command and run["tree"] == label]
            names = sorted({name for marks in chosen for name in marks if name != "exit code"},
                           key=lambda name: statistics.median(m[name] for m in chosen if name in m))
            cells = [f"{name} {statistics.median(m[name] for m in chosen if name in m):.3f}" for name in names]
            codes = sorted({marks["exit code"] for marks in chosen})
            print(f"- {label} (exit {codes}): " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
