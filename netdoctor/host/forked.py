"""Work done ahead by a forked child of this process, its results read back as they come.

For CPU-bound work the parent would otherwise do later itself, on a second core. The child runs
`work(send)`; each `send(message)` appends one framed message to an unlinked temporary file,
which the parent reads in order, a message once it is wholly written, never waiting for one.

The child spoils nothing of its parent's: its standard streams go to /dev/null, SIGINT and
SIGTERM are its defaults again, it leaves by `os._exit` (no exit handlers, no buffer flushed
twice), and it stops at its next message once its parent is gone. A fork is made only where
it is safe and can pay: one thread in this process (a lock another thread held would stay
held in the child) and two CPUs to run on (`usable_cpus`).
"""

from __future__ import annotations

import os
import signal
import struct
import tempfile
import threading
from collections.abc import Callable

_HEADER = struct.Struct("<Q")     # each message's length


class ForkedWork:
    """The parent's side: messages in the order sent, each once; `close` ends the child."""

    def __init__(self, pid: int, descriptor: int) -> None:
        self._pid, self._descriptor, self._offset = pid, descriptor, 0
        self._reaped = False

    def alive(self) -> bool:
        """Whether the child still runs (once it has ended, it is reaped here: its pid is never signalled again)."""
        if self._descriptor < 0 or self._reaped:
            return False
        try:
            ended, _ = os.waitpid(self._pid, os.WNOHANG)
        except ChildProcessError:      # reaped already: SIGCHLD ignored, as inherited from our parent
            ended = self._pid
        self._reaped = bool(ended)
        return not self._reaped

    def next_message(self) -> bytes | None:
        """The next message if it is wholly written by now; else None (asked again, the same one)."""
        if self._descriptor < 0:
            return None
        header = os.pread(self._descriptor, _HEADER.size, self._offset)
        if len(header) < _HEADER.size:
            return None
        (length,) = _HEADER.unpack(header)
        message = os.pread(self._descriptor, length, self._offset + _HEADER.size)
        if len(message) < length:
            return None
        self._offset += _HEADER.size + length
        return message

    def close(self) -> None:
        """Kill the child (it may still be working) and reap it; no message is read after."""
        if self._descriptor < 0:
            return
        try:
            if not self._reaped:
                os.kill(self._pid, signal.SIGKILL)
                os.waitpid(self._pid, 0)
        except ChildProcessError:      # reaped already: SIGCHLD ignored, as inherited from our parent
            pass
        except ProcessLookupError:
            pass
        finally:
            os.close(self._descriptor)
            self._descriptor = -1


def fork_work(work: Callable[[Callable[[bytes], None]], None]) -> ForkedWork | None:
    """`work(send)` started in a forked child; None where no fork is made (see the module)."""
    if not hasattr(os, "fork") or threading.active_count() > 1 or usable_cpus() < 2:
        return None
    try:
        with tempfile.TemporaryFile() as spool:
            descriptor = os.dup(spool.fileno())
    except OSError:
        return None
    # Ctrl-C held back across the fork: never in the child before it is quiet (it would run the
    # parent's handler and exit handlers), delivered in the parent once it can end the child.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(descriptor)
        return None
    if pid:
        forked = ForkedWork(pid, descriptor)
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        except BaseException:
            forked.close()
            raise
        return forked
    code = 1
    try:
        _become_quiet()
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        parent = os.getppid()

        def send(message: bytes) -> None:
            if os.getppid() != parent:
                os._exit(0)
            data = memoryview(_HEADER.pack(len(message)) + message)
            while data:
                data = data[os.write(descriptor, data):]

        work(send)
        code = 0
    finally:
        os._exit(code)


def usable_cpus(membership: str = "/proc/self/cgroup", cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The CPUs this process may run on (its affinity), at most its cgroups' CPU quota: v2
    `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`, of its cgroup and those above
    (`docker --cpus 1` leaves the affinity whole)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        with open(membership, encoding="ascii", errors="replace") as lines:
            groups = [line.rstrip("\n").split(":", 2) for line in lines if line.count(":") >= 2]
    except OSError:
        return cpus
    for hierarchy, controllers, path in groups:
        v2 = hierarchy == "0" and not controllers
        if not (v2 or "cpu" in controllers.split(",")):
            continue
        base = cgroup_root if v2 else os.path.join(cgroup_root, controllers)
        while path.startswith("/"):
            quota = _quota(os.path.join(base, path.lstrip("/")), v2)
            if quota is not None:
                cpus = min(cpus, max(1, int(quota)))
            if path == "/":
                break
            path = os.path.dirname(path)
    return cpus


def _quota(directory: str, v2: bool) -> float | None:
    """The CPUs a cgroup's quota allows; None where it sets none (or cannot be read)."""
    try:
        if v2:
            with open(os.path.join(directory, "cpu.max"), encoding="ascii") as limit:
                quota, _, period = limit.read().partition(" ")
        else:
            with open(os.path.join(directory, "cpu.cfs_quota_us"), encoding="ascii") as limit:
                quota = limit.read()
            with open(os.path.join(directory, "cpu.cfs_period_us"), encoding="ascii") as length:
                period = length.read()
        if quota.strip() in ("max", "-1") or int(period) <= 0:
            return None
        return int(quota) / int(period)
    except (OSError, ValueError):
        return None


_STOPS = {signal.SIGINT, signal.SIGTERM}


def _become_quiet() -> None:
    for signum in _STOPS:
        signal.signal(signum, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(null, stream)
    os.close(null)
