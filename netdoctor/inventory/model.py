"""One typed model of the node, joined from every source (sysfs, NVML, ibstat, ...).

Checks read only this. Every fact that may be missing is Optional: `None` means "no
source told us", never "zero". Which sources ran, and how, is in `Inventory.sources`;
where two sources disagree about one fact the disagreement is kept in `conflicts`.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

# The fabric part of the model and the shared vocabulary, also importable from here.
from netdoctor.inventory.fabric_model import (  # noqa: F401  (re-exported)
    NVLINK5_ERROR_COUNTERS,
    NVLINK_ERROR_COUNTERS,
    NVLINK_GENERATIONS,
    AcsControl,
    GpuFabric,
    GpuPlatform,
    KernelEvent,
    KernelEventKind,
    KernelLog,
    ModuleDiagnostics,
    ModuleReading,
    NvLink,
    PciPathFunction,
    PcieLink,
    ServiceState,
)
from netdoctor.parsers.fi_info import FiProvider
from netdoctor.parsers.lldpctl import LldpNeighbor
from netdoctor.parsers.mlxlink_counters import PhyCounters
from netdoctor.parsers.nccl_env import NcclSettings
from netdoctor.parsers.nvidia_imex_ctl import ImexDomain
from netdoctor.records import record
from netdoctor.vocabulary import LinkLayer, LinkRate, PhysState, PortState, StrEnum, Topology


class SourceState(StrEnum):
    OK = "ok"                  # ran and parsed
    MISSING = "missing"        # tool not installed / file or directory absent
    TIMEOUT = "timeout"        # killed at its timeout or at the run deadline
    ERROR = "error"            # non-zero exit, permission denied, NVML error, ...
    PARSE_ERROR = "parse-error"  # ran, but its output was not recognised
    NOT_RUN = "not-run"        # not attempted (not applicable, or deadline reached first)
    TOO_LARGE = "too-large"    # over its budget (netdoctor.host.budgets): not parsed


@record(frozen=True)
class SourceStatus:
    """What happened to one source of facts, e.g. `ibstat` or `nvml` or `sysfs:infiniband`."""

    name: str
    state: SourceState
    detail: str = ""
    duration_s: float | None = None

    @property
    def usable(self) -> bool:
        return self.state is SourceState.OK

    def reason(self) -> str:
        """A short human reason, e.g. `ibstat timed out after 5.0 s`."""
        words = {
            SourceState.OK: "ok",
            SourceState.MISSING: "is not available",
            SourceState.TIMEOUT: "timed out",
            SourceState.ERROR: "failed",
            SourceState.PARSE_ERROR: "gave output that could not be parsed",
            SourceState.NOT_RUN: "was not run",
            SourceState.TOO_LARGE: "is too large",
        }
        text = f"{self.name} {words[self.state]}"
        return f"{text}: {self.detail}" if self.detail else text


@record
class Port:
    hca: str
    number: int
    state: PortState | None = None
    phys_state: PhysState | None = None
    rate: LinkRate | None = None
    link_layer: LinkLayer | None = None
    lid: int | None = None
    sm_lid: int | None = None
    lmc: int | None = None
    port_guid: str | None = None
    capability_mask: int | None = None
    active_mtu: int | None = None     # bytes (256..4096); IB MTU negotiated on the link
    max_mtu: int | None = None
    netdev: str | None = None         # RoCE netdev or IPoIB interface of this port
    pkeys: tuple[str, ...] = ()       # non-zero P_Key table entries, e.g. ("0xffff",)
    # Port error/traffic counters under their sysfs names (symbol_error, link_downed, ...).
    # None = the source could not give a value (`N/A (no PMA)`).
    counters: dict[str, int | None] = field(default_factory=dict)
    counters_source: str | None = None   # "sysfs" | "perfquery"
    hw_counters: dict[str, int] = field(default_factory=dict)  # mlx5 hw_counters/
    # iblinkinfo: what the link could run at when it runs below it, and the peer.
    could_be: LinkRate | None = None
    peer: str | None = None
    neighbor: FirstHop | None = None     # the switch this port is cabled to (smpquery, iblinkinfo, LLDP)
    # RoCE GID table (the first GID_SLOTS_READ entries): index -> (type, address); None: not read.
    gids: dict[int, Gid] | None = None
    # RoCE traffic class: MLNX_OFED's per-port override of every QP's (`tc/N/traffic_class`,
    # `Global tclass=106`) and rdma_cm's default ToS (configfs `default_roce_tos`); None: not set or not exposed.
    traffic_class_override: int | None = None
    default_roce_tos: int | None = None
    sources: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.hca}:{self.number}"

    @property
    def is_active(self) -> bool:
        return self.state is PortState.ACTIVE


@record(frozen=True)
class FirstHop:
    """The switch at the other end of a port's cable (CONTRACT 6.3 `neighbors`).

    IB: the switch's node GUID (`0x` + 16 lower-case hex digits, as iblinkinfo prints it),
    its name (the hostname of an `MF0;leaf-07:MQM9700/U1` description) and the switch port
    the cable lands on. Ethernet (LLDP): the chassis id (a MAC for most switches), the system
    name, and the switch's port id (`Ethernet12`), a number only where it is one.
    """

    switch_guid: str | None
    switch_name: str | None
    switch_port: int | None
    source: str                              # smpquery | iblinkinfo | lldp
    description: str | None = None           # the full IB node description / LLDP port description
    port_id: str | None = None               # LLDP: the switch's own name for the port


# NCCL_IB_GID_INDEX values in use are small (3 on most RoCE v2 clusters); the table has 256.
GID_SLOTS_READ = 16


@record(frozen=True)
class Gid:
    """One RoCE GID entry: `RoCE v2` / `IB/RoCE v1` and its address (`::ffff:10.0.0.5` for IPv4)."""

    kind: str | None
    address: str | None

    @property
    def has_address(self) -> bool:
        """A usable entry: not the all-zero address of an empty slot."""
        return bool(self.address) and set(self.address.replace(":", "")) - {"0"} != set()


@record
class Hca:
    name: str                         # mlx5_0
    ca_type: str | None = None        # MT4129
    model: str | None = None          # ConnectX-7 (from ca_type / vendor_part_id)
    firmware: str | None = None
    hardware_version: str | None = None
    node_guid: str | None = None
    sys_image_guid: str | None = None
    board_id: str | None = None
    vendor_part_id: int | None = None
    pci_address: str | None = None
    numa_node: int | None = None
    driver: str | None = None         # the PCI function's kernel driver: mlx5_core, efa
    pci_vendor: str | None = None     # `0x15b3` (Mellanox), `0x1d0f` (Amazon: EFA)
    pci_device: str | None = None     # `0x1021`, `0xefa1`
    # AWS EFA: the GPUDirect providers its driver was built with (`p2p` of the PCI function,
    # e.g. ("NVIDIA",)); None: not read, or not EFA.
    p2p_providers: tuple[str, ...] | None = None
    # SR-IOV: the physical function's PCI address when this device is a virtual function
    # (a VF's link is the PF's; it is judged through the PF).
    physical_function: str | None = None
    # A function of the ConnectX-7 "bridge" through which an HGX B200/B300 baseboard's NVSwitches
    # are managed (PCI VPD `SMDL=SW_MNG`, or a sibling of such a function; netdoctor.inventory.bridge);
    # False: VPD read, no such mark; None: not known (VPD is root-only).
    switch_management: bool | None = None
    ports: dict[int, Port] = field(default_factory=dict)
    sources: tuple[str, ...] = ()

    @property
    def is_virtual_function(self) -> bool:
        return self.physical_function is not None


@record(frozen=True)
class QosConfig:
    """mlnx_qos view of a netdev: trust mode and which priorities have PFC on."""

    trust: str | None = None          # "pcp" | "dscp"
    pfc_enabled: tuple[int, ...] = ()  # priorities 0..7 with PFC enabled
    dcbx_mode: str | None = None
    # The priority of each DSCP 0..63 (index) as mlnx_qos prints it with trust dscp
    # (`prio:3 dscp:24,25,...`); (): not printed
    dscp_to_priority: tuple[int, ...] = ()

    def priority_of(self, dscp: int) -> int | None:
        """The priority a packet of this DSCP lands on; None where the map was not printed."""
        return self.dscp_to_priority[dscp] if len(self.dscp_to_priority) == 64 and 0 <= dscp < 64 else None


@record
class Netdev:
    name: str
    mtu: int | None = None
    operstate: str | None = None      # up | down | unknown | ...
    speed_mbps: int | None = None
    mac: str | None = None
    arp_type: int | None = None       # 1 = Ethernet, 32 = InfiniBand (IPoIB)
    pci_address: str | None = None
    rdma_port: str | None = None      # "mlx5_0:1" when the netdev belongs to an RDMA port
    qos: QosConfig | None = None
    # ECN for RoCE per priority, from /sys/class/net/<if>/ecn/roce_{np,rp}/enable/<prio>
    ecn_np: dict[int, bool] = field(default_factory=dict)
    ecn_rp: dict[int, bool] = field(default_factory=dict)
    # A bond (RoCE LAG, mlx5_bond_N): its slaves carry the PFC/ECN settings.
    bond_slaves: tuple[str, ...] = ()
    driver: str | None = None         # the PCI function's kernel driver: gve (GCP gVNIC), ena, mlx5_core
    numa_node: int | None = None
    addresses: tuple[str, ...] | None = None   # IP addresses (`10.0.0.1/24`); None: not read
    # `ethtool -S`: the physical-layer, pause and per-priority counters (from_tools.PHY_STATS
    # names which); None: not read. They run since the driver loaded.
    stats: dict[str, int] | None = None
    # The DSCP and 802.1p priority this port's CNPs are sent with (MLNX_OFED's ecn/roce_np/cnp_dscp,
    # cnp_802p_prio); None: not exposed.
    cnp_dscp: int | None = None
    cnp_802p_prio: int | None = None
    sources: tuple[str, ...] = ()

    @property
    def is_ipoib(self) -> bool:
        return self.arp_type == 32


@record(frozen=True)
class GpuMemoryHealth:
    """NVML's memory health of one GPU (CONTRACT 7.2 `memory`); None: NVML did not say."""

    ecc_mode: str | None = None                # "enabled" | "disabled" (current mode)
    volatile_uncorrected: int | None = None    # uncorrectable ECC errors since the driver loaded
    aggregate_uncorrected: int | None = None   # ... over the GPU's life
    remapped_correctable: int | None = None    # rows remapped for correctable errors
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None          # a remap waits for a GPU reset
    remap_failure: bool | None = None          # a remap failed: no spare row left
    retired_sbe: int | None = None             # pages retired (pre-Ampere page retirement)
    retired_dbe: int | None = None
    retired_pending: bool | None = None


@record
class Gpu:
    index: int
    name: str | None = None           # NVIDIA H100 80GB HBM3
    uuid: str | None = None
    pci_address: str | None = None    # canonical `0000:18:00.0`
    numa_node: int | None = None      # the CPU's node the GPU hangs off (PCI function's numa_node; topo -m)
    memory_numa_node: int | None = None   # Grace (GH200/GB200/GB300): the GPU memory's own node (NVML: 2/10/18/26)
    cpu_affinity: str | None = None   # from nvidia-smi topo, e.g. `0-47,96-143`
    pcie: PcieLink | None = None
    performance_state: int | None = None  # P-state number (0 = max performance, 8 = idle)
    nvlink_active: int | None = None
    nvlink_total: int | None = None
    nvlink_version: int | None = None     # NVML nvmlDeviceGetNvLinkVersion of the first active link
    dmabuf_supported: bool | None = None
    nvlinks: tuple[NvLink, ...] = ()      # per link (NVML; nvidia-smi nvlink -s where NVML gave none)
    fabric: GpuFabric | None = None
    platform: GpuPlatform | None = None      # NVML platform info (NVL72 trays); None where the GPU has none
    vbios_version: str | None = None
    virtualization_mode: str | None = None   # none | passthrough | vgpu | host_vgpu | ... (NVML)
    memory: GpuMemoryHealth | None = None
    recovery_action: str | None = None       # none | gpu_reset | node_reboot | drain_p2p | drain_and_reset
    clocks_event_reasons: tuple[str, ...] | None = None   # NVML's set bits: gpu_idle, hw_slowdown, ...
    utilization_gpu: int | None = None       # percent of the last sample period a kernel ran
    pcie_replay_counter: int | None = None   # PCIe link replays since the driver loaded
    nvml_errors: dict[str, str] = field(default_factory=dict)   # NVML field -> error ("GPU is lost")
    sources: tuple[str, ...] = ()

    @property
    def lost(self) -> bool:
        """NVML answers GPU_IS_LOST: the GPU fell off the PCIe bus (Xid 79)."""
        return any("gpu is lost" in error.lower() for error in self.nvml_errors.values())

    @property
    def label(self) -> str:
        return f"GPU{self.index}"


@record(frozen=True)
class Conflict:
    """Two sources disagree about one fact: kept, not silently resolved."""

    subject: str
    fact: str
    values: dict[str, Any]            # source name -> value it reported
    chosen: str | None = None         # which source's value the inventory uses


@record(frozen=True)
class PeerMemory:
    """GPUDirect RDMA readiness facts (kernel modules from /sys/module)."""

    nvidia_peermem: bool | None = None
    nv_peer_mem: bool | None = None
    gdrdrv: bool | None = None


@record(frozen=True)
class Dmi:
    """The platform as its firmware names it (/sys/class/dmi/id); None: not readable."""

    sys_vendor: str | None = None      # NVIDIA, Supermicro, Dell Inc.
    product_name: str | None = None    # DGXH100
    board_name: str | None = None
    board_vendor: str | None = None


@record(frozen=True)
class ProcessVisibility:
    """What may hide GPUs from this process on purpose (snapshot.json `visibility`): the
    variables that narrow CUDA/NVML, a SLURM job or step this process runs in, a container.
    None: not known (an older snapshot, or not read)."""

    cuda_visible_devices: str | None = None    # CUDA_VISIBLE_DEVICES (CUDA's view; NVML ignores it)
    nvidia_visible_devices: str | None = None  # NVIDIA_VISIBLE_DEVICES (the container runtime's)
    slurm_job_id: str | None = None            # SLURM_JOB_ID: this process runs inside a job
    slurm_step_id: str | None = None
    slurm_gpus: str | None = None              # SLURM_STEP_GPUS, else SLURM_JOB_GPUS: the GPUs the job was given
    container: str | None = None               # /.dockerenv, /run/.containerenv, or the container variable
    cgroup: str | None = None                  # this process's cgroup path (/proc/self/cgroup)
    kubernetes_service_host: str | None = None  # KUBERNETES_SERVICE_HOST: set in every Kubernetes pod
    # Bus address -> whether this process could open the GPU's /dev/nvidia<minor>: "ok", "absent"
    # (not in its /dev: a container), "denied" (a device cgroup), "unknown". The only evidence that
    # a GPU is hidden on purpose; the fields above only say by whom. None: not recorded.
    device_nodes: dict[str, str] | None = field(default=None, hash=False)


@record
class Inventory:
    host: str
    captured_at: str                  # ISO 8601 UTC
    boot_id: str | None = None
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    gpus: list[Gpu] = field(default_factory=list)
    nvml_device_count: int | None = None       # NVML's device count, GPUs it cannot open included
    dmi: Dmi | None = None
    hcas: list[Hca] = field(default_factory=list)
    netdevs: list[Netdev] = field(default_factory=list)
    pcie: dict[str, PcieLink] = field(default_factory=dict)   # sysfs links of GPUs and NICs
    # NVIDIA GPU functions on the PCI bus (address -> PCI device id), whatever the driver
    # says; None when the PCI bus was not read (e.g. a snapshot without it).
    pci_gpus: dict[str, str] | None = None
    # AWS EFA functions on the PCI bus (address -> PCI device id), bound to a driver or not;
    # None when the PCI bus was not read.
    pci_efa: dict[str, str] | None = None
    # Mellanox/NVIDIA networking physical functions on the PCI bus (address -> (PCI device id,
    # bound driver or None)), with or without an RDMA device; None when the PCI bus was not read.
    pci_nics: dict[str, tuple[str, str | None]] | None = None
    visibility: ProcessVisibility | None = None   # what may hide GPUs from this process (inventory)
    topology: Topology | None = None
    peer_memory: PeerMemory = field(default_factory=PeerMemory)
    nvidia_module_loaded: bool | None = None   # /sys/module/nvidia: the kernel driver is loaded
    # The GPU fabric and the GPUDirect path (CONTRACT section 6).
    nvswitches: tuple[str, ...] | None = None  # NVSwitch PCI functions seen (None: PCI bus not read)
    kernel_log: KernelLog | None = None
    services: dict[str, ServiceState] = field(default_factory=dict)   # unit -> state
    kernel_release: str | None = None          # proc/sys/kernel/osrelease
    kernel_cmdline: str | None = None          # proc/cmdline (iommu=, pci= settings)
    uptime_s: float | None = None              # proc/uptime when captured
    # GPU/NIC functions and every bridge above them up to the root port; None: not read
    # (or a snapshot that kept no tree).
    pci_tree: dict[str, PciPathFunction] | None = None
    virtualization: str | None = None          # "none" on bare metal, else what says it is a VM; None: unknown
    transceivers: dict[str, ModuleDiagnostics] = field(default_factory=dict)   # RDMA port (or netdev) -> module
    phy: dict[str, PhyCounters] = field(default_factory=dict)   # RDMA port -> its physical layer (mlxlink -c)
    nccl: NcclSettings | None = None           # NCCL's settings (nccl-env); None: not captured
    ofed_version: str | None = None            # ofed_info -s: `MLNX_OFED_LINUX-23.10-1.1.9.0`
    rdma_driver_version: str | None = None     # /sys/module/mlx5_core/version (MLNX_OFED's, older kernels)
    fabric_manager_version: str | None = None  # nv-fabricmanager --version: `580.95.05`
    imex: ImexDomain | None = None             # nvidia-imex-ctl -N: the NVLink domain as this node sees it
    lldp: dict[str, LldpNeighbor] = field(default_factory=dict)   # local netdev -> what lldpd heard there
    # AWS EFA: libfabric's efa provider entries (`fi_info -p efa`; None: not run or failed), its
    # version (`fi_info --version`), the efa module's version (/sys/module/efa/version).
    libfabric_providers: tuple[FiProvider, ...] | None = None
    libfabric_version: str | None = None
    efa_driver_version: str | None = None
    sources: dict[str, SourceStatus] = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)

    # -- lookups checks need often -------------------------------------------------
    @property
    def ports(self) -> list[Port]:
        return [port for hca in self.hcas for port in hca.ports.values()]

    def hca(self, name: str) -> Hca | None:
        return next((hca for hca in self.hcas if hca.name == name), None)

    def port(self, name: str) -> Port | None:
        hca_name, _, number = name.rpartition(":")
        hca = self.hca(hca_name)
        return hca.ports.get(int(number)) if hca and number.isdigit() else None

    def netdev(self, name: str) -> Netdev | None:
        return next((netdev for netdev in self.netdevs if netdev.name == name), None)

    def source(self, name: str) -> SourceStatus:
        return self.sources.get(name, SourceStatus(name, SourceState.NOT_RUN))
