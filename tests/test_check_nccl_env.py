"""nccl-env: NCCL's settings read as NCCL reads them (precedence, config-file syntax, device
lists), the check against the node, and the host's capture of them (environment filter,
config files, nccl-env.json in snapshots). The fixture nodes (absent HCA, prefix trap, absent
interface, GID without an address, IB disabled; healthy RoCE settings; no settings) are
asserted in tests/test_scenarios.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from corpus_util import corpus_dir
from inventory_factory import dgx_h100, ib_hca, only, roce_node, run_check
from netdoctor.host.nccl_env import collect_nccl_env
from netdoctor.inventory.model import Gid, PortState
from netdoctor.errors import ParseError
from netdoctor.parsers.ip_addr import parse_ip_addr_json
from netdoctor.parsers.nccl_env import (
    nccl_c_int,
    nccl_integer,
    nccl_path_level,
    nccl_settings,
    parse_device_filter,
    parse_nccl_conf,
)
from netdoctor.report.model import Status
from netdoctor_plugins.nccl_env import nccl_env

CHECK = "nccl-env"
FIXTURES = Path(__file__).parent / "fixtures" / "nodes"


def judged(inventory, environ=None, files=None, pack_name="default"):
    inventory.nccl = nccl_settings(environ or {}, files or {}, "/home/alice")
    return run_check(nccl_env, CHECK, inventory, pack_name=pack_name)


# -- reading the settings as NCCL does --------------------------------------------------------

def test_environment_wins_over_the_user_file_which_wins_over_etc() -> None:
    result = nccl_settings({"NCCL_IB_HCA": "=mlx5_0"},
                           {"/home/alice/.nccl.conf": "NCCL_IB_HCA=mlx5_1\nNCCL_DEBUG=INFO\n",
                            "/etc/nccl.conf": "NCCL_DEBUG=WARN\nNCCL_IB_GID_INDEX=3\n"}, "/home/alice")
    assert {name: (setting.value, setting.origin) for name, setting in result.settings.items()} == {
        "NCCL_IB_HCA": ("=mlx5_0", "environment"),
        "NCCL_DEBUG": ("INFO", "/home/alice/.nccl.conf"),
        "NCCL_IB_GID_INDEX": ("3", "/etc/nccl.conf")}
    assert result.files_read == ("/home/alice/.nccl.conf", "/etc/nccl.conf")


def test_nccl_conf_file_replaces_the_home_file() -> None:
    result = nccl_settings({"NCCL_CONF_FILE": "/opt/site/nccl.conf"},
                           {"/home/alice/.nccl.conf": "NCCL_IB_HCA=mlx5_9\n", "/opt/site/nccl.conf": "NCCL_IB_HCA=mlx5_0\n"},
                           "/home/alice")
    assert result.get("NCCL_IB_HCA").origin == "/opt/site/nccl.conf"


def test_config_syntax_as_nccl_reads_it() -> None:
    pairs, ignored = parse_nccl_conf("# comment\nNCCL_IB_HCA==mlx5_0,mlx5_3\r\nNCCL_DEBUG = INFO\nNCCL_ALGO Ring\n\n"
                                     "A=b=c\nnonsense\nsecret: x\n")
    assert pairs == [("NCCL_IB_HCA", "=mlx5_0,mlx5_3"), ("A", "b=c")]
    # Lines that do not name NCCL are never quoted: NCCL_CONF_FILE may name any file.
    assert [(line.line_number, line.why.split(":")[0]) for line in ignored] == [
        (3, "spaces around the name"), (4, "no '='")]


def test_only_nccl_ucx_libfabric_and_gpu_selection_are_kept(tmp_path: Path) -> None:
    (tmp_path / ".nccl.conf").write_text("NCCL_IB_HCA=mlx5_0\n")
    report = collect_nccl_env({"NCCL_IB_HCA": "x", "UCX_TLS": "rc", "FI_PROVIDER": "efa", "CUDA_VISIBLE_DEVICES": "0",
                               "AWS_SECRET_ACCESS_KEY": "s3cr3t", "PATH": "/bin", "HOME": str(tmp_path)}, str(tmp_path))
    assert report["environ"] == {"CUDA_VISIBLE_DEVICES": "0", "FI_PROVIDER": "efa", "NCCL_IB_HCA": "x", "UCX_TLS": "rc"}
    assert report["files"] == {f"{tmp_path}/.nccl.conf": "NCCL_IB_HCA=mlx5_0\n"}


def test_a_config_file_that_is_a_fifo_or_huge_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.conf")
    (tmp_path / "big.conf").write_bytes(b"#" * (1 << 20))
    assert collect_nccl_env({"NCCL_CONF_FILE": str(tmp_path / "fifo.conf")}, str(tmp_path))["files"] == {}
    assert collect_nccl_env({"NCCL_CONF_FILE": str(tmp_path / "big.conf")}, str(tmp_path))["files"] == {}


@pytest.mark.parametrize(("text", "name", "port", "selected"), [
    ("mlx5_1", "mlx5_10", 1, True),           # the prefix trap
    ("=mlx5_1", "mlx5_10", 1, False),
    ("=mlx5_1", "mlx5_1", 1, True),
    ("^mlx5_1", "mlx5_11", 1, False),         # excluding mlx5_1 excludes mlx5_11 too
    ("^=mlx5_1", "mlx5_11", 1, True),
    ("mlx5_0:1,mlx5_3:1", "mlx5_0", 2, False),
    ("mlx5_0:1,mlx5_3:1", "mlx5_3", 1, True),
    ("", "mlx5_3", 1, True),                  # an empty list matches every device
    ("^mlx5_3:1", "mlx5_3", 1, False),
])
def test_device_lists_select_as_ncclmatchiflist(text: str, name: str, port: int, selected: bool) -> None:
    assert parse_device_filter(text).selects(name, port) is selected


def test_the_real_public_values_parse() -> None:
    text = (corpus_dir("nccl-conf") / "public-job-scripts__nccl-settings.conf").read_text()
    pairs, ignored = parse_nccl_conf(text)
    assert not ignored and len(pairs) == 21
    values = [value for name, value in pairs if name == "NCCL_IB_HCA"]
    assert parse_device_filter(values[4]).entries[0].port == 1                 # ^mlx5_3:1
    assert parse_device_filter(values[1]).exclude and len(parse_device_filter(values[1]).entries) == 9


# -- the check ----------------------------------------------------------------------------------

def test_no_settings_pass() -> None:
    finding = only(judged(dgx_h100()), "node")
    assert finding.status is Status.PASS and "NCCL's defaults" in finding.summary


def test_exact_list_of_the_rails_passes() -> None:
    rails = ",".join(f"mlx5_{index}" for index in range(8))
    findings = judged(dgx_h100(storage=None), {"NCCL_IB_HCA": f"={rails}", "NCCL_SOCKET_IFNAME": "ib"})
    assert [finding.status for finding in findings] == [Status.PASS]


def test_prefix_trap_names_the_devices_it_pulls_in() -> None:
    hcas = [*dgx_h100(storage=None).hcas, *(ib_hca(index) for index in (10, 11))]
    findings = judged(dgx_h100(hcas=hcas, topology=None), {"NCCL_IB_HCA": "mlx5_1,mlx5_2"})
    trap = next(finding for finding in findings if "also selects" in finding.summary)
    assert trap.status is Status.WARN and trap.evidence["also_selected"] == ["mlx5_10", "mlx5_11"]


def test_an_absent_device_fails_and_a_down_one_warns() -> None:
    inventory = dgx_h100(storage=None)
    inventory.port("mlx5_2:1").state = PortState.DOWN
    findings = judged(inventory, {"NCCL_IB_HCA": "=mlx5_0,mlx5_2,mlx5_9"})
    assert {finding.status for finding in findings if "names no RDMA device" in finding.summary} == {Status.FAIL}
    assert any(finding.status is Status.WARN and "not ACTIVE" in finding.summary for finding in findings)
    assert any("leaves out" in finding.summary for finding in findings)


def test_storage_ports_pulled_in_warn() -> None:
    inventory = dgx_h100(storage="cx7-ib")      # mlx5_8: the storage NIC of the default pack
    findings = judged(inventory, {"NCCL_IB_HCA": "mlx5"}, pack_name="dgx-h100")
    assert any("not compute" in finding.summary for finding in findings), [f.summary for f in findings]


@pytest.mark.parametrize(("environ", "subject", "status", "pack_name"), [
    ({"NCCL_IB_DISABLE": "1"}, "NCCL_IB_DISABLE", Status.FAIL, "default"),
    ({"NCCL_IB_DISABLE": "0"}, "node", Status.PASS, "default"),
    ({"NCCL_NET": "socket"}, "NCCL_NET", Status.FAIL, "default"),
    ({"NCCL_NET": "IB"}, "node", Status.PASS, "default"),
    ({"NCCL_NET_GDR_LEVEL": "LOC"}, "NCCL_NET_GDR_LEVEL", Status.WARN, "default"),
    ({"NCCL_NET_GDR_LEVEL": "PIX"}, "node", Status.PASS, "default"),
    ({"NCCL_P2P_DISABLE": "1"}, "NCCL_P2P_DISABLE", Status.WARN, "default"),
    ({"NCCL_P2P_DISABLE": "1"}, "NCCL_P2P_DISABLE", Status.FAIL, "dgx-h100"),
    ({"NCCL_P2P_LEVEL": "LOC"}, "NCCL_P2P_LEVEL", Status.WARN, "default"),
    ({"NCCL_SHM_DISABLE": "1"}, "NCCL_SHM_DISABLE", Status.WARN, "default"),
    # Read as NCCL reads them: strtoll for NCCL_PARAMs, strcasecmp for NCCL_NET, strcmp for levels.
    ({"NCCL_IB_DISABLE": "0x1"}, "NCCL_IB_DISABLE", Status.FAIL, "default"),
    ({"NCCL_IB_DISABLE": "2"}, "NCCL_IB_DISABLE", Status.FAIL, "default"),
    ({"NCCL_IB_DISABLE": " 1"}, "NCCL_IB_DISABLE", Status.FAIL, "default"),
    ({"NCCL_IB_DISABLE": "true"}, "NCCL_IB_DISABLE", Status.WARN, "default"),
    ({"NCCL_IB_DISABLE": "yes"}, "NCCL_IB_DISABLE", Status.WARN, "dgx-h100"),
    ({"NCCL_IB_DISABLE": ""}, "node", Status.PASS, "default"),
    ({"NCCL_NET": "SOCKET"}, "NCCL_NET", Status.FAIL, "default"),
    ({"NCCL_NET_GDR_LEVEL": "0"}, "NCCL_NET_GDR_LEVEL", Status.WARN, "default"),
    ({"NCCL_NET_GDR_LEVEL": "loc"}, "node", Status.PASS, "default"),        # strcmp: NCCL ignores it
    ({"NCCL_P2P_LEVEL": " 0"}, "node", Status.PASS, "default"),            # not a digit first: ignored
    ({"NCCL_P2P_DISABLE": "2"}, "node", Status.PASS, "default"),           # only 1 disables
    ({"NCCL_P2P_DISABLE": "4294967297"}, "NCCL_P2P_DISABLE", Status.WARN, "default"),   # (int) strtol: 1
    ({"NCCL_SHM_DISABLE": "2"}, "node", Status.PASS, "default"),
])
def test_settings_that_cripple_the_fabric(environ, subject, status, pack_name) -> None:
    finding = only(judged(dgx_h100(), environ, pack_name=pack_name), subject)
    assert finding.status is status


def test_ib_disable_on_a_node_without_rdma_is_fine() -> None:
    inventory = dgx_h100(hcas=[], topology=None)
    assert [finding.status for finding in judged(inventory, {"NCCL_IB_DISABLE": "1"})] == [Status.PASS]


def test_socket_ifname_partial_match_warns_and_a_down_interface_fails() -> None:
    inventory = dgx_h100()
    findings = judged(inventory, {"NCCL_SOCKET_IFNAME": "ibp0s0,eth0"})
    assert only(findings, "NCCL_SOCKET_IFNAME").status is Status.WARN
    inventory.netdevs = [replace(netdev, operstate="down") for netdev in inventory.netdevs]
    assert only(judged(inventory, {"NCCL_SOCKET_IFNAME": "ib"}), "NCCL_SOCKET_IFNAME").status is Status.FAIL


def _with_gids(inventory, **per_port):
    for port in inventory.ports:
        port.gids = per_port.get(port.hca, {0: Gid("IB/RoCE v1", "fe80:0000:0000:0000:0000:00ff:fe00:0001"),
                                            1: Gid("RoCE v2", "fe80:0000:0000:0000:0000:00ff:fe00:0001"),
                                            3: Gid("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a0a:0001")})
    return inventory


def test_gid_index_v1_warns_and_absent_fails() -> None:
    inventory = _with_gids(roce_node(), mlx5_4={2: Gid("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a0a:0001")})
    assert [finding.status for finding in judged(inventory, {"NCCL_IB_GID_INDEX": "3"})] == [Status.FAIL]
    assert only(judged(inventory, {"NCCL_IB_GID_INDEX": "2"}), "mlx5_0:1").status is Status.FAIL
    inventory = _with_gids(roce_node())
    assert only(judged(inventory, {"NCCL_IB_GID_INDEX": "0"}), "mlx5_0:1").status is Status.WARN
    assert [finding.status for finding in judged(inventory, {"NCCL_IB_GID_INDEX": "-1"})] == [Status.PASS]
    # NCCL's strtoll reads "three" as 0: a note on the setting, and GID 0 (RoCE v1) judged on each port.
    findings = judged(inventory, {"NCCL_IB_GID_INDEX": "three"})
    assert only(findings, "NCCL_IB_GID_INDEX").status is Status.WARN and "as 0" in only(findings, "NCCL_IB_GID_INDEX").summary
    assert only(findings, "mlx5_0:1").status is Status.WARN and "RoCE v1" in only(findings, "mlx5_0:1").summary


def test_gid_table_not_read_is_unknown() -> None:
    inventory = roce_node()
    assert only(judged(inventory, {"NCCL_IB_GID_INDEX": "3"}), "mlx5_0:1").status is Status.UNKNOWN


def test_a_line_with_spaces_around_the_name_warns() -> None:
    finding = only(judged(dgx_h100(), files={"/etc/nccl.conf": "NCCL_IB_HCA = =mlx5_0\n"}), "/etc/nccl.conf:1")
    assert finding.status is Status.WARN and "which nothing reads" in finding.summary


# -- capture and snapshots ----------------------------------------------------------------------

def _netdoctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netdoctor", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_a_hostile_nccl_env_json_is_a_clear_error(tmp_path: Path) -> None:
    node = tmp_path / "node"
    shutil.copytree(FIXTURES / "cpu-node", node)
    (node / "nccl-env.json").write_text("[1, 2]")
    result = _netdoctor("check", "--snapshot", str(node), "--no-probe")
    assert result.returncode == 3 and "nccl-env.json must hold a JSON object" in result.stderr
    (node / "nccl-env.json").write_text(json.dumps({"environ": {"NCCL_IB_HCA": 5}, "files": {}}))
    result = _netdoctor("check", "--snapshot", str(node), "--no-probe", "--only", CHECK, "--format", "json")
    finding = json.loads(result.stdout)["findings"][0]
    assert "Traceback" not in result.stderr
    assert finding["status"] == "unknown" and "is not text" in finding["summary"]


def test_an_old_snapshot_without_nccl_env_is_unknown_not_a_guess() -> None:
    result = _netdoctor("check", "--snapshot", str(Path(__file__).parent / "data" / "device" / "nvidia-h100-x1"
                                                    / "capture.tar.gz"), "--no-probe", "--only", CHECK, "--format", "json")
    finding = json.loads(result.stdout)["findings"][0]
    assert finding["status"] == "unknown" and "not recorded" in finding["summary"]



# -- integers as NCCL's strtoll reads them ------------------------------------------------------

# (text, NCCL_PARAM value (None: NCCL's default), (int) strtol) as glibc 2.36 computes them (a C
# program calling strtoll/strtol on each text, run while writing this test).
@pytest.mark.parametrize(("text", "param", "c_int"), [
    ("true", 0, 0), ("1abc", 1, 1), (" 2", 2, 2), ("0x1", 1, 1), ("0x", 0, 0), ("08", 0, 0), ("010", 8, 8),
    ("-1", -1, -1), ("  ", 0, 0), ("99999999999999999999", None, -1), ("+5", 5, 5), ("0xg", 0, 0),
    ("\v3", 3, 3), ("1.5", 1, 1), ("4294967297", 4294967297, 1), ("", None, 0),
])
def test_integers_read_as_glibc_strtoll(text: str, param: int | None, c_int: int) -> None:
    assert (nccl_integer(text), nccl_c_int(text)) == (param, c_int)


def test_path_levels_as_ncclgetlevel_reads_them() -> None:
    assert [nccl_path_level(text) for text in ("LOC", "loc", "0", "1", "7", " 0", "SYS", "PXN", "x")] == [
        "LOC", None, "LOC", "PIX", "SYS", None, "SYS", "PXN", None]


def test_ib_disable_true_says_how_nccl_reads_it() -> None:
    finding = only(judged(dgx_h100(), {"NCCL_IB_DISABLE": "true"}), "NCCL_IB_DISABLE")
    assert finding.status is Status.WARN
    assert finding.summary.startswith("NCCL reads NCCL_IB_DISABLE='true' as 0: InfiniBand/RoCE stays on; write 0 or 1")
    assert finding.evidence["read_as"] == 0


# -- NCCL_SOCKET_IFNAME needs an address -----------------------------------------------------------

def _addressed(inventory, **addresses):
    """Every netdev's addresses as `ip -j address show` gave them (default: an IPv4 and a link-local)."""
    inventory.netdevs = [replace(netdev, addresses=tuple(addresses.get(netdev.name, ("10.1.0.7/16", "fe80::1/64"))))
                         for netdev in inventory.netdevs]
    return inventory


def test_socket_ifname_up_without_address_fails() -> None:
    inventory = dgx_h100()
    name = inventory.netdevs[0].name
    findings = judged(_addressed(inventory, **{name: ()}), {"NCCL_SOCKET_IFNAME": f"={name}"})
    finding = only(findings, "NCCL_SOCKET_IFNAME")
    assert finding.status is Status.FAIL and "no IPv4 or IPv6 address" in finding.summary
    assert name in finding.remedy


def test_socket_ifname_with_an_address_passes_and_addresses_not_read_judge_only_the_state() -> None:
    inventory = dgx_h100()
    name = inventory.netdevs[0].name
    assert [f.status for f in judged(_addressed(inventory), {"NCCL_SOCKET_IFNAME": f"={name}"})] == [Status.PASS]
    # A snapshot without ip-j-addr (addresses None): up is all that is judged.
    assert [f.status for f in judged(dgx_h100(), {"NCCL_SOCKET_IFNAME": f"={name}"})] == [Status.PASS]


def test_socket_ifname_prefix_uses_any_interface_with_an_address() -> None:
    inventory = dgx_h100()
    first, second = inventory.netdevs[0].name, inventory.netdevs[1].name
    prefix = first[:2]
    assert second.startswith(prefix)
    findings = judged(_addressed(inventory, **{first: ()}), {"NCCL_SOCKET_IFNAME": prefix})
    assert [f.status for f in findings] == [Status.PASS]


def test_socket_ifname_link_local_only_warns_and_the_family_is_honoured() -> None:
    inventory = dgx_h100()
    name = inventory.netdevs[0].name
    finding = only(judged(_addressed(inventory, **{name: ("fe80::a288:c2ff:fe12:d133/64",)}),
                          {"NCCL_SOCKET_IFNAME": f"={name}"}), "NCCL_SOCKET_IFNAME")
    assert finding.status is Status.WARN and "link-local" in finding.summary
    inventory = _addressed(dgx_h100(), **{name: ("10.1.0.7/16",)})
    finding = only(judged(inventory, {"NCCL_SOCKET_IFNAME": f"={name}", "NCCL_SOCKET_FAMILY": "AF_INET6"}),
                   "NCCL_SOCKET_IFNAME")
    assert finding.status is Status.FAIL and "no IPv6 address" in finding.summary


def test_socket_ifname_as_nccl_matches_it() -> None:
    inventory = _addressed(dgx_h100())
    name = inventory.netdevs[0].name
    # One character: NCCL ignores the setting and picks interfaces itself.
    assert [f.status for f in judged(inventory, {"NCCL_SOCKET_IFNAME": "x"})] == [Status.PASS]
    # strncmp: case matters; `=` wants the whole name.
    assert only(judged(inventory, {"NCCL_SOCKET_IFNAME": name.upper()}), "NCCL_SOCKET_IFNAME").status is Status.FAIL
    assert only(judged(inventory, {"NCCL_SOCKET_IFNAME": f"={name[:-1]}"}), "NCCL_SOCKET_IFNAME").status is Status.FAIL
    # `^` excludes: everything but the named interface, which still leaves the others.
    assert [f.status for f in judged(inventory, {"NCCL_SOCKET_IFNAME": f"^{name}"})] == [Status.PASS]


# A real `ip -j address show` (iproute2 6.1, the development container this test was written on).
IP_J_ADDR = (
    '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue","operstate":"UNKNOWN",'
    '"group":"default","txqlen":1000,"link_type":"loopback","address":"00:00:00:00:00:00","broadcast":"00:00:00:00:00:00",'
    '"addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo","valid_life_time":4294967295,'
    '"preferred_life_time":4294967295},{"family":"inet6","local":"::1","prefixlen":128,"scope":"host",'
    '"valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":2,"ifname":"ifb0","flags":["BROADCAST",'
    '"NOARP"],"mtu":1500,"qdisc":"noop","operstate":"DOWN","group":"default","txqlen":32,"link_type":"ether",'
    '"address":"ae:47:18:cb:17:d8","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[]},{"ifindex":4,"ifname":"eth0",'
    '"flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1400,"qdisc":"pfifo_fast","operstate":"UP","group":"default",'
    '"txqlen":1000,"link_type":"ether","address":"02:fc:00:00:00:01","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{'
    '"family":"inet","local":"192.0.2.2","prefixlen":24,"broadcast":"192.0.2.255","scope":"global","label":"eth0",'
    '"valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"fd00::2","prefixlen":64,'
    '"scope":"global","nodad":true,"valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6",'
    '"local":"fe80::fc:ff:fe00:1","prefixlen":64,"scope":"link","valid_life_time":4294967295,'
    '"preferred_life_time":4294967295}]}]\n')


def test_ip_addr_parser_reads_a_real_capture() -> None:
    interfaces = parse_ip_addr_json(IP_J_ADDR)
    assert {name: (entry.operstate, entry.addresses) for name, entry in interfaces.items()} == {
        "lo": ("unknown", ("127.0.0.1/8", "::1/128")), "ifb0": ("down", ()),
        "eth0": ("up", ("192.0.2.2/24", "fd00::2/64", "fe80::fc:ff:fe00:1/64"))}
    assert interfaces["eth0"].flags == ("BROADCAST", "MULTICAST", "UP", "LOWER_UP")


@pytest.mark.parametrize("text", ["", "{}", "not json", '[{"no": "name"}]'])
def test_ip_addr_parser_rejects_what_is_not_its_output(text: str) -> None:
    with pytest.raises(ParseError):
        parse_ip_addr_json(text)


def test_ip_addr_parser_skips_bad_entries() -> None:
    text = ('[{"ifname":"eth0","operstate":"UP","addr_info":[{"family":"inet","local":"300.1.1.1","prefixlen":24},'
            '{"family":"inet","local":"10.0.0.1","prefixlen":"24"},{"family":"link","local":"x"},'
            '{"family":"inet6","local":"fe80::1","prefixlen":64}]},"junk",{"ifname":""}]')
    assert parse_ip_addr_json(text)["eth0"].addresses == ("fe80::1/64",)


def test_snapshot_addresses_reach_the_netdevs() -> None:
    from netdoctor.host.snapshot import open_snapshot
    from netdoctor.inventory.build import build_inventory

    with open_snapshot(FIXTURES / "dgx-h100-nccl-ifname-no-address") as source:
        inventory = build_inventory(source)
    assert inventory.netdev("ibp24s0").addresses == ()
    assert inventory.netdev("ibp64s0").addresses[0].startswith("10.")
    assert inventory.source("ip-j-addr").state.value == "ok"
