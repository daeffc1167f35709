"""The GPU fabric part of the model: NVLink, NVSwitch fabric state, PCIe links, kernel
events and the fabric's services (CONTRACT section 6).

As everywhere in the model, `None` means "no source told us", never "no" or zero. These
types are re-exported by `netdoctor.inventory.model`; checks import them from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from netdoctor.vocabulary import KernelEventKind


# ---- NVLink and the NVSwitch fabric (nvml.json "nvlink" / "fabric", nvidia-smi nvlink -s) ----

# The NVLink error counters by their contract names (nvml.json `errors`).
NVLINK_ERROR_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


@dataclass(frozen=True)
class NvLink:
    """One NVLink of one GPU."""

    link: int
    active: bool | None = None              # NVML state: True = active
    speed_mbps: int | None = None           # NVML's per-link speed field, MB/s per direction
    version: int | None = None              # nvmlNvlinkVersion_t (6 = NVLink 4.0)
    remote_pci_bus_id: str | None = None    # canonical `0000:05:00.0`; None where NVML gives none
    errors: dict[str, int | None] = field(default_factory=dict)   # NVLINK_ERROR_COUNTERS -> value


@dataclass(frozen=True)
class GpuFabric:
    """nvmlDeviceGetGpuFabricInfo(V): the GPU's registration with the NVSwitch fabric."""

    state: str | None = None        # not_supported | not_started | in_progress | completed
    status: str | None = None       # success, or the NVML return name of the failure
    clique_id: int | None = None
    cluster_uuid: str | None = None


# ---- PCIe links ------------------------------------------------------------------------


@dataclass(frozen=True)
class PcieLink:
    """A PCIe function's link. Speeds in GT/s (2.5, 5, 8, 16, 32, 64); gen derived from them."""

    address: str                      # canonical `0000:18:00.0`
    current_gen: int | None = None
    max_gen: int | None = None
    current_width: int | None = None
    max_width: int | None = None
    current_speed_gts: float | None = None
    max_speed_gts: float | None = None
    source: str = "sysfs"             # sysfs | nvml


# ---- The kernel log --------------------------------------------------------------------


@dataclass(frozen=True)
class KernelEvent:
    kind: KernelEventKind
    subject: str                # PCI address (`0000:18:00.0`), netdev or RDMA device
    time: datetime | None       # UTC; None where it could not be placed in time
    code: int | None = None     # the Xid / SXid number
    message: str = ""           # the line, as logged (cut)
    fatal: bool | None = None   # SXid: Fatal / Non-fatal as logged


@dataclass(frozen=True)
class KernelLog:
    """Events of this boot, as far as the log reached back."""

    events: tuple[KernelEvent, ...] = ()
    boot_time: datetime | None = None     # from /proc/uptime and the capture time
    first_time: datetime | None = None    # the earliest line read (older ones may be gone)
    source: str = "dmesg"


# ---- Services ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceState:
    """`systemctl show UNIT -p ActiveState,SubState,Result,NRestarts,ActiveEnterTimestamp`."""

    unit: str
    active_state: str | None = None        # active | inactive | failed | activating | ...
    sub_state: str | None = None           # running | dead | auto-restart | ...
    result: str | None = None              # success | exit-code | ...
    restarts: int | None = None
    active_since: datetime | None = None
