"""Orchestration of `netdoctor check` and `netdoctor probe`: source -> inventory -> rules ->
history -> probe -> checks -> report.

Everything runs against one wall-clock deadline (`--deadline`, default 10 s, 20 s when
the NCCL probe runs). Discovery and the probe run in daemon threads that the main
thread stops waiting for at their share of the budget, so the report always comes by
the deadline (plus a fraction of a second), even when a tool, NVML or a plugin hangs.
On a live node with GPUs the all-reduce starts once NVML is read and runs beside the rest
of discovery (netdoctor.traffic.early_allreduce). `netdoctor probe` is the same pipeline with only
the probe checks selected and the probe's own request (`--gpus`, `--engine`, `--budget`:
the probe gets the whole budget).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from netdoctor import __version__
from netdoctor.checks.api import Check, CounterHistory
from netdoctor.checks.engine import run_checks, select_checks
from netdoctor.checks.metrics import node_metrics
from netdoctor.checks.registry import Registry, load_registry, third_party_configured
from netdoctor.errors import NetdoctorError, UsageError
from netdoctor.host.trust import live_sys_root
from netdoctor.host.types import NodeSource
from netdoctor.inventory.model import Inventory, SourceState
from netdoctor.inventory.plan import report_only
from netdoctor.inventory.queries import neighbors, versions
from netdoctor.logging import get_logger
from netdoctor.probe.early import EarlyAllReduce
from netdoctor.probe.result import MIN_PROBE_BUDGET_S
from netdoctor.records import record
from netdoctor.traffic import early_allreduce, fabric_summary, not_run, probe_checks, run_allreduce, run_nic_loopback
from netdoctor.report.model import Finding, Grade, Report, Status, grade_of
from netdoctor.util import DeadlineExceeded, call_with_deadline, utc_now_iso

log = get_logger(__name__)

DEFAULT_STATE_PATH = Path("/var/lib/netdoctor/state.json")
# The id of the finding that says why a run has no counter history (not a check, like `plugins`).
COUNTER_HISTORY = "counter-history"
# Checks with these needs judge counters by growth: the run reads (and stores) the counter history.
HISTORY_NEEDS = frozenset({"counters", "phy"})
DEFAULT_DEADLINE_S = 10.0
DEFAULT_DEADLINE_WITH_PROBE_S = 20.0
TOOL_TIMEOUT_S = 5.0
# Kept back from discovery for the checks and the report (they take milliseconds;
# the margin covers a loaded node).
RESERVE_S = 1.0
# Third-party plugin imports get this long (a quarter of a short --deadline) before the
# run goes on with the built-in checks alone.
PLUGIN_LOAD_S = 2.0
# At least this long for parsing and joining what answered by the discovery deadline (a
# share of the reserve when that is larger).
DISCOVERY_GRACE_S = 0.3
# The needs of the checks that judge traffic netdoctor makes (the all-reduce, the NIC loopback).
TRAFFIC_NEEDS = frozenset({"probe", "loopback"})
# What an auto-selected rule pack's [pack.match] reads (see discovery_needs).
AUTO_PACK_NEEDS = frozenset({"gpus", "rdma"})

T = TypeVar("T")


@record(frozen=True)
class CheckOptions:
    """What `netdoctor check` was asked to do (the CLI's options, typed)."""

    snapshot: Path | None = None
    rules: str | None = None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    no_probe: bool = False
    deadline_s: float | None = None
    state: Path | None = None
    baseline: Path | None = None
    plugin_dirs: tuple[Path, ...] = ()
    debug: bool = False
    fabric_scan: bool | None = None   # None: live nodes no, snapshots use a recorded scan
    # `netdoctor probe`: only the probe checks, required whatever the pack says, and the
    # probe's own request; probe_budget_s set means the probe gets exactly that long.
    probe_only: bool = False
    probe_gpus: tuple[int, ...] | None = None
    probe_engine: str = "auto"
    probe_budget_s: float | None = None


@contextlib.contextmanager
def open_source(snapshot: Path | None, *, tool_timeout_s: float = TOOL_TIMEOUT_S) -> Iterator[NodeSource]:
    """The node to judge: the snapshot at `snapshot`, or the live node."""
    if snapshot is not None:
        from netdoctor.host.snapshot import open_snapshot

        with open_snapshot(snapshot) as source:
            yield source
        return
    from netdoctor.host.live import LiveSource

    yield LiveSource(sys_root=live_sys_root(), record=False, tool_timeout_s=tool_timeout_s)


class DiscoveryTimeout(NetdoctorError):
    """Discovery (a tool, NVML, sysfs) did not finish before its deadline."""


def _load_plugins(plugin_dirs: tuple[Path, ...], wait_s: float) -> Registry:
    """The check registry; a third-party plugin whose import hangs costs the plugins, not the run.

    The built-in checks load first and unbounded (ours: a slow import on a loaded machine is
    no plugin's fault); only third-party code, where a site has any, is waited for."""
    builtins = load_registry((), system_dir=None, entry_points=False)
    if not third_party_configured(plugin_dirs):
        return builtins
    try:
        return call_with_deadline("plugin loading", lambda: load_registry(plugin_dirs), time.monotonic() + wait_s)
    except DeadlineExceeded:
        log.warning("third-party plugins did not finish loading", wait_s=wait_s)
        builtins.problem("plugins", f"third-party plugins did not finish loading within {wait_s:.1f} s "
                                    f"(an import that hangs{machine_load() and ', or' + machine_load()[1:]}); "
                                    "only the built-in checks ran")
        return builtins


def discover(source: NodeSource, *, deadline: float, fabric_scan: bool | None = None,
             needs: frozenset[str] | None = None, grace_s: float = DISCOVERY_GRACE_S) -> Inventory:
    """build_inventory bounded by `deadline`; raises DiscoveryTimeout when it did not finish.

    `needs`: collect only the sources serving these check needs (None: everything).
    """
    from netdoctor.inventory.build import build_inventory

    try:
        # Tools are killed and NVML given up at `deadline`; what answered is still parsed and
        # judged in the grace after it. Only a source that hangs outside those bounds (a
        # stuck sysfs read) or a starved machine ends discovery without an inventory.
        return call_with_deadline(
            "discovery", lambda: build_inventory(source, deadline=deadline, fabric_scan=fabric_scan, needs=needs),
            deadline + grace_s)
    except DeadlineExceeded:
        raise DiscoveryTimeout(f"discovery did not finish before the deadline{machine_load()}") from None


def machine_load() -> str:
    """`: the machine is loaded (...)` when the 1-minute load is above the CPU count: the usual
    cause of a healthy node running out of time, named so it is not taken for a fault."""
    try:
        load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    except OSError:
        return ""
    return f": the machine is loaded (load average {load:.1f} on {cpus} CPUs)" if load > cpus else ""


def discovery_needs(selected: list[Check], rules: str | None) -> frozenset[str] | None:
    """What discovery must serve for these checks; None (everything) when one declares no needs.

    A check without needs may read any fact. An auto-selected rule pack matches on GPU
    names and counts and on HCA types, link layers and port rates.
    """
    if any(not check.needs for check in selected):
        return None
    needs = frozenset(need for check in selected for need in check.needs)
    return needs | AUTO_PACK_NEEDS if rules is None else needs


def run_check(options: CheckOptions, *, source: NodeSource | None = None, registry: Registry | None = None,
              env: Mapping[str, str] | None = None, probe_started: EarlyAllReduce | None = None) -> Report:
    """The whole `check` run; returns the graded report (never raises for a hung part).

    `source` replaces the node `options.snapshot` names (or the live node); `registry`
    replaces the plugin loading; `env` replaces os.environ (for $NETDOCTOR_STATE/_RULES);
    `probe_started`: the all-reduce `netdoctor probe` started as soon as its command line was read.
    """
    environment = os.environ if env is None else env
    started_at = utc_now_iso()
    start = time.monotonic()
    if registry is None:
        load_s = min(PLUGIN_LOAD_S, options.deadline_s / 4) if options.deadline_s else PLUGIN_LOAD_S
        registry = _load_plugins(options.plugin_dirs, load_s)
    only = options.only or (probe_checks(registry) if options.probe_only else ())
    selected = select_checks(registry, only, options.skip)   # usage errors before any work
    wants_allreduce = not options.no_probe and any("probe" in check.needs for check in selected)
    wants_loopback = not options.no_probe and any("loopback" in check.needs for check in selected)
    wants_probe = wants_allreduce or wants_loopback
    total_s = options.deadline_s if options.deadline_s is not None else (
        DEFAULT_DEADLINE_WITH_PROBE_S if wants_probe else DEFAULT_DEADLINE_S)
    if not total_s > 0:
        raise UsageError(f"--deadline must be a positive number of seconds, not {total_s}")
    reserve_s = min(RESERVE_S, total_s * 0.1)
    if options.probe_budget_s is not None:
        # The probe's own budget comes after discovery, which keeps its usual share.
        discovery_s = DEFAULT_DEADLINE_S - reserve_s
        total_s = discovery_s + options.probe_budget_s + reserve_s
    # With the probe, discovery may use at most half of the budget; the probe gets the rest.
    elif wants_probe and options.snapshot is None:
        discovery_s = (total_s - reserve_s) / 2
    else:
        discovery_s = total_s - reserve_s
    deadline = start + total_s
    discovery_deadline = start + discovery_s

    opened = contextlib.nullcontext(source) if source is not None else open_source(
        options.snapshot, tool_timeout_s=min(TOOL_TIMEOUT_S, max(0.5, discovery_s)))
    # A live all-reduce starts now (once NVML is read) and runs beside discovery, within its own
    # share: the whole probe budget, or half of what the traffic steps get when the loopback follows.
    allreduce_s = options.probe_budget_s if options.probe_budget_s is not None else \
        (deadline - reserve_s - time.monotonic()) / (2 if wants_loopback else 1)
    # Only traffic checks (`netdoctor probe`): nothing is judged at rest, the worker need not wait for NVML.
    traffic_only = all(TRAFFIC_NEEDS.intersection(check.needs) for check in selected)
    with opened as node, early_allreduce(node, wanted=wants_allreduce, budget_s=allreduce_s, at_rest=not traffic_only,
                                         gpus=options.probe_gpus, engine=options.probe_engine,
                                         started=probe_started) as early:
        try:
            inventory = discover(node, deadline=discovery_deadline, fabric_scan=options.fabric_scan,
                                 needs=discovery_needs(selected, options.rules),
                                 grace_s=max(DISCOVERY_GRACE_S, reserve_s / 2))
        except DiscoveryTimeout as error:
            log.warning("discovery timed out", deadline_s=round(discovery_s, 2))
            return _undiscovered_report(node.host, started_at, start, options, registry,
                                        f"{error} ({discovery_s:.1f} s)")
        from netdoctor.packs import load_rules

        pack = load_rules(options.rules, inventory, env=environment)
        history, history_notes = None, []
        if any(HISTORY_NEEDS.intersection(check.needs) for check in selected):
            history, history_notes = counter_history(options, inventory, environment, is_snapshot=node.is_snapshot,
                                                     deadline=discovery_deadline)
        probe_deadline = deadline - reserve_s
        if options.probe_budget_s is not None:
            probe_deadline = time.monotonic() + options.probe_budget_s
            deadline = probe_deadline + reserve_s
        # Both traffic steps: the all-reduce takes half the probe's share, the loopback the rest.
        allreduce_deadline = probe_deadline if not wants_loopback else \
            time.monotonic() + max((probe_deadline - time.monotonic()) / 2, MIN_PROBE_BUDGET_S)
        probe_for_checks, probe_report = not_run(options.no_probe, wants_allreduce, node.is_snapshot), None
        if probe_for_checks is None:
            probe_for_checks, probe_report = run_allreduce(
                inventory, allreduce_deadline, budget_s=options.probe_budget_s, gpus=options.probe_gpus,
                engine=options.probe_engine, pass_fraction=float(pack.section("nccl-probe")["pass_fraction"]),
                debug=options.debug, early=early)
        loopback = not_run(options.no_probe, wants_loopback, node.is_snapshot) or run_nic_loopback(
            inventory, pack, probe_deadline, env=None, tool_path=getattr(node, "path_env", None), debug=options.debug)
        findings, outcomes = run_checks(inventory, pack, registry, only=only, skip=options.skip,
                                        history=history, probe=probe_for_checks, loopback=loopback,
                                        deadline=deadline - reserve_s / 2, debug=options.debug)
    findings = registry.problem_findings() + history_notes + timed_out_sources(inventory) + findings
    # `netdoctor probe`: whatever the pack requires, the probe's `unknown` (nothing measured)
    # is the command's answer, exit 3, not a pass.
    required = pack.required | (frozenset(only) if options.probe_only else frozenset())
    if options.baseline is not None:
        # Growth against this baseline was asked for by name: one it cannot use (another
        # host, another boot) leaves the run unable to say what was asked, not a pass.
        required |= {COUNTER_HISTORY}
    if options.probe_only:
        outcomes = [replace(outcome, required=True) if outcome.check in only else outcome for outcome in outcomes]
    return Report(
        host=inventory.host,
        grade=grade_of(findings, required),
        started_at=started_at,
        duration_s=time.monotonic() - start,
        rules=pack.name,
        findings=findings,
        checks=outcomes,
        probe=probe_report,
        netdoctor_version=__version__,
        snapshot=str(options.snapshot) if options.snapshot is not None else None,
        captured_at=inventory.captured_at if node.is_snapshot else None,
        required_not_run=tuple(sorted(pack.required & set(registry.ids()) - {check.id for check in selected})),
        versions=versions(inventory, nccl=loaded_nccl(probe_for_checks, loopback),
                          net_plugin=getattr(probe_for_checks, "net_plugin", None)),
        neighbors=neighbors(inventory),
        fabric=fabric_summary(inventory, pack),
        metrics=node_metrics(inventory, history),
    )


def loaded_nccl(*outcomes: object) -> str | None:
    """The NCCL library version the probe (else the NIC loopback's ranks) loaded: `2.28.9`."""
    for outcome in outcomes:
        found = [getattr(outcome, "nccl_version", None)] + [getattr(rail, "nccl_version", None)
                                                             for rail in getattr(outcome, "rails", ())]
        version = next((value for value in found if isinstance(value, str) and value), None)
        if version:
            return version.split("+")[0][:64]
    return None


def timed_out_sources(inventory: Inventory) -> list[Finding]:
    """A `discovery` finding for each source that hung or was too large to read: the checks
    judged without its facts (a pack may fall back, e.g. to NUMA placement without `nvidia-smi
    topo -m`), so the report says so even where no required check became unknown. A hung nvidia-smi is itself a sign
    of a wedged GPU or driver. A source that only the report's versions or neighbours read is
    left out: no check judged without it."""
    return [Finding("discovery", Status.UNKNOWN, source.name,
                    f"{source.reason()}; the checks judged this node without its facts",
                    evidence={"state": source.state.value, "duration_s": source.duration_s},
                    remedy=_SOURCE_REMEDIES[source.state])
            for source in inventory.sources.values()
            if source.state in _SOURCE_REMEDIES and not report_only(source.name)]


# A source that hung, or one over its budget (docs/robustness.md "Budgets"): never silence.
_SOURCE_REMEDIES = {
    SourceState.TIMEOUT: "run the tool by hand to see why it hangs (a hung nvidia-smi: look for Xid errors in "
                         "`dmesg`); `netdoctor discover -vv` shows every source",
    SourceState.TOO_LARGE: "look at what floods it (an Xid storm or a flapping link fills `dmesg`); a real node's "
                           "output is far under its budget (docs/robustness.md, Budgets)",
}


def _undiscovered_report(host: str, started_at: str, start: float, options: CheckOptions,
                         registry: Registry, reason: str) -> Report:
    """Discovery hung: nothing can be judged, so the grade is `unknown` whatever the pack says."""
    findings = registry.problem_findings() + [
        Finding("discovery", Status.UNKNOWN, "node", reason, remedy="run `netdoctor discover -vv` to see which source hangs")]
    return Report(host=host, grade=Grade.UNKNOWN, started_at=started_at, duration_s=time.monotonic() - start,
                  rules=options.rules or "-", findings=findings, netdoctor_version=__version__,
                  snapshot=str(options.snapshot) if options.snapshot is not None else None)


def counter_history(options: CheckOptions, inventory: Inventory, env: Mapping[str, str], *,
                    is_snapshot: bool, deadline: float | None = None) -> tuple[CounterHistory | None, list[Finding]]:
    """Earlier counters: from `--baseline`, else from the state file (exchanged: read + written).

    Live runs use --state, $NETDOCTOR_STATE or /var/lib/netdoctor/state.json; snapshot runs
    touch a state file only when --state names one. A state file that cannot be written
    (non-root, read-only /var) costs the growth judgement, never the run. A history lost
    for a reason the operator must see (a reset file, a lock held past `deadline`, a
    refused path, an unusable baseline) comes back as a COUNTER_HISTORY finding: `unknown`,
    which grades the node only where a pack makes it required (as `plugins`).
    """
    from netdoctor.checks.history import history_from_baseline, history_from_entries, with_reading
    from netdoctor.host.state_store import exchange_entries

    if options.baseline is not None:
        with open_source(options.baseline) as baseline_source:
            from netdoctor.inventory.build import build_inventory

            baseline = build_inventory(baseline_source, deadline=deadline)
        history, why_not = history_from_baseline(baseline, inventory)
        if history is None:
            log.warning("baseline ignored", baseline=str(options.baseline), reason=why_not)
            return None, [_history_note(f"baseline {options.baseline} not used: {why_not}", options.baseline)]
        return history, []
    path = options.state
    if path is None and not is_snapshot:
        path = Path(env.get("NETDOCTOR_STATE") or DEFAULT_STATE_PATH)
    if path is None:
        return None, []
    stored = exchange_entries(path, lambda entries: with_reading(entries, inventory), deadline=deadline)
    history = history_from_entries(stored.entries, inventory)
    if stored.problem is None or history is not None:
        return history, []
    return None, [_history_note(stored.problem, path)]


def _history_note(why: str, source: Path) -> Finding:
    return Finding(COUNTER_HISTORY, Status.UNKNOWN, "node", f"{why}; counter growth not judged",
                   evidence={"history_source": str(source)})
