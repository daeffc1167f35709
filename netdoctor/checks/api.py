"""Check metadata, the context a check runs with, and the decorator that declares one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import Any, TypeVar

from netdoctor.errors import RulesError
from netdoctor.inventory.model import Inventory
from netdoctor.packs.model import RulePack
from netdoctor.probe.result import ProbeNotRun, ProbeResult
from netdoctor.records import record
from netdoctor.report.model import Finding, Status

T = TypeVar("T")

# What a rule pack may set a finding's status to (skip is decided by applicability, not thresholds).
JUDGED_STATUSES = frozenset({"pass", "warn", "fail", "unknown"})

# The closed vocabulary of inputs a check can declare; netdoctor.checks.needs says how
# each is judged available (pass through), not applicable (skip) or unavailable (unknown).
NEEDS = {
    "rdma": "RDMA devices and their ports (sysfs, ibstat, ibv_devinfo)",
    "ib": "InfiniBand link-layer ports",
    "roce": "Ethernet link-layer (RoCE) RDMA ports",
    "gpus": "NVIDIA GPUs (NVML or nvidia-smi)",
    "topology": "the GPU/NIC matrix of `nvidia-smi topo -m`",
    "pcie": "PCIe link facts of GPUs and NICs (sysfs or NVML)",
    "counters": "port error counters (sysfs counters/ or perfquery -x)",
    "qos": "PFC and trust settings of RoCE netdevs (mlnx_qos)",
    "probe": "the NCCL probe result",
    "nvlink": "each GPU's NVLinks: state, speed, version, error counters (NVML, nvidia-smi nvlink -s)",
    "fabric": "the NVSwitch fabric: GPU fabric state (NVML), fabric manager and IMEX services",
    "kernel-log": "kernel log events of this boot (dmesg / journalctl -k)",
    "phy": "each RDMA port's physical layer: BER before and after FEC, per-lane and symbol errors (mlxlink -c), the PHY, pause and per-priority counters of RoCE netdevs (ethtool -S)",
    "transceiver": "each RDMA port's module diagnostics: temperature, bias, optical power and limits (mlxlink -m, ethtool -m)",
    "pcie-tree": "the PCIe bridges above GPUs and NICs: port types, ACS, ATS, IOMMU groups (sysfs, lspci -vvv)",
    "nccl-env": "NCCL's settings: the environment and NCCL's config files (nccl-env.json)",
    "loopback": "traffic through each compute NIC, GPU memory to GPU memory (the NIC loopback)",
    "versions": "the OFED and fabric manager versions the report carries (ofed_info -s, nv-fabricmanager --version)",
    "efa": "AWS EFA's software path: libfabric's efa provider (fi_info -p efa) and NCCL's libfabric settings",
    "placement": "where each NIC sits beside the GPUs: the nvidia-smi topo -m matrix, else the PCIe tree (EFA)",
    "netdevs": "the node's network interfaces: driver, state, speed, MTU and place on the PCIe tree (netlink, sysfs)",
    "neighbors": "each port's first-hop switch (smpquery by direct route, a recorded iblinkinfo, LLDP from lldpctl)",
}


@record(frozen=True)
class Check:
    id: str
    description: str
    function: Callable[[CheckContext], Iterable[Finding]]
    needs: tuple[str, ...] = ()
    origin: str = "built-in"          # module or entry point it came from
    # Where reports list the check: lower first; checks without one follow, by id.
    order: int | None = None

    def __post_init__(self) -> None:
        unknown = [need for need in self.needs if need not in NEEDS]
        if unknown:
            raise ValueError(f"check {self.id!r} declares unknown needs {unknown}; known: {sorted(NEEDS)}")
        if self.order is not None and (isinstance(self.order, bool) or not isinstance(self.order, int)):
            raise ValueError(f"check {self.id!r}: order must be an integer, not {self.order!r}")


def check(check_id: str, description: str, needs: tuple[str, ...] = (),
          order: int | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a function as a check. The registry collects marked functions from plugin modules.

    `order` places the check in reports (netdoctor.checks.registry sorts by it).
    """

    def mark(function: Callable[..., Any]) -> Callable[..., Any]:
        declared = Check(check_id, description, function, tuple(needs), origin=function.__module__, order=order)
        function.__netdoctor_check__ = declared  # type: ignore[attr-defined]
        return function

    return mark


@record(frozen=True)
class CounterHistory:
    """Counter values of an earlier run of this node, for growth-rate judgement."""

    taken_at: str                      # ISO 8601 UTC
    elapsed_s: float                   # seconds between that run and this inventory
    ports: Mapping[str, Mapping[str, int | None]]   # "mlx5_0:1" -> counter -> value
    source: str = "state"              # "state" (state file) | "baseline" (--baseline snapshot)


def majority(counts: Counter[T], *, prefer: Callable[[T], Any] = lambda value: value) -> T | None:
    """The value most members share (a node's norm to judge the odd one out); ties go to
    the largest by `prefer`: the faster rate, the larger P_Key table (a missing one is the fault)."""
    if not counts:
        return None
    top = max(counts.values())
    return max((value for value, count in counts.items() if count == top), key=prefer)


@record
class CheckContext:
    """What a check function receives: the rule pack in force (`pack`: its port classes and
    every section) and this check's own section of it (`rules`)."""

    check_id: str
    inventory: Inventory
    pack: RulePack
    history: CounterHistory | None = None
    probe: ProbeResult | ProbeNotRun | None = None   # the probe checks' input (need_probe)
    loopback: Any = None      # nic-loopback's input (need_loopback): netdoctor.probe.loopback.LoopbackResult or ProbeNotRun
    rules: Mapping[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.rules = self.pack.section(self.check_id)

    def rule(self, key: str) -> Any:
        """A setting of this check's pack section. Thresholds live only in rule packs: a key the
        pack lacks is a RulesError (rules/default.toml has every key a built-in check reads)."""
        try:
            return self.rules[key]
        except KeyError:
            raise RulesError(f"rule pack {self.pack.name!r} has no setting [{self.check_id}] {key}") from None

    def finding(self, status: Status, subject: str, summary: str = "", *, evidence: dict[str, Any] | None = None,
                remedy: str | None = None, rule: str | None = None) -> Finding:
        return Finding(self.check_id, status, subject, summary, dict(evidence or {}), remedy, rule)

    def passed(self, subject: str, summary: str = "", **kwargs: Any) -> Finding:
        return self.finding(Status.PASS, subject, summary, **kwargs)

    def warn(self, subject: str, summary: str, **kwargs: Any) -> Finding:
        return self.finding(Status.WARN, subject, summary, **kwargs)

    def fail(self, subject: str, summary: str, **kwargs: Any) -> Finding:
        return self.finding(Status.FAIL, subject, summary, **kwargs)

    def unknown(self, subject: str, summary: str, **kwargs: Any) -> Finding:
        return self.finding(Status.UNKNOWN, subject, summary, **kwargs)

    def skip(self, subject: str, summary: str, **kwargs: Any) -> Finding:
        return self.finding(Status.SKIP, subject, summary, **kwargs)

    def severity(self, key: str) -> Status:
        """A status the rule pack sets (`low_width_severity = "fail"`); anything but a judged status is a RulesError."""
        value = self.rule(key)
        if value not in JUDGED_STATUSES:
            raise RulesError(f"[{self.check_id}] {key} = {value!r}: expected one of {sorted(JUDGED_STATUSES)}")
        return Status(value)

    def graded(self, status: str | Status, subject: str, summary: str, **kwargs: Any) -> Finding:
        """A finding whose status comes from the rule pack (e.g. `severity = "warn"`)."""
        if status not in JUDGED_STATUSES:
            raise RulesError(f"[{self.check_id}] status {status!r} from the rule pack: expected one of {sorted(JUDGED_STATUSES)}")
        return self.finding(Status(status), subject, summary, **kwargs)
