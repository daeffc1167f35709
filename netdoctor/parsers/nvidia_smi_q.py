"""`nvidia-smi -q` parser: per GPU its NVLink fabric registration, platform info and recovery action.

A second source for what nvml.json holds (CONTRACT 8): NVML may be absent, or its bindings too
old for fabric info v3 or platform info. Real output (the device tool's 2x H200,
tests/data/device/nvidia-h200-x2/nvidia-smi-q.out; 580 drivers put the colon at column 56,
older ones at column 43, both read the same)::

    ==============NVSMI LOG==============
    Driver Version                                         : 580.159.04
    GPU 00000000:00:06.0
        Product Name                                       : NVIDIA H200
        Platform Info
            Chassis Serial Number                          : N/A
            ...
            Module Id                                      : 5
        GPU Recovery Action                                : None
        Fabric
            State                                          : Completed
            Status                                         : Success
            CliqueId                                       : 0
            ClusterUUID                                    : 00000000-0000-0000-0000-000000000000
            Health
                Summary                                    : N/A
                Bandwidth                                  : N/A

Values are mapped to nvml.json's words (`Completed` -> completed, `Limited Capacity` ->
limited_capacity, `Switch Connected` -> switch_connected); `N/A` is None. A fabric status other
than `Success` is NVML's return code by its nvml.h name (`Insufficient Resources` is
NVML_ERROR_INSUFFICIENT_RESOURCES, nvml.json's `error 23`).
"""

from __future__ import annotations

import re

from netdoctor.errors import ParseError
from netdoctor.parsers.common import decimal_or_none, numbered_lines, require_text, screen_tool_errors
from netdoctor.records import record
from netdoctor.util import canonical_pci_address
from netdoctor.vocabulary import RECOVERY_ACTIONS

SOURCE = "nvidia-smi -q"
_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_KEY_VALUE = re.compile(r"^(\S[^:]*?)\s*:\s?(.*?)\s*$")
_NOT_GIVEN = {"", "N/A", "NA", "[N/A]", "Unknown", "Requested functionality has been deprecated"}

# nvmlReturn_t (NVIDIA/go-nvml pkg/nvml/nvml.h @2f9e261, lines 1306-1335) by name: nvidia-smi
# prints a failed fabric probe's status as the name in words.
_NVML_RETURNS = {
    "UNINITIALIZED": 1, "INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3, "NO_PERMISSION": 4, "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7, "INSUFFICIENT_POWER": 8, "DRIVER_NOT_LOADED": 9, "TIMEOUT": 10, "IRQ_ISSUE": 11,
    "GPU_IS_LOST": 15, "RESET_REQUIRED": 16, "OPERATING_SYSTEM": 17, "IN_USE": 19, "MEMORY": 20, "NO_DATA": 21,
    "INSUFFICIENT_RESOURCES": 23, "NOT_READY": 27, "INVALID_STATE": 29,
}
_STATES = {"COMPLETED": "completed", "IN_PROGRESS": "in_progress", "NOT_STARTED": "not_started",
           "NOT_SUPPORTED": "not_supported"}
_SUMMARIES = {"HEALTHY": "healthy", "UNHEALTHY": "unhealthy", "LIMITED_CAPACITY": "limited_capacity",
              "NOT_SUPPORTED": "not_supported"}
_BANDWIDTH = {"FULL": "full", "DEGRADED": "degraded", "NOT_SUPPORTED": "not_supported"}
_PEER_TYPES = {"SWITCH_CONNECTED": "switch_connected", "DIRECT_CONNECTED": "direct_connected"}
# NVIDIA's words for the recovery actions (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt, "Error Recovery
# and Response Flags": None, Reset, Reboot, Drain P2P, Drain and Reset) and nvml.h's enum names.
_RECOVERY = {name.upper(): name for name in RECOVERY_ACTIONS.values()} | {"RESET": "gpu_reset", "REBOOT": "node_reboot"}


@record(frozen=True)
class SmiFabric:
    """The `Fabric` section in nvml.json's words; None where nvidia-smi printed N/A or nothing."""

    state: str | None = None
    status: str | None = None
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health_summary: str | None = None
    bandwidth: str | None = None
    route_recovery_in_progress: bool | None = None
    route_unhealthy: bool | None = None
    access_timeout_recovery: bool | None = None
    incorrect_configuration: str | None = None      # none (correct) | no_partition | ... as printed, snake case
    partition_assigned: bool | None = None


@record(frozen=True)
class SmiPlatform:
    """The `Platform Info` section (NVL72 trays; N/A elsewhere)."""

    chassis_serial_number: str | None = None
    slot_number: int | None = None
    tray_index: int | None = None
    host_id: int | None = None
    peer_type: str | None = None
    module_id: int | None = None
    gpu_fabric_guid: str | None = None

    @property
    def placed(self) -> bool:
        """Does it say where the GPU sits (more than a module id, which H200 boards also print)?"""
        return any(value is not None for value in (self.chassis_serial_number, self.slot_number, self.tray_index,
                                                   self.host_id, self.peer_type))


@record(frozen=True)
class SmiGpu:
    pci_address: str | None          # canonical, from the `GPU 00000008:06:00.0` header
    name: str | None = None
    uuid: str | None = None
    fabric: SmiFabric | None = None
    platform: SmiPlatform | None = None
    recovery_action: str | None = None   # RECOVERY_ACTIONS' words; an unknown one as printed, snake case


@record(frozen=True)
class SmiQuery:
    driver_version: str | None
    gpus: tuple[SmiGpu, ...]


def parse_nvidia_smi_q(text: str) -> SmiQuery:
    """The whole `nvidia-smi -q`: every `GPU DDDDDDDD:BB:DD.F` block. ParseError on a tool error,
    on output without a GPU block, or on a line outside the tool's layout."""
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    driver: str | None = None
    blocks: list[tuple[str, list[tuple[int, str]]]] = []
    for number, line in numbered_lines(text):
        if not line.strip() or _BANNER.match(line.strip()):
            continue
        if (header := _GPU.match(line)) is not None:
            address = canonical_pci_address(header.group(1))
            if address is None:
                raise ParseError(SOURCE, "not a PCI address", number, line)
            blocks.append((address, []))
            continue
        if line[:1] in (" ", "\t"):
            if not blocks:
                raise ParseError(SOURCE, "an indented line before the first `GPU` header", number, line)
            blocks[-1][1].append((number, line))
            continue
        pair = _KEY_VALUE.match(line)
        if pair is None:
            raise ParseError(SOURCE, "not a `GPU` header or a `Key : value` line", number, line)
        if pair.group(1) == "Driver Version":
            driver = _given(pair.group(2))
    if not blocks:
        raise ParseError(SOURCE, "no `GPU DDDDDDDD:BB:DD.F` block")
    return SmiQuery(driver, tuple(_gpu(address, lines) for address, lines in blocks))


def parse_gpu_sections(text: str) -> SmiGpu:
    """One GPU's sections without their `GPU` header (a `grep -A` of them, as issues quote them);
    `--` separators of grep are skipped."""
    require_text(SOURCE, text)
    screen_tool_errors(SOURCE, text)
    lines = [(number, line) for number, line in numbered_lines(text) if line.strip() and line.strip() != "--"]
    if not lines:
        raise ParseError(SOURCE, "no sections")
    return _gpu(None, lines)


def _gpu(address: str | None, lines: list[tuple[int, str]]) -> SmiGpu:
    sections = _sections(lines)
    top = sections.get((), {})
    fabric = sections.get(("Fabric",))
    platform = sections.get(("Platform Info",))
    return SmiGpu(address, _given(top.get("Product Name")), _given(top.get("GPU UUID")),
                  _fabric(fabric, sections.get(("Fabric", "Health"), {})) if fabric is not None else None,
                  _platform(platform) if platform is not None else None,
                  _word(top.get("GPU Recovery Action"), _RECOVERY))


def _sections(lines: list[tuple[int, str]]) -> dict[tuple[str, ...], dict[str, str]]:
    """Key/value pairs by the path of sections they sit in (`("Fabric", "Health")`), from the
    indentation: a line without a colon opens a section, whose deeper lines belong to it."""
    base = min((len(line) - len(line.lstrip()) for _, line in lines), default=0)
    stack: list[tuple[int, str]] = []          # (indent, section name) of the open sections
    found: dict[tuple[str, ...], dict[str, str]] = {}
    for number, line in lines:
        indent = len(line) - len(line.lstrip()) - base
        text = line.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = tuple(name for _, name in stack)
        pair = _KEY_VALUE.match(text)
        if pair is None:
            if len(text) > 80:
                raise ParseError(SOURCE, "not a section name or a `Key : value` line", number, line)
            stack.append((indent, text))
            found.setdefault(path + (text,), {})
            continue
        found.setdefault(path, {}).setdefault(pair.group(1), pair.group(2))
    return found


def _given(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in _NOT_GIVEN else value


def _key(value: str) -> str:
    return re.sub(r"[^A-Z0-9]+", "_", value.upper()).strip("_")


def _word(value: str | None, words: dict[str, str]) -> str | None:
    """A printed value in nvml.json's words; one not in the table in snake case, kept."""
    value = _given(value)
    if value is None:
        return None
    key = _key(value)
    return words.get(key, key.lower() or None)


def _integer(value: str | None) -> int | None:
    return decimal_or_none(_given(value), max_digits=12)


def _boolean(value: str | None) -> bool | None:
    return {"TRUE": True, "FALSE": False, "YES": True, "NO": False}.get(_key(_given(value) or ""))


def _status(value: str | None) -> str | None:
    value = _given(value)
    if value is None:
        return None
    key = _key(value)
    if key == "SUCCESS":
        return "success"
    return f"error {_NVML_RETURNS[key]}" if key in _NVML_RETURNS else key.lower()


def _fabric(values: dict[str, str], health: dict[str, str]) -> SmiFabric:
    uuid = _given(values.get("ClusterUUID"))
    return SmiFabric(
        state=_word(values.get("State"), _STATES), status=_status(values.get("Status")),
        clique_id=_integer(values.get("CliqueId")), cluster_uuid=uuid.lower() if uuid else None,
        health_summary=_word(health.get("Summary"), _SUMMARIES), bandwidth=_word(health.get("Bandwidth"), _BANDWIDTH),
        route_recovery_in_progress=_boolean(health.get("Route Recovery in progress")),
        route_unhealthy=_boolean(health.get("Route Unhealthy")),
        access_timeout_recovery=_boolean(health.get("Access Timeout Recovery")),
        incorrect_configuration=_word(health.get("Incorrect Configuration"), {}),
        partition_assigned=_boolean(health.get("Partition Assigned")))


def _platform(values: dict[str, str]) -> SmiPlatform:
    module = values.get("Module Id", values.get("Module ID"))
    return SmiPlatform(
        chassis_serial_number=_given(values.get("Chassis Serial Number")),
        slot_number=_integer(values.get("Slot Number")), tray_index=_integer(values.get("Tray Index")),
        host_id=_integer(values.get("Host ID")), peer_type=_word(values.get("Peer Type"), _PEER_TYPES),
        module_id=_integer(module), gpu_fabric_guid=_given(values.get("GPU Fabric GUID")))
