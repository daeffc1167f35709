"""cuInit from the first moment of a live run, in a daemon thread.

A process's first cuInit on a GPU node takes 0.23-0.46 s (2 H200s, driver 580, persistence
mode on: benchmarks/results/nvml.md), and the driver runs the node's cuInits one at a time:
the probe worker's own cuInit waits for one already under way, then returns at once. Both the
NVML read (its DMA-BUF question, where it is asked: host.nvml.dmabuf_can_matter) and the worker
need it, so a live `check` or `probe` starts it as soon as its command line is read, beside the
interpreter's imports and the plugin loading.
Only cuInit: no context, no GPU memory, nothing a running job could notice.
"""

from __future__ import annotations

import ctypes
import os
import threading

NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"
_lock = threading.Lock()
_started = False


def start_cuda_init(library_name: str = "libcuda.so.1", gpus_dir: str = NVIDIA_GPUS_DIR) -> bool:
    """Start cuInit in this process where the NVIDIA driver has GPUs; True if this call started it."""
    global _started
    with _lock:
        if _started:
            return False
        try:
            if not os.listdir(gpus_dir):
                return False
        except OSError:          # no NVIDIA driver loaded: nothing to warm up
            return False
        _started = True
    threading.Thread(target=_cuda_init, args=(library_name,), name="netdoctor-cuinit", daemon=True).start()
    return True


def _cuda_init(library_name: str) -> None:
    try:
        ctypes.CDLL(library_name).cuInit(ctypes.c_uint(0))
    except (OSError, AttributeError):
        pass                     # the NVML read's DMA-BUF question says what libcuda lacks
