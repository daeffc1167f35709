"""`nic-loopback`: traffic through each compute NIC, GPU memory -> NIC -> GPU memory.

Reading configuration finds a missing peer-memory module or ACS on a switch port; only
traffic proves that GPUDirect RDMA is really used and that each rail carries what its
port rate promises. For every active compute port the pipeline (netdoctor.traffic,
netdoctor.probe.loopback) pushes NCCL traffic from the nearest GPU through that one port
and back, and NCCL's own log says how it went: `NET/IB/GDRDMA` (GPUDirect RDMA),
`NET/IB` (staged through host memory), `NET/Socket` (the NIC not used at all). Judged:
GPUDirect expected but not used (naming the NIC and the passive causes found), bandwidth
against the port's rate, and against the node's other rails: a rail far below its
siblings fails even where the absolute level is not known. No engine (neither NCCL nor
perftest) is `unknown`, never `fail`. A probe check: `--no-probe` skips it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.inventory.model import Inventory
from netdoctor.inventory.queries import path_from_root
from netdoctor_plugins.remedy_words import commands

CHECK_ID = "nic-loopback"
ENGINE_REMEDY = "install NCCL (`pip install netdoctor[probe]` or libnccl2) or perftest (ib_write_bw)"


@check(CHECK_ID, "traffic through each compute NIC (GPU memory -> NIC -> GPU memory): GPUDirect RDMA really used, "
       "bandwidth against the port's rate and the node's other rails", needs=("loopback",), order=92)
def nic_loopback(ctx: CheckContext) -> Iterator[Finding]:
    result = ctx.loopback
    if result.skipped:
        yield ctx.unknown("node", f"no NIC traffic measured: {result.skipped}", remedy=ENGINE_REMEDY)
        return
    measured = {rail.port: rail.bandwidth_gbps for rail in result.rails
                if rail.status == "ok" and rail.bandwidth_gbps is not None and _rdma(rail.transport)}
    for rail in result.rails:
        yield from _judge(ctx, rail, measured)


def _rdma(transport: str | None) -> bool:
    return transport is None or not transport.startswith("NET/") or transport.startswith("NET/IB")


def _evidence(rail: Any, **more: Any) -> dict[str, Any]:
    return {"gpu": f"GPU{rail.gpu}", "engine": rail.engine, "bandwidth_gbps": rail.bandwidth_gbps,
            "transport": rail.transport, "gdr": rail.gdr, "nccl_version": rail.nccl_version,
            **({"nccl_warnings": list(rail.warnings)} if rail.warnings else {}), **more}


def _judge(ctx: CheckContext, rail: Any, measured: dict[str, float]) -> Iterator[Finding]:
    inventory = ctx.inventory
    port = inventory.port(rail.port)
    rate = port.rate.gbps if port is not None and port.rate is not None else None
    if rail.status != "ok":
        if rail.gdr is False:
            yield ctx.graded(ctx.severity("gdr_not_used_severity"), rail.port,
                             f"{rail.port}: GPU memory of GPU{rail.gpu} could not be registered with the NIC: "
                             f"{rail.reason}", evidence=_evidence(rail, causes=_gdr_causes(inventory, rail)),
                             rule="gdr_not_used_severity", remedy=_gdr_remedy(inventory, rail))
        elif rail.status == "timeout":
            yield ctx.graded(ctx.severity("timeout_severity"), rail.port, f"{rail.port}: traffic through the NIC "
                             f"did not finish: {rail.reason}", evidence=_evidence(rail), rule="timeout_severity",
                             remedy=f"look for Xid errors (`dmesg`) and the port's state (`ibstat {_device(rail)} "
                                    f"{_port_number(rail)}`); rerun with a longer --deadline")
        else:
            yield ctx.unknown(rail.port, f"{rail.port}: no traffic measured: {rail.reason}", evidence=_evidence(rail))
        return
    if not _rdma(rail.transport):
        yield ctx.graded(ctx.severity("not_rdma_severity"), rail.port,
                         f"{rail.port}: NCCL did not use the NIC: the traffic went {rail.transport} "
                         f"({_speed(rail.bandwidth_gbps, rate)})", evidence=_evidence(rail), rule="not_rdma_severity",
                         remedy=f"NCCL found no usable RDMA device: check `ibv_devinfo -d {_device(rail)}`, the port "
                                "state, rdma-core and NCCL's log (NCCL_DEBUG=INFO) for 'NET/IB : No device found'")
        return
    if rail.gdr is False and _gdr_expected(ctx.loopback.rail(rail.port)):
        yield ctx.graded(ctx.severity("gdr_not_used_severity"), rail.port,
                         f"{rail.port}: GPUDirect RDMA was not used between GPU{rail.gpu} and the NIC "
                         f"({rail.transport}, {_speed(rail.bandwidth_gbps, rate)}): every transfer is staged "
                         f"through host memory{_cause_text(inventory, rail)}",
                         evidence=_evidence(rail, causes=_gdr_causes(inventory, rail)), rule="gdr_not_used_severity",
                         remedy=_gdr_remedy(inventory, rail))
        return
    yield from _bandwidth(ctx, rail, measured, rate)


def _bandwidth(ctx: CheckContext, rail: Any, measured: dict[str, float], rate: float | None) -> Iterator[Finding]:
    from statistics import median   # only where the loopback ran: ~5 ms of imports otherwise

    bandwidth = rail.bandwidth_gbps
    others = [value for port, value in measured.items() if port != rail.port]
    sibling_median = median(others) if len(others) + 1 >= ctx.rule("sibling_min_rails") else None
    evidence = _evidence(rail, rate_gbps=rate, siblings_median_gbps=sibling_median)
    if sibling_median and bandwidth < ctx.rule("sibling_fail_fraction") * sibling_median:
        yield ctx.fail(rail.port, f"{rail.port}: {bandwidth:g} Gb/s through GPU{rail.gpu} memory, "
                       f"{bandwidth / sibling_median:.0%} of the node's other rails ({sibling_median:g} Gb/s median)",
                       evidence=evidence, rule="sibling_fail_fraction", remedy=_slow_remedy(rail))
        return
    if rate:
        share = bandwidth / rate
        below = ("line_rate_fail_fraction", "fail") if share < ctx.rule("line_rate_fail_fraction") else \
            ("line_rate_warn_fraction", "warn") if share < ctx.rule("line_rate_warn_fraction") else None
        if below is not None:
            yield ctx.graded(below[1], rail.port, f"{rail.port}: {bandwidth:g} Gb/s through GPU{rail.gpu} memory, "
                             f"{share:.0%} of its {rate:g} Gb/s port rate ({rail.transport})", evidence=evidence,
                             rule=below[0], remedy=_slow_remedy(rail))
            return
    yield ctx.passed(rail.port, f"{rail.port}: {bandwidth:g} Gb/s through GPU{rail.gpu} memory"
                     f"{f' ({bandwidth / rate:.0%} of {rate:g} Gb/s)' if rate else ''}, {rail.transport}",
                     evidence=evidence)


def _speed(bandwidth: float | None, rate: float | None) -> str:
    if bandwidth is None:
        return "no bandwidth measured"
    return f"{bandwidth:g} Gb/s" + (f" of {rate:g}" if rate else "")


def _device(rail: Any) -> str:
    return str(rail.port).rpartition(":")[0] or str(rail.port)


def _port_number(rail: Any) -> str:
    return str(rail.port).rpartition(":")[2] if ":" in str(rail.port) else "1"


def _slow_remedy(rail: Any) -> str:
    device, gpu = _device(rail), rail.gpu
    return (f"check the PCIe links of GPU{gpu} and {device} (pcie-link), ACS on their switch (pcie-p2p-path) and the "
            f"HCA's firmware; compare with perftest on that device: `ib_write_bw -d {device} -i {_port_number(rail)} "
            f"--use_cuda={gpu} &` then `ib_write_bw -d {device} -i {_port_number(rail)} --use_cuda={gpu} localhost`")


def _gdr_expected(requested: Any) -> bool:
    """GPUDirect is NCCL's default where the GPU and NIC share a PCIe switch (PIX/PXB in the
    topo matrix); on a farther GPU (or one placed by NUMA alone) NCCL may leave it off by design."""
    return requested is not None and requested.gpu_basis.startswith(("PIX", "PXB"))


def _gdr_causes(inventory: Inventory, rail: Any) -> list[str]:
    """What the passive checks found that keeps GPUDirect RDMA off on this path."""
    causes = []
    peer = inventory.peer_memory
    gpu = next((gpu for gpu in inventory.gpus if gpu.index == rail.gpu), None)
    if not peer.nvidia_peermem and not peer.nv_peer_mem:
        dmabuf = gpu.dmabuf_supported if gpu is not None else None
        causes.append("nvidia_peermem is not loaded" + (" and DMA-BUF is not supported" if dmabuf is False else
                                                         " (DMA-BUF support unknown)" if dmabuf is None else ""))
    redirecting = _redirecting(inventory, rail)
    if redirecting:
        causes.append(f"ACS redirection on {', '.join(redirecting)}")
    tree = inventory.pci_tree or {}
    translated = sorted({function.iommu_type for address in _endpoints(inventory, rail)
                         if (function := tree.get(address)) is not None and function.iommu_type in ("DMA", "DMA-FQ")})
    if translated:
        causes.append(f"IOMMU in translated mode ({', '.join(translated)})")
    level = inventory.nccl.get("NCCL_NET_GDR_LEVEL") if inventory.nccl is not None else None
    if level is not None:
        causes.append(f"NCCL_NET_GDR_LEVEL={level.value} ({level.origin})")
    return causes


def _endpoints(inventory: Inventory, rail: Any) -> list[str]:
    """The PCI functions of the rail's GPU and NIC that the PCIe tree holds."""
    gpu = next((gpu for gpu in inventory.gpus if gpu.index == rail.gpu), None)
    hca = inventory.hca(_device(rail))
    tree = inventory.pci_tree or {}
    return [address for address in (gpu.pci_address if gpu else None, hca.pci_address if hca else None)
            if address is not None and address in tree]


def _redirecting(inventory: Inventory, rail: Any) -> list[str]:
    """The bridges above the rail's GPU and NIC whose ACS redirects peer-to-peer traffic."""
    tree = inventory.pci_tree or {}
    bridges = {address for endpoint in _endpoints(inventory, rail) for address in path_from_root(tree, endpoint)[:-1]}
    return sorted(address for address in bridges
                  if (bridge := tree.get(address)) is not None and bridge.acs is not None and bridge.acs.redirects)


def _cause_text(inventory: Inventory, rail: Any) -> str:
    causes = _gdr_causes(inventory, rail)
    return f"; likely cause: {'; '.join(causes)}" if causes else ""


def _gdr_remedy(inventory: Inventory, rail: Any) -> str:
    causes = " ".join(_gdr_causes(inventory, rail))
    if "nvidia_peermem" in causes:
        return "modprobe nvidia-peermem (or use the open kernel modules with DMA-BUF); see the gpudirect check"
    if "ACS" in causes:
        return ("disable ACS redirection on the PCIe switch ports (see the pcie-p2p-path check): "
                + commands("`setpci -s {} ECAP_ACS+0x6.w=0000`", _redirecting(inventory, rail)))
    if "IOMMU" in causes:
        return "boot with iommu=pt (see the pcie-p2p-path check)"
    return "run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read why NCCL disabled GPU Direct RDMA"
