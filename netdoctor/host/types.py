"""Interfaces between the host layer and the inventory builder.

A `NodeSource` is either the live node or a snapshot. The builder asks it for sysfs
files, command outputs (by snapshot command NAME) and the NVML report; it never knows
which kind it has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from netdoctor.records import record
from netdoctor.vocabulary import StrEnum

if TYPE_CHECKING:
    from netdoctor.host.netdevs import NetdevFacts


NOT_IN_SNAPSHOT = "not in snapshot"     # a MISSING result's stderr when a snapshot lacks the command


class CommandState(StrEnum):
    OK = "ok"            # exited 0
    ERROR = "error"      # exited non-zero (or could not be started: permission denied)
    TIMEOUT = "timeout"  # killed at its own timeout or the run deadline
    MISSING = "missing"  # not installed
    TOO_LARGE = "too-large"  # its output is over the row's budget (netdoctor.host.budgets): not read


@record(frozen=True)
class CommandSpec:
    """One tool run. `name` is the snapshot command NAME (`perfquery-x-mlx5_0-1`)."""

    name: str
    argv: tuple[str, ...]
    timeout_s: float = 5.0
    max_output_bytes: int | None = None   # None: the runner's default cap; reaching it is too large
    recorded: bool = True                 # written to a snapshot by `netdoctor capture`
    max_lines: int | None = None          # more lines than this is too large (None: no line budget)


@record(frozen=True)
class CommandResult:
    name: str
    state: CommandState
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    duration_s: float = 0.0
    truncated: bool = False           # output was cut at the size cap
    argv: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.state is CommandState.OK

    def describe(self) -> str:
        """Why this result is not usable, for `unknown` findings: `ibstat timed out after 5.0 s`."""
        if self.state is CommandState.TIMEOUT:
            return f"{self.name} timed out after {self.duration_s:.1f} s"
        if self.state is CommandState.MISSING:
            if self.stderr == NOT_IN_SNAPSHOT:       # an older snapshot, taken before the source existed
                return f"{self.name} was not recorded in this snapshot"
            # Name the executable the operator would install, not the snapshot NAME.
            return f"{self.argv[0] if self.argv else self.name} is not installed"
        if self.state is CommandState.TOO_LARGE:
            return f"{self.name} output is too large: {self.stderr}"    # stderr holds the budget it broke
        if self.state is CommandState.ERROR:
            first = (self.stderr.strip().splitlines() or [""])[0][:200]
            code = f"exit status {self.returncode}" if self.returncode is not None else "could not start"
            return f"{self.name} failed ({code}){': ' + first if first else ''}"
        return f"{self.name} ok"


class SysTree(Protocol):
    """Read-only access to a /sys tree under a root. Paths are relative to /sys: `class/infiniband`.

    Reads never leave the root: links are resolved inside it, `..` cannot climb out.
    Missing files give None (reads) or [] (listings); only an unsafe path raises.
    """

    def read(self, path: str) -> str | None: ...

    def listdir(self, path: str) -> list[str]: ...

    def is_dir(self, path: str) -> bool: ...

    def exists(self, path: str) -> bool: ...

    def read_binary(self, path: str) -> bytes | None:
        """Raw content (PCI config space); None if absent or unreadable."""
        ...

    def link_name(self, path: str) -> str | None:
        """Last component of a symlink's target (e.g. the PCI address a `device` link points to)."""
        ...

    def pci_path(self, address: str) -> tuple[str, ...] | None:
        """PCI functions from the root port down to `address`; None where the tree is not known."""
        ...


# The /proc files a snapshot records at proc/NAME (CONTRACT 6.2): the kernel log's
# plain-dmesg times are placed with uptime; the release is a version the fleet compares.
PROC_FILES = ("uptime", "cmdline", "sys/kernel/osrelease")
MAX_PROC_BYTES = 64 * 1024


class NodeSource(Protocol):
    """A node to discover: live or a snapshot."""

    host: str
    captured_at: str                   # ISO 8601 UTC
    boot_id: str | None
    sys: SysTree
    is_snapshot: bool

    def run(self, specs: list[CommandSpec], deadline: float | None = None) -> dict[str, CommandResult]:
        """Run (live) or look up (snapshot) these commands; live runs them concurrently. A result
        over its spec's budget is `TOO_LARGE` (netdoctor.host.budgets), its output not kept.

        `deadline` is a `time.monotonic()` value no command may outlive.
        """
        ...

    def nvml(self) -> tuple[dict[str, Any] | None, str]:
        """The NVML report (nvml.json shape) or None, and a status text (`ok`, `no NVIDIA driver`, error).

        Raises `netdoctor.host.budgets.SourceTooLarge` when the report is over its budget."""
        ...

    def nccl_env(self) -> dict[str, Any] | None:
        """NCCL's settings as captured (nccl-env.json shape); None when not recorded. Raises
        `netdoctor.host.budgets.SourceTooLarge` when they are over their budget."""
        ...

    def netdevs(self) -> list[NetdevFacts]:
        """The network interfaces (netlink on a live node, sysfs in a snapshot)."""
        ...

    def proc(self, name: str) -> str | None:
        """One of PROC_FILES (`uptime`, ...) as text; None when absent or unreadable."""
        ...

    def visibility(self) -> dict[str, Any] | None:
        """What may hide GPUs from the process that read the node (snapshot.json `visibility`:
        netdoctor.host.visibility); None when not known. Optional: a source without it is read as None."""
        ...
