"""`nvidia-smi nvlink -s` parser: per GPU, each link's speed or `<inactive>`.

Real output (the device tool's 2x H200, tests/data/corpus/nvidia-smi-nvlink)::

    GPU 0: NVIDIA H200 (UUID: GPU-c1210c85-6a81-fa01-33d2-9379f937ea7c)
    	 Link 0: 26.562 GB/s
    	 Link 1: <inactive>

NVLink 5.0 links print `Link 0: 53.125 GB/s` (real B300 and GB200 outputs in the same folder),
A100's the integer form `25 GB/s`. A second source for NVLink state and speed where NVML gives
no per-link facts.
"""

from __future__ import annotations

import re

from netdoctor.errors import ParseError
from netdoctor.parsers.common import numbered_lines
from netdoctor.records import record

SOURCE = "nvidia-smi nvlink -s"
_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?\s*$")
_LINK = re.compile(r"^\s*Link (\d+): (?:(\d+(?:\.\d+)?) GB/s|<inactive>)\s*$")


@record(frozen=True)
class NvlinkStatus:
    link: int
    active: bool
    speed_gbs: float | None          # GB/s per direction as printed; None when inactive


@record(frozen=True)
class GpuNvlinks:
    index: int
    name: str
    uuid: str | None
    links: tuple[NvlinkStatus, ...]


def parse_nvidia_smi_nvlink_status(text: str) -> list[GpuNvlinks]:
    """Every GPU block; a GPU without NVLinks prints no link lines (an empty tuple).

    Where no GPU has NVLinks nvidia-smi prints nothing at all and exits 0 (a single H100
    passed through to a VM, tests/data/device/nvidia-h100-x1): no GPU blocks, not an error.
    """
    if not text.strip():
        return []
    gpus: list[GpuNvlinks] = []
    current: tuple[int, str, str | None] | None = None
    links: list[NvlinkStatus] = []
    for number, line in numbered_lines(text):
        if not line.strip():
            continue
        if (gpu := _GPU.match(line)) is not None:
            if current is not None:
                gpus.append(GpuNvlinks(*current, tuple(links)))
            current, links = (int(gpu.group(1)), gpu.group(2), gpu.group(3)), []
            continue
        link = _LINK.match(line)
        if link is None or current is None:
            raise ParseError(SOURCE, "not a `GPU N:` or `Link N:` line", number, line)
        speed = float(link.group(2)) if link.group(2) is not None else None
        links.append(NvlinkStatus(int(link.group(1)), speed is not None, speed))
    if current is None:
        raise ParseError(SOURCE, "no `GPU N:` line")
    gpus.append(GpuNvlinks(*current, tuple(links)))
    return gpus
