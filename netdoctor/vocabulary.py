"""The words every layer shares: IB port states, link layers, link rates, the GPU/NIC matrix,
kernel event kinds, NVLink versions.

Parsers produce them from tool output and the inventory is built of them, so they live
below both (netdoctor.inventory.model re-exports them).
"""

from __future__ import annotations

import enum
import sys
from dataclasses import field

from netdoctor.records import record


class _StrEnumBackport(str, enum.Enum):
    """Python 3.11's enum.StrEnum for 3.10: members are their str values, str() and format()
    give the value (3.10's `(str, Enum)` alone prints `Class.NAME`), auto() the lower-case name."""

    def __new__(cls, value: str) -> _StrEnumBackport:
        if not isinstance(value, str):
            raise TypeError(f"{value!r} is not a string")
        member = str.__new__(cls, value)
        member._value_ = value
        return member

    __str__ = str.__str__
    __format__ = str.__format__

    @staticmethod
    def _generate_next_value_(name: str, start: int, count: int, last_values: list[str]) -> str:
        return name.lower()


# Every enumeration of words below, and every other one in netdoctor, stands on this.
if sys.version_info >= (3, 11):
    from enum import StrEnum  # novermin: guarded, 3.10 takes the backport
else:
    StrEnum = _StrEnumBackport


class LinkLayer(StrEnum):
    INFINIBAND = "InfiniBand"
    ETHERNET = "Ethernet"
    # Neither: AWS EFA reports IB_LINK_LAYER_UNSPECIFIED (`Unspecified` in ibv_devinfo,
    # `Unknown` in sysfs, which prints that for anything not IB or Ethernet).
    UNSPECIFIED = "Unspecified"


class PortState(StrEnum):
    """IB logical port state (sysfs `state`, ibstat `State`, ibv_devinfo `state`)."""

    DOWN = "DOWN"
    INIT = "INIT"
    ARMED = "ARMED"
    ACTIVE = "ACTIVE"
    ACTIVE_DEFER = "ACTIVE_DEFER"


class PhysState(StrEnum):
    """IB physical port state (sysfs `phys_state`, ibstat `Physical state`)."""

    SLEEP = "Sleep"
    POLLING = "Polling"
    DISABLED = "Disabled"
    TRAINING = "PortConfigurationTraining"
    LINK_UP = "LinkUp"
    LINK_ERROR_RECOVERY = "LinkErrorRecovery"
    PHY_TEST = "PhyTest"


@record(frozen=True)
class LinkRate:
    """A port's negotiated rate: `400 Gb/sec (4X NDR)` -> gbps=400, width=4, speed="NDR".

    `lane_gbps` is the per-lane signalling rate where a source gives it (iblinkinfo,
    ibv_devinfo `active_speed`). `speed` is the IB speed class name (SDR..XDR) or None.
    """

    gbps: float | None
    width: int | None = None
    speed: str | None = None
    lane_gbps: float | None = None

    def describe(self) -> str:
        parts = []
        if self.width:
            parts.append(f"{self.width}X")
        if self.speed:
            parts.append(self.speed)
        rate = f"{self.gbps:g} Gb/s" if self.gbps is not None else "unknown rate"
        return f"{rate} ({' '.join(parts)})" if parts else rate


@record(frozen=True)
class Topology:
    """`nvidia-smi topo -m`: the connection type between every pair of devices.

    Device labels are as printed (`GPU0`, `NIC3`). `nic_names` maps `NIC3` -> `mlx5_3`
    (from the NIC legend; empty where the legend is missing).
    """

    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    links: dict[tuple[str, str], str]              # (GPU0, NIC3) -> "PIX"
    nic_names: dict[str, str] = field(default_factory=dict)
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, int | None] = field(default_factory=dict)

    def link(self, a: str, b: str) -> str | None:
        return self.links.get((a, b))

    def nic_label(self, hca_name: str) -> str | None:
        for label, name in self.nic_names.items():
            if name == hca_name:
                return label
        return None


class KernelEventKind(StrEnum):
    XID = "xid"                 # NVRM: Xid (PCI:0000:18:00): 79, ...
    SXID = "sxid"               # nvidia-nvswitch: SXid (PCI:...): 20034, ...
    LINK_DOWN = "link-down"     # mlx5_core / IB / netdev link down
    LINK_UP = "link-up"
    AER_CORRECTED = "aer-corrected"
    AER_UNCORRECTED = "aer-uncorrected"   # non-fatal or fatal
    NVLINK = "nvlink"           # NVLink errors the driver logs outside an Xid
    DRIVER_LOAD = "driver-load"  # NVRM: loading NVIDIA UNIX ... Kernel Module  <version>: Xids before it are history


# NVML's nvmlNvlinkVersion_t -> the NVLink generation (6 = NVLink 4.0 on H100/H200).
NVML_NVLINK_VERSIONS = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}


# NCCL's settings (CONTRACT 6.2 `nccl-env.json`): the system-wide config file NCCL reads,
# and the variables a capture keeps of its process (NCCL's, UCX's, libfabric's, the GPU
# selection; nothing else, so no secret of the environment ends up in a snapshot).
NCCL_ETC_CONF = "/etc/nccl.conf"
NCCL_KEPT_PREFIXES = ("NCCL_", "UCX_", "FI_")
NCCL_KEPT_NAMES = ("CUDA_VISIBLE_DEVICES",)


def nccl_env_kept(name: str) -> bool:
    """Whether a capture keeps this variable."""
    return name.startswith(NCCL_KEPT_PREFIXES) or name in NCCL_KEPT_NAMES


# nvmlGpuRecoveryAction_t (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, driver R575 and later), by the names
# nvml.json uses (CONTRACT 7.2); Xid 154 lines name the same values. 0-4 agree in every binding;
# 5-7 as nvidia-ml-py 13.615.71 (pynvml.py) names them: an earlier binding called 5 GPU_RESET_BUS.
# Every value but 0 fails, so a name that changes only changes the remedy's wording.
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset",
                    5: "recover_imex_domain", 6: "bus_reset", 7: "system_reboot"}
