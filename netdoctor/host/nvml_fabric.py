"""NVML's view of a GPU's place in an NVLink fabric, in the nvml.json shape (CONTRACT 6.2, 8).

`fabric`: nvmlDeviceGetGpuFabricInfoV with the v3 struct (health summary), else v2 (health
mask), else the older nvmlDeviceGetGpuFabricInfo. `platform`: nvmlDeviceGetPlatformInfo (v2
struct, else v1): where the GPU sits in its rack on GB200/GB300 NVL72 trays. Both fill a struct
the caller allocates. Each failure is null plus an entry in the GPU's "errors", never an
exception; NOT_SUPPORTED (a GPU outside any NVLink fabric or rack) is no error.
"""

from __future__ import annotations

import ctypes
from types import ModuleType
from typing import Any

_NOT_SUPPORTED = 3                  # NVML_ERROR_NOT_SUPPORTED
_FUNCTION_NOT_FOUND = 13            # NVML_ERROR_FUNCTION_NOT_FOUND: a driver older than the call
_VERSION_MISMATCH = 25              # NVML_ERROR_ARGUMENT_VERSION_MISMATCH: the driver does not know that struct version

# nvmlGpuFabricState_t (nvml.h NVML_GPU_FABRIC_STATE_*)
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
# nvml.h NVML_GPU_FABRIC_HEALTH_SUMMARY_* (fabric info v3's healthSummary)
HEALTH_SUMMARIES = {0: "not_supported", 1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
# nvml.h NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_*: NOT_SUPPORTED 0, TRUE 1 (degraded), FALSE 2;
# read as NVML_GPU_FABRIC_HEALTH_GET(mask, _DEGRADED_BW): (mask >> SHIFT 0) & WIDTH 0x3.
BANDWIDTH = {0: "not_supported", 1: "degraded", 2: "full"}
_DEGRADED_BW_SHIFT, _DEGRADED_BW_WIDTH = 0, 0x3
# nvmlPlatformInfo_t.peerType: "Platform indicated NVLink-peer type (e.g. switch present or not)";
# nvml.h publishes no values. nvidia-smi -q prints "Switch Connected" (tests/data/corpus/
# nvidia-smi-q-x, B200/GB200/GB300); NVIDIA's NVML mock pins 0 = Direct Connected, 1 = Switch
# Connected (NVIDIA/k8s-test-infra pkg/gpu/mocknvml/engine/platform.go @3b2b865). Others: null.
PEER_TYPES = {0: "direct_connected", 1: "switch_connected"}

_FABRIC_CALLS = (   # (function, struct, version constant), the newest first
    ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3"),
    ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t", "nvmlGpuFabricInfo_v2"),
    ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t", None))
_PLATFORM_STRUCTS = (("c_nvmlPlatformInfo_v2_t", "nvmlPlatformInfo_v2"), ("c_nvmlPlatformInfo_v1_t", "nvmlPlatformInfo_v1"))


def error_code(error: Exception) -> int | None:
    """The NVML return code an NVMLError carries (its `value`)."""
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else None


def _filled(nvml: ModuleType, function_name: str, struct_name: str, version_name: str | None,
            handle: Any) -> Any:
    """The struct filled by the call; raises what the call raises, None where the bindings lack either."""
    function, struct = getattr(nvml, function_name, None), getattr(nvml, struct_name, None)
    if function is None or struct is None:
        return None
    info = struct()
    if version_name is not None and hasattr(nvml, version_name):
        info.version = getattr(nvml, version_name)
    function(handle, ctypes.byref(info))
    return info


def fabric(nvml: ModuleType, handle: Any, errors: dict[str, str]) -> dict[str, Any] | None:
    """The GPU's registration with the NVSwitch fabric (CONTRACT 6.2 + 8 `fabric`)."""
    for function_name, struct_name, version_name in _FABRIC_CALLS:
        try:
            info = _filled(nvml, function_name, struct_name, version_name, handle)
        except nvml.NVMLError as error:
            if error_code(error) == _VERSION_MISMATCH and version_name is not None:
                continue        # a driver older than this struct version: ask with the next one
            if error_code(error) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED):
                return {"state": "not_supported", "status": None, "clique_id": None, "cluster_uuid": None,
                        "health_summary": None, "bandwidth": None}
            errors["fabric"] = str(error)
            return None
        except (TypeError, ValueError, AttributeError) as error:
            errors["fabric"] = f"{function_name}: {error}"
            return None
        if info is None:
            continue
        return _fabric_entry(info)
    errors["fabric"] = "nvmlDeviceGetGpuFabricInfo is not available in this nvidia-ml-py"
    return None


def _fabric_entry(info: Any) -> dict[str, Any]:
    fields = {name for name, *_ in getattr(type(info), "_fields_", ())}
    status = getattr(info, "status", None)
    # nvmlGpuFabricState_t and healthSummary are unsigned chars in nvml.h (some nvidia-ml-py
    # versions declare the state a c_uint): only the low byte is the value.
    state = getattr(info, "state", None)
    state = state & 0xFF if isinstance(state, int) else None
    uuid_bytes = _raw(info, "clusterUuid")      # a char array reads back cut at its first NUL
    mask = getattr(info, "healthMask", None) if "healthMask" in fields else None
    summary = getattr(info, "healthSummary", None) if "healthSummary" in fields else None
    return {"state": FABRIC_STATES.get(state, str(state)) if state is not None else None,
            "status": "success" if status == 0 else (None if status is None else f"error {status}"),
            "clique_id": getattr(info, "cliqueId", None),
            "cluster_uuid": uuid_text(uuid_bytes) if uuid_bytes else None,
            "health_summary": HEALTH_SUMMARIES.get(summary & 0xFF) if isinstance(summary, int) else None,
            "bandwidth": (BANDWIDTH.get((mask >> _DEGRADED_BW_SHIFT) & _DEGRADED_BW_WIDTH)
                          if isinstance(mask, int) else None)}


def uuid_text(raw: bytes) -> str:
    text = raw.hex().ljust(32, "0")[:32]
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def platform(nvml: ModuleType, handle: Any, errors: dict[str, str]) -> dict[str, Any] | None:
    """nvmlDeviceGetPlatformInfo (CONTRACT 8 `platform`); None where the GPU has none (NOT_SUPPORTED
    off NVL72 racks, a driver before 560, bindings without the call), without an error entry."""
    quiet = {getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
             getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND)}
    for struct_name, version_name in _PLATFORM_STRUCTS:
        try:
            info = _filled(nvml, "nvmlDeviceGetPlatformInfo", struct_name, version_name, handle)
        except nvml.NVMLError as error:
            if error_code(error) == _VERSION_MISMATCH:
                continue
            if error_code(error) not in quiet:
                errors["platform"] = str(error)
            return None
        except (TypeError, ValueError, AttributeError) as error:
            errors["platform"] = f"nvmlDeviceGetPlatformInfo: {error}"
            return None
        if info is not None:
            return _platform_entry(info)
    return None


def _platform_entry(info: Any) -> dict[str, Any]:
    # v2 names; v1 (deprecated) holds the same bytes under its older names (nvml.h: v1's
    # rackGuid is v2's chassisSerialNumber, 13 bytes on Blackwell; chassisPhysicalSlotNumber,
    # computeSlotIndex and nodeIndex are v2's slotNumber, trayIndex and hostId).
    fields = {name for name, *_ in getattr(type(info), "_fields_", ())}
    v2 = "chassisSerialNumber" in fields
    serial = _serial_text(_raw(info, "chassisSerialNumber" if v2 else "rackGuid"))
    module = _byte(info, "moduleId")
    if serial is None:
        # No chassis: the rack fields are N/A, as nvidia-smi prints them (a real H200 answers slot
        # 0, tray 0, host 1, peer 0 and nvidia-smi -q shows N/A for each; only Module Id is real:
        # tests/data/device/nvidia-h200/nvml-v4). HGX B200's -q -x prints the same.
        return {"chassis_serial_number": None, "slot_number": None, "tray_index": None, "host_id": None,
                "peer_type": None, "module_id": module}
    peer = _byte(info, "peerType")
    return {"chassis_serial_number": serial,
            "slot_number": _byte(info, "slotNumber" if v2 else "chassisPhysicalSlotNumber"),
            "tray_index": _byte(info, "trayIndex" if v2 else "computeSlotIndex"),
            "host_id": _byte(info, "hostId" if v2 else "nodeIndex"),
            "peer_type": PEER_TYPES.get(peer) if peer is not None else None,
            "module_id": module}


def _raw(info: Any, name: str) -> bytes:
    """A field's bytes as the driver wrote them: nvidia-ml-py's structs hand c_char fields back
    decoded as UTF-8 text (cut at a NUL, and an error for a byte past 0x7f)."""
    field = getattr(type(info), name, None)
    return ctypes.string_at(ctypes.addressof(info) + field.offset, field.size) if field is not None else b""


def _byte(info: Any, name: str) -> int | None:
    """An unsigned char field (nvidia-ml-py declares them c_char) as its number."""
    raw = _raw(info, name)
    return raw[0] if len(raw) == 1 else None


def _serial_text(raw: bytes) -> str | None:
    """The chassis serial up to its first NUL; None where empty (HGX boards print an empty one)
    or not printable ASCII."""
    text = raw.split(b"\0", 1)[0]
    if not text or not all(0x20 < byte < 0x7F for byte in text):
        return None
    return text.decode("ascii")
