"""`nvswitch-fabric`'s NVLink-domain part (CONTRACT 8): NVL72 trays, HGX B200/B300 boards, IMEX.

Which GPUs have their NVSwitches outside the node, and which on a board off the PCI bus:

* an **NVL72 tray GPU** (GB200/GB300 compute tray): NVML's platform info places it in a rack
  (a chassis serial number) with `peer_type` switch_connected, or, where platform info was not
  read (bindings without it), its name is `NVIDIA GB200...`/`NVIDIA GB300...`. A GPU whose
  platform info says direct_connected (NVLink without switches, e.g. GB200 NVL4) is none. The
  tray's switches are in the rack's NVLink switch trays; the GPU must be registered with that
  fabric and carry the NVLink domain's clique id and cluster UUID (zero: in no domain).
* an **NVLink 5 baseboard GPU** (HGX/DGX B200, B300): not a tray, reports a fabric state, and
  is NVLink 5 or later (nvmlNvlinkVersion_t 7+) or named `NVIDIA B200...`/`NVIDIA B300...`. Its
  NVSwitches sit on the baseboard and are reached through the board's ConnectX-7 bridge, not the
  PCI bus, so `inventory.nvswitches` is empty; `nvidia-fabricmanager` must run (its start script
  also starts the NVLink subnet manager, nvlsm, on these boards: no NVIDIA-shipped unit of its
  own). A zero clique/cluster UUID is normal there (a single-node domain).

IMEX is judged where a GPU is in a multi-node NVLink domain (cluster UUID set): the
`nvidia-imex` unit, and `nvidia-imex-ctl -N` (Domain State UP, every node READY, this node's
connections all `C`). Where the daemon answers `-N` for this node the unit need not be the one
running it (Kubernetes runs IMEX per ComputeDomain in a pod).
"""

from __future__ import annotations

from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding
from netdoctor.inventory.from_fabric_tools import this_imex_node
from netdoctor.inventory.model import Gpu, GpuFabric
from netdoctor.inventory.platform import TRAY_OF_GPU
from netdoctor.parsers.nvidia_imex_ctl import ImexDomain, ImexNode
from netdoctor.report.model import Status

TRAY_GPU_NAMES = tuple(TRAY_OF_GPU)       # name prefixes of NVL72 tray GPUs
BOARD_GPU_NAMES = ("NVIDIA B200", "NVIDIA B300")
NVLINK_VERSION_5 = 7            # nvml.h NVML_NVLINK_VERSION_5_0
IMEX = "nvidia-imex"
IMEX_DOMAIN = "IMEX domain"
IMEX_SOURCE = "nvidia-imex-ctl-N"
REMEDY_SERVICE = ("`systemctl restart {unit}` and read why it stopped: `journalctl -u {unit} -b`; its version must "
                  "match the NVIDIA driver's exactly ({versions})")
# How each unit's version is compared with the driver's (`nvidia-smi` prints the driver's).
SERVICE_VERSIONS = {"nvidia-fabricmanager": "`nv-fabricmanager --version` vs `nvidia-smi`"}
REMEDY_TRAY = ("check `nvidia-smi -q -i {pci} | grep -A14 Fabric` on this tray; a tray in no NVLink domain was not "
               "placed in the rack's NVLink partition: check the switch trays' fabric manager (NMX-C: `nv show sdn "
               "partition`) and this tray's NVLink cables, then reset the GPU (`nvidia-smi -r -i {pci}`) or reboot "
               "the tray")
REMEDY_IMEX = ("run `nvidia-imex-ctl -N` on every node of the domain and read /var/log/nvidia-imex.log; "
               "/etc/nvidia-imex/nodes_config.cfg must be the same on all of them (a mismatch shows as `!M!`); after "
               "a change restart nvidia-imex on every node (IMEX keeps blocking mismatched nodes until then)")
RECOVER_IMEX = "recover_imex_domain"
MAX_NAMED = 12                  # IMEX nodes / connections named in one finding (a domain may hold 144+ nodes)


def nvl72_tray(gpu: Gpu) -> bool:
    """A GB200/GB300 NVL72 compute tray's GPU: its NVSwitches are in the rack, not in the node."""
    platform = gpu.platform
    if (gpu.name or "").startswith(BOARD_GPU_NAMES):
        return False            # B200/B300 come on 8-GPU baseboards only, whatever their platform info says
    if platform is not None and platform.peer_type == "direct_connected":
        return False
    if platform is not None and platform.chassis_serial_number and platform.peer_type == "switch_connected":
        return True
    return (gpu.name or "").startswith(TRAY_GPU_NAMES)


def nvlink5_board(gpu: Gpu) -> bool:
    """An HGX/DGX B200/B300 GPU: NVSwitches on its baseboard, managed off the PCI bus. Known by name
    without any fabric fact too (NVML down: the PCI bus names it), so that it is judged, not skipped."""
    if (gpu.name or "").startswith(BOARD_GPU_NAMES):
        return True
    if nvl72_tray(gpu) or gpu.fabric is None or gpu.fabric.state in (None, "not_supported"):
        return False
    if gpu.platform is not None and gpu.platform.peer_type == "direct_connected":
        return False
    version = gpu.nvlink_version
    return (version is not None and version >= NVLINK_VERSION_5) or (gpu.name or "").startswith(BOARD_GPU_NAMES)


def subject_of(gpu: Gpu) -> str:
    return f"{gpu.label} {gpu.pci_address}" if gpu.pci_address else gpu.label


def fabric_evidence(gpu: Gpu, fabric: GpuFabric) -> dict[str, object]:
    evidence: dict[str, object] = {"state": fabric.state, "status": fabric.status, "clique_id": fabric.clique_id,
                                   "cluster_uuid": fabric.cluster_uuid}
    if fabric.health_summary is not None or fabric.bandwidth is not None:
        evidence.update(health_summary=fabric.health_summary, bandwidth=fabric.bandwidth)
    if gpu.platform is not None:
        evidence.update(chassis_serial_number=gpu.platform.chassis_serial_number, slot_number=gpu.platform.slot_number,
                        tray_index=gpu.platform.tray_index, module_id=gpu.platform.module_id)
    if gpu.recovery_action not in (None, "none"):
        evidence["recovery_action"] = gpu.recovery_action
    return evidence


def health_problems(ctx: CheckContext, fabric: GpuFabric) -> list[tuple[Status, str, str]]:
    """(severity, rule, words) for the fabric health NVML reports (fabric info v3; absent before)."""
    problems = []
    if fabric.health_summary == "unhealthy":
        problems.append((ctx.severity("health_unhealthy_severity"), "health_unhealthy_severity", "fabric health unhealthy"))
    elif fabric.health_summary == "limited_capacity":
        problems.append((ctx.severity("health_limited_severity"), "health_limited_severity",
                         "fabric health limited capacity"))
    if fabric.bandwidth == "degraded":
        problems.append((ctx.severity("bandwidth_degraded_severity"), "bandwidth_degraded_severity",
                         "NVLink bandwidth degraded"))
    return problems


def worst(problems: list[tuple[Status, str, str]]) -> tuple[Status, str]:
    order = (Status.FAIL, Status.UNKNOWN, Status.WARN, Status.PASS)
    status, rule, _ = min(problems, key=lambda problem: order.index(problem[0]))
    return status, rule


def health_words(fabric: GpuFabric) -> str:
    if fabric.health_summary in (None, "not_supported"):
        return "fabric health not reported"
    return f"fabric health {fabric.health_summary.replace('_', ' ')}" + (
        f", bandwidth {fabric.bandwidth}" if fabric.bandwidth not in (None, "not_supported") else "")


def judge_tray_gpu(ctx: CheckContext, gpu: Gpu, fabric: GpuFabric, fabric_failed: Finding | None) -> Finding:
    """A tray GPU: registered (`fabric_failed` is the finding when it is not), in a domain, healthy."""
    if fabric_failed is not None:
        return fabric_failed
    subject, evidence = subject_of(gpu), fabric_evidence(gpu, fabric)
    problems = health_problems(ctx, fabric)
    if not fabric.clique_id or not fabric.in_nvlink_domain:
        problems.insert(0, (ctx.severity("no_domain_severity"), "no_domain_severity",
                            f"in no NVLink domain (clique {fabric.clique_id}, cluster UUID {fabric.cluster_uuid}): "
                            "its NVLinks reach no other tray"))
    remedy = REMEDY_TRAY.format(pci=gpu.pci_address or gpu.index) + (
        f"; the driver asks for `{RECOVER_IMEX}`: {REMEDY_IMEX}" if gpu.recovery_action == RECOVER_IMEX else "")
    if problems:
        status, rule = worst(problems)
        return ctx.finding(status, subject, "NVL72 tray GPU " + "; ".join(words for _, _, words in problems),
                           evidence=evidence, remedy=remedy, rule=rule)
    return ctx.passed(subject, f"in NVLink domain {fabric.cluster_uuid}, clique {fabric.clique_id}; "
                      f"{health_words(fabric)}", evidence=evidence)


def judge_service(ctx: CheckContext, unit: str, why_needed: str) -> Iterator[Finding]:
    service = ctx.inventory.services.get(unit)
    versions = SERVICE_VERSIONS.get(unit, f"the {unit} package's version vs the driver's in `nvidia-smi`")
    remedy = REMEDY_SERVICE.format(unit=unit, versions=versions)
    if service is None:
        yield ctx.unknown(unit, f"{unit} is needed ({why_needed}) but its state is not known: "
                          f"{ctx.inventory.source(f'systemctl-show-{unit}').reason()}")
        return
    evidence = {"active_state": service.active_state, "sub_state": service.sub_state, "result": service.result,
                "restarts": service.restarts}
    if not running(ctx, unit):
        state = "/".join(part for part in (service.active_state, service.sub_state) if part)
        result = f", result {service.result}" if service.result and service.result != "success" else ""
        yield ctx.finding(ctx.severity("service_failed_severity"), unit,
                          f"{unit} is {state or 'not running'}{result} ({why_needed}): without it the NVLink "
                          "fabric is not configured", evidence=evidence, remedy=remedy, rule="service_failed_severity")
        return
    if service.restarts is not None and service.restarts > int(ctx.rule("max_restarts")):
        yield ctx.warn(unit, f"{unit} is running but restarted {service.restarts} times since it was started",
                       evidence=evidence, remedy=remedy, rule="max_restarts")
        return
    yield ctx.passed(unit, f"{unit} is running", evidence=evidence)


def running(ctx: CheckContext, unit: str) -> bool:
    service = ctx.inventory.services.get(unit)
    return service is not None and service.active_state == "active" and service.sub_state in (None, "running", "exited")


def judge_imex(ctx: CheckContext, in_domain: list[Gpu]) -> Iterator[Finding]:
    """The IMEX unit and the domain `nvidia-imex-ctl -N` reports, for a node in an NVLink domain."""
    why = "the GPUs belong to a multi-node NVLink domain (cluster UUID set)"
    domain = ctx.inventory.imex
    me = this_imex_node(ctx.inventory)
    # `nvidia-imex-ctl -N` asks the local daemon: any answer means one runs on this node. An
    # installed, enabled unit is meant to run; otherwise IMEX may be started per job (a prolog) or per
    # ComputeDomain (NVIDIA's DRA driver runs it in a pod): an idle tray then runs none, by design.
    service = ctx.inventory.services.get(IMEX)
    enabled = service is not None and (service.unit_file_state or "").startswith("enabled")
    if service is not None and not running(ctx, IMEX) and domain is None and not enabled and not ctx.rule("imex_required"):
        state = f"unit file state {service.unit_file_state}" if service.unit_file_state else (
            "the unit is not installed, or its file state was not read")
        yield ctx.skip(IMEX_DOMAIN, f"no IMEX daemon runs here and the {IMEX} unit is not enabled ({state}): IMEX "
                       "started per job or per ComputeDomain; [nvswitch-fabric] imex_required = true judges it anyway")
        return
    if domain is not None and not running(ctx, IMEX):
        where = (f"outside the {IMEX} unit (a ComputeDomain pod, or a job's own daemon)"
                 if IMEX in ctx.inventory.services else f"(the {IMEX} unit's state was not read)")
        yield ctx.passed(IMEX, f"an IMEX daemon answers `nvidia-imex-ctl -N` here, {where}")
    else:
        yield from judge_service(ctx, IMEX, why)
    recovering = [gpu.label for gpu in in_domain if gpu.recovery_action == RECOVER_IMEX]
    remedy = REMEDY_IMEX + (f"; the driver asks for `{RECOVER_IMEX}` on {', '.join(recovering)}" if recovering else "")
    if domain is None:
        yield ctx.unknown(IMEX_DOMAIN, f"the IMEX domain's state is not known: {ctx.inventory.source(IMEX_SOURCE).reason()}"
                          + (f" (the driver asks for `{RECOVER_IMEX}` on {', '.join(recovering)})" if recovering else ""),
                          remedy=remedy if recovering else None)
        return
    yield from judge_domain(ctx, domain, me, remedy)


def judge_domain(ctx: CheckContext, domain: ImexDomain, me: ImexNode | None, remedy: str) -> Iterator[Finding]:
    ready = sum(node.ready for node in domain.nodes)
    evidence = {"domain_state": domain.state, "nodes": len(domain.nodes), "ready": ready,
                "this_node": me.index if me is not None else None}
    if domain.state == "UP":
        yield ctx.passed(IMEX_DOMAIN, f"Domain State UP, {ready} of {len(domain.nodes)} nodes READY", evidence=evidence)
    elif domain.state == "DEGRADED":
        yield ctx.finding(ctx.severity("imex_degraded_severity"), IMEX_DOMAIN,
                          f"Domain State DEGRADED: {ready} of {len(domain.nodes)} nodes READY",
                          evidence=evidence, remedy=remedy, rule="imex_degraded_severity")
    elif domain.state is None:
        yield ctx.unknown(IMEX_DOMAIN, "nvidia-imex-ctl -N printed no `Domain State`", evidence=evidence)
    else:
        yield ctx.finding(ctx.severity("imex_down_severity"), IMEX_DOMAIN,
                          f"Domain State {domain.state}: multi-node NVLink memory sharing (MNNVL, NCCL across trays) "
                          "does not work", evidence=evidence, remedy=remedy, rule="imex_down_severity")
    if me is not None and not me.ready:
        yield ctx.finding(ctx.severity("imex_down_severity"), f"IMEX node #{me.index} {me.address}",
                          f"this node's IMEX daemon is {me.status}, not READY", remedy=remedy, rule="imex_down_severity")
    peers = [f"#{node.index} {node.address} {node.status}" for node in domain.nodes if node is not me and not node.ready]
    if peers:
        yield ctx.finding(ctx.severity("imex_peer_severity"), "IMEX peers",
                          f"{len(peers)} peer{'s' if len(peers) != 1 else ''} not READY ({_listed(peers)}): this node "
                          "cannot share GPU memory with them", evidence={"not_ready": peers[:MAX_NAMED]},
                          remedy=remedy, rule="imex_peer_severity")
    unconnected = domain.not_connected(me.index if me is not None else None)
    if unconnected:
        cells = [f"{source}->{target} {cell}" for (source, target), cell in unconnected.items()]
        whose = "this node's" if me is not None else "the domain's (this node not found among its addresses)"
        yield ctx.finding(ctx.severity("imex_peer_severity"), "IMEX connections",
                          f"{whose} IMEX connections not `C` (connected): {_listed(cells)}",
                          evidence={"cells": cells[:MAX_NAMED]}, remedy=remedy, rule="imex_peer_severity")


def _listed(items: list[str]) -> str:
    return ", ".join(items[:MAX_NAMED]) + (f", ... ({len(items) - MAX_NAMED} more)" if len(items) > MAX_NAMED else "")
