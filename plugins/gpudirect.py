"""`gpudirect`: can the NIC DMA straight into GPU memory (GPUDirect RDMA)?

Without it NCCL stages every inter-node transfer through host memory: it still works, but
bus bandwidth drops by half or worse and CPU load rises, which on a multi-node job looks
like a slow fabric. Two kernel paths give GPUDirect RDMA:

* the peer-memory module `nvidia_peermem` (legacy: `nv_peer_mem` from Mellanox), which must
  be loaded after the NVIDIA driver and MLNX_OFED/inbox RDMA stack;
* DMA-BUF (Linux >= 5.12, NVIDIA open kernel modules R515+, rdma-core >= 34), which NCCL
  >= 2.14 uses by itself without any module.

`gdrdrv` (GDRCopy) is a different thing (CPU-mapped GPU memory) and does not count.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from netdoctor.checks import CheckContext, Finding, check

CHECK_ID = "gpudirect"
REMEDY = ("modprobe nvidia-peermem (after the NVIDIA driver and the RDMA stack are loaded); make it "
          "persistent with `echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf`. "
          "Alternatively use the NVIDIA open kernel modules on Linux >= 5.12 so NCCL >= 2.14 can use DMA-BUF")


@check(CHECK_ID, "GPUDirect RDMA readiness: nvidia_peermem (or nv_peer_mem) loaded, or a DMA-BUF path on every GPU",
       needs=("gpus", "rdma"), order=70)
def gpudirect(ctx: CheckContext) -> Iterator[Finding]:
    inventory = ctx.inventory
    if not inventory.hcas:
        yield ctx.skip("node", "no RDMA NICs: GPUDirect RDMA does not apply")
        return
    if not inventory.gpus:
        yield ctx.skip("node", "no GPUs: GPUDirect RDMA does not apply")
        return
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
