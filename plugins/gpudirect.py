"""`gpudirect`: can the NIC DMA straight into GPU memory (GPUDirect RDMA)?

Without it NCCL stages every inter-node transfer through host memory: it still works, but
bus bandwidth drops by half or worse and CPU load rises, which on a multi-node job looks
like a slow fabric. Two kernel paths give GPUDirect RDMA:

* the peer-memory module `nvidia_peermem` (legacy: `nv_peer_mem` from Mellanox), which must
  be loaded after the NVIDIA driver and MLNX_OFED/inbox RDMA stack;
* DMA-BUF (Linux >= 5.12, NVIDIA open kernel modules R515+, rdma-core >= 34), which NCCL
  >= 2.14 uses by itself without any module.

`gdrdrv` (GDRCopy) is a different thing (CPU-mapped GPU memory) and does not count.

AWS EFA has a path of its own and never uses nvidia_peermem: the efa driver reaches GPU
memory through NVIDIA's P2P API (its `p2p` file names the provider, `NVIDIA`), or libfabric
registers it by DMA-BUF; NCCL's aws-ofi-nccl plugin then needs libfabric's `efa` provider for
every device and EFA's RDMA read, which `FI_EFA_USE_DEVICE_RDMA=0` turns off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from netdoctor.checks import CheckContext, Finding, check
from netdoctor.inventory.hardware import is_efa
from netdoctor.inventory.model import Hca
from netdoctor.util import natural_key
from netdoctor_plugins.remedy_words import commands

CHECK_ID = "gpudirect"
REMEDY = ("modprobe nvidia-peermem (after the NVIDIA driver and the RDMA stack are loaded); make it "
          "persistent with `echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf`. "
          "Alternatively use the NVIDIA open kernel modules on Linux >= 5.12 so NCCL >= 2.14 can use DMA-BUF")


@check(CHECK_ID, "GPUDirect RDMA readiness: nvidia_peermem (or nv_peer_mem) loaded, or a DMA-BUF path on every GPU",
       needs=("gpus", "rdma", "efa"), order=70)
def gpudirect(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    if not inventory.hcas:
        yield ctx.skip("node", "no RDMA NICs: GPUDirect RDMA does not apply")
        return
    if not inventory.gpus:
        yield ctx.skip("node", "no GPUs: GPUDirect RDMA does not apply")
        return
    efa = [hca for hca in inventory.hcas if is_efa(hca)]
    if efa:
        yield from _judge_efa(ctx, efa)
        if len(efa) == len(inventory.hcas):
            return      # other RDMA devices beside EFA still need peer memory or DMA-BUF
    peer = inventory.peer_memory
    dmabuf = {gpu.label: gpu.dmabuf_supported for gpu in sorted(inventory.gpus, key=lambda gpu: gpu.index)}
    evidence: dict[str, Any] = {
        "nvidia_peermem": peer.nvidia_peermem, "nv_peer_mem": peer.nv_peer_mem, "gdrdrv": peer.gdrdrv,
        "dmabuf_supported": dmabuf,
    }
    loaded = [name for name, state in (("nvidia_peermem", peer.nvidia_peermem), ("nv_peer_mem", peer.nv_peer_mem))
              if state]
    if loaded:
        yield ctx.passed("node", f"{loaded[0]} is loaded (peer-memory GPUDirect RDMA)", evidence=evidence)
        return
    accept_dmabuf = bool(ctx.rule("accept_dmabuf"))
    without = sorted((label for label, state in dmabuf.items() if state is False), key=_gpu_order)
    unknown = sorted((label for label, state in dmabuf.items() if state is None), key=_gpu_order)
    peer_known_absent = peer.nvidia_peermem is False and peer.nv_peer_mem is not True
    if accept_dmabuf and not without and not unknown:
        yield ctx.passed("node", "DMA-BUF GPUDirect RDMA on every GPU (NCCL >= 2.14 uses it; "
                         "no peer-memory module loaded)", evidence=evidence)
        return
    if not peer_known_absent:
        # /sys/module could not be read: the peer-memory module may well be loaded.
        dmabuf_text = "is not accepted by the rule pack" if not accept_dmabuf else "is not confirmed on every GPU"
        yield ctx.unknown("node", f"whether nvidia_peermem is loaded is unknown "
                          f"({inventory.source('sysfs').reason()}) and DMA-BUF {dmabuf_text}", evidence=evidence)
        return
    if not accept_dmabuf:
        yield ctx.fail("node", "nvidia_peermem is not loaded and the rule pack requires it (DMA-BUF not "
                       "accepted): NCCL falls back to staging through host memory", evidence=evidence, remedy=REMEDY,
                       rule="accept_dmabuf")
        return
    if without:
        yield ctx.fail("node", f"no GPUDirect RDMA path: nvidia_peermem is not loaded and DMA-BUF is not "
                       f"supported on {', '.join(without)}; NCCL stages through host memory",
                       evidence=evidence, remedy=REMEDY)
        return
    # Only unknown DMA-BUF support is left: the pack decides whether that is a failure.
    summary = (f"nvidia_peermem is not loaded and DMA-BUF support is unknown on {', '.join(unknown)} "
               f"({inventory.source('nvml').reason()})")
    if ctx.rule("fail_when_dmabuf_unknown"):
        yield ctx.fail("node", summary, evidence=evidence, remedy=REMEDY, rule="fail_when_dmabuf_unknown")
    else:
        yield ctx.unknown("node", summary, evidence=evidence, remedy=REMEDY)


def _gpu_order(label: str) -> int:
    return int(label.removeprefix("GPU"))


def efa_p2p_remedy(devices: list[str]) -> str:
    """Rebuild EFA's NVIDIA P2P support, and the files that then name it."""
    return ("install the efa driver from the EFA installer after the NVIDIA driver (it builds EFA's NVIDIA P2P "
            "support against it; then the device's p2p file names NVIDIA: "
            f"{commands('`cat /sys/class/infiniband/{}/device/p2p`', devices)}), or use the NVIDIA open kernel "
            "modules so libfabric can register GPU memory by DMA-BUF")


DEVICE_RDMA_OFF = ("0", "false", "no", "off")


def _judge_efa(ctx: CheckContext, efa: list[Hca]) -> Iterator[Finding]:
    """EFA's GPUDirect path: the kernel side per device, libfabric's efa provider, RDMA read."""
    inventory = ctx.inventory
    names = sorted((hca.name for hca in efa), key=natural_key)
    providers = {hca.name: list(hca.p2p_providers) if hca.p2p_providers is not None else None for hca in efa}
    dmabuf = [gpu.dmabuf_supported for gpu in inventory.gpus]
    dmabuf_everywhere = bool(dmabuf) and all(dmabuf) and bool(ctx.rule("accept_dmabuf"))
    evidence: dict[str, Any] = {"efa_p2p": providers, "dmabuf_supported": dmabuf_everywhere}
    without = [name for name in names if providers[name] is not None
               and not any(item.upper().startswith("NVIDIA") for item in providers[name] or [])]
    unread = [name for name in names if providers[name] is None]
    problems = 0
    if without and not dmabuf_everywhere:
        problems += 1
        yield ctx.fail("node", f"EFA has no path into GPU memory on {_few(without)}: its driver names no NVIDIA "
                       "P2P provider and DMA-BUF is not available on every GPU, so NCCL stages through host memory",
                       evidence=evidence, remedy=efa_p2p_remedy(without))
    elif unread and not dmabuf_everywhere:
        problems += 1
        yield ctx.unknown("node", f"EFA's GPU memory path is unknown on {_few(unread)}: no `p2p` (or `gdr`) file "
                          "(the kernel's own efa driver has none) and DMA-BUF is not confirmed on every GPU",
                          evidence=evidence, remedy=efa_p2p_remedy(unread))
    libfabric = inventory.libfabric_providers
    if libfabric is None:
        problems += 1
        yield ctx.unknown("node", "whether libfabric can open the EFA devices is unknown: "
                          + inventory.source("fi_info-p-efa").reason(), evidence=evidence)
    else:
        opened = {entry.domain.removesuffix("-rdm") for entry in libfabric
                  if entry.provider == "efa" and (entry.ep_type or "FI_EP_RDM") == "FI_EP_RDM" and entry.domain}
        evidence["libfabric_rdm_domains"] = sorted(opened, key=natural_key)
        missing = [name for name in names if name not in opened]
        if missing:
            problems += 1
            what = "no efa provider at all" if not opened else f"no efa RDM endpoint for {_few(missing)}"
            yield ctx.fail("node", f"libfabric (`fi_info -p efa`) has {what}: NCCL's aws-ofi-nccl plugin cannot use "
                           "those devices and falls back to fewer NICs or to sockets", evidence=evidence,
                           remedy="reinstall the EFA software (libfabric-aws, rdma-core from the EFA installer) and "
                                  f"check that `fi_info -p efa` lists {_few(missing)}; FI_PROVIDER must not exclude efa")
    setting = inventory.nccl.get("FI_EFA_USE_DEVICE_RDMA") if inventory.nccl is not None else None
    if setting is not None:
        evidence["FI_EFA_USE_DEVICE_RDMA"] = setting.value
        if setting.value.strip().lower() in DEVICE_RDMA_OFF and ctx.rule("efa_device_rdma"):
            problems += 1
            yield ctx.fail("node", f"FI_EFA_USE_DEVICE_RDMA={setting.value} ({setting.origin}) turns off EFA's RDMA "
                           "read on a platform built for it: aws-ofi-nccl disables GPUDirect and NCCL copies "
                           "through host memory", evidence=evidence, rule="efa_device_rdma",
                           remedy="unset FI_EFA_USE_DEVICE_RDMA or set it to 1 (libfabric >= 1.18 uses RDMA read "
                                  "wherever the device has it)")
    if problems == 0:
        path = "DMA-BUF" if without or unread else "its driver's NVIDIA P2P provider"
        yield ctx.passed("node", f"EFA GPUDirect RDMA: {len(efa)} devices reach GPU memory through {path}, and "
                         "libfabric's efa provider opens each of them", evidence=evidence)


def _few(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")
