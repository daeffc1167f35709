"""`nvidia-smi nvlink -s`: the real 2x H200 output, inactive links, and its use as the second
source of per-link state where NVML gives none."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from netdoctor.errors import ParseError
from netdoctor.parsers.nvidia_smi_nvlink import parse_nvidia_smi_nvlink_status
from netdoctor.run import discover, open_source

CORPUS = Path(__file__).parent / "data" / "corpus" / "nvidia-smi-nvlink"
NODES = Path(__file__).parent / "fixtures" / "nodes"


def test_real_h200_output() -> None:
    gpus = parse_nvidia_smi_nvlink_status((CORPUS / "device-h200x2__nvlink-s.txt").read_text())
    assert [(gpu.index, gpu.name, len(gpu.links)) for gpu in gpus] == [(0, "NVIDIA H200", 18), (1, "NVIDIA H200", 18)]
    assert gpus[0].uuid == "GPU-c1210c85-6a81-fa01-33d2-9379f937ea7c"
    assert {link.speed_gbs for gpu in gpus for link in gpu.links} == {26.562}


def test_real_a100_output_and_the_empty_output_of_a_gpu_without_nvlink() -> None:
    gpus = parse_nvidia_smi_nvlink_status((CORPUS / "leptonai-gpud__nvidia-smi.nvlink.status.a100.txt").read_text())
    assert [gpu.index for gpu in gpus] == list(range(8))
    assert {(gpu.name, len(gpu.links)) for gpu in gpus} == {("NVIDIA A100-SXM4-80GB", 12)}
    assert {link.speed_gbs for gpu in gpus for link in gpu.links} == {25.0}     # `25 GB/s`: the integer form
    # A PCIe A10 (and the device tool's single H100 VM) print nothing at all: no GPU blocks.
    assert parse_nvidia_smi_nvlink_status((CORPUS / "leptonai-gpud__nvidia-smi.nvlink.status.a10.txt").read_text()) == []


def test_inactive_links_and_a_gpu_without_nvlink() -> None:
    gpus = parse_nvidia_smi_nvlink_status((CORPUS / "synthetic-h100-two-inactive-and-a-pcie-gpu.txt").read_text())
    assert [link.link for link in gpus[0].links if not link.active] == [7, 13]
    assert gpus[1].links == ()


@pytest.mark.parametrize("text", ["Link 0: 26.562 GB/s\n", "GPU 0: X\n\t Link zero: fast\n",
                                  "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"])
def test_what_is_not_its_output_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_nvidia_smi_nvlink_status(text)


def test_per_link_state_comes_from_nvidia_smi_where_nvml_gives_none(tmp_path: Path) -> None:
    node = tmp_path / "node"
    shutil.copytree(NODES / "dgx-h100-nvlinks-down", node)
    report = json.loads((node / "nvml.json").read_text())
    for gpu in report["gpus"]:                     # an older driver: counts, no per-link facts
        gpu["nvlink"] = {key: gpu["nvlink"][key] for key in ("active", "total", "version")}
    (node / "nvml.json").write_text(json.dumps(report))
    with open_source(node) as source:
        inventory = discover(source, deadline=time.monotonic() + 30)
    gpu3 = inventory.gpus[3]
    assert [link.link for link in gpu3.nvlinks if link.active is False] == [7, 13]
    assert {link.speed_mbps for link in gpu3.nvlinks if link.active} == {26562}
    assert "nvidia-smi-nvlink-s" in gpu3.sources
