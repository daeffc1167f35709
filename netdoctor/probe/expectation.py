"""Expected all-reduce bus bandwidth of a node's GPUs, from their interconnect alone.

A pure function of GPU facts (NVLink version and active links from NVML, PCIe
generation and width, GPU count, message size). The pass/warn fractions applied to
the result live in the rule pack's `[nccl-probe]` section, not here.

Model: busbw(size) = nominal x efficiency x size / (size + HALF_SIZE), where nominal
is one GPU's unidirectional interconnect bandwidth (links x per-link, or the PCIe
link), and efficiency and HALF_SIZE are calibrated from measurements:

* 2x H200 SXM (NVLink 4.0, 18 links each through NVSwitch, NCCL 2.28.9, NVLS off,
  device kind nvidia-h200-x2, driver 580.159.04): netdoctor's probe measured
  busbw 300.6 GB/s at 256 MiB and 332.1 GB/s at 1 GiB (benchmarks/results/probe.md).
  Fitting size/(size+h) to those two points gives h = 37 MiB and an asymptote of
  344 GB/s = 0.764 x 450 GB/s (18 x 25 GB/s).
* Cross-check on public data (tests/data/corpus/nccl-tests): 8x A100-SXM4 (NVLink 3.0,
  12 links, 300 GB/s) reached 222.4 GB/s at 256 MiB and 235 GB/s at 8 GiB; the
  model expects 200 and 229. 2x A100 PCIe with an NVLink bridge reached 216.6 GB/s
  at 8 GiB (model 229).
* PCIe: with NCCL_P2P_DISABLE=1 the same 2x H200 fell back to SHM over PCIe 5.0 x16
  and reached 27.7 GB/s at 1 GiB: 0.44 of the link's 63 GB/s. That is the bounce
  through host memory, the slowest path NCCL takes; P2P through a PCIe switch does
  better, so 0.44 is a floor and graded fractions stay meaningful either way.
"""

from __future__ import annotations


from netdoctor.records import record
from netdoctor.vocabulary import NVML_NVLINK_VERSIONS

MIB = 1 << 20
HALF_SIZE_BYTES = 37 * MIB          # fitted on 2x H200, see above
NVLINK_EFFICIENCY = 0.764           # asymptotic busbw / nominal NVLink bandwidth (2x H200)
PCIE_EFFICIENCY = 0.44              # SHM over PCIe 5.0 x16 (2x H200, NCCL_P2P_DISABLE=1)

# Unidirectional GB/s per link. 1.0 (P100) 20; 2.x (V100) and 3.x (A100) 25 (A100:
# 12 links = 300 GB/s); 4.0 (H100/H200) 25 (18 links = 450 GB/s); 5.0 (B200, B300, GB200,
# GB300; NVML version 7) 50 (18 links = 900 GB/s). As NVLink 4.0's links print 26.562 GB/s
# in `nvidia-smi nvlink -s` for a nominal 25, NVLink 5.0's print 53.125 for a nominal 50
# (real B300 and GB200 outputs: tests/data/corpus/nvidia-smi-nvlink). 6.0 (NVML version 8)
# is left out until a part is measured.
NVLINK_GBPS_PER_LINK = {"1.0": 20.0, "2.0": 25.0, "2.2": 25.0, "3.0": 25.0, "3.1": 25.0, "4.0": 25.0, "5.0": 50.0}

# When NVML gives no version, the GPU name tells the generation of the common parts.
_NVLINK_BY_NAME = (("GH200", "4.0"), ("H100", "4.0"), ("H200", "4.0"), ("H800", "4.0"), ("H20", "4.0"),
                   ("GB200", "5.0"), ("B200", "5.0"), ("B300", "5.0"), ("B100", "5.0"),   # B300 also matches GB300
                   ("A100", "3.0"), ("A800", "3.0"),
                   ("V100", "2.0"), ("P100", "1.0"))

# PCIe per-lane GT/s and line-code efficiency (8b/10b up to 2.0, 128b/130b from 3.0,
# FLIT with FEC from 6.0 at about 242/256).
_PCIE_LANE = {1: (2.5, 0.8), 2: (5.0, 0.8), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130),
              6: (64.0, 242 / 256)}


@record(frozen=True)
class GpuLinks:
    """What the model needs of one GPU."""

    index: int
    name: str | None = None
    nvlink_version: str | None = None      # "4.0"; see nvlink_version_name
    nvlink_active: int | None = None
    nvlink_total: int | None = None
    nvlink_peers: int | None = None         # NVLinks to the other probed GPUs (nvidia-smi topo NV#), summed
    pcie_gen: int | None = None              # the link's maximum (idle GPUs train down)
    pcie_width: int | None = None


@record(frozen=True)
class Expectation:
    busbw_gbps: float | None                # None: no model applies (reason says why)
    interconnect: str                       # "NVLink" | "PCIe" | "unknown"
    nominal_gbps: float | None
    reasoning: str
    limiting_gpu: int | None = None


def nvlink_version_name(value: int | str | None, gpu_name: str | None = None) -> str | None:
    """"4.0" from NVML's enum (6), from a version string, or from the GPU name as a last resort."""
    if isinstance(value, int) and value in NVML_NVLINK_VERSIONS:
        return NVML_NVLINK_VERSIONS[value]
    if isinstance(value, str) and value in NVML_NVLINK_VERSIONS.values():
        return value
    for marker, version in _NVLINK_BY_NAME:
        if gpu_name and marker in gpu_name:
            return version
    return None


def pcie_gbps(generation: int | None, width: int | None) -> float | None:
    """Unidirectional payload bandwidth of a PCIe link in GB/s (before protocol overhead)."""
    if generation not in _PCIE_LANE or not width:
        return None
    rate, code = _PCIE_LANE[generation]
    return rate * code * width / 8


def size_text(size: int) -> str:
    """A message size for people: 1073741824 -> "1 GiB", 6000 -> "6000 B"."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def size_factor(message_bytes: int) -> float:
    return message_bytes / (message_bytes + HALF_SIZE_BYTES)


def expected_busbw(gpus: list[GpuLinks], message_bytes: int) -> Expectation:
    """Expected busbw of an all-reduce of `message_bytes` over `gpus`, with the reasoning.

    The slowest GPU sets the pace of a ring, so the per-GPU nominal bandwidth is the
    minimum over the GPUs. NVLink is used when every GPU has active links to the
    others; otherwise PCIe.
    """
    if len(gpus) < 2:
        return Expectation(None, "unknown", None, f"{len(gpus)} GPU(s): no all-reduce to expect")
    factor = size_factor(message_bytes)
    nvlink: list[tuple[float, GpuLinks, int, str]] = []
    for gpu in gpus:
        version = nvlink_version_name(gpu.nvlink_version, gpu.name)
        links = gpu.nvlink_active or 0
        if gpu.nvlink_peers is not None:
            # Without an NVSwitch only links that reach the other probed GPUs count.
            links = min(links, gpu.nvlink_peers)
        if links > 0 and version is not None and version not in NVLINK_GBPS_PER_LINK:
            # NVLink 6.0: the GPUs talk over NVLink at a rate this model does not know; a PCIe
            # expectation would pass any result.
            return Expectation(None, "unknown", None, f"GPU{gpu.index}: NVLink {version} has no per-link "
                               "bandwidth in this model (none measured or cited yet)")
        if links <= 0 or version is None:
            nvlink = []
            break
        nvlink.append((links * NVLINK_GBPS_PER_LINK[version], gpu, links, version))
    if nvlink:
        nominal, slowest, links, version = min(nvlink, key=lambda entry: entry[0])
        expected = nominal * NVLINK_EFFICIENCY * factor
        total = f" of {slowest.nvlink_total}" if slowest.nvlink_total and slowest.nvlink_total != links else ""
        reasoning = (f"NVLink {version}: GPU{slowest.index} has {links}{total} active link(s) x "
                     f"{NVLINK_GBPS_PER_LINK[version]:g} GB/s = {nominal:g} GB/s; x {NVLINK_EFFICIENCY} (measured "
                     f"NCCL ring efficiency) x {factor:.3f} (size factor at {message_bytes} B) = {expected:.1f} GB/s")
        return Expectation(round(expected, 1), "NVLink", nominal, reasoning, slowest.index)
    pcie: list[tuple[float, GpuLinks]] = []
    for gpu in gpus:
        bandwidth = pcie_gbps(gpu.pcie_gen, gpu.pcie_width)
        if bandwidth is None:
            return Expectation(None, "unknown", None, f"GPU{gpu.index}: neither NVLink nor PCIe link facts are known")
        pcie.append((bandwidth, gpu))
    nominal, slowest = min(pcie, key=lambda entry: entry[0])
    expected = nominal * PCIE_EFFICIENCY * factor
    reasoning = (f"PCIe {slowest.pcie_gen}.0 x{slowest.pcie_width} (GPU{slowest.index}) = {nominal:.1f} GB/s; "
                 f"x {PCIE_EFFICIENCY} (measured PCIe efficiency) x {factor:.3f} (size factor at {message_bytes} B) "
                 f"= {expected:.1f} GB/s")
    return Expectation(round(expected, 1), "PCIe", round(nominal, 1), reasoning, slowest.index)
