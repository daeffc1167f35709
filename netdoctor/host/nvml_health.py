"""NVML's health fields of one GPU, in the nvml.json shape (CONTRACT 7.2).

Memory (ECC, row remapping, page retirement), the driver's recovery action, the clock event
reasons, utilization and the PCIe replay counter. Each read may fail on its own: a field NVML
does not support on this GPU (page retirement on Ampere and later, row remapping before it)
is null without an error entry; any other failure is null plus an entry in the GPU's
"errors" (through the caller), never an exception.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from netdoctor.vocabulary import RECOVERY_ACTIONS

# nvmlClocksEventReasons bits (nvml.h), by the contract's names.
CLOCKS_EVENT_REASONS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                        (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                        (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
                        (0x100, "display_clock_setting"))
_FI_RECOVERY_ACTION = 230           # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
_NVML_SUCCESS = 0
_NOT_SUPPORTED = 3                  # NVML_ERROR_NOT_SUPPORTED

def text_of(value: Any) -> Any:
    # Older nvidia-ml-py versions return bytes for strings.
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


class NvmlCaller:
    """Calls NVML functions, turning each failure into None plus an entry in `errors`; with
    `quiet_not_supported`, NOT_SUPPORTED is a plain None (a field this GPU does not have)."""

    def __init__(self, nvml: ModuleType, errors: dict[str, str], *, quiet_not_supported: bool = False) -> None:
        self.nvml = nvml
        self.errors = errors
        self.quiet_not_supported = quiet_not_supported

    def __call__(self, field: str, function_name: str, *args: Any) -> Any:
        function = getattr(self.nvml, function_name, None)
        if function is None:
            self.errors[field] = f"{function_name} is not available in this nvidia-ml-py"
            return None
        try:
            return text_of(function(*args))
        except self.nvml.NVMLError as error:
            not_supported = getattr(error, "value", None) == getattr(self.nvml, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED)
            if not (self.quiet_not_supported and not_supported):
                self.errors[field] = str(error)
            return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _memory(call: NvmlCaller, nvml: ModuleType, handle: Any) -> dict[str, Any] | None:
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    modes = call("memory.ecc_mode", "nvmlDeviceGetEccMode", handle)
    current = modes[0] if isinstance(modes, list | tuple) and modes else None
    uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    ecc_on = current == enabled
    # ECC counters exist only with ECC on; asking otherwise is NOT_SUPPORTED noise.
    volatile = call("memory.volatile_uncorrected", "nvmlDeviceGetTotalEccErrors", handle, uncorrected,
                    getattr(nvml, "NVML_VOLATILE_ECC", 0)) if ecc_on else None
    aggregate = call("memory.aggregate_uncorrected", "nvmlDeviceGetTotalEccErrors", handle, uncorrected,
                     getattr(nvml, "NVML_AGGREGATE_ECC", 1)) if ecc_on else None
    rows = call("memory.remapped_rows", "nvmlDeviceGetRemappedRows", handle)
    remapped = None
    if isinstance(rows, list | tuple) and len(rows) >= 4:
        remapped = {"correctable": _int(rows[0]), "uncorrectable": _int(rows[1]),
                    "pending": bool(rows[2]), "failure": bool(rows[3])}
    sbe = call("memory.retired_pages.sbe", "nvmlDeviceGetRetiredPages", handle,
               getattr(nvml, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0))
    dbe = call("memory.retired_pages.dbe", "nvmlDeviceGetRetiredPages", handle,
               getattr(nvml, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))
    pending = call("memory.retired_pages.pending", "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    retired = None
    if sbe is not None or dbe is not None or pending is not None:
        retired = {"sbe": len(sbe) if isinstance(sbe, list | tuple) else None,
                   "dbe": len(dbe) if isinstance(dbe, list | tuple) else None,
                   "pending": (pending == enabled) if pending is not None else None}
    memory = {"ecc_mode": None if current is None else ("enabled" if ecc_on else "disabled"),
              "volatile_uncorrected": _int(volatile), "aggregate_uncorrected": _int(aggregate),
              "remapped_rows": remapped, "retired_pages": retired}
    return memory if any(value is not None for value in memory.values()) else None


def _recovery_action(nvml: ModuleType, handle: Any, errors: dict[str, str]) -> str | None:
    function = getattr(nvml, "nvmlDeviceGetFieldValues", None)
    if function is None:
        return None
    try:
        values = function(handle, [_FI_RECOVERY_ACTION])
    except (nvml.NVMLError, TypeError, ValueError) as error:
        errors["recovery_action"] = str(error)
        return None
    value = values[0] if values else None
    if value is None or getattr(value, "nvmlReturn", None) != _NVML_SUCCESS:
        return None                 # the driver has no recovery action field (before R575)
    number = getattr(getattr(value, "value", None), "uiVal", None)
    if not isinstance(number, int):
        return None
    return RECOVERY_ACTIONS.get(number, f"unknown_{number}")


def _clocks_event_reasons(call: NvmlCaller, handle: Any) -> list[str] | None:
    mask = call("clocks_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if mask is None:
        call.errors.pop("clocks_event_reasons", None)
        # Drivers before R535 name it "throttle reasons"; the bits are the same.
        mask = call("clocks_event_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if not isinstance(mask, int):
        return None
    return [name for bit, name in CLOCKS_EVENT_REASONS if mask & bit]


def gpu_health(nvml: ModuleType, handle: Any, errors: dict[str, str]) -> dict[str, Any]:
    """The CONTRACT 7.2 per-GPU health fields of one opened GPU."""
    call = NvmlCaller(nvml, errors, quiet_not_supported=True)
    utilization = call("utilization_gpu", "nvmlDeviceGetUtilizationRates", handle)
    return {
        "memory": _memory(call, nvml, handle),
        "recovery_action": _recovery_action(nvml, handle, errors),
        "clocks_event_reasons": _clocks_event_reasons(call, handle),
        "utilization_gpu": _int(getattr(utilization, "gpu", None)),
        "pcie_replay_counter": _int(call("pcie_replay_counter", "nvmlDeviceGetPcieReplayCounter", handle)),
    }


HEALTH_FIELDS = ("memory", "recovery_action", "clocks_event_reasons", "utilization_gpu", "pcie_replay_counter")
