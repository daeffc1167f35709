"""What may hide GPUs from this process on purpose (snapshot.json `visibility`).

Inside a SLURM job step under `ConstrainDevices=yes` or in a container (Docker, a Kubernetes
pod), NVML sees only the GPUs this process may open, while the PCI bus still shows them all.
The `inventory` and `gpu-driver` checks must tell that apart from a GPU the driver lost, so a
capture records the evidence:

- `device_nodes`: for each NVIDIA GPU on the PCI bus, whether this process can open its device
  node /dev/nvidia<minor> (the minor from /proc/driver/nvidia/gpus/<bus address>/information,
  "Device Minor:", nv-procfs.c): "ok", "absent" (no node in this process's /dev: a container
  not given that GPU), "denied" (EPERM/EACCES: a device cgroup, SLURM's ConstrainDevices or a
  pod's), "unknown" (no driver entry to find the minor by, or the open failed otherwise). This
  is the only evidence the checks take for "hidden on purpose".
- a few of this process's variables (values only of the names below, cut short), whether a
  container runtime left its marker, and this process's cgroup path: shown to say *which* job
  or container hid a GPU, never a reason on their own (slurmd's prolog has SLURM_JOB_ID and a
  cgroup naming slurm, yet sees every GPU).

Nothing here is passed to a child or trusted as a path: it is only shown and compared.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from netdoctor.host.files import read_regular
from netdoctor.host.sysfs import RootedSysTree
from netdoctor.logging import get_logger

log = get_logger(__name__)

# snapshot.json `visibility` key -> the variable it records.
VARIABLES = {
    "cuda_visible_devices": "CUDA_VISIBLE_DEVICES",
    "nvidia_visible_devices": "NVIDIA_VISIBLE_DEVICES",
    "slurm_job_id": "SLURM_JOB_ID",
    "slurm_step_id": "SLURM_STEP_ID",
    "kubernetes_service_host": "KUBERNETES_SERVICE_HOST",   # set in every Kubernetes pod
}
# The GPUs SLURM gave the step (or, outside a step, the job): gres/gpu's own variables.
SLURM_GPU_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
# Files container runtimes leave in the container's root: Docker, and Podman/CRI-O.
CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv")
CGROUP_FILE = Path("/proc/self/cgroup")
MAX_VALUE_CHARS = 256
MAX_CGROUP_BYTES = 64 * 1024
KEYS = (*VARIABLES, "slurm_gpus", "container", "cgroup")
# /proc/driver/nvidia/gpus/<domain:bus:slot.function>/information (nv-procfs.c, nv_procfs_add_gpu and
# nv_procfs_read_gpu_info: `seq_printf(s, "Device Minor: \t %u\n", nvl->minor_num)`).
NVIDIA_GPUS_DIR = Path("/proc/driver/nvidia/gpus")
DEV_DIR = Path("/dev")
DEVICE_NODE_STATES = ("ok", "absent", "denied", "unknown")
MINOR_RE = re.compile(r"^Device Minor:\s*(\d{1,3})\s*$", re.MULTILINE)
ADDRESS_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
NVIDIA_VENDOR = "0x10de"
MAX_GPUS = 64
MAX_INFORMATION_BYTES = 4096


def _short(value: str | None) -> str | None:
    if value is None:
        return None
    text = "".join(character for character in value if character.isprintable())[:MAX_VALUE_CHARS]
    return text


def cgroup_path(text: str) -> str | None:
    """This process's cgroup from /proc/self/cgroup: the v1 `devices` controller's path (the
    one that hides GPUs), else the v2 unified path (`0::/...`)."""
    unified = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "devices" in parts[1].split(","):
            return _short(parts[2])
        if parts[0] == "0" and parts[1] == "":
            unified = _short(parts[2])
    return unified


def device_minor(text: str) -> int | None:
    """The "Device Minor:" of a /proc/driver/nvidia/gpus/<address>/information file; None if absent."""
    match = MINOR_RE.search(text)
    return int(match.group(1)) if match else None


def open_device_node(path: Path) -> str:
    """Whether this process may open a GPU's device node: "ok", "absent", "denied" or "unknown".

    Opened read-only and non-blocking, closed at once, no ioctl: nvidia-smi and every CUDA
    process open /dev/nvidiaN the same way first. An open creates no CUDA context and takes no
    GPU from a running job (exclusive-process mode holds contexts, not opens); only the ioctls
    that follow do work, and none is made here."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return "absent"
    except PermissionError:          # EACCES/EPERM: a device cgroup (or the node's mode)
        return "denied"
    except OSError as error:
        log.debug("GPU device node not opened", path=str(path), error=str(error))
        return "unknown"
    try:
        # Something that is not a character device (a file left in a container's /dev) says nothing.
        return "ok" if stat.S_ISCHR(os.fstat(descriptor).st_mode) else "unknown"
    finally:
        os.close(descriptor)


def _bus_gpus(sys: RootedSysTree) -> dict[str, str | None]:
    """NVIDIA display/3D functions (class 0x03xxxx) on the PCI bus -> their bound driver."""
    found: dict[str, str | None] = {}
    for address in sorted(sys.listdir("bus/pci/devices")):
        base = f"bus/pci/devices/{address}"
        if not ADDRESS_RE.match(address) or (sys.read(f"{base}/vendor") or "").strip().lower() != NVIDIA_VENDOR:
            continue
        if (sys.read(f"{base}/class") or "").strip().lower().startswith("0x03"):
            found[address] = sys.link_name(f"{base}/driver")
            if len(found) >= MAX_GPUS:
                break
    return found


def bound_gpu_count(sys: RootedSysTree) -> int:
    """NVIDIA GPUs on the PCI bus bound to the `nvidia` driver: those CUDA could open."""
    return sum(1 for driver in _bus_gpus(sys).values() if driver == "nvidia")


def collect_device_nodes(sys: RootedSysTree, gpus_dir: Path = NVIDIA_GPUS_DIR,
                         dev_dir: Path = DEV_DIR) -> dict[str, str] | None:
    """{bus address: "ok" | "absent" | "denied" | "unknown"} for each NVIDIA GPU on the PCI bus;
    None where the bus shows none (or cannot be read). Errors are states, never raised."""
    try:
        on_bus = _bus_gpus(sys)
    except (OSError, ValueError) as error:
        log.debug("PCI bus unreadable for GPU device nodes", error=str(error))
        return None
    if not on_bus:
        return None
    driver_listed = os.path.isdir(gpus_dir)
    states: dict[str, str] = {}
    for address, driver in on_bus.items():
        try:
            data = read_regular(gpus_dir / address / "information", MAX_INFORMATION_BYTES)
        except (OSError, ValueError) as error:
            log.debug("GPU driver entry unreadable", address=address, error=str(error))
            data = None
        minor = device_minor(data.decode("utf-8", "replace")) if data is not None else None
        if minor is not None:
            states[address] = open_device_node(dev_dir / f"nvidia{minor}")
        elif data is None and driver_listed and driver == "nvidia":
            # The nvidia driver is bound to it (sysfs) and made its entry when it did
            # (nv_procfs_add_gpu), yet this process's /proc has none: nvidia-container-cli
            # mounts only the given GPUs' entries (and nodes) into a container.
            states[address] = "absent"
        else:
            states[address] = "unknown"
    return states


def collect_visibility(environ: Mapping[str, str] | None = None, cgroup_file: Path = CGROUP_FILE,
                       markers: tuple[str, ...] = CONTAINER_MARKERS, sys: RootedSysTree | None = None,
                       gpus_dir: Path = NVIDIA_GPUS_DIR, dev_dir: Path = DEV_DIR) -> dict[str, Any]:
    """{"cuda_visible_devices": ..., "slurm_job_id": ..., "slurm_gpus": ..., "container": ...,
    "cgroup": ..., "device_nodes": {address: state}}: each None where this process has none
    (`device_nodes` also where no sys tree was given)."""
    environ = os.environ if environ is None else environ
    report: dict[str, Any] = {key: _short(environ.get(name)) for key, name in VARIABLES.items()}
    report["slurm_gpus"] = next((_short(environ[name]) for name in SLURM_GPU_VARIABLES if environ.get(name)), None)
    marker = next((path for path in markers if os.path.lexists(path)), None)
    report["container"] = marker or (f"container={_short(environ['container'])}" if environ.get("container") else None)
    try:
        data = read_regular(cgroup_file, MAX_CGROUP_BYTES)
    except (OSError, ValueError) as error:
        log.debug("cgroup file unreadable", path=str(cgroup_file), error=str(error))
        data = None
    report["cgroup"] = cgroup_path(data.decode("utf-8", "replace")) if data is not None else None
    report["device_nodes"] = collect_device_nodes(sys, gpus_dir, dev_dir) if sys is not None else None
    return report


def device_nodes_from_json(data: object) -> dict[str, str] | None:
    """`device_nodes` as a snapshot holds it: bus addresses with a known state, at most MAX_GPUS;
    anything else dropped (None when it is no object)."""
    if not isinstance(data, dict):
        return None
    states = {address.lower(): state for address, state in data.items()
              if isinstance(address, str) and ADDRESS_RE.match(address.lower()) and state in DEVICE_NODE_STATES}
    return dict(sorted(states.items())[:MAX_GPUS])


def visibility_from_json(data: object) -> dict[str, Any] | None:
    """snapshot.json's `visibility` as a snapshot may hold it: the known keys, strings cut
    short; None when absent or not an object (a snapshot from before it was recorded)."""
    if not isinstance(data, dict):
        return None
    report: dict[str, Any] = {key: _short(data[key]) if isinstance(data.get(key), str) else None for key in KEYS}
    report["device_nodes"] = device_nodes_from_json(data.get("device_nodes"))
    return report
