"""The NCCL probe worker: one process, every selected GPU, ctypes on libcuda and libnccl.

Run as a script (`python3 worker.py CONFIG_JSON RESULT_PATH`), never imported by the
rest of netdoctor at probe time: it uses only the standard library so that it starts
fast and runs on nodes without PyTorch or CuPy. The parent (netdoctor.probe.nccl_worker)
starts it in its own process group and kills the group at the deadline; this worker
also watches the same deadline and stops early with partial results.

What it does, in order: cuInit; retain each GPU's primary context (the one cudart and
NCCL use too, so buffers are shared with NCCL's own context); ncclCommInitAll over the
GPUs (single process, multi-GPU); per message size: warm-up, GPU-timed iterations,
verification of every element on the GPU; optional localisation (per-GPU host<->device
copies, neighbour-pair all-reduces); then writes its result and exits, leaving the
driver to free what it allocated (ranks spread over processes destroy their communicators
first). It changes no clocks, power limits or modes.

The result is one JSON object written to RESULT_PATH. NCCL's INFO lines go to this
process's stdout/stderr, which the parent captures and parses.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import struct
import sys
import time
from typing import Any

# ---------------------------------------------------------------------------------
# Verification kernels, as PTX so no compiler is needed: the driver JIT-compiles it.
# nd_fill:  buf[i] = base + (i % 251)            (rank r uses base = r + 1)
# nd_check: count elements where buf[i] != expected_base + nranks * (i % 251)
# nd_spin:  busy-wait on %globaltimer; queued before the start event so the timed
#           window holds only GPU work, not Python's launch overhead (see _time_size).
# Every value stays below 2**24, so float32 sums are exact and comparison is exact.
# ---------------------------------------------------------------------------------
# Both verification kernels walk the buffer grid-stride: %rd3 = this thread's first element,
# %rd5 = the stride (threads in the grid).
_GRID_STRIDE = rb"""
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %nctaid.x;
    cvt.u64.u32 %rd4, %r3;
    mad.wide.u32 %rd3, %r1, %r2, %rd4;
    mul.wide.u32 %rd5, %r4, %r2;
"""
_PTX = rb"""
.version 6.0
.target sm_52
.address_size 64

.visible .entry nd_fill(.param .u64 p_buf, .param .u64 p_n, .param .f32 p_base)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<10>;
    .reg .f32 %f<4>;
    ld.param.u64 %rd1, [p_buf];
    ld.param.u64 %rd2, [p_n];
    ld.param.f32 %f1, [p_base];
    cvta.to.global.u64 %rd1, %rd1;
""" + _GRID_STRIDE[1:] + rb"""FILL_LOOP:
    setp.ge.u64 %p1, %rd3, %rd2;
    @%p1 bra FILL_DONE;
    rem.u64 %rd6, %rd3, 251;
    cvt.rn.f32.u64 %f2, %rd6;
    add.f32 %f3, %f2, %f1;
    shl.b64 %rd7, %rd3, 2;
    add.s64 %rd8, %rd1, %rd7;
    st.global.f32 [%rd8], %f3;
    add.s64 %rd3, %rd3, %rd5;
    bra FILL_LOOP;
FILL_DONE:
    ret;
}

.visible .entry nd_check(.param .u64 p_buf, .param .u64 p_n, .param .f32 p_base,
                         .param .f32 p_factor, .param .u64 p_count)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<12>;
    .reg .f32 %f<8>;
    ld.param.u64 %rd1, [p_buf];
    ld.param.u64 %rd2, [p_n];
    ld.param.f32 %f1, [p_base];
    ld.param.f32 %f2, [p_factor];
    ld.param.u64 %rd9, [p_count];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd9, %rd9;
""" + _GRID_STRIDE[1:] + rb"""CHECK_LOOP:
    setp.ge.u64 %p1, %rd3, %rd2;
    @%p1 bra CHECK_DONE;
    rem.u64 %rd6, %rd3, 251;
    cvt.rn.f32.u64 %f3, %rd6;
    fma.rn.f32 %f4, %f3, %f2, %f1;
    shl.b64 %rd7, %rd3, 2;
    add.s64 %rd8, %rd1, %rd7;
    ld.global.f32 %f5, [%rd8];
    setp.neu.f32 %p2, %f5, %f4;
    @%p2 atom.global.add.u32 %r5, [%rd9], 1;
    add.s64 %rd3, %rd3, %rd5;
    bra CHECK_LOOP;
CHECK_DONE:
    ret;
}

.visible .entry nd_spin(.param .u64 p_ns)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [p_ns];
    mov.u64 %rd2, %globaltimer;
    add.u64 %rd3, %rd2, %rd1;
SPIN_LOOP:
    mov.u64 %rd4, %globaltimer;
    setp.lt.u64 %p1, %rd4, %rd3;
    @%p1 bra SPIN_LOOP;
    ret;
}
"""

NCCL_FLOAT32 = 7
NCCL_SUM = 0
CU_STREAM_NON_BLOCKING = 1
CU_MEMHOSTALLOC_PORTABLE = 1
NAN_BITS = 0x7FC00000
FILL_BLOCKS, FILL_THREADS = 1024, 256
TEARDOWN_RESERVE_S = 0.25
# config["localise_below_gbps"] when the parent sends it later, on stdin (localise_threshold).
THRESHOLD_ON_STDIN = "stdin"
# Progress lines for the parent (netdoctor.probe.engine reads them from the captured log,
# also after it killed this process): `NETDOCTOR_PHASE <name> [json]`. `gpus` (the selected
# ordinals) and `devices` (name, PCI bus id) say what was probed even when no result file
# is written; `init-done` separates a kill during NCCL init (the budget may just be too
# short) from a hang in the timed all-reduces.
PHASE_PREFIX = "NETDOCTOR_PHASE"


class ProbeFailure(Exception):
    """A stop with a status the parent understands: `skipped`, `error`, `wrong-result`."""

    def __init__(self, status: str, reason: str, code: str = "") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.code = code


class Cuda:
    """The few CUDA driver API calls the probe needs, with errors turned into ProbeFailure."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise ProbeFailure("skipped", f"no NVIDIA driver (libcuda.so.1 cannot be loaded: {error})", "no-driver") from error
        self.lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def call(self, name: str, *args: Any) -> None:
        result = getattr(self.lib, name)(*args)
        if result != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(result, ctypes.byref(text))
            message = text.value.decode(errors="replace") if text.value else "unknown error"
            raise ProbeFailure("error", f"CUDA {name} failed: {message} (CUresult {result})", "cuda")


class Nccl:
    def __init__(self, path: str) -> None:
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.ncclGetErrorString.restype = ctypes.c_char_p
        self.lib.ncclGetErrorString.argtypes = [ctypes.c_int]
        self.lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
        self.lib.ncclCommGetAsyncError.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        # ncclGetLastError exists from NCCL 2.13 on; older libraries give only the code.
        self.last_error = getattr(self.lib, "ncclGetLastError", None)
        if self.last_error is not None:
            self.last_error.restype = ctypes.c_char_p
            self.last_error.argtypes = [ctypes.c_void_p]

    def call(self, name: str, *args: Any) -> None:
        result = getattr(self.lib, name)(*args)
        if result != 0:
            text = self.lib.ncclGetErrorString(result).decode(errors="replace")
            last = (self.last_error(None) or b"").decode(errors="replace") if self.last_error else ""
            detail = f": {last}" if last else ""
            raise ProbeFailure("error", f"NCCL {name} failed: {text} (ncclResult {result}){detail}", "nccl")

    def version(self) -> str:
        code = ctypes.c_int()
        self.call("ncclGetVersion", ctypes.byref(code))
        value = code.value
        # NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9; major*1000+minor*100+patch before.
        if value >= 10000:
            return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
        return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"


def find_nccl(explicit: str | None) -> list[str]:
    """Candidate libnccl paths, best first.

    The nvidia-nccl-cu12/cu13 wheel comes first because installing it is what
    `pip install netdoctor[probe]` asks for; then the system library through the
    dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache).
    """
    if explicit:
        return [explicit]
    candidates = []
    for entry in sys.path:
        path = os.path.join(entry or ".", "nvidia", "nccl", "lib", "libnccl.so.2")
        if os.path.isfile(path) and path not in candidates:
            candidates.append(path)
    candidates.append("libnccl.so.2")
    return candidates


def load_nccl(explicit: str | None) -> Nccl:
    errors = []
    for candidate in find_nccl(explicit):
        try:
            return Nccl(candidate)
        except OSError as error:
            errors.append(f"{candidate}: {error}")
    raise ProbeFailure("skipped", "NCCL not found (install netdoctor[probe] or the system libnccl2); tried "
                       + "; ".join(errors), "no-nccl")


def nccl_library_file(nccl: Nccl) -> str:
    """The resolved file of the loaded libnccl (from /proc/self/maps), for the report."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            for line in maps:
                if "libnccl" in line and "/" in line:
                    return line[line.index("/"):].strip()
    except OSError:
        pass
    return nccl.path


class UniqueId(ctypes.Structure):
    """ncclUniqueId, passed by value to ncclCommInitRank."""

    _fields_ = [("internal", ctypes.c_char * 128)]


class Gpu:
    """One GPU's context, stream, events and buffers. `position`: its place in this process
    (kernels, localisation); `rank`: its NCCL rank (the same, unless ranks span processes)."""

    def __init__(self, cuda: Cuda, ordinal: int, rank: int, position: int) -> None:
        self.cuda = cuda
        self.ordinal = ordinal
        self.rank = rank
        self.position = position
        self.device = ctypes.c_int()
        self.context = ctypes.c_void_p()
        self.stream = ctypes.c_void_p()
        self.start = ctypes.c_void_p()
        self.stop = ctypes.c_void_p()
        self.send = ctypes.c_uint64(0)
        self.recv = ctypes.c_uint64(0)
        self.counter = ctypes.c_uint64(0)
        self.capacity = 0
        self.retained = False
        cuda.call("cuDeviceGet", ctypes.byref(self.device), ordinal)
        name = ctypes.create_string_buffer(256)
        cuda.call("cuDeviceGetName", name, 256, self.device)
        bus = ctypes.create_string_buffer(64)
        cuda.call("cuDeviceGetPCIBusId", bus, 64, self.device)
        self.name = name.value.decode(errors="replace")
        self.pci_bus_id = bus.value.decode(errors="replace")
        cuda.call("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), self.device)
        self.retained = True
        self.activate()
        cuda.call("cuStreamCreate", ctypes.byref(self.stream), CU_STREAM_NON_BLOCKING)
        cuda.call("cuEventCreate", ctypes.byref(self.start), 0)
        cuda.call("cuEventCreate", ctypes.byref(self.stop), 0)
        cuda.call("cuMemAlloc_v2", ctypes.byref(self.counter), ctypes.c_size_t(4))

    def activate(self) -> None:
        self.cuda.call("cuCtxSetCurrent", self.context)

    def allocate(self, size: int) -> None:
        self.activate()
        self.cuda.call("cuMemAlloc_v2", ctypes.byref(self.send), ctypes.c_size_t(size))
        self.cuda.call("cuMemAlloc_v2", ctypes.byref(self.recv), ctypes.c_size_t(size))
        self.capacity = size

    def synchronize(self) -> None:
        self.activate()
        self.cuda.call("cuStreamSynchronize", self.stream)

    def release(self) -> None:
        """Free everything; errors here are ignored so one bad GPU does not leak the others."""
        if not self.retained:
            return
        lib = self.cuda.lib
        lib.cuCtxSetCurrent(self.context)
        if self.stream:
            lib.cuStreamSynchronize(self.stream)
        for pointer in (self.send, self.recv, self.counter):
            if pointer.value:
                lib.cuMemFree_v2(pointer)
        for event in (self.start, self.stop):
            if event:
                lib.cuEventDestroy_v2(event)
        if self.stream:
            lib.cuStreamDestroy_v2(self.stream)
        lib.cuDevicePrimaryCtxRelease_v2(self.device)
        self.retained = False


class Kernels:
    """The PTX kernels for one GPU (modules are per context)."""

    def __init__(self, cuda: Cuda, gpu: Gpu) -> None:
        self.cuda = cuda
        self.module = ctypes.c_void_p()
        gpu.activate()
        cuda.call("cuModuleLoadData", ctypes.byref(self.module), ctypes.c_char_p(_PTX))
        self.fill = ctypes.c_void_p()
        self.check = ctypes.c_void_p()
        self.spin = ctypes.c_void_p()
        cuda.call("cuModuleGetFunction", ctypes.byref(self.fill), self.module, b"nd_fill")
        cuda.call("cuModuleGetFunction", ctypes.byref(self.check), self.module, b"nd_check")
        cuda.call("cuModuleGetFunction", ctypes.byref(self.spin), self.module, b"nd_spin")

    def launch(self, function: ctypes.c_void_p, stream: ctypes.c_void_p, blocks: int, threads: int, *args: Any) -> None:
        holders = list(args)
        pointers = (ctypes.c_void_p * len(holders))(*[ctypes.cast(ctypes.byref(value), ctypes.c_void_p) for value in holders])
        self.cuda.call("cuLaunchKernel", function, blocks, 1, 1, threads, 1, 1, 0, stream, pointers, None)

    def unload(self) -> None:
        if self.module:
            self.cuda.lib.cuModuleUnload(self.module)
            self.module = ctypes.c_void_p()


def read_line_json(wait_s: float) -> dict[str, Any]:
    """One JSON object from a line on stdin, waiting at most `wait_s`; {} for none or a bad one."""
    data = b""
    end = time.monotonic() + max(wait_s, 0.0)
    try:
        while not data.endswith(b"\n") and len(data) < 4096:
            ready, _, _ = select.select([0], [], [], max(end - time.monotonic(), 0.0))
            chunk = os.read(0, 4096) if ready else b""
            if not chunk:
                break
            data += chunk
        value = json.loads(data.decode("utf-8")) if data.endswith(b"\n") else {}
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def phase(name: str, payload: Any = None) -> None:
    """Tell the parent how far the probe got: one `NETDOCTOR_PHASE` line on stdout.

    C stdio (NCCL's INFO lines) is flushed first and the line goes out in one write(2) on
    its own line, so it never lands inside an NCCL line and is on disk before the next step.
    """
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass
    sys.stdout.flush()
    line = PHASE_PREFIX + " " + name + ("" if payload is None else " " + json.dumps(payload, separators=(",", ":")))
    try:
        os.write(1, ("\n" + line + "\n").encode())
    except OSError:
        pass


class Probe:
    def __init__(self, config: dict[str, Any], started: float) -> None:
        self.config = config
        self.started = started
        self.deadline = started + float(config.get("budget_s", 5.0))
        self.cuda: Cuda | None = None
        self.nccl: Nccl | None = None
        self.gpus: list[Gpu] = []
        self.kernels: list[Kernels] = []
        self.comms: Any = None
        # NCCL ranks in all processes together when they span processes (`nranks`), else None.
        self.world: int | None = int(config["nranks"]) if config.get("nranks") is not None else None
        self.result: dict[str, Any] = {"status": "error", "reason": "worker did not finish", "sizes": [], "localisation": [],
                                       "timings": {}}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def mark(self, name: str) -> None:
        self.result["timings"][name] = round(time.monotonic() - self.started, 4)

    # -- set-up ----------------------------------------------------------------------
    def open(self) -> None:
        self.cuda = Cuda()
        try:
            self.cuda.call("cuInit", 0)
        except ProbeFailure as failure:
            # CUDA_ERROR_NO_DEVICE (100) and a driver without GPUs are "nothing to probe".
            if "CUresult 100" in failure.reason:
                raise ProbeFailure("skipped", "no CUDA-capable GPU visible", "no-gpus") from failure
            raise
        version = ctypes.c_int()
        self.cuda.call("cuDriverGetVersion", ctypes.byref(version))
        self.result["cuda_driver_version"] = version.value
        count = ctypes.c_int()
        self.cuda.call("cuDeviceGetCount", ctypes.byref(count))
        wanted = self.config.get("gpus")
        ordinals = list(range(count.value)) if wanted is None else [int(index) for index in wanted]
        bad = [index for index in ordinals if index < 0 or index >= count.value]
        if bad:
            raise ProbeFailure("error", f"GPU index {bad} does not exist: {count.value} GPU(s) visible", "bad-gpus")
        self.result["gpus"] = ordinals
        self.result["gpu_count"] = len(ordinals)
        phase("gpus", ordinals)
        if self.world is None and len(ordinals) < 2:
            raise ProbeFailure("skipped", f"{len(ordinals)} GPU(s) selected: an all-reduce needs at least 2", "single-gpu")
        self.nccl = load_nccl(self.config.get("nccl_library"))
        self.result["nccl_version"] = self.nccl.version()
        self.result["nccl_library"] = nccl_library_file(self.nccl)
        self.mark("loaded")
        base = int(self.config.get("rank_base", 0))
        self.gpus = [Gpu(self.cuda, ordinal, base + position, position) for position, ordinal in enumerate(ordinals)]
        self.result["devices"] = [{"index": gpu.ordinal, "name": gpu.name, "pci_bus_id": gpu.pci_bus_id} for gpu in self.gpus]
        phase("devices", self.result["devices"])
        self.mark("contexts")
        try:
            self.kernels = [Kernels(self.cuda, gpu) for gpu in self.gpus]
        except ProbeFailure as failure:
            # Without the PTX kernels (a driver too old for PTX 6.0) the probe still runs,
            # verifying with constant fills and sampled copies instead.
            self.kernels = []
            self.result["verification"] = f"sampled ({failure.reason})"
        else:
            self.result["verification"] = "every element, on the GPU"
        largest = max(self.config["sizes"])
        for gpu in self.gpus:
            gpu.allocate(largest)
        self.fill()
        self.mark("allocated")
        self.comms = (ctypes.c_void_p * len(self.gpus))()
        if self.world is None:
            devices = (ctypes.c_int * len(self.gpus))(*[gpu.ordinal for gpu in self.gpus])
            self.nccl.call("ncclCommInitAll", self.comms, len(self.gpus), devices)
        else:
            # Ranks in several processes (one per node, or two on one NIC): the parent set
            # NCCL_COMM_ID to the bootstrap root's address, so every process builds the same
            # id and the process of rank 0 starts the root inside ncclCommInitRank.
            unique = UniqueId()
            self.nccl.call("ncclGetUniqueId", ctypes.byref(unique))
            self.nccl.call("ncclGroupStart")
            for gpu in self.gpus:
                gpu.activate()
                slot = ctypes.byref(self.comms, gpu.position * ctypes.sizeof(ctypes.c_void_p))
                self.nccl.call("ncclCommInitRank", slot, self.world, unique, gpu.rank)
            self.nccl.call("ncclGroupEnd")
        self.mark("nccl_init")
        phase("init-done")

    def fill(self) -> None:
        assert self.cuda is not None
        for gpu in self.gpus:
            gpu.activate()
            count = gpu.capacity // 4
            if self.kernels:
                self.kernels[gpu.position].launch(self.kernels[gpu.position].fill, gpu.stream, FILL_BLOCKS, FILL_THREADS,
                                              ctypes.c_uint64(gpu.send.value), ctypes.c_uint64(count),
                                              ctypes.c_float(gpu.rank + 1))
            else:
                bits = struct.unpack("<I", struct.pack("<f", float(gpu.rank + 1)))[0]
                self.cuda.call("cuMemsetD32Async", gpu.send, ctypes.c_uint(bits), ctypes.c_size_t(count), gpu.stream)
        for gpu in self.gpus:
            gpu.synchronize()

    # -- measurement -------------------------------------------------------------------
    def all_reduce(self, count: int, gpus: list[Gpu], comms: Any) -> None:
        assert self.nccl is not None
        self.nccl.call("ncclGroupStart")
        for position, gpu in enumerate(gpus):
            self.nccl.call("ncclAllReduce", ctypes.c_void_p(gpu.send.value), ctypes.c_void_p(gpu.recv.value),
                           ctypes.c_size_t(count), NCCL_FLOAT32, NCCL_SUM, comms[position], gpu.stream)
        self.nccl.call("ncclGroupEnd")

    def synchronize(self, gpus: list[Gpu], comms: Any, until: float) -> None:
        """Wait for every stream, but never past `until`; poll NCCL's async errors meanwhile."""
        assert self.cuda is not None and self.nccl is not None
        for position, gpu in enumerate(gpus):
            gpu.activate()
            while True:
                state = self.cuda.lib.cuStreamQuery(gpu.stream)
                if state == 0:
                    break
                if state != 600:        # 600 = CUDA_ERROR_NOT_READY: still running
                    self.cuda.call("cuStreamQuery", gpu.stream)
                error = ctypes.c_int()
                self.nccl.lib.ncclCommGetAsyncError(comms[position], ctypes.byref(error))
                if error.value not in (0, 7):   # 7 = ncclInProgress
                    raise ProbeFailure("error", f"NCCL async error {error.value} on GPU{gpu.ordinal}: "
                                       + self.nccl.lib.ncclGetErrorString(error.value).decode(errors="replace"), "nccl")
                if time.monotonic() > until:
                    raise ProbeFailure("timeout", "probe timed out: all-reduce did not complete before the deadline",
                                       "timeout")
                time.sleep(0.0002)

    def time_size(self, size: int, time_share: float, gpus: list[Gpu], comms: Any) -> dict[str, Any]:
        """Warm up, pick iterations to fill `time_share` seconds, time them with CUDA events.

        Launching from Python costs microseconds per call; for small messages that is
        longer than the all-reduce itself. A spin kernel queued ahead of the start event
        holds each GPU while every iteration is enqueued, so the events time GPU work
        back to back, as nccl-tests does from C.
        """
        assert self.cuda is not None
        count = size // 4
        for gpu in gpus:
            gpu.activate()
            self.cuda.call("cuMemsetD32Async", gpu.recv, ctypes.c_uint(NAN_BITS), ctypes.c_size_t(count), gpu.stream)
        warmup = int(self.config.get("warmup", 0)) or (5 if size <= (1 << 24) else 2)
        # The first call of a size (and of a communicator) carries one-off set-up; it is
        # run and waited for alone, so the timed warm-up that sizes the run is steady-state.
        self.all_reduce(count, gpus, comms)
        self.synchronize(gpus, comms, self.deadline - TEARDOWN_RESERVE_S)
        timed = max(warmup - 1, 1)
        enqueue_start = time.perf_counter()
        for _ in range(timed):
            self.all_reduce(count, gpus, comms)
        enqueue_s = (time.perf_counter() - enqueue_start) / timed
        self.synchronize(gpus, comms, self.deadline - TEARDOWN_RESERVE_S)
        per_iteration = max((time.perf_counter() - enqueue_start) / timed, 1e-6)
        iterations = int(self.config.get("iterations", 0)) or max(3, min(1000, int(time_share / per_iteration)))
        if self.kernels:
            # Spin for as long as enqueueing will take (with margin), capped at 0.2 s.
            spin_ns = int(min(0.2, enqueue_s * iterations * 1.5 + 0.0005) * 1e9)
            for gpu in gpus:
                gpu.activate()
                self.kernels[gpu.position].launch(self.kernels[gpu.position].spin, gpu.stream, 1, 1, ctypes.c_uint64(spin_ns))
        for gpu in gpus:
            gpu.activate()
            self.cuda.call("cuEventRecord", gpu.start, gpu.stream)
        for _ in range(iterations):
            self.all_reduce(count, gpus, comms)
        for gpu in gpus:
            gpu.activate()
            self.cuda.call("cuEventRecord", gpu.stop, gpu.stream)
        self.synchronize(gpus, comms, self.deadline - TEARDOWN_RESERVE_S)
        elapsed_ms = 0.0
        for gpu in gpus:
            value = ctypes.c_float()
            self.cuda.call("cuEventElapsedTime", ctypes.byref(value), gpu.start, gpu.stop)
            elapsed_ms = max(elapsed_ms, value.value)
        time_us = elapsed_ms * 1000.0 / iterations
        ranks = self.ranks(gpus)
        algbw = size / (time_us * 1e-6) / 1e9
        wrong = self.verify(count, gpus)
        return {"bytes": size, "count": count, "iterations": iterations, "warmup": warmup,
                "time_us": round(time_us, 3), "algbw_gbps": round(algbw, 3),
                "busbw_gbps": round(algbw * 2 * (ranks - 1) / ranks, 3),
                "verified": wrong == 0, "wrong_elements": wrong}

    def ranks(self, gpus: list[Gpu]) -> int:
        """Ranks in the all-reduce: every process's when they span processes, else these GPUs."""
        return self.world if self.world is not None and gpus is self.gpus else len(gpus)

    def verify(self, count: int, gpus: list[Gpu]) -> int:
        """Elements of the receive buffers that differ from the exact expected sum."""
        assert self.cuda is not None
        ranks = self.ranks(gpus)
        # Each GPU's send buffer holds (rank+1) + i%251 with its rank in the full set.
        base = float(ranks * (ranks + 1) // 2 if self.world is not None else sum(gpu.rank + 1 for gpu in gpus))
        wrong = 0
        if self.kernels:
            for gpu in gpus:
                gpu.activate()
                self.cuda.call("cuMemsetD32Async", gpu.counter, ctypes.c_uint(0), ctypes.c_size_t(1), gpu.stream)
                kernels = self.kernels[gpu.position]
                kernels.launch(kernels.check, gpu.stream, FILL_BLOCKS, FILL_THREADS, ctypes.c_uint64(gpu.recv.value),
                               ctypes.c_uint64(count), ctypes.c_float(base), ctypes.c_float(float(ranks)),
                               ctypes.c_uint64(gpu.counter.value))
            for gpu in gpus:
                gpu.synchronize()
                value = ctypes.c_uint32()
                self.cuda.call("cuMemcpyDtoH_v2", ctypes.byref(value), gpu.counter, ctypes.c_size_t(4))
                wrong += value.value
            return wrong
        # Sampled: first, middle and last 16 KiB of each receive buffer.
        chunk = min(count, 4096)
        for gpu in gpus:
            gpu.synchronize()
            for start in sorted({0, max(0, count // 2 - chunk // 2), count - chunk}):
                host = (ctypes.c_float * chunk)()
                self.cuda.call("cuMemcpyDtoH_v2", host, ctypes.c_uint64(gpu.recv.value + start * 4), ctypes.c_size_t(chunk * 4))
                wrong += sum(1 for value in host if value != base)
        return wrong

    def run_sizes(self) -> None:
        """Time every size; the largest (the one graded) gets 40 % of the measuring time."""
        sizes = sorted(int(size) for size in self.config["sizes"])
        reserve = float(self.config.get("localise_reserve_s", 0.0))
        measure_s = min(float(self.config.get("measure_s", 1.0)), self.left() - TEARDOWN_RESERVE_S - reserve)
        for position, size in enumerate(sizes):
            remaining = self.left() - TEARDOWN_RESERVE_S - reserve
            if remaining <= 0.05:
                self.result["truncated"] = f"budget spent before {size} B"
                break
            weight = 0.4 if len(sizes) > 1 and size == sizes[-1] else (0.6 / (len(sizes) - 1) if len(sizes) > 1 else 1.0)
            share = min(max(measure_s, 0.0) * weight, remaining / (len(sizes) - position))
            row = self.time_size(size, max(share, 0.005), self.gpus, self.comms)
            self.result["sizes"].append(row)
            if not row["verified"]:
                raise ProbeFailure("wrong-result", f"all-reduce of {size} B gave {row['wrong_elements']} wrong element(s)",
                                   "wrong-result")
        self.mark("measured")

    # -- localisation --------------------------------------------------------------------
    def localise_threshold(self) -> float | None:
        """The busbw under which to localise (the parent's expectation x the pack's fraction).

        A worker started before discovery finished (config `"stdin"`) gets it as one JSON line
        on stdin once the parent knows the GPUs' links; usually long before the measuring
        ends. No line by the deadline, or a closed stdin: no localisation.
        """
        threshold = self.config.get("localise_below_gbps")
        if threshold == THRESHOLD_ON_STDIN:
            wait_s = self.left() - TEARDOWN_RESERVE_S - float(self.config.get("localise_reserve_s", 0.0))
            threshold = read_line_json(wait_s).get("localise_below_gbps")
        return float(threshold) if isinstance(threshold, (int, float)) and not isinstance(threshold, bool) else None

    def localise(self) -> None:
        threshold = self.localise_threshold()
        rows = self.result["sizes"]
        if threshold is None or not rows or rows[-1]["busbw_gbps"] >= float(threshold):
            return
        self.result["localisation"] = self.copy_bandwidths() + self.pair_bandwidths()
        self.mark("localised")

    def copy_bandwidths(self) -> list[dict[str, Any]]:
        """Host->device copy bandwidth of each GPU: a slow one points at its PCIe link."""
        assert self.cuda is not None
        size = min(64 << 20, min(gpu.capacity for gpu in self.gpus))
        host = ctypes.c_void_p()
        self.cuda.call("cuMemHostAlloc", ctypes.byref(host), ctypes.c_size_t(size), CU_MEMHOSTALLOC_PORTABLE)
        rows = []
        try:
            for gpu in self.gpus:
                if self.left() < TEARDOWN_RESERVE_S + 0.1:
                    break
                gpu.activate()
                for direction, function, arguments in (
                        ("host-to-device", "cuMemcpyHtoDAsync_v2", (gpu.recv, host, ctypes.c_size_t(size), gpu.stream)),
                        ("device-to-host", "cuMemcpyDtoHAsync_v2", (host, gpu.recv, ctypes.c_size_t(size), gpu.stream))):
                    self.cuda.call(function, *arguments)            # warm-up
                    self.cuda.call("cuEventRecord", gpu.start, gpu.stream)
                    for _ in range(3):
                        self.cuda.call(function, *arguments)
                    self.cuda.call("cuEventRecord", gpu.stop, gpu.stream)
                    self.cuda.call("cuEventSynchronize", gpu.stop)
                    value = ctypes.c_float()
                    self.cuda.call("cuEventElapsedTime", ctypes.byref(value), gpu.start, gpu.stop)
                    rows.append({"kind": "copy", "direction": direction, "gpus": [gpu.ordinal], "bytes": size,
                                 "gbps": round(3 * size / (value.value * 1e-3) / 1e9, 2)})
        finally:
            self.cuda.lib.cuMemFreeHost(host)
        return rows

    def pair_bandwidths(self) -> list[dict[str, Any]]:
        """All-reduce between ring neighbours (0-1, 1-2, ..., n-1 - 0): a slow GPU shows in both its pairs."""
        assert self.nccl is not None
        if len(self.gpus) < 3:
            return []
        size = min(64 << 20, max(int(size) for size in self.config["sizes"]))
        rows = []
        pairs = [(self.gpus[i], self.gpus[(i + 1) % len(self.gpus)]) for i in range(len(self.gpus))]
        for first, second in pairs:
            if self.left() < TEARDOWN_RESERVE_S + 0.3:
                rows.append({"kind": "pair", "gpus": [first.ordinal, second.ordinal], "skipped": "budget spent"})
                continue
            comms = (ctypes.c_void_p * 2)()
            devices = (ctypes.c_int * 2)(first.ordinal, second.ordinal)
            self.nccl.call("ncclCommInitAll", comms, 2, devices)
            try:
                row = self.time_size(size, 0.05, [first, second], comms)
            finally:
                for comm in comms:
                    self.nccl.lib.ncclCommDestroy(comm)
            rows.append({"kind": "pair", "gpus": [first.ordinal, second.ordinal], "bytes": size,
                         "busbw_gbps": row["busbw_gbps"], "verified": row["verified"]})
        return rows

    # -- tear-down --------------------------------------------------------------------
    def close(self) -> None:
        if self.nccl is not None and self.comms is not None:
            for comm in self.comms:
                if comm:
                    self.nccl.lib.ncclCommDestroy(comm)
            self.comms = None
        for kernels in self.kernels:
            kernels.unload()
        for gpu in self.gpus:
            gpu.release()
        self.mark("closed")


def main(argv: list[str]) -> int:
    started = time.monotonic()
    if len(argv) != 3:
        sys.stderr.write("usage: worker.py CONFIG_JSON RESULT_PATH\n")
        return 2
    config = json.loads(argv[1])
    probe = Probe(config, started)
    try:
        probe.open()
        probe.run_sizes()
        probe.localise()
        probe.result["status"] = "ok"
        probe.result["reason"] = ""
    except ProbeFailure as failure:
        probe.result["status"] = failure.status
        probe.result["reason"] = failure.reason
        probe.result["reason_code"] = failure.code
    except Exception as error:  # noqa: BLE001 - the parent must always get a result file
        probe.result["status"] = "error"
        probe.result["reason"] = f"worker error: {type(error).__name__}: {error}"
        probe.result["reason_code"] = "worker"
    finally:
        # All ranks in this process: nothing outside it waits for an orderly goodbye, so
        # the result is written first and the process leaves without ncclCommDestroy and
        # the frees (0.4 s on 2 H200s); the driver releases a process's contexts and
        # memory as it exits, before the parent's wait returns. Ranks in several processes
        # close their communicators first: a peer may still be in a collective with them.
        quick_exit = probe.world is None or probe.result["status"] == "timeout"
        if not quick_exit:
            try:
                probe.close()
            except Exception as error:  # noqa: BLE001
                probe.result.setdefault("cleanup_error", str(error))
        probe.result["worker_s"] = round(time.monotonic() - started, 4)
        temporary = argv[2] + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(probe.result, handle)
        os.replace(temporary, argv[2])
    sys.stdout.flush()
    sys.stderr.flush()
    if quick_exit:
        # Also for a hung communicator, whose exit handlers could block.
        try:
            ctypes.CDLL(None).fflush(None)   # NCCL's INFO lines still in C stdio buffers
        except (OSError, AttributeError):
            pass
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
