"""`netdoctor fleet sweep` and `netdoctor fleet report`.

Exit codes (the fleet's worst node, in the node grade order fail > unknown > warn > pass):
0 every node passed; 1 a node warns or is a fleet outlier; 3 a node is unknown (and none
is worse); 2 a node fails, did not answer (unreachable) or did not answer with a report
(invalid). Bad usage or unreadable input exits 3 like every netdoctor command.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from netdoctor.cli import USAGE_EXIT
from netdoctor.cli_group import NetdoctorGroup, invoke, typer, with_global_options
from netdoctor.errors import NetdoctorError, UsageError
from netdoctor.fleet.collect import FleetCollector
from netdoctor.fleet.outliers import DEFAULT_THRESHOLD
from netdoctor.fleet.render import RENDERERS
from netdoctor.fleet.model import NodeSummary
from netdoctor.fleet.report import FleetReport, build_fleet_report
from netdoctor.fleet.settings import FleetSettings, fleet_settings
from netdoctor.fleet.since import changes_since, load_previous
from netdoctor.host.proctree import become_subreaper
from netdoctor.logging import configure_logging, get_logger
from netdoctor.report.render import emit
from netdoctor.vocabulary import StrEnum

log = get_logger(__name__)


fleet_app = typer.Typer(
    cls=NetdoctorGroup,     # -v/-q/--log-json after each subcommand too; "did you mean" for a typo
    name="fleet",
    help="Judge many nodes together: sweep them through pdsh/clush/srun, or report on saved output.",
    # No subcommand is a usage error (exit 3, "Missing command."), not help with exit 0.
    no_args_is_help=False,
    add_completion=False,
)


class FleetFormat(StrEnum):
    TEXT = "text"
    JSON = "json"
    HTML = "html"


class ParallelShell(StrEnum):
    PDSH = "pdsh"
    CLUSH = "clush"
    SRUN = "srun"


FormatOption = Annotated[FleetFormat, typer.Option("--format", "-F", help="Output format.", case_sensitive=False)]
OutputOption = Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to this file instead of stdout.")]
SinceOption = Annotated[
    Path | None,
    typer.Option("--since", help="An earlier fleet JSON report, or a directory of them (the newest is taken): "
                 "list the nodes that changed grade, new and cleared findings, changed versions."),
]
ThresholdOption = Annotated[
    float,
    typer.Option("--outlier-threshold", min=0.5, help="Robust z-score (median/MAD) beyond which a node is a fleet outlier."),
]


def report_inputs(rules: str | None, since: Path | None, *, pack_on_nodes: bool = False,
                  ) -> tuple[FleetSettings, tuple[dict[str, Any], str] | None]:
    """The pack's fleet settings and the earlier report, read before any sweep runs (a typo
    must not cost a sweep). `pack_on_nodes`: `--rules` may name a file only the nodes have
    (`fleet sweep` passes it on): unreadable here, the default pack's fleet settings stand."""
    try:
        settings = fleet_settings(rules)
    except NetdoctorError as error:
        if not pack_on_nodes:
            raise
        log.warning("--rules is not readable here: drift and rail settings from the default pack", error=str(error))
        settings = fleet_settings(None)
    return settings, (load_previous(since) if since is not None else None)


def fleet_report(nodes: list[NodeSummary], outlier_threshold: float, settings: FleetSettings,
                 previous: tuple[dict[str, Any], str] | None) -> FleetReport:
    """The fleet report with the pack's drift and rail settings, and what changed since `previous`."""
    report = build_fleet_report(nodes, outlier_threshold=outlier_threshold, minimum_versions=settings.minimum_versions,
                                rail_thresholds=settings.rails)
    if previous is not None:
        report.changes = changes_since(report, *previous)
    return report


@fleet_app.command("sweep")
def sweep_command(
    hosts: Annotated[str, typer.Option("--hosts", "-w", help="Host list, e.g. node[001-128,200].")],
    via: Annotated[ParallelShell, typer.Option("--via", help="Parallel shell to run through.")] = ParallelShell.PDSH,
    fanout: Annotated[int, typer.Option("--fanout", "-f", min=1, help="Nodes contacted at once (pdsh/clush).")] = 64,
    timeout: Annotated[float, typer.Option("--timeout", "-u", min=1, max=86400, help="Per-node command timeout in seconds (1 to 86400).")] = 120.0,
    rcmd: Annotated[str | None, typer.Option("--rcmd", "-R", help="pdsh rcmd module / clush worker: ssh (default), exec, rsh.")] = None,
    remote_command: Annotated[
        str | None,
        typer.Option("--remote-command", help="Command each node runs instead of `netdoctor check --format json`; {host} or %h is the node name."),
    ] = None,
    no_probe: Annotated[bool, typer.Option("--no-probe", help="Pass --no-probe to each node.")] = False,
    rules: Annotated[str | None, typer.Option("--rules", help="Pass --rules NAME|FILE to each node.")] = None,
    deadline: Annotated[float | None, typer.Option("--deadline", min=1, help="Pass --deadline SECONDS to each node.")] = None,
    output_format: FormatOption = FleetFormat.TEXT,
    output: OutputOption = None,
    outlier_threshold: ThresholdOption = DEFAULT_THRESHOLD,
    since: SinceOption = None,
) -> None:
    """Run `netdoctor check --format json` on every node and print the fleet report."""
    from netdoctor.fleet.sweep import SweepOptions, run_sweep   # (not imported by `fleet report`)
    options = SweepOptions(
        hosts=hosts,
        via=str(via),
        fanout=fanout,
        timeout_s=timeout,
        rcmd=rcmd,
        remote_command=remote_command,
        no_probe=no_probe,
        rules=rules,
        deadline_s=deadline,
    )
    try:
        settings, previous = report_inputs(rules, since, pack_on_nodes=True)
        become_subreaper()   # what the shell orphans (pdsh's per-node timeout kills only a node's `sh`) comes to us
        result = run_sweep(options)
        report = fleet_report(result.nodes, outlier_threshold, settings, previous)
        emit(RENDERERS[str(output_format)](report), output)   # -o FILE: atomically
    except NetdoctorError as error:
        _fail_usage(error)
    raise typer.Exit(report.exit_code)


@fleet_app.command("report")
def report_command(
    files: Annotated[
        list[Path],
        typer.Argument(help="pdsh/clush output (`host: line`), JSON report files, or directories of them; - reads stdin."),
    ],
    expect: Annotated[
        str | None,
        typer.Option("--expect", "-w", help="Hosts that were asked (e.g. node[001-128]); any without output is listed as unreachable."),
    ] = None,
    output_format: FormatOption = FleetFormat.TEXT,
    output: OutputOption = None,
    outlier_threshold: ThresholdOption = DEFAULT_THRESHOLD,
    since: SinceOption = None,
    rules: Annotated[str | None, typer.Option("--rules", help="Rule pack whose [fleet-drift]/[fleet-rails] apply "
                                              "(default: the default pack).")] = None,
) -> None:
    """Build the fleet report from saved per-node output."""
    try:
        if expect:
            from netdoctor.fleet.sweep import parse_hosts
        expected = list(parse_hosts(expect)) if expect else []
        settings, previous = report_inputs(rules, since)
        with _few_collections():
            collector = FleetCollector(hosts=expected)
            for path in files:
                if str(path) == "-":
                    collector.feed_stream(sys.stdin, "stdin")
                    continue
                if not path.exists():
                    raise UsageError(f"fleet input {path} does not exist")
                collector.add_path(path)
            nodes = collector.finish(expected_hosts=expected)
            if not nodes:
                raise UsageError("no node output found in the given files")
            report = fleet_report(nodes, outlier_threshold, settings, previous)
            emit(RENDERERS[str(output_format)](report), output)   # -o FILE: atomically
    except NetdoctorError as error:
        _fail_usage(error)
    raise typer.Exit(report.exit_code)


# The cyclic garbage collector's thresholds while a fleet report is read and built (engineering
# default, benchmarks/results/fleet.md): what the fleet keeps and decodes holds no reference
# cycles (a whole pretty-printed 10,000-node run leaves ~400 objects for the collector), yet with
# the default thresholds it ran ~450 times over ever more kept summaries, ~0.15 s per 10,000
# nodes. Still on, so that memory stays bounded whatever a hostile input makes.
_GC_THRESHOLDS = (10_000, 10, 10)


@contextmanager
def _few_collections() -> Iterator[None]:
    """The interpreter's own objects (modules, the rule pack) frozen out of the collector's
    scans, and the collector run less often, for the duration; both restored after."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@fleet_app.command("probe")
def probe_command(
    hosts: Annotated[str, typer.Option("--hosts", "-w", help="Host list, e.g. node[001-128].")],
    via: Annotated[ParallelShell, typer.Option("--via", help="Parallel shell to run through.")] = ParallelShell.PDSH,
    fanout: Annotated[int, typer.Option("--fanout", "-f", min=1, help="Nodes contacted at once for the check sweep "
                                        "(a traffic round asks all its nodes at once).")] = 64,
    timeout: Annotated[float, typer.Option("--timeout", "-u", min=1, max=86400, help="Per-node timeout of the check sweep.")] = 120.0,
    rcmd: Annotated[str | None, typer.Option("--rcmd", "-R", help="pdsh rcmd module / clush worker.")] = None,
    rules: Annotated[str | None, typer.Option("--rules", help="Rule pack for the nodes' checks and [fleet-probe].")] = None,
    budget: Annotated[float, typer.Option("--budget", min=3, max=600, help="Seconds of traffic per round on each node.")] = 10.0,
    round_timeout: Annotated[float | None, typer.Option("--round-timeout", min=5, help="Per-node timeout of a round "
                                                        "(default: --budget + 20 s).")] = None,
    port: Annotated[int, typer.Option("--port", min=1024, max=65000, help="TCP port of each group's NCCL bootstrap "
                                      "root (rails: port+1..port+N).")] = 29400,
    check_command: Annotated[str | None, typer.Option("--check-command", help="Replaces `netdoctor check --format json "
                                                      "--no-probe` on each node; {host} is the node name.")] = None,
    node_command: Annotated[str, typer.Option("--node-command", help="The node side of a round (its --as/--plan are "
                                              "appended).")] = "netdoctor fleet probe-node",
    output_format: FormatOption = FleetFormat.TEXT,
    output: OutputOption = None,
) -> None:
    """NCCL traffic between nodes: pairs in two rounds, then the suspects' rails; names the slow node or rail."""
    from netdoctor.fleet.probe_run import FleetProbeOptions, run_fleet_probe
    options = FleetProbeOptions(hosts, str(via), fanout, timeout, rcmd, rules, budget, port, check_command, node_command,
                                round_timeout_s=round_timeout)
    try:
        become_subreaper()
        report = run_fleet_probe(options)
        emit(RENDERERS[str(output_format)](report), output)
    except NetdoctorError as error:
        _fail_usage(error)
    raise typer.Exit(report.exit_code)


@fleet_app.command("probe-node", hidden=True)
def probe_node_command(
    plan: Annotated[str, typer.Option("--plan", help="The round plan (from `fleet probe`).")],
    name: Annotated[str | None, typer.Option("--as", help="This node's name in the plan (the shell's).")] = None,
) -> None:
    """One node's part of a `fleet probe` round: prints one report line."""
    from netdoctor.fleet.probe_node import main as node_main
    try:
        code = node_main(plan, name)
    except NetdoctorError as error:
        _fail_usage(error)
    raise typer.Exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the fleet commands alone (`python -m netdoctor.fleet`); usage errors exit 3."""
    configure_logging()   # warnings, to stderr: stdout is the report's
    command = with_global_options(typer.main.get_command(fleet_app))
    return invoke(command, sys.argv[1:] if argv is None else argv, "netdoctor fleet")


def _fail_usage(error: NetdoctorError) -> None:
    typer.echo(f"netdoctor: error: {error}", err=True)
    raise typer.Exit(USAGE_EXIT)
