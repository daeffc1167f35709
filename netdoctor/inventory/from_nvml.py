"""Facts from NVML (nvml.json in a snapshot): the GPUs as the driver sees them."""

from __future__ import annotations

import math
import time
from typing import Any

from netdoctor.errors import NetdoctorError
from netdoctor.host.budgets import SourceTooLarge
from netdoctor.host.types import NodeSource
from netdoctor.inventory.merge import Draft, pci
from netdoctor.inventory.model import (
    NVLINK5_ERROR_COUNTERS,
    NVLINK_ERROR_COUNTERS,
    Gpu,
    GpuFabric,
    GpuMemoryHealth,
    GpuPlatform,
    NvLink,
    PcieLink,
    SourceState,
)
from netdoctor.util import Background, DeadlineExceeded

# CONTRACT 8's values of `fabric.health_summary` and `fabric.bandwidth`; any other is unknown (None).
HEALTH_SUMMARIES = frozenset({"healthy", "unhealthy", "limited_capacity", "not_supported"})
FABRIC_BANDWIDTHS = frozenset({"full", "degraded", "not_supported"})


# NVML is asked in a daemon thread (netdoctor.util.Background), from the moment discovery
# starts, so it runs beside netlink and the sysfs reads; a wedged driver can block an NVML
# call in the kernel for good, and nobody waits for the thread past the deadline.
NVML_TIMEOUT = "NVML did not answer before the discovery deadline (a wedged GPU or driver?)"


def ask_nvml(source: NodeSource) -> Background:
    """The node's NVML report (and its status text), asked now."""
    return Background("netdoctor-nvml", source.nvml)


def read_nvml(draft: Draft, wait_until: float | None = None, question: Background | None = None) -> None:
    """GPUs, driver and CUDA versions, GPU PCIe links and NVLinks from the NVML report (`question`:
    asked already); an NVML that does not answer by `wait_until` is a timed-out source, and
    discovery goes on without it."""
    started = time.monotonic()
    try:
        report, status_text = (question or ask_nvml(draft.source)).result(wait_until)
    except NetdoctorError:
        raise
    except DeadlineExceeded:
        draft.status("nvml", SourceState.TIMEOUT, NVML_TIMEOUT, time.monotonic() - started)
        return
    except TimeoutError as error:
        draft.status("nvml", SourceState.TIMEOUT, str(error), time.monotonic() - started)
        return
    except SourceTooLarge as error:
        draft.status("nvml", SourceState.TOO_LARGE, str(error))
        return
    except Exception as error:   # NVML bindings raise their own types; never crash discovery
        draft.status("nvml", SourceState.ERROR, f"{type(error).__name__}: {error}")
        return
    if report is None:
        state = SourceState.MISSING if _means_no_driver(status_text) else SourceState.ERROR
        draft.status("nvml", state, status_text)
        return
    if not isinstance(report, dict) or not isinstance(report.get("gpus", []), list):
        draft.status("nvml", SourceState.PARSE_ERROR, "nvml report is not an object with a `gpus` list")
        return
    inventory = draft.inventory
    inventory.driver_version = _as(str, report.get("driver_version"))
    inventory.cuda_driver_version = _as(int, report.get("cuda_driver_version"))
    count = _as(int, report.get("device_count"))
    inventory.nvml_device_count = count if count is not None and count >= 0 else None
    errors: list[str] = []
    for entry in report.get("gpus", []):
        if not isinstance(entry, dict) or not isinstance(entry.get("index"), int):
            errors.append("GPU entry without an integer index")
            continue
        gpu = Gpu(index=entry["index"], sources=("nvml",))
        gpu.name = _as(str, entry.get("name"))
        gpu.uuid = _as(str, entry.get("uuid"))
        gpu.pci_address = pci(_as(str, entry.get("pci_bus_id")))
        numa = _as(int, entry.get("numa_node"))
        gpu.numa_node = numa if numa is not None and numa >= 0 else None
        gpu.performance_state = _as(int, entry.get("performance_state"))
        gpu.dmabuf_supported = _as(bool, entry.get("dmabuf_supported"))
        pcie = entry.get("pcie") if isinstance(entry.get("pcie"), dict) else {}
        if gpu.pci_address and any(pcie.get(key) is not None for key in ("cur_gen", "max_gen", "cur_width", "max_width")):
            gpu.pcie = PcieLink(
                address=gpu.pci_address,
                current_gen=_as(int, pcie.get("cur_gen")),
                max_gen=_as(int, pcie.get("max_gen")),
                current_width=_as(int, pcie.get("cur_width")),
                max_width=_as(int, pcie.get("max_width")),
                source="nvml",
            )
        nvlink = entry.get("nvlink") if isinstance(entry.get("nvlink"), dict) else {}
        gpu.nvlink_active = _as(int, nvlink.get("active"))
        gpu.nvlink_total = _as(int, nvlink.get("total"))
        gpu.nvlink_version = _as(int, nvlink.get("version"))
        gpu.nvlinks = _nvlinks(nvlink.get("links"), gpu.nvlink_version)
        gpu.fabric = _fabric(entry.get("fabric"))
        gpu.platform = _platform(entry.get("platform"))
        gpu.vbios_version = _as(str, entry.get("vbios_version"))
        gpu.virtualization_mode = _as(str, entry.get("virtualization_mode"))
        _health(gpu, entry)
        if isinstance(entry.get("errors"), dict) and entry["errors"]:
            gpu.nvml_errors = {str(key): str(value) for key, value in entry["errors"].items()}
            errors.append(f"GPU{gpu.index}: " + ", ".join(f"{key}: {value}" for key, value in sorted(entry["errors"].items())))
        inventory.gpus.append(gpu)
    inventory.gpus.sort(key=lambda gpu: gpu.index)
    draft.status("nvml", SourceState.OK, "; ".join(errors)[:500], time.monotonic() - started)


def _nvlinks(entries: Any, version: int | None) -> tuple[NvLink, ...]:
    """Per-link facts (CONTRACT 6.2 `nvlink.links`); entries that are not objects with an
    integer `link` are dropped, unknown values stay None."""
    if not isinstance(entries, list):
        return ()
    links: list[NvLink] = []
    for entry in entries:
        if not isinstance(entry, dict) or _as(int, entry.get("link")) is None:
            continue
        state = entry.get("state")
        counters = entry.get("errors") if isinstance(entry.get("errors"), dict) else {}
        errors = {name: _as(int, counters.get(name)) for name in NVLINK_ERROR_COUNTERS}
        # NVLink 5's counters only where the report carries them (CONTRACT 8): an older GPU's
        # links keep the four counters alone, as its history entries do.
        errors.update({name: _count(counters.get(name)) for name in NVLINK5_ERROR_COUNTERS if name in counters})
        links.append(NvLink(
            link=entry["link"], active={"active": True, "inactive": False}.get(state) if isinstance(state, str) else None,
            speed_mbps=_as(int, entry.get("speed_mbps")), version=version,
            remote_pci_bus_id=pci(_as(str, entry.get("remote_pci_bus_id"))),
            errors=errors, effective_ber=_ber(counters.get("effective_ber"))))
    return tuple(sorted(links, key=lambda link: link.link))


def _health(gpu: Gpu, entry: dict[str, Any]) -> None:
    """CONTRACT 7.2's health fields; any absent or mistyped value stays None (unknown)."""
    gpu.memory = _memory(entry.get("memory"))
    gpu.recovery_action = _as(str, entry.get("recovery_action"))
    reasons = entry.get("clocks_event_reasons")
    if isinstance(reasons, list) and all(isinstance(reason, str) for reason in reasons):
        gpu.clocks_event_reasons = tuple(reasons)
    utilization = _as(int, entry.get("utilization_gpu"))
    gpu.utilization_gpu = utilization if utilization is not None and 0 <= utilization <= 100 else None
    replays = _as(int, entry.get("pcie_replay_counter"))
    gpu.pcie_replay_counter = replays if replays is not None and replays >= 0 else None


def _memory(entry: Any) -> GpuMemoryHealth | None:
    if not isinstance(entry, dict):
        return None
    rows = entry.get("remapped_rows") if isinstance(entry.get("remapped_rows"), dict) else {}
    pages = entry.get("retired_pages") if isinstance(entry.get("retired_pages"), dict) else {}
    mode = _as(str, entry.get("ecc_mode"))
    return GpuMemoryHealth(
        ecc_mode=mode if mode in ("enabled", "disabled") else None,
        volatile_uncorrected=_count(entry.get("volatile_uncorrected")),
        aggregate_uncorrected=_count(entry.get("aggregate_uncorrected")),
        remapped_correctable=_count(rows.get("correctable")), remapped_uncorrectable=_count(rows.get("uncorrectable")),
        remap_pending=_as(bool, rows.get("pending")), remap_failure=_as(bool, rows.get("failure")),
        retired_sbe=_count(pages.get("sbe")), retired_dbe=_count(pages.get("dbe")),
        retired_pending=_as(bool, pages.get("pending")))


def _count(value: Any) -> int | None:
    number = _as(int, value)
    return number if number is not None and number >= 0 else None


def _fabric(entry: Any) -> GpuFabric | None:
    if not isinstance(entry, dict):
        return None
    summary, bandwidth = _as(str, entry.get("health_summary")), _as(str, entry.get("bandwidth"))
    return GpuFabric(state=_as(str, entry.get("state")), status=_as(str, entry.get("status")),
                     clique_id=_as(int, entry.get("clique_id")), cluster_uuid=_as(str, entry.get("cluster_uuid")),
                     health_summary=summary if summary in HEALTH_SUMMARIES else None,
                     bandwidth=bandwidth if bandwidth in FABRIC_BANDWIDTHS else None)


def _platform(entry: Any) -> GpuPlatform | None:
    """CONTRACT 8 `platform`; a value of the wrong type (or a byte out of range) is unknown."""
    if not isinstance(entry, dict):
        return None
    serial = _as(str, entry.get("chassis_serial_number"))
    return GpuPlatform(chassis_serial_number=serial if serial and serial.strip() else None,
                       slot_number=_byte(entry.get("slot_number")), tray_index=_byte(entry.get("tray_index")),
                       host_id=_byte(entry.get("host_id")), peer_type=_as(str, entry.get("peer_type")),
                       module_id=_byte(entry.get("module_id")))


def _byte(value: Any) -> int | None:
    number = _as(int, value)
    return number if number is not None and 0 <= number <= 0xFF else None


def _ber(value: Any) -> float | None:
    """A decoded BER: a finite float from 0 to 1 (an integer 0 too); anything else is unknown."""
    if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= 1:
        return None          # also an int too large for a float (a hostile snapshot)
    number = _as(float, value)
    return number if number is not None and math.isfinite(number) and 0.0 <= number <= 1.0 else None


def _as(kind: type, value: Any) -> Any:
    if value is None:
        return None
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, bool):
        return None
    return value if isinstance(value, kind) else None


def _means_no_driver(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in ("no nvidia driver", "not found", "librarynotfound", "driver not loaded", "no nvml.json"))
