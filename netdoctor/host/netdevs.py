"""Network interfaces: netlink (an RTM_GETLINK dump) on a live node, sysfs `class/net` everywhere else.

Netlink gives the kernel's view in one dump and sees every interface of the current
network namespace; sysfs is what a snapshot can hold. A capture reads both, so the
snapshot reproduces what the live run saw.
"""

from __future__ import annotations

import threading
from typing import Any

from netdoctor.host.rtnetlink import dump_links
from netdoctor.host.types import SysTree
from netdoctor.logging import get_logger
from netdoctor.records import record
from netdoctor.util import PCI_ADDRESS_RE

log = get_logger(__name__)

NETLINK_TIMEOUT_S = 3.0
# Read during a capture so the snapshot can answer what netlink answered live (speed is read anyway).
_SYSFS_ATTRIBUTES = ("mtu", "operstate", "address", "type")


@record(frozen=True)
class NetdevFacts:
    """What the host layer knows of one interface (`ens1f0np0`, `ib0`)."""

    name: str
    mtu: int | None
    operstate: str | None          # lower-case: up | down | unknown | lowerlayerdown | dormant ...
    mac: str | None                # 6 bytes for Ethernet, 20 for IPoIB
    arp_type: int | None           # 1 = Ethernet, 32 = InfiniBand (IPoIB), 772 = loopback
    speed_mbps: int | None
    pci_address: str | None


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def _speed(sys: SysTree, name: str) -> int | None:
    # `speed` reads -1 (or fails with EINVAL) while the link is down or for virtual
    # devices; neither is a speed.
    value = _int_or_none(sys.read(f"class/net/{name}/speed"))
    return value if value is not None and value > 0 else None


def _pci_address(sys: SysTree, name: str) -> str | None:
    # Virtual interfaces have no `device`; virtio ones point at `virtioN`, not a PCI function.
    target = sys.link_name(f"class/net/{name}/device")
    return target if target is not None and PCI_ADDRESS_RE.match(target) else None


def _from_sysfs(sys: SysTree, name: str) -> NetdevFacts:
    base = f"class/net/{name}"
    operstate = sys.read(f"{base}/operstate")
    address = sys.read(f"{base}/address")
    return NetdevFacts(
        name=name,
        mtu=_int_or_none(sys.read(f"{base}/mtu")),
        operstate=operstate.strip().lower() if operstate else None,
        mac=address.strip().lower() if address else None,
        arp_type=_int_or_none(sys.read(f"{base}/type")),
        speed_mbps=_speed(sys, name),
        pci_address=_pci_address(sys, name),
    )


def _netlink_links() -> list[dict[str, Any]]:
    """One RTM_GETLINK dump as plain dicts (netdoctor.host.rtnetlink). Raises OSError."""
    links = dump_links(NETLINK_TIMEOUT_S)
    for link in links:
        link["operstate"] = link["operstate"].lower() if link["operstate"] is not None else None
    return links


def _netlink_with_timeout(timeout_s: float) -> list[dict[str, Any]] | None:
    """The netlink dump, or None (logged) when it fails or takes longer than `timeout_s`.

    A local netlink dump answers in milliseconds; the guard is for wedged kernels and
    seccomp-restricted containers where the socket call never returns.
    """
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["links"] = _netlink_links()
        except Exception as error:  # OSError from the socket; anything else is a bug, still not fatal
            outcome["error"] = error

    worker = threading.Thread(target=work, name="netdoctor-netlink", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        log.warning("netlink link dump did not answer, using sysfs", timeout_s=timeout_s)
        return None
    if "error" in outcome:
        log.warning("netlink link dump failed, using sysfs", error=repr(outcome["error"]))
        return None
    return outcome["links"]


def collect_netdevs(sys: SysTree, use_netlink: bool = True, netlink_timeout_s: float = NETLINK_TIMEOUT_S) -> list[NetdevFacts]:
    """Every interface but `lo`, sorted by name.

    With netlink: names, MTU, operstate, MAC and ARP type from netlink, speed and PCI
    address from sysfs. Without (snapshots, or when netlink fails): all from sysfs.
    When `sys` is recording a capture, the sysfs attributes are read too so the snapshot
    holds them.
    """
    recording = getattr(sys, "recording", None) is not None
    links = _netlink_with_timeout(netlink_timeout_s) if use_netlink else None
    if links is None:
        return [_from_sysfs(sys, name) for name in sys.listdir("class/net") if name != "lo"]
    if recording:
        sys.listdir("class/net")
    facts: list[NetdevFacts] = []
    for link in sorted(links, key=lambda entry: str(entry["name"])):
        name = link["name"]
        if not name or name == "lo":
            continue
        if recording:
            for attribute in _SYSFS_ATTRIBUTES:
                sys.read(f"class/net/{name}/{attribute}")
        facts.append(NetdevFacts(
            name=name,
            mtu=link["mtu"],
            operstate=link["operstate"],
            mac=link["mac"],
            arp_type=link["arp_type"],
            speed_mbps=_speed(sys, name),
            pci_address=_pci_address(sys, name),
        ))
    return facts
