"""Build the one inventory of a node from every source the host layer gives.

Each source counts on its own: an HCA named only by `ibstat` still appears, a GPU named
only by `nvidia-smi topo -m` still appears. Where two sources report the same fact
differently, the inventory keeps the first source's value (sysfs > NVML > tools, the
order of trust) and records a `Conflict` instead of silently picking one.

Live runs overlap the work: the node-wide tools start first, sysfs and NVML are read
while they run, then the per-port/per-netdev tools (perfquery, mlnx_qos) start as soon
as sysfs has named the ports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import structlog

from netdoctor.errors import NetdoctorError, ParseError
from netdoctor.host.types import CommandResult, CommandSpec, CommandState, NodeSource, SysTree
from netdoctor.inventory.hardware import (
    NVIDIA_GPU_MODELS,
    NVIDIA_VENDOR,
    ca_type_from_part_id,
    hca_model,
    is_nvidia_gpu_function,
)
from netdoctor.inventory.model import (
    Conflict,
    Gpu,
    Hca,
    Inventory,
    LinkLayer,
    LinkRate,
    Netdev,
    PcieLink,
    PeerMemory,
    Port,
    QosConfig,
    SourceState,
    SourceStatus,
    Topology,
)
from netdoctor.parsers import sysfs_values
from netdoctor.parsers.common import link_layer_from_text, normalize_guid
from netdoctor.util import canonical_pci_address, natural_key

log = structlog.get_logger(__name__)

T = TypeVar("T")

NODE_COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec("nvidia-smi-topo-m", ("nvidia-smi", "topo", "-m"), timeout_s=8.0),
    CommandSpec("ibstat", ("ibstat",), timeout_s=5.0),
    CommandSpec("ibv_devinfo-v", ("ibv_devinfo", "-v"), timeout_s=5.0),
    CommandSpec("ibdev2netdev", ("ibdev2netdev",), timeout_s=5.0),
)
# Fabric-wide scan: the only source of "could be" hints for degraded links. It sends SMPs
# to every switch, so thousands of nodes running it at once in a prolog load the SM:
# `--no-fabric-scan` leaves it out. A 2,000-switch fabric prints ~15 MB; the cap keeps
# a runaway tool's memory bounded.
FABRIC_SCAN = CommandSpec("iblinkinfo", ("iblinkinfo",), timeout_s=8.0, max_output_bytes=24 * 1024 * 1024)


def perfquery_spec(hca: str, port: int) -> CommandSpec:
    return CommandSpec(f"perfquery-x-{hca}-{port}", ("perfquery", "-x", "-C", hca, "-P", str(port)), timeout_s=4.0)


def mlnx_qos_spec(netdev: str) -> CommandSpec:
    return CommandSpec(f"mlnx_qos-{netdev}", ("mlnx_qos", "-i", netdev), timeout_s=4.0)


class _Builder:
    """Holds the inventory under construction and the bookkeeping of sources and conflicts."""

    def __init__(self, source: NodeSource) -> None:
        self.source = source
        self.sys: SysTree = source.sys
        self.inventory = Inventory(host=source.host, captured_at=source.captured_at, boot_id=source.boot_id)

    # -- bookkeeping --------------------------------------------------------------
    def status(self, name: str, state: SourceState, detail: str = "", duration_s: float | None = None) -> None:
        self.inventory.sources[name] = SourceStatus(name, state, detail, duration_s)

    def merge(self, target: Any, attribute: str, value: Any, source: str, subject: str) -> None:
        """Set `target.attribute` from `source` unless already known; record a conflict if it differs."""
        if value is None:
            return
        current = getattr(target, attribute)
        if current is None:
            setattr(target, attribute, value)
        elif current != value:
            first = target.sources[0] if getattr(target, "sources", ()) else "earlier source"
            self.inventory.conflicts.append(Conflict(subject, attribute, {first: _plain(current), source: _plain(value)}, chosen=first))

    def parse_command(self, result: CommandResult, parser: Callable[[str], T]) -> T | None:
        """Parse a command's output, recording the source status. Returns None when unusable."""
        name = result.name
        if result.state is CommandState.MISSING:
            self.status(name, SourceState.MISSING, result.describe(), result.duration_s)
            return None
        if result.state is CommandState.TIMEOUT:
            # A snapshot records only that the tool timed out, not after how long.
            detail = f"after {result.duration_s:.1f} s" if result.duration_s > 0 else ""
            self.status(name, SourceState.TIMEOUT, detail, result.duration_s)
            return None
        if result.state is CommandState.ERROR and not result.stdout.strip():
            self.status(name, SourceState.ERROR, result.describe(), result.duration_s)
            return None
        text = result.stdout
        if result.truncated:
            # Cut at the size cap: parse the complete lines, not the half line at the end.
            text = text[: text.rfind("\n") + 1]
        try:
            parsed = parser(text)
        except (ParseError, ValueError) as error:
            # ValueError: a number no int() takes (Python's 4,300-digit limit) in hostile output.
            # A tool that failed AND printed something unparseable is reported as the failure.
            if result.state is CommandState.ERROR:
                self.status(name, SourceState.ERROR, result.describe(), result.duration_s)
            else:
                self.status(name, SourceState.PARSE_ERROR, str(error), result.duration_s)
            log.warning("unparseable tool output", source=name, error=str(error))
            return None
        if result.state is CommandState.ERROR:
            # e.g. ibstat exits 255 after printing good records and an `ibpanic:` line.
            self.status(name, SourceState.ERROR, result.describe() + " (partial output used)", result.duration_s)
        else:
            self.status(name, SourceState.OK, "output truncated at size cap" if result.truncated else "", result.duration_s)
        return parsed

    def hca(self, name: str, source: str) -> Hca:
        hca = self.inventory.hca(name)
        if hca is None:
            hca = Hca(name=name)
            self.inventory.hcas.append(hca)
        if source not in hca.sources:
            hca.sources += (source,)
        return hca

    def port(self, hca: Hca, number: int, source: str) -> Port:
        port = hca.ports.get(number)
        if port is None:
            port = hca.ports[number] = Port(hca=hca.name, number=number)
        if source not in port.sources:
            port.sources += (source,)
        return port

    # -- sysfs ----------------------------------------------------------------------
    def read_sysfs_rdma(self) -> None:
        started = time.monotonic()
        if not self.sys.is_dir("class/infiniband"):
            self.status("sysfs", SourceState.MISSING, "no /sys/class/infiniband (no RDMA devices or driver)")
            return
        problems: list[str] = []
        for name in sorted(self.sys.listdir("class/infiniband")):
            base = f"class/infiniband/{name}"
            hca = self.hca(name, "sysfs")
            hca.ca_type = _clean(self.sys.read(f"{base}/hca_type"))
            hca.firmware = _clean(self.sys.read(f"{base}/fw_ver"))
            hca.board_id = _clean(self.sys.read(f"{base}/board_id"))
            hca.node_guid = _sysfs_guid(self.sys.read(f"{base}/node_guid"))
            hca.sys_image_guid = _sysfs_guid(self.sys.read(f"{base}/sys_image_guid"))
            hca.hardware_version = _clean(self.sys.read(f"{base}/hw_rev"))
            hca.pci_address = _pci(self.sys.link_name(f"{base}/device") or _uevent_slot(self.sys.read(f"{base}/device/uevent")))
            hca.physical_function = _pci(self.sys.link_name(f"{base}/device/physfn"))
            hca.numa_node = _value(sysfs_values.parse_numa_node, self.sys.read(f"{base}/device/numa_node"), problems,
                                   f"{base}/device/numa_node")
            for port_dir in sorted(self.sys.listdir(f"{base}/ports"), key=_numeric):
                if not port_dir.isdigit():
                    continue
                self.read_sysfs_port(hca, int(port_dir), f"{base}/ports/{port_dir}", problems)
        detail = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
        self.status("sysfs", SourceState.OK, detail, time.monotonic() - started)

    def read_sysfs_port(self, hca: Hca, number: int, base: str, problems: list[str]) -> None:
        port = self.port(hca, number, "sysfs")
        read = self.sys.read
        port.state = _value(sysfs_values.parse_port_state, read(f"{base}/state"), problems, f"{base}/state")
        port.phys_state = _value(sysfs_values.parse_phys_state, read(f"{base}/phys_state"), problems, f"{base}/phys_state")
        port.rate = _value(sysfs_values.parse_rate, read(f"{base}/rate"), problems, f"{base}/rate")
        port.link_layer = _quiet(lambda text: link_layer_from_text("sysfs", text), read(f"{base}/link_layer"))
        port.lid = _value(sysfs_values.parse_hex_or_int, read(f"{base}/lid"), problems, f"{base}/lid")
        port.sm_lid = _value(sysfs_values.parse_hex_or_int, read(f"{base}/sm_lid"), problems, f"{base}/sm_lid")
        port.lmc = _value(sysfs_values.parse_hex_or_int, read(f"{base}/lid_mask_count"), problems, f"{base}/lid_mask_count")
        port.capability_mask = _value(sysfs_values.parse_hex_or_int, read(f"{base}/cap_mask"), problems, f"{base}/cap_mask")
        port.counters = self.read_counter_dir(f"{base}/counters", problems)
        if port.counters:
            port.counters_source = "sysfs"
        port.hw_counters = {name: value for name, value in self.read_counter_dir(f"{base}/hw_counters", problems).items() if value is not None}
        pkeys = []
        for index in sorted(self.sys.listdir(f"{base}/pkeys"), key=_numeric):
            pkey = _value(sysfs_values.parse_hex_or_int, read(f"{base}/pkeys/{index}"), problems, f"{base}/pkeys/{index}")
            if pkey is not None and pkey & 0x7FFF:   # 0x0000 / 0x8000 are empty table slots
                pkeys.append(f"0x{pkey:04x}")
        port.pkeys = tuple(pkeys)
        port.netdev = _clean(read(f"{base}/gid_attrs/ndevs/0")) or None

    def read_counter_dir(self, path: str, problems: list[str]) -> dict[str, int | None]:
        counters: dict[str, int | None] = {}
        for name in sorted(self.sys.listdir(path)):
            text = self.sys.read(f"{path}/{name}")
            if text is None:
                continue
            try:
                counters[name] = sysfs_values.parse_counter(text)
            except ParseError as error:
                # Kept as "no value" (like `N/A (no PMA)`) so the check says it could not read it.
                counters[name] = None
                problems.append(f"{path}/{name}: {error.message}")
        return counters

    def read_pcie(self, address: str) -> PcieLink | None:
        base = f"bus/pci/devices/{address}"
        read = self.sys.read
        current_speed = _quiet(sysfs_values.parse_pcie_speed, read(f"{base}/current_link_speed"))
        max_speed = _quiet(sysfs_values.parse_pcie_speed, read(f"{base}/max_link_speed"))
        current_width = _quiet(sysfs_values.parse_link_width, read(f"{base}/current_link_width"))
        max_width = _quiet(sysfs_values.parse_link_width, read(f"{base}/max_link_width"))
        if current_speed is None and max_speed is None and current_width is None and max_width is None:
            return None
        return PcieLink(
            address=address,
            current_gen=sysfs_values.pcie_generation(current_speed) if current_speed else None,
            max_gen=sysfs_values.pcie_generation(max_speed) if max_speed else None,
            current_width=current_width,
            max_width=max_width,
            current_speed_gts=current_speed,
            max_speed_gts=max_speed,
        )

    def read_pci_gpus(self) -> None:
        """NVIDIA GPU functions on the PCI bus: what the driver should see, even when it is broken."""
        if not self.sys.is_dir("bus/pci/devices"):
            return
        found: dict[str, str] = {}
        for address in sorted(self.sys.listdir("bus/pci/devices")):
            base = f"bus/pci/devices/{address}"
            vendor = self.sys.read(f"{base}/vendor")
            # Read `class` only for NVIDIA functions: a node has hundreds of PCI functions.
            if vendor is not None and vendor.strip().lower() == NVIDIA_VENDOR and \
                    is_nvidia_gpu_function(vendor, self.sys.read(f"{base}/class")):
                found[_pci(address) or address] = (_clean(self.sys.read(f"{base}/device")) or "").lower()
        self.inventory.pci_gpus = found

    def gpus_from_pci_bus(self) -> None:
        """NVML gave no GPU, yet GPUs are on the bus: name them from sysfs, index in PCI order.

        nvidia-smi numbers GPUs in PCI bus order, so GPUs known only from its topology
        matrix are matched to the bus by position when the counts agree.
        """
        inventory = self.inventory
        if not inventory.pci_gpus or any("nvml" in gpu.sources for gpu in inventory.gpus):
            return
        on_bus = sorted(inventory.pci_gpus.items())
        if inventory.gpus and len(inventory.gpus) != len(on_bus):
            return
        if not inventory.gpus:
            inventory.gpus = [Gpu(index=index) for index in range(len(on_bus))]
        for gpu, (address, device_id) in zip(inventory.gpus, on_bus, strict=True):
            gpu.name = gpu.name or NVIDIA_GPU_MODELS.get(device_id)
            gpu.pci_address = gpu.pci_address or address
            gpu.sources += ("sysfs",)
        # numa_node and the sysfs PCIe link are filled by join(), as for NVML GPUs.

    def read_peer_memory(self) -> None:
        if not self.sys.is_dir("module"):
            return   # no module list at all: unknown, not "not loaded"
        self.inventory.nvidia_module_loaded = self.sys.is_dir("module/nvidia")
        self.inventory.peer_memory = PeerMemory(
            nvidia_peermem=self.sys.is_dir("module/nvidia_peermem"),
            nv_peer_mem=self.sys.is_dir("module/nv_peer_mem"),
            gdrdrv=self.sys.is_dir("module/gdrdrv"),
        )

    def read_netdevs(self) -> None:
        started = time.monotonic()
        try:
            facts = self.source.netdevs()
        except NetdoctorError:
            raise
        except OSError as error:
            self.status("netdevs", SourceState.ERROR, str(error))
            return
        for fact in facts:
            netdev = Netdev(
                name=fact.name, mtu=fact.mtu, operstate=fact.operstate, speed_mbps=fact.speed_mbps,
                mac=fact.mac, arp_type=fact.arp_type, pci_address=_pci(fact.pci_address),
                sources=("netdevs",),
            )
            netdev.ecn_np = self.read_ecn(netdev.name, "roce_np")
            netdev.ecn_rp = self.read_ecn(netdev.name, "roce_rp")
            netdev.bond_slaves = tuple((self.sys.read(f"class/net/{netdev.name}/bonding/slaves") or "").split())
            self.inventory.netdevs.append(netdev)
        self.status("netdevs", SourceState.OK, "", time.monotonic() - started)

    def read_ecn(self, netdev: str, point: str) -> dict[int, bool]:
        base = f"class/net/{netdev}/ecn/{point}/enable"
        enabled: dict[int, bool] = {}
        for priority in self.sys.listdir(base):
            if priority.isdigit():
                value = _clean(self.sys.read(f"{base}/{priority}"))
                if value in ("0", "1"):
                    enabled[int(priority)] = value == "1"
        return enabled

    # -- NVML -------------------------------------------------------------------------
    def read_nvml(self) -> None:
        started = time.monotonic()
        try:
            report, status_text = self.source.nvml()
        except NetdoctorError:
            raise
        except Exception as error:   # NVML bindings raise their own types; never crash discovery
            self.status("nvml", SourceState.ERROR, f"{type(error).__name__}: {error}")
            return
        if report is None:
            state = SourceState.MISSING if _means_no_driver(status_text) else SourceState.ERROR
            self.status("nvml", state, status_text)
            return
        if not isinstance(report, dict) or not isinstance(report.get("gpus", []), list):
            self.status("nvml", SourceState.PARSE_ERROR, "nvml report is not an object with a `gpus` list")
            return
        inventory = self.inventory
        inventory.driver_version = _as(str, report.get("driver_version"))
        inventory.cuda_driver_version = _as(int, report.get("cuda_driver_version"))
        errors: list[str] = []
        for entry in report.get("gpus", []):
            if not isinstance(entry, dict) or not isinstance(entry.get("index"), int):
                errors.append("GPU entry without an integer index")
                continue
            gpu = Gpu(index=entry["index"], sources=("nvml",))
            gpu.name = _as(str, entry.get("name"))
            gpu.uuid = _as(str, entry.get("uuid"))
            gpu.pci_address = _pci(_as(str, entry.get("pci_bus_id")))
            numa = _as(int, entry.get("numa_node"))
            gpu.numa_node = numa if numa is not None and numa >= 0 else None
            gpu.performance_state = _as(int, entry.get("performance_state"))
            gpu.dmabuf_supported = _as(bool, entry.get("dmabuf_supported"))
            pcie = entry.get("pcie") if isinstance(entry.get("pcie"), dict) else {}
            if gpu.pci_address and any(pcie.get(key) is not None for key in ("cur_gen", "max_gen", "cur_width", "max_width")):
                gpu.pcie = PcieLink(
                    address=gpu.pci_address,
                    current_gen=_as(int, pcie.get("cur_gen")),
                    max_gen=_as(int, pcie.get("max_gen")),
                    current_width=_as(int, pcie.get("cur_width")),
                    max_width=_as(int, pcie.get("max_width")),
                    source="nvml",
                )
            nvlink = entry.get("nvlink") if isinstance(entry.get("nvlink"), dict) else {}
            gpu.nvlink_active = _as(int, nvlink.get("active"))
            gpu.nvlink_total = _as(int, nvlink.get("total"))
            gpu.nvlink_version = _as(int, nvlink.get("version"))
            if isinstance(entry.get("errors"), dict) and entry["errors"]:
                gpu.nvml_errors = {str(key): str(value) for key, value in entry["errors"].items()}
                errors.append(f"GPU{gpu.index}: " + ", ".join(f"{key}: {value}" for key, value in sorted(entry["errors"].items())))
            inventory.gpus.append(gpu)
        inventory.gpus.sort(key=lambda gpu: gpu.index)
        self.status("nvml", SourceState.OK, "; ".join(errors)[:500], time.monotonic() - started)

    # -- tools ------------------------------------------------------------------------
    def apply_ibstat(self, result: CommandResult) -> None:
        from netdoctor.parsers.ibstat import parse_ibstat

        cas = self.parse_command(result, parse_ibstat)
        for ca in cas or ():
            hca = self.hca(ca.name, "ibstat")
            self.merge(hca, "ca_type", ca.ca_type, "ibstat", hca.name)
            self.merge(hca, "firmware", ca.firmware, "ibstat", hca.name)
            self.merge(hca, "node_guid", ca.node_guid, "ibstat", hca.name)
            self.merge(hca, "sys_image_guid", ca.sys_image_guid, "ibstat", hca.name)
            for entry in ca.ports:
                port = self.port(hca, entry.number, "ibstat")
                self.merge(port, "state", entry.state, "ibstat", port.name)
                self.merge(port, "phys_state", entry.phys_state, "ibstat", port.name)
                self.merge(port, "link_layer", entry.link_layer, "ibstat", port.name)
                self.merge(port, "port_guid", entry.port_guid, "ibstat", port.name)
                self.merge(port, "capability_mask", entry.capability_mask, "ibstat", port.name)
                if port.is_active or entry.state is None or port.state is None:
                    # Down ports print placeholder LIDs/rates: compare only on live links.
                    self.merge(port, "lid", entry.base_lid, "ibstat", port.name)
                    self.merge(port, "sm_lid", entry.sm_lid, "ibstat", port.name)
                    self.merge(port, "lmc", entry.lmc, "ibstat", port.name)
                    self.merge_rate(port, LinkRate(gbps=entry.rate_gbps) if entry.rate_gbps is not None else None, "ibstat")

    def merge_rate(self, port: Port, rate: LinkRate | None, source: str) -> None:
        if rate is None:
            return
        if port.rate is None:
            port.rate = rate
            return
        # Fill width/speed/lane facts the first source lacked; conflict only on the total rate or width.
        merged = LinkRate(
            gbps=port.rate.gbps if port.rate.gbps is not None else rate.gbps,
            width=port.rate.width or rate.width,
            speed=port.rate.speed or rate.speed,
            lane_gbps=port.rate.lane_gbps or rate.lane_gbps,
        )
        if (rate.gbps is not None and port.rate.gbps is not None and abs(rate.gbps - port.rate.gbps) > 0.5) or (
            rate.width and port.rate.width and rate.width != port.rate.width
        ):
            first = port.sources[0] if port.sources else "earlier source"
            self.inventory.conflicts.append(Conflict(port.name, "rate", {first: port.rate.describe(), source: rate.describe()}, chosen=first))
        port.rate = merged

    def apply_ibv_devinfo(self, result: CommandResult) -> None:
        from netdoctor.parsers.ibv_devinfo import parse_ibv_devinfo

        devices = self.parse_command(result, parse_ibv_devinfo)
        for device in devices or ():
            hca = self.hca(device.hca_id, "ibv_devinfo-v")
            self.merge(hca, "firmware", device.firmware, "ibv_devinfo-v", hca.name)
            self.merge(hca, "vendor_part_id", device.vendor_part_id, "ibv_devinfo-v", hca.name)
            self.merge(hca, "ca_type", ca_type_from_part_id(device.vendor_part_id), "ibv_devinfo-v", hca.name)
            self.merge(hca, "board_id", device.board_id, "ibv_devinfo-v", hca.name)
            self.merge(hca, "node_guid", device.node_guid, "ibv_devinfo-v", hca.name)
            for entry in device.ports:
                port = self.port(hca, entry.number, "ibv_devinfo-v")
                self.merge(port, "state", entry.state, "ibv_devinfo-v", port.name)
                self.merge(port, "phys_state", entry.phys_state, "ibv_devinfo-v", port.name)
                self.merge(port, "link_layer", entry.link_layer, "ibv_devinfo-v", port.name)
                self.merge(port, "active_mtu", entry.active_mtu, "ibv_devinfo-v", port.name)
                self.merge(port, "max_mtu", entry.max_mtu, "ibv_devinfo-v", port.name)
                if port.is_active:
                    self.merge(port, "lid", entry.port_lid, "ibv_devinfo-v", port.name)
                    self.merge(port, "sm_lid", entry.sm_lid, "ibv_devinfo-v", port.name)
                    self.merge_rate(port, entry.rate, "ibv_devinfo-v")

    def apply_ibdev2netdev(self, result: CommandResult) -> None:
        from netdoctor.parsers.ibdev2netdev import parse_ibdev2netdev

        for mapping in self.parse_command(result, parse_ibdev2netdev) or ():
            hca = self.hca(mapping.hca, "ibdev2netdev")
            port = self.port(hca, mapping.port, "ibdev2netdev")
            self.merge(port, "netdev", mapping.netdev, "ibdev2netdev", port.name)

    def apply_iblinkinfo(self, result: CommandResult) -> None:
        from netdoctor.parsers.iblinkinfo import parse_iblinkinfo

        links = self.parse_command(result, parse_iblinkinfo)
        if not links:
            return
        # A local port shows up in the fabric dump as a CA line with its port GUID or LID.
        by_guid = {port.port_guid: port for port in self.inventory.ports if port.port_guid}
        by_lid = {port.lid: port for port in self.inventory.ports if port.lid and port.link_layer is not LinkLayer.ETHERNET}
        for link in links:
            if link.node_kind != "CA":
                continue
            port = by_guid.get(link.node_guid) if link.node_guid else None
            if port is None and link.lid is not None:
                port = by_lid.get(link.lid)
            if port is None:
                continue
            port.peer = " ".join(str(part) for part in (link.peer_description, f"port {link.peer_port}" if link.peer_port else None) if part) or None
            if link.could_be_width or link.could_be_lane_gbps:
                port.could_be = sysfs_values.rate_from_lanes(
                    link.could_be_width or link.width, link.could_be_lane_gbps or link.lane_gbps
                )
            if "iblinkinfo" not in port.sources:
                port.sources += ("iblinkinfo",)

    def apply_perfquery(self, results: Iterable[CommandResult]) -> None:
        from netdoctor.parsers.perfquery import counters_as_sysfs, parse_perfquery

        for result in results:
            blocks = self.parse_command(result, parse_perfquery)
            if not blocks:
                continue
            hca_name, _, port_text = result.name.removeprefix("perfquery-x-").rpartition("-")
            port = self.inventory.port(f"{hca_name}:{port_text}")
            if port is None:
                continue
            counters = counters_as_sysfs(blocks[-1])
            if not port.counters:
                port.counters = dict(counters)
                port.counters_source = "perfquery"
            else:
                for name, value in counters.items():
                    port.counters.setdefault(name, value)
            if "perfquery" not in port.sources:
                port.sources += ("perfquery",)

    def apply_mlnx_qos(self, results: Iterable[CommandResult]) -> None:
        from netdoctor.parsers.mlnx_qos import parse_mlnx_qos

        for result in results:
            qos = self.parse_command(result, parse_mlnx_qos)
            netdev = self.inventory.netdev(result.name.removeprefix("mlnx_qos-"))
            if qos is None or netdev is None:
                continue
            netdev.qos = QosConfig(trust=qos.trust, pfc_enabled=tuple(qos.pfc_enabled), dcbx_mode=qos.dcbx_mode)
            netdev.sources += ("mlnx_qos",)
        self.qos_of_bonds()

    def qos_of_bonds(self) -> None:
        """A RoCE LAG bond has no QoS or ECN of its own (mlnx_qos and ecn/ live on the slaves).

        The bond gets what holds on every slave: PFC (and ECN) counts as enabled on a
        priority only when all slaves have it, a trust mode only when all agree; slaves
        that differ are also recorded as a conflict. One bad slave so fails the bond.
        """
        for bond in self.inventory.netdevs:
            slaves = [netdev for name in bond.bond_slaves if (netdev := self.inventory.netdev(name)) is not None]
            if not slaves:
                continue
            settings = {slave.name: slave.qos for slave in slaves if slave.qos is not None}
            if len(settings) == len(slaves):
                qos = list(settings.values())
                trusts = {entry.trust for entry in qos}
                dcbx = {entry.dcbx_mode for entry in qos}
                bond.qos = QosConfig(
                    trust=trusts.pop() if len(trusts) == 1 else None,
                    pfc_enabled=tuple(sorted(set.intersection(*(set(entry.pfc_enabled) for entry in qos)))),
                    dcbx_mode=dcbx.pop() if len(dcbx) == 1 else None,
                )
                if len(set(qos)) > 1:
                    self.inventory.conflicts.append(Conflict(bond.name, "qos", {name: str(entry) for name, entry in settings.items()},
                                                             chosen="what holds on every slave"))
            for point in ("ecn_np", "ecn_rp"):
                per_slave = [getattr(slave, point) for slave in slaves]
                if all(per_slave) and not getattr(bond, point):
                    priorities = set().union(*per_slave)
                    setattr(bond, point, {prio: all(ecn.get(prio, False) for ecn in per_slave) for prio in priorities})
            bond.sources += ("bond slaves",)

    def apply_topology(self, result: CommandResult) -> None:
        from netdoctor.parsers.nvidia_smi_topo import parse_nvidia_smi_topo

        topology: Topology | None = self.parse_command(result, parse_nvidia_smi_topo)
        if topology is None:
            return
        self.inventory.topology = topology
        by_index = {gpu.index: gpu for gpu in self.inventory.gpus}
        for label in topology.gpus:
            index = int(label.removeprefix("GPU"))
            gpu = by_index.get(index)
            if gpu is None:
                gpu = Gpu(index=index)
                self.inventory.gpus.append(gpu)
            gpu.sources += ("nvidia-smi-topo-m",)
            gpu.cpu_affinity = topology.cpu_affinity.get(label) or gpu.cpu_affinity
            self.merge(gpu, "numa_node", topology.numa_affinity.get(label), "nvidia-smi-topo-m", label)
        self.inventory.gpus.sort(key=lambda gpu: gpu.index)
        for label, name in topology.nic_names.items():
            if self.inventory.hca(name) is None:
                self.hca(name, "nvidia-smi-topo-m")

    # -- joins --------------------------------------------------------------------------
    def join(self) -> None:
        inventory = self.inventory
        inventory.hcas.sort(key=lambda hca: natural_key(hca.name))
        for hca in inventory.hcas:
            hca.model = hca.model or hca_model(hca.ca_type)
            if hca.pci_address and hca.pci_address not in inventory.pcie:
                link = self.read_pcie(hca.pci_address)
                if link:
                    inventory.pcie[hca.pci_address] = link
        for gpu in inventory.gpus:
            if gpu.pci_address:
                link = self.read_pcie(gpu.pci_address)
                if link:
                    inventory.pcie[gpu.pci_address] = link
                sysfs_numa = _quiet(sysfs_values.parse_numa_node, self.sys.read(f"bus/pci/devices/{gpu.pci_address}/numa_node"))
                self.merge(gpu, "numa_node", sysfs_numa, "sysfs", gpu.label)
        # Netdev <-> RDMA port: ibdev2netdev / RoCE GID 0 already set Port.netdev; IPoIB
        # and single-port functions are found through the PCI function's net/ directory.
        netdevs_by_pci: dict[str, list[Netdev]] = {}
        for netdev in inventory.netdevs:
            if netdev.pci_address:
                netdevs_by_pci.setdefault(netdev.pci_address, []).append(netdev)
        for hca in inventory.hcas:
            candidates = netdevs_by_pci.get(hca.pci_address or "", [])
            for port in hca.ports.values():
                if port.netdev is None and len(candidates) == 1 and len(hca.ports) == 1:
                    port.netdev = candidates[0].name
                netdev = inventory.netdev(port.netdev) if port.netdev else None
                if netdev is not None:
                    netdev.rdma_port = port.name


def build_inventory(source: NodeSource, *, deadline: float | None = None, fabric_scan: bool | None = None) -> Inventory:
    """Discover the node behind `source` (live or snapshot) within `deadline` (monotonic).

    `fabric_scan` runs `iblinkinfo`, a sweep of the whole IB fabric. None (the default):
    not on a live node, but a snapshot's recorded scan is used when it has one.
    """
    builder = _Builder(source)
    if fabric_scan is None:
        fabric_scan = source.is_snapshot
    node_commands = [*NODE_COMMANDS, FABRIC_SCAN] if fabric_scan else list(NODE_COMMANDS)
    if not fabric_scan:
        builder.status(FABRIC_SCAN.name, SourceState.NOT_RUN, "fabric scan not asked for (--fabric-scan)")
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="netdoctor-discover") as pool:
        node_tools = pool.submit(source.run, node_commands, deadline)
        builder.read_sysfs_rdma()
        builder.read_netdevs()
        builder.read_peer_memory()
        builder.read_pci_gpus()
        port_tools = pool.submit(source.run, _port_commands(builder.inventory), deadline)
        builder.read_nvml()
        sysfs_named_hcas = bool(builder.inventory.hcas)
        results = dict(node_tools.result())
        port_results = port_tools.result()
    _apply_node_tools(builder, results)
    if not sysfs_named_hcas:
        # sysfs named no HCA: per-port tools follow what ibstat found instead.
        late = _port_commands(builder.inventory)
        port_results = source.run(late, deadline) if late else {}
    builder.apply_perfquery(port_results[name] for name in sorted(port_results) if name.startswith("perfquery-x-"))
    builder.apply_mlnx_qos(port_results[name] for name in sorted(port_results) if name.startswith("mlnx_qos-"))
    builder.gpus_from_pci_bus()
    builder.join()
    return builder.inventory


def _apply_node_tools(builder: _Builder, results: dict[str, CommandResult]) -> None:
    # Order matters: sysfs facts first, then tools in order of trust; iblinkinfo last
    # because it matches fabric lines against GUIDs/LIDs the others filled in.
    builder.apply_ibstat(results["ibstat"])
    builder.apply_ibv_devinfo(results["ibv_devinfo-v"])
    builder.apply_ibdev2netdev(results["ibdev2netdev"])
    builder.apply_topology(results["nvidia-smi-topo-m"])
    if FABRIC_SCAN.name in results:
        builder.apply_iblinkinfo(results[FABRIC_SCAN.name])


def _port_commands(inventory: Inventory) -> list[CommandSpec]:
    specs = []
    for port in inventory.ports:
        if port.link_layer is LinkLayer.INFINIBAND:
            specs.append(perfquery_spec(port.hca, port.number))
    roce_netdevs = {port.netdev for port in inventory.ports if port.link_layer is LinkLayer.ETHERNET and port.netdev}
    # mlnx_qos speaks to the slaves of a RoCE LAG bond, not to the bond.
    for bond in [netdev for netdev in inventory.netdevs if netdev.name in roce_netdevs and netdev.bond_slaves]:
        roce_netdevs.discard(bond.name)
        roce_netdevs.update(bond.bond_slaves)
    # RoCE netdevs named by sysfs GID tables; fall back to netdevs of RoCE PCI functions.
    roce_functions = {hca.pci_address for hca in inventory.hcas if any(p.link_layer is LinkLayer.ETHERNET for p in hca.ports.values())}
    for netdev in inventory.netdevs:
        if netdev.pci_address in roce_functions and not netdev.is_ipoib:
            roce_netdevs.add(netdev.name)
    specs.extend(mlnx_qos_spec(name) for name in sorted(roce_netdevs))
    return specs


# -- small value helpers -------------------------------------------------------------------
def _clean(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    return text or None


def _sysfs_guid(text: str | None) -> str | None:
    return _quiet(lambda value: normalize_guid("sysfs", value), _clean(text))


def _pci(address: str | None) -> str | None:
    return canonical_pci_address(address) if address else None


def _uevent_slot(text: str | None) -> str | None:
    for line in (text or "").splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return line.split("=", 1)[1].strip()
    return None


def _numeric(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)


def _value(parser: Callable[[str], T], text: str | None, problems: list[str], path: str) -> T | None:
    if text is None:
        return None
    try:
        return parser(text)
    except ParseError as error:
        problems.append(f"{path}: {error.message}")
        return None


def _quiet(parser: Callable[[str], T], text: str | None) -> T | None:
    if text is None:
        return None
    try:
        return parser(text)
    except ParseError:
        return None


def _as(kind: type, value: Any) -> Any:
    if value is None:
        return None
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, bool):
        return None
    return value if isinstance(value, kind) else None


def _plain(value: Any) -> Any:
    return str(value) if hasattr(value, "value") else value


def _means_no_driver(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in ("no nvidia driver", "not found", "librarynotfound", "driver not loaded", "no nvml.json"))

