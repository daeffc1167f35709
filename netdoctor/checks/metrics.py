"""Values for dashboards: what `--format prometheus` carries beside the statuses.

A pure function of the inventory and the counter history, like the checks: port rates,
error counters (absolute, and their growth per second where an earlier reading of the same
boot gives one), NVLink error counters, port module temperature and optical power, and the
physical layer's bit error ratios. Labels stay bounded: a device (`mlx5_0`, `GPU3`, a
netdev), a port number, a lane number, and a counter name from the fixed lists
below; never a sentence or a value from a tool's free text. Units are Prometheus base units
(bytes, seconds, celsius), optical power in dBm. docs/metrics.md lists every family.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from netdoctor.checks.api import CounterHistory
from netdoctor.inventory.model import Inventory, ModuleReading
from netdoctor.report.model import MetricSample

# The port counters error-counters judges (plugins/error_counters.py ERROR_COUNTERS, HW_COUNTERS
# and EFA_COUNTERS; tests/test_prometheus_metrics.py keeps the two lists equal). Only these
# are exported: a counter directory's other names come from the node, and would be labels
# nobody bounded. IBTA `counters/` names first, then the mlx5 and EFA `hw_counters/` names.
PORT_ERROR_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
                       "port_rcv_remote_physical_errors", "port_xmit_discards", "excessive_buffer_overrun_errors",
                       "local_link_integrity_errors")
HW_ERROR_COUNTERS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err",
                     "out_of_buffer", "roce_adp_retrans",
                     "retrans_pkts", "retrans_timeout_events", "unresponsive_remote_events",
                     "impaired_remote_conn_events", "rx_drops", "rdma_read_wr_err", "rdma_write_wr_err",
                     "cmds_err", "no_completion_cmds")
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data", "symbol_errors")   # fabric_model's two lists
HW_PREFIX = "hw_counters/"   # how netdoctor.checks.history keys hw counters
MAX_LANES = 8                # OSFP and QSFP-DD modules carry 8 lanes, the most of any module

# name -> (Prometheus type, HELP text). The renderer writes them in this order.
FAMILIES: dict[str, tuple[str, str]] = {
    "netdoctor_port_rate_bytes_per_second": (
        "gauge", "Negotiated rate of an RDMA port (400 Gb/s reads 5e10), bytes per second."),
    "netdoctor_port_errors_total": (
        "counter", ("Port error counter as the NIC reports it (counter: the sysfs counters/ or hw_counters/ name); "
                    "IBTA counters saturate instead of wrapping and are cleared by perfquery -R and reboots.")),
    "netdoctor_port_errors_per_second": (
        "gauge", ("Growth of a port error counter since netdoctor's previous reading of this boot, per second "
                  "(over netdoctor_counter_window_seconds).")),
    "netdoctor_nvlink_errors_total": (
        "counter", ("NVLink error counter of a GPU, summed over its links (NVML: replay, recovery, crc_flit, "
                    "crc_data; NVLink 5: symbol_errors).")),
    "netdoctor_nvlink_errors_per_second": (
        "gauge", ("Growth of a GPU's NVLink error counter (over its links) since netdoctor's previous reading "
                  "of this boot, per second.")),
    "netdoctor_nvlink_active_links": ("gauge", "NVLinks of a GPU that are active."),
    "netdoctor_nvlink_effective_bit_error_ratio": (
        "gauge", "NVLink 5 effective bit error ratio of a GPU's worst link (NVML)."),
    "netdoctor_counter_window_seconds": (
        "gauge", "Seconds between netdoctor's previous counter reading (state file or --baseline) and this one."),
    "netdoctor_transceiver_temperature_celsius": ("gauge", "Port module (transceiver) temperature, celsius."),
    "netdoctor_transceiver_rx_power_dbm": ("gauge", "Port module receive optical power of one lane (from 0), dBm."),
    "netdoctor_transceiver_tx_power_dbm": ("gauge", "Port module transmit optical power of one lane (from 0), dBm."),
    "netdoctor_phy_raw_bit_error_ratio": (
        "gauge", "Pre-FEC (raw physical) bit error ratio of a port since its counters were cleared (mlxlink)."),
    "netdoctor_phy_effective_bit_error_ratio": (
        "gauge", "Post-FEC (effective) bit error ratio of a port since its counters were cleared (mlxlink)."),
}


def node_metrics(inventory: Inventory, history: CounterHistory | None = None) -> tuple[MetricSample, ...]:
    """Every value this inventory (and the earlier reading, where there is one) gives."""
    samples = [*_ports(inventory, history), *_nvlinks(inventory, history), *_modules(inventory), *_phy(inventory)]
    if history is not None and history.elapsed_s > 0:
        samples.append(_sample("netdoctor_counter_window_seconds", (), history.elapsed_s))
    return tuple(sample for sample in samples if sample is not None)


def _sample(name: str, labels: tuple[tuple[str, str], ...], value: float | None) -> MetricSample | None:
    if value is None or isinstance(value, bool) or not math.isfinite(value):
        return None
    return MetricSample(name, labels, value)


def port_labels(key: str) -> tuple[tuple[str, str], ...]:
    """`mlx5_0:1` -> device and port; a netdev's name (a module ethtool read) -> device alone."""
    device, colon, number = key.rpartition(":")
    if colon and number.isascii() and number.isdigit():
        return (("device", device), ("port", number))
    return (("device", key),)


def _growth(now: int | None, before: int | None, elapsed_s: float) -> float | None:
    """Per second; None without both readings, or where the counter went down (cleared)."""
    if not isinstance(now, int) or not isinstance(before, int) or now < before or elapsed_s <= 0:
        return None
    return (now - before) / elapsed_s


def _ports(inventory: Inventory, history: CounterHistory | None) -> Iterator[MetricSample | None]:
    for port in inventory.ports:
        labels = port_labels(port.name)
        if port.rate is not None and port.rate.gbps is not None:
            yield _sample("netdoctor_port_rate_bytes_per_second", labels, port.rate.gbps * 1e9 / 8)
        before: Mapping[str, int | None] = history.ports.get(port.name, {}) if history is not None else {}
        readings = [(name, port.counters.get(name), before.get(name)) for name in PORT_ERROR_COUNTERS]
        readings += [(name, port.hw_counters.get(name), before.get(HW_PREFIX + name)) for name in HW_ERROR_COUNTERS]
        for name, now, earlier in readings:
            counter_labels = (*labels, ("counter", name))
            yield _sample("netdoctor_port_errors_total", counter_labels, now)
            if history is not None:
                yield _sample("netdoctor_port_errors_per_second", counter_labels,
                              _growth(now, earlier, history.elapsed_s))


def _nvlinks(inventory: Inventory, history: CounterHistory | None) -> Iterator[MetricSample | None]:
    """Per GPU, each counter summed over its links (as DCGM's NVLink `_TOTAL` fields): 8 GPUs x
    18 links x 4 counters would be ~600 series a node; which link, the nvlink finding says."""
    for gpu in inventory.gpus:
        device = (("device", gpu.label),)
        yield _sample("netdoctor_nvlink_active_links", device, gpu.nvlink_active)
        bers = [link.effective_ber for link in gpu.nvlinks if link.effective_ber is not None]
        yield _sample("netdoctor_nvlink_effective_bit_error_ratio", device, max(bers) if bers else None)
        for name in NVLINK_COUNTERS:
            counts, growths = [], []
            for link in gpu.nvlinks:
                now = link.errors.get(name)
                if isinstance(now, int):
                    counts.append(now)
                if history is not None:
                    # The history's key for this link (netdoctor.checks.history.nvlink_key).
                    before = history.ports.get(f"nvlink {gpu.pci_address or gpu.label} {link.link}", {})
                    growths.append(_growth(now, before.get(name), history.elapsed_s))
            labels = (*device, ("counter", name))
            yield _sample("netdoctor_nvlink_errors_total", labels, sum(counts) if counts else None)
            known = [growth for growth in growths if growth is not None]
            yield _sample("netdoctor_nvlink_errors_per_second", labels, sum(known) if known else None)


def _lanes(name: str, labels: tuple[tuple[str, str], ...], reading: ModuleReading | None) -> Iterator[MetricSample | None]:
    for lane, value in enumerate((reading.values if reading is not None else ())[:MAX_LANES]):
        yield _sample(name, (*labels, ("lane", str(lane))), value)


def _modules(inventory: Inventory) -> Iterator[MetricSample | None]:
    for key, module in inventory.transceivers.items():
        labels = port_labels(key)
        if module.temperature_c is not None and module.temperature_c.values:
            yield _sample("netdoctor_transceiver_temperature_celsius", labels, module.temperature_c.values[0])
        yield from _lanes("netdoctor_transceiver_rx_power_dbm", labels, module.rx_power_dbm)
        yield from _lanes("netdoctor_transceiver_tx_power_dbm", labels, module.tx_power_dbm)


def _phy(inventory: Inventory) -> Iterator[MetricSample | None]:
    for key, phy in inventory.phy.items():
        labels = port_labels(key)
        yield _sample("netdoctor_phy_raw_bit_error_ratio", labels, phy.raw_ber)
        yield _sample("netdoctor_phy_effective_bit_error_ratio", labels, phy.effective_ber)
