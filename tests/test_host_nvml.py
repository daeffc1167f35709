"""collect_nvml against a fake pynvml module (data, not patches) and the real one (no driver here)."""

from __future__ import annotations

import ctypes
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from netdoctor.host import nvml as nvml_module
from netdoctor.host.nvml import CudaDmabufQuery, collect_nvml, dmabuf_can_matter
from netdoctor.host.sysfs import RootedSysTree


class NVMLError(Exception):
    _names = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 9: "Driver Not Loaded",
              12: "NVML Shared Library Not Found", 15: "GPU is lost", 18: "Driver/library version mismatch"}

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self._names.get(self.value, f"error {self.value}")


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - pynvml's own name
    pass


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    pass


@dataclass
class FakeGpu:
    name: str
    uuid: str
    bus_id: str
    numa: int | None                   # None: nvmlDeviceGetNumaNodeId not supported
    nvlinks: list[int] = field(default_factory=list)   # state per existing link index
    lost: bool = False
    replay_errors: dict[int, int] = field(default_factory=dict)   # link -> NVLink replay counter
    fabric_state: int | None = None    # nvmlGpuFabricState_t; None: fabric info not supported
    virtualization_mode: int = 0
    ecc_enabled: bool = True
    volatile_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)   # correctable, uncorrectable, pending, failure
    retired_pages: bool = False        # page retirement supported (before Ampere)
    recovery_action: int | None = 0    # None: the driver has no such field
    clocks_mask: int = 0x1             # GPU idle
    utilization: int = 0
    pcie_replays: int = 0


class FabricInfoV(ctypes.Structure):
    """nvidia-ml-py's c_nvmlGpuFabricInfoV_t, filled by the fake through the pointer it gets."""

    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_char * 16), ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint), ("state", ctypes.c_ubyte), ("healthMask", ctypes.c_uint)]


@dataclass
class FakeNvml:
    gpus: list[FakeGpu]
    init_error: NVMLError | None = None
    calls: list[str] = field(default_factory=list)

    def module(self) -> types.ModuleType:
        fake = types.ModuleType("fake_pynvml")
        fake.NVMLError = NVMLError
        fake.NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
        fake.NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
        fake.NVML_ERROR_NOT_SUPPORTED = 3
        fake.NVML_ERROR_INVALID_ARGUMENT = 2
        fake.NVML_FEATURE_ENABLED = 1
        fake.NVML_NVLINK_MAX_LINKS = 18

        def init() -> None:
            self.calls.append("init")
            if self.init_error is not None:
                raise self.init_error

        def gpu(handle: Any) -> FakeGpu:
            if handle.lost:
                raise NVMLError(15)
            return handle

        def nvlink_state(handle: Any, link: int) -> int:
            states = gpu(handle).nvlinks
            if link >= len(states):
                raise NVMLError(2 if link % 2 else 3)
            return states[link]

        def numa(handle: Any) -> int:
            value = gpu(handle).numa
            if value is None:
                raise NVMLError(3)
            return value

        def error_counter(handle: Any, link: int, counter: int) -> int:
            return gpu(handle).replay_errors.get(link, 0) if counter == 0 else 0

        def remote(handle: Any, link: int) -> Any:
            gpu(handle)
            return types.SimpleNamespace(busId=b"00000000:05:00.0" if link % 2 == 0 else b"FFFFFFFF:FF:FF.0")

        def field_values(handle: Any, fields: list[Any]) -> list[Any]:
            device = gpu(handle)
            answers = []
            for item in fields:
                if item == 230:       # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
                    action = device.recovery_action
                    answers.append(types.SimpleNamespace(nvmlReturn=3 if action is None else 0,
                                                         value=types.SimpleNamespace(uiVal=action or 0)))
                else:                 # (NVML_FI_DEV_NVLINK_GET_SPEED, link)
                    answers.append(types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(uiVal=26562)))
            return answers

        def retired(handle: Any, cause: int) -> list[int]:
            if not gpu(handle).retired_pages:
                raise NVMLError(3)
            return [0x1000] * (cause + 1)

        def retired_pending(handle: Any) -> int:
            if not gpu(handle).retired_pages:
                raise NVMLError(3)
            return 0

        def total_ecc(handle: Any, kind: int, counter: int) -> int:
            return gpu(handle).volatile_uncorrected * (counter + 1)

        def fabric(handle: Any, reference: Any) -> None:
            state = gpu(handle).fabric_state
            if state is None:
                raise NVMLError(3)
            info = reference._obj
            info.state, info.status, info.cliqueId, info.clusterUuid = state, 0, 7, bytes(range(1, 17))

        fake.nvmlInit = init
        fake.nvmlShutdown = lambda: self.calls.append("shutdown")
        fake.nvmlSystemGetDriverVersion = lambda: b"580.95.05"
        fake.nvmlSystemGetCudaDriverVersion = lambda: 13000
        fake.nvmlSystemGetNVMLVersion = lambda: "13.580.95.05"
        fake.nvmlDeviceGetCount = lambda: len(self.gpus)
        fake.nvmlDeviceGetHandleByIndex = lambda index: self.gpus[index]
        fake.nvmlDeviceGetName = lambda handle: gpu(handle).name
        fake.nvmlDeviceGetUUID = lambda handle: gpu(handle).uuid
        fake.nvmlDeviceGetPciInfo = lambda handle: types.SimpleNamespace(busId=gpu(handle).bus_id.encode())
        fake.nvmlDeviceGetNumaNodeId = numa
        fake.nvmlDeviceGetCurrPcieLinkGeneration = lambda handle: (gpu(handle), 1)[1]   # idle GPU: Gen1
        fake.nvmlDeviceGetMaxPcieLinkGeneration = lambda handle: (gpu(handle), 5)[1]
        fake.nvmlDeviceGetGpuMaxPcieLinkGeneration = lambda handle: (gpu(handle), 5)[1]
        fake.nvmlDeviceGetCurrPcieLinkWidth = lambda handle: (gpu(handle), 16)[1]
        fake.nvmlDeviceGetMaxPcieLinkWidth = lambda handle: (gpu(handle), 16)[1]
        fake.nvmlDeviceGetNvLinkState = nvlink_state
        fake.nvmlDeviceGetNvLinkVersion = lambda handle, link: 4
        fake.nvmlDeviceGetPerformanceState = lambda handle: (gpu(handle), 8)[1]
        fake.nvmlDeviceGetNvLinkErrorCounter = error_counter
        fake.nvmlDeviceGetNvLinkRemotePciInfo_v2 = remote
        fake.nvmlDeviceGetFieldValues = field_values
        fake.c_nvmlGpuFabricInfoV_t = FabricInfoV
        fake.nvmlGpuFabricInfo_v2 = 0x2000024
        fake.nvmlDeviceGetGpuFabricInfoV = fabric
        fake.nvmlDeviceGetVbiosVersion = lambda handle: (gpu(handle), "96.00.89.00.01")[1]
        fake.nvmlDeviceGetVirtualizationMode = lambda handle: gpu(handle).virtualization_mode
        fake.nvmlDeviceGetEccMode = lambda handle: [int(gpu(handle).ecc_enabled)] * 2
        fake.nvmlDeviceGetTotalEccErrors = total_ecc
        fake.nvmlDeviceGetRemappedRows = lambda handle: gpu(handle).remapped_rows
        fake.nvmlDeviceGetRetiredPages = retired
        fake.nvmlDeviceGetRetiredPagesPendingStatus = retired_pending
        fake.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: gpu(handle).clocks_mask
        fake.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(gpu=gpu(handle).utilization, memory=0)
        fake.nvmlDeviceGetPcieReplayCounter = lambda handle: gpu(handle).pcie_replays
        return fake


def _no_dmabuf(address: str) -> bool | None:
    return None


def test_two_healthy_gpus_one_lost(tmp_path: Path) -> None:
    (tmp_path / "bus/pci/devices/0000:2a:00.0").mkdir(parents=True)
    (tmp_path / "bus/pci/devices/0000:2a:00.0/numa_node").write_text("1\n")
    fake = FakeNvml([
        FakeGpu("NVIDIA H100 80GB HBM3", "GPU-aaaa", "00000000:18:00.0", 0, nvlinks=[1] * 17 + [0],
                replay_errors={3: 12}, fabric_state=3, virtualization_mode=1),
        FakeGpu("NVIDIA H100 80GB HBM3", "GPU-bbbb", "00000000:2A:00.0", None),      # NUMA from sysfs, no NVLink
        FakeGpu("NVIDIA H100 80GB HBM3", "GPU-cccc", "00000000:3B:00.0", 0, lost=True),
    ])
    seen: list[str] = []

    def dmabuf(address: str) -> bool | None:
        seen.append(address)
        return address == "0000:18:00.0"

    report, status = collect_nvml(fake.module(), sys=RootedSysTree(tmp_path), dmabuf_query=dmabuf)
    assert status == "ok"
    assert report is not None
    assert (report["driver_version"], report["cuda_driver_version"], report["nvml_version"]) == (
        "580.95.05", 13000, "13.580.95.05")
    first, second, lost = report["gpus"]
    links = first.pop("nvlink").pop("links")
    assert first == {
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aaaa", "pci_bus_id": "00000000:18:00.0",
        "numa_node": 0, "pcie": {"cur_gen": 1, "max_gen": 5, "gpu_max_gen": 5, "cur_width": 16, "max_width": 16},
        # Fabric info v2 (this fake has no v3 struct): a health mask of 0 (bandwidth bits
        # NOT_SUPPORTED), no health summary; no platform call in these bindings: null, no error.
        "fabric": {"state": "completed", "status": "success", "clique_id": 7,
                   "cluster_uuid": "01020304-0506-0708-090a-0b0c0d0e0f10", "health_summary": None,
                   "bandwidth": "not_supported"},
        "platform": None, "vbios_version": "96.00.89.00.01", "virtualization_mode": "passthrough",
        "performance_state": 8, "dmabuf_supported": True, "errors": {},
        # CONTRACT 7.2: Hopper has row remapping, no page retirement (NOT_SUPPORTED: null, no error).
        "memory": {"ecc_mode": "enabled", "volatile_uncorrected": 0, "aggregate_uncorrected": 0,
                   "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
                   "retired_pages": None},
        "recovery_action": "none", "clocks_event_reasons": ["gpu_idle"], "utilization_gpu": 0,
        "pcie_replay_counter": 0,
    }
    # CONTRACT 6.2: per link state, speed (MB/s), the far end's PCI address, the error counters.
    assert len(links) == 18 and links[17]["state"] == "inactive" and links[17]["remote_pci_bus_id"] is None
    assert links[0] == {"link": 0, "state": "active", "speed_mbps": 26562, "remote_pci_bus_id": "0000:05:00.0",
                        "errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}}
    assert links[3]["errors"]["replay"] == 12 and links[1]["remote_pci_bus_id"] is None    # FFFFFFFF:FF:FF.0
    assert second["numa_node"] == 1 and second["errors"] == {}
    assert second["nvlink"] == {"active": 0, "total": 0, "version": None, "links": []}
    assert second["fabric"]["state"] == "not_supported" and second["virtualization_mode"] == "none"
    assert second["dmabuf_supported"] is False
    assert lost["name"] is None and lost["pcie"]["cur_gen"] is None and lost["performance_state"] is None
    assert report["device_count"] == 3
    assert lost["memory"] is None and lost["recovery_action"] is None and lost["utilization_gpu"] is None
    assert lost["errors"]["name"] == "GPU is lost"
    assert lost["errors"]["pcie.max_width"] == "GPU is lost"
    assert lost["nvlink"] == {"active": None, "total": None, "version": None, "links": None}
    assert lost["errors"]["nvlink"].startswith("link 0: GPU is lost; link 1: GPU is lost")
    assert seen == ["0000:18:00.0", "0000:2a:00.0"]
    assert fake.calls == ["init", "shutdown"]


def test_health_fields_of_a_sick_gpu() -> None:
    """A pending remap, uncorrectable errors, a reboot the driver asks for, HW slowdown under
    load, PCIe replays and page retirement on an older GPU: each read the way NVML gives it."""
    fake = FakeNvml([
        FakeGpu("NVIDIA H100 80GB HBM3", "GPU-a", "00000000:18:00.0", 0, volatile_uncorrected=2,
                remapped_rows=(1, 2, 1, 0), recovery_action=2, clocks_mask=0x8 | 0x80, utilization=97,
                pcie_replays=5),
        FakeGpu("Tesla V100-SXM2-32GB", "GPU-b", "00000000:05:00.0", 0, retired_pages=True,
                recovery_action=None, remapped_rows=()),
        FakeGpu("NVIDIA H100 80GB HBM3", "GPU-c", "00000000:2A:00.0", 0, ecc_enabled=False, recovery_action=9),
    ])
    report, _status = collect_nvml(fake.module(), dmabuf_query=_no_dmabuf)
    assert report is not None
    sick, old, no_ecc = report["gpus"]
    assert sick["memory"] == {"ecc_mode": "enabled", "volatile_uncorrected": 2, "aggregate_uncorrected": 4,
                              "remapped_rows": {"correctable": 1, "uncorrectable": 2, "pending": True, "failure": False},
                              "retired_pages": None}
    assert sick["recovery_action"] == "node_reboot"
    assert sick["clocks_event_reasons"] == ["hw_slowdown", "hw_power_brake_slowdown"]
    assert (sick["utilization_gpu"], sick["pcie_replay_counter"]) == (97, 5)
    assert old["memory"]["retired_pages"] == {"sbe": 1, "dbe": 2, "pending": False}
    assert old["memory"]["remapped_rows"] is None and old["recovery_action"] is None
    assert no_ecc["memory"]["ecc_mode"] == "disabled" and no_ecc["memory"]["volatile_uncorrected"] is None
    assert no_ecc["recovery_action"] == "unknown_9"
    assert all(gpu["errors"] == {} for gpu in report["gpus"])


def test_no_driver() -> None:
    fake = FakeNvml([], init_error=NVMLError_LibraryNotFound(12))
    assert collect_nvml(fake.module(), dmabuf_query=_no_dmabuf) == (None, "no NVIDIA driver: NVML Shared Library Not Found")
    fake = FakeNvml([], init_error=NVMLError(18))
    assert collect_nvml(fake.module(), dmabuf_query=_no_dmabuf) == (
        None, "NVML failed to start: Driver/library version mismatch")


def test_missing_function_in_old_bindings() -> None:
    fake = FakeNvml([FakeGpu("Tesla V100", "GPU-v", "00000000:05:00.0", 0)])
    module = fake.module()
    del module.nvmlDeviceGetGpuMaxPcieLinkGeneration
    report, _ = collect_nvml(module, dmabuf_query=_no_dmabuf)
    assert report is not None
    gpu = report["gpus"][0]
    assert gpu["pcie"]["gpu_max_gen"] is None
    assert "not available" in gpu["errors"]["pcie.gpu_max_gen"]
    assert fake.calls == ["init", "shutdown"]


def test_real_pynvml_without_driver_says_why() -> None:
    report, status = collect_nvml()
    # This test machine has no NVIDIA driver; on one that has, the report must be a dict.
    if report is None:
        assert status.startswith("no NVIDIA driver") or status.startswith("NVML failed")
    else:
        assert status == "ok" and isinstance(report["gpus"], list)


def test_dmabuf_query_without_libcuda() -> None:
    query = CudaDmabufQuery("libcuda-netdoctor-absent.so.1")
    assert query("0000:18:00.0") is None
    assert query("0000:18:00.0") is None


def _sysfs(root: Path, rdma: tuple[str, ...] = (), modules: tuple[str, ...] = ()) -> RootedSysTree:
    """RDMA devices bound to their driver as sysfs has them: `efa_0` to efa, the others to mlx5_core."""
    (root / "class").mkdir(parents=True)
    for number, device in enumerate(rdma):
        address = f"0000:{0x18 + number:02x}:00.0"
        driver = "efa" if device.startswith("efa") else "mlx5_core"
        (root / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        function = root / "devices" / "pci0000:00" / address
        function.mkdir(parents=True)
        (function / "driver").symlink_to(f"../../../bus/pci/drivers/{driver}")
        (root / "class" / "infiniband" / device).mkdir(parents=True)
        (root / "class" / "infiniband" / device / "device").symlink_to(f"../../../devices/pci0000:00/{address}")
    for module in ("nvidia", *modules):
        (root / "module" / module).mkdir(parents=True)
    return RootedSysTree(root)


@pytest.mark.parametrize(("rdma", "modules", "asked"), [
    ((), (), False),                                    # no RDMA NIC: gpudirect skips
    (("mlx5_0",), (), True),                            # DMA-BUF is the only path left to judge
    (("efa_0",), ("gdrdrv",), True),                    # GDRCopy is no GPUDirect RDMA path
    (("mlx5_0",), ("nvidia_peermem",), False),          # the module is the path: gpudirect passes on it
    (("mlx5_0",), ("nv_peer_mem",), False),
    # EFA never uses the module: without a P2P provider, DMA-BUF on every GPU is its path.
    (("efa_0",), ("nvidia_peermem",), True),
    (("mlx5_0", "efa_0"), ("nvidia_peermem",), True),
])
def test_dmabuf_is_asked_only_where_it_can_decide(rdma: tuple[str, ...], modules: tuple[str, ...], asked: bool,
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The question costs the process's first cuInit (0.23-0.5 s of driver time, serialised with
    NVML's calls): asked where a check can use the answer, else null, libcuda never loaded."""
    sys = _sysfs(tmp_path, rdma, modules)
    assert dmabuf_can_matter(sys) is asked
    loaded: list[str] = []
    monkeypatch.setattr(nvml_module.ctypes, "CDLL", lambda name: loaded.append(name) or _NoCuda())
    fake = FakeNvml([FakeGpu("NVIDIA H100 80GB HBM3", "GPU-aaaa", "00000000:18:00.0", 0)])
    report, status = collect_nvml(fake.module(), sys=sys)
    assert status == "ok" and report is not None
    assert loaded == (["libcuda.so.1"] if asked else [])
    assert report["gpus"][0]["dmabuf_supported"] is None


class _NoCuda:
    """libcuda whose cuInit fails: the query answers None (asked, not known)."""

    def cuInit(self, flags: ctypes.c_uint) -> int:  # noqa: N802 - the driver's name
        return 100      # CUDA_ERROR_NO_DEVICE


@pytest.mark.parametrize(("fixture", "asked"), [
    ("dgx-h100", False),            # nvidia_peermem loaded: gpudirect passes on it
    ("dgx-h100-no-peermem", True),
    ("aws-p5", True),               # EFA: its own P2P provider, else DMA-BUF
    ("pcie-only", False),           # no RDMA device
])
def test_dmabuf_question_on_the_fixture_nodes(fixture: str, asked: bool) -> None:
    root = Path(__file__).parent / "fixtures" / "nodes" / fixture / "sys"
    assert dmabuf_can_matter(RootedSysTree(root)) is asked
