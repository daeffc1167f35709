"""netdoctor's NCCL probe against a reference all-reduce, in one run on the same GPUs.

Reference: torch.distributed with the NCCL backend, one process per GPU, CUDA-event
timing (max over ranks), float32 sum, busbw = algbw x 2(n-1)/n as nccl-tests defines it.
Probe: netdoctor.probe.run_probe (ctypes on libnccl + libcuda, one process, all GPUs).
Runs alternate (probe, reference, probe, reference, ...) and the median is reported.

Usage (on a GPU node): python3 benchmarks/probe_vs_reference.py --repeats 3 --out result.json
NCCL_NVLS_ENABLE=0 is set for both unless the environment sets it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from typing import Any

SIZES = [1 << 20, 16 << 20, 256 << 20, 1 << 30]
REFERENCE_ITERATIONS = {1 << 20: 500, 16 << 20: 200, 256 << 20: 40, 1 << 30: 20}
REFERENCE_WARMUP = 5


def _reference_rank(rank: int, world: int, port: int, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    rows = []
    for size in SIZES:
        tensor = torch.full((size // 4,), float(rank + 1), dtype=torch.float32, device="cuda")
        for _ in range(REFERENCE_WARMUP):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        iterations = REFERENCE_ITERATIONS[size]
        start.record()
        for _ in range(iterations):
            dist.all_reduce(tensor)
        stop.record()
        stop.synchronize()
        elapsed = torch.tensor([start.elapsed_time(stop)], device="cuda")
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        time_us = elapsed.item() * 1000 / iterations
        algbw = size / (time_us * 1e-6) / 1e9
        rows.append({"bytes": size, "time_us": round(time_us, 3), "algbw_gbps": round(algbw, 3),
                     "busbw_gbps": round(algbw * 2 * (world - 1) / world, 3), "iterations": iterations})
        del tensor
        torch.cuda.empty_cache()
    if rank == 0:
        queue.put({"sizes": rows, "nccl_version": ".".join(str(part) for part in torch.cuda.nccl.version()),
                   "torch": torch.__version__})
    dist.destroy_process_group()


def run_reference(world: int) -> dict[str, Any]:
    import torch.multiprocessing as multiprocessing

    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    queue = context.SimpleQueue()
    started = time.monotonic()
    multiprocessing.start_processes(_reference_rank, args=(world, port, queue), nprocs=world, join=True,
                                    start_method="spawn")
    result = queue.get()
    result["duration_s"] = round(time.monotonic() - started, 3)
    return result


def run_netdoctor(budget_s: float) -> dict[str, Any]:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from netdoctor.packs import load_rules
    from netdoctor.probe import run_probe
    from netdoctor.probe.result import ProbeRequest

    pass_fraction = float(load_rules("default", None).section("nccl-probe")["pass_fraction"])
    return run_probe(ProbeRequest(budget_s=budget_s, pass_fraction=pass_fraction, sizes=tuple(SIZES))).to_json()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=10.0, help="netdoctor probe budget per run, seconds")
    parser.add_argument("--out", required=True)
    arguments = parser.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    import torch

    world = torch.cuda.device_count()
    runs: dict[str, list[dict[str, Any]]] = {"netdoctor": [], "reference": []}
    for _ in range(arguments.repeats):
        runs["netdoctor"].append(run_netdoctor(arguments.budget))
        runs["reference"].append(run_reference(world))
    summary = []
    for size in SIZES:
        entry: dict[str, Any] = {"bytes": size}
        for name, results in runs.items():
            rows = [row for result in results for row in result.get("sizes", []) if row["bytes"] == size]
            entry[name] = {"busbw_gbps": statistics.median(row["busbw_gbps"] for row in rows) if rows else None,
                           "time_us": statistics.median(row["time_us"] for row in rows) if rows else None,
                           "all_busbw_gbps": [row["busbw_gbps"] for row in rows]}
        if entry["netdoctor"]["busbw_gbps"] and entry["reference"]["busbw_gbps"]:
            entry["busbw_ratio"] = round(entry["netdoctor"]["busbw_gbps"] / entry["reference"]["busbw_gbps"], 3)
            entry["time_ratio"] = round(entry["netdoctor"]["time_us"] / entry["reference"]["time_us"], 3)
        summary.append(entry)
    report = {"gpus": world, "gpu_name": torch.cuda.get_device_name(0), "summary": summary, "runs": runs}
    with open(arguments.out, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    for entry in summary:
        print(f"{entry['bytes']:>12} B  netdoctor {entry['netdoctor']['busbw_gbps']} GB/s "
              f"{entry['netdoctor']['time_us']} us | reference {entry['reference']['busbw_gbps']} GB/s "
              f"{entry['reference']['time_us']} us | busbw ratio {entry.get('busbw_ratio')} "
              f"time ratio {entry.get('time_ratio')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
