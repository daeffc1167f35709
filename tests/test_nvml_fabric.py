"""NVML fabric info v3/v2/v1 and platform info v2/v1 through collect_nvml, into the inventory.

The structs are nvidia-ml-py's own (their field layout is what a real driver fills); the
"driver" is a fake that fills them the way nvml.h says, with the values of real GB200 / B200
trays as `nvidia-smi -q -x` prints them (tests/data/corpus/nvidia-smi-q-x: NVIDIA's
k8s-test-infra test data).
"""

from __future__ import annotations

import ctypes
import json
import types
from pathlib import Path
from typing import Any

import pynvml
import pytest

from netdoctor.host.nvml import collect_nvml
from netdoctor.host.nvml_fabric import fabric, platform
from netdoctor.inventory.from_nvml import read_nvml
from netdoctor.inventory.merge import Draft
from netdoctor.inventory.model import GpuFabric, GpuPlatform
from tests.test_host_nvml import FakeGpu, FakeNvml, NVMLError

DEVICE = Path(__file__).parent / "data" / "device" / "nvidia-h200" / "nvml-v4"
QX = Path(__file__).parent / "data" / "corpus" / "nvidia-smi-q-x"
# A GB200 tray's GPU 0 (NVIDIA-k8s-test-infra__qx-gb200.xml): clique 2, cluster UUID
# 00000001-0000-0000-0000-000000000001, health Healthy / bandwidth Full; chassis
# 1820000000001, slot 14, tray 4, host 1, Switch Connected, module 2.
GB200_UUID = bytes.fromhex("00000001000000000000000000000001")


def _fake_driver(*, knows_v3: bool = True, summary: int = 1, mask: int = 2, state: int = 3,
                 platform_error: int | None = None, knows_platform_v2: bool = True) -> types.ModuleType:
    """pynvml's structs and constants, a fake nvmlDeviceGetGpuFabricInfoV / GetPlatformInfo."""
    module = FakeNvml([FakeGpu("NVIDIA GB200", "GPU-a", "00000008:01:00.0", 2, nvlinks=[1] * 18)]).module()
    for name in ("c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3", "c_nvmlGpuFabricInfoV_t", "nvmlGpuFabricInfo_v2",
                 "c_nvmlGpuFabricInfo_t", "c_nvmlPlatformInfo_v2_t", "nvmlPlatformInfo_v2",
                 "c_nvmlPlatformInfo_v1_t", "nvmlPlatformInfo_v1"):
        setattr(module, name, getattr(pynvml, name))

    def fabric_info(handle: Any, reference: Any) -> None:
        info = reference._obj
        version = getattr(info, "version", None)        # the old call's struct has none
        if version == pynvml.nvmlGpuFabricInfo_v3 and not knows_v3:
            raise NVMLError(25)     # NVML_ERROR_ARGUMENT_VERSION_MISMATCH: a driver before v3
        info.clusterUuid = (ctypes.c_uint8 * 16)(*GB200_UUID)
        info.status, info.cliqueId, info.state, info.healthMask = 0, 2, state, mask
        if version == pynvml.nvmlGpuFabricInfo_v3:
            info.healthSummary = summary

    def platform_info(handle: Any, reference: Any) -> None:
        if platform_error is not None:
            raise NVMLError(platform_error)
        info = reference._obj
        if info.version == pynvml.nvmlPlatformInfo_v2 and not knows_platform_v2:
            raise NVMLError(25)
        serial_field = "chassisSerialNumber" if info.version == pynvml.nvmlPlatformInfo_v2 else "rackGuid"
        setattr(info, serial_field, b"1820000000001")
        slot, tray, host = (("slotNumber", "trayIndex", "hostId") if info.version == pynvml.nvmlPlatformInfo_v2
                            else ("chassisPhysicalSlotNumber", "computeSlotIndex", "nodeIndex"))
        setattr(info, slot, bytes([14]))
        setattr(info, tray, bytes([4]))
        setattr(info, host, bytes([1]))
        info.peerType, info.moduleId = bytes([1]), bytes([2])

    module.nvmlDeviceGetGpuFabricInfoV = fabric_info
    module.nvmlDeviceGetGpuFabricInfo = fabric_info
    module.nvmlDeviceGetPlatformInfo = platform_info
    return module


def _gpu(module: types.ModuleType) -> dict[str, Any]:
    report, status = collect_nvml(module, dmabuf_query=lambda address: None)
    assert status == "ok" and report is not None
    return report["gpus"][0]


def test_gb200_tray_fabric_v3_and_platform_v2_in_the_contract_shape() -> None:
    gpu = _gpu(_fake_driver())
    assert gpu["fabric"] == {"state": "completed", "status": "success", "clique_id": 2,
                             "cluster_uuid": "00000001-0000-0000-0000-000000000001",
                             "health_summary": "healthy", "bandwidth": "full"}
    # CONTRACT 8's example, which is this tray's GPU 0.
    assert gpu["platform"] == {"chassis_serial_number": "1820000000001", "slot_number": 14, "tray_index": 4,
                               "host_id": 1, "peer_type": "switch_connected", "module_id": 2}
    assert "fabric" not in gpu["errors"] and "platform" not in gpu["errors"]
    # The same facts as the tray's own `nvidia-smi -q -x` (where NVIDIA published it).
    xml = (QX / "NVIDIA-k8s-test-infra__qx-gb200.xml").read_text()
    for text in ("<cliqueId>2</cliqueId>", "<clusterUuid>00000001-0000-0000-0000-000000000001</clusterUuid>",
                 "<summary>Healthy</summary>", "<bandwidth>Full</bandwidth>",
                 "<chassis_serial_number>1820000000001</chassis_serial_number>", "<slot_number>14</slot_number>",
                 "<tray_index>4</tray_index>", "<peer_type>Switch Connected</peer_type>", "<module_id>2</module_id>"):
        assert text in xml


@pytest.mark.parametrize(("summary", "mask", "expected"), [
    (2, 1, ("unhealthy", "degraded")),          # NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE = 1
    (3, 2 | (1 << 2), ("limited_capacity", "full")),   # route recovery bits (shift 2) do not touch bandwidth
    (0, 0, ("not_supported", "not_supported")),  # B200's `nvidia-smi -q`: Bandwidth N/A
    (9, 3, (None, None)),                        # values nvml.h does not define: unknown, not invented
])
def test_health_summary_and_degraded_bandwidth_bits(summary: int, mask: int, expected: tuple[Any, Any]) -> None:
    gpu = _gpu(_fake_driver(summary=summary, mask=mask))
    assert (gpu["fabric"]["health_summary"], gpu["fabric"]["bandwidth"]) == expected


def test_a_driver_before_fabric_info_v3_is_asked_with_v2() -> None:
    gpu = _gpu(_fake_driver(knows_v3=False, mask=1))
    assert gpu["fabric"]["health_summary"] is None          # v2 has no summary
    assert gpu["fabric"]["bandwidth"] == "degraded" and gpu["fabric"]["clique_id"] == 2
    assert gpu["errors"] == {}


def test_bindings_with_only_the_old_call_give_no_health() -> None:
    module = _fake_driver()
    del module.c_nvmlGpuFabricInfo_v3_t, module.c_nvmlGpuFabricInfoV_t, module.nvmlDeviceGetGpuFabricInfoV
    gpu = _gpu(module)
    assert gpu["fabric"]["state"] == "completed" and gpu["fabric"]["cluster_uuid"].startswith("00000001-")
    assert (gpu["fabric"]["health_summary"], gpu["fabric"]["bandwidth"]) == (None, None)


def test_platform_v1_struct_and_its_absence() -> None:
    assert _gpu(_fake_driver(knows_platform_v2=False))["platform"]["tray_index"] == 4
    for code in (3, 13):        # NOT_SUPPORTED (HGX without a rack position), FUNCTION_NOT_FOUND (driver < 560)
        gpu = _gpu(_fake_driver(platform_error=code))
        assert gpu["platform"] is None and "platform" not in gpu["errors"]
    lost = _gpu(_fake_driver(platform_error=15))
    assert lost["platform"] is None and lost["errors"]["platform"] == "GPU is lost"


def test_no_chassis_serial_leaves_only_the_module_as_nvidia_smi_prints_it() -> None:
    """B200's `nvidia-smi -q -x` prints an empty chassis serial and N/A slot, tray, host and peer
    (HGX: NVSwitches on the board). A real H200 (the device tool, driver 580.159.04) answered
    NVML's platform call with slot 0, tray 0, host 1, peer 0, module 8, and its own `nvidia-smi -q`
    printed N/A for all but Module Id 8: without a chassis only the module is a fact."""
    b200 = (QX / "NVIDIA-k8s-test-infra__qx-b200.first4gpus.xml").read_text()
    assert "<chassis_serial_number></chassis_serial_number>" in b200 and "<tray_index>N/A</tray_index>" in b200
    device = (DEVICE / "nvidia-smi-q.out").read_text()
    assert "Peer Type                                      : N/A" in device and "Module Id                                      : 8" in device
    assert "hostId': '\\x01'" in (DEVICE / "nvml-raw.txt").read_text()
    for raw in ((0, 0, 1, 0, 8), (0xFF, 0, 1, 1, 6)):   # a byte past 0x7f is read raw, never decoded as text
        info = pynvml.c_nvmlPlatformInfo_v2_t()
        info.slotNumber, info.trayIndex, info.hostId, info.peerType, info.moduleId = (bytes([byte]) for byte in raw)
        errors: dict[str, str] = {}
        module = types.SimpleNamespace(NVMLError=NVMLError, c_nvmlPlatformInfo_v2_t=lambda: info,
                                       nvmlDeviceGetPlatformInfo=lambda handle, reference: None)
        assert platform(module, None, errors) == {"chassis_serial_number": None, "slot_number": None, "tray_index": None,
                                                  "host_id": None, "peer_type": None, "module_id": raw[4]}
        assert errors == {}


def test_fabric_not_supported_and_a_failing_call() -> None:
    def raising(code: int) -> types.SimpleNamespace:
        def call(handle: Any, reference: Any) -> None:
            raise NVMLError(code)
        return types.SimpleNamespace(NVMLError=NVMLError, NVML_ERROR_NOT_SUPPORTED=3,
                                     c_nvmlGpuFabricInfo_v3_t=pynvml.c_nvmlGpuFabricInfo_v3_t,
                                     nvmlGpuFabricInfo_v3=pynvml.nvmlGpuFabricInfo_v3, nvmlDeviceGetGpuFabricInfoV=call)
    errors: dict[str, str] = {}
    assert fabric(raising(3), None, errors) == {"state": "not_supported", "status": None, "clique_id": None,
                                                "cluster_uuid": None, "health_summary": None, "bandwidth": None}
    assert errors == {}
    assert fabric(raising(15), None, errors) is None and errors == {"fabric": "GPU is lost"}


def _read(report: dict[str, Any]) -> Any:
    source = types.SimpleNamespace(host="tray04", captured_at="2026-11-26T12:00:00Z", boot_id="b", sys=None,
                                   nvml=lambda: (report, "ok"))
    draft = Draft(source)
    read_nvml(draft)
    return draft.inventory


def test_inventory_reads_the_new_fabric_and_platform_facts() -> None:
    report, _ = collect_nvml(_fake_driver(), dmabuf_query=lambda address: None)
    inventory = _read(json.loads(json.dumps(report)))      # through JSON, as a snapshot holds it
    gpu = inventory.gpus[0]
    assert gpu.fabric == GpuFabric("completed", "success", 2, "00000001-0000-0000-0000-000000000001",
                                   health_summary="healthy", bandwidth="full")
    assert gpu.fabric.in_nvlink_domain
    assert gpu.platform == GpuPlatform("1820000000001", 14, 4, 1, "switch_connected", 2)


@pytest.mark.parametrize(("fabric_entry", "platform_entry", "expected_fabric", "expected_platform"), [
    ({"state": "completed", "health_summary": "HEALTHY", "bandwidth": 1},
     {"chassis_serial_number": 1820000000001, "slot_number": "14", "tray_index": 300, "host_id": True,
      "peer_type": ["switch_connected"], "module_id": -1},
     GpuFabric("completed"), GpuPlatform()),
    ({"health_summary": "limited_capacity", "bandwidth": "degraded"}, {"chassis_serial_number": "   "},
     GpuFabric(health_summary="limited_capacity", bandwidth="degraded"), GpuPlatform()),
    ({"health_summary": None}, "tray 4", GpuFabric(), None),
])
def test_hostile_values_are_unknown_not_believed(fabric_entry: dict[str, Any], platform_entry: Any,
                                                 expected_fabric: GpuFabric, expected_platform: GpuPlatform | None) -> None:
    gpu = _read({"gpus": [{"index": 0, "fabric": fabric_entry, "platform": platform_entry}]}).gpus[0]
    assert gpu.fabric == expected_fabric
    assert gpu.platform == expected_platform
