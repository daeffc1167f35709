"""`netdoctor check`, `checks` and `probe`: their bodies, and the way in without typer.

They run before every job on every node, so importing typer and click (and building the
whole command tree) would be ~20 ms of each start. `fast_command` reads a command line of
these commands made only of the options below, in their plain forms (`--opt value`,
`--opt=value`, flags, `-v`/`-vv`/`-q`, before or after the command); anything else (help,
a typo, a value click could read another way, an option given twice) is left to typer
(netdoctor.commands), which also owns every message about a bad command line.
`tests/test_cli_fastpath.py` holds that both read every command line accepted here alike.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from netdoctor.errors import NetdoctorError, UsageError

MAX_BUDGET_S = 24 * 3600.0   # beyond this a "deadline" is a typo (and overflows thread timeouts)
REPORT_FORMATS = ("text", "json", "prometheus", "junit")
LIST_FORMATS = ("text", "json")

# option -> (parameter, kind): "path", "text", "many" (repeatable text), "paths", "float",
# "flag", a tuple of choices, or the value a flag pair sets.
CHECK_OPTIONS: dict[str, tuple[str, Any]] = {
    "--snapshot": ("snapshot", "path"), "--rules": ("rules", "text"), "--only": ("only", "many"),
    "--skip": ("skip", "many"), "--no-probe": ("no_probe", "flag"), "--format": ("output_format", REPORT_FORMATS),
    "-o": ("output", "path"), "--output": ("output", "path"), "--deadline": ("deadline", "float"),
    "--state": ("state", "path"), "--baseline": ("baseline", "path"), "--plugin-dir": ("plugin_dir", "paths"),
    "--debug": ("debug", "flag"), "--fabric-scan": ("fabric_scan", True), "--no-fabric-scan": ("fabric_scan", False),
}
CHECKS_OPTIONS: dict[str, tuple[str, Any]] = {"--format": ("output_format", LIST_FORMATS),
                                              "--plugin-dir": ("plugin_dir", "paths")}
PROBE_OPTIONS: dict[str, tuple[str, Any]] = {
    "--gpus": ("gpus", "text"), "--engine": ("engine", "text"), "--budget": ("budget", "float"),
    "--format": ("output_format", REPORT_FORMATS), "-o": ("output", "path"), "--output": ("output", "path"),
    "--rules": ("rules", "text"), "--snapshot": ("snapshot", "path"),
}
OPTIONS = {"check": CHECK_OPTIONS, "checks": CHECKS_OPTIONS, "probe": PROBE_OPTIONS}
_DEFAULTS: dict[str, dict[str, Any]] = {
    "check": {"snapshot": None, "rules": None, "only": None, "skip": None, "no_probe": False, "output_format": "text",
              "output": None, "deadline": None, "state": None, "baseline": None, "plugin_dir": None, "debug": False,
              "fabric_scan": None},
    "checks": {"output_format": "text", "plugin_dir": None},
    "probe": {"gpus": None, "engine": "auto", "budget": 15.0, "output_format": "text", "output": None, "rules": None,
              "snapshot": None},
}
_PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


def fast_command(args: Sequence[str]) -> tuple[str, dict[str, Any], tuple[int, int, bool]] | None:
    """(command, its parameters, (-v count, -q count, --log-json)) when `args` is a plain
    `check`, `checks` or `probe` command line; None for anything typer should read."""
    verbose = quiet = 0
    log_json = False
    command: str | None = None
    params: dict[str, Any] = {}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--log-json":
            log_json = True
        elif arg in ("--verbose", "--quiet") or (len(arg) > 1 and arg[0] == "-" and arg[1] != "-"
                                                  and set(arg[1:]) <= {"v", "q"}):
            verbose += arg.count("v") if arg != "--quiet" else 0
            quiet += arg.count("q") if arg != "--verbose" else 0
        elif command is None:
            if arg not in _DEFAULTS:
                return None
            command = arg
        else:
            name, equals, attached = arg.partition("=") if arg.startswith("--") else (arg, "", "")
            table = OPTIONS[command]
            if name not in table:
                return None                  # help, a positional argument, a typo: typer's
            parameter, kind = table[name]
            takes_value = kind not in ("flag", True, False)
            if not takes_value and equals:
                return None
            if takes_value and not equals:
                if not rest:
                    return None
                attached = rest.pop(0)
            value = _value(kind, attached) if takes_value else (kind if kind in (True, False) else True)
            if value is None or (parameter in params and kind not in ("many", "paths")):
                return None                  # a value to question, or an option given twice
            if kind in ("many", "paths"):
                params.setdefault(parameter, []).append(value)
            else:
                params[parameter] = value
    if command is None:
        return None
    return command, {**_DEFAULTS[command], **params}, (verbose, quiet, log_json)


def _value(kind: Any, text: str) -> Any:
    if not text or text.startswith("-") or text != text.strip():
        return None
    if kind in ("path", "paths"):
        return Path(text)
    if kind == "float":
        return float(text) if _PLAIN_NUMBER.fullmatch(text) else None
    if isinstance(kind, tuple):
        return text if text in kind else None
    return text


def run_fast(command: str, params: dict[str, Any]) -> Callable[[], int]:
    body = {"check": check, "checks": list_checks, "probe": probe}[command]
    return lambda: body(**params)


# -- the bodies (also what netdoctor.commands runs) ----------------------------------------
def split_ids(values: Sequence[str] | None) -> tuple[str, ...]:
    """`--only a,b --only c` -> ("a", "b", "c")."""
    return tuple(part.strip() for value in values or () for part in value.split(",") if part.strip())


def positive_deadline(value: float | None, default: float) -> float:
    budget = default if value is None else value
    if not 0 < budget <= MAX_BUDGET_S:
        raise UsageError(f"a time budget must be more than 0 and at most {MAX_BUDGET_S:.0f} seconds, not {budget:g}")
    return budget


def emit(text: str, output: Path | None, deadline: float | None = None) -> None:
    from netdoctor.report.render import emit as emit_report

    emit_report(text, output, deadline=deadline)


def check(snapshot: Path | None, rules: str | None, only: Sequence[str] | None, skip: Sequence[str] | None,
          no_probe: bool, output_format: str, output: Path | None, deadline: float | None, state: Path | None,
          baseline: Path | None, plugin_dir: Sequence[Path] | None, debug: bool, fabric_scan: bool | None) -> int:
    """`netdoctor check`: the graded report; its exit code."""
    import time

    if snapshot is None:
        _start_cuda_init(probe=not no_probe)
    from netdoctor.logging import verbose_requested
    from netdoctor.report.render import render, use_color
    from netdoctor.run import DEFAULT_DEADLINE_S, CheckOptions, run_check
    from netdoctor.util import is_terminal

    options = CheckOptions(snapshot=snapshot, rules=rules, only=split_ids(only), skip=split_ids(skip),
                           no_probe=no_probe, deadline_s=None if deadline is None else positive_deadline(deadline, deadline),
                           state=state, baseline=baseline,
                           plugin_dirs=tuple(plugin_dir or ()), debug=debug, fabric_scan=fabric_scan)
    started = time.monotonic()
    try:
        report = run_check(options)
    except Exception as error:
        if debug or output_format == "text":
            raise
        # Machine formats still get a report, so a fleet sweep lists this node as `unknown`
        # with the reason instead of `unreachable` (no output), and a scraper sees the grade.
        _error_line(str(error) if isinstance(error, NetdoctorError) else f"internal error: {type(error).__name__}: {error}")
        report = failed_run_report(options, error)
    color = output is None and output_format == "text" and use_color(sys.stdout)
    text = render(report, output_format, color=color, terminal=output is None and is_terminal(sys.stdout),
                  verbose=verbose_requested())
    # A FIFO at -o is waited for only until the run's deadline.
    emit(text, output, started + (options.deadline_s or DEFAULT_DEADLINE_S))
    return report.grade.exit_code


def probe(gpus: str | None, engine: str, budget: float, output_format: str, output: Path | None, rules: str | None,
          snapshot: Path | None) -> int:
    """`netdoctor probe`: the `check` pipeline with the probe checks alone; its exit code."""
    if snapshot is not None:
        raise UsageError("the NCCL probe runs only on a live node; --snapshot cannot be probed "
                         "(use `netdoctor check --snapshot` to judge a snapshot)")
    _start_cuda_init(probe=True)
    try:
        from netdoctor.probe.dispatch import engine_names
    except ImportError as error:
        raise NetdoctorError(f"the NCCL probe is not available: {error}") from error
    if engine not in engine_names():
        raise UsageError(f"--engine {engine!r}: choose {', '.join(engine_names())}")
    indices = parse_gpu_list(gpus)
    if indices is not None and len(indices) < 2:
        raise UsageError(f"--gpus {gpus!r}: an all-reduce needs at least 2 GPUs")
    budget_s = positive_deadline(budget, budget)
    # The worker is most of the command's time: it starts now, before the checks and the rule
    # packs are even imported (0.15 s on 2x H200), and discovery runs beside it.
    from netdoctor.host.sysfs import RootedSysTree
    from netdoctor.host.trust import live_sys_root
    from netdoctor.probe.early import start_early_allreduce

    early = start_early_allreduce(RootedSysTree(live_sys_root(), strict=False), budget_s=budget_s, gpus=indices,
                                  engine=engine)
    try:
        from netdoctor.report.render import render
        from netdoctor.run import CheckOptions, run_check
        from netdoctor.util import is_terminal

        options = CheckOptions(rules=rules, probe_only=True, probe_gpus=indices, probe_engine=engine,
                               probe_budget_s=budget_s)
        report = run_check(options, probe_started=early)
    finally:
        if early is not None:
            early.cancel()      # a usage error before the run took it up: its worker stops
    if output_format == "text":
        from netdoctor.report.probe_text import render_probe_text

        text = render_probe_text(report)
    else:
        text = render(report, output_format, terminal=output is None and is_terminal(sys.stdout))
    emit(text, output)
    return report.grade.exit_code


def parse_gpu_list(text: str | None) -> tuple[int, ...] | None:
    """`"0,1,3"` -> (0, 1, 3); None or empty -> None (all GPUs)."""
    if text is None or not text.strip():
        return None
    indices: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UsageError(f"--gpus {text!r}: expected comma-separated GPU indices such as 0,1,2,3")
        if int(part) in indices:
            raise UsageError(f"--gpus {text!r}: GPU {part} is listed twice")
        indices.append(int(part))
    return tuple(indices)


def _start_cuda_init(probe: bool) -> None:
    """A live run on a GPU node: cuInit from now on (netdoctor.host.cuda_warmup says why), where
    the probe may open the GPUs or the NVML read will ask libcuda about DMA-BUF. Otherwise it
    would only hold up the NVML calls: the driver answers one at a time."""
    from netdoctor.host.cuda_warmup import start_cuda_init

    if not probe:
        from netdoctor.host.nvml import dmabuf_can_matter
        from netdoctor.host.sysfs import RootedSysTree
        from netdoctor.host.trust import live_sys_root

        if not dmabuf_can_matter(RootedSysTree(live_sys_root(), strict=False)):
            return
    start_cuda_init()


def list_checks(output_format: str, plugin_dir: Sequence[Path] | None) -> int:
    """`netdoctor checks`: id, description, needs and origin of every check."""
    import json

    from netdoctor.checks.registry import load_registry

    registry = load_registry(tuple(plugin_dir or ()))
    rows = [{"id": item.id, "description": item.description, "needs": list(item.needs), "origin": item.origin,
             "third_party": registry.is_third_party(item.id)} for item in registry.checks()]
    problems = [{"plugin": problem.subject, "problem": problem.message} for problem in registry.problems]
    if output_format == "json":
        sys.stdout.write(json.dumps({"checks": rows, "plugin_problems": problems}, indent=2) + "\n")
        return 0
    table = [("ID", "NEEDS", "ORIGIN", "DESCRIPTION")] + [
        (row["id"], ",".join(row["needs"]) or "-", row["origin"], row["description"]) for row in rows]
    widths = [max(len(line[column]) for line in table) for column in range(3)]
    for line in table:
        sys.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(line[:3], widths)) + f"  {line[3]}\n")
    for problem in problems:
        sys.stdout.write(f"plugin not loaded: {problem['plugin']}: {problem['problem']}\n")
    return 0


def failed_run_report(options: Any, error: BaseException) -> Any:
    """The report of a run that could not judge the node at all: grade unknown, with why."""
    import socket

    from netdoctor import __version__
    from netdoctor.report.model import Finding, Grade, Report, Status
    from netdoctor.util import utc_now_iso

    reason = str(error) if isinstance(error, NetdoctorError) else f"internal error: {type(error).__name__}: {error}"
    return Report(host=socket.gethostname().split(".")[0], grade=Grade.UNKNOWN, started_at=utc_now_iso(),
                  duration_s=0.0, rules=options.rules or "-",
                  findings=[Finding("netdoctor", Status.UNKNOWN, "node", f"netdoctor could not judge this node: {reason}",
                                    internal=not isinstance(error, NetdoctorError))],
                  netdoctor_version=__version__,
                  snapshot=str(options.snapshot) if options.snapshot is not None else None)


def _error_line(message: str) -> None:
    from netdoctor.cli import error_line

    error_line(message)
