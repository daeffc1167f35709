"""Counter history between runs, as pure functions: readings, history, bounded entries.

Port error counters only mean something as growth over a known time. Each run stores its
own reading (host.state_store keeps the file) and gets the previous reading of the same
host and boot back. A reboot (another boot_id) resets the hardware counters, so an entry
of another boot is never used as history. `--baseline` gives the same history from an
earlier snapshot instead.

An entry, as stored::

    {"host": "node017", "boot_id": "...", "captured_at": "2026-11-21T22:40:00Z",
     "ports": {"mlx5_0:1": {"symbol_error": 0, "hw_counters/out_of_sequence": 3,
                            "phy/effective_errors": 0, "phy/raw_errors/0": 3183333, "phy/since_clear_s": 163086},
               "netdev ens1f0np0": {"rx_corrected_bits_phy": 1200, "tx_pause_storm_error_events": 0},
               "nvlink 0000:18:00.0 3": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 2},
               "gpu 0000:18:00.0": {"pcie_replay_counter": 0, "utilization_gpu": 0,
                                    "clocks_event_reasons/gpu_idle": 1}}}
"""

from __future__ import annotations

from typing import Any

from netdoctor.checks.api import CounterHistory
from netdoctor.inventory.model import Gpu, Inventory, PhyCounters
from netdoctor.logging import get_logger
from netdoctor.util import parse_iso_utc

log = get_logger(__name__)

HW_PREFIX = "hw_counters/"          # hw_counters live beside counters/ under this key prefix
PHY_PREFIX = "phy/"                 # mlxlink -c counters live beside them under this one
CLOCK_REASON_PREFIX = "clocks_event_reasons/"   # a GPU's clock event reasons set at that run
# nvmlClocksEventReasons by CONTRACT 7.2's names (nvml.h): only these are stored or judged, so a
# hostile nvml.json cannot fill the state file with names of its own.
CLOCK_REASONS = frozenset({"gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
                           "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
                           "hw_power_brake_slowdown", "display_clock_setting"})
MAX_BOOTS_PER_HOST = 2              # the current boot and the one before (for a late --baseline)
MAX_ENTRIES = 512                   # a state file on shared storage holds many hosts; bound it

Entry = dict[str, Any]


def counter_readings(inventory: Inventory) -> dict[str, dict[str, int | None]]:
    """This inventory's counters per port: `counters/` names as-is, hw counters and mlxlink's
    prefixed; per RoCE netdev (`netdev_key`) its `ethtool -S` counters; per NVLink (`nvlink_key`)
    its replay/recovery/CRC counters."""
    readings: dict[str, dict[str, int | None]] = {}
    for port in inventory.ports:
        values: dict[str, int | None] = dict(port.counters)
        values.update({f"{HW_PREFIX}{name}": value for name, value in port.hw_counters.items()})
        if values:
            readings[port.name] = values
    for port_name, phy in inventory.phy.items():
        values = readings.setdefault(port_name, {})
        values.update(phy_reading(phy))
    for netdev in inventory.netdevs:
        if netdev.stats:
            readings[netdev_key(netdev.name)] = dict(netdev.stats)
    for gpu in inventory.gpus:
        for link in gpu.nvlinks:
            if any(value is not None for value in link.errors.values()):
                readings[nvlink_key(gpu, link.link)] = dict(link.errors)
        gpu_values = gpu_reading(gpu)
        if gpu_values:
            readings[gpu_key(gpu)] = gpu_values
    return readings


def phy_reading(phy: PhyCounters) -> dict[str, int | None]:
    """What phy compares with the next run: mlxlink's counters since their last clear (and that
    clear's age, which tells a clear between the runs), under `phy/` beside the port's counters."""
    values: dict[str, int | None] = {}
    for name in ("effective_errors", "symbol_errors", "link_down", "link_error_recovery"):
        value = getattr(phy, name)
        if value is not None:
            values[f"{PHY_PREFIX}{name}"] = value
    for lane, errors in enumerate(phy.raw_errors_per_lane or ()):
        values[f"{PHY_PREFIX}raw_errors/{lane}"] = errors
    if phy.since_clear_s is not None:
        values[f"{PHY_PREFIX}since_clear_s"] = int(phy.since_clear_s)
    return values


def netdev_key(name: str) -> str:
    """A netdev's `ethtool -S` counters in the history (phy)."""
    return f"netdev {name}"


def nvlink_key(gpu: Gpu, link: int) -> str:
    """An NVLink's key in the history: by the GPU's PCI address, which a renumbering keeps."""
    return f"nvlink {gpu.pci_address or gpu.label} {link}"


def gpu_key(gpu: Gpu) -> str:
    """A GPU's own key in the history (gpu-health): by its PCI address, like its NVLinks."""
    return f"gpu {gpu.pci_address or gpu.label}"


def gpu_reading(gpu: Gpu) -> dict[str, int | None]:
    """What gpu-health compares with the next run: the PCIe replay counter, the utilization
    (was the GPU idle then) and each known clock event reason set now as
    `clocks_event_reasons/NAME` = 1 (a reason absent was not set)."""
    values: dict[str, int | None] = {}
    if gpu.pcie_replay_counter is not None:
        values["pcie_replay_counter"] = gpu.pcie_replay_counter
    if gpu.utilization_gpu is not None:
        values["utilization_gpu"] = gpu.utilization_gpu
    for reason in gpu.clocks_event_reasons or ():
        if reason in CLOCK_REASONS:
            values[f"{CLOCK_REASON_PREFIX}{reason}"] = 1
    return values


def elapsed_seconds(earlier: str, later: str) -> float | None:
    """Seconds from one ISO 8601 time to another; None when either does not parse."""
    try:
        return (parse_iso_utc(later) - parse_iso_utc(earlier)).total_seconds()
    except ValueError:
        return None


def _same_boot(previous_boot: str | None, current_boot: str | None) -> tuple[bool, str]:
    if previous_boot is None and current_boot is None:
        # Neither side knows its boot: accept, a reset then shows as a decrease (judged absolute).
        return True, "boot ids unknown on both readings"
    if previous_boot != current_boot:
        return False, f"different boot ({previous_boot or 'unknown'} -> {current_boot or 'unknown'}): counters were reset"
    return True, "same boot"


def _history_from_entry(entry: Entry, inventory: Inventory, source: str) -> tuple[CounterHistory | None, str]:
    """(the history an entry gives, "") or (None, why it gives none)."""
    taken_at = entry.get("captured_at")
    elapsed = elapsed_seconds(taken_at, inventory.captured_at) if isinstance(taken_at, str) else None
    if elapsed is None:
        return None, f"unreadable timestamps {taken_at!r} / {inventory.captured_at!r}"
    if elapsed <= 0:
        return None, f"the earlier reading ({taken_at}) is not older than this one ({inventory.captured_at})"
    ports = entry.get("ports")
    if not isinstance(ports, dict):
        return None, "the earlier reading has no ports"
    clean: dict[str, dict[str, int | None]] = {}
    for port_name, values in ports.items():
        if not isinstance(values, dict):
            continue
        clean[str(port_name)] = {str(name): value if isinstance(value, int) and not isinstance(value, bool) else None
                                 for name, value in values.items()}
    return CounterHistory(taken_at=taken_at, elapsed_s=elapsed, ports=clean, source=source), ""


def _find_entry(entries: list[Entry], inventory: Inventory) -> tuple[Entry | None, str]:
    same_host = [entry for entry in entries if entry.get("host") == inventory.host]
    if not same_host:
        return None, "no earlier reading of this host"
    reasons = []
    for entry in sorted(same_host, key=lambda item: str(item.get("captured_at", "")), reverse=True):
        same, reason = _same_boot(entry.get("boot_id"), inventory.boot_id)
        if same:
            return entry, reason
        reasons.append(reason)
    return None, reasons[0]


def history_from_entries(entries: list[Entry], inventory: Inventory) -> CounterHistory | None:
    """The previous reading of this inventory's host and boot among stored entries."""
    entry, reason = _find_entry(entries, inventory)
    history = None
    if entry is not None:
        history, reason = _history_from_entry(entry, inventory, "state")
    if history is None:
        log.info("no counter history", reason=reason)
    return history


def with_reading(entries: list[Entry], inventory: Inventory) -> list[Entry]:
    """The entries to store: this inventory's reading in place of its host and boot's, bounded."""
    current: Entry = {
        "host": inventory.host,
        "boot_id": inventory.boot_id,
        "captured_at": inventory.captured_at,
        "ports": counter_readings(inventory),
    }
    others = [entry for entry in entries
              if not (entry.get("host") == inventory.host and entry.get("boot_id") == inventory.boot_id)]
    return bounded([current, *others])


def bounded(entries: list[Entry]) -> list[Entry]:
    """Keep the newest MAX_BOOTS_PER_HOST boots of each host and MAX_ENTRIES overall."""
    newest_first = sorted(entries, key=lambda entry: str(entry.get("captured_at", "")), reverse=True)
    kept: list[Entry] = []
    per_host: dict[str, int] = {}
    for entry in newest_first:
        host = str(entry.get("host"))
        if per_host.get(host, 0) >= MAX_BOOTS_PER_HOST:
            continue
        per_host[host] = per_host.get(host, 0) + 1
        kept.append(entry)
    return kept[:MAX_ENTRIES]


def history_from_baseline(baseline: Inventory, current: Inventory) -> tuple[CounterHistory | None, str]:
    """Counter history from an earlier snapshot of the same node (`--baseline`), or (None, why not)."""
    if baseline.host != current.host:
        return None, f"it is of host {baseline.host!r}, not {current.host!r}"
    same, reason = _same_boot(baseline.boot_id, current.boot_id)
    if not same:
        return None, reason
    entry = {"captured_at": baseline.captured_at, "ports": counter_readings(baseline)}
    return _history_from_entry(entry, current, "baseline")
