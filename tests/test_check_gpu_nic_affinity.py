"""gpu-nic-affinity: nearest compute NIC by PCIe distance and NUMA node; one rail per GPU."""

from __future__ import annotations

import pytest

from netdoctor.errors import RulesError
from netdoctor.inventory.model import Inventory, SourceState, SourceStatus, Topology
from netdoctor.report.model import Finding, Status
from netdoctor_plugins.gpu_nic_affinity import gpu_nic_affinity
from inventory_factory import (
    STORAGE_NIC_ADDRESS,
    by_subject,
    dgx_h100,
    dgx_topology,
    gpu,
    ib_hca,
    roce_hca,
    run_check,
)

CHECK = "gpu-nic-affinity"


def run(inventory: Inventory, pack: str = "default", **overrides: object) -> dict[str, list[Finding]]:
    return by_subject(run_check(gpu_nic_affinity, CHECK, inventory, pack_name=pack, overrides=overrides))


def statuses(findings: dict[str, list[Finding]]) -> dict[str, list[str]]:
    return {subject: [str(f.status) for f in items] for subject, items in findings.items()}


def without_nics(*removed: int) -> Inventory:
    """A DGX whose NICs `removed` vanished (dead card, driver not bound): gone from sysfs and the matrix.

    NIC8 (mlx5_8, an InfiniBand NIC on socket 1) stays unless removed too.
    """
    topology = dgx_topology()
    links = {key: level for key, level in topology.links.items() if int(key[1][3:]) not in removed}
    names = {label: name for label, name in topology.nic_names.items() if int(label[3:]) not in removed}
    hcas = [ib_hca(i) for i in range(8) if i not in removed]
    if 8 not in removed:
        hcas.append(ib_hca(8, address=STORAGE_NIC_ADDRESS, numa_node=1))
    return dgx_h100(storage="cx7-ib", hcas=hcas, topology=Topology(topology.gpus, tuple(names), links, names))


def test_healthy_dgx_passes_with_pix_rails() -> None:
    findings = run(dgx_h100(storage="cx7-ib"), "dgx-h100")
    assert statuses(findings) == {f"GPU{i}": ["pass"] for i in range(8)}
    gpu3 = findings["GPU3"][0]
    assert gpu3.summary == "rail NIC mlx5_3 (PIX), NUMA node 0"
    assert gpu3.evidence["rail_nic"] == "mlx5_3" and gpu3.evidence["nearest_nics"] == ["mlx5_3"]
    assert gpu3.evidence["levels"]["mlx5_3"] == "PIX" and gpu3.evidence["levels"]["mlx5_7"] == "SYS"
    # storage NIC mlx5_8 is an InfiniBand CX7 here, so dgx-h100's compute class takes it in
    assert gpu3.evidence["levels"]["mlx5_8"] == "SYS"


def test_nearest_nic_across_socket_fails() -> None:
    findings = run(without_nics(0, 1, 2, 3))
    for index in range(4):
        [finding] = findings[f"GPU{index}"]
        assert finding.status is Status.FAIL and finding.rule == "cross_socket_severity"
        assert finding.summary == ("nearest compute NIC mlx5_4, mlx5_5, mlx5_6, mlx5_7, mlx5_8 (SYS) "
                                   "is across the CPU socket")
        assert finding.evidence["level"] == "SYS"
    # GPUs 4-7 keep their PIX NICs; the storage NIC (NODE to them) is farther
    assert findings["GPU4"][0].status is Status.PASS
    assert findings["GPU4"][0].evidence["nearest_nics"] == ["mlx5_4"]


def test_rail_nic_across_socket_fails_on_dgx_and_passes_on_default() -> None:
    # mlx5_1 vanished; the only NIC left to be GPU1's own rail is mlx5_8, across the socket
    inventory = without_nics(1)
    dgx = run(inventory, "dgx-h100")
    [finding] = dgx["GPU1"]
    assert finding.status is Status.FAIL and finding.rule == "cross_socket_severity"
    assert finding.summary == ("rail NIC mlx5_8 (SYS) is across the CPU socket; the nearer mlx5_0, mlx5_2, mlx5_3 "
                               "(NODE) are the rails of GPU0, GPU2, GPU3")
    assert finding.evidence["rail_nic"] == "mlx5_8" and finding.evidence["level"] == "NODE"
    # every other GPU keeps its own PIX rail: none is moved to make room
    assert all(statuses(dgx)[f"GPU{i}"] == ["pass"] for i in (0, 2, 3, 4, 5, 6, 7))
    # default pack: the nearest NIC is NODE, which is acceptable, and rails may be shared
    assert statuses(run(inventory))["GPU1"] == ["pass"]


def test_gpu_without_a_nic_to_spare_shares_a_rail() -> None:
    topology = dgx_topology(nic_count=8)
    links = {key: level for key, level in topology.links.items() if key[1] != "NIC1"}
    names = {label: name for label, name in topology.nic_names.items() if label != "NIC1"}
    inventory = dgx_h100(storage="cx7-ib", hcas=[ib_hca(i) for i in range(8) if i != 1],
                              topology=Topology(topology.gpus, tuple(names), links, names))
    findings = run(inventory, "dgx-h100")
    [finding] = findings["GPU1"]
    assert finding.status is Status.FAIL and finding.rule == "one_rail_per_gpu"   # dgx-h100: a lost rail fails
    assert finding.summary == ("GPU1 has no rail NIC of its own: its nearest NICs mlx5_0, mlx5_2, mlx5_3 are "
                               "already the rail of GPU0, GPU2, GPU3")
    assert finding.evidence["shared_with"] == ["GPU0", "GPU2", "GPU3"]
    assert run(inventory, "dgx-h100", shared_rail_severity="warn")["GPU1"][0].status is Status.WARN


def test_second_gpu_on_a_one_nic_switch_gets_a_farther_rail() -> None:
    override = {("GPU1", "NIC0"): "PIX", ("GPU1", "NIC1"): "NODE"}
    inventory = dgx_h100(storage="cx7-ib", topology=dgx_topology(override))
    # mlx5_1 is no longer PIX/PXB to any GPU, so dgx-h100's near_gpu compute class drops it;
    # this check still judges it as the compute-class card it is (a misplaced rail).
    findings = run(inventory, "dgx-h100")
    assert statuses(findings)["GPU0"] == ["pass"]
    [finding] = findings["GPU1"]
    assert finding.status is Status.WARN and finding.rule == "expected_level"
    assert finding.summary == "rail NIC mlx5_1 (NODE), expected PXB or closer; the nearer mlx5_0 (PIX) is the rail of GPU0"


def test_storage_role_nics_are_not_rails() -> None:
    # mlx5_3 is gone; an Ethernet storage NIC sits PIX to GPU3. dgx-h100 classes Ethernet as storage.
    inventory = without_nics(3, 8)
    storage = roce_hca("mlx5_8", "enp192s0np0", STORAGE_NIC_ADDRESS, numa_node=0)
    inventory.hcas.append(storage)
    topology = inventory.topology
    links = {**topology.links, **{(f"GPU{i}", "NIC8"): ("PIX" if i == 3 else "SYS") for i in range(8)}}
    inventory.topology = Topology(topology.gpus, topology.nics + ("NIC8",), links,
                                  {**topology.nic_names, "NIC8": "mlx5_8"})
    dgx = run(inventory, "dgx-h100")["GPU3"]
    assert dgx[0].status is Status.FAIL and "mlx5_8" not in dgx[0].evidence["levels"]
    # without port classes every RDMA NIC counts, and the storage NIC looks like GPU3's rail
    assert run(inventory)["GPU3"][0].evidence["nearest_nics"] == ["mlx5_8"]


def test_only_storage_nics_skips() -> None:
    inventory = dgx_h100(storage="cx7-ib", hcas=[roce_hca("mlx5_0", "enp1s0", "0000:01:00.0")])
    findings = run(inventory, "dgx-h100")
    assert statuses(findings) == {"node": ["skip"]}
    assert "no compute-role RDMA NICs" in findings["node"][0].summary


def test_no_topology_numa_match_passes_and_node_is_unknown_where_pack_needs_the_matrix() -> None:
    inventory = dgx_h100(storage="cx7-ib", topology=None)
    inventory.sources["nvidia-smi-topo-m"] = SourceStatus("nvidia-smi-topo-m", SourceState.TIMEOUT, "after 5.0 s")
    default = run(inventory)["GPU5"][0]
    assert default.status is Status.PASS
    assert default.summary == ("NUMA node 1 shared with mlx5_4, mlx5_5, mlx5_6, mlx5_7, mlx5_8 "
                               "(PCIe distance unknown: nvidia-smi-topo-m timed out: after 5.0 s)")
    assert "node" not in run(inventory)
    # dgx-h100 expects PXB and one rail per GPU: NUMA cannot tell, so one node-wide unknown
    dgx = run(inventory, "dgx-h100")
    assert statuses(dgx) == {"node": ["unknown"], **{f"GPU{i}": ["pass"] for i in range(8)}}
    assert dgx["node"][0].summary == (
        "PCIe distances unknown (nvidia-smi-topo-m timed out: after 5.0 s): cannot tell whether each GPU "
        "has a compute NIC at PXB or closer or whether each GPU has a rail NIC of its own")


def test_no_topology_numa_mismatch_fails() -> None:
    hcas = [ib_hca(i, numa_node=0) for i in range(4)]
    inventory = dgx_h100(storage="cx7-ib", hcas=hcas, topology=None)
    findings = run(inventory)
    assert statuses(findings)["GPU0"] == ["pass"]
    [finding] = findings["GPU6"]
    assert finding.status is Status.FAIL and finding.rule == "numa_mismatch_severity"
    assert finding.summary.startswith("no compute NIC on NUMA node 1 of GPU6 (mlx5_0 on node 0")


def test_no_topology_and_no_numa_is_unknown() -> None:
    inventory = dgx_h100(storage="cx7-ib", gpus=[gpu(0)], topology=None)
    inventory.gpus[0].numa_node = None
    [finding] = run(inventory)["GPU0"]
    assert finding.status is Status.UNKNOWN
    assert "NUMA node of the GPU or the NICs unknown" in finding.summary


def test_missing_nic_legend_falls_back_to_numa() -> None:
    topology = dgx_topology()
    inventory = dgx_h100(storage="cx7-ib", topology=Topology(topology.gpus, topology.nics, topology.links, {}))
    [finding] = run(inventory)["GPU2"]
    assert finding.status is Status.PASS and "no NIC legend" in finding.summary
    assert "no NIC legend" in run(inventory, "dgx-h100")["node"][0].summary


def test_gpu_missing_from_matrix_is_judged_by_numa() -> None:
    inventory = dgx_h100(storage="cx7-ib", gpus=[gpu(i) for i in range(8)] + [gpu(8, address="0000:e0:00.0", numa_node=1)])
    [finding] = run(inventory, "dgx-h100")["GPU8"]
    assert finding.status is Status.UNKNOWN and "GPU8 is not in the nvidia-smi topo -m matrix" in finding.summary


def test_bad_expected_level_is_a_rules_error() -> None:
    with pytest.raises(RulesError, match="expected_level"):
        run(dgx_h100(storage="cx7-ib"), expected_level="NEAR")


# GPU x NIC block of a real `nvidia-smi topo -m` (8x H200-class, 10 NICs; dw-flyingw/GLM-5.2-FP8
# topo.txt): GPU3 owns three PIX NICs (NIC0-2), the GPU->NIC mapping is not monotonic.
GLM_MATRIX = """\
GPU0 NODE NODE NODE PIX NODE NODE SYS SYS SYS SYS
GPU1 NODE NODE NODE NODE NODE PIX SYS SYS SYS SYS
GPU2 NODE NODE NODE NODE PIX NODE SYS SYS SYS SYS
GPU3 PIX PIX PIX NODE NODE NODE SYS SYS SYS SYS
GPU4 SYS SYS SYS SYS SYS SYS NODE PIX NODE NODE
GPU5 SYS SYS SYS SYS SYS SYS NODE NODE NODE PIX
GPU6 SYS SYS SYS SYS SYS SYS NODE NODE PIX NODE
GPU7 SYS SYS SYS SYS SYS SYS PIX NODE NODE NODE
"""


def glm_topology() -> Topology:
    links = {}
    for row in GLM_MATRIX.splitlines():
        label, *cells = row.split()
        links.update({(label, f"NIC{index}"): cell for index, cell in enumerate(cells)})
    nics = tuple(f"NIC{index}" for index in range(10))
    return Topology(tuple(f"GPU{index}" for index in range(8)), nics, links,
                    {label: f"mlx5_{index}" for index, label in enumerate(nics)})


def test_real_matrix_with_uneven_pix_nics_passes_one_rail_per_gpu() -> None:
    hcas = [ib_hca(index, address=f"0000:{index + 1:02x}:00.0", numa_node=0 if index < 6 else 1)
            for index in range(10)]
    findings = run(dgx_h100(storage="cx7-ib", hcas=hcas, topology=glm_topology()), "dgx-h100")
    assert statuses(findings) == {f"GPU{i}": ["pass"] for i in range(8)}
    assert findings["GPU3"][0].evidence["nearest_nics"] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert findings["GPU7"][0].summary == "rail NIC mlx5_6 (PIX), NUMA node 1"
    # drop GPU5's only PIX NIC (mlx5_9): its NODE neighbours are the rails of GPU4, GPU6, GPU7, so
    # its own rail is one of GPU3's spare PIX NICs, across the socket
    broken = run(dgx_h100(storage="cx7-ib", hcas=hcas[:9], topology=glm_topology()), "dgx-h100")
    assert statuses(broken) == {**{f"GPU{i}": ["pass"] for i in range(8)}, "GPU5": ["fail"]}
    assert broken["GPU5"][0].evidence["rail_nic"] == "mlx5_1"
    assert broken["GPU5"][0].summary == ("rail NIC mlx5_1 (SYS) is across the CPU socket; the nearer mlx5_6, "
                                         "mlx5_7, mlx5_8 (NODE) are the rails of GPU4, GPU6, GPU7")


def test_virtual_function_is_not_a_rail_of_its_own() -> None:
    # GPU3's rail mlx5_3 is gone; a VF of mlx5_2 sits PIX to GPU3 in the matrix. It shares its
    # PF's link (GPU2's rail), so it must not hide GPU3's missing rail.
    inventory = without_nics(3, 8)
    vf = ib_hca(9, address="0000:3c:00.1", numa_node=0)
    vf.physical_function = inventory.hca("mlx5_2").pci_address
    inventory.hcas.append(vf)
    topology = inventory.topology
    links = {**topology.links, **{(f"GPU{i}", "NIC9"): ("PIX" if i == 3 else "NODE") for i in range(8)}}
    inventory.topology = Topology(topology.gpus, topology.nics + ("NIC9",), links,
                                  {**topology.nic_names, "NIC9": "mlx5_9"})
    gpu3 = run(inventory, "dgx-h100")["GPU3"][0]
    assert "mlx5_9" not in gpu3.evidence["levels"]
    assert gpu3.status is Status.FAIL and gpu3.rule == "one_rail_per_gpu"


def test_management_nic_of_a_pcie_only_node_is_no_gpu_rail() -> None:
    inventory = dgx_h100(storage="cx7-ib", hcas=[ib_hca(0)])
    [finding] = run(inventory, "pcie-only")["node"]
    assert finding.status is Status.SKIP
    assert finding.summary == "no compute-role RDMA NICs (all are classed storage, management or unused)"
