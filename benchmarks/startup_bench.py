"""Start-up of `netdoctor`: whole-process wall time, CPU time and peak RSS, old code and this
tree in one run, and where the import time goes.

    python benchmarks/startup_bench.py [--runs 21] [--before DIR | --rev REV] [--python PATH]
        [--markdown benchmarks/results/startup.md]

"before" is by default revision 0dc4788 of this repository (the code before issue 24).

Each command runs as pip's console script runs it (`from netdoctor.cli import main;
sys.exit(main())`), with the packages of one tree first on sys.path and the editable-install
finder dropped, so both codes start the same way (and the same `site`):

    netdoctor --version                                                  target <= 0.05 s
    netdoctor checks
    netdoctor check --no-probe --snapshot tests/fixtures/nodes/dgx-h100  target <= 0.25 s, <= 50 MB

`python -c pass` (the interpreter and this machine's `site`) is measured alongside as the
floor. Runs alternate (floor, before, after, floor, ...) so that load on a shared machine
falls on all alike; wall time and CPU time (user + system) come from wait4() of each run,
peak RSS from GNU time (`/usr/bin/time`) in 5 more runs of each. Every run uses compiled
bytecode (a scratch PYTHONPYCACHEPREFIX, filled by a first run), as an installed netdoctor does. `--before DIR` takes a tree holding netdoctor/, netdoctor_plugins/ and
netdoctor_rules/ (or a checkout's netdoctor/, plugins/, rules/); `--rev` exports a
revision of this repository. Time the real interpreter, not a pyenv shim (~50 ms of bash).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE_REV = "0dc4788"        # the last commit before issue 24 (start-up work): the default "before"
FIXTURE = REPO / "tests" / "fixtures" / "nodes" / "dgx-h100"
COMMANDS = {
    "--version": (["--version"], 0.05, None),
    "checks": (["checks"], None, None),
    "check --snapshot": (["check", "--no-probe", "--snapshot", str(FIXTURE)], 0.25, 50 * 1024),
}
# Modules that a start should not load unless the command needs them.
HEAVY = ("typer", "click", "structlog", "asyncio", "rich", "pygments", "pydantic", "pynvml", "pyroute2",
         "ClusterShell", "psutil", "netdoctor.probe.engine", "netdoctor.fleet")
CONSOLE_SCRIPT = ("import re\nfrom netdoctor.cli import main\n"
                  "sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\nsys.exit(main())\n")
_MODULES_AT_EXIT = ("import atexit\natexit.register(lambda: sys.stderr.write('MODULES=' + ','.join("
                    "sorted(name for name in sys.modules if sys.modules[name])) + '\\n'))\n")


def installed_layout(tree: Path, scratch: Path) -> Path:
    """`tree` as the packages install (netdoctor, netdoctor_plugins, netdoctor_rules): a
    checkout's plugins/ and rules/ are linked under their package names in `scratch`."""
    if (tree / "netdoctor_plugins").is_dir():
        return tree
    scratch.mkdir(parents=True, exist_ok=True)
    for package, source in (("netdoctor", "netdoctor"), ("netdoctor_plugins", "plugins"), ("netdoctor_rules", "rules")):
        (scratch / package).symlink_to(tree / source)
    return scratch


# The interpreter the commands run on (--python): this one, or e.g. a bare venv's, which starts
# without this machine's site-packages hooks (.pth files), as a node's Python does.
PYTHON = sys.executable


def command(tree: Path | None, args: list[str], *flags: str, modules: bool = False) -> list[str]:
    if tree is None:
        return [PYTHON, *flags, "-c", "pass"]
    prelude = ("import sys\nsys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)]\n"
               f"sys.path.insert(0, {str(tree)!r})\n")
    return [PYTHON, *flags, "-c", prelude + (_MODULES_AT_EXIT if modules else "") + CONSOLE_SCRIPT, *args]


def bytecode_cached(scratch: Path) -> None:
    """Runs use compiled bytecode, as an installed netdoctor does: with PYTHONDONTWRITEBYTECODE
    set (as on this machine) and no __pycache__ in a tree, every run would compile every
    module of it again. The caches go to `scratch`, never into the trees measured."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")


def measure(cmd: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of one run."""
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    started = time.perf_counter()
    pid = os.posix_spawn(cmd[0], cmd, os.environ, file_actions=quiet)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    return wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def peak_rss_kib(cmd: list[str]) -> int:
    """The peak RSS of one run, as GNU time reports it. Not this process's wait4(): a child
    started from it counts the memory of this process (its parent) until its exec, and this
    process outgrows a `python -c pass`."""
    gnu_time = Path("/usr/bin/time")
    if not gnu_time.exists():
        return os.wait4(os.posix_spawn(cmd[0], cmd, os.environ), 0)[2].ru_maxrss     # an upper bound
    with tempfile.NamedTemporaryFile("r") as report:
        subprocess.run([str(gnu_time), "-f", "%M", "-o", report.name, *cmd], capture_output=True, check=False)
        return int(report.read().split()[-1])


def import_profile(tree: Path, args: list[str], top: int) -> tuple[float, list[tuple[str, float]], list[str]]:
    """(import ms in all, the slowest imports [(module, cumulative ms)] nested <= 2 deep, HEAVY modules loaded)."""
    done = subprocess.run(command(tree, args, "-X", "importtime", modules=True), capture_output=True, text=True,
                          cwd=REPO, check=False)
    rows = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$", line)
        if match:
            rows.append((len(match[3]), match[4], int(match[2]) / 1000))
    loaded = set(done.stderr.rsplit("MODULES=", 1)[-1].strip().split(","))
    heavy = [name for name in HEAVY if any(module == name or module.startswith(name + ".") for module in loaded)]
    total = sum(ms for depth, _, ms in rows if depth == 1)
    slowest = sorted(((module, ms) for depth, module, ms in rows if depth <= 3), key=lambda row: -row[1])
    return total, slowest[:top], heavy


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--before", type=Path, help="the old code: a tree of the three packages or a checkout")
    source.add_argument("--rev", help="the old code: this revision of the repository")
    parser.add_argument("--top", type=int, default=8, help="slowest imports listed per command and code")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--python", help="run the commands on this interpreter (default: this one); e.g. a bare "
                                         "`python3 -m venv` (no packages: the trees are put on sys.path)")
    options = parser.parse_args()
    global PYTHON
    PYTHON = options.python or sys.executable
    if options.before is None and options.rev is None:
        options.rev = BASELINE_REV
    os.chdir(REPO)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        bytecode_cached(Path(scratch))
        if options.rev:
            sys.path.insert(0, str(REPO / "scripts"))
            from fixture_reports import tree_of

            before = tree_of(options.rev, Path(scratch) / "rev")
        else:
            before = installed_layout(options.before.resolve(), Path(scratch) / "before")
        trees = {"before": before, "after": installed_layout(REPO, Path(scratch) / "after")}
        measure(command(None, []))                 # compiles the standard library's bytecode
        for name, (args, _, _) in COMMANDS.items():
            for label, tree in trees.items():
                code = measure(command(tree, args))[2]     # and each tree's
                if code != 0:
                    sys.stderr.write(f"{label}: `netdoctor {name}` exits {code}\n")
                    return 3
        samples: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
        rss: dict[tuple[str, str], int] = {("python -c pass", "-"): max(peak_rss_kib(command(None, [])) for _ in range(5))}
        for name, (args, _, _) in COMMANDS.items():
            for label, tree in trees.items():
                rss[(name, label)] = max(peak_rss_kib(command(tree, args)) for _ in range(5))
        for _ in range(options.runs):
            for name, (args, _, _) in COMMANDS.items():
                samples.setdefault(("python -c pass", "-"), []).append(measure(command(None, [])))
                for label, tree in trees.items():
                    samples.setdefault((name, label), []).append(measure(command(tree, args)))
        profiles = {(name, label): import_profile(tree, args, options.top)
                    for name, (args, _, _) in COMMANDS.items() for label, tree in trees.items()}
    load_end = os.getloadavg()
    text = render(options, samples, rss, profiles, load_start, load_end)
    sys.stdout.write(text)
    if options.markdown:
        update_markdown(options.markdown, text)
    after_ok = all(_meets(name, samples[(name, "after")], rss[(name, "after")]) for name in COMMANDS)
    return 0 if after_ok else 1


def update_markdown(path: Path, section: str) -> None:
    """Replace the measured part of `path` (between its markers); the notes around it stay."""
    begin, end = "<!-- startup_bench:begin -->\n", "<!-- startup_bench:end -->\n"
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + begin + section + end + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + begin + section + end
    path.write_text(text)


def _meets(name: str, runs: list[tuple[float, float, int]], rss_kib: int) -> bool:
    _, wall_target, rss_target = COMMANDS[name]
    wall = statistics.median(run[0] for run in runs)
    return (wall_target is None or wall <= wall_target) and (rss_target is None or rss_kib <= rss_target)


def render(options: argparse.Namespace, samples: dict[tuple[str, str], list[tuple[float, float, int]]],
           rss: dict[tuple[str, str], int], profiles: dict[tuple[str, str], tuple[float, list[tuple[str, float]], list[str]]],
           load_start: tuple[float, ...], load_end: tuple[float, ...]) -> str:
    old = f"revision {options.rev}" if options.rev else f"{options.before}"
    lines = [
        "## Measured: `--version`, `checks`, a snapshot `check`",
        "",
        "Written by `benchmarks/startup_bench.py` (run by `benchmarks/run_all.sh`); reproduce with",
        "",
        "    /root/.pyenv/versions/3.11.7/bin/python3 benchmarks/startup_bench.py --runs 21 \\",
        "        --before /work/before --markdown benchmarks/results/startup.md",
        "",
        "(`--before` any tree of the old packages, or `--rev REV` of this repository; the real",
        "interpreter, not the pyenv shim). Each run is a whole process started the way pip's console",
        "script starts netdoctor, with compiled bytecode (a scratch `PYTHONPYCACHEPREFIX`, as an",
        "installed netdoctor has its `.pyc`); runs alternate floor / before / after.",
        "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- machine: {os.cpu_count()}-core VM ({_cpu_model()}), Linux {platform.release()}",
        f"- Python {platform.python_version()} at {PYTHON}",
        f"- load average (1, 5, 15 min) at the start {', '.join(f'{value:.2f}' for value in load_start)}; "
        f"at the end {', '.join(f'{value:.2f}' for value in load_end)}",
        f"- before: {old}; after: this working tree ({REPO.name})",
        f"- {options.runs} runs of each for wall and CPU time (medians; CPU is user + system of the process); "
        "peak RSS: the largest of 5 more runs under GNU time",
        "",
        "| command | code | wall median s | wall min s | CPU median s | peak RSS MB | target | verdict |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    floor = samples[("python -c pass", "-")]
    lines.append(f"| `python -c pass` | interpreter + site | {statistics.median(run[0] for run in floor):.3f} | "
                 f"{min(run[0] for run in floor):.3f} | {statistics.median(run[1] for run in floor):.3f} | "
                 f"{rss[('python -c pass', '-')] / 1024:.1f} | floor | |")
    for name, (_, wall_target, rss_target) in COMMANDS.items():
        target = " and ".join(part for part in (f"<= {wall_target} s" if wall_target else "",
                                                 f"<= {rss_target // 1024} MB" if rss_target else "") if part) or "-"
        for label in ("before", "after"):
            runs = samples[(name, label)]
            verdict = ("meets" if _meets(name, runs, rss[(name, label)]) else "misses") if target != "-" else ""
            lines.append(f"| `netdoctor {name}` | {label} | {statistics.median(run[0] for run in runs):.3f} | "
                         f"{min(run[0] for run in runs):.3f} | {statistics.median(run[1] for run in runs):.3f} | "
                         f"{rss[(name, label)] / 1024:.1f} | {target} | {verdict} |")
    lines += ["", "### Where the import time goes (`python -X importtime`, one run each)", ""]
    for name in COMMANDS:
        lines.append(f"#### `netdoctor {name}`")
        lines.append("")
        for label in ("before", "after"):
            total, slowest, heavy = profiles[(name, label)]
            lines.append(f"- {label}: {total:.0f} ms of imports in all (`site` included); "
                         f"heavy modules loaded: {', '.join(heavy) or 'none'}")
        lines += ["", "| before: module (cumulative, nested <= 3 levels) | ms | after: module | ms |", "|---|---:|---|---:|"]
        before_rows, after_rows = profiles[(name, "before")][1], profiles[(name, "after")][1]
        for index in range(max(len(before_rows), len(after_rows))):
            left = before_rows[index] if index < len(before_rows) else ("", 0.0)
            right = after_rows[index] if index < len(after_rows) else ("", 0.0)
            lines.append(f"| {'`' + left[0] + '`' if left[0] else ''} | {left[1]:.1f} | "
                         f"{'`' + right[0] + '`' if right[0] else ''} | {right[1]:.1f} |")
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
