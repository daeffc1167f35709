"""pcie-link: GPU and NIC PCIe links against their maximum, with idle-GPU power saving allowed.

A GPU's link speed is judged only against its own evidence of load (NVML utilization at
capture), never its P-state: Hopper idles in P0."""

from __future__ import annotations

import pytest
import structlog.testing

from netdoctor.errors import RulesError
from netdoctor.inventory.model import Inventory, SourceState, SourceStatus
from netdoctor.report.model import Status
from netdoctor_plugins.pcie_link import pcie_link
from inventory_factory import (
    GPU_ADDRESSES,
    NIC_ADDRESSES,
    by_subject,
    dgx_h100,
    gpu,
    ib_hca,
    pcie_link as link,
    run_check,
    site_pack,
)

CHECK = "pcie-link"


def run(inventory: Inventory, pack: str = "default", **overrides: object) -> dict[str, list]:
    return by_subject(run_check(pcie_link, CHECK, inventory, pack_name=pack, overrides=overrides))


def only(findings: dict[str, list], subject: str):
    assert len(findings[subject]) == 1, findings[subject]
    return findings[subject][0]


def test_healthy_dgx_passes_every_gpu_and_nic() -> None:
    findings = run(dgx_h100(storage="cx7-ib"))
    assert set(findings) == {f"GPU{i}" for i in range(8)} | set(NIC_ADDRESSES) | {"0000:c0:00.0"}
    assert all(only(findings, subject).status is Status.PASS for subject in findings)
    assert only(findings, "GPU0").summary == "Gen5 x16 (max Gen5 x16)"
    nic = only(findings, NIC_ADDRESSES[3])
    assert nic.summary == "mlx5_3: 32 GT/s Gen5 x16 (max 32 GT/s Gen5 x16)"
    assert nic.evidence["current_width"] == 16 and nic.evidence["hca"] == "mlx5_3"
    # NICs in HCA name order (mlx5_7 before mlx5_8), not PCI address order
    assert list(findings)[8:] == [*NIC_ADDRESSES, "0000:c0:00.0"]


def gpu_at(index: int, gen: int, width: int = 16, *, pstate: int | None = 0, utilization: int | None = 0):
    item = gpu(index, pstate=pstate, pcie=link(GPU_ADDRESSES[index], gen, width, source="nvml"))
    item.utilization_gpu = utilization
    return item


def test_idle_gpu_at_lower_gen_is_power_saving() -> None:
    inventory = dgx_h100(storage="cx7-ib", gpus=[gpu(0), gpu(1), gpu_at(2, 1, pstate=8, utilization=0)])
    finding = only(run(inventory), "GPU2")
    assert finding.status is Status.PASS
    assert finding.summary.startswith("Gen1 x16 (max Gen5 x16); Gen1 of Gen5 is power saving (retrains to Gen5 "
                                      "under load): idle (0 % utilization)")
    assert finding.evidence["current_gen"] == 1 and finding.evidence["utilization_gpu"] == 0
    assert finding.evidence["performance_state"] == 8


def test_idle_gpu_in_p0_at_gen1_passes_even_under_the_dgx_pack() -> None:
    # The false drain of issue 22: an idle H100 sits in P0 with its link at Gen1.
    inventory = dgx_h100(storage="cx7-ib", gpus=[gpu_at(index, 1, pstate=0, utilization=0) for index in range(8)])
    findings = run(inventory, "dgx-h100")
    for index in range(8):
        finding = only(findings, f"GPU{index}")
        assert finding.status is Status.PASS, finding
        assert "power saving" in finding.summary and "idle (0 % utilization)" in finding.summary


def test_busy_gpu_at_lower_gen_warns_by_default_and_fails_on_dgx() -> None:
    inventory = dgx_h100(storage="cx7-ib", gpus=[gpu(0), gpu_at(2, 4, pstate=0, utilization=95)])
    finding = only(run(inventory), "GPU2")
    assert finding.status is Status.WARN
    assert finding.summary == "PCIe link runs at Gen4 of Gen5 while busy (95 % utilization)"
    assert finding.rule == "gpu_low_speed_severity" and finding.remedy
    assert finding.evidence["utilization_gpu"] == 95
    assert only(run(inventory, "dgx-h100"), "GPU2").status is Status.FAIL


def test_busy_is_the_packs_utilization_threshold_not_the_pstate() -> None:
    just_below = dgx_h100(storage="cx7-ib", gpus=[gpu_at(2, 4, pstate=0, utilization=19)])
    assert only(run(just_below, "dgx-h100"), "GPU2").status is Status.PASS
    at_threshold = dgx_h100(storage="cx7-ib", gpus=[gpu_at(2, 4, pstate=8, utilization=20)])
    assert only(run(at_threshold, "dgx-h100"), "GPU2").status is Status.FAIL
    stricter = run(just_below, "dgx-h100", busy_min_utilization=10)
    assert only(stricter, "GPU2").status is Status.FAIL


def test_narrow_gpu_link_fails_even_when_idle() -> None:
    narrow = gpu_at(5, 1, 8, pstate=8, utilization=0)
    finding = only(run(dgx_h100(storage="cx7-ib", gpus=[narrow])), "GPU5")
    assert finding.status is Status.FAIL
    assert finding.rule == "low_width_severity"
    # The lower speed of the idle GPU is power saving: only the lanes are named.
    assert finding.summary == "PCIe link runs at x8 of x16 (lanes lost: never power saving)"
    assert finding.evidence["current_width"] == 8 and finding.evidence["max_width"] == 16


def test_unknown_load_at_lower_gen_is_power_saving_with_the_reason() -> None:
    mystery = gpu_at(1, 3, pstate=None, utilization=None)
    finding = only(run(dgx_h100(storage="cx7-ib", gpus=[mystery]), "dgx-h100"), "GPU1")
    assert finding.status is Status.PASS
    assert ("Gen3 of Gen5 is power saving (retrains to Gen5 under load); utilization unknown, so no evidence "
            "of load") in finding.summary


def test_a_site_pack_setting_the_retired_pstate_keys_still_loads(tmp_path) -> None:
    with structlog.testing.capture_logs() as logs:
        site = site_pack(tmp_path, "dgx-h100", "[pcie-link]\npower_saving_min_pstate = 8\n"
                                               "unknown_pstate_severity = \"warn\"\n")
    assert "power_saving_min_pstate" not in site.data["pcie-link"]
    assert "unknown_pstate_severity" not in site.data["pcie-link"]
    deprecated = [entry for entry in logs if entry["event"] == "deprecated rule setting ignored"]
    assert [entry["setting"] for entry in deprecated] == ["[pcie-link] power_saving_min_pstate",
                                                          "[pcie-link] unknown_pstate_severity"]
    assert deprecated[0]["log_level"] == "warning" and "utilization" in deprecated[0]["why"]
    own = tmp_path / "old-site.toml"
    own.write_text('[pack]\nname = "old-site"\nextends = "dgx-h100"\n\n[pcie-link]\npower_saving_min_pstate = 1\n')
    from netdoctor.packs.load import load_pack
    assert "power_saving_min_pstate" not in load_pack(own, "test", env={}).data["pcie-link"]
    # Any other unknown key is still a typo the loader refuses.
    with pytest.raises(RulesError, match="power_saving_min_psate"):
        site_pack(tmp_path, "dgx-h100", "[pcie-link]\npower_saving_min_psate = 8\n")


def test_nvml_preferred_over_sysfs_and_conflict_kept() -> None:
    # NVML says the link's max is Gen4 (Gen5 GPU in a Gen4 slot); sysfs shows the GPU's own Gen5.
    in_gen4_slot = gpu(0, pcie=link(GPU_ADDRESSES[0], 4, 16, max_gen=4, source="nvml"))
    inventory = dgx_h100(storage="cx7-ib", gpus=[in_gen4_slot])
    inventory.pcie[GPU_ADDRESSES[0]] = link(GPU_ADDRESSES[0], 4, 16, max_gen=5)
    finding = only(run(inventory), "GPU0")
    assert finding.status is Status.PASS
    assert finding.evidence["source"] == "nvml"
    assert finding.evidence["conflict"]["sysfs"]["max_gen"] == 5
    assert "NVML and sysfs disagree" in finding.summary


def test_sysfs_used_when_nvml_lacks_pcie() -> None:
    no_nvml_pcie = gpu(3)
    no_nvml_pcie.pcie = None
    inventory = dgx_h100(storage="cx7-ib", gpus=[no_nvml_pcie])
    inventory.pcie[GPU_ADDRESSES[3]] = link(GPU_ADDRESSES[3], 5, 4)
    finding = only(run(inventory), "GPU3")
    assert finding.status is Status.FAIL and finding.evidence["source"] == "sysfs"


def test_nic_below_max_speed_warns_by_default_and_fails_on_dgx_narrow_always_fails() -> None:
    inventory = dgx_h100(storage="cx7-ib")
    inventory.pcie[NIC_ADDRESSES[3]] = link(NIC_ADDRESSES[3], 4, 16)
    inventory.pcie[NIC_ADDRESSES[6]] = link(NIC_ADDRESSES[6], 5, 8)
    findings = run(inventory)
    slow = only(findings, NIC_ADDRESSES[3])
    # sysfs max_link_speed is the card's maximum: a Gen5 card in a Gen4 slot reads the same.
    assert slow.status is Status.WARN and slow.rule == "nic_low_speed_severity"
    assert slow.summary == ("mlx5_3 PCIe link runs at 16 GT/s Gen4 x16, below the card's maximum 32 GT/s Gen5 x16: "
                            "a slower slot, or a link that trained down")
    assert f"lspci -vv -s {NIC_ADDRESSES[3]}" in slow.remedy and "upstream port" in slow.remedy
    assert "LnkCap" in slow.remedy
    narrow = only(findings, NIC_ADDRESSES[6])
    assert narrow.status is Status.FAIL and narrow.rule == "low_width_severity"
    assert "reseat the NIC" in narrow.remedy and "upstream port" not in narrow.remedy
    # DGX H100 rail NICs sit in Gen5 slots by design: a Gen4 link is a fault there.
    on_dgx = only(run(inventory, "dgx-h100"), NIC_ADDRESSES[3])
    assert on_dgx.status is Status.FAIL and on_dgx.rule == "nic_low_speed_severity"


def test_missing_facts_are_unknown_with_reason() -> None:
    inventory = dgx_h100(storage="cx7-ib", gpus=[gpu(0)])
    inventory.gpus[0].pcie = None
    del inventory.pcie[GPU_ADDRESSES[0]]
    del inventory.pcie[NIC_ADDRESSES[1]]
    inventory.sources["sysfs"] = SourceStatus("sysfs", SourceState.ERROR, "permission denied")
    findings = run(inventory)
    assert only(findings, "GPU0").status is Status.UNKNOWN
    assert "sysfs failed: permission denied" in only(findings, "GPU0").summary
    nic = only(findings, NIC_ADDRESSES[1])
    assert nic.status is Status.UNKNOWN and "mlx5_1" in nic.summary


def test_software_rdma_device_is_skipped_and_empty_node_skips() -> None:
    inventory = dgx_h100(storage="cx7-ib", gpus=[gpu(0)])
    rxe = inventory.hcas[0]
    rxe.name, rxe.ca_type, rxe.pci_address = "rxe0", None, None
    skipped = only(run(inventory), "rxe0")
    assert skipped.status is Status.SKIP and "software RDMA device" in skipped.summary
    siw = dgx_h100(storage="cx7-ib", gpus=[gpu(0)])
    siw.hcas[0].name, siw.hcas[0].pci_address = "siw_eth0", None
    assert only(run(siw), "siw_eth0").status is Status.SKIP
    empty = dgx_h100(storage="cx7-ib", gpus=[], hcas=[], topology=None)
    assert only(run(empty), "node").status is Status.SKIP


def test_mellanox_hca_without_a_pci_address_is_unknown_not_a_software_device() -> None:
    inventory = dgx_h100(storage="cx7-ib", gpus=[gpu(0)])
    inventory.hcas[0].pci_address = None          # sysfs had no device link for it
    finding = only(run(inventory), "mlx5_0")
    assert finding.status is Status.UNKNOWN
    assert finding.summary == "mlx5_0 (MT4129): PCI address unknown (no device link in sysfs)"
    assert finding.evidence == {"hca": "mlx5_0", "ca_type": "MT4129"}


def test_virtual_function_is_judged_through_its_physical_function() -> None:
    inventory = dgx_h100(storage="cx7-ib", gpus=[gpu(0)])
    vf = ib_hca(0)
    vf.name, vf.ca_type, vf.pci_address = "mlx5_12", "MT4126", "0000:1a:00.1"
    vf.physical_function = NIC_ADDRESSES[0]
    inventory.hcas.append(vf)                    # no PCIe facts: a VF's link is its PF's
    findings = run(inventory)
    skipped = only(findings, "0000:1a:00.1")
    assert skipped.status is Status.SKIP
    assert skipped.summary == ("mlx5_12: SR-IOV virtual function of 0000:1a:00.0 (mlx5_0): judged through its "
                               "physical function")
    assert only(findings, NIC_ADDRESSES[0]).status is Status.PASS
    # A VF whose PF is not on this node (a cloud VM) is judged itself: here its facts are missing.
    inventory.hcas = [hca for hca in inventory.hcas if hca.name != "mlx5_0"]
    assert only(run(inventory), "0000:1a:00.1").status is Status.UNKNOWN


def test_bad_status_value_in_pack_is_a_rules_error() -> None:
    busy = gpu_at(2, 4, pstate=0, utilization=95)
    with pytest.raises(RulesError, match="gpu_low_speed_severity"):
        run(dgx_h100(storage="cx7-ib", gpus=[busy]), gpu_low_speed_severity="critical")
