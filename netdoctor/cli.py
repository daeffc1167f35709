"""The `netdoctor` command line (typer): check, discover, capture, probe, fleet, checks, rules.

Exit codes follow the monitoring-plugin convention (0 pass, 1 warn, 2 fail, 3 unknown);
every usage error, unreadable input or internal error exits 3 with one line on stderr
(click's own usage exit code 2 is remapped). Only the report goes to stdout.

Heavy modules (the inventory builder, NVML, pyroute2, the probe, ClusterShell, xml) are
imported inside the commands that use them, so `netdoctor check --snapshot X` starts fast.
"""

from __future__ import annotations

import enum
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

from netdoctor.util import import_without_rich

# Plain click help instead of rich panels: rich and pygments would cost every run ~40 ms.
typer = import_without_rich("typer")

from click import ClickException as _ClickUsageError  # noqa: E402  (typer < 0.16 raises click's own)
from typer.core import TyperGroup  # noqa: E402  (after typer, imported without rich)

from netdoctor import __version__  # noqa: E402
from netdoctor.errors import NetdoctorError, UsageError  # noqa: E402
from netdoctor.logging import configure_logging  # noqa: E402

USAGE_EXIT = 3


class ReportFormat(str, enum.Enum):
    TEXT = "text"
    JSON = "json"
    PROMETHEUS = "prometheus"
    JUNIT = "junit"


class ListFormat(str, enum.Enum):
    TEXT = "text"
    JSON = "json"


class _NetdoctorGroup(TyperGroup):
    """The top-level group; `fleet` is loaded on first use (it pulls in ClusterShell)."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        return names if "fleet" in names else [*names, "fleet"]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name != "fleet":
            return super().get_command(ctx, cmd_name)
        try:
            from netdoctor.fleet.cli import fleet_app
        except ImportError as error:
            raise NetdoctorError(f"the fleet commands are not available: {error}") from error
        command = typer.main.get_command(fleet_app)
        command.name = "fleet"
        return command


app = typer.Typer(
    cls=_NetdoctorGroup,
    name="netdoctor",
    help="Health doctor for GPU cluster nodes and their network fabric.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# -- shared options ----------------------------------------------------------------------
SnapshotOption = Annotated[Path | None, typer.Option("--snapshot", help="Judge this snapshot (directory or .tar.gz) instead of the live node.")]
RulesOption = Annotated[str | None, typer.Option("--rules", help="Rule pack: a bundled name or a .toml file (default: auto-selected).")]
OnlyOption = Annotated[list[str] | None, typer.Option("--only", help="Run only these check ids (comma-separated, repeatable).")]
SkipOption = Annotated[list[str] | None, typer.Option("--skip", help="Do not run these check ids (comma-separated, repeatable).")]
NoProbeOption = Annotated[bool, typer.Option("--no-probe", help="Do not run the NCCL probe.")]
FormatOption = Annotated[ReportFormat, typer.Option("--format", case_sensitive=False, help="Report format.")]
OutputOption = Annotated[Path | None, typer.Option("-o", "--output", help="Write the report to FILE (atomically) instead of stdout.")]
DeadlineOption = Annotated[float | None, typer.Option("--deadline", help="Wall-clock budget for the whole run, seconds (default 10, 20 with the probe).")]
StateOption = Annotated[Path | None, typer.Option("--state", help="Counter history file (default $NETDOCTOR_STATE or /var/lib/netdoctor/state.json).")]
BaselineOption = Annotated[Path | None, typer.Option("--baseline", help="Judge counter growth against this earlier snapshot of the node.")]
PluginDirOption = Annotated[list[Path] | None, typer.Option("--plugin-dir", help="Load extra check plugins (*.py) from DIR (repeatable).")]
DebugOption = Annotated[bool, typer.Option("--debug", help="Let crashes raise with a traceback.")]
FabricScanOption = Annotated[bool | None, typer.Option("--fabric-scan/--no-fabric-scan", help="Run iblinkinfo, a scan of the whole IB fabric (default: no on a live node; a snapshot's recorded scan is used).", show_default=False)]


def _version_callback(value: bool) -> None:
    if value:
        sys.stdout.write(f"netdoctor {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _global_options(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True,
                                          help="Print the version and exit.")] = False,
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help="More log output on stderr (-vv: debug).")] = 0,
    quiet: Annotated[int, typer.Option("-q", "--quiet", count=True, help="Less log output on stderr.")] = 0,
    log_json: Annotated[bool, typer.Option("--log-json", help="Logs as JSON lines on stderr.")] = False,
) -> None:
    configure_logging(verbose, quiet, json_logs=log_json)


def split_ids(values: Sequence[str] | None) -> tuple[str, ...]:
    """`--only a,b --only c` -> ("a", "b", "c")."""
    return tuple(part.strip() for value in values or () for part in value.split(",") if part.strip())


def _emit(text: str, output: Path | None, deadline: float | None = None) -> None:
    from netdoctor.report.render import emit

    emit(text, output, deadline=deadline)


# -- commands ----------------------------------------------------------------------------
@app.command()
def check(
    snapshot: SnapshotOption = None,
    rules: RulesOption = None,
    only: OnlyOption = None,
    skip: SkipOption = None,
    no_probe: NoProbeOption = False,
    output_format: FormatOption = ReportFormat.TEXT,
    output: OutputOption = None,
    deadline: DeadlineOption = None,
    state: StateOption = None,
    baseline: BaselineOption = None,
    plugin_dir: PluginDirOption = None,
    debug: DebugOption = False,
    fabric_scan: FabricScanOption = None,
) -> int:
    """Discover, run every applicable check (and the NCCL probe), print the graded report.

    Exit code: 0 pass, 1 warn, 2 fail, 3 unknown.
    """
    import time

    from netdoctor.report.render import render, use_color
    from netdoctor.util import is_terminal
    from netdoctor.run import DEFAULT_DEADLINE_S, CheckOptions, run_check

    options = CheckOptions(snapshot=snapshot, rules=rules, only=split_ids(only), skip=split_ids(skip),
                           no_probe=no_probe, deadline_s=None if deadline is None else _positive_deadline(deadline, deadline),
                           state=state, baseline=baseline,
                           plugin_dirs=tuple(plugin_dir or ()), debug=debug, fabric_scan=fabric_scan)
    started = time.monotonic()
    try:
        report = run_check(options)
    except Exception as error:
        if debug or output_format is ReportFormat.TEXT:
            raise
        # Machine formats still get a report, so a fleet sweep lists this node as `unknown`
        # with the reason instead of `unreachable` (no output), and a scraper sees the grade.
        _error_line(str(error) if isinstance(error, NetdoctorError) else f"internal error: {type(error).__name__}: {error}")
        report = _failed_run_report(options, error)
    color = output is None and output_format is ReportFormat.TEXT and use_color(sys.stdout)
    text = render(report, output_format.value, color=color, terminal=output is None and is_terminal(sys.stdout))
    # A FIFO at -o is waited for only until the run's deadline.
    _emit(text, output, started + (options.deadline_s or DEFAULT_DEADLINE_S))
    return report.grade.exit_code


@app.command()
def discover(
    snapshot: SnapshotOption = None,
    output_format: Annotated[ListFormat, typer.Option("--format", case_sensitive=False, help="Output format.")] = ListFormat.TEXT,
    output: OutputOption = None,
    deadline: DeadlineOption = None,
    fabric_scan: FabricScanOption = None,
) -> int:
    """Print the discovered topology (GPUs, HCAs and ports, netdevs, NUMA, PCIe, GPU/NIC matrix)."""
    import json
    import time

    from netdoctor.inventory.render import inventory_to_json, render_inventory_text
    from netdoctor.run import DEFAULT_DEADLINE_S, discover as discover_node, open_source

    budget_s = _positive_deadline(deadline, DEFAULT_DEADLINE_S)
    with open_source(snapshot) as source:
        inventory = discover_node(source, deadline=time.monotonic() + budget_s, fabric_scan=fabric_scan)
    if output_format is ListFormat.JSON:
        text = json.dumps(inventory_to_json(inventory), indent=2, default=str) + "\n"
    else:
        text = render_inventory_text(inventory)
    _emit(text, output)
    return 0


@app.command()
def capture(
    output: Annotated[Path, typer.Option("-o", "--output", help="Snapshot directory, or a .tar.gz file.")],
    deadline: DeadlineOption = None,
    fabric_scan: FabricScanOption = None,
) -> int:
    """Write a snapshot of this node (directory, or .tar.gz when PATH ends so)."""
    import time

    from netdoctor.host.live import LiveSource
    from netdoctor.host.snapshot import write_snapshot
    from netdoctor.run import DEFAULT_DEADLINE_S, discover as discover_node, live_sys_root

    budget_s = _positive_deadline(deadline, DEFAULT_DEADLINE_S)
    source = LiveSource(sys_root=live_sys_root(), record=True)
    inventory = discover_node(source, deadline=time.monotonic() + budget_s, fabric_scan=fabric_scan)
    write_snapshot(source.recording, output, host=source.host, captured_at=source.captured_at,
                   boot_id=source.boot_id, version=__version__)
    sys.stdout.write(f"wrote snapshot of {inventory.host} to {output}: {len(inventory.gpus)} GPUs, "
                     f"{len(inventory.hcas)} HCAs, {len(inventory.ports)} ports\n")
    return 0


@app.command()
def probe(
    gpus: Annotated[str | None, typer.Option("--gpus", help="GPU indexes to use, e.g. 0,1,2,3 (default: all).")] = None,
    engine: Annotated[str, typer.Option("--engine", help="Probe engine (see docs/probe.md).")] = "auto",
    budget: Annotated[float, typer.Option("--budget", help="Seconds the probe may take.")] = 15.0,
    output_format: FormatOption = ReportFormat.TEXT,
    output: OutputOption = None,
    rules: RulesOption = None,
    # Accepted like every judging command's --snapshot (the contract's common options) but not
    # offered: traffic cannot be replayed, so it only says so.
    snapshot: Annotated[Path | None, typer.Option("--snapshot", hidden=True)] = None,
) -> int:
    """Run only the NCCL probe and print its result (the `check` pipeline with the probe checks alone)."""
    from netdoctor.report.render import render
    from netdoctor.util import is_terminal
    from netdoctor.run import CheckOptions, run_check

    if snapshot is not None:
        raise UsageError("the NCCL probe runs only on a live node; --snapshot cannot be probed "
                         "(use `netdoctor check --snapshot` to judge a snapshot)")
    try:
        from netdoctor.probe.dispatch import engine_names
    except ImportError as error:
        raise NetdoctorError(f"the NCCL probe is not available: {error}") from error
    if engine not in engine_names():
        raise UsageError(f"--engine {engine!r}: choose {', '.join(engine_names())}")
    indices = parse_gpu_list(gpus)
    if indices is not None and len(indices) < 2:
        raise UsageError(f"--gpus {gpus!r}: an all-reduce needs at least 2 GPUs")
    options = CheckOptions(rules=rules, probe_only=True, probe_gpus=indices, probe_engine=engine,
                           probe_budget_s=_positive_deadline(budget, budget))
    report = run_check(options)
    if output_format is ReportFormat.TEXT:
        from netdoctor.report.probe_text import render_probe_text

        text = render_probe_text(report)
    else:
        text = render(report, output_format.value, terminal=output is None and is_terminal(sys.stdout))
    _emit(text, output)
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


@app.command("checks")
def list_checks(
    output_format: Annotated[ListFormat, typer.Option("--format", case_sensitive=False, help="Output format.")] = ListFormat.TEXT,
    plugin_dir: PluginDirOption = None,
) -> int:
    """List the checks: id, description, what each needs, where it comes from."""
    import json

    from netdoctor.checks.registry import load_registry

    registry = load_registry(tuple(plugin_dir or ()))
    rows = [{"id": item.id, "description": item.description, "needs": list(item.needs), "origin": item.origin,
             "third_party": registry.is_third_party(item.id)} for item in registry.checks()]
    problems = [{"plugin": problem.subject, "problem": problem.message} for problem in registry.problems]
    if output_format is ListFormat.JSON:
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


@app.command("rules")
def show_rules(
    rules: RulesOption = None,
    snapshot: SnapshotOption = None,
    deadline: DeadlineOption = None,
) -> int:
    """Show the rule pack in force (auto-selected or --rules), after site overrides."""
    import time

    from netdoctor.packs import load_rules, pack_toml

    inventory = None
    if rules is None:
        # Auto-selection matches the pack against this node (or the snapshot's).
        from netdoctor.run import DEFAULT_DEADLINE_S, discover as discover_node, open_source

        budget_s = _positive_deadline(deadline, DEFAULT_DEADLINE_S)
        with open_source(snapshot) as source:
            inventory = discover_node(source, deadline=time.monotonic() + budget_s)
    pack = load_rules(rules, inventory)
    sys.stdout.write(pack_toml(pack).rstrip("\n") + "\n")
    return 0


def _failed_run_report(options: Any, error: BaseException) -> Any:
    """The report of a run that could not judge the node at all: grade unknown, with why."""
    import socket

    from netdoctor.report.model import Finding, Grade, Report, Status
    from netdoctor.util import utc_now_iso

    reason = str(error) if isinstance(error, NetdoctorError) else f"internal error: {type(error).__name__}: {error}"
    return Report(host=socket.gethostname().split(".")[0], grade=Grade.UNKNOWN, started_at=utc_now_iso(),
                  duration_s=0.0, rules=options.rules or "-",
                  findings=[Finding("netdoctor", Status.UNKNOWN, "node", f"netdoctor could not judge this node: {reason}",
                                    internal=not isinstance(error, NetdoctorError))],
                  netdoctor_version=__version__,
                  snapshot=str(options.snapshot) if options.snapshot is not None else None)


MAX_BUDGET_S = 24 * 3600.0   # beyond this a "deadline" is a typo (and overflows thread timeouts)


def _positive_deadline(value: float | None, default: float) -> float:
    budget = default if value is None else value
    if not 0 < budget <= MAX_BUDGET_S:
        raise UsageError(f"a time budget must be more than 0 and at most {MAX_BUDGET_S:.0f} seconds, not {budget:g}")
    return budget


# -- entry point -------------------------------------------------------------------------
def _error_line(message: str) -> None:
    first = " ".join(message.strip().split("\n")[:1]) or "error"
    sys.stderr.write(f"netdoctor: error: {first}\n")


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on `argv` (default sys.argv[1:]) and return the exit code; never raises."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        # Like click's no_args_is_help, but a missing command is a usage error: exit 3.
        run_cli(["--help"])
        return USAGE_EXIT
    debug = "--debug" in args
    configure_logging()   # until the global options say otherwise: warnings, to stderr
    try:
        command = typer.main.get_command(app)
        result = command.main(args=args, prog_name="netdoctor", standalone_mode=False)
    except _ClickUsageError as error:   # click's usage errors
        _error_line(error.format_message())
        return USAGE_EXIT
    except NetdoctorError as error:
        if debug:
            traceback.print_exc()
        _error_line(str(error))
        return USAGE_EXIT
    except (KeyboardInterrupt, typer.Abort):
        _error_line("interrupted")
        return USAGE_EXIT
    except SystemExit as error:   # typer exits by itself on EPIPE (stdout closed by `| head`)
        return error.code if isinstance(error.code, int) and 0 <= error.code <= 3 else USAGE_EXIT
    except Exception as error:
        if debug:
            traceback.print_exc()
        _error_line(f"internal error: {type(error).__name__}: {error}")
        return USAGE_EXIT
    if isinstance(result, int) and not 0 <= result <= 3:
        # typer turns Ctrl-C into exit 130; monitoring reads anything but 0-2 as unknown.
        _error_line("interrupted" if result == 130 else f"exit status {result}")
        return USAGE_EXIT
    return result if isinstance(result, int) else 0


def main(argv: Sequence[str] | None = None) -> NoReturn:
    sys.exit(run_cli(argv))
