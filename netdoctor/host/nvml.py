"""NVML collector: what the NVIDIA driver says about each GPU, in the nvml.json shape.

Every NVML call may fail on its own (a GPU fallen off the bus answers GPU_IS_LOST,
vGPUs answer NOT_SUPPORTED for PCIe queries); each failure becomes null for that field
plus an entry in the GPU's "errors", never an exception. No NVIDIA driver at all gives
(None, reason). The fabric and platform facts are read in host/nvml_fabric.py, the health
fields in host/nvml_health.py.
"""

from __future__ import annotations

import ctypes
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from netdoctor.host.nvml_fabric import error_code
from netdoctor.host.nvml_fabric import fabric as _fabric
from netdoctor.host.nvml_fabric import platform as _platform
from netdoctor.host.nvml_health import HEALTH_FIELDS, NvmlCaller, gpu_health
from netdoctor.host.nvml_health import text_of as _text
from netdoctor.host.types import SysTree
from netdoctor.logging import get_logger
from netdoctor.util import canonical_pci_address

log = get_logger(__name__)

# cuda.h: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, since CUDA 11.7.
CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124
_NVLINK_ABSENT_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT")

DmabufQuery = Callable[[str], bool | None]
# The other GPUDirect RDMA path for IB and RoCE NICs: with one of these loaded, DMA-BUF decides
# nothing for them. EFA never uses them (its own P2P provider, else DMA-BUF).
PEER_MEMORY_MODULES = ("nvidia_peermem", "nv_peer_mem")


def dmabuf_can_matter(sys: SysTree) -> bool:
    """Can a check use the DMA-BUF answer on this node? It decides GPUDirect RDMA (`gpudirect`,
    `nic-loopback`'s causes) only where RDMA devices are (IB, RoCE and EFA are all under
    /sys/class/infiniband, where ibstat finds them too), and there for an EFA device, or where no
    peer-memory module is loaded. Asking costs this process's first cuInit: 0.23-0.5 s of driver
    time on 2x H200, which the driver serialises with the NVML calls (benchmarks/results/nvml.md)."""
    devices = sys.listdir("class/infiniband")
    if not devices:
        return False
    if any(sys.link_name(f"class/infiniband/{device}/device/driver") == "efa" for device in devices):
        return True
    return not any(sys.is_dir(f"module/{name}") for name in PEER_MEMORY_MODULES)


def _nvlink(nvml: ModuleType, handle: Any, errors: dict[str, str]) -> dict[str, Any]:
    """The GPU's NVLinks in the contract's shape (CONTRACT 6.2): counts, version, per link."""
    absent = {getattr(nvml, name, None) for name in _NVLINK_ABSENT_ERRORS} - {None}
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    maximum = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    links: list[dict[str, Any]] = []
    failures: list[str] = []
    for link in range(maximum):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError as error:
            # NOT_SUPPORTED / INVALID_ARGUMENT on an index: that link does not exist on
            # this GPU (PCIe cards have none, H100 SXM has 18, B200 has 18 of 36 indices).
            if error_code(error) not in absent:
                failures.append(f"link {link}: {error}")
            continue
        links.append({"link": link, "state": "active" if state == enabled else "inactive"})
    if failures:
        errors["nvlink"] = "; ".join(failures[:4]) + (f" (+{len(failures) - 4} more)" if len(failures) > 4 else "")
    if failures and not links:
        return {"active": None, "total": None, "version": None, "links": None}
    active = [entry["link"] for entry in links if entry["state"] == "active"]
    version = None
    if active:
        try:
            version = int(nvml.nvmlDeviceGetNvLinkVersion(handle, active[0]))
        except nvml.NVMLError as error:
            errors["nvlink_version"] = str(error)
    speeds = _nvlink_speeds(nvml, handle, [entry["link"] for entry in links])
    nvlink5 = version is not None and version >= _NVLINK_VERSION_5
    counters5 = _nvlink5_counters(nvml, handle, [entry["link"] for entry in links], errors) if nvlink5 else {}
    for entry in links:
        link = entry["link"]
        entry["speed_mbps"] = speeds.get(link)
        entry["remote_pci_bus_id"] = _remote_pci_bus_id(nvml, handle, link) if entry["state"] == "active" else None
        # On NVLink 5 the driver answers NOT_SUPPORTED for these four: null there (CONTRACT 8).
        entry["errors"] = {name: _link_counter(nvml, handle, link, counter) for name, counter in _NVLINK_COUNTERS}
        if nvlink5:
            entry["errors"].update(counters5.get(link, {"symbol_errors": None, "effective_ber": None}))
    return {"active": len(active), "total": len(links), "version": version, "links": links}


# nvmlNvLinkErrorCounter_t: the data-link layer's counters per link, by the contract's names.
_NVLINK_COUNTERS = (("replay", 0), ("recovery", 1), ("crc_flit", 2), ("crc_data", 3))
# NVML_FI_DEV_NVLINK_GET_SPEED: the link's speed in MB/s, per link through the field's scopeId.
_FI_NVLINK_SPEED = 164
# NVLink 5 (nvmlNvlinkVersion_t NVML_NVLINK_VERSION_5_0 = 7) counters, per link through scopeId
# (nvml.h "NVLink counter field id 201-225: Link ID needs to be specified in the scopeId field"):
# NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS ("Number of errors in rx symbols") and
# NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER ("Effective BER for effective errors", packed).
_NVLINK_VERSION_5 = 7
_FI_NVLINK_SYMBOL_ERRORS = 221
_FI_NVLINK_EFFECTIVE_BER = 220
# nvmlValueType_t -> the nvmlValue_t member that holds it (nvml.h NVML_VALUE_TYPE_*).
_VALUE_MEMBERS = {1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
_NO_REMOTE = "FFFFFFFF:FF:FF.0"


def _link_counter(nvml: ModuleType, handle: Any, link: int, counter: int) -> int | None:
    try:
        value = nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter)
    except nvml.NVMLError:
        return None        # not supported on this GPU/driver: unknown, not an error of the node
    return int(value) if isinstance(value, int) else None


def _remote_pci_bus_id(nvml: ModuleType, handle: Any, link: int) -> str | None:
    function = getattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None) or getattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", None)
    if function is None:
        return None
    try:
        bus_id = _text(getattr(function(handle, link), "busId", None))
    except nvml.NVMLError:
        return None
    # NVML answers FFFFFFFF:FF:FF.0 where the far end is no PCI device it can name.
    if not isinstance(bus_id, str) or bus_id.upper().startswith(_NO_REMOTE[:8]):
        return None
    return canonical_pci_address(bus_id)


def _nvlink_speeds(nvml: ModuleType, handle: Any, links: list[int]) -> dict[int, int]:
    """Per-link speed in MB/s where the driver reports it (one field-values call per GPU)."""
    function = getattr(nvml, "nvmlDeviceGetFieldValues", None)
    if function is None or not links:
        return {}
    try:
        values = function(handle, [(_FI_NVLINK_SPEED, link) for link in links])
    except (nvml.NVMLError, TypeError, ValueError):
        return {}
    speeds: dict[int, int] = {}
    for link, value in zip(links, values):
        if getattr(value, "nvmlReturn", 1) == 0:
            speed = getattr(getattr(value, "value", None), "uiVal", None)
            if isinstance(speed, int) and speed > 0:
                speeds[link] = speed
    return speeds


def _nvlink5_counters(nvml: ModuleType, handle: Any, links: list[int],
                      errors: dict[str, str]) -> dict[int, dict[str, Any]]:
    """Per link its NVLink 5 symbol errors and decoded effective BER: one field-values call for
    the GPU. A field the driver does not answer (NOT_SUPPORTED) is null, not an error."""
    function = getattr(nvml, "nvmlDeviceGetFieldValues", None)
    if function is None or not links:
        return {}
    try:
        values = list(function(handle, [(field, link) for link in links
                                        for field in (_FI_NVLINK_SYMBOL_ERRORS, _FI_NVLINK_EFFECTIVE_BER)]))
    except nvml.NVMLError as error:
        if error_code(error) != getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3):
            errors["nvlink_counters"] = str(error)
        return {}
    except (TypeError, ValueError) as error:
        errors["nvlink_counters"] = f"nvmlDeviceGetFieldValues: {error}"
        return {}
    counters: dict[int, dict[str, Any]] = {}
    for position, link in enumerate(links):
        pair = values[2 * position:2 * position + 2]
        symbol = _field_integer(pair[0]) if pair else None
        ber = _field_integer(pair[1]) if len(pair) > 1 else None
        counters[link] = {"symbol_errors": symbol, "effective_ber": nvlink_ber(ber) if ber is not None else None}
    return counters


def _field_integer(value: Any) -> int | None:
    """An nvmlFieldValue_t's integer value, by its valueType; None where the field did not answer."""
    if getattr(value, "nvmlReturn", 1) != 0:
        return None
    kind = getattr(value, "valueType", None)
    member = _VALUE_MEMBERS.get(kind) if isinstance(kind, int) else "ullVal"
    number = getattr(getattr(value, "value", None), member, None) if member else None
    return number if isinstance(number, int) and not isinstance(number, bool) and number >= 0 else None


def nvlink_ber(packed: int) -> float:
    """NVML's packed NVLink BER as a float. nvml.h (NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER): "Bit
    [0:7]: BER Exponent value, Bit [8:11]: BER MANTISSA value", extracted with
    NVML_NVLINK_ERROR_COUNTER_BER_GET(var, BER_EXP / BER_MANTISSA) (shift 0 width 0xff, shift 8
    width 0xf); the value is mantissa x 10^-exponent as DCGM computes it (NVIDIA/DCGM
    common/DcgmUtilities.cpp NvmlBerParser @72fa3fe). Mantissa 15 with exponent 255 is DCGM's
    "zero BER" (IsEffectiveBerThresholdExceeded: berZeroMantissa/berZeroExponent), the 15E-255
    that mlxlink also prints for a link with nothing counted: 0.0 here."""
    mantissa, exponent = (packed >> 8) & 0xF, packed & 0xFF
    if (mantissa, exponent) == (15, 255):
        return 0.0
    return mantissa * 10.0 ** -exponent


# nvmlGpuVirtualizationMode_t
_VIRTUALIZATION_MODES = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}


def _numa_node(call: NvmlCaller, handle: Any, pci_bus_id: str | None, sys: SysTree | None) -> int | None:
    value = call("numa_node", "nvmlDeviceGetNumaNodeId", handle)
    if value is None and pci_bus_id is not None and sys is not None:
        # Older drivers lack nvmlDeviceGetNumaNodeId; the kernel knows the same thing.
        address = canonical_pci_address(pci_bus_id)
        text = sys.read(f"bus/pci/devices/{address}/numa_node") if address else None
        try:
            value = int(text) if text is not None else None
        except ValueError:
            value = None
        if value is not None:
            call.errors.pop("numa_node", None)
    # -1: the platform does not report NUMA affinity (single socket, or firmware omits it).
    return value if isinstance(value, int) and value >= 0 else None


def _gpu(nvml: ModuleType, index: int, sys: SysTree | None, dmabuf_query: DmabufQuery | None) -> dict[str, Any]:
    errors: dict[str, str] = {}
    call = NvmlCaller(nvml, errors)
    gpu: dict[str, Any] = {"index": index}
    handle = call("handle", "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        gpu.update({"name": None, "uuid": None, "pci_bus_id": None, "numa_node": None, "pcie": None,
                    "nvlink": None, "fabric": None, "platform": None, "vbios_version": None, "virtualization_mode": None,
                    "performance_state": None, "dmabuf_supported": None,
                    **dict.fromkeys(HEALTH_FIELDS), "errors": errors})
        return gpu
    gpu["name"] = call("name", "nvmlDeviceGetName", handle)
    gpu["uuid"] = call("uuid", "nvmlDeviceGetUUID", handle)
    pci_info = call("pci_bus_id", "nvmlDeviceGetPciInfo", handle)
    gpu["pci_bus_id"] = _text(getattr(pci_info, "busId", None)) if pci_info is not None else None
    gpu["numa_node"] = _numa_node(call, handle, gpu["pci_bus_id"], sys)
    # GPUs drop to a lower PCIe generation when idle to save power: cur_gen below
    # max_gen at P8 is normal; performance_state lets the check tell.
    gpu["pcie"] = {
        "cur_gen": call("pcie.cur_gen", "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "max_gen": call("pcie.max_gen", "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "gpu_max_gen": call("pcie.gpu_max_gen", "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
        "cur_width": call("pcie.cur_width", "nvmlDeviceGetCurrPcieLinkWidth", handle),
        "max_width": call("pcie.max_width", "nvmlDeviceGetMaxPcieLinkWidth", handle),
    }
    gpu["nvlink"] = _nvlink(nvml, handle, errors)
    gpu["fabric"] = _fabric(nvml, handle, errors)
    gpu["platform"] = _platform(nvml, handle, errors)
    gpu["vbios_version"] = call("vbios_version", "nvmlDeviceGetVbiosVersion", handle)
    mode = call("virtualization_mode", "nvmlDeviceGetVirtualizationMode", handle)
    gpu["virtualization_mode"] = _VIRTUALIZATION_MODES.get(mode, str(mode)) if mode is not None else None
    state = call("performance_state", "nvmlDeviceGetPerformanceState", handle)
    gpu["performance_state"] = int(state) if state is not None else None
    gpu.update(gpu_health(nvml, handle, errors))
    gpu["dmabuf_supported"] = None
    if dmabuf_query is not None and gpu["pci_bus_id"]:
        address = canonical_pci_address(gpu["pci_bus_id"])
        gpu["dmabuf_supported"] = dmabuf_query(address) if address else None
    gpu["errors"] = errors
    return gpu


def collect_nvml(nvml_module: ModuleType | None = None, sys: SysTree | None = None,
                 dmabuf_query: DmabufQuery | None = None) -> tuple[dict[str, Any] | None, str]:
    """The NVML report and `ok`, or (None, why) when there is no usable NVIDIA driver.

    `nvml_module` defaults to pynvml (nvidia-ml-py); `sys` is used for the NUMA node
    when NVML cannot tell it; `dmabuf_query` defaults to asking libcuda where the answer can
    matter (`dmabuf_can_matter`; always without `sys`), else `dmabuf_supported` stays null.
    """
    if nvml_module is None:
        try:
            nvml_module = importlib.import_module("pynvml")
        except ImportError:
            return None, "nvidia-ml-py (pynvml) is not installed"
    if dmabuf_query is None:
        if sys is None or dmabuf_can_matter(sys):
            dmabuf_query = CudaDmabufQuery()
        else:
            log.debug("DMA-BUF not asked: no RDMA device, or a peer-memory module is loaded")
    nvml = nvml_module
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        # LibraryNotFound / DriverNotLoaded: no driver. A version mismatch (driver
        # upgraded without reboot) is worth its own words.
        log.info("NVML not available", error=str(error))
        return None, f"no NVIDIA driver: {error}" if _is_no_driver(nvml, error) else f"NVML failed to start: {error}"
    try:
        errors: dict[str, str] = {}
        call = NvmlCaller(nvml, errors)
        report: dict[str, Any] = {
            "driver_version": call("driver_version", "nvmlSystemGetDriverVersion"),
            "cuda_driver_version": call("cuda_driver_version", "nvmlSystemGetCudaDriverVersion"),
            "nvml_version": call("nvml_version", "nvmlSystemGetNVMLVersion"),
        }
        count = call("device_count", "nvmlDeviceGetCount")
        # NVML's count includes GPUs it cannot open (each then an entry with errors): with the
        # PCI bus it tells a lost GPU from one this process is not allowed to see.
        report["device_count"] = int(count) if isinstance(count, int) else None
        # One GPU after another: read from a thread per GPU, or with cuInit beside them, the calls
        # took as long in all (the driver answers one at a time: benchmarks/results/nvml.md).
        report["gpus"] = [_gpu(nvml, index, sys, dmabuf_query) for index in range(int(count or 0))]
        report["errors"] = errors
        return report, "ok"
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as error:
            log.debug("nvmlShutdown failed", error=str(error))


def _is_no_driver(nvml: ModuleType, error: Exception) -> bool:
    kinds = tuple(kind for kind in (getattr(nvml, "NVMLError_LibraryNotFound", None),
                                    getattr(nvml, "NVMLError_DriverNotLoaded", None)) if isinstance(kind, type))
    return bool(kinds) and isinstance(error, kinds)


class CudaDmabufQuery:
    """Asks the CUDA driver (libcuda.so.1, through ctypes) whether a GPU supports DMA-BUF.

    Only cuInit and attribute queries: no CUDA context is created, so no GPU memory is
    taken and running jobs are not disturbed. Any failure (no libcuda, old driver
    without attribute 124) answers None.
    """

    def __init__(self, library_name: str = "libcuda.so.1") -> None:
        self.library_name = library_name
        self._library: ctypes.CDLL | None = None
        self._unusable = False

    def _load(self) -> ctypes.CDLL | None:
        if self._library is None and not self._unusable:
            try:
                library = ctypes.CDLL(self.library_name)
                if library.cuInit(ctypes.c_uint(0)) != 0:
                    raise OSError("cuInit failed")
                self._library = library
            except (OSError, AttributeError) as error:
                log.debug("libcuda not usable for the DMA-BUF query", error=str(error))
                self._unusable = True
        return self._library

    def __call__(self, pci_address: str) -> bool | None:
        library = self._load()
        if library is None:
            return None
        device = ctypes.c_int()
        if library.cuDeviceGetByPCIBusId(ctypes.byref(device), pci_address.encode()) != 0:
            return None
        value = ctypes.c_int()
        if library.cuDeviceGetAttribute(ctypes.byref(value), CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, device) != 0:
            return None
        return bool(value.value)
