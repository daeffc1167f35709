"""Facts read from /sys: RDMA devices and ports, netdevs, PCIe links, GPUs on the PCI bus, modules.

sysfs is the first source in the order of trust: the kernel's own view. Malformed values
are read as unknown and named in the `sysfs` source's detail.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from netdoctor.errors import NetdoctorError, ParseError
from netdoctor.inventory.bridge import mark_switch_management, reads_vpd, switch_management_of_vpd
from netdoctor.inventory.hardware import (
    AMAZON_VENDOR,
    MELLANOX_VENDOR,
    NVIDIA_GPU_MODELS,
    NVIDIA_VENDOR,
    efa_generation,
    is_efa,
    is_efa_function,
    is_nvidia_gpu_function,
    is_nvswitch_function,
)
from netdoctor.inventory.merge import Draft, clean, noted, pci, quiet
from netdoctor.inventory.model import GID_SLOTS_READ, Gid, Gpu, Hca, LinkLayer, Netdev, PcieLink, PeerMemory, SourceState
from netdoctor.parsers import sysfs_values
from netdoctor.parsers.common import link_layer_from_text, normalize_guid


def read_sysfs_rdma(draft: Draft) -> None:
    started = time.monotonic()
    if not draft.sys.is_dir("class/infiniband"):
        draft.status("sysfs", SourceState.MISSING, "no /sys/class/infiniband (no RDMA devices or driver)")
        return
    problems: list[str] = []
    for name in sorted(draft.sys.listdir("class/infiniband")):
        base = f"class/infiniband/{name}"
        hca = draft.hca(name, "sysfs")
        hca.ca_type = clean(draft.sys.read(f"{base}/hca_type"))
        hca.firmware = clean(draft.sys.read(f"{base}/fw_ver"))
        hca.board_id = clean(draft.sys.read(f"{base}/board_id"))
        hca.node_guid = _sysfs_guid(draft.sys.read(f"{base}/node_guid"))
        hca.sys_image_guid = _sysfs_guid(draft.sys.read(f"{base}/sys_image_guid"))
        hca.hardware_version = clean(draft.sys.read(f"{base}/hw_rev"))
        hca.pci_address = pci(draft.sys.link_name(f"{base}/device") or _uevent_slot(draft.sys.read(f"{base}/device/uevent")))
        hca.physical_function = pci(draft.sys.link_name(f"{base}/device/physfn"))
        read_pci_identity(draft, hca, f"{base}/device")
        hca.numa_node = noted(sysfs_values.parse_numa_node, draft.sys.read(f"{base}/device/numa_node"), problems,
                               f"{base}/device/numa_node")
        for port_dir in sorted(draft.sys.listdir(f"{base}/ports"), key=_numeric):
            if not port_dir.isdigit():
                continue
            read_sysfs_port(draft, hca, int(port_dir), f"{base}/ports/{port_dir}", problems)
        if is_efa(hca) and len(hca.ports) == 1:
            # EFA drivers before the port/device split kept every statistic (rx_drops, ...) in the
            # device's hw_counters; its one port is where they belong.
            port = next(iter(hca.ports.values()))
            device_counters = read_counter_dir(draft, f"{base}/hw_counters", problems)
            for name, value in device_counters.items():
                if value is not None:
                    port.hw_counters.setdefault(name, value)
    detail = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
    draft.status("sysfs", SourceState.OK, detail, time.monotonic() - started)


def read_pci_identity(draft: Draft, hca: Hca, device: str) -> None:
    """The RDMA device's PCI function: its driver, vendor and device ids; on EFA, which GPU
    memory its own peer-to-peer path reaches (EFA never uses nvidia_peermem)."""
    hca.driver = clean(draft.sys.link_name(f"{device}/driver")) or None
    hca.pci_vendor = sysfs_values.pci_id(draft.sys.read(f"{device}/vendor"))
    hca.pci_device = sysfs_values.pci_id(draft.sys.read(f"{device}/device"))
    if reads_vpd(hca):   # a ConnectX-7 PF: the NVSwitch bridge's LPF says SMDL=SW_MNG (root-only file)
        hca.switch_management = switch_management_of_vpd(draft.sys.read_binary(f"{device}/vpd"))
    if not is_efa(hca):
        return
    hca.ca_type = hca.ca_type or efa_generation(hca.pci_device)
    # amzn-drivers efa_sysfs.c: `p2p` holds efa_p2p_provider_string() ("NVIDIA", "NVIDIA
    # peermem", empty when none); drivers r1.9 to r2.5 had `gdr` ("1" / "0") instead.
    p2p = draft.sys.read(f"{device}/p2p")
    if p2p is not None:
        hca.p2p_providers = sysfs_values.p2p_providers(p2p)
        return
    gdr = clean(draft.sys.read(f"{device}/gdr"))
    if gdr in ("0", "1"):
        hca.p2p_providers = ("NVIDIA",) if gdr == "1" else ()


def read_sysfs_port(draft: Draft, hca: Hca, number: int, base: str, problems: list[str]) -> None:
    port = draft.port(hca, number, "sysfs")
    read = draft.sys.read
    port.state = noted(sysfs_values.parse_port_state, read(f"{base}/state"), problems, f"{base}/state")
    port.phys_state = noted(sysfs_values.parse_phys_state, read(f"{base}/phys_state"), problems, f"{base}/phys_state")
    port.rate = noted(sysfs_values.parse_rate, read(f"{base}/rate"), problems, f"{base}/rate")
    port.link_layer = quiet(lambda text: link_layer_from_text("sysfs", text), read(f"{base}/link_layer"))
    port.lid = noted(sysfs_values.parse_hex_or_int, read(f"{base}/lid"), problems, f"{base}/lid")
    port.sm_lid = noted(sysfs_values.parse_hex_or_int, read(f"{base}/sm_lid"), problems, f"{base}/sm_lid")
    port.lmc = noted(sysfs_values.parse_hex_or_int, read(f"{base}/lid_mask_count"), problems, f"{base}/lid_mask_count")
    port.capability_mask = noted(sysfs_values.parse_hex_or_int, read(f"{base}/cap_mask"), problems, f"{base}/cap_mask")
    port.counters = read_counter_dir(draft, f"{base}/counters", problems)
    if port.counters:
        port.counters_source = "sysfs"
    port.hw_counters = {name: value for name, value in read_counter_dir(draft, f"{base}/hw_counters", problems).items() if value is not None}
    pkeys = []
    for index in sorted(draft.sys.listdir(f"{base}/pkeys"), key=_numeric):
        pkey = noted(sysfs_values.parse_hex_or_int, read(f"{base}/pkeys/{index}"), problems, f"{base}/pkeys/{index}")
        if pkey is not None and pkey & 0x7FFF:   # 0x0000 / 0x8000 are empty table slots
            pkeys.append(f"0x{pkey:04x}")
    port.pkeys = tuple(pkeys)
    port.netdev = clean(read(f"{base}/gid_attrs/ndevs/0")) or None
    if port.link_layer is LinkLayer.ETHERNET:
        port.gids = read_gids(read, base)
        # The ToS RoCE traffic leaves with (pfc-ecn follows it to a priority): MLNX_OFED's per-port
        # override of every QP's, and rdma_cm's default (configfs, where the device's directory exists).
        device = f"class/infiniband/{hca.name}"
        port.traffic_class_override = noted(sysfs_values.parse_traffic_class, read(f"{device}/tc/{number}/traffic_class"),
                                            problems, f"{device}/tc/{number}/traffic_class")
        configfs = f"kernel/config/rdma_cm/{hca.name}/ports/{number}/default_roce_tos"
        port.default_roce_tos = noted(sysfs_values.parse_byte, read(configfs), problems, configfs)


def read_gids(read: Callable[[str], str | None], base: str) -> dict[int, Gid]:
    """The port's first GID entries that have a type (an empty slot has none)."""
    gids: dict[int, Gid] = {}
    for index in range(GID_SLOTS_READ):
        kind = clean(read(f"{base}/gid_attrs/types/{index}"))
        if kind:
            gids[index] = Gid(kind, clean(read(f"{base}/gids/{index}")))
    return gids


def read_counter_dir(draft: Draft, path: str, problems: list[str]) -> dict[str, int | None]:
    counters: dict[str, int | None] = {}
    for name in sorted(draft.sys.listdir(path)):
        text = draft.sys.read(f"{path}/{name}")
        if text is None:
            continue
        try:
            counters[name] = sysfs_values.parse_counter(text)
        except ParseError as error:
            # Kept as "no value" (like `N/A (no PMA)`) so the check says it could not read it.
            counters[name] = None
            problems.append(f"{path}/{name}: {error.message}")
    return counters


def read_pcie(draft: Draft, address: str) -> PcieLink | None:
    base = f"bus/pci/devices/{address}"
    read = draft.sys.read
    current_speed = quiet(sysfs_values.parse_pcie_speed, read(f"{base}/current_link_speed"))
    max_speed = quiet(sysfs_values.parse_pcie_speed, read(f"{base}/max_link_speed"))
    current_width = quiet(sysfs_values.parse_link_width, read(f"{base}/current_link_width"))
    max_width = quiet(sysfs_values.parse_link_width, read(f"{base}/max_link_width"))
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


def read_pci_gpus(draft: Draft) -> None:
    """NVIDIA GPU functions on the PCI bus: what the driver should see, even when it is
    broken; the NVSwitches (the fabric the GPUs' NVLinks go through); and AWS EFA functions,
    bound to the efa driver or not."""
    if not draft.sys.is_dir("bus/pci/devices"):
        return
    found: dict[str, str] = {}
    switches: list[str] = []
    efa: dict[str, str] = {}
    nics: dict[str, tuple[str, str | None]] = {}
    for address in sorted(draft.sys.listdir("bus/pci/devices")):
        base = f"bus/pci/devices/{address}"
        vendor = draft.sys.read(f"{base}/vendor")
        if vendor is not None and vendor.strip().lower() == MELLANOX_VENDOR:
            _read_pci_nic(draft, address, nics)
            continue
        if vendor is not None and vendor.strip().lower() == AMAZON_VENDOR:
            # EFA functions, bound or not: a device that lost its driver is still named.
            device = sysfs_values.pci_id(draft.sys.read(f"{base}/device"))
            canonical = pci(address)
            if canonical is not None and is_efa_function(vendor, device):
                efa[canonical] = device or ""
            continue
        # Read `class` only for NVIDIA functions: a node has hundreds of PCI functions.
        if vendor is None or vendor.strip().lower() != NVIDIA_VENDOR:
            continue
        pci_class = draft.sys.read(f"{base}/class")
        if is_nvidia_gpu_function(vendor, pci_class):
            found[pci(address) or address] = (clean(draft.sys.read(f"{base}/device")) or "").lower()
        elif is_nvswitch_function(vendor, pci_class):
            switches.append(pci(address) or address)
    draft.inventory.pci_gpus = found
    draft.inventory.nvswitches = tuple(switches)
    draft.inventory.pci_efa = efa
    draft.inventory.pci_nics = nics
    mark_switch_management(draft.inventory)   # the RDMA devices' VPD is read; the bus's GPUs name the board


def _read_pci_nic(draft: Draft, address: str, nics: dict[str, tuple[str, str | None]]) -> None:
    """A ConnectX/BlueField network function (class 0x02xx) with its driver, whether or not an RDMA
    device came of it (mlx5_ib makes that); SR-IOV virtual functions are their PF's, not counted."""
    base = f"bus/pci/devices/{address}"
    canonical = pci(address)
    if canonical is None or not (clean(draft.sys.read(f"{base}/class")) or "").lower().startswith("0x02"):
        return
    if draft.sys.exists(f"{base}/physfn"):
        return
    device = sysfs_values.pci_id(draft.sys.read(f"{base}/device"))
    nics[canonical] = (device or "", clean(draft.sys.link_name(f"{base}/driver")) or None)


def gpus_from_pci_bus(draft: Draft) -> None:
    """NVML gave no GPU, yet GPUs are on the bus: name them from sysfs, index in PCI order.

    nvidia-smi numbers GPUs in PCI bus order, so GPUs known only from its topology
    matrix are matched to the bus by position when the counts agree.
    """
    inventory = draft.inventory
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
    # numa_node and the sysfs PCIe link are filled by the final join (build._join), as for NVML GPUs.


def read_peer_memory(draft: Draft) -> None:
    if not draft.sys.is_dir("module"):
        return   # no module list at all: unknown, not "not loaded"
    draft.inventory.nvidia_module_loaded = draft.sys.is_dir("module/nvidia")
    draft.inventory.peer_memory = PeerMemory(
        nvidia_peermem=draft.sys.is_dir("module/nvidia_peermem"),
        nv_peer_mem=draft.sys.is_dir("module/nv_peer_mem"),
        gdrdrv=draft.sys.is_dir("module/gdrdrv"),
    )
    # MLNX_OFED's mlx5_core (and kernels before 5.10) carry a module version; the inbox driver
    # of a current kernel has none (its version is the kernel's).
    draft.inventory.rdma_driver_version = (clean(draft.sys.read("module/mlx5_core/version")) or "")[:64] or None
    # The out-of-tree efa driver (AWS's installer) has a version (`2.17.1g`); the kernel's own has none.
    draft.inventory.efa_driver_version = (clean(draft.sys.read("module/efa/version")) or "")[:64] or None


def read_netdevs(draft: Draft) -> None:
    started = time.monotonic()
    try:
        facts = draft.source.netdevs()
    except NetdoctorError:
        raise
    except OSError as error:
        draft.status("netdevs", SourceState.ERROR, str(error))
        return
    for fact in facts:
        netdev = Netdev(
            name=fact.name, mtu=fact.mtu, operstate=fact.operstate, speed_mbps=fact.speed_mbps,
            mac=fact.mac, arp_type=fact.arp_type, pci_address=pci(fact.pci_address),
            sources=("netdevs",),
        )
        netdev.ecn_np = read_ecn(draft, netdev.name, "roce_np")
        netdev.ecn_rp = read_ecn(draft, netdev.name, "roce_rp")
        notification_point = f"class/net/{netdev.name}/ecn/roce_np"
        netdev.cnp_dscp = quiet(sysfs_values.parse_byte, draft.sys.read(f"{notification_point}/cnp_dscp"))
        netdev.cnp_802p_prio = quiet(sysfs_values.parse_byte, draft.sys.read(f"{notification_point}/cnp_802p_prio"))
        netdev.bond_slaves = tuple((draft.sys.read(f"class/net/{netdev.name}/bonding/slaves") or "").split())
        if netdev.pci_address:
            netdev.driver = clean(draft.sys.link_name(f"class/net/{netdev.name}/device/driver")) or None
            netdev.numa_node = quiet(sysfs_values.parse_numa_node,
                                     draft.sys.read(f"class/net/{netdev.name}/device/numa_node"))
        draft.inventory.netdevs.append(netdev)
    draft.status("netdevs", SourceState.OK, "", time.monotonic() - started)


def read_ecn(draft: Draft, netdev: str, point: str) -> dict[int, bool]:
    base = f"class/net/{netdev}/ecn/{point}/enable"
    enabled: dict[int, bool] = {}
    for priority in draft.sys.listdir(base):
        if priority.isdigit():
            value = clean(draft.sys.read(f"{base}/{priority}"))
            if value in ("0", "1"):
                enabled[int(priority)] = value == "1"
    return enabled


def _sysfs_guid(text: str | None) -> str | None:
    return quiet(lambda guid: normalize_guid("sysfs", guid), clean(text))


def _uevent_slot(text: str | None) -> str | None:
    for line in (text or "").splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return line.split("=", 1)[1].strip()
    return None


def _numeric(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)


def read_proc(draft: Draft) -> None:
    """Uptime (places plain-dmesg times; the boot time), the kernel release and command line."""
    inventory = draft.inventory
    uptime = (draft.source.proc("uptime") or "").split()
    try:
        inventory.uptime_s = float(uptime[0]) if uptime else None
    except ValueError:
        inventory.uptime_s = None
    inventory.kernel_release = (draft.source.proc("sys/kernel/osrelease") or "").strip() or None
    inventory.kernel_cmdline = (draft.source.proc("cmdline") or "").strip() or None
