"""The rule pack in force and its port classes: what every check judges against.

A pack is loaded by netdoctor.packs.load and chosen by netdoctor.packs.select; checks get
it as `CheckContext.pack` and their own section of it as `CheckContext.rules`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from netdoctor.errors import RulesError
from netdoctor.records import record
from netdoctor.util import natural_key

if TYPE_CHECKING:     # a pack is read without the inventory model (`fleet report` reads its settings)
    from netdoctor.inventory.model import Hca, Inventory, Port

ROLES = ("compute", "storage", "management", "unused")
# Tables of a pack that are not check sections.
STRUCTURE_TABLES = ("pack", "grade", "port-classes")
# Settings of fleet commands, not of a node check (`fleet probe`'s verdicts, drift, rail wiring).
FLEET_TABLES = ("fleet-probe", "fleet-drift", "fleet-rails")


@record(frozen=True)
class PortClass:
    """How a pack classes ports: the first class (in file order) whose match fields all hold wins.

    A match field left empty does not constrain. `role` decides how down ports are judged:
    ports of an `unused` class are skipped when down, never failed.
    """

    name: str
    role: str = "compute"
    expected_rate_gbps: float | None = None
    expected_width: int | None = None
    link_layer: str | None = None
    hca_types: tuple[str, ...] = ()
    hca_names: tuple[str, ...] = ()        # globs, e.g. "mlx5_bond_*"
    near_gpu: bool | None = None           # the HCA sits on a GPU's PCIe switch (PIX/PXB)
    # The HCA is a function of the ConnectX-7 bridge to an HGX B200/B300 baseboard's NVSwitches
    # (Hca.switch_management); false also holds where that is not known (no VPD, no inference).
    switch_management: bool | None = None
    description: str = ""

    def matches(self, port: Port, hca: Hca, inventory: Inventory | None = None) -> bool:
        """All given match fields hold. `near_gpu` needs the inventory; where it cannot be told
        (no inventory, no matrix and no NUMA facts) it does not constrain, so the first class in
        file order (the compute rails, by convention) takes the port and judges it strictly.

        A `compute` class that does not ask `switch_management` never takes a port of the
        NVSwitch bridge: it carries Fabric Manager's and the NVLink subnet manager's traffic at
        100 Gb/s, never a job's (NVIDIA Fabric Manager User Guide, "NVIDIA HGX B200/B300 GPU
        Baseboard")."""
        if self.switch_management is not None:
            if bool(hca.switch_management) != self.switch_management:
                return False
        elif hca.switch_management and self.role == "compute":
            return False
        if self.link_layer is not None:
            if port.link_layer is None or str(port.link_layer).lower() != self.link_layer.lower():
                return False
        if self.hca_types and hca.ca_type not in self.hca_types:
            return False
        if self.hca_names and not any(fnmatch.fnmatchcase(hca.name, pattern) for pattern in self.hca_names):
            return False
        if self.near_gpu is not None and inventory is not None:
            from netdoctor.inventory.queries import gpu_proximity

            near = gpu_proximity(inventory, hca).near
            if near is not None and near != self.near_gpu:
                return False
        return True


# The class of a bridge port no class of the pack takes (a pack written before Blackwell).
SWITCH_MANAGEMENT_CLASS = PortClass(
    name="nvswitch-management", role="management", switch_management=True,
    description="the ConnectX-7 bridge to the baseboard's NVSwitches (Fabric Manager and NVLSM): not a rail")


def or_bridge_class(found: PortClass | None, hca: Hca) -> PortClass | None:
    """`found`, else SWITCH_MANAGEMENT_CLASS for a port of the NVSwitch bridge: never an unclassed rail."""
    return SWITCH_MANAGEMENT_CLASS if found is None and hca.switch_management else found


def role_of(port_class: PortClass | None) -> str:
    """A port no class matches is a compute port (the doc's rule: judged strictly)."""
    return port_class.role if port_class is not None else "compute"


@record
class RulePack:
    """The rule pack in force, after `extends` and site overrides."""

    name: str
    description: str
    selection_reason: str
    files: list[Path]
    data: dict[str, Any]
    port_classes: list[PortClass] = field(default_factory=list)

    def section(self, check_id: str) -> Mapping[str, Any]:
        """One check's settings, read-only (a check never changes its pack)."""
        values = self.data.get(check_id, {})
        if not isinstance(values, dict):
            raise RulesError(f"rule pack {self.name!r}: [{check_id}] must be a table, not {type(values).__name__}")
        return MappingProxyType(dict(values))

    def check_sections(self) -> list[str]:
        """The names of the pack's check sections (every table but [pack], [grade], [port-classes])."""
        return [name for name, value in self.data.items()
                if name not in STRUCTURE_TABLES + FLEET_TABLES and isinstance(value, dict)]

    @property
    def required(self) -> frozenset[str]:
        return frozenset(self.data.get("grade", {}).get("required", []))

    @property
    def shadow(self) -> frozenset[str]:
        return frozenset(self.data.get("grade", {}).get("shadow", []))

    def is_shadow(self, check_id: str, rule: str | None = None) -> bool:
        """True when the whole check or this `check.rule` key is in `[grade] shadow`."""
        if check_id in self.shadow:
            return True
        if rule is None:
            return False
        key = rule if rule.startswith(f"{check_id}.") else f"{check_id}.{rule}"
        return key in self.shadow

    def port_class(self, port: Port, hca: Hca, inventory: Inventory | None = None) -> PortClass | None:
        """The first class (file order) that matches; `inventory` is needed for `near_gpu`. A port of
        the NVSwitch bridge that no class takes is SWITCH_MANAGEMENT_CLASS's, never an unclassed rail."""
        return or_bridge_class(next((port_class for port_class in self.port_classes
                                     if port_class.matches(port, hca, inventory)), None), hca)

    def port_class_ignoring_placement(self, port: Port, hca: Hca) -> PortClass | None:
        """The class the port would get if `near_gpu` were not asked.

        Tells a misplaced rail NIC (a compute-class card moved away from its GPU, which
        gpu-nic-affinity must still see and fail) from a storage NIC of another kind.
        """
        return or_bridge_class(next((port_class for port_class in self.port_classes
                                     if replace(port_class, near_gpu=None).matches(port, hca)), None), hca)

    def classified_ports(self, inventory: Inventory) -> list[tuple[Hca, Port, PortClass | None]]:
        """Every RDMA port in natural order (mlx5_2 before mlx5_10) with its port class."""
        result: list[tuple[Hca, Port, PortClass | None]] = []
        for hca in sorted(inventory.hcas, key=lambda item: natural_key(item.name)):
            for number in sorted(hca.ports):
                port = hca.ports[number]
                result.append((hca, port, self.port_class(port, hca, inventory)))
        return result

    def class_evidence(self, inventory: Inventory, hca: Hca, port_class: PortClass | None) -> dict[str, Any]:
        """Evidence of how a port was classed: class, role, and the GPU proximity the pack's
        classes relied on (only when some class asks `near_gpu`)."""
        evidence: dict[str, Any] = {"port_class": port_class.name if port_class else None,
                                    "role": role_of(port_class)}
        if any(item.near_gpu is not None for item in self.port_classes):
            from netdoctor.inventory.queries import gpu_proximity

            evidence["gpu_proximity"] = gpu_proximity(inventory, hca).basis
        return evidence
