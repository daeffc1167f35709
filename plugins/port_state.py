"""port-state: every RDMA port ACTIVE/LinkUp; on InfiniBand also a LID, one SM, one P_Key table.

Reads Port.state / phys_state (sysfs `state`, `phys_state`; ibstat), lid / sm_lid (sysfs,
ibstat), pkeys (sysfs `pkeys/`), counters (link_downed, data), and the rule pack's port
classes. Ports down by design are skipped with the evidence, never failed: a class whose role
is `unused`; phys state Disabled; a port never linked since the counters were cleared (not
cabled) next to an ACTIVE sibling port of the same card, or anywhere when the pack does not
require compute ports up. A compute rail of a pack with `compute_ports_must_be_up` always
fails when down. SR-IOV VFs are judged through their physical function.
See docs/checks.md (`port-state`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding, Status, check
from netdoctor.checks.api import majority
from netdoctor.inventory.model import Hca, Inventory, LinkLayer, PhysState, Port, PortState
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.queries import unavailable_reason, unbound_efa_functions, virtual_function_note
from netdoctor.packs import PortClass, RulePack, role_of

STATE_SOURCES = ("sysfs", "ibstat", "ibv_devinfo-v")
INVALID_LIDS = (0x0, 0xFFFF)   # 0: never assigned; 0xFFFF: the permissive LID, not a unicast address

# Counters that stay 0 on a port that never had a link since they were last cleared.
NEVER_LINKED_COUNTERS = ("link_downed", "port_xmit_data", "port_rcv_data")


def sm_remedy(port: Port) -> str:
    return ("check that a subnet manager (opensm or UFM) runs on this fabric and sees the port: "
            f"`sminfo -C {port.hca} -P {port.number}`, `ibstat {port.hca} {port.number}`; look for the port "
            "GUID in the SM log")


def _state_text(port: Port) -> str:
    state = str(port.state) if port.state is not None else "unknown"
    phys = str(port.phys_state) if port.phys_state is not None else "unknown"
    return f"{state}/{phys}"


def _evidence(inventory: Inventory, hca: Hca, port: Port, port_class: PortClass | None,
              pack: RulePack) -> dict[str, object]:
    return {
        "state": str(port.state) if port.state is not None else None,
        "phys_state": str(port.phys_state) if port.phys_state is not None else None,
        "link_layer": str(port.link_layer) if port.link_layer is not None else None,
        **pack.class_evidence(inventory, hca, port_class),
    }


def _siblings(inventory: Inventory, hca: Hca, port: Port) -> list[Port]:
    """Other ports of the same card: the HCA's other ports, and the ports of the other PCI
    functions of a dual-port mlx5 card (each port is its own RDMA device there, mlx5_1 and
    mlx5_2 on 29:00.0 and 29:00.1), told by one sys_image_guid or one PCI bus:device."""
    siblings = [other for number, other in sorted(hca.ports.items()) if number != port.number]
    for other in inventory.hcas:
        if other is hca or other.is_virtual_function:
            continue
        same_guid = hca.sys_image_guid is not None and other.sys_image_guid == hca.sys_image_guid
        same_device = (hca.pci_address is not None and other.pci_address is not None
                       and hca.pci_address.rpartition(".")[0] == other.pci_address.rpartition(".")[0])
        if same_guid or same_device:
            siblings.extend(other.ports[number] for number in sorted(other.ports))
    return siblings


def _never_linked(port: Port) -> bool:
    """DOWN with no link transition and no data since the counters were cleared: not cabled."""
    if port.state is not PortState.DOWN:
        return False
    return all(port.counters.get(name) == 0 for name in NEVER_LINKED_COUNTERS)


def _down_by_design(ctx: CheckContext, hca: Hca, port: Port, port_class: PortClass | None,
                    evidence: dict[str, object]) -> str | None:
    """Why a port that is not ACTIVE is down by design (the skip sentence), or None: judge it."""
    must_be_up = bool(ctx.rule("compute_ports_must_be_up"))
    if (must_be_up and role_of(port_class) == "compute") or is_efa(hca):
        return None      # a rail of a platform whose rails are all cabled, or EFA (no cable): down is a fault
    if port.phys_state is PhysState.DISABLED:
        return f"{_state_text(port)}: administratively disabled (phys state Disabled)"
    if not _never_linked(port):
        return None
    active_siblings = [other.name for other in _siblings(ctx.inventory, hca, port) if other.is_active]
    summary = f"{_state_text(port)}: never linked since counters were cleared: not cabled by design"
    if active_siblings:
        evidence.update({name: port.counters.get(name) for name in NEVER_LINKED_COUNTERS},
                        active_sibling_ports=active_siblings)
        return f"{summary} (sibling port {', '.join(active_siblings)} is ACTIVE)"
    # With no port of the node up at all the node has no fabric link: that is not by design.
    if must_be_up or not any(other.is_active for other in ctx.inventory.ports):
        return None
    evidence.update({name: port.counters.get(name) for name in NEVER_LINKED_COUNTERS})
    return summary


# What a physical state says about a port that is not ACTIVE, and what to do ({device}: the HCA).
_PHYS_STATE_CAUSES = {
    PhysState.POLLING: ("no link partner (cable unplugged or faulty, or the switch port is down)",
                        "check the cable and transceiver are seated, the switch port is enabled "
                        "(`mlxlink -d {device}`), and swap the cable if the port stays Polling"),
    PhysState.TRAINING: ("link training does not complete",
                         "usually a cable/transceiver or speed mismatch with the switch port: check "
                         "`mlxlink -d {device}` and the switch port's speed settings"),
    PhysState.LINK_ERROR_RECOVERY: ("the link is in error recovery",
                                    "check the cable and transceiver (`mlxlink -d {device} -m`); see error-counters"),
    PhysState.SLEEP: ("the port is asleep (no link)", "check the cable and the switch port (`mlxlink -d {device}`)"),
}


EFA_REMEDY = ("check `dmesg | grep -i efa` and `fi_info -p efa`; reload the driver (`modprobe -r efa && modprobe "
              "efa`) or stop and start the instance (a reboot keeps the same host); if it stays, report the "
              "instance to AWS")
EFA_ACTIVE_NOTE = "EFA reports ACTIVE whenever its driver runs: its health shows in error-counters and traffic"


def _not_active_problem(hca: Hca, port: Port) -> tuple[str, str]:
    """Summary and remedy for a port that is not ACTIVE, named by its states."""
    ethernet = port.link_layer is LinkLayer.ETHERNET
    states = _state_text(port)
    device = port.hca
    if is_efa(hca):
        # amzn-drivers efa_query_port sets IB_PORT_ACTIVE unconditionally: anything else is a
        # device the driver no longer runs normally.
        return (f"{states}: the EFA device is not ACTIVE, which its driver reports for every working device",
                EFA_REMEDY)
    if port.state is PortState.INIT and port.phys_state is PhysState.LINK_UP:
        return (f"{states}: the link is up but no subnet manager configured the port", sm_remedy(port))
    if port.state is PortState.ARMED:
        return (f"{states}: the subnet manager configured the port but has not activated it",
                f"an SM sweep did not finish: check the SM log and `sminfo -C {port.hca} -P {port.number}`; if it "
                "persists, bounce the port")
    if port.phys_state is PhysState.DISABLED:
        if ethernet and port.netdev:
            how = f"`ip link set {port.netdev} up`, or `mlxlink -d {device} -a UP`"
        else:
            how = f"`mlxlink -d {device} -a UP`, or `ibportstate` on the switch side"
        return (f"{states}: the port is administratively disabled",
                f"enable it ({how}); if it is unused by design, give it a port class with role \"unused\" "
                "in the rule pack")
    if port.phys_state in _PHYS_STATE_CAUSES:
        cause, remedy = _PHYS_STATE_CAUSES[port.phys_state]
        return (f"{states}: {cause}", remedy.format(device=device))
    manager = "" if ethernet else f" and the subnet manager (`sminfo -C {device} -P {port.number}`)"
    return (f"{states}: the port is not ACTIVE", f"check the cable, the switch port (`mlxlink -d {device}`){manager}")


def _judge_port(ctx: CheckContext, hca: Hca, port: Port, port_class: PortClass | None) -> Iterator[Finding]:
    evidence = _evidence(ctx.inventory, hca, port, port_class, ctx.pack)
    through_pf = virtual_function_note(ctx.inventory, hca)
    if through_pf is not None:
        yield ctx.skip(port.name, f"{_state_text(port)}; {through_pf}",
                       evidence={**evidence, "physical_function": hca.physical_function})
        return
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
        yield ctx.graded(ctx.rule("degraded_active_severity"), port.name,
                         f"{_state_text(port)}: the port is active but its link is not fully up",
                         evidence=evidence, rule="degraded_active",
                         remedy="watch it: a link stuck here is flapping; check the cable"
                                + ("" if is_efa(hca) else f" (`mlxlink -d {hca.name} -m`)") + " and error-counters")
        return
    if not port.is_active:
        by_design = _down_by_design(ctx, hca, port, port_class, evidence)
        if by_design is not None:
            yield ctx.skip(port.name, by_design, evidence=evidence)
            return
        summary, remedy = _not_active_problem(hca, port)
        yield ctx.graded(ctx.rule("not_active_severity"), port.name, summary, evidence=evidence,
                         remedy=remedy, rule="not_active")
        return

    rate = f", {port.rate.describe()}" if port.rate is not None else ""
    if port.link_layer is not LinkLayer.INFINIBAND:
        # Ethernet (RoCE) and EFA ports have no LID and no subnet manager.
        note = f" ({EFA_ACTIVE_NOTE})" if is_efa(hca) else ""
        yield ctx.passed(port.name, f"{_state_text(port)}{rate}{note}", evidence=evidence)
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
                                  "assign one", evidence=evidence, remedy=sm_remedy(port))
        return
    if port.sm_lid == 0:
        yield ctx.fail(port.name, "ACTIVE but SM LID is 0: no subnet manager is reachable from this port",
                       evidence=evidence, remedy=sm_remedy(port))
        return
    yield ctx.passed(port.name, f"{_state_text(port)}{rate}, LID 0x{port.lid:x}, SM LID 0x{port.sm_lid:x}",
                     evidence=evidence)


def _judge_subnet_managers(ctx: CheckContext, ports: list[tuple[Port, PortClass | None]]) -> Iterator[Finding]:
    """Active IB ports of one scope should see one SM; different SM LIDs mean different subnets."""
    by_class = ctx.rule("sm_scope") == "port-class"
    scopes: dict[str, dict[int, list[str]]] = {}
    for port, port_class in ports:
        hca = ctx.inventory.hca(port.hca)
        if not by_class and hca is not None and hca.switch_management:
            # The NVSwitch bridge (HGX B200/B300) sees the host's own NVLink subnet manager, never
            # the compute fabric's: it is its own subnet by design.
            continue
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
        # One port of each SM LID: `sminfo` through it names the SM it sees.
        compare = " vs ".join(f"`sminfo -C {hca} -P {number}`" for hca, _, number in
                              (names[0].rpartition(":") for _, names in sorted(sm_lids.items())))
        yield ctx.graded(ctx.rule("sm_mismatch_severity"), "node",
                         f"active IB ports{where} see different subnet managers: SM LID {parts}",
                         evidence=evidence, rule="sm_mismatch",
                         remedy=f"a cable in the wrong fabric, or an SM failover in progress: compare {compare}; if "
                                "the node sits on several fabrics by design, set [port-state] "
                                "sm_scope = \"port-class\" and give each fabric its own port class")


def _judge_pkeys(ctx: CheckContext, ports: list[Port]) -> Iterator[Finding]:
    """Compute ports carry one P_Key table; a port missing a partition cannot join jobs that use it."""
    tables = {port.name: tuple(sorted(set(port.pkeys))) for port in ports if port.pkeys}
    if len(tables) < 2:
        return
    counts = Counter(tables.values())
    # Ties: the larger table is taken as the intended one (a missing partition is the usual fault).
    expected = majority(counts, prefer=lambda table: (len(table), table))
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
        yield ctx.graded(ctx.rule("pkey_mismatch_severity"), name,
                         f"P_Key table {', '.join(table)} differs from the other compute ports' "
                         f"{', '.join(expected)} ({detail})",
                         evidence={"pkeys": list(table), "expected_pkeys": list(expected),
                                   "ports_with_expected": counts[expected]},
                         rule="pkey_mismatch",
                         remedy=_pkey_remedy(ctx, name))


def _pkey_remedy(ctx: CheckContext, name: str) -> str:
    port = ctx.inventory.port(name)
    guid = f"port GUID {port.port_guid} of {name}" if port is not None and port.port_guid else (
        f"the port GUID of {name} (`ibstat {name.replace(':', ' ')}` shows it)")
    return f"check the subnet manager's partition configuration (partitions.conf / UFM PKey groups) for {guid}"


def _judge_unbound_efa(ctx: CheckContext) -> Iterator[Finding]:
    """EFA functions on the PCI bus that have no RDMA device: a rail the node lost."""
    inventory = ctx.inventory
    efa = [hca for hca in inventory.hcas if is_efa(hca)]
    functions = len(inventory.pci_efa or {})
    if any(not hca.pci_address for hca in efa) and functions > len(efa):
        # Which function lacks its device cannot be told without the devices' PCI addresses.
        yield ctx.unknown("node", f"{functions} EFA functions on the PCI bus but {len(efa)} EFA devices; which are "
                          "missing is unknown (the devices' PCI functions were not read)",
                          evidence={"efa_functions": functions, "efa_devices": len(efa)})
    for address, model in unbound_efa_functions(inventory).items():
        yield ctx.graded(ctx.rule("not_active_severity"), address,
                         f"EFA device {address} ({model}) is on the PCI bus but has no RDMA device: the efa driver "
                         "is not bound to it or the device failed to initialise",
                         evidence={"pci_address": address, "efa": model}, rule="not_active",
                         remedy=f"`lspci -k -s {address}` shows the driver in use; " + EFA_REMEDY)


@check("port-state", "each RDMA port is ACTIVE/LinkUp, has a LID and a reachable SM, one P_Key table",
       needs=("rdma",), order=10)
def port_state(ctx: CheckContext) -> Iterator[Finding]:
    healthy_ib: list[tuple[Port, PortClass | None]] = []
    for hca, port, port_class in ctx.pack.classified_ports(ctx.inventory):
        findings = list(_judge_port(ctx, hca, port, port_class))
        yield from findings
        if (port.link_layer is LinkLayer.INFINIBAND and port.is_active and port.sm_lid
                and all(finding.status is Status.PASS for finding in findings)):
            healthy_ib.append((port, port_class))
    yield from _judge_subnet_managers(ctx, healthy_ib)
    yield from _judge_unbound_efa(ctx)
    compute = [port for port, port_class in healthy_ib if role_of(port_class) == "compute"]
    yield from _judge_pkeys(ctx, compute)
