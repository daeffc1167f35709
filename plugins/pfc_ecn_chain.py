"""`pfc-ecn`: does NCCL's RoCE traffic land on the priority PFC protects?

PFC on priority 3 protects nothing when RDMA traffic is sent with DSCP 0 and lands on
priority 0: lossless in name only, the most common silent RoCE misconfiguration. The chain:

* the ToS byte NCCL's QPs are sent with (netdoctor.inventory.queries.nccl_traffic_class): MLNX_OFED's
  per-port override where set, else `NCCL_IB_TC` as NCCL reads it, else 0 (rdma_cm's
  `default_roce_tos` reaches only rdma_cm users: shown, never used for NCCL);
* DSCP = ToS >> 2 (the low two bits are ECN);
* with trust dscp, the priority mlnx_qos's dscp2prio map gives that DSCP;
* that priority must have PFC on.
CNPs (DCQCN's congestion notifications, `ecn/roce_np/cnp_dscp`) follow the same map: they must
land on a PFC priority or on one the pack names for them (NVIDIA's CNP priority 6, strict
priority on the switch, not PFC). With trust pcp the priority comes from the VLAN tag
(the `expected_trust` rule judges that mode); nothing of this chain applies.
"""

from __future__ import annotations

from typing import Any

from netdoctor.checks import CheckContext, Finding
from netdoctor.inventory.model import Netdev, QosConfig
from netdoctor.inventory.queries import nccl_traffic_class


def judge_chain(ctx: CheckContext, name: str, netdev: Netdev | None, ports: list[str], qos: QosConfig,
                evidence: dict[str, Any], targets: tuple[str, ...] = ()) -> list[Finding]:
    """Findings where NCCL's traffic or the CNPs land on a lossy priority; notes the chain in `evidence`.
    `targets`: the netdevs a remedy configures (a RoCE LAG bond's slaves; else `name`)."""
    targets = targets or (name,)
    if qos.trust != "dscp":
        return []
    port = ctx.inventory.port(ports[0]) if ports else None
    traffic = nccl_traffic_class(ctx.inventory, port)
    if traffic is None:
        return [ctx.unknown(name, f"the priority NCCL's RoCE traffic lands on is unknown: NCCL's settings were not "
                                  f"read ({ctx.inventory.source('nccl-env').reason()}) and {port.hca if port else name} "
                                  "sets no tc/1/traffic_class", evidence=dict(evidence))]
    dscp = traffic.dscp
    priority = qos.priority_of(dscp)
    pfc = ",".join(map(str, qos.pfc_enabled)) or "no priority"
    chain = f"{traffic.why} → ToS {traffic.tos} → DSCP {dscp}"
    evidence.update(nccl_tos=traffic.tos, nccl_dscp=dscp, nccl_priority=priority,
                    default_roce_tos=port.default_roce_tos if port is not None else None)
    if priority is None:
        return [ctx.unknown(name, f"the priority NCCL's RoCE traffic lands on is unknown: {chain}, but mlnx_qos "
                                  f"printed no dscp2prio map for {name}", evidence=dict(evidence))]
    chain += f" → priority {priority}"
    evidence["traffic_chain"] = chain
    findings = []
    # Judged where PFC is configured: PFC off everywhere, or off on the pack's RDMA priority where
    # the traffic lands, is pfc_missing_severity's finding already.
    if qos.pfc_enabled and priority not in qos.pfc_enabled and priority != ctx.rule("rdma_priority"):
        # NVIDIA's RoCE DSCP 26 (ToS 106) where it lands on a PFC priority, else the first DSCP that does.
        tos_fix = next((dscp_value << 2 | 2 for dscp_value in (26, *range(64))
                        if qos.dscp_to_priority[dscp_value] in qos.pfc_enabled), None)
        every_qp = (f"for every QP of the port: echo {tos_fix} > /sys/class/infiniband/{port.hca}/tc/{port.number}/"
                    "traffic_class" if port is not None
                    else f"for every QP of the port, through its RDMA device's tc/1/traffic_class (the RDMA device of "
                         f"{name} is not known: find it with `ibdev2netdev`)")
        remedy = (f"send NCCL's traffic on a PFC priority: NCCL_IB_TC={tos_fix} (DSCP {tos_fix >> 2} → priority "
                  f"{qos.dscp_to_priority[tos_fix >> 2]}) in /etc/nccl.conf or the job's environment, or {every_qp}"
                  if tos_fix is not None else f"enable PFC on the RDMA priority of {name} first")
        # Unset where netdoctor looks, a job may still set it in its own environment (a prolog
        # sees the prolog's): that warns; a class set on the port or in NCCL's files that lands lossy fails.
        if traffic.configured:
            rule, severity, unless = "lossy_traffic_severity", ctx.severity("lossy_traffic_severity"), ""
        else:
            rule, severity = "unset_traffic_severity", ctx.severity("unset_traffic_severity")
            unless = " (unless each job sets NCCL_IB_TC itself)"
        findings.append(ctx.graded(
            severity, name,
            f"NCCL's RoCE traffic on {name} lands on a lossy priority{unless}: {chain}; PFC is on {pfc}",
            evidence=dict(evidence), rule=rule, remedy=remedy))
    cnp_dscp = netdev.cnp_dscp if netdev is not None else None
    cnp_priority = qos.priority_of(cnp_dscp) if cnp_dscp is not None else None
    if cnp_priority is not None:
        evidence["cnp_chain"] = f"cnp_dscp {cnp_dscp} → priority {cnp_priority}"
        evidence["cnp_802p_prio"] = netdev.cnp_802p_prio if netdev is not None else None
        allowed = set(ctx.rule("cnp_priorities"))
        if cnp_priority not in qos.pfc_enabled and cnp_priority not in allowed:
            findings.append(ctx.graded(
                ctx.severity("cnp_priority_severity"), name,
                f"CNPs of {name} land on priority {cnp_priority} (cnp_dscp {cnp_dscp}), neither PFC-protected ({pfc}) "
                f"nor a CNP priority of the pack ({','.join(map(str, sorted(allowed))) or 'none'}): congestion "
                "notifications dropped in congestion leave DCQCN blind", evidence=dict(evidence),
                rule="cnp_priorities",
                remedy="; ".join(f"echo 48 > /sys/class/net/{target}/ecn/roce_np/cnp_dscp" for target in targets)
                       + " (DSCP 48 → priority 6, NVIDIA's CNP class; match the switch's CNP queue)"))
    return findings
