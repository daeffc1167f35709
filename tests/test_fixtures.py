"""Validate the committed fixture snapshots in tests/fixtures/nodes/.

Checks the snapshot layout (CONTRACT section 4), the sysfs value formats, that every source
of a fixture agrees with every other (ibstat, ibv_devinfo, perfquery, iblinkinfo, topo, NVML,
sysfs), that each fault fixture differs from its healthy base only where its fault says, and
that the generator reproduces the committed tree byte for byte.

The small readers below are deliberately independent of netdoctor.parsers: the fixtures are
the parsers' test data, so they must not be validated with the code they will test.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import sys
import tomllib
import uuid
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from netdoctor.util import parse_iso_utc

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NODES = FIXTURES / "nodes"
INDEX = tomllib.loads((NODES / "INDEX.toml").read_text(encoding="utf-8"))["fixtures"]
NAMES = sorted(INDEX)
# The checks, plus `discovery`: a source that hung is reported (what the checks judged without).
CHECK_IDS = {"port-state", "link-speed", "pcie-link", "error-counters", "mtu", "pfc-ecn", "gpudirect",
             "gpu-nic-affinity", "nccl-probe", "discovery", "nvlink", "nvswitch-fabric", "kernel-events", "pcie-p2p-path",
             "transceiver", "nccl-env", "gpu-health", "inventory", "gpu-driver", "phy"}
LANE_GBPS = {"SDR": 2.5, "DDR": 5, "QDR": 10, "FDR10": 10, "FDR": 14, "EDR": 25, "HDR": 50, "NDR": 100, "XDR": 200}
PCIE_GEN = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}
IB_MTUS = (256, 512, 1024, 2048, 4096)


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_nodes", FIXTURES / "make_nodes.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_nodes", module)   # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


# -- small readers ----------------------------------------------------------------------------------
def read(root: Path, relative: str) -> str:
    return (root / relative).read_text(encoding="utf-8")


def sysval(root: Path, relative: str) -> str:
    return read(root, f"sys/{relative}").rstrip("\n")


def command(root: Path, name: str) -> tuple[str, str | None]:
    status = read(root, f"commands/{name}.status").strip()
    out = root / f"commands/{name}.out"
    return status, out.read_text(encoding="utf-8") if out.exists() else None


def ok_output(root: Path, name: str) -> str | None:
    status, out = command(root, name) if (root / f"commands/{name}.status").exists() else ("absent", None)
    return out if status == "0" else None


MELLANOX, AMAZON = "0x15b3", "0x1d0f"


def sysfs_ports(root: Path) -> dict[str, dict[str, Any]]:
    """hca -> port-1 attributes plus numa/pci/vendor/netdev, straight from the sys tree.

    A ConnectX function carries exactly one netdev (IPoIB or the RoCE Ethernet port); an EFA
    function (Amazon's vendor id) carries none: its `netdev` is None."""
    ports: dict[str, dict[str, Any]] = {}
    base = root / "sys/class/infiniband"
    for hca in sorted(os.listdir(base)) if base.is_dir() else []:
        port: dict[str, Any] = {
            name: sysval(root, f"class/infiniband/{hca}/ports/1/{name}")
            for name in ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid", "lid_mask_count", "cap_mask")}
        pci = os.readlink(base / hca / "device").rsplit("/", 1)[-1]
        port["pci"] = pci
        port["numa"] = sysval(root, f"bus/pci/devices/{pci}/numa_node")
        port["vendor"] = sysval(root, f"bus/pci/devices/{pci}/vendor")
        port["node_guid"] = sysval(root, f"class/infiniband/{hca}/node_guid")
        port["fw_ver"] = sysval(root, f"class/infiniband/{hca}/fw_ver")
        net = root / f"sys/bus/pci/devices/{pci}/net"
        if port["vendor"] == AMAZON:
            assert not net.exists(), (hca, "an EFA device has no netdev")
            port["netdev"] = None
        else:
            netdevs = os.listdir(net)
            assert len(netdevs) == 1, (hca, netdevs)
            port["netdev"] = netdevs[0]
        ports[hca] = port
    return ports


def is_efa(port: dict[str, Any]) -> bool:
    return port["vendor"] == AMAZON


def parse_ibstat(text: str) -> dict[str, dict[str, str]]:
    cas: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        header = re.fullmatch(r"CA '(\S+)'", line)
        if header:
            current = cas.setdefault(header.group(1), {})
        elif ":" in line and line.startswith("\t"):
            key, _, value = line.strip().partition(":")
            current[key] = value.strip()
    return cas


def parse_ibv_devinfo(text: str) -> dict[str, dict[str, str]]:
    hcas: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        header = re.fullmatch(r"hca_id:\t(\S+)", line)
        if header:
            current = hcas.setdefault(header.group(1), {})
        elif re.match(r"\t+\w[\w ]*:\t", line):
            key, _, value = line.strip().partition(":")
            current.setdefault(key, value.strip())
    return hcas


def parse_perfquery(text: str) -> tuple[int, dict[str, str]]:
    lines = text.splitlines()
    lid = re.match(r"# Port extended counters: Lid (\d+) port 1 \(CapMask: 0x[0-9A-F]+ CapMask2: 0x[0-9a-f]+\)$",
                   lines[0])
    assert lid, lines[0]
    values = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            values[name] = value.lstrip(".")
    return int(lid.group(1)), values


def parse_topo(text: str) -> tuple[list[str], dict[str, list[str]], dict[str, str]]:
    lines = text.split("\n")
    header = lines[0].replace("\x1b[4m", "").replace("\x1b[0m", "").split("\t")[1:]
    rows: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line:
            break
        cells = line.split("\t")
        rows[cells[0]] = cells[1:]
    legend = dict(re.findall(r"^  (NIC\d+): (\S+)$", text, re.MULTILINE))
    return header, rows, legend


# amzn-drivers efa_verbs.c: EFA_DEFINE_PORT_STATS (with the 2.17 network counters) and the admin-queue
# statistics of EFA_DEFINE_DEVICE_STATS.
EFA_PORT_STATS = {
    "tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs", "recv_bytes", "recv_wrs",
    "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err", "rdma_read_resp_bytes", "rdma_write_wrs",
    "rdma_write_bytes", "rdma_write_wr_err", "rdma_write_recv_bytes", "retrans_bytes", "retrans_pkts",
    "retrans_timeout_events", "unresponsive_remote_events", "impaired_remote_conn_events",
}
EFA_DEVICE_STATS = {
    "submitted_cmds", "completed_cmds", "cmds_err", "no_completion_cmds", "keep_alive_rcvd", "alloc_pd_err",
    "create_qp_err", "create_cq_err", "reg_mr_err", "alloc_ucontext_err", "create_ah_err", "mmap_err",
}

PERFQUERY_NAMES = {
    "symbol_error": "SymbolErrorCounter", "link_downed": "LinkDownedCounter",
    "link_error_recovery": "LinkErrorRecoveryCounter", "port_rcv_errors": "PortRcvErrors",
    "port_xmit_discards": "PortXmitDiscards", "port_xmit_wait": "PortXmitWait", "port_xmit_data": "PortXmitData",
    "port_rcv_data": "PortRcvData", "excessive_buffer_overrun_errors": "ExcessiveBufferOverrunErrors",
    "VL15_dropped": "VL15Dropped", "local_link_integrity_errors": "LocalLinkIntegrityErrors",
}


# -- layout ------------------------------------------------------------------------------------------
def test_index_lists_exactly_the_fixture_directories() -> None:
    directories = sorted(path.name for path in NODES.iterdir() if path.is_dir())
    assert directories == NAMES
    assert len(NAMES) == 91


@pytest.mark.parametrize("name", NAMES)
def test_index_entry_is_well_formed(name: str) -> None:
    entry = INDEX[name]
    assert entry["class"] in {"dgx-h100", "hgx-a100", "roce-h100", "pcie-only", "cpu-node", "aws-p5", "gcp-a3-high",
                              "h100-nvl", "hgx-b200", "hgx-b300", "gb200-nvl72-tray"}
    assert (entry["fault"] == "none") == (name == entry["class"])
    assert entry["rules"] == {"roce-h100": "roce", "cpu-node": "default", "h100-nvl": "default",
                              "gb200-nvl72-tray": "gb200-nvl72"}.get(entry["class"], entry["class"])
    for key in ("expect", "expect_with_baseline"):
        if key not in entry:
            continue
        expect = entry[key]
        assert expect["grade"] in {"pass", "warn", "fail", "unknown"}
        statuses = [status for _, status, _ in expect["findings"]]
        for check, status, subject in expect["findings"]:
            assert check in CHECK_IDS and status in {"warn", "fail", "unknown"} and subject
        # The grade is the worst finding (unknown ranks below fail, above warn).
        worst = next((grade for grade in ("fail", "unknown", "warn") if grade in statuses), "pass")
        assert expect["grade"] == worst


@pytest.mark.parametrize("name", NAMES)
def test_snapshot_json(name: str) -> None:
    meta = json.loads(read(NODES / name, "snapshot.json"))
    # `visibility` (what hid GPUs from the capturing process) only where a capture was constrained.
    assert set(meta) - {"visibility"} == {"format", "host", "captured_at", "netdoctor", "boot_id"}
    if "visibility" in meta:
        assert set(meta["visibility"]) == {"cuda_visible_devices", "nvidia_visible_devices", "slurm_job_id",
                                           "slurm_step_id", "kubernetes_service_host", "slurm_gpus", "container",
                                           "cgroup", "device_nodes"}
        # One device-node state per GPU on the bus: the evidence that a GPU is hidden on purpose.
        assert set(meta["visibility"]["device_nodes"].values()) <= {"ok", "absent", "denied", "unknown"}
    assert meta["format"] == "netdoctor.snapshot/1"
    assert meta["host"] == INDEX[name]["host"]
    assert meta["netdoctor"] == "0.1.0"
    assert datetime.strptime(meta["captured_at"], "%Y-%m-%dT%H:%M:%SZ")
    assert str(uuid.UUID(meta["boot_id"])) == meta["boot_id"]


def test_counter_pairs_share_boot_and_are_600_seconds_apart() -> None:
    pairs = [(name, INDEX[name]["baseline"]) for name in NAMES if "baseline" in INDEX[name]]
    assert sorted(pairs) == [("aws-p5-efa-retrans-b", "aws-p5-efa-retrans-a"),
                             ("dgx-h100-effective-ber-b", "dgx-h100-effective-ber-a"),
                             ("dgx-h100-link-downed-b", "dgx-h100-link-downed-a"),
                             ("dgx-h100-nvlink-replay-b", "dgx-h100-nvlink-replay-a"),
                             ("dgx-h100-nvlink-replay-slow-growth-b", "dgx-h100-nvlink-replay-slow-growth-a"),
                             ("dgx-h100-symbol-errors-b", "dgx-h100-symbol-errors-a"),
                             ("roce-h100-corrected-bits-b", "roce-h100-corrected-bits-a"),
                             ("roce-h100-pause-storm-b", "roce-h100-pause-storm-a"),
                             ("roce-h100-prio-discards-b", "roce-h100-prio-discards-a")]
    for later, earlier in pairs:
        meta_later = json.loads(read(NODES / later, "snapshot.json"))
        meta_earlier = json.loads(read(NODES / earlier, "snapshot.json"))
        assert meta_later["host"] == meta_earlier["host"] and meta_later["boot_id"] == meta_earlier["boot_id"]
        elapsed = (parse_iso_utc(meta_later["captured_at"]) - parse_iso_utc(meta_earlier["captured_at"])).total_seconds()
        assert elapsed == 600
        # Same boot, same driver load: no counter (IB PMA, mlx5 or EFA hw_counters) ever goes back.
        earlier_counters, later_counters = rdma_counters(NODES / earlier), rdma_counters(NODES / later)
        assert set(later_counters) == set(earlier_counters)
        for path, value in later_counters.items():
            assert value >= earlier_counters[path], path


def rdma_counters(root: Path) -> dict[str, int]:
    """Every RDMA counter file (ports/1/counters, ports/1/hw_counters, device hw_counters) by path.
    `lifespan` is hw_counters' refresh interval, not a counter."""
    base = root / "sys/class/infiniband"
    return {path.relative_to(base).as_posix(): int(path.read_text(encoding="utf-8"))
            for path in sorted(base.glob("*/**/*counters/*")) if path.name != "lifespan"} if base.is_dir() else {}


COMMAND_NAME = re.compile(r"nvidia-smi-topo-m|ibstat|ibv_devinfo-v|iblinkinfo|ibdev2netdev|"
                          r"perfquery-x-[\w]+-\d+|mlnx_qos-[\w.-]+|systemctl-show-nvidia-(?:fabricmanager|imex)|dmesg|nvidia-smi-nvlink-s|"
                          r"nvidia-smi-q|nvidia-imex-ctl-N|"
                          r"lspci-vvv|mlxlink-[mc]-\w+|ethtool-[mS]-[\w.-]+|smpquery-node(?:info|desc)-\w+-\d+|"
                          r"lldpctl-json|ofed_info-s|nv-fabricmanager-version|fi_info-p-efa|fi_info-version|ip-j-addr")


@pytest.mark.parametrize("name", NAMES)
def test_every_command_has_status_and_output(name: str) -> None:
    directory = NODES / name / "commands"
    files = os.listdir(directory)
    commands = {file.rsplit(".", 1)[0] for file in files}
    assert commands, name
    for command_name in commands:
        assert COMMAND_NAME.fullmatch(command_name), command_name
        status, out = command(NODES / name, command_name)
        assert re.fullmatch(r"\d+|timeout|missing", status), (command_name, status)
        # A tool that is not installed produced nothing; anything that ran left its stdout.
        assert (out is None) == (status == "missing"), command_name
    for file in files:
        assert file.rsplit(".", 1)[1] in {"out", "err", "status"}, file


# sysfs path pattern -> value pattern. Every file under sys/ must match exactly one rule.
PCI = r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
IF = r"[a-z][\w.-]{0,14}"
# A PCI function at its bus entry (NVSwitches) or at its place under its bridges (CONTRACT 6.2).
FUNCTION = rf"(?:bus/pci/devices/{PCI}|devices/pci[0-9a-f]{{4}}:[0-9a-f]{{2}}(?:/{PCI})+)"
# RDMA device names: mlx5 (ConnectX, IB or RoCE) and rdma-core's `rdmap<bus>s<slot>` for EFA.
MLX = r"mlx5_\d+"
EFA = r"rdmap\d+s\d+"
SYS_RULES: list[tuple[str, str]] = [
    (rf"class/infiniband/{MLX}/hca_type", r"MT\d{4,5}"),
    (rf"class/infiniband/{MLX}/fw_ver", r"\d+\.\d+\.\d+"),
    (rf"class/infiniband/{EFA}/fw_ver", r""),             # EFA has no firmware string: the file is empty
    (rf"class/infiniband/{MLX}/board_id", r"MT_\d{10}"),
    (r"class/infiniband/\w+/(node_guid|sys_image_guid)", r"[0-9a-f]{4}(:[0-9a-f]{4}){3}"),
    (rf"class/infiniband/{MLX}/hw_rev", r"0x[0-9a-f]+"),
    (rf"class/infiniband/{MLX}/node_desc", r"\S+ mlx5_\d+"),
    (r"class/infiniband/\w+/ports/1/state", r"1: DOWN|2: INIT|3: ARMED|4: ACTIVE"),
    (r"class/infiniband/\w+/ports/1/phys_state", r"2: Polling|3: Disabled|5: LinkUp"),
    (r"class/infiniband/\w+/ports/1/rate", r"\d+ Gb/sec \([1-9]\d?X (SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR)\)"),
    (rf"class/infiniband/{MLX}/ports/1/link_layer", r"InfiniBand|Ethernet"),
    (rf"class/infiniband/{EFA}/ports/1/link_layer", r"Unknown"),      # ib_core's name for RDMA_TRANSPORT_UNSPECIFIED
    (r"class/infiniband/\w+/ports/1/(lid|sm_lid)", r"0x[0-9a-f]{1,4}"),
    (rf"class/infiniband/{MLX}/ports/1/lid_mask_count", r"[0-7]"),
    (rf"class/infiniband/{EFA}/ports/1/lid_mask_count", r"1"),         # efa_query_port: lmc = 1
    (r"class/infiniband/\w+/ports/1/cap_mask", r"0x[0-9a-f]{8}"),
    (r"class/infiniband/\w+/ports/1/(counters|hw_counters)/\w+", r"\d+"),
    (rf"class/infiniband/{EFA}/hw_counters/\w+", r"\d+"),               # EFA's admin-queue statistics
    (r"class/infiniband/\w+/ports/1/pkeys/\d+", r"0x(?!0000)[0-9a-f]{4}"),
    (r"class/infiniband/\w+/ports/1/gid_attrs/ndevs/\d+", IF),
    (r"class/infiniband/\w+/ports/1/gid_attrs/types/\d+", r"IB/RoCE v1|RoCE v2"),
    (r"class/infiniband/\w+/ports/1/gids/\d+", r"[0-9a-f]{4}(:[0-9a-f]{4}){7}"),
    (rf"{FUNCTION}/numa_node", r"-1|\d+"),
    (rf"{FUNCTION}/(current|max)_link_speed", r"(2\.5|5\.0|8\.0|16\.0|32\.0|64\.0) GT/s PCIe"),
    (rf"{FUNCTION}/(current|max)_link_width", r"1|2|4|8|16|32"),
    (rf"{FUNCTION}/(vendor|device)", r"0x[0-9a-f]{4}"),
    (rf"{FUNCTION}/class", r"0x[0-9a-f]{6}"),
    (rf"{FUNCTION}/net/{IF}/ifindex", r"\d+"),
    (rf"{FUNCTION}/p2p", r"NVIDIA"),                      # the efa driver's peer-direct providers (efa_sysfs.c)
    (r"kernel/iommu_groups/\d+/type", r"identity|DMA|DMA-FQ|blocked|unmanaged"),
    (r"class/dmi/id/(sys_vendor|product_name|board_vendor|board_name)", r"[\w .,-]+"),
    (rf"class/net/{IF}/(mtu|ifindex|type)", r"\d+"),
    (rf"class/net/{IF}/speed", r"-1|\d+"),
    (rf"class/net/{IF}/operstate", r"up|down|unknown|dormant|lowerlayerdown|notpresent|testing"),
    (rf"class/net/{IF}/address", r"[0-9a-f]{2}(:[0-9a-f]{2}){5}|[0-9a-f]{2}(:[0-9a-f]{2}){19}"),
    (rf"class/net/{IF}/ecn/roce_(np|rp)/enable/[0-7]", r"[01]"),
    (rf"class/net/{IF}/ecn/roce_np/cnp_dscp", r"[1-5]?\d|6[0-3]"),     # MLNX_OFED: the CNPs' DSCP 0..63
    (rf"class/net/{IF}/ecn/roce_np/cnp_802p_prio", r"[0-7]"),
    (r"module/\w+/initstate", r"live"),
    (r"module/nvidia/version", r"\d+\.\d+\.\d+"),
    (r"module/efa/version", r"\d+\.\d+\.\d+g?"),       # amzn-drivers' version, `g` for the GPUDirect build
]
# PCI vendor ids a config space may start with (little-endian): NVIDIA, Mellanox, Intel, Broadcom
# (PLX switches), Amazon (EFA, ENA) and Google (gVNIC).
CONFIG_VENDORS = {0x10DE, 0x15B3, 0x8086, 0x1000, 0x1D0F, 0x1AE0}


@pytest.mark.parametrize("name", NAMES)
def test_sys_files_have_sysfs_value_formats(name: str) -> None:
    root = NODES / name / "sys"
    checked = 0
    for directory, _, files in os.walk(root):
        for file in files:
            path = Path(directory) / file
            if path.is_symlink():
                continue
            relative = path.relative_to(root).as_posix()
            if re.fullmatch(rf"{FUNCTION}/vpd", relative):
                # PCI VPD (the HGX B200 bridge's functions): the identifier string resource first, an end tag.
                data, function = path.read_bytes(), path.parent.relative_to(root).as_posix()
                assert data[0] == 0x82 and 0x78 in data and sysval(root.parent, f"{function}/vendor") == MELLANOX
                continue
            if re.fullmatch(rf"{FUNCTION}/config", relative):
                data = path.read_bytes()        # config space as root reads it: binary, 4096 bytes
                assert len(data) == 4096 and int.from_bytes(data[:2], "little") in CONFIG_VENDORS, relative
                # The kernel's vendor/device/class files are read from this config space.
                function = path.parent.relative_to(root).as_posix()
                for field, start, end in (("vendor", 0, 2), ("device", 2, 4), ("class", 9, 12)):
                    expected = int(sysval(root.parent, f"{function}/{field}"), 16)
                    assert int.from_bytes(data[start:end], "little") == expected, (relative, field)
                continue
            text = path.read_text(encoding="utf-8")
            assert text.endswith("\n") and text.count("\n") == 1, relative
            value = text[:-1]
            rules = [value_rule for path_rule, value_rule in SYS_RULES if re.fullmatch(path_rule, relative)]
            assert len(rules) == 1, f"{relative}: matched {len(rules)} rules"
            assert re.fullmatch(rules[0], value), f"{relative}: {value!r} does not match {rules[0]!r}"
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("name", NAMES)
def test_state_numbers_and_rates_are_self_consistent(name: str) -> None:
    for hca, port in sysfs_ports(NODES / name).items():
        number = {"DOWN": "1", "INIT": "2", "ARMED": "3", "ACTIVE": "4"}[port["state"].split(": ")[1]]
        assert port["state"].startswith(number)
        rate = re.fullmatch(r"(\d+) Gb/sec \((\d+)X (\w+)\)", port["rate"])
        assert rate, port["rate"]
        gbps, width, speed = rate.groups()
        assert float(gbps) == int(width) * LANE_GBPS[speed], hca
        physical = {"Polling": "2", "Disabled": "3", "LinkUp": "5"}[port["phys_state"].split(": ")[1]]
        assert port["phys_state"].startswith(physical)
        device = NODES / name / f"sys/class/infiniband/{hca}"
        counters = device / "ports/1/counters"
        if is_efa(port):
            # EFA has no IB PMA: no counters/. Its port statistics (EFA_DEFINE_PORT_STATS) are in
            # ports/1/hw_counters, its admin-queue statistics in the device's hw_counters; ib_core adds
            # `lifespan` to both. All are 64-bit.
            assert not counters.exists(), hca
            port_stats = {stat: int(read(device, f"ports/1/hw_counters/{stat}"))
                          for stat in os.listdir(device / "ports/1/hw_counters")}
            device_stats = {stat: int(read(device, f"hw_counters/{stat}"))
                            for stat in os.listdir(device / "hw_counters")}
            assert set(port_stats) == EFA_PORT_STATS | {"lifespan"}, hca
            assert set(device_stats) == EFA_DEVICE_STATS | {"lifespan"}, hca
            assert all(value < 2**64 for value in [*port_stats.values(), *device_stats.values()]), hca
            for unit in ("tx", "rx", "retrans"):       # a packet is at least one byte
                assert port_stats[f"{unit}_pkts"] <= port_stats[f"{unit}_bytes"], (hca, unit)
            assert device_stats["completed_cmds"] <= device_stats["submitted_cmds"], hca
            continue
        # Hardware widths: LinkDowned and LinkErrorRecovery are 8-bit, SymbolError 16-bit.
        assert int(sysval(NODES / name, f"class/infiniband/{hca}/ports/1/counters/link_downed")) <= 255
        assert int(sysval(NODES / name, f"class/infiniband/{hca}/ports/1/counters/symbol_error")) <= 65535
        assert len(os.listdir(counters)) == 21


@pytest.mark.parametrize("name", NAMES)
def test_symlinks_are_relative_and_stay_inside(name: str) -> None:
    root = (NODES / name).resolve()
    links = 0
    for directory, dirs, files in os.walk(NODES / name):
        for entry in dirs + files:
            path = Path(directory) / entry
            if not path.is_symlink():
                continue
            links += 1
            target = os.readlink(path)
            assert not os.path.isabs(target), path
            resolved = (path.parent / target).resolve()
            assert resolved.is_relative_to(root / "sys"), f"{path} -> {target} leaves the snapshot"
            assert resolved.is_dir(), f"{path} -> {target} dangles"
            relative = path.relative_to(NODES / name / "sys").as_posix()
            driver = re.fullmatch(r"bus/pci/drivers/(\w+)/module", relative)
            if driver:
                # A driver's directory holds its module (no link back to its functions: a cycle).
                assert target == f"../../../../module/{driver.group(1)}", target
            elif relative.endswith("/driver"):
                # A bound function's `driver`: up to sys/, then bus/pci/drivers/DRIVER.
                assert re.fullmatch(rf"{FUNCTION}/driver", relative), relative
                depth = relative.count("/")
                bound = re.fullmatch(rf"(?:\.\./){{{depth}}}bus/pci/drivers/(\w+)", target)
                assert bound, target
            else:
                assert re.fullmatch(rf"\.\./\.\./\.\./bus/pci/devices/{PCI}|\.\./\.\./\.\./{FUNCTION}|"
                                    rf"(?:\.\./)+kernel/iommu_groups/\d+", target), target
    if INDEX[name]["class"] != "pcie-only" or links:
        assert links > 0


@pytest.mark.parametrize("name", NAMES)
def test_no_link_leads_back_into_its_own_path(name: str) -> None:
    """Walking a fixture with links followed ends: no directory link resolves to a directory above
    it (real sysfs has such cycles, function -> driver -> function; a snapshot must not)."""
    root = NODES / name

    def walk(directory: Path, above: frozenset[Path], depth: int) -> None:
        assert depth < 40, f"{directory}: deeper than any sysfs path"
        for entry in os.scandir(directory):
            if entry.is_dir(follow_symlinks=True):
                real = Path(entry.path).resolve()
                assert real not in above, f"{entry.path} leads back to {real}"
                walk(Path(entry.path), above | {real}, depth + 1)

    walk(root, frozenset({root.resolve()}), 0)


@pytest.mark.parametrize("name", NAMES)
def test_no_empty_directories(name: str) -> None:
    # git does not keep empty directories: a marker directory must hold a file to survive a commit.
    for directory, dirs, files in os.walk(NODES / name):
        assert dirs or files, directory


def slot_name(root: Path, address: str) -> str:
    """systemd's name of a PCI function: `P<domain>` where not 0, `p<bus>s<slot>`, `f<function>` where
    the device has several functions (decimal): `ibp24s0`, `ibP16p3s0`, `ibp5s0f2`."""
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    device = address.rsplit(".", 1)[0]
    several = sum(name.rsplit(".", 1)[0] == device for name in os.listdir(root / "sys/bus/pci/devices")) > 1
    return (f"P{int(domain, 16)}" if int(domain, 16) else "") + f"p{int(bus, 16)}s{int(slot, 16)}" + (
        f"f{int(function)}" if several else "")


def on_host_subnet(ports: dict[str, dict[str, Any]]) -> set[str]:
    """IB ports of a device one of whose ports is its own SM (LID = SM LID: the NVLink subnet manager on
    an HGX B200/B300 NVSwitch bridge): a subnet of their own, never in the compute fabric's iblinkinfo."""
    devices = {port["pci"].rsplit(".", 1)[0] for port in ports.values()
               if port["link_layer"] == "InfiniBand" and port["lid"] == port["sm_lid"]}
    return {hca for hca, port in ports.items() if port["pci"].rsplit(".", 1)[0] in devices}


# Rails trained below their hardware's speed: iblinkinfo hints `( Could be ... Gbps)` on them.
DOWNTRAINED = {"dgx-h100-port-hdr": "mlx5_5", "hgx-b300-rail-ndr": "mlx5_7"}


# -- the sources agree with each other ----------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_ibstat_agrees_with_sysfs(name: str) -> None:
    root = NODES / name
    ports, text = sysfs_ports(root), ok_output(root, "ibstat")
    if text is None:
        return
    cas = parse_ibstat(text)
    assert list(cas) == sorted(cas), "ibstat lists CAs in string order"
    assert set(cas) == set(ports)
    words = {"ACTIVE": "Active", "DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed"}
    for hca, ca in cas.items():
        port = ports[hca]
        assert ca["State"] == words[port["state"].split(": ")[1]]
        assert ca["Physical state"] == port["phys_state"].split(": ")[1]
        assert ca["Rate"] == port["rate"].split()[0]
        assert int(ca["Base lid"]) == int(port["lid"], 16) and int(ca["SM lid"]) == int(port["sm_lid"], 16)
        assert ca["Link layer"] == port["link_layer"]
        assert ca["Node GUID"] == "0x" + port["node_guid"].replace(":", "")
        assert ca["LMC"] == port["lid_mask_count"] and ca["Capability mask"] == port["cap_mask"]
        # EFA: no hca_type file and an empty fw_ver, which ibstat prints as empty fields.
        hca_type = root / f"sys/class/infiniband/{hca}/hca_type"
        assert ca["CA type"] == (hca_type.read_text(encoding="utf-8").strip() if hca_type.exists() else "")
        assert hca_type.exists() != is_efa(port)
        assert ca["Firmware version"] == port["fw_ver"]
        # The port GUID: the low half of GID 0 where the port has a GID table (RoCE: the netdev MAC's
        # EUI-64; EFA: the ENI MAC's, which is also the node GUID); on IB the node GUID.
        gid0 = root / f"sys/class/infiniband/{hca}/ports/1/gids/0"
        if gid0.exists():
            assert ca["Port GUID"] == "0x" + gid0.read_text(encoding="utf-8").strip().replace(":", "")[16:]
        else:
            assert port["link_layer"] == "InfiniBand" and ca["Port GUID"] == ca["Node GUID"]
        if is_efa(port):
            assert ca["Port GUID"] == ca["Node GUID"] and ca["Port GUID"][8:12] == "fffe", "EUI-64 of the ENI MAC"


@pytest.mark.parametrize("name", NAMES)
def test_ibv_devinfo_agrees_with_sysfs_and_netdev_mtu(name: str) -> None:
    root = NODES / name
    ports, text = sysfs_ports(root), ok_output(root, "ibv_devinfo-v")
    if text is None:
        return
    hcas = parse_ibv_devinfo(text)
    assert set(hcas) == set(ports)
    assert list(hcas) == sorted(hcas, key=lambda hca: ports[hca]["pci"]), "ibv_devinfo lists devices in PCI order"
    gids = dict(re.findall(r"^hca_id:\t(\S+)\n(?:\t.*\n|\n)*?\t+GID\[  0\]:\t+([0-9a-f:]+)", text, re.MULTILINE))
    assert set(gids) == set(hcas)
    states = {"ACTIVE": "PORT_ACTIVE (4)", "DOWN": "PORT_DOWN (1)"}
    # ib_core's sysfs says `Unknown` where libibverbs says `Unspecified` (EFA: IB_LINK_LAYER_UNSPECIFIED).
    link_layers = {"InfiniBand": "InfiniBand", "Ethernet": "Ethernet", "Unknown": "Unspecified"}
    for hca, info in hcas.items():
        port = ports[hca]
        assert info["state"] == states[port["state"].split(": ")[1]]
        assert info["phys_state"].endswith(f"({port['phys_state'].split(':')[0]})"), hca
        assert int(info["port_lid"]) == int(port["lid"], 16) and int(info["sm_lid"]) == int(port["sm_lid"], 16)
        assert int(info["port_lmc"], 16) == int(port["lid_mask_count"]) and info["port_cap_flags"] == port["cap_mask"]
        assert info["link_layer"] == link_layers[port["link_layer"]]
        assert info["node_guid"] == port["node_guid"] and info["phys_port_cnt"] == "1"
        # vendor_part_id is the PCI device id (ConnectX-7 4129 = 0x1021, EFA 61345 = 0xefa1).
        assert int(info["vendor_part_id"]) == int(sysval(root, f"bus/pci/devices/{port['pci']}/device"), 16)
        # EFA's firmware version: an empty sysfs string, 0.0.0.0 from ibv_query_device.
        assert info["fw_ver"] == (port["fw_ver"] or "0.0.0.0"), hca
        gid0 = root / f"sys/class/infiniband/{hca}/ports/1/gids/0"
        expected_gid = (gid0.read_text(encoding="utf-8").strip() if gid0.exists()
                        else "fe80:0000:0000:0000:" + port["node_guid"])
        assert gids[hca] == expected_gid, hca
        width = int(info["active_width"].split("X")[0])
        lane = float(info["active_speed"].split()[0])
        assert width * lane == float(port["rate"].split()[0]), hca
        active_mtu = int(info["active_mtu"].split()[0])
        if is_efa(port):
            # No netdev to fit: efa_query_port reports the device's MTU as both max and active.
            assert info["vendor_id"] == AMAZON and info["transport"] == "unspecified (4)", hca
            assert active_mtu == int(info["max_mtu"].split()[0]), hca
            continue
        assert info["vendor_id"] == "0x02c9", hca          # Mellanox's IEEE OUI, not its PCI vendor id
        netdev_mtu = int(sysval(root, f"class/net/{port['netdev']}/mtu"))
        if port["link_layer"] == "InfiniBand":
            assert netdev_mtu == active_mtu - 4, "IPoIB datagram MTU is the IB MTU less its 4-byte header"
        else:
            # RoCE: the largest IB MTU that fits in the netdev MTU after RoCE v2 headers.
            assert active_mtu == max(mtu for mtu in IB_MTUS if mtu <= netdev_mtu - 100), hca


@pytest.mark.parametrize("name", NAMES)
def test_ibdev2netdev_and_gid_ndevs_agree_with_sysfs(name: str) -> None:
    root = NODES / name
    ports, text = sysfs_ports(root), ok_output(root, "ibdev2netdev")
    if text is not None:
        listed = re.findall(r"^(\S+) port 1 ==> (\S+) \((Up|Down)\)$", text, re.MULTILINE)
        assert len(listed) == len(text.splitlines()) == len(ports)
        for hca, netdev, updown in listed:
            assert ports[hca]["netdev"] == netdev
            assert (updown == "Up") == (sysval(root, f"class/net/{netdev}/operstate") == "up")
    net = root / "sys/class/net"
    for hca, port in ports.items():
        netdev = port["netdev"]
        bus, slot = port["pci"].split(":")[1], port["pci"].split(":")[2].split(".")[0]
        if is_efa(port):
            # EFA: no netdev on the function (sysfs_ports) and none that points at it, so no GID
            # attributes either; rdma-core names it rdmap<bus>s<slot> (decimal); GID 0 is the
            # link-local address of its GUID (the ENI MAC's EUI-64).
            assert hca == f"rdmap{int(bus, 16)}s{int(slot, 16)}", hca
            assert not any(os.readlink(device).endswith(port["pci"]) for device in net.glob("*/device"))
            assert not (root / f"sys/class/infiniband/{hca}/ports/1/gid_attrs").exists()
            assert sysval(root, f"class/infiniband/{hca}/ports/1/gids/0") == "fe80:0000:0000:0000:" + port["node_guid"]
            continue
        arp_type = sysval(root, f"class/net/{netdev}/type")
        assert os.readlink(root / f"sys/class/net/{netdev}/device").endswith(port["pci"])
        if port["link_layer"] == "Ethernet":
            assert arp_type == "1" and sysval(root, f"class/infiniband/{hca}/ports/1/gid_attrs/ndevs/0") == netdev
            # GID 0: the link-local address of the netdev MAC's EUI-64 (universal/local bit flipped).
            mac = bytearray.fromhex(sysval(root, f"class/net/{netdev}/address").replace(":", ""))
            mac[0] ^= 0x02
            eui64 = (mac[:3] + b"\xff\xfe" + mac[3:]).hex()
            gid0 = "fe80:0000:0000:0000:" + ":".join(eui64[index:index + 4] for index in range(0, 16, 4))
            assert sysval(root, f"class/infiniband/{hca}/ports/1/gids/0") == gid0, hca
            assert ok_output(root, f"mlnx_qos-{netdev}") is not None
            assert len(os.listdir(root / f"sys/class/net/{netdev}/ecn/roce_np/enable")) == 8
        else:
            assert arp_type == "32" and netdev == "ib" + slot_name(root, port["pci"])
        speed = int(sysval(root, f"class/net/{netdev}/speed"))
        up = port["state"] == "4: ACTIVE"
        assert speed == (int(port["rate"].split()[0]) * 1000 if up else -1)


@pytest.mark.parametrize("name", NAMES)
def test_perfquery_agrees_with_sysfs_counters(name: str) -> None:
    root = NODES / name
    ports = sysfs_ports(root)
    names = [file.removesuffix(".status") for file in os.listdir(root / "commands")
             if file.startswith("perfquery-") and file.endswith(".status")]
    infiniband = sorted(hca for hca, port in ports.items() if port["link_layer"] == "InfiniBand")
    assert sorted(name.removeprefix("perfquery-x-").removesuffix("-1") for name in names) == infiniband
    for hca in infiniband:
        status, out = command(root, f"perfquery-x-{hca}-1")
        if status != "0":
            assert status == "missing" or ports[hca]["state"] != "4: ACTIVE", (hca, status)
            continue
        assert out is not None
        lid, values = parse_perfquery(out)
        assert lid == int(ports[hca]["lid"], 16)
        for sysfs_name, perfquery_name in PERFQUERY_NAMES.items():
            assert values[perfquery_name] == sysval(root, f"class/infiniband/{hca}/ports/1/counters/{sysfs_name}")


@pytest.mark.parametrize("name", NAMES)
def test_iblinkinfo_lists_active_ports_at_their_rate(name: str) -> None:
    root = NODES / name
    text = ok_output(root, "iblinkinfo")
    ports = sysfs_ports(root)
    status, _ = command(root, "iblinkinfo")
    # With no InfiniBand port (RoCE, EFA) there is no umad port to send MADs from: iblinkinfo fails.
    has_ib = any(port["link_layer"] == "InfiniBand" for port in ports.values())
    if status not in ("0", "missing"):
        assert status == "255" and not has_ib, status
        assert "mad_rpc_open_port: can't open UMAD port" in read(root, "commands/iblinkinfo.err")
    elif status == "0":
        assert has_ib
    if text is None:
        return
    per_lane = {"212.5": 200, "106.25": 100, "53.125": 50, "25.78125": 25}
    seen = set()
    for line_number, line in enumerate(text.splitlines()):
        ca = re.fullmatch(r"CA: \S+ (\S+):", line)
        if ca:
            hca = ca.group(1)
            link = re.fullmatch(r" {6}0x([0-9a-f]{16}) +(\d+) +1\[  \] ==\( +(\d)X +([\d.]+) Gbps Active/  LinkUp\)==> "
                                r"+\d+ +\d+\[  \] \"[^\"]+\" \((.*)\)", text.splitlines()[line_number + 1])
            assert link, text.splitlines()[line_number + 1]
            guid, lid, width, lane, hint = link.groups()
            port = ports[hca]
            assert port["state"] == "4: ACTIVE" and int(lid) == int(port["lid"], 16)
            assert guid == port["node_guid"].replace(":", "")
            assert int(width) * per_lane[lane] == int(port["rate"].split()[0])
            assert (hint.strip() == "") == (DOWNTRAINED.get(name) != hca), hint
            seen.add(hca)
    assert seen == {hca for hca, port in ports.items()
                    if port["link_layer"] == "InfiniBand" and port["state"] == "4: ACTIVE"} - on_host_subnet(ports)


@pytest.mark.parametrize("name", NAMES)
def test_fi_info_lists_the_efa_devices(name: str) -> None:
    """libfabric's efa provider: one FI_EP_RDM domain per EFA RDMA device, then one FI_EP_DGRAM
    domain per device, each in PCI order; the provider version is the library's (1.22 -> 122.0)."""
    root = NODES / name
    ports = sysfs_ports(root)
    efas = sorted((hca for hca, port in ports.items() if is_efa(port)), key=lambda hca: ports[hca]["pci"])
    text = ok_output(root, "fi_info-p-efa")
    if not efas:
        assert not (root / "commands/fi_info-p-efa.status").exists() and text is None
        return
    assert text is not None
    entries = re.findall(r"provider: (\S+)\n    fabric: (\S+)\n    domain: (\S+)\n    version: (\d+)\.(\d+)\n"
                         r"    type: (\S+)\n    protocol: (\S+)\n", text)
    assert "".join(f"provider: {p}\n    fabric: {f}\n    domain: {d}\n    version: {major}.{minor}\n    type: {t}\n"
                   f"    protocol: {proto}\n" for p, f, d, major, minor, t, proto in entries) == text
    assert [domain for _, _, domain, *_ in entries] == [f"{hca}-rdm" for hca in efas] + [f"{hca}-dgrm" for hca in efas]
    assert {(provider, fabric, protocol) for provider, fabric, _, _, _, _, protocol in entries} == \
        {("efa", "efa", "FI_PROTO_EFA")}
    assert [kind for *_, kind, _ in entries] == ["FI_EP_RDM"] * len(efas) + ["FI_EP_DGRAM"] * len(efas)
    version = ok_output(root, "fi_info-version")
    assert version is not None
    library = re.fullmatch(r"fi_info: (\S+)\nlibfabric: (\S+)\nlibfabric api: (\d+)\.(\d+)\n", version)
    assert library and library.group(1) == library.group(2) and library.group(2).startswith(
        f"{library.group(3)}.{library.group(4)}.")
    api = int(library.group(3)) * 100 + int(library.group(4))
    assert {(int(major), int(minor)) for *_, major, minor, _, _ in entries} == {(api, 0)}


@pytest.mark.parametrize("name", NAMES)
def test_topology_and_nvml_agree_with_sysfs(name: str) -> None:
    root = NODES / name
    nvml_path = root / "nvml.json"
    if not nvml_path.exists():
        assert command(root, "nvidia-smi-topo-m")[0] == "missing"
        assert not (root / "sys/module/nvidia").exists()
        return
    nvml = json.loads(nvml_path.read_text(encoding="utf-8"))
    assert nvml["driver_version"] == sysval(root, "module/nvidia/version")
    assert isinstance(nvml["cuda_driver_version"], int) and nvml["nvml_version"].endswith(nvml["driver_version"])
    gpu_numa, memory_numa = {}, {}
    function_numa = {int(sysval(root, f"bus/pci/devices/{address}/numa_node"))
                     for address in os.listdir(root / "sys/bus/pci/devices")
                     if (root / f"sys/bus/pci/devices/{address}/numa_node").exists()}
    for gpu in nvml["gpus"]:
        domain, bus, function = gpu["pci_bus_id"].split(":")
        address = f"{domain[-4:]}:{bus}:{function}".lower()
        assert sysval(root, f"bus/pci/devices/{address}/vendor") == "0x10de"
        sysfs_numa = int(sysval(root, f"bus/pci/devices/{address}/numa_node"))
        if gpu["numa_node"] != sysfs_numa:
            # Grace (GB200): NVML names the GPU memory's own node (2/10/18/26), one no PCI function is on.
            assert gpu["numa_node"] not in function_numa, address
            memory_numa[f"GPU{gpu['index']}"] = gpu["numa_node"]
        speed = sysval(root, f"bus/pci/devices/{address}/current_link_speed").split()[0]
        assert PCIE_GEN[speed] == gpu["pcie"]["cur_gen"]
        assert int(sysval(root, f"bus/pci/devices/{address}/current_link_width")) == gpu["pcie"]["cur_width"]
        assert PCIE_GEN[sysval(root, f"bus/pci/devices/{address}/max_link_speed").split()[0]] == gpu["pcie"]["max_gen"]
        assert gpu["nvlink"]["active"] <= gpu["nvlink"]["total"] and gpu["errors"] == {}
        assert isinstance(gpu["dmabuf_supported"], bool) and gpu["uuid"].startswith("GPU-")
        # A cloud VM's GPUs are passed through to it; bare-metal GPUs are not virtualised.
        cloud = sysval(root, "class/dmi/id/sys_vendor") in {"Amazon EC2", "Google"}
        assert gpu["virtualization_mode"] == ("passthrough" if cloud else "none")
        gpu_numa[f"GPU{gpu['index']}"] = sysfs_numa
    text = ok_output(root, "nvidia-smi-topo-m")
    if text is None:
        assert command(root, "nvidia-smi-topo-m")[0] == "timeout"
        return
    header, rows, legend = parse_topo(text)
    ports = sysfs_ports(root)
    # NVML's NICs are the ConnectX devices; EFA is not a NIC to NVML (the p5 topology has no NIC
    # columns and no legend), so the legend lists the non-EFA RDMA devices in PCI order.
    by_pci = sorted((hca for hca, port in ports.items() if not is_efa(port)), key=lambda hca: ports[hca]["pci"])
    assert list(legend.values()) == by_pci
    assert ("NIC Legend:" in text) == bool(by_pci)
    devices = [f"GPU{index}" for index in range(len(gpu_numa))] + list(legend)
    assert header == devices + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert list(rows) == devices
    numa = dict(gpu_numa, **{label: int(ports[hca]["numa"]) for label, hca in legend.items()})
    for row in devices:
        cells = rows[row]
        assert len(cells) == len(devices) + 4
        if row.startswith("GPU"):
            # NUMA Affinity: the CPU's node, first of a list on Grace (`0,3-9,11-17`); GPU NUMA ID: NVML's memory node.
            assert int(cells[-3].split(",")[0]) == numa[row] and cells[-2:] == ["", str(memory_numa.get(row, "N/A"))]
        for column, cell in zip(devices, cells):
            assert cell == rows[column][devices.index(row)], "the matrix is symmetric"
            if row == column:
                assert cell == " X "
            elif memory_numa and not (row.startswith("GPU") and column.startswith("GPU")):
                # Grace: SYS between any two devices but the functions of one NIC card (PIX).
                same_card = {ports[legend[label]]["pci"].rsplit(".", 1)[0] for label in (row, column) if label in legend}
                assert cell == ("PIX" if row in legend and column in legend and len(same_card) == 1 else "SYS")
            elif not (row.startswith("GPU") and column.startswith("GPU") and cell.startswith("NV")):
                assert (cell == "SYS") == (numa[row] != numa[column]), (row, column, cell)


@pytest.mark.parametrize("name", NAMES)
def test_lspci_lists_the_sysfs_functions_and_their_drivers(name: str) -> None:
    """`lspci -vvv` shows every PCI function of the sys tree, and where sysfs holds a driver's
    directory (bus/pci/drivers/DRIVER: the cloud NICs' efa, ena, gve), lspci's `Kernel driver in use`
    and the function's `driver` link name the same driver: an unbound function has neither."""
    root = NODES / name
    text = ok_output(root, "lspci-vvv")
    assert text is not None
    blocks = re.findall(rf"^({PCI}) [^\n]+\n((?:\t[^\n]*\n)*)", text, re.MULTILINE)
    assert sorted(address for address, _ in blocks) == sorted(os.listdir(root / "sys/bus/pci/devices"))
    drivers_dir = root / "sys/bus/pci/drivers"
    known = set(os.listdir(drivers_dir)) if drivers_dir.is_dir() else set()
    for address, body in blocks:
        in_use = re.findall(r"^\tKernel driver in use: (\S+)$", body, re.MULTILINE)
        assert len(in_use) <= 1, address
        link = root / f"sys/bus/pci/devices/{address}/driver"
        linked = os.readlink(link).rsplit("/", 1)[-1] if link.is_symlink() else None
        if linked is not None:
            assert in_use == [linked], address
        elif in_use:
            assert in_use[0] not in known, f"{address}: lspci says {in_use[0]}, sysfs has no driver link"


def pcie_switch(root: Path, address: str) -> str | None:
    """The upstream port of the PCIe switch a function sits behind (None: on a root port or the root bus)."""
    place = (root / f"sys/bus/pci/devices/{address}").resolve().relative_to((root / "sys/devices").resolve()).parts
    return place[2] if len(place) >= 5 else None


@pytest.mark.parametrize("name", NAMES)
def test_nics_share_the_numa_node_of_the_gpus_beside_them(name: str) -> None:
    """The NIC placement the topology shows as PIX/PXB, read from the PCIe tree: every network
    function (ConnectX, EFA, gVNIC) behind a GPU's PCIe switch is on that GPU's NUMA node. This is
    the rule for the NICs NVML does not list (EFA, gVNIC) as much as for the ConnectX ones."""
    root = NODES / name
    if not (root / "nvml.json").exists():
        return
    gpus = {f"{gpu['pci_bus_id'][4:]}".lower(): gpu["numa_node"]
            for gpu in json.loads(read(root, "nvml.json"))["gpus"]}
    gpu_numa_by_switch: dict[str | None, set[int]] = {}
    for address, numa in gpus.items():
        gpu_numa_by_switch.setdefault(pcie_switch(root, address), set()).add(numa)
    beside = 0
    for device in sorted((root / "sys/bus/pci/devices").iterdir()):
        if not sysval(root, f"bus/pci/devices/{device.name}/class").startswith("0x02"):
            continue
        switch = pcie_switch(root, device.name)
        if switch is None or switch not in gpu_numa_by_switch:
            continue
        numa = int(sysval(root, f"bus/pci/devices/{device.name}/numa_node"))
        assert gpu_numa_by_switch[switch] == {numa}, device.name
        beside += 1
    # Not on a PCIe card (pcie-only) or on Grace, whose GPUs hang off NVLink-C2C root ports (GB200).
    assert beside or INDEX[name]["class"] in ("pcie-only", "gb200-nvl72-tray")


# -- each fault fixture differs from its healthy base only where its fault says -------------------------
CHANGED: dict[str, list[str]] = {
    "dgx-h100-port-hdr": ["commands/mlxlink-[mc]-mlx5_5.out", "commands/iblinkinfo.out", "commands/ibstat.out", "commands/ibv_devinfo-v.out",
                          "sys/class/infiniband/mlx5_5/ports/1/rate", "sys/class/net/ibp94s0/speed"],
    "dgx-h100-port-down": ["commands/ip-j-addr.out", "commands/mlxlink-[mc]-mlx5_4.out", "commands/ibdev2netdev.out", "commands/iblinkinfo.out", "commands/ibstat.out",
                           "commands/ibv_devinfo-v.out", "commands/perfquery-x-mlx5_4-1.*", "commands/smpquery-node*-mlx5_4-1.*",
                           "sys/class/infiniband/mlx5_4/ports/1/*state", "sys/class/infiniband/mlx5_4/ports/1/rate",
                           "sys/class/net/ibp79s0/operstate", "sys/class/net/ibp79s0/speed"],
    "dgx-h100-mtu-2048": ["commands/ibv_devinfo-v.out", "sys/class/net/ibp*/mtu", "commands/ip-j-addr.out"],
    "dgx-h100-no-peermem": ["nvml.json", "sys/module/nvidia_peermem/initstate"],
    # The NIC moves to the other socket: under another root port, so its bridges and IOMMU groups change too.
    "dgx-h100-gpu-sys-nic": ["commands/nvidia-smi-topo-m.out", "commands/lspci-vvv.out", "sys/devices/*",
                             "sys/bus/pci/devices/*", "sys/kernel/iommu_groups/*"],
    "dgx-h100-pcie-gen4-x8": ["nvml.json", "sys/devices/*/0000:52:00.0/current_link_*"],
    "dgx-h100-row-remap-pending": ["nvml.json"],
    "dgx-h100-row-remap-failure": ["nvml.json"],
    "dgx-h100-ecc-volatile": ["nvml.json"],
    "dgx-h100-ecc-contained": ["nvml.json"],
    "dgx-h100-recovery-reboot": ["nvml.json"],
    "dgx-h100-hw-slowdown-idle": ["nvml.json"],
    "dgx-h100-idle-gen1": ["nvml.json", "sys/devices/*/current_link_speed"],
    "dgx-h100-busy-gen4": ["nvml.json", "sys/devices/*/0000:52:00.0/current_link_speed"],
    "dgx-h100-acs-redirect": ["sys/devices/*/0000:4e:01.0/config", "commands/lspci-vvv.out"],
    "dgx-h100-acs-off-path": ["sys/devices/*/0000:28:00.0/config", "commands/lspci-vvv.out"],
    "dgx-h100-iommu-translated": ["sys/kernel/iommu_groups/*/type", "proc/cmdline", "commands/dmesg.out"],
    "dgx-h100-switch-uplink-x8": ["sys/devices/*/0000:5c:00.0/current_link_width"],
    "dgx-h100-module-hot": ["commands/mlxlink-m-mlx5_6.out"],
    "dgx-h100-nccl-absent-hca": ["nccl-env.json"],
    "dgx-h100-nccl-prefix-trap": ["nccl-env.json"],
    "dgx-h100-nccl-no-interface": ["nccl-env.json"],
    "dgx-h100-nccl-ib-disabled": ["nccl-env.json"],
    "dgx-h100-nccl-ib-disable-true": ["nccl-env.json"],
    "dgx-h100-nccl-ifname-no-address": ["nccl-env.json", "commands/ip-j-addr.out"],
    "roce-h100-nccl-gid-no-address": [f"sys/class/infiniband/mlx5_2/ports/1/{kind}/{index}" for index in (2, 3)
                                      for kind in ("gids", "gid_attrs/ndevs", "gid_attrs/types")]
                                     + ["commands/ip-j-addr.out"],     # ens3np0 without its IPv4 address
    "dgx-h100-topo-timeout": ["commands/nvidia-smi-topo-m.*"],
    "dgx-h100-no-ibstat": ["commands/ibstat.*", "commands/iblinkinfo.*", "commands/perfquery-x-*", "commands/smpquery-*"],
    # mlxlink's Link Down Counter is the IB port counters' link_downed (the PMA counter sysfs shows).
    "dgx-h100-counters-saturated": ["commands/perfquery-x-mlx5_10-1.out", "commands/mlxlink-c-mlx5_10.out",
                                    "sys/class/infiniband/mlx5_10/ports/1/counters/link_downed",
                                    "sys/class/infiniband/mlx5_10/ports/1/counters/symbol_error"],
    "dgx-h100-symbol-errors-a": ["commands/perfquery-x-mlx5_6-1.out",
                                 "sys/class/infiniband/mlx5_6/ports/1/counters/symbol_error"],
    "dgx-h100-link-downed-a": ["commands/perfquery-x-mlx5_9-1.out", "commands/mlxlink-c-mlx5_9.out",
                               "sys/class/infiniband/mlx5_9/ports/1/counters/link_downed"],
    "roce-h100-no-pfc": ["commands/mlnx_qos-ens*np0.out", "commands/ethtool-S-ens*np0.out"],   # no PFC pause counters
    "roce-h100-ecn-off": ["sys/class/net/ens*np0/ecn/roce_*/enable/3"],
    "roce-h100-mtu-1500": ["commands/ibv_devinfo-v.out", "sys/class/net/ens3np0/mtu", "commands/ip-j-addr.out",
                           "commands/ethtool-S-ens3np0.out"],     # RoCE packets of a 1024-byte MTU
    "dgx-h100-nvlinks-down": ["nvml.json", "commands/nvidia-smi-nvlink-s.out"],
    "dgx-h100-fabric-manager-failed": ["nvml.json", "commands/systemctl-show-nvidia-fabricmanager.out"],
    "dgx-h100-fabric-in-progress": ["nvml.json"],
    "dgx-h100-nvlink-replay-a": ["nvml.json"],
    "dgx-h100-xid-79": ["commands/dmesg.out"],
    "dgx-h100-xid-application": ["commands/dmesg.out"],
    "dgx-h100-xid-before-boot": ["commands/dmesg.out"],
    "dgx-h100-xid-94": ["commands/dmesg.out", "nvml.json"],
    "dgx-h100-xid-63": ["commands/dmesg.out"],
    "dgx-h100-xid-109": ["commands/dmesg.out"],
    "dgx-h100-xid-154-reboot": ["commands/dmesg.out", "nvml.json"],
    "dgx-h100-xid-before-driver-reload": ["commands/dmesg.out"],
    "dgx-h100-link-flap": ["commands/dmesg.out"],
    # The functions stay on the bus (ids, config, place in the tree); the RDMA devices, the driver's
    # links and the efa sysfs file go, and the tools stop listing them.
    "aws-p5-efa-unbound": ["commands/ibstat.out", "commands/ibv_devinfo-v.out", "commands/fi_info-p-efa.out",
                           "commands/lspci-vvv.out", "sys/class/infiniband/rdmap11[456]s0/*",
                           "sys/devices/*/0000:7[234]:00.0/driver",
                           "sys/devices/*/0000:7[234]:00.0/p2p"],
    "aws-p5-efa-down": ["commands/ibstat.out", "commands/ibv_devinfo-v.out",
                        "sys/class/infiniband/rdmap131s0/ports/1/*state"],
    "aws-p5-nccl-socket": ["nccl-env.json"],
    "aws-p5-efa-retrans-a": ["sys/class/infiniband/rdmap147s0/ports/1/hw_counters/retrans_timeout_events"],
    # 600 s of traffic on every device, and rdmap147s0's retransmits, timeouts and impaired peers.
    "aws-p5-efa-retrans-b": [f"sys/class/infiniband/rdmap*s0/ports/1/hw_counters/{direction}_{unit}"
                             for direction in ("tx", "rx") for unit in ("bytes", "pkts")]
                            + [f"sys/class/infiniband/rdmap147s0/ports/1/hw_counters/{counter}" for counter in
                               ("retrans_pkts", "retrans_bytes", "retrans_timeout_events",
                                "impaired_remote_conn_events")],
}
# The inventory fixtures. GPU7 gone: from sysfs (its place under its switch, its IOMMU group) and from
# every tool; its bridges stay (they lead to nothing). mlx5_ib not loaded: the RDMA devices, IPoIB
# netdevs and per-device tools go, the functions get a driver link and mlx5_ib's module dir goes.
# Inside a job: NVML and nvidia-smi see two GPUs, and snapshot.json says why (`visibility`).
CHANGED.update({
    "dgx-h100-7-gpus": ["nvml.json", "commands/nvidia-smi-topo-m.out", "commands/nvidia-smi-nvlink-s.out",
                        "commands/lspci-vvv.out", "sys/devices/*/0000:db:01.0*", "sys/devices/*/0000:dc:00.0/iommu_group",
                        "sys/bus/pci/devices/0000:d[bf]:0[01].0", "sys/kernel/iommu_groups/*"],
    "dgx-h100-no-mlx5-ib": ["commands/*", "sys/class/infiniband/*", "sys/class/net/ibp*", "sys/devices/*/driver",
                            "sys/devices/*/net/ibp*", "sys/bus/pci/drivers/mlx5_core/module",
                            "sys/module/mlx5_ib/initstate"],
    "dgx-h100-job-2-gpus": ["nvml.json", "commands/nvidia-smi-topo-m.out", "commands/nvidia-smi-nvlink-s.out"],
    # From slurmd's Prolog: every device node opens, NVML lost GPU6 and GPU7 (snapshot.json says so).
    "dgx-h100-prolog-6-gpus": ["nvml.json", "commands/nvidia-smi-topo-m.out", "commands/nvidia-smi-nvlink-s.out"],
})
# The physical layer (phy, pfc-ecn's traffic class). Without MFT, mlxlink -m and -c are `missing`.
CHANGED.update({
    "dgx-h100-raw-ber-high": ["commands/mlxlink-c-mlx5_3.out"],
    "dgx-h100-effective-ber-a": ["commands/mlxlink-c-mlx5_4.out", "commands/perfquery-x-mlx5_4-1.out",
                                 "sys/class/infiniband/mlx5_4/ports/1/counters/symbol_error"],
    "roce-h100-pause-storm-a": ["commands/ethtool-S-ens3np0.out"],
    "roce-h100-prio-discards-a": ["commands/ethtool-S-ens2np0.out"],
    "roce-h100-corrected-bits-a": ["commands/ethtool-S-ens5np0.out", "commands/mlxlink-[mc]-mlx5_*"],
    "roce-h100-lossy-priority": ["nccl-env.json"],
})
# Blackwell, NVL72 and XDR (tests/fixtures/make_blackwell.py). The 7-GPU B300 lost a GPU with its ConnectX-8
# and their PCIe switch: NVML renumbers the GPUs, and the RDMA devices after it are named one lower.
CHANGED.update({
    "gb200-nvl72-tray-no-domain": ["nvml.json"],
    "gb200-nvl72-tray-other-clique": ["nvml.json"],
    "gb200-nvl72-tray-imex-down": ["commands/nvidia-imex-ctl-N.out"],
    "gb200-nvl72-tray-xid-149": ["commands/dmesg.out"],
    "gb200-nvl72-tray-xid-145": ["commands/dmesg.out"],
    "hgx-b300-7-gpus": ["nvml.json", "commands/*", "sys/class/*", "sys/devices/*", "sys/bus/pci/devices/*",
                        "sys/kernel/iommu_groups/*"],
    "hgx-b300-rail-ndr": ["commands/mlxlink-[mc]-mlx5_7.out", "commands/iblinkinfo.out", "commands/ibstat.out",
                          "commands/ibv_devinfo-v.out", "sys/class/infiniband/mlx5_7/ports/1/rate",
                          "sys/class/net/ibp217s0/speed"],
})
# Captured later (600 s, or 30 min after boot): every port's PHY counters have run longer.
LATER = ["commands/mlxlink-c-*.out", "commands/ethtool-S-*.out"]
for _name in ("dgx-h100-symbol-errors", "dgx-h100-link-downed", "dgx-h100-nvlink-replay", "dgx-h100-effective-ber",
              "roce-h100-pause-storm", "roce-h100-prio-discards"):
    CHANGED[f"{_name}-b"] = CHANGED.get(f"{_name}-a", []) + LATER
CHANGED["roce-h100-corrected-bits-b"] = CHANGED["roce-h100-corrected-bits-a"] + ["commands/ethtool-S-*.out"]
# NVLink replay counts on GPU5 link 9 (boot-fast is also captured 30 min after boot: snapshot.json, proc/uptime).
for _name in ("dgx-h100-nvlink-replay-slow-growth-a", "dgx-h100-nvlink-replay-boot-slow"):
    CHANGED[_name] = ["nvml.json"]
for _name in ("dgx-h100-nvlink-replay-slow-growth-b", "dgx-h100-nvlink-replay-boot-fast"):
    CHANGED[_name] = ["nvml.json"] + LATER


def tree(root: Path, host: str, base_host: str) -> dict[str, bytes]:
    files = {}
    for directory, dirs, names in os.walk(root):
        for entry in names + [name for name in dirs if (Path(directory) / name).is_symlink()]:
            path = Path(directory) / entry
            relative = path.relative_to(root).as_posix()
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            files[relative] = data.replace(host.encode(), base_host.encode())
    return files


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_fault_fixture_differs_from_its_base_only_in_the_fault(name: str) -> None:
    base = INDEX[name]["class"]
    faulty = tree(NODES / name, INDEX[name]["host"], INDEX[base]["host"])
    healthy = tree(NODES / base, INDEX[base]["host"], INDEX[base]["host"])
    changed = sorted(path for path in set(faulty) | set(healthy)
                     # The capture's time and the uptime with it differ in the second of a pair.
                     if faulty.get(path) != healthy.get(path) and path not in ("snapshot.json", "proc/uptime"))
    assert changed, "a fault fixture must differ from its base"
    for path in changed:
        assert any(fnmatch.fnmatchcase(path, pattern) for pattern in CHANGED[name]), f"unexpected change: {path}"
    for pattern in CHANGED[name]:
        assert any(fnmatch.fnmatchcase(path, pattern) for path in changed), f"fault not applied: {pattern}"


def test_every_fault_fixture_has_a_diff_expectation() -> None:
    assert sorted(CHANGED) == sorted(name for name in NAMES if INDEX[name]["fault"] != "none")


# -- the faults carry the values the brief asks for ----------------------------------------------------
FAULT_VALUES: list[tuple[str, str, str]] = [
    ("dgx-h100-port-hdr", "sys/class/infiniband/mlx5_5/ports/1/rate", "200 Gb/sec (4X HDR)\n"),
    ("dgx-h100-port-down", "sys/class/infiniband/mlx5_4/ports/1/state", "1: DOWN\n"),
    ("dgx-h100-port-down", "sys/class/infiniband/mlx5_4/ports/1/phys_state", "2: Polling\n"),
    ("dgx-h100-port-down", "sys/class/infiniband/mlx5_4/ports/1/rate", "10 Gb/sec (4X SDR)\n"),
    ("dgx-h100-port-down", "sys/class/infiniband/mlx5_4/ports/1/lid", "0x67\n"),      # stale LID 103 kept
    ("dgx-h100-symbol-errors-a", "sys/class/infiniband/mlx5_6/ports/1/counters/symbol_error", "120\n"),
    ("dgx-h100-symbol-errors-b", "sys/class/infiniband/mlx5_6/ports/1/counters/symbol_error", "5120\n"),
    ("dgx-h100-link-downed-a", "sys/class/infiniband/mlx5_9/ports/1/counters/link_downed", "2\n"),
    ("dgx-h100-link-downed-b", "sys/class/infiniband/mlx5_9/ports/1/counters/link_downed", "3\n"),
    ("dgx-h100-counters-saturated", "sys/class/infiniband/mlx5_10/ports/1/counters/link_downed", "255\n"),
    ("dgx-h100-counters-saturated", "sys/class/infiniband/mlx5_10/ports/1/counters/symbol_error", "65535\n"),
    ("dgx-h100-mtu-2048", "sys/class/net/ibp24s0/mtu", "2044\n"),
    ("dgx-h100", "sys/class/net/ibp24s0/mtu", "4092\n"),
    ("dgx-h100-gpu-sys-nic", "sys/bus/pci/devices/0000:c0:00.0/numa_node", "0\n"),
    ("dgx-h100-pcie-gen4-x8", "sys/bus/pci/devices/0000:52:00.0/current_link_speed", "16.0 GT/s PCIe\n"),
    ("dgx-h100-pcie-gen4-x8", "sys/bus/pci/devices/0000:52:00.0/current_link_width", "8\n"),
    ("dgx-h100", "sys/bus/pci/devices/0000:d1:00.0/current_link_speed", "2.5 GT/s PCIe\n"),   # idle GPU6
    ("dgx-h100-topo-timeout", "commands/nvidia-smi-topo-m.status", "timeout\n"),
    ("dgx-h100-no-ibstat", "commands/ibstat.status", "missing\n"),
    ("roce-h100-ecn-off", "sys/class/net/ens5np0/ecn/roce_np/enable/3", "0\n"),
    ("roce-h100-ecn-off", "sys/class/net/ens5np0/ecn/roce_np/enable/2", "1\n"),
    ("roce-h100-mtu-1500", "sys/class/net/ens3np0/mtu", "1500\n"),
    ("roce-h100", "sys/class/net/ens3np0/mtu", "9000\n"),
    ("pcie-only", "sys/class/net/eno1/mtu", "1500\n"),
    ("cpu-node", "sys/class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n"),
    ("aws-p5", "sys/class/infiniband/rdmap131s0/ports/1/state", "4: ACTIVE\n"),
    ("aws-p5", "sys/class/infiniband/rdmap79s0/ports/1/rate", "100 Gb/sec (4X EDR)\n"),
    ("aws-p5", "sys/class/infiniband/rdmap79s0/fw_ver", "\n"),
    ("aws-p5", "sys/bus/pci/devices/0000:72:00.0/p2p", "NVIDIA\n"),
    ("aws-p5", "sys/module/efa/version", "2.17.1g\n"),
    ("aws-p5", "sys/class/net/ens32/mtu", "9001\n"),
    ("aws-p5-efa-down", "sys/class/infiniband/rdmap131s0/ports/1/state", "1: DOWN\n"),
    ("aws-p5-efa-down", "sys/class/infiniband/rdmap131s0/ports/1/phys_state", "3: Disabled\n"),
    ("aws-p5-efa-unbound", "sys/bus/pci/devices/0000:72:00.0/vendor", "0x1d0f\n"),     # still on the bus
    ("aws-p5-efa-unbound", "sys/bus/pci/devices/0000:72:00.0/device", "0xefa1\n"),
    ("aws-p5", "sys/class/infiniband/rdmap147s0/ports/1/hw_counters/retrans_timeout_events", "0\n"),
    ("aws-p5-efa-retrans-a", "sys/class/infiniband/rdmap147s0/ports/1/hw_counters/retrans_timeout_events", "2\n"),
    ("aws-p5-efa-retrans-b", "sys/class/infiniband/rdmap147s0/ports/1/hw_counters/retrans_timeout_events", "502\n"),
    ("aws-p5-efa-retrans-a", "sys/class/infiniband/rdmap147s0/ports/1/hw_counters/impaired_remote_conn_events",
     "0\n"),
    ("aws-p5-efa-retrans-b", "sys/class/infiniband/rdmap147s0/ports/1/hw_counters/impaired_remote_conn_events",
     "20\n"),
    ("gcp-a3-high", "sys/class/net/eth1/mtu", "8244\n"),
    ("gcp-a3-high", "sys/class/net/eth1/speed", "200000\n"),
    ("gcp-a3-high", "sys/class/net/eth0/mtu", "1460\n"),
]


@pytest.mark.parametrize(("name", "relative", "expected"), FAULT_VALUES)
def test_fault_values(name: str, relative: str, expected: str) -> None:
    assert read(NODES / name, relative) == expected


def test_fault_values_in_tool_outputs() -> None:
    hdr = parse_ibv_devinfo(read(NODES / "dgx-h100-port-hdr", "commands/ibv_devinfo-v.out"))["mlx5_5"]
    assert hdr["active_speed"] == "50.0 Gbps (64)" and hdr["active_width"] == "4X (2)"
    assert parse_ibstat(read(NODES / "dgx-h100-port-hdr", "commands/ibstat.out"))["mlx5_5"]["Rate"] == "200"
    assert "( Could be 106.25 Gbps)" in read(NODES / "dgx-h100-port-hdr", "commands/iblinkinfo.out")
    down = parse_ibstat(read(NODES / "dgx-h100-port-down", "commands/ibstat.out"))["mlx5_4"]
    assert (down["State"], down["Physical state"], down["Rate"], down["Base lid"]) == ("Down", "Polling", "10", "103")
    assert '==(                Down/ Polling)==>             [  ] "" ( )' in read(
        NODES / "dgx-h100-port-down", "commands/iblinkinfo.out")
    mtu = parse_ibv_devinfo(read(NODES / "dgx-h100-mtu-2048", "commands/ibv_devinfo-v.out"))
    assert {info["active_mtu"] for name, info in mtu.items() if info["link_layer"] == "InfiniBand"} == {"2048 (4)"}
    _, values = parse_perfquery(read(NODES / "dgx-h100-counters-saturated", "commands/perfquery-x-mlx5_10-1.out"))
    assert (values["LinkDownedCounter"], values["SymbolErrorCounter"]) == ("255", "65535")
    for index in range(1, 9):
        no_pfc = read(NODES / "roce-h100-no-pfc", f"commands/mlnx_qos-ens{index}np0.out")
        assert "        enabled     0   0   0   0   0   0   0   0   \n" in no_pfc
        healthy = read(NODES / "roce-h100", f"commands/mlnx_qos-ens{index}np0.out")
        assert "        enabled     0   0   0   1   0   0   0   0   \n" in healthy
        assert "Priority trust state: dscp\n" in healthy
    assert not (NODES / "dgx-h100-no-peermem/sys/module/nvidia_peermem").exists()
    assert not (NODES / "dgx-h100-no-peermem/sys/module/nv_peer_mem").exists()
    gpus = json.loads(read(NODES / "dgx-h100-no-peermem", "nvml.json"))["gpus"]
    assert {gpu["dmabuf_supported"] for gpu in gpus} == {False}
    gpu2 = json.loads(read(NODES / "dgx-h100-pcie-gen4-x8", "nvml.json"))["gpus"][2]
    assert (gpu2["performance_state"], gpu2["pcie"]) == (0, {"cur_gen": 4, "max_gen": 5, "gpu_max_gen": 5,
                                                             "cur_width": 8, "max_width": 16})
    _, rows, legend = parse_topo(read(NODES / "dgx-h100-gpu-sys-nic", "commands/nvidia-smi-topo-m.out"))
    gpu5 = dict(zip(list(rows), rows["GPU5"]))
    assert "PIX" not in rows["GPU5"] and gpu5[next(label for label, hca in legend.items() if hca == "mlx5_9")] == "SYS"
    _, healthy_rows, _ = parse_topo(read(NODES / "dgx-h100", "commands/nvidia-smi-topo-m.out"))
    assert all(row.count("PIX") == 1 for label, row in healthy_rows.items() if label.startswith("GPU"))
    efa_down = NODES / "aws-p5-efa-down"
    down = parse_ibstat(read(efa_down, "commands/ibstat.out"))["rdmap131s0"]
    assert (down["State"], down["Physical state"]) == ("Down", "Disabled")
    assert {ca["State"] for hca, ca in parse_ibstat(read(efa_down, "commands/ibstat.out")).items()
            if hca != "rdmap131s0"} == {"Active"}
    down_ibv = parse_ibv_devinfo(read(efa_down, "commands/ibv_devinfo-v.out"))["rdmap131s0"]
    assert (down_ibv["state"], down_ibv["phys_state"]) == ("PORT_DOWN (1)", "DISABLED (3)")


def test_efa_unbound_functions_are_on_the_bus_without_their_driver() -> None:
    root, gone = NODES / "aws-p5-efa-unbound", {"0000:72:00.0": "rdmap114s0", "0000:73:00.0": "rdmap115s0",
                                                "0000:74:00.0": "rdmap116s0"}
    for address, hca in gone.items():
        function = root / f"sys/bus/pci/devices/{address}"
        assert function.is_dir() and (function / "config").exists()
        assert not (function / "driver").exists() and not (function / "p2p").exists()
        assert not (root / f"sys/class/infiniband/{hca}").exists()
        for tool in ("ibstat", "ibv_devinfo-v", "fi_info-p-efa"):
            assert hca not in read(root, f"commands/{tool}.out"), (tool, hca)
        lspci = read(root, "commands/lspci-vvv.out")
        block = lspci[lspci.index(f"{address} "):].split("\n\n")[0]
        assert "Elastic Fabric Adapter" in block and "Kernel driver in use" not in block
    # GPU2's fourth EFA keeps its driver; the other GPUs keep all four.
    assert (root / "sys/class/infiniband/rdmap113s0").is_dir()
    assert len(sysfs_ports(root)) == 32 - len(gone)


def test_efa_retrans_pair_grows_where_the_fault_says() -> None:
    earlier, later = rdma_counters(NODES / "aws-p5-efa-retrans-a"), rdma_counters(NODES / "aws-p5-efa-retrans-b")
    traffic = {f"{direction}_{unit}" for direction in ("tx", "rx") for unit in ("bytes", "pkts")}
    grown = {path for path in later if later[path] != earlier[path]}
    devices = {path.split("/")[0] for path in later}
    assert len(devices) == 32
    # 600 s of traffic on every device; only rdmap147s0's retransmit counters move besides.
    assert grown == {f"{hca}/ports/1/hw_counters/{counter}" for hca in devices for counter in traffic} | {
        f"rdmap147s0/ports/1/hw_counters/{counter}" for counter in
        ("retrans_pkts", "retrans_bytes", "retrans_timeout_events", "impaired_remote_conn_events")}
    counter = "rdmap147s0/ports/1/hw_counters/"
    assert later[counter + "retrans_pkts"] - earlier[counter + "retrans_pkts"] == 5_000_000
    assert later[counter + "retrans_timeout_events"] - earlier[counter + "retrans_timeout_events"] == 500
    assert later[counter + "retrans_bytes"] > earlier[counter + "retrans_bytes"]


def test_nccl_socket_fault_keeps_the_p5_settings() -> None:
    healthy = json.loads(read(NODES / "aws-p5", "nccl-env.json"))
    faulty = json.loads(read(NODES / "aws-p5-nccl-socket", "nccl-env.json"))
    assert faulty["environ"] == {**healthy["environ"], "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "ens32"}
    assert healthy["environ"]["FI_PROVIDER"] == "efa" and "NCCL_NET" not in healthy["environ"]
    # The interface it names exists: the fault is the transport, not a missing interface.
    assert (NODES / "aws-p5-nccl-socket/sys/class/net/ens32/mtu").exists()


def test_healthy_classes_have_their_shape() -> None:
    dgx = sysfs_ports(NODES / "dgx-h100")
    assert sorted(dgx, key=lambda hca: int(hca.split("_")[1])) == [
        "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    ib = {hca: port for hca, port in dgx.items() if port["link_layer"] == "InfiniBand"}
    assert {port["rate"] for port in ib.values()} == {"400 Gb/sec (4X NDR)"}
    assert len({port["lid"] for port in ib.values()}) == 8 and {port["sm_lid"] for port in ib.values()} == {"0x1"}
    a100 = sysfs_ports(NODES / "hgx-a100")
    assert {port["rate"] for port in a100.values()} == {"200 Gb/sec (4X HDR)"}
    assert read(NODES / "hgx-a100", "sys/class/infiniband/mlx5_0/ports/1/pkeys/1") == "0x8001\n"
    roce = sysfs_ports(NODES / "roce-h100")
    assert {port["link_layer"] for port in roce.values()} == {"Ethernet"} and len(roce) == 8
    assert not any(file.startswith("perfquery") for file in os.listdir(NODES / "roce-h100/commands"))
    roce_ibstat = parse_ibstat(read(NODES / "roce-h100", "commands/ibstat.out"))
    assert {(ca["Link layer"], ca["Base lid"], ca["SM lid"]) for ca in roce_ibstat.values()} == {("Ethernet", "0", "0")}
    assert not (NODES / "pcie-only/sys/class/infiniband").exists()
    assert command(NODES / "pcie-only", "ibstat") == ("missing", None)
    nvlinks = {gpu["nvlink"]["total"] for gpu in json.loads(read(NODES / "pcie-only", "nvml.json"))["gpus"]}
    assert nvlinks == {0}
    assert not (NODES / "pcie-only/sys/module/nvidia_peermem").exists()
    assert not (NODES / "cpu-node/nvml.json").exists() and len(sysfs_ports(NODES / "cpu-node")) == 1
    for name in ("dgx-h100", "hgx-a100", "roce-h100"):
        assert (NODES / name / "sys/module/nvidia_peermem/initstate").exists()


def gpus_by_switch(root: Path) -> dict[str | None, list[str]]:
    switches: dict[str | None, list[str]] = {}
    for gpu in json.loads(read(root, "nvml.json"))["gpus"]:
        switches.setdefault(pcie_switch(root, gpu["pci_bus_id"][4:].lower()), []).append(f"GPU{gpu['index']}")
    return switches


def test_cloud_classes_have_their_shape() -> None:
    p5 = NODES / "aws-p5"
    efas = sysfs_ports(p5)
    assert len(efas) == 32 and all(is_efa(port) for port in efas.values())
    assert {(port["state"], port["rate"], port["link_layer"]) for port in efas.values()} == {
        ("4: ACTIVE", "100 Gb/sec (4X EDR)", "Unknown")}
    # Four EFA devices behind each GPU's PCIe switch, one GPU per switch.
    switches = gpus_by_switch(p5)
    assert all(len(gpus) == 1 for gpus in switches.values()) and len(switches) == 8
    per_switch = [pcie_switch(p5, port["pci"]) for port in efas.values()]
    assert sorted(per_switch) == sorted(switch for switch in switches for _ in range(4))
    for port in efas.values():
        assert sysval(p5, f"bus/pci/devices/{port['pci']}/p2p") == "NVIDIA"
        assert os.readlink(p5 / f"sys/bus/pci/devices/{port['pci']}/driver").endswith("/drivers/efa")
    # efa's own p2p provider stands in for peermem; no IB/RoCE port tools, no MLNX_OFED scripts.
    assert not (p5 / "sys/module/nvidia_peermem").exists() and (p5 / "sys/module/efa/initstate").exists()
    assert command(p5, "ibdev2netdev") == ("missing", None)
    assert not any(file.startswith(("perfquery", "smpquery", "mlnx_qos", "mlxlink"))
                   for file in os.listdir(p5 / "commands"))
    assert not (p5 / "sys/class/net/ens32/speed").exists()     # ENA reports no link speed
    gcp = NODES / "gcp-a3-high"
    assert not (gcp / "sys/class/infiniband").exists() and sysfs_ports(gcp) == {}
    for tool in ("ibstat", "ibv_devinfo-v", "iblinkinfo", "ibdev2netdev"):
        assert command(gcp, tool) == ("missing", None)
    assert not (gcp / "commands/fi_info-p-efa.status").exists()
    # One gVNIC data NIC per GPU pair behind their PCIe switch; eth0 (management) on the root bus.
    gcp_switches = gpus_by_switch(gcp)
    assert sorted(len(gpus) for gpus in gcp_switches.values()) == [2, 2, 2, 2]
    data = {netdev: os.readlink(gcp / f"sys/class/net/{netdev}/device").rsplit("/", 1)[-1]
            for netdev in ("eth0", "eth1", "eth2", "eth3", "eth4")}
    assert pcie_switch(gcp, data["eth0"]) is None and sysval(gcp, "class/net/eth0/mtu") == "1460"
    assert sorted(pcie_switch(gcp, data[f"eth{index}"]) for index in range(1, 5)) == sorted(gcp_switches)
    assert {sysval(gcp, f"class/net/eth{index}/mtu") for index in range(1, 5)} == {"8244"}
    for address in data.values():
        assert (sysval(gcp, f"bus/pci/devices/{address}/vendor"), sysval(gcp, f"bus/pci/devices/{address}/device")) == \
            ("0x1ae0", "0x0042")
        assert os.readlink(gcp / f"sys/bus/pci/devices/{address}/driver").endswith("/drivers/gve")
    # VMs: the hypervisor's DMI strings, GPUs passed through, no IOMMU groups in the guest.
    for root, vendor in ((p5, "Amazon EC2"), (gcp, "Google")):
        assert sysval(root, "class/dmi/id/sys_vendor") == vendor
        assert {gpu["virtualization_mode"] for gpu in json.loads(read(root, "nvml.json"))["gpus"]} == {"passthrough"}
        assert not (root / "sys/kernel/iommu_groups").exists()
        assert not list((root / "sys/devices").rglob("iommu_group"))


def test_generator_reproduces_committed_tree(tmp_path: Path) -> None:
    generator = load_generator()
    generator.generate(tmp_path)
    generated = tree(tmp_path, "\0", "\0")
    committed = tree(NODES, "\0", "\0")
    assert sorted(generated) == sorted(committed), "run `python tests/fixtures/make_nodes.py` to refresh"
    stale = [path for path in generated if generated[path] != committed[path]]
    assert not stale, f"fixtures out of date, regenerate: {stale[:5]}"


def test_committed_fixtures_stay_small() -> None:
    # What git stores: identical files (config spaces, counters, the same bridge in 30 nodes) once.
    contents = {path.read_bytes() for path in NODES.rglob("*") if path.is_file() and not path.is_symlink()}
    # 4 MiB: the Blackwell classes are the largest nodes (12 RDMA devices, 8 GPUs x 18 NVLink 5 links).
    assert sum(len(content) for content in contents) < 4 * 1024 * 1024


CORPUS = Path(__file__).resolve().parent / "data" / "corpus"


def test_blackwell_classes_match_their_real_samples() -> None:
    """The parts of the Blackwell classes taken from real outputs say what those outputs say
    (tests/data/corpus; tests/fixtures/README.md, "Blackwell, NVL72 and XDR")."""
    text = read(CORPUS, "ibstat/dell-b300-notes__ibstat-7xMT4131-cx8-disabled-4xMT4129-nvswitch-bridge-active-rate100.txt")
    # The paste's indentation is 8 spaces a level where ibstat prints TABs.
    real = parse_ibstat(re.sub(r"^(?: {8})+", lambda match: "\t" * (len(match.group(0)) // 8), text, flags=re.MULTILINE))
    seven = parse_ibstat(read(NODES / "hgx-b300-7-gpus", "commands/ibstat.out"))
    # The 7-GPU B300: the real XE9780's CA names and types; the bridge's firmware, rate, LIDs, SM and masks.
    assert {ca: fields["CA type"] for ca, fields in seven.items()} == {ca: fields["CA type"] for ca, fields in real.items()}
    for ca, fields in real.items():
        keys = ("Firmware version", "Rate", "Base lid", "SM lid", "Capability mask") if fields["CA type"] == "MT4129" \
            else ("Firmware version",)
        assert {key: seven[ca][key] for key in keys} == {key: fields[key] for key in keys}, ca
    bridge = [fields for fields in seven.values() if fields["CA type"] == "MT4129"]
    assert len({fields["System image GUID"] for fields in bridge}) == 1 and bridge[0]["Node GUID"] == bridge[0]["System image GUID"]
    assert {port["rate"] for hca, port in sysfs_ports(NODES / "hgx-b300").items()
            if sysval(NODES / "hgx-b300", f"class/infiniband/{hca}/hca_type") == "MT4131"} == {"800 Gb/sec (4X XDR)"}
    # The B200's bridge: VPD SMDL=SW_MNG on its two Limited PFs (.0/.1), not on the full PFs.
    vpd = {address: (NODES / f"hgx-b200/sys/bus/pci/devices/{address}/vpd").read_bytes() for address in
           ("0000:05:00.0", "0000:05:00.1", "0000:05:00.2", "0000:05:00.3")}
    assert [b"SMDL=SW_MNG" in data for data in vpd.values()] == [True, True, False, False]
    # The GB200 tray's topology: the real tray's matrix, affinities and GPU NUMA ids, cell for cell.
    real_rows = {line.split()[0]: line.split()[1:] for line in read(CORPUS, "nvidia-smi-topo/indexed-doc-61093033028__"
                                                                            "gb200-tray_topo-m_4gpu-8nic.txt").splitlines()
                 if re.match(r"(GPU|NIC)\d+\s", line)}
    _, rows, _ = parse_topo(read(NODES / "gb200-nvl72-tray", "commands/nvidia-smi-topo-m.out"))
    assert {label: [cell.strip() for cell in cells if cell.strip()] for label, cells in rows.items()} == real_rows
    # NVML: the real GB200's fabric and platform info, NUMA 2/10/18/26 over sysfs 0/0/1/1, the domains of the
    # real GB200 kernel log, 18 links at the real 53.125 GB/s.
    gpus = json.loads(read(NODES / "gb200-nvl72-tray", "nvml.json"))["gpus"]
    assert [gpu["pci_bus_id"] for gpu in gpus] == [f"0000{domain}:01:00.0" for domain in ("0008", "0009", "0018", "0019")]
    assert [gpu["numa_node"] for gpu in gpus] == [2, 10, 18, 26]
    assert {(gpu["fabric"]["state"], gpu["fabric"]["clique_id"], gpu["fabric"]["cluster_uuid"],
             gpu["fabric"]["health_summary"], gpu["fabric"]["bandwidth"]) for gpu in gpus} == {
        ("completed", 2, "00000001-0000-0000-0000-000000000001", "healthy", "full")}
    assert {(gpu["platform"]["chassis_serial_number"], gpu["platform"]["slot_number"], gpu["platform"]["tray_index"],
             gpu["platform"]["host_id"]) for gpu in gpus} == {("1820000000001", 14, 4, 1)}
    assert {link["speed_mbps"] for gpu in gpus for link in gpu["nvlink"]["links"]} == {53125}
    real_links = [line.split(":")[1].strip() for line in read(
        CORPUS, "nvidia-smi-nvlink/k8s-test-infra-issue-371__gb200_nvlink-s_excerpt.txt").splitlines()[2:20]]
    links = read(NODES / "gb200-nvl72-tray", "commands/nvidia-smi-nvlink-s.out").splitlines()[1:19]
    assert [line.split(":")[1].strip() for line in links] == real_links == ["53.125 GB/s"] * 18
    # IMEX: the real 570.172 legend and layout; this tray's address is one of its node's (`ip -j addr`).
    imex = read(NODES / "gb200-nvl72-tray", "commands/nvidia-imex-ctl-N.out").splitlines()
    real_imex = read(CORPUS, "nvidia-imex-ctl/aws-parallelcluster-guide__imex-ctl-N-18-nodes-ready-570.172.txt").splitlines()
    assert imex[:10] == real_imex[:10] and len(imex) == len(real_imex) and imex[-1] == real_imex[-1] == "Domain State: UP"
    assert [len(line) for line in imex[11:]] == [len(line.replace("570.172", "580.173.02")) for line in real_imex[11:]]
    addresses = {info["local"] for entry in json.loads(read(NODES / "gb200-nvl72-tray", "commands/ip-j-addr.out"))
                 for info in entry["addr_info"]}
    assert sum(line.split(" - ")[1].strip() in addresses for line in imex if line.startswith("Node #")) == 1
