"""gpudirect: a peer-memory module or DMA-BUF on every GPU; skip without GPUs or RDMA NICs."""

from __future__ import annotations

from netdoctor.inventory.model import Inventory, PeerMemory, SourceState, SourceStatus
from netdoctor.report.model import Finding, Status
from netdoctor_plugins.gpudirect import gpudirect
from inventory_factory import dgx_h100, gpu, run_check

CHECK = "gpudirect"
NO_MODULES = PeerMemory(nvidia_peermem=False, nv_peer_mem=False, gdrdrv=True)


def run(inventory: Inventory, **overrides: object) -> Finding:
    findings = run_check(gpudirect, CHECK, inventory, overrides=overrides)
    assert len(findings) == 1 and findings[0].subject == "node", findings
    return findings[0]


def node(dmabuf: list[bool | None], peer: PeerMemory) -> Inventory:
    return dgx_h100(storage="cx7-ib", gpus=[gpu(i, dmabuf=state) for i, state in enumerate(dmabuf)], peer_memory=peer)


def test_nvidia_peermem_loaded_passes() -> None:
    finding = run(node([None, None], PeerMemory(nvidia_peermem=True, nv_peer_mem=False)))
    assert finding.status is Status.PASS
    assert finding.summary == "nvidia_peermem is loaded (peer-memory GPUDirect RDMA)"
    assert finding.evidence["nvidia_peermem"] is True


def test_legacy_nv_peer_mem_passes() -> None:
    finding = run(node([False], PeerMemory(nvidia_peermem=False, nv_peer_mem=True)))
    assert finding.status is Status.PASS and finding.summary.startswith("nv_peer_mem is loaded")


def test_dmabuf_on_every_gpu_passes_and_says_so() -> None:
    finding = run(node([True, True, True], NO_MODULES))
    assert finding.status is Status.PASS
    assert "DMA-BUF" in finding.summary
    assert finding.evidence["dmabuf_supported"] == {"GPU0": True, "GPU1": True, "GPU2": True}


def test_neither_path_fails_with_modprobe_remedy() -> None:
    finding = run(node([True, False, False], NO_MODULES))
    assert finding.status is Status.FAIL
    assert "DMA-BUF is not supported on GPU1, GPU2" in finding.summary
    assert finding.remedy.startswith("modprobe nvidia-peermem")
    assert "/etc/modules-load.d/nvidia-peermem.conf" in finding.remedy
    # GDRCopy's module is no GPUDirect RDMA path
    assert finding.evidence["gdrdrv"] is True


def test_pack_may_refuse_dmabuf() -> None:
    finding = run(node([True, True], NO_MODULES), accept_dmabuf=False)
    assert finding.status is Status.FAIL and finding.rule == "accept_dmabuf"


def test_dmabuf_unknown_is_unknown_by_default_and_fail_when_pack_says() -> None:
    inventory = node([True, None], NO_MODULES)
    inventory.sources["nvml"] = SourceStatus("nvml", SourceState.OK)
    finding = run(inventory)
    assert finding.status is Status.UNKNOWN
    assert "DMA-BUF support is unknown on GPU1" in finding.summary
    strict = run(inventory, fail_when_dmabuf_unknown=True)
    assert strict.status is Status.FAIL and strict.rule == "fail_when_dmabuf_unknown"


def test_unreadable_module_list_is_unknown_not_fail() -> None:
    inventory = node([False, False], PeerMemory())
    inventory.sources["sysfs"] = SourceStatus("sysfs", SourceState.ERROR, "permission denied")
    finding = run(inventory)
    assert finding.status is Status.UNKNOWN
    assert "sysfs failed: permission denied" in finding.summary


def test_skip_without_rdma_nics_or_gpus() -> None:
    no_nics = dgx_h100(storage="cx7-ib", hcas=[], topology=None)
    assert run(no_nics).status is Status.SKIP and "no RDMA NICs" in run(no_nics).summary
    no_gpus = dgx_h100(storage="cx7-ib", gpus=[], topology=None)
    assert run(no_gpus).status is Status.SKIP and "no GPUs" in run(no_gpus).summary
