"""The GPU fabric part of the model: NVLink, NVSwitch fabric state, PCIe links and the
PCIe tree above GPUs and NICs, port modules, kernel events and the fabric's services
(CONTRACT section 6).

As everywhere in the model, `None` means "no source told us", never "no" or zero. These
types are re-exported by `netdoctor.inventory.model`; checks import them from there.
"""

from __future__ import annotations

from dataclasses import field
from datetime import datetime

from netdoctor.parsers.pci_config import AcsControl
from netdoctor.parsers.transceiver import ModuleDiagnostics, ModuleReading  # noqa: F401  (re-exported)
from netdoctor.records import record
from netdoctor.vocabulary import KernelEventKind


# ---- NVLink and the NVSwitch fabric (nvml.json "nvlink" / "fabric", nvidia-smi nvlink -s) ----

# The NVLink error counters by their contract names (nvml.json `errors`): the data-link
# layer's counters of NVLink 1-4, and NVLink 5's symbol errors (CONTRACT 8; on NVLink 5 the
# older four may be null).
NVLINK_ERROR_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")
NVLINK5_ERROR_COUNTERS = ("symbol_errors",)
# nvmlNvlinkVersion_t (nvml.h NVML_NVLINK_VERSION_*) -> the NVLink generation it names.
NVLINK_GENERATIONS = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}


@record(frozen=True)
class NvLink:
    """One NVLink of one GPU."""

    link: int
    active: bool | None = None              # NVML state: True = active
    speed_mbps: int | None = None           # NVML's per-link speed field, MB/s per direction
    version: int | None = None              # nvmlNvlinkVersion_t (6 = NVLink 4.0)
    remote_pci_bus_id: str | None = None    # canonical `0000:05:00.0`; None where NVML gives none
    errors: dict[str, int | None] = field(default_factory=dict)   # NVLINK_ERROR_COUNTERS (+ NVLINK5_) -> value
    effective_ber: float | None = None      # NVLink 5: NVML's effective BER, decoded from its packed field


@record(frozen=True)
class GpuFabric:
    """nvmlDeviceGetGpuFabricInfo(V): the GPU's registration with the NVSwitch fabric."""

    state: str | None = None        # not_supported | not_started | in_progress | completed
    status: str | None = None       # success, or the NVML return name of the failure
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health_summary: str | None = None   # healthy | unhealthy | limited_capacity | not_supported (fabric info v3)
    bandwidth: str | None = None        # full | degraded | not_supported (the health mask's degraded-bandwidth bits)

    @property
    def in_nvlink_domain(self) -> bool:
        """A multi-node NVLink domain gives its GPUs a non-zero cluster UUID (and clique)."""
        uuid = self.cluster_uuid
        return bool(uuid) and uuid.replace("-", "").strip("0") != ""


@record(frozen=True)
class GpuPlatform:
    """nvmlDeviceGetPlatformInfo: where the GPU sits in its rack (GB200/GB300 NVL72; None elsewhere)."""

    chassis_serial_number: str | None = None
    slot_number: int | None = None      # the compute tray's physical slot in the rack
    tray_index: int | None = None
    host_id: int | None = None
    peer_type: str | None = None        # switch_connected | direct_connected | ...
    module_id: int | None = None        # the GPU's module within the tray


# ---- PCIe links ------------------------------------------------------------------------


@record(frozen=True)
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


@record(frozen=True)
class PciPathFunction:
    """A PCI function on a GPU's or NIC's way to its root port: the device or a bridge above it.

    Peer-to-peer traffic between two devices climbs their paths to the first bridge they
    share; ACS redirection on a port below that point sends it up to the root complex.
    """

    address: str                          # canonical `0000:17:00.0`
    parent: str | None = None             # the bridge above; None on a root bus
    vendor: str | None = None             # `0x1000`
    device: str | None = None
    pci_class: str | None = None          # `0x060400`
    port_type: str | None = None          # root_port | upstream_port | downstream_port | endpoint | ...
    link: PcieLink | None = None
    acs: AcsControl | None = None         # ACS control; None: no ACS capability, or not read
    has_acs: bool | None = None           # False: the whole config space was read and has none
    ats_enabled: bool | None = None       # None: no ATS capability, or not read
    iommu_group: str | None = None
    iommu_type: str | None = None         # DMA | DMA-FQ | identity | ... (kernel/iommu_groups/N/type)
    capabilities_from: str | None = None  # config (sysfs, root) | lspci; None: not read


# ---- The kernel log --------------------------------------------------------------------


@record(frozen=True)
class KernelEvent:
    kind: KernelEventKind
    subject: str                # PCI address (`0000:18:00.0`), netdev or RDMA device
    time: datetime | None       # UTC; None where it could not be placed in time
    code: int | None = None     # the Xid / SXid number
    message: str = ""           # the line, as logged (cut)
    fatal: bool | None = None   # SXid: Fatal / Non-fatal as logged


@record(frozen=True)
class KernelLog:
    """Events of this boot, as far as the log reached back."""

    events: tuple[KernelEvent, ...] = ()
    boot_time: datetime | None = None     # from /proc/uptime and the capture time
    first_time: datetime | None = None    # the earliest line read (older ones may be gone)
    source: str = "dmesg"
    skipped: int = 0                      # older event lines not read: the log held more than its parser reads
    whole_from: datetime | None = None    # with skipped: events from this time on were all read (None: not known)


# ---- Services ------------------------------------------------------------------------------


@record(frozen=True)
class ServiceState:
    """`systemctl show UNIT -p ActiveState,SubState,Result,NRestarts,ActiveEnterTimestamp,UnitFileState`."""

    unit: str
    active_state: str | None = None        # active | inactive | failed | activating | ...
    sub_state: str | None = None           # running | dead | auto-restart | ...
    result: str | None = None              # success | exit-code | ...
    restarts: int | None = None
    active_since: datetime | None = None
    unit_file_state: str | None = None     # enabled | disabled | ...; None: not installed or not read
