"""collect_netdevs in a real network namespace with veth pairs, and from sysfs trees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from netdoctor.host.netdevs import NetdevFacts, collect_netdevs
from netdoctor.host.recording import Recording
from netdoctor.host.sysfs import RootedSysTree

PROBE = """
import dataclasses, json, sys
from netdoctor.host.netdevs import collect_netdevs
from netdoctor.host.sysfs import RootedSysTree
use_netlink = sys.argv[1] == "netlink"
print(json.dumps([dataclasses.asdict(f) for f in collect_netdevs(RootedSysTree("/sys"), use_netlink=use_netlink)]))
"""


def _ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], check=True, capture_output=True, timeout=10)


@pytest.fixture()
def namespace() -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 for network namespaces")
    name = f"ndtest-{uuid.uuid4().hex[:8]}"
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"cannot create a network namespace: {error}")
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def _collect_in(namespace: str, mode: str) -> list[dict]:
    completed = subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", PROBE, mode],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.netns
def test_veth_pairs_in_a_namespace(namespace: str) -> None:
    _ip("-n", namespace, "link", "add", "ndA", "type", "veth", "peer", "name", "ndB")
    _ip("-n", namespace, "link", "set", "ndA", "mtu", "9000", "address", "02:00:00:00:0a:01")
    _ip("-n", namespace, "link", "set", "ndB", "address", "02:00:00:00:0b:01")
    _ip("-n", namespace, "link", "set", "ndA", "up")
    _ip("-n", namespace, "link", "set", "ndB", "up")
    _ip("-n", namespace, "link", "add", "ndC", "type", "veth", "peer", "name", "ndD")   # left down
    _ip("-n", namespace, "link", "set", "ndC", "mtu", "4200")

    netlink = _collect_in(namespace, "netlink")
    sysfs = _collect_in(namespace, "sysfs")
    by_name = {entry["name"]: entry for entry in netlink}
    assert sorted(by_name) == ["ndA", "ndB", "ndC", "ndD"]              # `lo` skipped
    assert by_name["ndA"]["mtu"] == 9000
    assert by_name["ndA"]["operstate"] == "up"
    assert by_name["ndA"]["mac"] == "02:00:00:00:0a:01"
    assert by_name["ndA"]["arp_type"] == 1
    assert by_name["ndA"]["pci_address"] is None                         # virtual: no PCI function
    assert by_name["ndB"]["mtu"] == 1500
    assert by_name["ndC"]["mtu"] == 4200
    assert by_name["ndC"]["operstate"] == "down"
    assert by_name["ndC"]["speed_mbps"] is None                           # unreadable while down
    assert by_name["ndA"]["speed_mbps"] == 10000                         # veth's nominal speed once up
    assert sysfs == netlink


def _sys_tree(root: Path) -> Path:
    for name, values in {
        "ib0": {"mtu": "2044", "operstate": "up", "address": "00:00:10:29:fe:80:00:00:00:00:00:00:b8:3f:d2:03:00:aa:bb:cc",
                "type": "32", "speed": "200000"},
        "eth9": {"mtu": "1500", "operstate": "lowerlayerdown", "address": "aa:bb:cc:dd:ee:ff", "type": "1", "speed": "-1"},
        "lo": {"mtu": "65536", "operstate": "unknown", "type": "772"},
    }.items():
        directory = root / "class/net" / name
        directory.mkdir(parents=True)
        for attribute, value in values.items():
            (directory / attribute).write_text(value + "\n")
    (root / "devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0").mkdir(parents=True)
    (root / "class/net/ib0/device").symlink_to("../../../devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0")
    return root


def test_sysfs_only(tmp_path: Path) -> None:
    facts = collect_netdevs(RootedSysTree(_sys_tree(tmp_path)), use_netlink=False)
    assert facts == [
        NetdevFacts("eth9", 1500, "lowerlayerdown", "aa:bb:cc:dd:ee:ff", 1, None, None),
        NetdevFacts("ib0", 2044, "up", "00:00:10:29:fe:80:00:00:00:00:00:00:b8:3f:d2:03:00:aa:bb:cc", 32, 200000,
                    "0000:a1:00.0"),
    ]


def test_netlink_path_records_sysfs_attributes_for_the_snapshot(tmp_path: Path) -> None:
    # Netlink describes the host's real interfaces; the recording must hold their sysfs
    # attributes (read from the live /sys, as a capture does).
    recording = Recording()
    facts = collect_netdevs(RootedSysTree("/sys", recording, strict=False), use_netlink=True)
    assert "lo" not in [fact.name for fact in facts]
    for fact in facts:
        assert recording.files[f"class/net/{fact.name}/mtu"].decode().strip() == str(fact.mtu)
        assert recording.files[f"class/net/{fact.name}/operstate"].decode().strip() == fact.operstate
    assert "class/net" in recording.dirs


def test_netlink_failure_falls_back_to_sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import netdoctor.host.netdevs as netdevs_module

    def broken() -> list:
        raise OSError("netlink socket refused by seccomp")

    monkeypatch.setattr(netdevs_module, "_netlink_links", broken)
    facts = collect_netdevs(RootedSysTree(_sys_tree(tmp_path)), use_netlink=True)
    assert [fact.name for fact in facts] == ["eth9", "ib0"]


DUMP = """
import json
from netdoctor.host.rtnetlink import dump_links
print(json.dumps(dump_links(5.0)))
"""


@pytest.mark.netns
def test_the_link_dump_reads_what_ip_link_shows_across_many_datagrams(namespace: str) -> None:
    """netdoctor.host.rtnetlink against iproute2 on 301 interfaces (~0.5 MB of RTM_NEWLINK, many
    datagrams of 64 KiB): every name, MTU, operstate and address as `ip -j link` has them."""
    batch = "".join(f"link add v{index}a mtu {1500 + index} type veth peer name v{index}b\n" for index in range(150))
    subprocess.run(["ip", "-n", namespace, "-batch", "-"], input=batch, text=True, check=True, capture_output=True,
                   timeout=60)
    _ip("-n", namespace, "link", "set", "v7a", "up")
    _ip("-n", namespace, "link", "set", "v7b", "up")
    shown = json.loads(subprocess.run(["ip", "-n", namespace, "-j", "link", "show"], capture_output=True, text=True,
                                      check=True, timeout=30).stdout)
    completed = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", DUMP], capture_output=True,
                               text=True, timeout=60, cwd=Path(__file__).parent.parent)
    assert completed.returncode == 0, completed.stderr
    dumped = json.loads(completed.stdout)
    assert len(dumped) == len(shown) == 301
    assert [(link["name"], link["mtu"], link["operstate"], link["mac"]) for link in dumped] == [
        (entry["ifname"], entry["mtu"], entry["operstate"], entry["address"]) for entry in shown]
    assert {link["arp_type"] for link in dumped} == {1, 772}       # Ethernet veths, the loopback


def test_a_malformed_or_refused_dump_is_an_os_error() -> None:
    import struct

    from netdoctor.host.rtnetlink import NLMSG_DONE, NLMSG_ERROR, RTM_NEWLINK, _parse_messages

    links: list = []
    with pytest.raises(OSError, match="malformed"):
        _parse_messages(struct.pack("=IHHII", 4, RTM_NEWLINK, 0, 7, 0) + b"\0" * 12, 7, links)
    with pytest.raises(OSError, match="malformed"):        # claims more bytes than the datagram has
        _parse_messages(struct.pack("=IHHII", 400, RTM_NEWLINK, 0, 7, 0), 7, links)
    refused = struct.pack("=IHHII", 36, NLMSG_ERROR, 0, 7, 0) + struct.pack("=i", -1) + b"\0" * 16
    with pytest.raises(OSError) as error:
        _parse_messages(refused, 7, links)
    assert error.value.errno == 1                              # EPERM, as the kernel said
    other = struct.pack("=IHHII", 16, NLMSG_DONE, 0, 99, 0)    # another request's answer is skipped
    assert _parse_messages(other, 7, links) is False and links == []
    # An attribute that claims more than its message ends the message's attributes, not the run.
    header = struct.pack("=IHHII", 16 + 16 + 8, RTM_NEWLINK, 0, 7, 0) + struct.pack("=BxHiII", 0, 1, 2, 0, 0)
    assert _parse_messages(header + struct.pack("=HH", 200, 3) + b"eth0", 7, links) is False
    assert links == [{"name": None, "mtu": None, "operstate": None, "mac": None, "arp_type": 1}]
