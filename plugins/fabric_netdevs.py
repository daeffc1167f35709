"""`fabric-netdevs`: the GPU NICs of a node whose GPU fabric is plain netdevs, not RDMA.

On GCP A3 the GPUs talk between nodes through GPUDirect-TCPX (a3-high: 4 gVNICs of 200 Gb/s,
one per GPU pair) or TCPXO (a3-mega: 8, one per GPU), NCCL plugins that move GPU memory over
TCP on gVNIC (driver `gve`). There is no RDMA device, so port-state and link-speed have nothing
to judge: a GPU NIC that is missing, down, slower or with the wrong MTU would go unseen while
the job quietly loses a quarter of its bandwidth. The GPU NICs are the gVNICs on a GPU's PCIe
switch (names differ between images: eth1 on COS, enp6s0 elsewhere); the primary gVNIC sits on
the root bus. The rule pack says how many there must be, at what speed and MTU.
"""

from __future__ import annotations

from collections.abc import Iterator

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.inventory.hardware import FABRIC_NETDEV_DRIVERS
from netdoctor.inventory.model import Netdev
from netdoctor.inventory.queries import gpu_fabric_netdevs
from netdoctor.util import natural_key

CHECK_ID = "fabric-netdevs"
MISSING_REMEDY = ("the instance lost a GPU NIC: check `ip -br link` and `lspci -nn | grep 1ae0:0042`; GPU NICs are "
                  "added at instance creation (one per data VPC): recreate the instance with all of them")


@check(CHECK_ID, "GPU NICs of a node whose GPU fabric is plain netdevs (GCP GPUDirect-TCPX/TCPXO on gVNIC): "
       "present, up, at rate and MTU, each GPU with one on its PCIe switch", needs=("gpus", "netdevs"), order=22)
def fabric_netdevs(ctx: CheckContext) -> Iterator[Finding]:
    expected = int(ctx.rule("expected_count"))
    if expected <= 0:
        yield ctx.skip("node", "the rule pack expects no GPU NICs without RDMA (RDMA ports are judged by port-state "
                               "and link-speed)")
        return
    inventory = ctx.inventory
    candidates = [netdev for netdev in inventory.netdevs if netdev.driver in FABRIC_NETDEV_DRIVERS]
    placed = gpu_fabric_netdevs(inventory)
    if placed is None:
        if candidates and not inventory.pci_tree:
            yield ctx.unknown("node", f"{len(candidates)} gVNIC(s) found, but the PCIe tree that tells GPU NICs from "
                              "the primary NIC was not read (a snapshot without the bridges above them, or "
                              "/sys/bus/pci not readable)")
            return
        placed = {}
    names = sorted(placed, key=natural_key)
    evidence = {"gpu_nics": {name: placed[name] for name in names}, "expected_count": expected,
                "drivers": list(FABRIC_NETDEV_DRIVERS)}
    if len(names) < expected:
        yield ctx.graded(ctx.severity("missing_severity"), "node",
                         f"{len(names)} of {expected} GPU NICs ({', '.join(names) or 'none'}): the GPUs without "
                         "one share another NIC or fall back to the primary network", evidence=evidence,
                         rule="expected_count", remedy=MISSING_REMEDY)
    for name in names:
        netdev = inventory.netdev(name)
        assert netdev is not None
        yield _judge_netdev(ctx, netdev, placed[name])
    served = {gpu for gpus in placed.values() for gpu in gpus}
    for gpu in sorted(inventory.gpus, key=lambda gpu: gpu.index):
        if gpu.label not in served:
            yield ctx.graded(ctx.severity("gpu_without_nic_severity"), gpu.label,
                             f"{gpu.label} has no GPU NIC on its PCIe switch: its inter-node traffic crosses to "
                             "another switch's NIC", evidence=evidence, rule="gpu_without_nic_severity",
                             remedy=MISSING_REMEDY)


def _judge_netdev(ctx: CheckContext, netdev: Netdev, gpus: list[str]) -> Finding:
    evidence = {"operstate": netdev.operstate, "speed_mbps": netdev.speed_mbps, "mtu": netdev.mtu,
                "driver": netdev.driver, "pci_address": netdev.pci_address, "gpus": gpus}
    if netdev.operstate != "up":
        return ctx.graded(ctx.severity("down_severity"), netdev.name,
                          f"GPU NIC of {', '.join(gpus)} is {netdev.operstate or 'in an unknown state'}, not up",
                          evidence=evidence, rule="down_severity",
                          remedy=f"`ip link set {netdev.name} up`; check the guest's network configuration for "
                                 "this NIC's VPC (each GPU NIC has its own)")
    speed = int(ctx.rule("expected_speed_mbps"))
    minimum = int(ctx.rule("min_mtu"))
    unread = [what for what, wanted, value in (("speed", speed, netdev.speed_mbps), ("MTU", minimum, netdev.mtu))
              if wanted > 0 and value is None]
    if unread:
        return ctx.unknown(netdev.name, f"GPU NIC of {', '.join(gpus)} is up, but its {' and '.join(unread)} could "
                           f"not be read (/sys/class/net/{netdev.name}/speed, mtu)", evidence=evidence)
    if speed > 0 and netdev.speed_mbps is not None and netdev.speed_mbps < speed:
        return ctx.graded(ctx.severity("slow_severity"), netdev.name,
                          f"GPU NIC runs at {netdev.speed_mbps / 1000:g} Gb/s, expected {speed / 1000:g} Gb/s",
                          evidence=evidence, rule="expected_speed_mbps",
                          remedy="a gVNIC reports the bandwidth the instance type gives it: check the machine type "
                                 f"and the gve driver version (`ethtool -i {netdev.name}`)")
    if minimum > 0 and netdev.mtu is not None and netdev.mtu < minimum:
        return ctx.graded(ctx.severity("mtu_severity"), netdev.name,
                          f"GPU NIC MTU {netdev.mtu} is below {minimum}: GPUDirect-TCPX moves fewer bytes per "
                          "packet", evidence=evidence, rule="min_mtu",
                          remedy=f"set the MTU of the GPU NICs' VPC networks to {minimum} "
                                 f"and the interface's to match: `ip link set {netdev.name} mtu {minimum}`")
    speed_text = f"{netdev.speed_mbps / 1000:g} Gb/s" if netdev.speed_mbps is not None else "speed unknown"
    return ctx.passed(netdev.name, f"up, {speed_text}, MTU {netdev.mtu}, next to {', '.join(gpus)}",
                      evidence=evidence)
