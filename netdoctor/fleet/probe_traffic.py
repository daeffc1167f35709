"""The traffic of one node's part of a `fleet probe` group: its GPUs' ranks in the group's
NCCL communicator (netdoctor's worker, ranks across nodes), or, in a rails round, one
two-rank communicator per rail (NCCL_IB_HCA that one port) with the partner's same rail.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from netdoctor.errors import ParseError
from netdoctor.fleet.probe_node import PAIR_BYTES, PAIR_ITERATIONS, PAIR_WARMUP
from netdoctor.parsers.nccl import NcclLogFacts, parse_nccl_log
from netdoctor.probe import engine

DISCOVERY_S = 3.0


def _inventory(deadline: float) -> Any:
    from netdoctor.host.live import LiveSource
    from netdoctor.inventory.build import build_inventory
    from netdoctor.host.trust import live_sys_root
    source = LiveSource(sys_root=live_sys_root(), tool_timeout_s=DISCOVERY_S)
    return build_inventory(source, deadline=deadline, needs=frozenset({"gpus", "rdma", "topology"}))


def _worker(gpus: list[int], nranks: int, rank_base: int, env: dict[str, str], budget_s: float,
            directory: str, tag: str, group: list[str]) -> engine.WorkerRun:
    config = {"group": group, "gpus": gpus, "sizes": [PAIR_BYTES], "iterations": PAIR_ITERATIONS, "warmup": PAIR_WARMUP,
              "nranks": nranks, "rank_base": rank_base, "budget_s": max(budget_s - 0.3, 0.5),
              "localise_below_gbps": None, "nccl_library": engine.nccl_library(env)}
    result_path = Path(directory) / f"{tag}.json"
    argv = engine.worker_argv(engine.worker_script(), config, result_path)
    return engine.run_worker(argv, env, budget_s, result_path)


def _facts(log: str) -> dict[str, Any]:
    try:
        facts: NcclLogFacts | None = parse_nccl_log(log)
    except ParseError:
        facts = None
    if facts is None:
        return {}
    algorithm = facts.algorithms.get(PAIR_BYTES) or (facts.algorithms[max(facts.algorithms)] if facts.algorithms else None)
    # SHARP carried the measurement only where NCCL chose CollNet/NVLS for the measured size; a
    # plugin that merely initialised (`SHARP rank 0/4 initialized`) is said, not counted.
    return {"transport": facts.network_used(), "sharp": facts.in_network_algorithm([PAIR_BYTES]) is not None,
            "sharp_initialized": facts.sharp_initialized or bool(facts.collnet), "algorithm": algorithm,
            "net_plugin": facts.net_plugin, "net_plugin_missing": facts.net_plugin_missing,
            "collnet_enable": facts.environment.get("NCCL_COLLNET_ENABLE"), "nccl_version": facts.version}


def measure_group(me: str, hosts: list[str], group: dict[str, Any], nodes: dict[str, Any], budget_s: float,
                  rails: bool) -> dict[str, Any]:
    """This node's measurement: busbw (GB/s), transport, SHARP/algorithm facts; per rail in a rails round."""
    deadline = time.monotonic() + budget_s
    inventory = _inventory(time.monotonic() + DISCOVERY_S)
    gpus = sorted(gpu.index for gpu in inventory.gpus if not gpu.lost)
    expected = int(nodes.get(me, {}).get("gpus", 0))
    if not rails and len(gpus) != expected:
        return {"status": "error", "reason": f"{len(gpus)} GPU(s) found, the plan counted {expected} (from check)"}
    position = hosts.index(me)
    port = int(group["port"])
    env = engine.worker_environment(None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    # NCCL's host hash from the node's name: two "nodes" on one machine (a lab, a test) stay two.
    env.update({"NCCL_COMM_ID": f"{hosts[0]}:{port}", "NCCL_HOSTID": me, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                # TUNING: the algorithm NCCL picked per size (10 collectives: a few lines).
                "NCCL_DEBUG_SUBSYS": env["NCCL_DEBUG_SUBSYS"] + ",TUNING"})
    left = max(deadline - time.monotonic(), 1.0)
    with tempfile.TemporaryDirectory(prefix="netdoctor-fleet-probe-") as directory:
        if not rails:
            rank_base = sum(int(nodes.get(host, {}).get("gpus", 0)) for host in hosts[:position])
            nranks = sum(int(nodes.get(host, {}).get("gpus", 0)) for host in hosts)
            run = _worker(gpus, nranks, rank_base, env, left, directory, "group", hosts)
            result = engine.assemble(run, left)
            measured = {"status": "ok" if result.status == "ok" else result.status, "reason": result.reason,
                        "busbw_gbps": result.busbw_gbps, **_facts(run.log)}
            return {key: value for key, value in measured.items() if value is not None}
        return _rails(me, hosts, nodes, inventory, env, left, directory)


def _rails(me: str, hosts: list[str], nodes: dict[str, Any], inventory: Any, env: dict[str, str], budget_s: float,
           directory: str) -> dict[str, Any]:
    from netdoctor.packs import load_rules
    from netdoctor.traffic import loopback_rails
    mine = loopback_rails(inventory, load_rules(None, inventory, env={}))
    count = min([len(mine)] + [int(nodes.get(host, {}).get("rails", 0)) for host in hosts])
    if count == 0:
        return {"status": "error", "reason": "no compute rail to test (or the partner has none)"}
    port = int(env["NCCL_COMM_ID"].rsplit(":", 1)[1])
    results: dict[str, Any] = {}
    logs: list[str] = []

    def one(index: int) -> None:
        rail = mine[index]
        rail_env = {**env, "NCCL_COMM_ID": f"{hosts[0]}:{port + 1 + index}",
                    "NCCL_IB_HCA": f"={rail.hca}:{rail.port_number}"}
        run = _worker([rail.gpu], 2, hosts.index(me), rail_env, budget_s, directory, f"rail{index}", hosts)
        logs.append(run.log)
        results[rail.port] = engine.assemble(run, budget_s)

    threads = [threading.Thread(target=one, args=(index,), daemon=True) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=budget_s + 2.0)
    measured = {port_name: result.busbw_gbps for port_name, result in results.items()
                if result.status == "ok" and result.busbw_gbps is not None}
    if not measured:
        reasons = sorted({result.reason for result in results.values()}) or ["no rail reported"]
        return {"status": "error", "reason": "; ".join(reasons)[:300]}
    return {"status": "ok", "busbw_gbps": round(min(measured.values()) * len(measured), 2), "rails": measured,
            **_facts("\n".join(logs))}
