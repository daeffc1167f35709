"""NVLink error counters (replay, recovery, CRC flit, CRC data) of every GPU's links, read
through NVML before, during and after a sustained NCCL all-reduce over NVLink, and over an
idle interval: what a healthy node's counters do under load (run on a device machine of 2+
GPUs: `python3 tests/data/device/nvlink-counters-under-load.py SECONDS > OUT.json`)."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from typing import Any

COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}   # nvmlNvLinkErrorCounter_t
MAX_LINKS = 18


def read_counters(nvml: Any) -> dict[str, dict[str, int]]:
    count = ctypes.c_uint()
    nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    result: dict[str, dict[str, int]] = {}
    for index in range(count.value):
        handle = ctypes.c_void_p()
        nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))
        for link in range(MAX_LINKS):
            state = ctypes.c_int()
            if nvml.nvmlDeviceGetNvLinkState(handle, link, ctypes.byref(state)) != 0 or state.value != 1:
                continue
            values = {}
            for name, code in COUNTERS.items():
                value = ctypes.c_ulonglong()
                rc = nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, code, ctypes.byref(value))
                values[name] = value.value if rc == 0 else -rc
            result[f"GPU{index} link{link}"] = values
    return result


def worker(rank: int, world: int, seconds: float, queue: Any) -> None:
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, init_method="tcp://127.0.0.1:29533")
    tensor = torch.ones(256 << 20, device="cuda")          # 1 GiB of float32
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    started, count = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        for _ in range(10):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        count += 10
    elapsed = time.monotonic() - started
    if rank == 0:
        queue.put({"allreduces": count, "seconds": round(elapsed, 2),
                   "algbw_gbps": round(count * tensor.numel() * 4 / elapsed / 1e9, 1)})
    dist.destroy_process_group()


def main() -> None:
    import torch
    import torch.multiprocessing as mp
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    nvml.nvmlInit_v2()
    world = torch.cuda.device_count()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    report: dict[str, Any] = {"gpus": world, "readings": []}
    report["readings"].append({"at": "start", "time": time.time(), "counters": read_counters(nvml)})
    time.sleep(seconds / 2)
    report["readings"].append({"at": "after idle", "time": time.time(), "counters": read_counters(nvml)})
    context = mp.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=worker, args=(rank, world, seconds, queue)) for rank in range(world)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    report["load"] = queue.get() if not queue.empty() else None
    report["readings"].append({"at": "after load", "time": time.time(), "counters": read_counters(nvml)})
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
