"""Dump what NVML reports per GPU as JSON (run on the GPU machine; the capture is committed beside it)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pynvml


def guarded(function: Any, *args: Any) -> Any:
    try:
        value = function(*args)
    except pynvml.NVMLError as error:
        return f"error: {error}"
    return value.decode() if isinstance(value, bytes) else value


def main() -> None:
    pynvml.nvmlInit()
    report: dict[str, Any] = {"driver_version": guarded(pynvml.nvmlSystemGetDriverVersion),
                              "cuda_driver_version": guarded(pynvml.nvmlSystemGetCudaDriverVersion),
                              "nvml_version": guarded(pynvml.nvmlSystemGetNVMLVersion), "gpus": []}
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pci = pynvml.nvmlDeviceGetPciInfo(handle)
        links = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            state = guarded(pynvml.nvmlDeviceGetNvLinkState, handle, link)
            if isinstance(state, str):
                break
            links.append({"link": link, "state": state, "version": guarded(pynvml.nvmlDeviceGetNvLinkVersion, handle, link),
                          "remote_pci": guarded(lambda h, l: pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, l).busId, handle, link)})
        report["gpus"].append({
            "index": index, "name": guarded(pynvml.nvmlDeviceGetName, handle), "uuid": guarded(pynvml.nvmlDeviceGetUUID, handle),
            "pci_bus_id": pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId,
            "numa_node": guarded(getattr(pynvml, "nvmlDeviceGetNumaNodeId", lambda h: "n/a"), handle),
            "pcie": {"cur_gen": guarded(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
                     "max_gen": guarded(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
                     "cur_width": guarded(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
                     "max_width": guarded(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
                     "gpu_max_gen": guarded(getattr(pynvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", lambda h: "n/a"), handle)},
            "pstate": guarded(pynvml.nvmlDeviceGetPerformanceState, handle),
            "persistence_mode": guarded(pynvml.nvmlDeviceGetPersistenceMode, handle),
            "nvlink": {"active": sum(1 for link in links if link["state"] == 1), "total": len(links), "links": links},
            "p2p_nvlink": {str(other): guarded(pynvml.nvmlDeviceGetP2PStatus, handle,
                                               pynvml.nvmlDeviceGetHandleByIndex(other), pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
                           for other in range(pynvml.nvmlDeviceGetCount()) if other != index},
        })
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
