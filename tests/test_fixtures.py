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

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NODES = FIXTURES / "nodes"
INDEX = tomllib.loads((NODES / "INDEX.toml").read_text(encoding="utf-8"))["fixtures"]
NAMES = sorted(INDEX)
# The checks, plus `discovery`: a source that hung is reported (what the checks judged without).
CHECK_IDS = {"port-state", "link-speed", "pcie-link", "error-counters", "mtu", "pfc-ecn", "gpudirect",
             "gpu-nic-affinity", "nccl-probe", "discovery", "nvlink", "nvswitch-fabric", "kernel-events", "pcie-p2p-path",
             "transceiver", "nccl-env"}
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


def sysfs_ports(root: Path) -> dict[str, dict[str, str]]:
    """hca -> port-1 attributes plus numa/pci/netdev, straight from the sys tree."""
    ports: dict[str, dict[str, str]] = {}
    base = root / "sys/class/infiniband"
    for hca in sorted(os.listdir(base)) if base.is_dir() else []:
        port = {name: sysval(root, f"class/infiniband/{hca}/ports/1/{name}")
                for name in ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid")}
        pci = os.readlink(base / hca / "device").rsplit("/", 1)[-1]
        port["pci"] = pci
        port["numa"] = sysval(root, f"bus/pci/devices/{pci}/numa_node")
        port["node_guid"] = sysval(root, f"class/infiniband/{hca}/node_guid")
        netdevs = os.listdir(root / f"sys/bus/pci/devices/{pci}/net")
        assert len(netdevs) == 1, (hca, netdevs)
        port["netdev"] = netdevs[0]
        ports[hca] = port
    return ports


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
    assert len(NAMES) == 40


@pytest.mark.parametrize("name", NAMES)
def test_index_entry_is_well_formed(name: str) -> None:
    entry = INDEX[name]
    assert entry["class"] in {"dgx-h100", "hgx-a100", "roce-h100", "pcie-only", "cpu-node"}
    assert (entry["fault"] == "none") == (name == entry["class"])
    assert entry["rules"] == {"roce-h100": "roce", "cpu-node": "default"}.get(entry["class"], entry["class"])
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
    assert set(meta) == {"format", "host", "captured_at", "netdoctor", "boot_id"}
    assert meta["format"] == "netdoctor.snapshot/1"
    assert meta["host"] == INDEX[name]["host"]
    assert meta["netdoctor"] == "0.1.0"
    assert datetime.strptime(meta["captured_at"], "%Y-%m-%dT%H:%M:%SZ")
    assert str(uuid.UUID(meta["boot_id"])) == meta["boot_id"]


def test_counter_pairs_share_boot_and_are_600_seconds_apart() -> None:
    pairs = [(name, INDEX[name]["baseline"]) for name in NAMES if "baseline" in INDEX[name]]
    assert sorted(pairs) == [("dgx-h100-link-downed-b", "dgx-h100-link-downed-a"),
                             ("dgx-h100-nvlink-replay-b", "dgx-h100-nvlink-replay-a"),
                             ("dgx-h100-symbol-errors-b", "dgx-h100-symbol-errors-a")]
    for later, earlier in pairs:
        meta_later = json.loads(read(NODES / later, "snapshot.json"))
        meta_earlier = json.loads(read(NODES / earlier, "snapshot.json"))
        assert meta_later["host"] == meta_earlier["host"] and meta_later["boot_id"] == meta_earlier["boot_id"]
        elapsed = (datetime.fromisoformat(meta_later["captured_at"]) -
                   datetime.fromisoformat(meta_earlier["captured_at"])).total_seconds()
        assert elapsed == 600


COMMAND_NAME = re.compile(r"nvidia-smi-topo-m|ibstat|ibv_devinfo-v|iblinkinfo|ibdev2netdev|"
                          r"perfquery-x-[\w]+-\d+|mlnx_qos-[\w.-]+|systemctl-show-nvidia-(?:fabricmanager|imex)|dmesg|nvidia-smi-nvlink-s|"
                          r"lspci-vvv|mlxlink-m-\w+|ethtool-m-[\w.-]+|smpquery-node(?:info|desc)-\w+-\d+|"
                          r"lldpctl-json|ofed_info-s|nv-fabricmanager-version")


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
SYS_RULES: list[tuple[str, str]] = [
    (r"class/infiniband/\w+/hca_type", r"MT\d{4,5}"),
    (r"class/infiniband/\w+/fw_ver", r"\d+\.\d+\.\d+"),
    (r"class/infiniband/\w+/board_id", r"MT_\d{10}"),
    (r"class/infiniband/\w+/(node_guid|sys_image_guid)", r"[0-9a-f]{4}(:[0-9a-f]{4}){3}"),
    (r"class/infiniband/\w+/hw_rev", r"0x[0-9a-f]+"),
    (r"class/infiniband/\w+/node_desc", r"\S+ mlx5_\d+"),
    (r"class/infiniband/\w+/ports/1/state", r"1: DOWN|2: INIT|3: ARMED|4: ACTIVE"),
    (r"class/infiniband/\w+/ports/1/phys_state", r"2: Polling|3: Disabled|5: LinkUp"),
    (r"class/infiniband/\w+/ports/1/rate", r"\d+ Gb/sec \([1-9]\d?X (SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR)\)"),
    (r"class/infiniband/\w+/ports/1/link_layer", r"InfiniBand|Ethernet"),
    (r"class/infiniband/\w+/ports/1/(lid|sm_lid)", r"0x[0-9a-f]{1,4}"),
    (r"class/infiniband/\w+/ports/1/lid_mask_count", r"[0-7]"),
    (r"class/infiniband/\w+/ports/1/cap_mask", r"0x[0-9a-f]{8}"),
    (r"class/infiniband/\w+/ports/1/(counters|hw_counters)/\w+", r"\d+"),
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
    (r"kernel/iommu_groups/\d+/type", r"identity|DMA|DMA-FQ|blocked|unmanaged"),
    (r"class/dmi/id/(sys_vendor|product_name)", r"[\w .,-]+"),
    (rf"class/net/{IF}/(mtu|ifindex|type)", r"\d+"),
    (rf"class/net/{IF}/speed", r"-1|\d+"),
    (rf"class/net/{IF}/operstate", r"up|down|unknown|dormant|lowerlayerdown|notpresent|testing"),
    (rf"class/net/{IF}/address", r"[0-9a-f]{2}(:[0-9a-f]{2}){5}|[0-9a-f]{2}(:[0-9a-f]{2}){19}"),
    (rf"class/net/{IF}/ecn/roce_(np|rp)/enable/[0-7]", r"[01]"),
    (r"module/\w+/initstate", r"live"),
    (r"module/nvidia/version", r"\d+\.\d+\.\d+"),
]


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
            if re.fullmatch(rf"{FUNCTION}/config", relative):
                data = path.read_bytes()        # config space as root reads it: binary, 4096 bytes
                assert len(data) == 4096 and data[:2] in (b"\xde\x10", b"\xb3\x15", b"\x86\x80", b"\x00\x10"), relative
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
        counters = NODES / name / f"sys/class/infiniband/{hca}/ports/1/counters"
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
            assert re.fullmatch(rf"\.\./\.\./\.\./bus/pci/devices/{PCI}|\.\./\.\./\.\./{FUNCTION}|"
                                rf"(?:\.\./)+kernel/iommu_groups/\d+", target), target
    if INDEX[name]["class"] != "pcie-only" or links:
        assert links > 0


@pytest.mark.parametrize("name", NAMES)
def test_no_empty_directories(name: str) -> None:
    # git does not keep empty directories: a marker directory must hold a file to survive a commit.
    for directory, dirs, files in os.walk(NODES / name):
        assert dirs or files, directory


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


@pytest.mark.parametrize("name", NAMES)
def test_ibv_devinfo_agrees_with_sysfs_and_netdev_mtu(name: str) -> None:
    root = NODES / name
    ports, text = sysfs_ports(root), ok_output(root, "ibv_devinfo-v")
    if text is None:
        return
    hcas = parse_ibv_devinfo(text)
    assert set(hcas) == set(ports)
    states = {"ACTIVE": "PORT_ACTIVE (4)", "DOWN": "PORT_DOWN (1)"}
    for hca, info in hcas.items():
        port = ports[hca]
        assert info["state"] == states[port["state"].split(": ")[1]]
        assert int(info["port_lid"]) == int(port["lid"], 16) and int(info["sm_lid"]) == int(port["sm_lid"], 16)
        assert info["link_layer"] == port["link_layer"]
        width = int(info["active_width"].split("X")[0])
        lane = float(info["active_speed"].split()[0])
        assert width * lane == float(port["rate"].split()[0]), hca
        active_mtu = int(info["active_mtu"].split()[0])
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
    for hca, port in ports.items():
        netdev = port["netdev"]
        arp_type = sysval(root, f"class/net/{netdev}/type")
        assert os.readlink(root / f"sys/class/net/{netdev}/device").endswith(port["pci"])
        if port["link_layer"] == "Ethernet":
            assert arp_type == "1" and sysval(root, f"class/infiniband/{hca}/ports/1/gid_attrs/ndevs/0") == netdev
            assert ok_output(root, f"mlnx_qos-{netdev}") is not None
            assert len(os.listdir(root / f"sys/class/net/{netdev}/ecn/roce_np/enable")) == 8
        else:
            assert arp_type == "32" and netdev == f"ibp{int(port['pci'].split(':')[1], 16)}s0"
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
    if text is None:
        return
    ports = sysfs_ports(root)
    per_lane = {"106.25": 100, "53.125": 50, "25.78125": 25}
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
            assert (hint.strip() == "") == (port["rate"] != "200 Gb/sec (4X HDR)" or INDEX[name]["class"] != "dgx-h100")
            seen.add(hca)
    assert seen == {hca for hca, port in ports.items()
                    if port["link_layer"] == "InfiniBand" and port["state"] == "4: ACTIVE"}


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
    gpu_numa = {}
    for gpu in nvml["gpus"]:
        domain, bus, function = gpu["pci_bus_id"].split(":")
        address = f"{domain[-4:]}:{bus}:{function}".lower()
        assert sysval(root, f"bus/pci/devices/{address}/vendor") == "0x10de"
        assert int(sysval(root, f"bus/pci/devices/{address}/numa_node")) == gpu["numa_node"]
        speed = sysval(root, f"bus/pci/devices/{address}/current_link_speed").split()[0]
        assert PCIE_GEN[speed] == gpu["pcie"]["cur_gen"]
        assert int(sysval(root, f"bus/pci/devices/{address}/current_link_width")) == gpu["pcie"]["cur_width"]
        assert PCIE_GEN[sysval(root, f"bus/pci/devices/{address}/max_link_speed").split()[0]] == gpu["pcie"]["max_gen"]
        assert gpu["nvlink"]["active"] <= gpu["nvlink"]["total"] and gpu["errors"] == {}
        assert isinstance(gpu["dmabuf_supported"], bool) and gpu["uuid"].startswith("GPU-")
        gpu_numa[f"GPU{gpu['index']}"] = gpu["numa_node"]
    text = ok_output(root, "nvidia-smi-topo-m")
    if text is None:
        assert command(root, "nvidia-smi-topo-m")[0] == "timeout"
        return
    header, rows, legend = parse_topo(text)
    ports = sysfs_ports(root)
    by_pci = sorted(ports, key=lambda hca: ports[hca]["pci"])
    assert list(legend.values()) == by_pci
    devices = [f"GPU{index}" for index in range(len(gpu_numa))] + list(legend)
    assert header == devices + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert list(rows) == devices
    numa = dict(gpu_numa, **{label: int(ports[hca]["numa"]) for label, hca in legend.items()})
    for row in devices:
        cells = rows[row]
        assert len(cells) == len(devices) + 4
        if row.startswith("GPU"):
            assert int(cells[-3]) == numa[row] and cells[-2:] == ["", "N/A"]
        for column, cell in zip(devices, cells):
            assert cell == rows[column][devices.index(row)], "the matrix is symmetric"
            if row == column:
                assert cell == " X "
            elif not (row.startswith("GPU") and column.startswith("GPU") and cell.startswith("NV")):
                assert (cell == "SYS") == (numa[row] != numa[column]), (row, column, cell)


# -- each fault fixture differs from its healthy base only where its fault says -------------------------
CHANGED: dict[str, list[str]] = {
    "dgx-h100-port-hdr": ["commands/mlxlink-m-mlx5_5.out", "commands/iblinkinfo.out", "commands/ibstat.out", "commands/ibv_devinfo-v.out",
                          "sys/class/infiniband/mlx5_5/ports/1/rate", "sys/class/net/ibp94s0/speed"],
    "dgx-h100-port-down": ["commands/mlxlink-m-mlx5_4.out", "commands/ibdev2netdev.out", "commands/iblinkinfo.out", "commands/ibstat.out",
                           "commands/ibv_devinfo-v.out", "commands/perfquery-x-mlx5_4-1.*", "commands/smpquery-node*-mlx5_4-1.*",
                           "sys/class/infiniband/mlx5_4/ports/1/*state", "sys/class/infiniband/mlx5_4/ports/1/rate",
                           "sys/class/net/ibp79s0/operstate", "sys/class/net/ibp79s0/speed"],
    "dgx-h100-mtu-2048": ["commands/ibv_devinfo-v.out", "sys/class/net/ibp*/mtu"],
    "dgx-h100-no-peermem": ["nvml.json", "sys/module/nvidia_peermem/initstate"],
    # The NIC moves to the other socket: under another root port, so its bridges and IOMMU groups change too.
    "dgx-h100-gpu-sys-nic": ["commands/nvidia-smi-topo-m.out", "commands/lspci-vvv.out", "sys/devices/*",
                             "sys/bus/pci/devices/*", "sys/kernel/iommu_groups/*"],
    "dgx-h100-pcie-gen4-x8": ["nvml.json", "sys/devices/*/0000:52:00.0/current_link_*"],
    "dgx-h100-acs-redirect": ["sys/devices/*/0000:4e:01.0/config", "commands/lspci-vvv.out"],
    "dgx-h100-acs-off-path": ["sys/devices/*/0000:28:00.0/config", "commands/lspci-vvv.out"],
    "dgx-h100-iommu-translated": ["sys/kernel/iommu_groups/*/type", "proc/cmdline", "commands/dmesg.out"],
    "dgx-h100-switch-uplink-x8": ["sys/devices/*/0000:5c:00.0/current_link_width"],
    "dgx-h100-module-hot": ["commands/mlxlink-m-mlx5_6.out"],
    "dgx-h100-nccl-absent-hca": ["nccl-env.json"],
    "dgx-h100-nccl-prefix-trap": ["nccl-env.json"],
    "dgx-h100-nccl-no-interface": ["nccl-env.json"],
    "dgx-h100-nccl-ib-disabled": ["nccl-env.json"],
    "roce-h100-nccl-gid-no-address": [f"sys/class/infiniband/mlx5_2/ports/1/{kind}/{index}" for index in (2, 3)
                                      for kind in ("gids", "gid_attrs/ndevs", "gid_attrs/types")],
    "dgx-h100-topo-timeout": ["commands/nvidia-smi-topo-m.*"],
    "dgx-h100-no-ibstat": ["commands/ibstat.*", "commands/iblinkinfo.*", "commands/perfquery-x-*", "commands/smpquery-*"],
    "dgx-h100-counters-saturated": ["commands/perfquery-x-mlx5_10-1.out",
                                    "sys/class/infiniband/mlx5_10/ports/1/counters/link_downed",
                                    "sys/class/infiniband/mlx5_10/ports/1/counters/symbol_error"],
    "dgx-h100-symbol-errors-a": ["commands/perfquery-x-mlx5_6-1.out",
                                 "sys/class/infiniband/mlx5_6/ports/1/counters/symbol_error"],
    "dgx-h100-link-downed-a": ["commands/perfquery-x-mlx5_9-1.out",
                               "sys/class/infiniband/mlx5_9/ports/1/counters/link_downed"],
    "roce-h100-no-pfc": ["commands/mlnx_qos-ens*np0.out"],
    "roce-h100-ecn-off": ["sys/class/net/ens*np0/ecn/roce_*/enable/3"],
    "roce-h100-mtu-1500": ["commands/ibv_devinfo-v.out", "sys/class/net/ens3np0/mtu"],
    "dgx-h100-nvlinks-down": ["nvml.json", "commands/nvidia-smi-nvlink-s.out"],
    "dgx-h100-fabric-manager-failed": ["nvml.json", "commands/systemctl-show-nvidia-fabricmanager.out"],
    "dgx-h100-fabric-in-progress": ["nvml.json"],
    "dgx-h100-nvlink-replay-a": ["nvml.json"],
    "dgx-h100-xid-79": ["commands/dmesg.out"],
    "dgx-h100-xid-application": ["commands/dmesg.out"],
    "dgx-h100-xid-before-boot": ["commands/dmesg.out"],
    "dgx-h100-link-flap": ["commands/dmesg.out"],
}
CHANGED["dgx-h100-symbol-errors-b"] = CHANGED["dgx-h100-symbol-errors-a"]
CHANGED["dgx-h100-link-downed-b"] = CHANGED["dgx-h100-link-downed-a"]
CHANGED["dgx-h100-nvlink-replay-b"] = CHANGED["dgx-h100-nvlink-replay-a"]


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
    assert sum(len(content) for content in contents) < 3 * 1024 * 1024
