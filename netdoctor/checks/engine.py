"""The check runner: every check in its own envelope, all bounded by one deadline.

Each selected check first passes the needs gate (netdoctor.checks.needs); a check whose
need fails gives ONE finding (subject `node`) with the gate's status and reason. The rest
run in daemon worker threads: a check that raises becomes one `unknown` finding
("check crashed: ..."), and a check still running at the deadline becomes
`unknown: deadline reached` while the report goes on. Daemon threads, not a
ThreadPoolExecutor: the interpreter joins executor workers at exit, so one hung
third-party check would hold the process past its deadline.

What a check yields is bounded as it comes (netdoctor.checks.bounds): at most MAX_FINDINGS
findings per check, the worst kept and the rest folded into one finding that says how many,
and a bounded amount of text and evidence in each.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field, replace

from netdoctor.checks.api import Check, CheckContext, CounterHistory
from netdoctor.checks.bounds import FindingBuffer, bounded_finding
from netdoctor.checks.needs import ProbeInput, gate
from netdoctor.checks.registry import Registry
from netdoctor.errors import UsageError
from netdoctor.inventory.model import Inventory
from netdoctor.logging import get_logger
from netdoctor.packs.model import RulePack
from netdoctor.records import record
from netdoctor.report.model import STATUS_SEVERITY, CheckOutcome, Finding, Status

log = get_logger(__name__)


def select_checks(registry: Registry, only: Sequence[str] | None = None,
                  skip: Sequence[str] | None = None) -> list[Check]:
    """The checks to run, in registry order; an unknown id is a usage error naming the valid ones."""
    valid = registry.ids()
    for option, ids in (("--only", only), ("--skip", skip)):
        unknown = [check_id for check_id in ids or () if check_id not in registry]
        if unknown:
            raise UsageError(f"{option}: unknown check id {', '.join(unknown)}; valid ids: {', '.join(valid)}")
    chosen = set(only) if only else set(valid)
    chosen -= set(skip or ())
    if not chosen:
        # A run that judges nothing would pass: that is a mistake on the command line.
        raise UsageError("--only and --skip leave no check to run")
    return [check for check in registry.checks() if check.id in chosen]


@record
class _Envelope:
    """One check's run in its worker thread; written by the worker, read after join."""

    check: Check
    findings: list[Finding] = field(default_factory=list)
    error: BaseException | None = None
    started: float = 0.0
    duration_s: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)

    def run(self, context: CheckContext, shadowed: Callable[[Finding], bool]) -> None:
        try:
            self.findings = _collect(self.check, self.check.function(context), shadowed)
        except BaseException as error:  # the envelope: anything a plugin raises is a result
            self.error = error
        finally:
            self.duration_s = time.monotonic() - self.started
            self.done.set()


def _collect(check: Check, produced: Iterable[Finding] | None,
             shadowed: Callable[[Finding], bool] = lambda finding: False) -> list[Finding]:
    findings = FindingBuffer(check.id, shadowed=shadowed)
    for item in produced or ():
        if not isinstance(item, Finding):
            raise TypeError(f"yielded {type(item).__name__}, not a Finding")
        if item.check != check.id:
            raise ValueError(f"yielded a finding for check {item.check!r}")
        findings.add(item)
    return findings.findings()


def _worst(findings: list[Finding]) -> Status:
    graded = [finding for finding in findings if not finding.shadow] or findings
    return max((finding.status for finding in graded), key=STATUS_SEVERITY.__getitem__, default=Status.SKIP)


def run_checks(inventory: Inventory, pack: RulePack, registry: Registry, *,
               only: Sequence[str] | None = None, skip: Sequence[str] | None = None,
               history: CounterHistory | None = None, probe: ProbeInput = None, loopback: ProbeInput = None,
               deadline: float, debug: bool = False) -> tuple[list[Finding], list[CheckOutcome]]:
    """Run the selected checks; findings in registry order, plus one outcome per check.

    `deadline` is a `time.monotonic()` value. With `debug`, a crashing check re-raises.
    """
    selected = select_checks(registry, only, skip)
    required = pack.required
    envelopes: list[_Envelope] = []
    gated: dict[str, Finding] = {}
    for check in selected:
        verdict = gate(check, inventory, probe, loopback)
        if verdict is not None:
            status, reason, need = verdict
            gated[check.id] = Finding(check.id, status, "node", reason, evidence={"need": need})
            continue
        context = CheckContext(check.id, inventory, pack, history=history, probe=probe, loopback=loopback)
        envelope = _Envelope(check, started=time.monotonic())
        shadowed = _shadow_rule(pack, check.id)
        worker = threading.Thread(target=envelope.run, args=(context, shadowed), name=f"check:{check.id}", daemon=True)
        envelopes.append(envelope)
        worker.start()

    for envelope in envelopes:
        envelope.done.wait(timeout=max(0.0, deadline - time.monotonic()))
    late = [envelope.check.id for envelope in envelopes if not envelope.done.is_set()]
    if late:
        log.warning("deadline reached before checks finished", checks=late)

    by_id = {envelope.check.id: envelope for envelope in envelopes}
    findings: list[Finding] = []
    outcomes: list[CheckOutcome] = []
    for check in selected:
        produced, duration_s, error = _result_of(check, gated.get(check.id), by_id.get(check.id), debug)
        # A check (or one rule of it) in the pack's shadow list is reported, never graded.
        produced = [bounded_finding(replace(finding, shadow=True) if pack.is_shadow(check.id, finding.rule) else finding)
                    for finding in produced]
        findings.extend(produced)
        outcomes.append(CheckOutcome(check.id, _worst(produced), duration_s, check.id in required, error=error))
    return findings, outcomes


def _shadow_rule(pack: RulePack, check_id: str) -> Callable[[Finding], bool]:
    return lambda finding: pack.is_shadow(check_id, finding.rule)


def _result_of(check: Check, gated: Finding | None, envelope: _Envelope | None,
               debug: bool) -> tuple[list[Finding], float, str | None]:
    """One check's findings, duration and error text (crash or deadline)."""
    if gated is not None or envelope is None:
        return ([gated] if gated else []), 0.0, None
    if not envelope.done.is_set():
        elapsed = time.monotonic() - envelope.started
        summary = f"deadline reached: check {check.id} had not finished after {elapsed:.1f} s"
        return [Finding(check.id, Status.UNKNOWN, "node", summary,
                        evidence={"elapsed_s": round(elapsed, 3)})], elapsed, "deadline reached"
    if envelope.error is not None:
        if debug:
            raise envelope.error
        error = envelope.error
        message = f"check crashed: {type(error).__name__}: {error}"
        log.warning("check crashed", check=check.id, error=message, origin=check.origin)
        return [Finding(check.id, Status.UNKNOWN, "node", message, internal=True,
                        evidence={"duration_s": round(envelope.duration_s, 4), "origin": check.origin})], \
            envelope.duration_s, message
    produced = envelope.findings or [Finding(check.id, Status.SKIP, "node", "nothing to judge on this node")]
    return produced, envelope.duration_s, None
