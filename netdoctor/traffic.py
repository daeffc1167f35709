"""The pipeline's traffic steps (netdoctor.run): the NCCL all-reduce over the node's GPUs
(`nccl-probe`) and the per-NIC loopback (`nic-loopback`), each within its share of the
deadline, each handing its checks a typed result or why there is none (`ProbeNotRun`).
Their processes run through netdoctor.host.runner; a step that hangs is given up on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from netdoctor.checks.registry import Registry
from netdoctor.errors import UsageError
from netdoctor.host.types import NodeSource
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import Gpu, Hca, Inventory, Port
from netdoctor.inventory.queries import gpu_fabric_netdevs, nearest_gpu
from netdoctor.packs.model import RulePack
from netdoctor.probe.early import EarlyAllReduce, start_early_allreduce
from netdoctor.probe.result import ProbeNotRun, ProbeRequest, ProbeResult
from netdoctor.util import DeadlineExceeded, call_with_deadline


def probe_checks(registry: Registry) -> tuple[str, ...]:
    """The checks `netdoctor probe` runs: those judging the all-reduce (need "probe")."""
    return tuple(check.id for check in registry.checks() if "probe" in check.needs)


def not_run(no_probe: bool, wanted: bool, is_snapshot: bool) -> ProbeNotRun | None:
    if not wanted:
        return ProbeNotRun("--no-probe" if no_probe else "no selected check needs it")
    if is_snapshot:
        return ProbeNotRun("a snapshot is judged; the probe runs only on a live node")
    return None


@contextlib.contextmanager
def early_allreduce(node: NodeSource, *, wanted: bool, budget_s: float, gpus: tuple[int, ...] | None,
                    engine: str, at_rest: bool = True,
                    started: EarlyAllReduce | None = None) -> Iterator[EarlyAllReduce | None]:
    """Start the all-reduce now, before discovery, where it can start early
    (`netdoctor.probe.early.start_early_allreduce`); otherwise None, and `run_allreduce` starts it
    after discovery and says why it did not run. Leaving the block stops a probe nobody took up.

    `at_rest`: other checks judge the GPUs, so NVML reads them before the worker opens them
    (what the GPU checks judge, idle clocks, utilisation, link speed at rest, is then the node
    at rest, as without the probe; the probe takes from NVML only the GPUs' links, which traffic
    does not change); without (`netdoctor probe`: only the traffic checks) the worker starts at
    once. `started`: one `netdoctor probe` started as soon as its command line was read."""
    early = started
    if early is None and wanted and not node.is_snapshot:
        early = start_early_allreduce(node.sys, budget_s=budget_s, gpus=gpus, engine=engine,
                                      before=node.nvml if at_rest else None)
    try:
        yield early if wanted else None
    finally:
        if early is not None:
            early.cancel()


def run_allreduce(inventory: Inventory, deadline: float, *, budget_s: float | None, gpus: tuple[int, ...] | None,
                  engine: str, pass_fraction: float, debug: bool,
                  early: EarlyAllReduce | None = None) -> tuple[ProbeResult | ProbeNotRun, dict[str, Any] | None]:
    """(what the checks see, what the report carries): the report's `probe` only when it ran.

    Below `pass_fraction` of the expected bus bandwidth the probe spends what is left of
    its budget naming the slow GPU or link. `early`: the probe already running (its own
    budget and deadline); it is given discovery's facts and waited for.
    """
    if not inventory.gpus:
        if early is not None:
            early.cancel()
        return ProbeNotRun("no NVIDIA GPUs"), None
    left_s = deadline - time.monotonic()
    if left_s < 1.0 and budget_s is None and early is None:
        return ProbeNotRun(f"no time left for the probe ({left_s:.1f} s)", unknown=True), None
    nvml = inventory.source("nvml")
    try:
        from netdoctor.probe import run_probe
        from netdoctor.probe.engine import gpu_links_of
    except ImportError as error:
        missing = ProbeNotRun(f"the NCCL probe is not available: {error}", unknown=True)
        return missing, missing.to_json()
    request = ProbeRequest(budget_s=budget_s or left_s, pass_fraction=pass_fraction, gpus=gpus, engine=engine,
                           gpu_links=gpu_links_of(inventory.gpus) if nvml.usable else ())
    node_gpus = tuple(gpu.index for gpu in inventory.gpus) if nvml.usable else None
    try:
        if early is not None:
            request = dataclasses.replace(request, budget_s=early.request.budget_s)
            result = early.result(request, node_gpus)
        else:
            result = call_with_deadline("nccl-probe", lambda: run_probe(request, node_gpus=node_gpus), deadline + 0.5)
    except DeadlineExceeded:
        hung = ProbeNotRun(f"the probe did not finish within {request.budget_s:.1f} s", unknown=True)
        return hung, hung.to_json()
    except Exception as error:
        if debug:
            raise
        failed = ProbeNotRun(f"probe failed: {type(error).__name__}: {error}", unknown=True)
        return failed, failed.to_json()
    if result.reason_code == "bad-gpus" and gpus is not None:
        raise UsageError(f"--gpus {','.join(map(str, gpus))!r}: {result.reason}")
    return result, result.to_json()


def _compute_ports(inventory: Inventory, pack: RulePack) -> Iterator[tuple[Hca, Port, Gpu | None, str]]:
    """Active compute RDMA ports (no virtual functions), each with the GPU nearest it and why."""
    for hca, port, port_class in pack.classified_ports(inventory):
        if (port_class is None or port_class.role == "compute") and port.is_active and not hca.physical_function:
            yield hca, port, *nearest_gpu(inventory, hca)


def loopback_rails(inventory: Inventory, pack: RulePack) -> tuple[Any, ...]:
    """Active compute RDMA ports with a GPU nearest them: the loopback's rails."""
    from netdoctor.probe.loopback import Rail
    # EFA is reached through aws-ofi-nccl, which takes no NCCL_IB_HCA: no rail can be run alone.
    return tuple(Rail(port.name, hca.name, port.number, gpu.index, basis, port.rate.gbps if port.rate else None)
                 for hca, port, gpu, basis in _compute_ports(inventory, pack) if gpu is not None and not is_efa(hca))


def fabric_summary(inventory: Inventory, pack: RulePack) -> dict[str, Any]:
    """The report's `fabric`: GPUs and active compute rails with their rates and nearest GPU
    (fleet probe's expectation; the fleet's rail wiring names a rail by its GPU where HCA
    names are not laid out alike on every node). `rails_guessed: true` where some rail's GPU
    was a guess (`_guessed`), so the fleet does not count a node that guessed as miswired;
    `nvlink_domain` where the node's GPUs are in a multi-node NVLink domain (`nvlink_domain`)."""
    if not inventory.gpus and not inventory.hcas:
        return {}
    rails: list[dict[str, Any]] = []
    guessed = False   # some rail's GPU is a guess: the report says so, the fleet leaves the node unjudged
    for hca, port, gpu, basis in _compute_ports(inventory, pack):
        rails.append({"port": port.name, "rate_gbps": port.rate.gbps if port.rate else None,
                      "gpu": gpu.index if gpu is not None else None})
        guessed = guessed or (gpu is not None and _guessed(inventory, hca, basis))
    # GPU NICs without RDMA (GCP GPUDirect-TCPX/TCPXO): each up gVNIC next to a GPU is a rail.
    for name, gpus in (gpu_fabric_netdevs(inventory) or {}).items():
        netdev = inventory.netdev(name)
        if netdev is not None and netdev.operstate == "up":
            gpu_index = next((gpu.index for gpu in inventory.gpus if gpu.label == gpus[0]), None)
            rails.append({"port": name, "rate_gbps": netdev.speed_mbps / 1000 if netdev.speed_mbps else None,
                          "gpu": gpu_index})
    # The platform and its GPUs on the PCI bus (the fleet's `gpus` drift: a GPU hidden from this
    # process by a job's cgroup still counts; NVML's count is `gpus`, what the probe can use).
    platform: dict[str, Any] = {}
    if inventory.dmi is not None and inventory.dmi.product_name:
        platform["product"] = inventory.dmi.product_name
    if inventory.pci_gpus is not None:
        platform["gpus_on_bus"] = len(inventory.pci_gpus)
    domain = nvlink_domain(inventory.gpus)
    if domain is not None:
        platform["nvlink_domain"] = domain
    return {"gpus": len(inventory.gpus), "rails": rails, **platform, **({"rails_guessed": True} if guessed else {})}


def nvlink_domain(gpus: Iterable[Gpu]) -> dict[str, Any] | None:
    """The report's `fabric.nvlink_domain` (the fleet's `nvlink_domains`): the cluster UUID and
    clique most of the node's GPUs in a multi-node NVLink domain give, and where the tray sits
    (NVML platform info: chassis serial, slot, tray index, most GPUs' values); None where no
    GPU is in a domain nor names a chassis (HGX/DGX with NVSwitches on the board, older GPUs).
    `mixed: true` where the node's GPUs in a domain disagree on the cluster or clique."""
    gpus = tuple(gpus)
    domains: Counter[tuple[str, int | None]] = Counter()
    chassis: Counter[str] = Counter()
    for gpu in gpus:
        if gpu.fabric is not None and gpu.fabric.in_nvlink_domain and gpu.fabric.cluster_uuid is not None:
            domains[(gpu.fabric.cluster_uuid, gpu.fabric.clique_id)] += 1
        serial = gpu.platform.chassis_serial_number if gpu.platform is not None else None
        if serial and serial.strip():
            chassis[serial.strip()] += 1
    if not domains and not chassis:
        return None
    cluster_uuid, clique_id = domains.most_common(1)[0][0] if domains else (None, None)
    serial = chassis.most_common(1)[0][0] if chassis else None
    places = [gpu.platform for gpu in gpus if gpu.platform is not None and serial is not None
              and (gpu.platform.chassis_serial_number or "").strip() == serial]
    slots = Counter(place.slot_number for place in places if place.slot_number is not None)
    trays = Counter(place.tray_index for place in places if place.tray_index is not None)
    return {"cluster_uuid": cluster_uuid, "clique_id": clique_id, "chassis_serial_number": serial,
            "slot_number": slots.most_common(1)[0][0] if slots else None,
            "tray_index": trays.most_common(1)[0][0] if trays else None,
            **({"mixed": True} if len(domains) > 1 else {})}


def _guessed(inventory: Inventory, hca: Hca, basis: str) -> bool:
    """The rail's GPU is a guess: neither nvidia-smi topo -m (absent, timed out, or silent about
    this NIC) nor the PCIe tree placed it, and the NIC's NUMA node holds several GPUs, of which
    `nearest_gpu` took the first. The fleet does not judge such a node's rail wiring."""
    if not basis.startswith("NUMA node"):
        return False
    return sum(1 for gpu in inventory.gpus if not gpu.lost and gpu.numa_node == hca.numa_node) > 1


def run_nic_loopback(inventory: Inventory, pack: RulePack, deadline: float, *, env: Mapping[str, str] | None,
                     tool_path: str | None, debug: bool) -> Any:
    """The loopback's result (netdoctor.probe.loopback.LoopbackResult) or why there is none."""
    if not inventory.gpus:
        return ProbeNotRun("no NVIDIA GPUs")
    if not inventory.hcas:
        return ProbeNotRun("no RDMA NICs")
    if all(is_efa(hca) for hca in inventory.hcas):
        return ProbeNotRun("EFA devices are reached through NCCL's aws-ofi-nccl plugin, which cannot be pointed at one "
                           "device: `netdoctor fleet probe` measures them between nodes")
    left_s = deadline - time.monotonic()
    try:
        from netdoctor.probe.loopback import LoopbackRequest, run_loopback
    except ImportError as error:
        return ProbeNotRun(f"the loopback is not available: {error}", unknown=True)
    rails = loopback_rails(inventory, pack)
    request = LoopbackRequest(rails, left_s, env=env, tool_path=tool_path)
    try:
        return call_with_deadline("nic-loopback", lambda: run_loopback(request), deadline + 1.0)
    except DeadlineExceeded:
        return ProbeNotRun(f"the loopback did not finish within {left_s:.1f} s", unknown=True)
    except Exception as error:
        if debug:
            raise
        return ProbeNotRun(f"loopback failed: {type(error).__name__}: {error}", unknown=True)
