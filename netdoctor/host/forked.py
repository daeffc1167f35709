"""Work done ahead by a forked child of this process, its results read back as they come.

For CPU-bound work the parent would otherwise do later itself, on a second core. The child runs
`work(send)`; each `send(message)` appends one framed message to an unlinked temporary file,
which the parent reads in order, a message once it is wholly written, never waiting for one.

The child spoils nothing of its parent's: its standard streams go to /dev/null, SIGINT and
SIGTERM are its defaults again, it leaves by `os._exit` (no exit handlers, no buffer flushed
twice), and it stops at its next message once its parent is gone. A fork is made only where
it is safe and can pay: one thread in this process (a lock another thread held would stay
held in the child) and two CPUs to run on.
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
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self._pid, 0)
        os.close(self._descriptor)
        self._descriptor = -1


def fork_work(work: Callable[[Callable[[bytes], None]], None]) -> ForkedWork | None:
    """`work(send)` started in a forked child; None where no fork is made (see the module)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if not hasattr(os, "fork") or threading.active_count() > 1 or cpus < 2:
        return None
    try:
        with tempfile.TemporaryFile() as spool:
            descriptor = os.dup(spool.fileno())
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(descriptor)
        return None
    if pid:
        return ForkedWork(pid, descriptor)
    code = 1
    try:
        _become_quiet()
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


def _become_quiet() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(null, stream)
    os.close(null)
