"""`pfc-ecn`: lossless configuration of RoCE netdevs (PFC, ECN, trust mode).

RoCE v2 assumes a lossless class: the RDMA traffic class must have PFC on (a dropped packet
costs a go-back-N retransmission and collapses NCCL bandwidth), and ECN must be on for it so
DCQCN slows senders before PFC pauses spread congestion through the fabric (pause storms,
head-of-line blocking). PFC on priorities that carry ordinary TCP traffic spreads pauses to
it too. The trust mode decides how packets are mapped to priorities: with `pcp` trust on an
untagged (L3) network every packet lands on priority 0 and the PFC setting never applies.
Pure InfiniBand nodes have none of this (credit-based flow control): the check skips them.

Only RoCE compute rails are judged: with a pack that classes ports, Ethernet ports of a
`storage`, `management` or `unused` class are skipped (a frontend or storage NIC carries
TCP, not the GPU fabric's lossless class). Without port classes (the default pack) every
RDMA-capable Ethernet port is assumed to be RoCE. SR-IOV VFs are configured through their PF.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.errors import RulesError
from netdoctor.inventory.model import LinkLayer, Netdev, Port
from netdoctor.inventory.queries import unavailable_reason, virtual_function_note
from netdoctor_plugins.pfc_ecn_chain import judge_chain

CHECK_ID = "pfc-ecn"


def _rdma_priority(ctx: CheckContext) -> int:
    priority = ctx.rule("rdma_priority")
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 7:
        raise RulesError(f"[{CHECK_ID}] rdma_priority = {priority!r}: expected an integer 0..7")
    return priority


def _netdev_name(ctx: CheckContext, port: Port) -> str | None:
    return port.netdev or next((netdev.name for netdev in ctx.inventory.netdevs
                                if netdev.rdma_port == port.name), None)


def _roce_netdevs(ctx: CheckContext, roce_ports: list[Port]) -> tuple[dict[str, list[str]], list[Port]]:
    """netdev -> its RDMA ports (from Port.netdev: ibdev2netdev / sysfs, or Netdev.rdma_port), and the ports with no netdev."""
    by_netdev: dict[str, list[str]] = {}
    unmapped: list[Port] = []
    for port in roce_ports:
        name = _netdev_name(ctx, port)
        if name:
            by_netdev.setdefault(name, []).append(port.name)
        else:
            unmapped.append(port)
    return by_netdev, unmapped


def _judge_netdev(ctx: CheckContext, name: str, netdev: Netdev | None, ports: list[str]) -> Iterator[Finding]:
    priority = _rdma_priority(ctx)
    qos = netdev.qos if netdev else None
    ecn_np = netdev.ecn_np if netdev else {}
    ecn_rp = netdev.ecn_rp if netdev else {}
    evidence: dict[str, Any] = {
        "rdma_ports": ports, "rdma_priority": priority,
        "trust": qos.trust if qos else None,
        "pfc_enabled": list(qos.pfc_enabled) if qos else None,
        "dcbx_mode": qos.dcbx_mode if qos else None,
        "ecn_np": ecn_np.get(priority), "ecn_rp": ecn_rp.get(priority),
    }
    problems: list[Finding] = []
    # A RoCE LAG bond is read and configured on its slaves: one command per slave.
    targets = netdev.bond_slaves if netdev is not None and netdev.bond_slaves else (name,)
    bond = f"{name}'s slaves" if targets != (name,) else ""
    slaves = f" ({bond})" if bond else ""
    pfc = ",".join("1" if p == priority else "0" for p in range(8))
    if qos is None:
        # A RoCE LAG bond's settings come from its slaves (mlnx_qos runs on them).
        reason = unavailable_reason(ctx.inventory, *(f"mlnx_qos-{member}" for member in targets))
        problems.append(ctx.unknown(name, f"PFC and trust mode of {name} unknown: {reason}", evidence=evidence))
    else:
        if priority not in qos.pfc_enabled:
            enabled = ",".join(map(str, qos.pfc_enabled)) or "none"
            problems.append(ctx.graded(
                ctx.severity("pfc_missing_severity"), name,
                f"PFC is off on RDMA priority {priority} of {name} (enabled on: {enabled}); RoCE runs lossy",
                evidence=evidence, rule="rdma_priority",
                remedy="; ".join(f"mlnx_qos -i {target} --pfc {pfc}" for target in targets)
                       + f" ({bond + '; ' if bond else ''}and persist it in the NIC/DCB configuration; "
                         "match the switch's lossless priority)"))
        others = sorted(set(qos.pfc_enabled) - {priority})
        if others and not ctx.rule("allow_pfc_on_other_priorities"):
            problems.append(ctx.graded(
                ctx.severity("other_pfc_severity"), name,
                f"PFC is also on for priorities {','.join(map(str, others))} of {name}: pauses spread to "
                f"non-RDMA traffic", evidence=evidence, rule="allow_pfc_on_other_priorities",
                remedy=f"enable PFC only on priority {priority}{slaves}: "
                       + "; ".join(f"mlnx_qos -i {target} --pfc {pfc}" for target in targets)))
        problems += judge_chain(ctx, name, netdev, ports, qos, evidence, targets)
        expected_trust = ctx.rule("expected_trust")
        if expected_trust:
            if qos.trust is None:
                problems.append(ctx.unknown(name, f"trust mode of {name} not reported by mlnx_qos",
                                            evidence=evidence))
            elif qos.trust != expected_trust:
                problems.append(ctx.graded(
                    ctx.severity("trust_mismatch_severity"), name,
                    f"{name} trusts {qos.trust}, expected {expected_trust}: RoCE packets may not land on "
                    f"priority {priority}", evidence=evidence, rule="expected_trust",
                    remedy="; ".join(f"mlnx_qos -i {target} --trust {expected_trust}" for target in targets)
                    + slaves))
    if ctx.rule("require_ecn"):
        missing = [point for point, table in (("np", ecn_np), ("rp", ecn_rp)) if table.get(priority) is None]
        disabled = [point for point, table in (("np", ecn_np), ("rp", ecn_rp)) if table.get(priority) is False]
        if disabled:
            problems.append(ctx.graded(
                ctx.severity("ecn_missing_severity"), name,
                f"RoCE ECN ({'/'.join(disabled)}) is off on priority {priority} of {name}: no DCQCN "
                f"congestion control, PFC alone absorbs congestion", evidence=evidence, rule="require_ecn",
                remedy="; ".join(f"echo 1 > /sys/class/net/{target}/ecn/roce_{point}/enable/{priority}"
                                 for target in targets for point in disabled) + slaves))
        if missing:
            sysfs = ctx.inventory.source("sysfs")
            why = ("absent: the driver exposes no RoCE ECN controls" if sysfs.usable
                   else f"not read: {sysfs.reason()}")
            problems.append(ctx.unknown(
                name, f"RoCE ECN state ({'/'.join(missing)}) for priority {priority} of {name} unknown: "
                f"/sys/class/net/{name}/ecn/roce_{missing[0]}/enable/{priority} {why}", evidence=evidence))
    if problems:
        yield from problems
        return
    assert qos is not None  # a missing mlnx_qos view is always a problem above
    parts = [f"PFC on priority {priority}" + ("" if len(qos.pfc_enabled) == 1 else " (and others, allowed)")]
    if ctx.rule("require_ecn"):
        parts.append("ECN np/rp on")
    if qos.trust:
        parts.append(f"trust {qos.trust}")
    if "traffic_chain" in evidence:
        parts.append(f"NCCL traffic: {evidence['traffic_chain']}")
    yield ctx.passed(name, ", ".join(parts), evidence=evidence)


@check(CHECK_ID, "on RoCE ports: PFC on the RDMA priority only, ECN enabled for it, expected trust mode, NCCL's "
                 "traffic and CNPs landing on protected priorities",
       needs=("roce",), order=60)
def pfc_ecn(ctx: CheckContext) -> Iterator[Finding]:
    ethernet = [(hca, port, port_class) for hca, port, port_class in ctx.pack.classified_ports(ctx.inventory)
                if port.link_layer is LinkLayer.ETHERNET]
    if not ethernet:
        yield ctx.skip("node", "no RoCE ports (InfiniBand fabrics use credit-based flow control)")
        return
    roce_ports: list[Port] = []
    for hca, port, port_class in ethernet:
        subject = _netdev_name(ctx, port) or port.name
        through_pf = virtual_function_note(ctx.inventory, hca)
        if through_pf is not None:
            yield ctx.skip(subject, f"{port.name}: {through_pf}",
                           evidence={"rdma_ports": [port.name], "physical_function": hca.physical_function})
        elif port_class is not None and port_class.role != "compute":
            yield ctx.skip(subject, f"{port.name}: port class '{port_class.name}' is not a RoCE compute rail "
                                    f"(role {port_class.role}); PFC/ECN not judged",
                           evidence={"rdma_ports": [port.name], "port_class": port_class.name,
                                     "role": port_class.role})
        else:
            roce_ports.append(port)
    if not roce_ports:
        return
    by_netdev, unmapped = _roce_netdevs(ctx, roce_ports)
    for port in unmapped:
        yield ctx.unknown(port.name, f"no netdev known for RoCE port {port.name}: "
                          f"{ctx.inventory.source('ibdev2netdev').reason()}")
    for name in sorted(by_netdev):
        yield from _judge_netdev(ctx, name, ctx.inventory.netdev(name), by_netdev[name])
