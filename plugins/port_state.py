"""port-state: every RDMA port ACTIVE/LinkUp; on InfiniBand also a LID, one SM, one P_Key table.

Reads Port.state / phys_state (sysfs `state`, `phys_state`; ibstat), lid / sm_lid (sysfs,
ibstat), pkeys (sysfs `pkeys/`), and the rule pack's port classes: a down port of a class
whose role is `unused` is skipped (down by design), never failed. See docs/checks.md (`port-state`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.checks.rules import PortClass, classified_ports, unavailable_reason
from netdoctor.inventory.model import Hca, LinkLayer, PhysState, Port, PortState

STATE_SOURCES = ("sysfs", "ibstat", "ibv_devinfo-v")
INVALID_LIDS = (0x0, 0xFFFF)   # 0: never assigned; 0xFFFF: the permissive LID, not a unicast address

SM_REMEDY = ("check that a subnet manager (opensm or UFM) runs on this fabric and sees the port: "
             "`sminfo -C <hca> -P <port>`, `ibstat <hca>`; look for the port GUID in the SM log")


def _state_text(port: Port) -> str:
    state = str(port.state) if port.state is not None else "unknown"
    phys = str(port.phys_state) if port.phys_state is not None else "unknown"
    return f"{state}/{phys}"


def _evidence(port: Port, port_class: PortClass | None) -> dict[str, object]:
    return {
        "state": str(port.state) if port.state is not None else None,
        "phys_state": str(port.phys_state) if port.phys_state is not None else None,
        "link_layer": str(port.link_layer) if port.link_layer is not None else None,
        "port_class": port_class.name if port_class else None,
        "role": port_class.role if port_class else "compute",
    }


def _not_active_problem(port: Port) -> tuple[str, str]:
    """Summary and remedy for a port that is not ACTIVE, named by its states."""
    ethernet = port.link_layer is LinkLayer.ETHERNET
    states = _state_text(port)
    if port.state is PortState.INIT and port.phys_state is PhysState.LINK_UP:
        return (f"{states}: the link is up but no subnet manager configured the port", SM_REMEDY)
    if port.state is PortState.ARMED:
        return (f"{states}: the subnet manager configured the port but has not activated it",
                "an SM sweep did not finish: check the SM log and `sminfo`; if it persists, bounce the port")
    if port.phys_state is PhysState.POLLING:
        return (f"{states}: no link partner (cable unplugged or faulty, or the switch port is down)",
                "check the cable and transceiver are seated, the switch port is enabled (`mlxlink -d <hca>`), "
                "and swap the cable if the port stays Polling")
    if port.phys_state is PhysState.DISABLED:
        how = (f"`ip link set {port.netdev or '<netdev>'} up`" if ethernet
               else "`ibportstate` on the switch side, or `mlxlink -d <hca> -a UP`")
        return (f"{states}: the port is administratively disabled",
                f"enable it ({how}); if it is unused by design, give it a port class with role \"unused\" "
                "in the rule pack")
    if port.phys_state is PhysState.TRAINING:
        return (f"{states}: link training does not complete",
                "usually a cable/transceiver or speed mismatch with the switch port: check `mlxlink -d <hca>` "
                "and the switch port's speed settings")
    if port.phys_state is PhysState.LINK_ERROR_RECOVERY:
        return (f"{states}: the link is in error recovery", "check the cable and transceiver; see error-counters")
    if port.phys_state is PhysState.SLEEP:
        return (f"{states}: the port is asleep (no link)", "check the cable and the switch port")
    return (f"{states}: the port is not ACTIVE", "check the cable, the switch port and the subnet manager")


def _judge_port(ctx: CheckContext, hca: Hca, port: Port, port_class: PortClass | None) -> Iterator[Finding]:
    evidence = _evidence(port, port_class)
    if port_class is not None and port_class.role == "unused":
        if port.is_active:
            yield ctx.skip(port.name, f"{_state_text(port)}; port class '{port_class.name}' is unused, not judged",
                           evidence=evidence)
        else:
            yield ctx.skip(port.name, f"{_state_text(port)}: down by design (port class '{port_class.name}' "
                                      "is unused)", evidence=evidence)
        return
    if port.state is None:
        reason = unavailable_reason(ctx.inventory, *STATE_SOURCES)
        yield ctx.unknown(port.name, f"port state unknown ({_state_text(port)}): {reason}", evidence=evidence)
        return
    if port.state is PortState.ACTIVE_DEFER or (
            port.state is PortState.ACTIVE and port.phys_state not in (None, PhysState.LINK_UP)):
        yield ctx.graded(ctx.rule("degraded_active_severity", "warn"), port.name,
                         f"{_state_text(port)}: the port is active but its link is not fully up",
                         evidence=evidence, rule="degraded_active",
                         remedy="watch it: a link stuck here is flapping; check the cable and error-counters")
        return
    if not port.is_active:
        summary, remedy = _not_active_problem(port)
        yield ctx.graded(ctx.rule("not_active_severity", "fail"), port.name, summary, evidence=evidence,
                         remedy=remedy, rule="not_active")
        return

    rate = f", {port.rate.describe()}" if port.rate is not None else ""
    if port.link_layer is not LinkLayer.INFINIBAND:
        # Ethernet (RoCE) ports have no LID and no subnet manager.
        yield ctx.passed(port.name, f"{_state_text(port)}{rate}", evidence=evidence)
        return
    evidence.update(lid=port.lid, sm_lid=port.sm_lid)
    if port.lid is None or port.sm_lid is None:
        missing = "LID" if port.lid is None else "SM LID"
        reason = unavailable_reason(ctx.inventory, "sysfs", "ibstat")
        yield ctx.unknown(port.name, f"{_state_text(port)}{rate}, but its {missing} is unknown: {reason}",
                          evidence=evidence)
        return
    if port.lid in INVALID_LIDS:
        yield ctx.fail(port.name, f"ACTIVE without a valid LID (0x{port.lid:04x}): the subnet manager did not "
                                  "assign one", evidence=evidence, remedy=SM_REMEDY)
        return
    if port.sm_lid == 0:
        yield ctx.fail(port.name, "ACTIVE but SM LID is 0: no subnet manager is reachable from this port",
                       evidence=evidence, remedy=SM_REMEDY)
        return
    yield ctx.passed(port.name, f"{_state_text(port)}{rate}, LID 0x{port.lid:x}, SM LID 0x{port.sm_lid:x}",
                     evidence=evidence)


def _judge_subnet_managers(ctx: CheckContext, ports: list[tuple[Port, PortClass | None]]) -> Iterator[Finding]:
    """Active IB ports of one scope should see one SM; different SM LIDs mean different subnets."""
    by_class = ctx.rule("sm_scope", "node") == "port-class"
    scopes: dict[str, dict[int, list[str]]] = {}
    for port, port_class in ports:
        scope = (port_class.name if port_class else "unclassed") if by_class else "node"
        scopes.setdefault(scope, {}).setdefault(port.sm_lid or 0, []).append(port.name)
    for scope, sm_lids in scopes.items():
        where = f" of port class '{scope}'" if by_class else ""
        evidence = {"sm_lids": {f"0x{lid:x}": names for lid, names in sorted(sm_lids.items())}, "scope": scope}
        if len(sm_lids) == 1:
            lid, names = next(iter(sm_lids.items()))
            who = f"all {len(names)} active IB ports{where} see" if len(names) > 1 else f"the active IB port{where} sees"
            yield ctx.passed("node", f"{who} SM LID 0x{lid:x}", evidence=evidence)
            continue
        parts = "; ".join(f"0x{lid:x} on {', '.join(names)}" for lid, names in sorted(sm_lids.items()))
        yield ctx.graded(ctx.rule("sm_mismatch_severity", "warn"), "node",
                         f"active IB ports{where} see different subnet managers: SM LID {parts}",
                         evidence=evidence, rule="sm_mismatch",
                         remedy="a cable in the wrong fabric, or an SM failover in progress: compare `sminfo` per "
                                "port; if the node sits on several fabrics by design, set [port-state] "
                                "sm_scope = \"port-class\" and give each fabric its own port class")


def _judge_pkeys(ctx: CheckContext, ports: list[Port]) -> Iterator[Finding]:
    """Compute ports carry one P_Key table; a port missing a partition cannot join jobs that use it."""
    tables = {port.name: tuple(sorted(set(port.pkeys))) for port in ports if port.pkeys}
    if len(tables) < 2:
        return
    counts = Counter(tables.values())
    top = max(counts.values())
    # Ties: the larger table is taken as the intended one (a missing partition is the usual fault).
    expected = max((table for table, count in counts.items() if count == top), key=lambda table: (len(table), table))
    deviating = {name: table for name, table in tables.items() if table != expected}
    if not deviating:
        yield ctx.passed("node", f"P_Keys {', '.join(expected)} on all {len(tables)} IB compute ports",
                         evidence={"pkeys": list(expected), "ports": sorted(tables)})
        return
    for name, table in deviating.items():
        missing = sorted(set(expected) - set(table))
        extra = sorted(set(table) - set(expected))
        detail = "; ".join(part for part in (f"missing {', '.join(missing)}" if missing else "",
                                             f"extra {', '.join(extra)}" if extra else "") if part)
        yield ctx.graded(ctx.rule("pkey_mismatch_severity", "warn"), name,
                         f"P_Key table {', '.join(table)} differs from the other compute ports' "
                         f"{', '.join(expected)} ({detail})",
                         evidence={"pkeys": list(table), "expected_pkeys": list(expected),
                                   "ports_with_expected": counts[expected]},
                         rule="pkey_mismatch",
                         remedy="check the subnet manager's partition configuration (partitions.conf / UFM "
                                "PKey groups) for this port's GUID")


@check("port-state", "each RDMA port is ACTIVE/LinkUp, has a LID and a reachable SM, one P_Key table",
       needs=("rdma",))
def port_state(ctx: CheckContext) -> Iterator[Finding]:
    healthy_ib: list[tuple[Port, PortClass | None]] = []
    for hca, port, port_class in classified_ports(ctx.inventory, ctx.rules):
        findings = list(_judge_port(ctx, hca, port, port_class))
        yield from findings
        if (port.link_layer is LinkLayer.INFINIBAND and port.is_active and port.sm_lid
                and all(finding.status is Status.PASS for finding in findings)):
            healthy_ib.append((port, port_class))
    yield from _judge_subnet_managers(ctx, healthy_ib)
    compute = [port for port, port_class in healthy_ib if port_class is None or port_class.role == "compute"]
    yield from _judge_pkeys(ctx, compute)
