"""The one command runner: argument lists, no shell, C locale, timeouts, no orphans.

Every tool runs in its own session (process group) so that a timeout kills the tool
and everything it spawned (`ibstat` forks per device, `mlnx_qos` runs python that runs
`tc`...). Output beyond the cap is drained and dropped (the tool keeps running to its
normal end, `truncated=True`), so a chatty `iblinkinfo` on a big fabric still reports
its exit status; a tool that floods forever ends at its timeout.

Children are tracked in a registry and killed on every exit path: normal return,
exceptions, KeyboardInterrupt in the caller, and interpreter exit (atexit).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import structlog

from netdoctor.host.types import CommandResult, CommandSpec, CommandState

log = structlog.get_logger(__name__)

DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
# How long to keep draining pipes after the tool itself exited and its group was killed:
# only a grandchild that escaped into its own session can still hold them open.
_DRAIN_GRACE_S = 0.5
_READ_CHUNK = 65536


class _ProcessGroups:
    """Process groups of running tools; killed when the caller leaves for any reason."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()

    def add(self, group: int) -> None:
        with self._lock:
            self._groups.add(group)

    def discard(self, group: int) -> None:
        with self._lock:
            self._groups.discard(group)

    def kill(self) -> None:
        with self._lock:
            targets = set(self._groups)
        for group in targets:
            _kill_group(group)


_LIVE_GROUPS = _ProcessGroups()
atexit.register(_LIVE_GROUPS.kill)


def _kill_group(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@contextlib.contextmanager
def tracked_process_group(group: int) -> Iterator[None]:
    """Guard a child's process group started outside `run_commands` (start_new_session=True).

    While the block runs, `group` is in the registry that the atexit handler kills, so the
    group dies with netdoctor even when the caller stopped waiting for the thread that owns
    it (a hung call it cannot interrupt). Leaving the block SIGKILLs what is left of the
    group and forgets it. Leave the block before reaping the group's leader: until then its
    pid (the group id) cannot be reused, so the kill cannot hit an unrelated process.
    """
    _LIVE_GROUPS.add(group)
    try:
        yield
    finally:
        _kill_group(group)
        _LIVE_GROUPS.discard(group)


def command_environment(path: str | None = None) -> dict[str, str]:
    """The environment tools run in: C locale (parsers expect English, `.` decimals), same PATH."""
    environment = {
        "PATH": path if path is not None else os.environ.get("PATH", os.defpath),
        "LC_ALL": "C",
        "LANG": "C",
    }
    # nvidia-smi and the CUDA driver may live outside the default linker path.
    if "LD_LIBRARY_PATH" in os.environ:
        environment["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return environment


class _Capped:
    """Collects up to `limit` bytes, counts what was dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.limit - self.size
        if room > 0:
            kept = chunk[:room]
            self.parts.append(kept)
            self.size += len(kept)
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        return b"".join(self.parts).decode("utf-8", errors="replace")


def has_exited(pid: int) -> bool:
    """True once the child exited, WITHOUT reaping it: its pid (= group id) stays reserved
    until we have killed the rest of its group, so killpg cannot hit a recycled pid."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _run_one(spec: CommandSpec, deadline: float | None, max_output_bytes: int, environment: dict[str, str],
             call: _ProcessGroups, cancelled: threading.Event) -> CommandResult:
    started = time.monotonic()
    if cancelled.is_set():
        return CommandResult(spec.name, CommandState.ERROR, stderr="not started: the run was interrupted", argv=spec.argv)
    if not spec.argv:
        return CommandResult(spec.name, CommandState.ERROR, stderr="empty argument list", argv=spec.argv)
    executable = shutil.which(spec.argv[0], path=environment["PATH"])
    if executable is None:
        if "/" in spec.argv[0] and os.path.exists(spec.argv[0]):
            return CommandResult(spec.name, CommandState.ERROR, stderr=f"{spec.argv[0]}: permission denied", argv=spec.argv)
        return CommandResult(spec.name, CommandState.MISSING, stderr=f"{spec.argv[0]}: not found in PATH", argv=spec.argv)
    end = started + spec.timeout_s
    if deadline is not None:
        end = min(end, deadline)
    if end <= started:
        return CommandResult(spec.name, CommandState.TIMEOUT, stderr="not started: the run deadline had passed", argv=spec.argv)
    try:
        process = subprocess.Popen(
            list(spec.argv),
            executable=executable,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            start_new_session=True,
            close_fds=True,
        )
    except PermissionError as error:
        return CommandResult(spec.name, CommandState.ERROR, stderr=f"{spec.argv[0]}: {error.strerror}", argv=spec.argv,
                             duration_s=time.monotonic() - started)
    except OSError as error:
        return CommandResult(spec.name, CommandState.ERROR, stderr=f"{spec.argv[0]}: cannot start: {error.strerror or error}",
                             argv=spec.argv, duration_s=time.monotonic() - started)
    group = process.pid
    _LIVE_GROUPS.add(group)
    call.add(group)
    if cancelled.is_set():
        _kill_group(group)            # interrupted between the check above and the start
    # A spec may raise its stdout cap (a fabric dump); stderr keeps the default.
    stdout, stderr = _Capped(spec.max_output_bytes or max_output_bytes), _Capped(max_output_bytes)
    timed_out = False
    try:
        timed_out = _pump(process, stdout, stderr, end)
        _kill_group(group)            # the tool is done (or timed out): nothing of it may outlive it
        process.wait()
    finally:
        _kill_group(group)
        _LIVE_GROUPS.discard(group)
        call.discard(group)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        if process.returncode is None:
            process.wait()
    duration = time.monotonic() - started
    truncated = bool(stdout.dropped or stderr.dropped)
    if truncated:
        log.warning("tool output cut at the size cap", command=spec.name, cap_bytes=max_output_bytes,
                    dropped_bytes=stdout.dropped + stderr.dropped)
    if timed_out:
        state, returncode = CommandState.TIMEOUT, None
        log.info("tool timed out", command=spec.name, after_s=round(duration, 2))
    else:
        returncode = process.returncode
        state = CommandState.OK if returncode == 0 else CommandState.ERROR
    return CommandResult(spec.name, state, stdout=stdout.text(), stderr=stderr.text(), returncode=returncode,
                         duration_s=duration, truncated=truncated, argv=spec.argv)


def _pump(process: subprocess.Popen[bytes], stdout: _Capped, stderr: _Capped, end: float) -> bool:
    """Drain both pipes until the tool exits and they close, or `end`. True if time ran out."""
    assert process.stdout is not None and process.stderr is not None
    selector = selectors.DefaultSelector()
    pidfd: int | None = None
    try:
        for stream, sink in ((process.stdout, stdout), (process.stderr, stderr)):
            os.set_blocking(stream.fileno(), False)
            selector.register(stream.fileno(), selectors.EVENT_READ, sink)
        try:
            # A pidfd becomes readable when the child exits, so exit wakes the loop at once.
            pidfd = os.pidfd_open(process.pid)
            selector.register(pidfd, selectors.EVENT_READ, None)
        except (AttributeError, OSError):
            pidfd = None
        open_pipes = 2
        exited_at: float | None = None
        while True:
            now = time.monotonic()
            if exited_at is None and has_exited(process.pid):
                exited_at = now
                # Stragglers of the tool's group may hold the pipes; they go with the tool.
                _kill_group(process.pid)
                if pidfd is not None:
                    selector.unregister(pidfd)
            if open_pipes == 0 and exited_at is not None:
                return False
            if exited_at is not None and now >= exited_at + _DRAIN_GRACE_S:
                return False
            if exited_at is None and now >= end:
                return True
            limit = end if exited_at is None else min(end, exited_at + _DRAIN_GRACE_S)
            wait = max(0.0, limit - now)
            if pidfd is None or open_pipes == 0:
                wait = min(wait, 0.02)
            for key, _ in selector.select(wait):
                if key.data is None:
                    continue              # pidfd: handled at the top of the loop
                try:
                    chunk = os.read(key.fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                if chunk:
                    key.data.add(chunk)
                else:
                    selector.unregister(key.fd)
                    open_pipes -= 1
    finally:
        selector.close()
        if pidfd is not None:
            os.close(pidfd)


def run_commands(
    specs: list[CommandSpec],
    deadline: float | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    max_workers: int = 16,
    path: str | None = None,
) -> dict[str, CommandResult]:
    """Run every spec concurrently; results by spec name.

    Each tool gets its own `timeout_s` but never runs past `deadline` (a
    `time.monotonic()` value). `path` replaces PATH for finding and running tools.
    Never raises for a tool's failure: see CommandState for what each outcome becomes.
    """
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"duplicate command names: {', '.join(duplicates)}")
    if not specs:
        return {}
    environment = command_environment(path)
    call = _ProcessGroups()
    cancelled = threading.Event()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(specs))),
                                                     thread_name_prefix="netdoctor-tool")
    results: dict[str, CommandResult] = {}
    try:
        futures = {executor.submit(_run_one, spec, deadline, max_output_bytes, environment, call, cancelled): spec for spec in specs}
        for future in concurrent.futures.as_completed(futures):
            spec = futures[future]
            try:
                results[spec.name] = future.result()
            except Exception as error:  # a runner bug must not lose the other tools' results
                log.error("runner failed on a tool", command=spec.name, error=repr(error))
                results[spec.name] = CommandResult(spec.name, CommandState.ERROR, stderr=f"internal runner error: {error!r}",
                                                   argv=spec.argv)
    finally:
        # On KeyboardInterrupt (or any exception) kill what this call started; the workers
        # then see their pipes close and finish.
        cancelled.set()
        call.kill()
        executor.shutdown(wait=True, cancel_futures=True)
    return {spec.name: results[spec.name] for spec in specs if spec.name in results}
