"""Pack selection by SKU: what the node is (DMI, full GPU name, NVSwitches, ConnectX on the bus),
never how many devices it shows. A DGX H100 that lost a GPU or its RDMA stack keeps dgx-h100;
an H100 NVL / H100 PCIe / H200 NVL server never gets HGX expectations."""

from __future__ import annotations

from pathlib import Path

import pytest
from inventory_factory import dgx_h100, gpu

from netdoctor.errors import RulesError
from netdoctor.inventory.model import Dmi, Inventory
from netdoctor.packs import load_rules
from netdoctor.packs.load import read_pack
from netdoctor.packs.match import match_reasons

SWITCHES = ("0000:07:00.0", "0000:08:00.0", "0000:09:00.0", "0000:0a:00.0")


def dgx(*, gpus: int = 8, name: str = "NVIDIA H100 80GB HBM3", device: str = "0x2330", rdma: bool = True,
        switches: int = 4, product: str | None = "DGXH100") -> Inventory:
    node = dgx_h100(gpus=[gpu(index) for index in range(gpus)])
    for item in node.gpus:
        item.name = name
    node.pci_gpus = {item.pci_address: device for item in node.gpus if item.pci_address}
    node.nvswitches = SWITCHES[:switches]
    node.dmi = Dmi("NVIDIA", product, None, None) if product else None
    node.pci_nics = {hca.pci_address: ("0x1021", "mlx5_core") for hca in node.hcas if hca.pci_address}
    if not rdma:
        node.hcas = []
    return node


def chosen(node: Inventory) -> tuple[str, str]:
    rule_pack = load_rules(None, node, env={})
    return rule_pack.name, rule_pack.selection_reason


def test_a_whole_dgx_h100_gets_dgx_h100_and_says_why() -> None:
    name, reason = chosen(dgx())
    assert name == "dgx-h100"
    assert reason == ("auto-selected dgx-h100 (priority 50): platform DGXH100 (DMI product_name 'DGXH100'); "
                      "GPU 'NVIDIA H100 80GB HBM3' matches '^NVIDIA (H100 80GB HBM3|H200|H800|H20)$'; HCA type "
                      "MT4129; compute ports are InfiniBand")


def test_an_hgx_without_dmi_is_known_by_its_nvswitches_and_a_4_gpu_board_is_not_an_8_gpu_one() -> None:
    name, reason = chosen(dgx(product=None, gpus=7))
    assert name == "dgx-h100" and "platform HGX_H100_8GPU (NVIDIA H100 80GB HBM3 GPUs and 4 NVSwitches" in reason
    assert chosen(dgx(product=None, gpus=4, switches=0))[0] == "default"


def test_a_dgx_h100_with_7_gpus_keeps_its_pack() -> None:
    assert chosen(dgx(gpus=7))[0] == "dgx-h100"


def test_a_dgx_without_mlx5_ib_keeps_its_pack_and_says_the_connectx_is_on_the_bus() -> None:
    name, reason = chosen(dgx(rdma=False))
    assert name == "dgx-h100"
    assert "HCA type MT4129 (on the PCI bus, no RDMA device)" in reason
    assert "no RDMA port to tell the link layer (9 ConnectX functions on the PCI bus)" in reason


def test_a_dgx_whose_nvml_names_nothing_keeps_its_pack_by_dmi() -> None:
    node = dgx()
    for item in node.gpus:
        item.name = None
    node.pci_gpus = {address: "0x9999" for address in node.pci_gpus or {}}   # ids no table knows
    assert chosen(node)[0] == "dgx-h100"
    node.dmi = None
    assert chosen(node)[0] != "dgx-h100"


@pytest.mark.parametrize(("name", "device"), [("NVIDIA H100 NVL", "0x2321"), ("NVIDIA H100 PCIe", "0x2331"),
                                              ("NVIDIA H200 NVL", "0x233b")])
def test_pcie_hopper_cards_never_get_the_hgx_pack(name: str, device: str) -> None:
    node = dgx(name=name, device=device, switches=0, product="SYS-521GE-TNRT")
    assert chosen(node)[0] == "default"


def test_h200_sxm_gets_the_hgx_pack() -> None:
    assert chosen(dgx(name="NVIDIA H200", device="0x2335", product="DGXH200"))[0] == "dgx-h100"


def test_a100_sxm_only_for_hgx_a100() -> None:
    node = dgx(name="NVIDIA A100-SXM4-80GB", device="0x20b2", product="AS -4124GO-NART")
    for hca in node.hcas:
        hca.ca_type = "MT4123"
    node.pci_nics = {address: ("0x101b", "mlx5_core") for address in node.pci_nics or {}}
    assert chosen(node)[0] == "hgx-a100"
    for item in node.gpus:
        item.name = "NVIDIA A100 80GB PCIe"
    node.pci_gpus = {address: "0x20b5" for address in node.pci_gpus or {}}
    assert chosen(node)[0] != "hgx-a100"


def test_min_gpus_still_matches_for_site_packs_counting_the_bus_too() -> None:
    data = {"pack": {"name": "site", "match": {"min_gpus": 8}}}
    node = dgx(gpus=2)
    node.pci_gpus = {f"0000:{bus:02x}:00.0": "0x2330" for bus in range(8)}    # a job's cgroup hides six
    assert match_reasons(data, [], node) == (True, ["8 GPUs"])
    node.pci_gpus = {}
    assert match_reasons(data, [], node) == (False, ["2 GPUs, fewer than 8"])


def test_platforms_and_min_nvswitches_match_what_the_node_is() -> None:
    data = {"pack": {"name": "site", "match": {"platforms": ["DGXH100", "DGXH200"], "min_nvswitches": 4}}}
    assert match_reasons(data, [], dgx()) == (True, ["platform DGXH100 (DMI product_name 'DGXH100')",
                                                    "4 NVSwitches on the PCI bus"])
    holds, why = match_reasons(data, [], dgx(switches=3))
    assert not holds and why == ["3 NVSwitches on the PCI bus, fewer than 4"]
    holds, why = match_reasons(data, [], dgx(product=None, switches=0))
    assert not holds and why == ["platform is not DGXH100 or DGXH200 (platform not known)"]


def test_a_site_pack_with_a_bad_platforms_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "site.toml"
    path.write_text('[pack]\nname = "site"\n[pack.match]\nplatforms = "DGXH100"\n')
    with pytest.raises(RulesError, match="platforms"):
        read_pack(path)
