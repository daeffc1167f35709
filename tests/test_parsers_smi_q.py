"""`nvidia-smi -q` parser: the device tool's whole real 2x H200 output, the real Fabric / Platform
Info fragments of tests/data/corpus/nvidia-smi-q (pre-580 and 580 column layouts), the join onto
NVML's GPUs (fill, conflict, no NVML), tool errors and garbage."""

from __future__ import annotations

import json
import random
import tarfile
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from netdoctor.errors import NothingToParse, ParseError
from netdoctor.host.snapshot import open_snapshot
from netdoctor.inventory.build import build_inventory
from netdoctor.inventory.from_fabric_tools import join_nvidia_smi_q
from netdoctor.inventory.from_nvml import read_nvml
from netdoctor.inventory.merge import Draft
from netdoctor.inventory.model import GpuFabric, GpuPlatform, Inventory, SourceState
from netdoctor.report.model import Status
from netdoctor.run import CheckOptions, run_check
from netdoctor.parsers.nvidia_smi_q import SmiFabric, SmiPlatform, SmiQuery, parse_gpu_sections, parse_nvidia_smi_q

DATA = Path(__file__).parent / "data"
H200 = DATA / "device" / "nvidia-h200-x2" / "nvidia-smi-q.out"
H200_NVML = DATA / "device" / "nvidia-h200-x2" / "nvml.json"
CORPUS = DATA / "corpus" / "nvidia-smi-q"
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_real_h200_output_is_read_whole() -> None:
    query = parse_nvidia_smi_q(text(H200))
    assert query.driver_version == "580.159.04"
    assert [(gpu.pci_address, gpu.name, gpu.uuid) for gpu in query.gpus] == [
        ("0000:00:06.0", "NVIDIA H200", "GPU-acf84f99-f656-7df6-512b-76b2170473d1"),
        ("0000:00:07.0", "NVIDIA H200", "GPU-c5c53ec0-b792-33a5-c29a-e5c9c11a5c59")]
    for gpu, module in zip(query.gpus, (5, 7), strict=True):
        assert gpu.fabric == SmiFabric("completed", "success", 0, ZERO_UUID)      # health lines all N/A
        assert gpu.platform == SmiPlatform(module_id=module) and not gpu.platform.placed
        assert gpu.recovery_action == "none"


def test_real_fragments_pre_580_and_580_layouts() -> None:
    unhealthy = parse_gpu_sections(text(CORPUS / "dra-driver-issue-626__fabric-grep-C3-health-unhealthy.txt"))
    assert unhealthy.fabric == SmiFabric("completed", "success", 2, "dc6e40c4-d722-4357-9ba6-5291dd461278",
                                         health_summary="unhealthy", bandwidth="full")
    starved = parse_gpu_sections(text(CORPUS / "azhpc-images-pr-506__fabric-insufficient-resources.txt"))
    # `Insufficient Resources` is NVML_ERROR_INSUFFICIENT_RESOURCES (23): nvml.json's `error 23`.
    assert starved.fabric == SmiFabric("completed", "error 23", 0, ZERO_UUID)
    waiting = parse_gpu_sections(text(CORPUS / "gpu-operator-issue-2511__fabric-in-progress-580.txt"))
    assert waiting.fabric == SmiFabric("in_progress")
    tray = parse_gpu_sections(text(CORPUS / "k8s-test-infra-issue-642__gb300-tray-platform-info.txt"))
    assert tray.platform == SmiPlatform("1823825185529", 5, 4, 1, "switch_connected", 2, "0x21ac5b6a528f7cf5")
    assert tray.platform.placed and tray.fabric is None and tray.pci_address is None


def grace_tray_sample() -> str:
    """DERIVED from the real H200 output: the first GPU's header moved to PCI domain 0008 (as the
    real GB300 XML places its GPUs), its Fabric block given the real dra-driver issue #626 values
    (clique 2, a cluster UUID, health Unhealthy / bandwidth Full) and a Health Summary of Limited
    Capacity on the second GPU; its recovery action `Drain and Reset` (NVIDIA's words)."""
    sample = text(H200).replace("GPU 00000000:00:06.0", "GPU 00000008:06:00.0")
    first, second = sample.split("GPU 00000000:00:07.0")
    first = first.replace("CliqueId                                       : 0",
                          "CliqueId                                       : 2")
    first = first.replace(f"ClusterUUID                                    : {ZERO_UUID}",
                          "ClusterUUID                                    : DC6E40C4-D722-4357-9BA6-5291DD461278")
    first = first.replace("Summary                                    : N/A", "Summary                                    : Unhealthy")
    first = first.replace("Bandwidth                                  : N/A", "Bandwidth                                  : Full")
    first = first.replace("Route Unhealthy                            : N/A", "Route Unhealthy                            : True")
    second = second.replace("Summary                                    : N/A",
                            "Summary                                    : Limited Capacity")
    second = second.replace("GPU Recovery Action                                : None",
                            "GPU Recovery Action                                : Drain and Reset")
    return first + "GPU 00000000:00:07.0" + second


def test_derived_values_map_to_nvml_words() -> None:
    query = parse_nvidia_smi_q(grace_tray_sample())
    first, second = query.gpus
    assert first.pci_address == "0008:06:00.0"
    assert first.fabric == SmiFabric("completed", "success", 2, "dc6e40c4-d722-4357-9ba6-5291dd461278",
                                     health_summary="unhealthy", bandwidth="full", route_unhealthy=True)
    assert second.fabric is not None and second.fabric.health_summary == "limited_capacity"
    assert second.recovery_action == "drain_and_reset"


@pytest.mark.parametrize(("printed", "word"), [("None", "none"), ("Reset", "gpu_reset"), ("Reboot", "node_reboot"),
                                               ("Drain P2P", "drain_p2p"), ("Drain and Reset", "drain_and_reset"),
                                               ("GPU_RESET", "gpu_reset"), ("Recover IMEX Domain", "recover_imex_domain"),
                                               ("N/A", None), ("Something New", "something_new")])
def test_recovery_action_words(printed: str, word: str | None) -> None:
    sample = text(H200).replace("GPU Recovery Action                                : None",
                                f"GPU Recovery Action                                : {printed}")
    assert {gpu.recovery_action for gpu in parse_nvidia_smi_q(sample).gpus} == {word}


def _inventory(report: dict[str, Any] | None) -> tuple[Draft, Inventory]:
    answer = (report, "ok") if report is not None else (None, "no NVIDIA driver: test node")
    source = types.SimpleNamespace(host="vm", captured_at="2026-11-23T23:47:53Z", boot_id="b", sys=None,
                                   nvml=lambda: answer)
    draft = Draft(source)  # type: ignore[arg-type]
    read_nvml(draft)
    return draft, draft.inventory


def test_join_fills_what_nvml_did_not_give() -> None:
    # The device tool's nvml.json (real) has no fabric or platform entries: nvidia-smi -q fills the fabric.
    draft, inventory = _inventory(json.loads(text(H200_NVML)))
    assert [gpu.fabric for gpu in inventory.gpus] == [None, None]
    join_nvidia_smi_q(draft, parse_nvidia_smi_q(text(H200)), {})
    assert [gpu.fabric for gpu in inventory.gpus] == [GpuFabric("completed", "success", 0, ZERO_UUID)] * 2
    assert [gpu.platform for gpu in inventory.gpus] == [None, None]       # a module id alone places nothing
    assert [gpu.recovery_action for gpu in inventory.gpus] == ["none", "none"]
    assert inventory.conflicts == [] and all(gpu.sources == ("nvml", "nvidia-smi-q") for gpu in inventory.gpus)


def test_join_keeps_nvml_and_records_a_conflict() -> None:
    report = json.loads(text(H200_NVML))
    report["gpus"][0]["fabric"] = {"state": "completed", "status": "success", "clique_id": 0,
                                   "cluster_uuid": ZERO_UUID, "health_summary": "healthy", "bandwidth": None}
    draft, inventory = _inventory(report)
    join_nvidia_smi_q(draft, parse_nvidia_smi_q(grace_tray_sample().replace(
        "GPU 00000008:06:00.0", "GPU 00000000:00:06.0")), {})
    fabric = inventory.gpus[0].fabric
    assert fabric == GpuFabric("completed", "success", 0, ZERO_UUID, health_summary="healthy", bandwidth="full")
    assert {(conflict.fact, tuple(conflict.values.items()), conflict.chosen) for conflict in inventory.conflicts} == {
        ("fabric.clique_id", (("nvml", 0), ("nvidia-smi-q", 2)), "nvml"),
        ("fabric.cluster_uuid", (("nvml", ZERO_UUID), ("nvidia-smi-q", "dc6e40c4-d722-4357-9ba6-5291dd461278")), "nvml"),
        ("fabric.health_summary", (("nvml", "healthy"), ("nvidia-smi-q", "unhealthy")), "nvml")}


def test_join_without_nvml_adds_the_gpus_by_pci_address() -> None:
    draft, inventory = _inventory(None)
    query = parse_nvidia_smi_q(grace_tray_sample())
    join_nvidia_smi_q(draft, query, {})
    assert [(gpu.index, gpu.pci_address, gpu.name) for gpu in inventory.gpus] == [
        (0, "0008:06:00.0", "NVIDIA H200"), (1, "0000:00:07.0", "NVIDIA H200")]
    assert inventory.gpus[0].fabric is not None and inventory.gpus[0].fabric.in_nvlink_domain
    assert inventory.gpus[1].recovery_action == "drain_and_reset"
    placed = SmiQuery(None, (query.gpus[0].__class__("0008:06:00.0", platform=parse_gpu_sections(
        text(CORPUS / "k8s-test-infra-issue-642__gb300-tray-platform-info.txt")).platform),))
    join_nvidia_smi_q(draft, placed, {})
    assert inventory.gpus[0].platform == GpuPlatform("1823825185529", 5, 4, 1, "switch_connected", 2)


@pytest.mark.parametrize("sample", ["", "\n  \n"])
def test_empty_output_is_nothing_to_parse(sample: str) -> None:
    with pytest.raises(NothingToParse):
        parse_nvidia_smi_q(sample)


@pytest.mark.parametrize(("sample", "message"), [
    ("No devices were found\n", "found no GPUs"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "cannot talk"),
    ("==============NVSMI LOG==============\nDriver Version : 580.1\n", "no `GPU"),
    ("    Fabric\n        State : Completed\n", "before the first `GPU` header"),
    ("random words\n", "not a `GPU` header"),
    ("GPU 00000000:00:06.0\n    " + "x" * 100 + "\n", "section name"),
])
def test_tool_errors_and_garbage_are_parse_errors(sample: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_nvidia_smi_q(sample)


def test_every_cut_and_random_noise_is_parsed_or_a_parse_error() -> None:
    lines = text(H200).splitlines(keepends=True)
    for cut in range(0, len(lines) + 1, 3):
        try:
            assert isinstance(parse_nvidia_smi_q("".join(lines[:cut])), SmiQuery)
        except ParseError:
            pass
    noise = random.Random(23)
    alphabet = "GPU 0:.\n    Fabric State : Completed N/A\tx"
    for _ in range(300):
        sample = "".join(noise.choice(alphabet) for _ in range(noise.randint(1, 300)))
        for parse in (parse_nvidia_smi_q, parse_gpu_sections):
            try:
                parse(sample)
            except ParseError:
                pass


def test_a_snapshot_with_nvidia_smi_q_reads_it_as_a_second_source(tmp_path: Path) -> None:
    # The real 2x H200 capture (nvml.json with fabric facts) with the same machine kind's real
    # `nvidia-smi -q` added as commands/nvidia-smi-q.out: the fabric facts agree, the check passes.
    with tarfile.open(DATA / "device" / "nvidia-h200-x2" / "capture.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    (tmp_path / "commands" / "nvidia-smi-q.out").write_text(text(H200), encoding="utf-8")
    (tmp_path / "commands" / "nvidia-smi-q.status").write_text("0\n", encoding="utf-8")
    with open_snapshot(tmp_path) as source:
        inventory = build_inventory(source)
    assert inventory.source("nvidia-smi-q").state is SourceState.OK
    assert inventory.source("nvidia-imex-ctl-N").state is SourceState.MISSING      # not recorded in 2026-11
    assert [gpu.sources for gpu in inventory.gpus] == [("nvml", "nvidia-smi-topo-m", "nvidia-smi-q")] * 2
    assert [gpu.fabric for gpu in inventory.gpus] == [GpuFabric("completed", "success", 0, ZERO_UUID)] * 2
    # Another VM of that kind, so other GPU UUIDs: kept as conflicts, NVML's stands.
    assert [(conflict.subject, conflict.fact, conflict.chosen) for conflict in inventory.conflicts] == [
        ("GPU0", "uuid", "nvml"), ("GPU1", "uuid", "nvml")]
    assert inventory.gpus[0].uuid == "GPU-fbf5c8f6-0309-1422-79e9-8eb073128824"
    report = run_check(CheckOptions(snapshot=tmp_path, no_probe=True, only=["nvswitch-fabric"]), env={})
    assert [(finding.subject, finding.status) for finding in report.findings if finding.check == "nvswitch-fabric"] == [
        ("GPU0 0000:00:06.0", Status.PASS), ("GPU1 0000:00:07.0", Status.PASS)]


def _expect_fabric(expected: SmiFabric) -> Callable[[str], None]:
    def expect(sample: str) -> None:
        assert parse_gpu_sections(sample).fabric == expected
    return expect


def _expect_tray_platform(sample: str) -> None:
    platform = parse_gpu_sections(sample).platform
    assert platform == SmiPlatform("1823825185529", 5, 4, 1, "switch_connected", 2, "0x21ac5b6a528f7cf5")


# Each real fragment of tests/data/corpus/nvidia-smi-q (test_parsers_corpus.py runs these).
SMI_Q_EXPECTATIONS: dict[str, Callable[[str], None]] = {
    "dra-driver-issue-626__fabric-grep-C3-health-unhealthy.txt": _expect_fabric(SmiFabric(
        "completed", "success", 2, "dc6e40c4-d722-4357-9ba6-5291dd461278", health_summary="unhealthy", bandwidth="full")),
    "azhpc-images-pr-506__fabric-insufficient-resources.txt": _expect_fabric(SmiFabric("completed", "error 23", 0, ZERO_UUID)),
    "gpu-operator-issue-2511__fabric-in-progress-580.txt": _expect_fabric(SmiFabric("in_progress")),
    "k8s-test-infra-issue-642__gb300-tray-platform-info.txt": _expect_tray_platform,
}
