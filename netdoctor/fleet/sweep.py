"""Run `netdoctor check --format json` on many nodes through pdsh, clush or srun.

The parallel shell is run as an argument list (no local shell), in its own process
group, with a wall-clock watchdog over the whole sweep; its stdout is streamed line by
line into a `FleetCollector`, so a 4,000-node sweep never holds 4,000 reports.

The shell is started through the host layer's runner (`spawn`), which registers its
process group and owns the kill, of the shell's whole tree (pdsh and clush start each node's
command in a session of its own); the sweep only streams its output. On a terminal, a
progress line on stderr (`progress`) counts the hosts as their output is attributed.
"""

from __future__ import annotations

import math
import os
import shlex
import threading
import time
from collections.abc import Mapping

from ClusterShell.NodeSet import NodeSet, NodeSetException

from netdoctor.errors import UsageError
from netdoctor.fleet.collect import FleetCollector
from netdoctor.fleet.model import NodeSummary
from netdoctor.fleet.progress import progress_line
from netdoctor.host.runner import spawn
from netdoctor.host.trust import child_environment
from netdoctor.logging import get_logger
from netdoctor.records import record

log = get_logger(__name__)

SHELLS = ("pdsh", "clush", "srun")
HOST_PLACEHOLDER = "{host}"

# Seconds the whole sweep may run beyond per-node timeout x rounds of fan-out.
_SWEEP_MARGIN_S = 30.0

# Run on each node around the remote command: its output ends with a newline even where the
# command's does not (pdsh glues an unterminated last line onto another node's line), and
# the command's exit status is kept for the shell to report.
_NEWLINE_AFTER = "; rc=$?; echo; exit $rc"

@record(frozen=True)
class SweepOptions:
    hosts: str
    via: str = "pdsh"
    fanout: int = 64
    timeout_s: float = 120.0
    rcmd: str | None = None
    remote_command: str | None = None
    no_probe: bool = False
    rules: str | None = None
    deadline_s: float | None = None


@record(frozen=True)
class SweepResult:
    nodes: list[NodeSummary]
    command: list[str]
    shell_returncode: int | None
    duration_s: float
    killed: bool


def parse_hosts(hosts: str) -> NodeSet:
    try:
        node_set = NodeSet(hosts)
    except NodeSetException as error:
        raise UsageError(f"bad host list {hosts!r}: {error}") from error
    if not len(node_set):
        raise UsageError("the host list is empty")
    return node_set


def remote_argv(options: SweepOptions) -> list[str]:
    """The command each node runs, as an argument list (may hold the `{host}` placeholder)."""
    if options.remote_command:
        passed = [flag for flag, given in (("--no-probe", options.no_probe), ("--rules", options.rules is not None),
                                            ("--deadline", options.deadline_s is not None)) if given]
        if passed:
            raise UsageError(f"{', '.join(passed)} cannot be passed to a --remote-command (it replaces "
                             "`netdoctor check`): put them in the remote command")
        try:
            argv = shlex.split(options.remote_command)
        except ValueError as error:
            raise UsageError(f"cannot split --remote-command {options.remote_command!r}: {error}") from error
        if not argv:
            raise UsageError("--remote-command is empty")
        return argv
    argv = ["netdoctor", "check", "--format", "json"]
    if options.no_probe:
        argv.append("--no-probe")
    if options.rules:
        argv += ["--rules", options.rules]
    if options.deadline_s is not None:
        argv += ["--deadline", f"{options.deadline_s:g}"]
    return argv


# What the parallel shell takes from its caller: what ssh, pdsh, clush and srun read (the
# agent socket, Kerberos, HOME for keys and config, SLURM's and the shells' own variables)
# and netdoctor's own, which `-R exec` passes to the node's netdoctor. Nothing else.
SHELL_NAMES = ("HOME", "USER", "LOGNAME", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "KRB5CCNAME", "TMPDIR", "WCOLL",
               "NO_COLOR")
SHELL_PREFIXES = ("PDSH_", "SLURM_", "CLUSTERSHELL_", "NETDOCTOR_")


def shell_environment(caller: Mapping[str, str]) -> dict[str, str]:
    """The parallel shell's whole environment (netdoctor.host.trust.child_environment)."""
    return child_environment(caller, names=SHELL_NAMES, prefixes=SHELL_PREFIXES)


def build_sweep_command(options: SweepOptions) -> list[str]:
    """The local argument list that runs the sweep."""
    if options.via not in SHELLS:
        raise UsageError(f"--via must be one of {', '.join(SHELLS)}, not {options.via!r}")
    if options.fanout < 1:
        raise UsageError("--fanout must be at least 1")
    if options.timeout_s <= 0:
        raise UsageError("--timeout must be positive")
    node_set = parse_hosts(options.hosts)
    argv = remote_argv(options)
    timeout = str(max(1, math.ceil(options.timeout_s)))
    connect_timeout = str(max(1, min(10, math.ceil(options.timeout_s))))
    if options.via == "pdsh":
        rcmd = options.rcmd or "ssh"
        command = ["pdsh", "-R", rcmd, "-f", str(options.fanout)]
        if rcmd != "exec":                 # pdsh refuses a connect timeout with exec
            command += ["-t", connect_timeout]
        command += ["-u", timeout, "-w", str(node_set)]
        remote = _newline_terminated(argv)
        # The exec module runs argv directly; ssh/rsh join it with spaces for the remote
        # shell, so there it must be quoted into one string.
        return command + (remote if rcmd == "exec" else [shlex.join(remote)])
    if options.via == "clush":
        rcmd = options.rcmd or "ssh"
        remote = shlex.join(_newline_terminated(argv))
        return ["clush", "-R", rcmd, "-f", str(options.fanout), "-t", connect_timeout, "-u", timeout, "-w", str(node_set), remote]
    if options.rcmd:
        raise UsageError("--rcmd does not apply to --via srun")
    # srun labels each line with its task number (`--label`), and `--distribution=arbitrary`
    # puts task i on the i-th node of the list: SLURM says which node a line came from,
    # never the node itself. `timeout` stands in for pdsh's per-command timeout.
    quoted = shlex.join(argv).replace(HOST_PLACEHOLDER, "'\"$SLURMD_NODENAME\"'").replace("%h", "'\"$SLURMD_NODENAME\"'")
    script = (
        f"timeout -k 5 {timeout} {quoted}; rc=$?; echo; "
        "[ $rc -eq 124 ] && echo 'command timeout' >&2; "
        "exit $rc"
    )
    return [
        "srun", "--nodelist", ",".join(node_set), "--ntasks", str(len(node_set)), "--distribution=arbitrary",
        "--label", "--kill-on-bad-exit=0", "--job-name=netdoctor-sweep", "sh", "-c", script,
    ]


def _newline_terminated(argv: list[str]) -> list[str]:
    """`argv` (placeholders as pdsh/clush's `%h`) run by `sh`, its output ending in a newline."""
    remote = shlex.join(part.replace(HOST_PLACEHOLDER, "%h") for part in argv)
    return ["sh", "-c", remote + _NEWLINE_AFTER]


def run_sweep(options: SweepOptions, *, label: str = "sweep") -> SweepResult:
    """Run the sweep and return one summary per host asked (plus any host that answered).

    `label` names the sweep on the progress line (`round 2: 412/1000 answered, ...`).
    """
    command = build_sweep_command(options)
    node_set = parse_hosts(options.hosts)
    rounds = math.ceil(len(node_set) / options.fanout) if options.via != "srun" else 1
    budget = options.timeout_s * rounds + _SWEEP_MARGIN_S
    collector = FleetCollector(command_timeout_s=options.timeout_s, hosts=node_set, labelled=options.via == "srun")
    log.info("fleet sweep", command=command, hosts=len(node_set), budget_s=budget)
    started = time.monotonic()
    try:
        # The runner's watchdog stops the whole group (pdsh and every ssh it forked) at
        # the budget, even while this thread blocks reading the shell's output.
        with spawn(command, env=shell_environment(os.environ), timeout_s=budget, text=True, watchdog=True,
                   tree=True) as group, \
                progress_line(label, node_set, budget) as progress:
            collector.observer = progress
            process = group.process
            assert process.stdout is not None and process.stderr is not None
            stderr_reader = threading.Thread(target=collector.feed_stderr, args=(process.stderr,), daemon=True)
            stderr_reader.start()
            collector.feed_stream(process.stdout, options.via)
            if not group.wait():
                log.error("fleet sweep ran past its budget; killed it", budget_s=budget)
            stderr_reader.join(timeout=5)
            killed = group.timed_out
    except FileNotFoundError as error:
        raise UsageError(f"{command[0]} is not installed or not on PATH (needed by --via {options.via})") from error
    except PermissionError as error:
        raise UsageError(f"cannot run {command[0]}: {error}") from error
    returncode = process.returncode
    if killed:
        for host in node_set:
            collector.feed_stderr_line(f"netdoctor-sweep: {host}: sweep killed after {budget:g} s (command timeout)")
    duration = time.monotonic() - started
    # The shell's own status says nothing the nodes' do not (pdsh passes theirs on only with -S).
    log.info("fleet sweep done", returncode=returncode, duration_s=round(duration, 2))
    return SweepResult(
        nodes=collector.finish(expected_hosts=node_set),
        command=command,
        shell_returncode=returncode,
        duration_s=duration,
        killed=killed,
    )

