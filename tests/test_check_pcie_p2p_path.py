"""pcie-p2p-path: ACS redirection below the point where a GPU's and its peer's paths meet
(bare metal), ATS in a VM, the IOMMU mode; and the same verdict from `lspci -vvv` where the
config space was not read."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from inventory_factory import dgx_h100, gpu, ib_hca, only, run_check
from netdoctor.inventory.model import AcsControl, Inventory, PciPathFunction
from netdoctor.report.model import Finding, Status
from netdoctor.run import CheckOptions
from netdoctor.run import run_check as run_netdoctor
from netdoctor_plugins.pcie_p2p_path import pcie_p2p_path

CHECK = "pcie-p2p-path"
FIXTURES = Path(__file__).parent / "fixtures" / "nodes"
REDIRECT = AcsControl(0b0011101)        # SrcValid ReqRedir CmpltRedir UpstreamFwd
OFF = AcsControl(0)
GPU0, GPU1, NIC = "0000:1a:00.0", "0000:1b:00.0", "0000:19:00.0"


def bridge(address: str, parent: str | None, port_type: str, acs: AcsControl | None = OFF, **changes: object) -> PciPathFunction:
    return PciPathFunction(address, parent, port_type=port_type, acs=acs, has_acs=acs is not None,
                           iommu_group=address[-4:], iommu_type="identity", capabilities_from="config",
                           **changes)  # type: ignore[arg-type]


def two_level(**acs: AcsControl | None) -> dict[str, PciPathFunction]:
    """Root port > switch A (up, down) > switch B (up, three down ports) > GPU0, GPU1, NIC."""
    functions = [
        bridge("0000:14:01.0", None, "root_port", REDIRECT),
        bridge("0000:15:00.0", "0000:14:01.0", "upstream_port", None),
        bridge("0000:16:00.0", "0000:15:00.0", "downstream_port", acs.get("a_down", OFF)),
        bridge("0000:17:00.0", "0000:16:00.0", "upstream_port", None),
        bridge("0000:18:00.0", "0000:17:00.0", "downstream_port", acs.get("b_nic", OFF)),
        bridge("0000:18:01.0", "0000:17:00.0", "downstream_port", acs.get("b_gpu0", OFF)),
        bridge("0000:18:02.0", "0000:17:00.0", "downstream_port", acs.get("b_gpu1", OFF)),
    ]
    tree = {function.address: function for function in functions}
    for address, parent, ats in ((NIC, "0000:18:00.0", False), (GPU0, "0000:18:01.0", None), (GPU1, "0000:18:02.0", None)):
        tree[address] = bridge(address, parent, "endpoint", None, ats_enabled=ats)
    return tree


def node(tree: dict[str, PciPathFunction], *, nvlink: bool = True, virtualization: str | None = "none") -> Inventory:
    gpus = [replace(gpu(0, address=GPU0), nvlink_active=18 if nvlink else None),
            replace(gpu(1, address=GPU1), nvlink_active=18 if nvlink else None)]
    inventory = dgx_h100(gpus=gpus, hcas=[ib_hca(0, address=NIC)], topology=None)
    inventory.pci_tree, inventory.virtualization = tree, virtualization
    return inventory


def run(inventory: Inventory) -> list[Finding]:
    return run_check(pcie_p2p_path, CHECK, inventory)


def test_redirection_below_the_meeting_point_fails_naming_the_port_and_the_pair() -> None:
    findings = run(node(two_level(b_gpu0=REDIRECT)))
    failure = only(findings, "0000:18:01.0", Status.FAIL)
    assert failure.summary == ("ACS redirects peer-to-peer traffic at PCIe downstream port 0000:18:01.0 (SrcValid+ "
                               "ReqRedir+ CmpltRedir+ UpstreamFwd+): GPU0 <-> mlx5_0 goes up to the root complex "
                               "instead of across the switch")
    assert "setpci -s 0000:18:01.0 ECAP_ACS+0x6.w=0000" in (failure.remedy or "")
    assert failure.evidence["read_from"] == "config"
    assert only(findings, "iommu").status is Status.PASS


def test_redirection_above_the_meeting_point_and_on_root_ports_is_no_fault() -> None:
    # GPU0, GPU1 and the NIC meet at switch B: switch A's port and the root port carry no P2P.
    findings = run(node(two_level(a_down=REDIRECT), nvlink=False))
    assert {finding.status for finding in findings} == {Status.PASS}
    assert only(findings, "acs").summary == "3 peer-to-peer path(s) meet inside a PCIe switch with no ACS " \
                                            "redirection below that point"


def test_gpus_without_nvlink_are_judged_as_a_pair_too() -> None:
    findings = run(node(two_level(b_gpu1=REDIRECT), nvlink=False))
    assert only(findings, "0000:18:02.0", Status.FAIL).evidence["paths"] == ["GPU1 <-> mlx5_0", "GPU0 <-> GPU1"]
    # With NVLink between them their P2P does not use PCIe: only the GPU1 <-> NIC path counts.
    assert only(run(node(two_level(b_gpu1=REDIRECT))), "0000:18:02.0").evidence["paths"] == ["GPU1 <-> mlx5_0"]


def test_paths_that_meet_only_at_the_root_complex_are_not_judged() -> None:
    tree = two_level(b_gpu0=REDIRECT)
    tree["0000:80:01.0"] = bridge("0000:80:01.0", None, "root_port", REDIRECT)
    tree[GPU0] = replace(tree[GPU0], parent="0000:80:01.0")      # GPU0 on the other socket
    findings = run(node(tree))
    assert {finding.status for finding in findings} == {Status.PASS}
    assert only(findings, "acs").summary == ("1 peer-to-peer path(s) meet inside a PCIe switch with no ACS "
                                             "redirection below that point; 1 path(s) meet only at the root complex")
    tree[GPU1] = replace(tree[GPU1], parent="0000:80:01.0")
    assert only(run(node(tree)), "acs").summary == ("no GPU shares a PCIe switch with its peers: P2P crosses the "
                                                    "root complex (ACS there is normal)")


def test_unread_acs_is_unknown_and_no_capability_is_fine() -> None:
    unread = two_level()
    unread["0000:18:01.0"] = replace(unread["0000:18:01.0"], acs=None, has_acs=None, capabilities_from=None)
    finding = only(run(node(unread)), "acs", Status.UNKNOWN)
    assert "0000:18:01.0" in finding.summary and "root" in finding.summary
    without = two_level()
    without["0000:18:01.0"] = replace(without["0000:18:01.0"], acs=None, has_acs=False)
    assert only(run(node(without)), "acs").status is Status.PASS


def test_translated_iommu_warns_and_iommu_off_passes() -> None:
    tree = {address: replace(function, iommu_type="DMA") for address, function in two_level().items()}
    finding = only(run(node(tree)), "iommu", Status.WARN)
    assert finding.summary.startswith("the IOMMU translates DMA (DMA) for GPU0, GPU1, mlx5_0")
    assert "iommu=pt" in (finding.remedy or "")
    off = {address: replace(function, iommu_group=None, iommu_type=None) for address, function in two_level().items()}
    assert only(run(node(off)), "iommu").summary == "IOMMU off for the GPUs and NICs (no IOMMU groups)"


def test_in_a_vm_ats_is_judged_instead_of_acs() -> None:
    vm = "GPU virtualization mode passthrough (NVML)"
    findings = run(node(two_level(b_gpu0=REDIRECT), virtualization=vm))
    assert [finding.subject for finding in findings] == ["ats"]       # the guest's ACS is not the host's
    assert only(findings, "ats", Status.WARN).summary.endswith(
        "ATS is off on mlx5_0: peer-to-peer requests cannot take the direct translated route and go up to the "
        "host's root complex")
    tree = two_level()
    tree[NIC] = replace(tree[NIC], ats_enabled=True)
    assert only(run(node(tree, virtualization=vm)), "ats").status is Status.UNKNOWN   # GPU0 shows no ATS capability
    tree[GPU0] = replace(tree[GPU0], ats_enabled=True)
    tree[GPU1] = replace(tree[GPU1], ats_enabled=True)
    assert only(run(node(tree, virtualization=vm)), "ats").status is Status.PASS


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target, symlinks=True)
    return target


def test_lspci_gives_the_verdict_where_the_config_space_was_not_read(tmp_path: Path) -> None:
    snapshot = _copy("dgx-h100-acs-redirect", tmp_path)
    for config in (snapshot / "sys/devices").rglob("config"):
        config.unlink()                                   # captured without root
    report = run_netdoctor(CheckOptions(snapshot=snapshot, no_probe=True, only=(CHECK,)), env={})
    failure = next(finding for finding in report.findings if finding.status is Status.FAIL)
    assert (failure.subject, failure.evidence["read_from"]) == ("0000:4e:01.0", "lspci")
    (snapshot / "commands/lspci-vvv.out").write_text("")
    (snapshot / "commands/lspci-vvv.status").write_text("missing\n")
    report = run_netdoctor(CheckOptions(snapshot=snapshot, no_probe=True, only=(CHECK,)), env={})
    assert [(finding.subject, finding.status) for finding in report.findings] == [
        ("acs", Status.UNKNOWN), ("iommu", Status.PASS)]
