"""The live node as a NodeSource: /sys, the tools on PATH, NVML and netlink.

With `record=True` everything read is also written down in `recording`, for
`write_snapshot` (`netdoctor capture`).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from netdoctor.host.budgets import SourceTooLarge, check_json, enforce
from netdoctor.host.nccl_env import collect_nccl_env, shareable
from netdoctor.host.netdevs import NetdevFacts, collect_netdevs
from netdoctor.host.nvml import collect_nvml
from netdoctor.host.runner import run_commands
from netdoctor.host.recording import Recording
from netdoctor.host.sources import SOURCES_BY_NAME
from netdoctor.host.sysfs import RootedSysTree
from netdoctor.host.visibility import collect_visibility
from netdoctor.host.files import read_regular
from netdoctor.host.types import MAX_PROC_BYTES, PROC_FILES, CommandResult, CommandSpec
from netdoctor.logging import get_logger
from netdoctor.util import utc_now_iso

log = get_logger(__name__)

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
PROC_ROOT = Path("/proc")


def read_boot_id(path: Path = BOOT_ID_PATH) -> str | None:
    """This boot's id: counters reset at reboot, so history from another boot is not compared."""
    try:
        return path.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError) as error:
        log.debug("boot id unreadable", path=str(path), error=str(error))
        return None


class LiveSource:
    """This node, now. `path_env` replaces PATH for the tools (tests use fake tools)."""

    is_snapshot = False

    def __init__(self, sys_root: Path | str = "/sys", record: bool = False, tool_timeout_s: float = 5.0,
                 path_env: str | None = None) -> None:
        self.host = socket.gethostname().split(".")[0]
        self.captured_at = utc_now_iso()
        self.boot_id = read_boot_id()
        self.recording: Recording | None = Recording() if record else None
        self.sys = RootedSysTree(Path(sys_root), self.recording, strict=False)
        self.tool_timeout_s = tool_timeout_s
        self.path_env = path_env
        self._nvml: tuple[dict[str, Any] | None, str] | None = None
        self._nvml_too_large: str | None = None
        # Discovery and the early probe both ask (netdoctor.traffic.early_allreduce): one reads.
        self._nvml_lock = threading.Lock()

    def run(self, specs: list[CommandSpec], deadline: float | None = None) -> dict[str, CommandResult]:
        """Run the tools concurrently; a spec's own timeout is capped at `tool_timeout_s`.

        Each result is held to its row's budget as a snapshot's would be (too large: not
        parsed); a capture records what the tool printed, and reading it back says the same."""
        capped = [replace(spec, timeout_s=min(spec.timeout_s, self.tool_timeout_s)) for spec in specs]
        results = run_commands(capped, deadline, path=self.path_env)
        # `-vv` names what discovery waited for: the slowest tool sets a live run's time.
        log.debug("tools ran", seconds={name: round(result.duration_s, 3) for name, result in results.items()})
        if self.recording is not None:
            for spec in specs:
                if spec.recorded and spec.name in results:
                    self.recording.add_command(results[spec.name])
        return {spec.name: enforce(results[spec.name], spec) for spec in specs if spec.name in results}

    def nvml(self) -> tuple[dict[str, Any] | None, str]:
        """The NVML report, collected once per source (NVML init costs ~0.5 s on 8 GPUs)."""
        with self._nvml_lock:
            return self._nvml_once()

    def _nvml_once(self) -> tuple[dict[str, Any] | None, str]:
        if self._nvml is None:
            started = time.monotonic()
            self._nvml = collect_nvml(sys=self.sys)
            log.debug("nvml read", seconds=round(time.monotonic() - started, 3), status=self._nvml[1])
            if self.recording is not None:
                self.recording.set_nvml(*self._nvml)
            # nvml.json's budget, measured once as a capture writes it: 8 GPUs are ~50 KB, so
            # only a snapshot made by hand comes near it.
            try:
                check_json(self._nvml[0], SOURCES_BY_NAME["nvml"].max_output_bytes)
            except SourceTooLarge as error:
                self._nvml_too_large = str(error)
        if self._nvml_too_large is not None:
            raise SourceTooLarge(self._nvml_too_large)
        return self._nvml

    def nccl_env(self) -> dict[str, Any] | None:
        report = collect_nccl_env()
        if self.recording is not None:
            self.recording.nccl_env = shareable(report)
        check_json(report, SOURCES_BY_NAME["nccl-env"].max_output_bytes)    # as nccl-env.json would be
        return report

    def visibility(self) -> dict[str, Any]:
        """What may hide GPUs from this process (netdoctor.host.visibility): its GPU device nodes
        (found through this source's sys tree), its variables and cgroup."""
        report = collect_visibility(sys=self.sys)
        if self.recording is not None:
            self.recording.visibility = report
        return report

    def proc(self, name: str) -> str | None:
        if name not in PROC_FILES:
            return None
        try:
            data = read_regular(PROC_ROOT / name, MAX_PROC_BYTES)
        except (OSError, ValueError) as error:
            log.debug("proc file unreadable", name=name, error=str(error))
            return None
        if data is not None and self.recording is not None:
            self.recording.add_proc(name, data)
        return data.decode("utf-8", "replace") if data is not None else None

    def netdevs(self) -> list[NetdevFacts]:
        # Netlink describes this process's network namespace; it matches the sys tree
        # only when that is the real /sys (not a test tree standing in for it).
        started = time.monotonic()
        netdevs = collect_netdevs(self.sys, use_netlink=str(self.sys.root) == "/sys")
        log.debug("netdevs read", seconds=round(time.monotonic() - started, 3), count=len(netdevs))
        return netdevs
