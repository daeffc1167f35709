"""The GPU fabric and GPUDirect path part of the model: NVLink, NVSwitch fabric state, the
PCIe tree with ACS/ATS and IOMMU groups, kernel events, transceiver modules, services,
versions and first-hop neighbours (CONTRACT section 6).

As everywhere in the model, `None` means "no source told us", never "no" or zero. These
types are re-exported by `netdoctor.inventory.model`; checks import them from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from netdoctor.vocabulary import AcsControl, KernelEventKind, PciePortType


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


# ---- The PCIe tree (sysfs config space and/or lspci -vvv) ------------------------------


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


@dataclass(frozen=True)
class PciFunction:
    """One PCI function on a GPU/NIC path: the endpoint itself or a bridge above it."""

    address: str                        # canonical `0000:18:00.0`
    parent: str | None = None           # the bridge above it; None below the host bridge
    vendor_id: str | None = None        # `0x10de`
    device_id: str | None = None
    class_code: str | None = None       # `0x060400` (bridge), `0x030200` (3D controller), ...
    port_type: PciePortType | None = None
    link: PcieLink | None = None
    acs: AcsControl | None = None       # None: no ACS capability, or config space not read
    acs_read: bool = False              # whether config space (or lspci as root) was read for ACS
    ats_enabled: bool | None = None     # ATS capability's Enable bit
    iommu_group: int | None = None
    driver: str | None = None

    @property
    def is_bridge(self) -> bool:
        return self.class_code is not None and self.class_code.startswith("0x0604")


@dataclass(frozen=True)
class PciTree:
    """Every function on a GPU/NIC path to its root port, and the IOMMU groups' types."""

    functions: dict[str, PciFunction] = field(default_factory=dict)
    iommu_groups: dict[int, str] = field(default_factory=dict)    # group -> DMA | DMA-FQ | identity | ...
    iommu_read: bool = False            # /sys/kernel/iommu_groups was read (empty = no IOMMU)
    source: str = "sysfs"               # sysfs | lspci-vvv | sysfs+lspci-vvv

    def path_to_root(self, address: str) -> list[str]:
        """`address` and every bridge above it, nearest first (ends at the root port)."""
        path: list[str] = []
        current: str | None = address
        while current is not None and current not in path:
            path.append(current)
            function = self.functions.get(current)
            current = function.parent if function else None
        return path


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


# ---- Transceivers ----------------------------------------------------------------------


@dataclass(frozen=True)
class Thresholds:
    """A module's own alarm and warning limits for one reading."""

    high_alarm: float | None = None
    high_warning: float | None = None
    low_warning: float | None = None
    low_alarm: float | None = None


@dataclass(frozen=True)
class ModuleLane:
    lane: int
    rx_power_dbm: float | None = None
    tx_power_dbm: float | None = None
    bias_ma: float | None = None


@dataclass(frozen=True)
class TransceiverModule:
    """The cable or optical module in one port (mlxlink -m / ethtool -m)."""

    vendor: str | None = None
    part_number: str | None = None
    serial: str | None = None
    identifier: str | None = None          # QSFP112, OSFP, ...
    cable_type: str | None = None          # optical | passive copper | active copper ...
    temperature_c: float | None = None
    temperature_limits: Thresholds = field(default_factory=Thresholds)
    rx_power_limits: Thresholds = field(default_factory=Thresholds)    # dBm
    tx_power_limits: Thresholds = field(default_factory=Thresholds)    # dBm
    bias_limits: Thresholds = field(default_factory=Thresholds)        # mA
    lanes: tuple[ModuleLane, ...] = ()
    source: str = "mlxlink"


# ---- Services, versions, neighbours ----------------------------------------------------


@dataclass(frozen=True)
class ServiceState:
    """`systemctl show UNIT -p ActiveState,SubState,Result,NRestarts,ActiveEnterTimestamp`."""

    unit: str
    active_state: str | None = None        # active | inactive | failed | activating | ...
    sub_state: str | None = None           # running | dead | auto-restart | ...
    result: str | None = None              # success | exit-code | ...
    restarts: int | None = None
    active_since: datetime | None = None

    @property
    def loaded(self) -> bool:
        """systemd knows the unit (an unknown unit shows `inactive`/`dead` and no timestamp)."""
        return self.active_state is not None


@dataclass(frozen=True)
class Neighbor:
    """The first-hop switch of one port (contract 6.3 `neighbors`)."""

    switch_guid: str | None = None
    switch_name: str | None = None
    switch_port: int | None = None
    source: str = ""
