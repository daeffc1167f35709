"""The one command runner: argument lists, no shell, C locale, timeouts, no orphans.

Every tool runs in its own session (process group) so that a timeout kills the tool
and everything it spawned (`ibstat` forks per device, `mlnx_qos` runs python that runs
`tc`...). Output beyond the cap is drained and dropped (the tool keeps running to its
normal end, `truncated=True`), so a chatty `iblinkinfo` on a big fabric still reports
its exit status; a tool that floods forever ends at its timeout.

Children are tracked in a registry and killed on every exit path: normal return,
exceptions, KeyboardInterrupt in the caller, and interpreter exit (atexit).

The same machinery runs every process netdoctor starts: the node's tools
(`run_commands`), the probe engines' workers (`run_merged`: one log of stdout and
stderr, fed on stdin while it runs) and a fleet sweep's parallel shell (`spawn`, its
output streamed by the caller). One registry of process groups, one kill path
(`stop_group`: TERM the group, a grace for the leader, KILL what is left), one timeout
model (a monotonic run deadline cut further by each process's own timeout), the C
locale, stdin closed unless the caller feeds it, output capped.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

from netdoctor.host import proctree
from netdoctor.host.proctree import has_exited, wait_exited
from netdoctor.host.trust import (NEVER_INHERITED, UntrustedProgram, child_environment, library_search_path,
                                  resolve_program, tool_search_path)
from netdoctor.host.types import CommandResult, CommandSpec, CommandState
from netdoctor.logging import get_logger

log = get_logger(__name__)

DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
# How long to keep draining pipes after the tool itself exited and its group was killed:
# only a grandchild that escaped into its own session can still hold them open.
_DRAIN_GRACE_S = 0.5
_READ_CHUNK = 65536
# Between SIGTERM and SIGKILL of a group: time for a worker to let go of its GPUs cleanly.
KILL_GRACE_S = 0.3


class _ProcessGroups:
    """Process groups of running processes; killed when the caller leaves for any reason.

    Killed at once (SIGKILL, no grace): on an interrupt or at interpreter exit nobody is
    left to wait out a grace period; every other stop goes through `stop_group`.
    """

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._groups: set[int] = set()
        self._closed = False     # killed already: a group that starts afterwards dies at once
        self._starting = 0       # Popen calls whose group is not added yet

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """Around a start and its `add`: `kill` waits for it, so no group escapes in between."""
        with self._lock:
            self._starting += 1
        try:
            yield
        finally:
            with self._lock:
                self._starting -= 1
                self._lock.notify_all()

    def add(self, group: int) -> None:
        with self._lock:
            self._groups.add(group)
            closed = self._closed
        if closed:
            # A thread nobody waits for (the early probe) started it after the kill at exit.
            _kill_group(group)

    def discard(self, group: int) -> None:
        with self._lock:
            self._groups.discard(group)

    def kill(self) -> None:
        with self._lock:
            self._closed = True
            # A start in another thread (Ctrl-C between its Popen and its add) is added at once.
            self._lock.wait_for(lambda: self._starting == 0, timeout=1.0)
            targets = set(self._groups)
        for group in targets:
            _kill_group(group)

    def members(self) -> set[int]:
        with self._lock:
            return set(self._groups)


_LIVE_GROUPS = _ProcessGroups()
atexit.register(_LIVE_GROUPS.kill)


def _kill_group(group: int) -> None:
    if group in proctree.TREES:
        return proctree.stop_tree(group, 0.0)
    _signal_group(group, signal.SIGKILL)


def _signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(leader: int, grace_s: float = KILL_GRACE_S) -> None:
    """The one kill path: SIGTERM the group of `leader` (a child not yet reaped), give the
    leader `grace_s` to exit, then SIGKILL whatever is left of the group.

    A leader that already exited gets no grace: its stragglers are killed at once. A
    parallel shell's leader (`spawn(tree=True)`) is stopped with every process it started.
    """
    if leader in proctree.TREES:
        return proctree.stop_tree(leader, grace_s)
    if not has_exited(leader):
        _signal_group(leader, signal.SIGTERM)
        wait_exited(leader, grace_s)
    _kill_group(leader)


def run_end(timeout_s: float | None, deadline: float | None, started: float | None = None) -> float | None:
    """The timeout model: a process ends at its own timeout, never past the run's deadline."""
    start = time.monotonic() if started is None else started
    ends = [end for end in (None if timeout_s is None else start + timeout_s, deadline) if end is not None]
    return min(ends) if ends else None


class ProcessGroup:
    """A child leading its own session, registered from its start until it is reaped."""

    def __init__(self, process: subprocess.Popen[Any], end: float | None, grace_s: float) -> None:
        self.process = process
        self.end = end                     # monotonic; None: no limit
        self.grace_s = grace_s
        self._expired = threading.Event()

    @property
    def timed_out(self) -> bool:
        return self._expired.is_set()

    def wait(self) -> bool:
        """Wait (unreaped) for the leader to exit, stopping the group at `end`; True if it ended by itself."""
        left = None if self.end is None else max(0.0, self.end - time.monotonic())
        if not wait_exited(self.process.pid, left):
            self.expire()
        return not self.timed_out

    def expire(self) -> None:
        """Time is up: stop the whole group (TERM, grace, KILL) and see the leader gone."""
        self._expired.set()
        stop_group(self.process.pid, self.grace_s)
        wait_exited(self.process.pid, self.grace_s)      # SIGKILL is delivered asynchronously


@contextlib.contextmanager
def spawn(argv: list[str] | tuple[str, ...], *, env: Mapping[str, str], timeout_s: float | None = None,
          deadline: float | None = None, stdin: Any = subprocess.DEVNULL, stdout: Any = subprocess.PIPE,
          stderr: Any = subprocess.PIPE, text: bool = False,
          watchdog: bool = False, grace_s: float = KILL_GRACE_S, tree: bool = False) -> Iterator[ProcessGroup]:
    """Start `argv` (no shell, C locale, stdin closed unless given) leading its own process group.

    The one place a process starts: `argv[0]` is resolved on the trusted search path only
    (netdoctor.host.trust.resolve_program; FileNotFoundError, or UntrustedProgram, a
    PermissionError, when root must not run it), and `env` reaches the child without the
    loader and interpreter variables no child may inherit. While the block runs the group
    is in the registry that the atexit handler kills, so it dies with netdoctor even when
    the caller stopped waiting for the thread that owns it (a hung call it cannot
    interrupt). `watchdog=True` stops the group at its end (`timeout_s`/`deadline`) from a
    timer, for callers that block reading its output. Leaving the block stops what is left
    of the group and only then reaps the leader, so the kill can never hit a recycled pid.
    `tree=True` (a parallel shell: its children lead sessions of their own) stops every
    process the leader started with it, and the orphans it left (netdoctor.host.proctree).
    OSError from the start is the caller's to map.
    """
    environment = {name: value for name, value in env.items() if name not in NEVER_INHERITED}
    environment.update({"LC_ALL": "C", "PATH": tool_search_path(env.get("PATH"))})
    libraries = library_search_path(env.get("LD_LIBRARY_PATH"))
    if libraries:
        environment["LD_LIBRARY_PATH"] = libraries
    else:
        environment.pop("LD_LIBRARY_PATH", None)
    executable = resolve_program(argv[0], env.get("PATH"))
    options: dict[str, Any] = {"encoding": "utf-8", "errors": "replace"} if text else {}
    with _LIVE_GROUPS.starting():
        process = subprocess.Popen(list(argv), executable=executable, stdin=stdin, stdout=stdout, stderr=stderr,
                                   env=environment, start_new_session=True, close_fds=True, **options)
        _LIVE_GROUPS.add(process.pid)
    group = ProcessGroup(process, run_end(timeout_s, deadline), grace_s)
    if tree:
        proctree.track(process.pid)
    timer = None
    if watchdog and group.end is not None:
        timer = threading.Timer(max(0.0, group.end - time.monotonic()), group.expire)
        timer.daemon = True
        timer.start()
    try:
        yield group
    finally:
        if timer is not None:
            timer.cancel()
            if timer.is_alive():
                timer.join()
        stop_group(process.pid, grace_s)
        _LIVE_GROUPS.discard(process.pid)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            process.wait(timeout=5.0)                  # reaped only once its group is dead
        except subprocess.TimeoutExpired:
            log.warning("process did not end after SIGKILL", pid=process.pid, argv=list(argv)[:1])
        proctree.untrack(process.pid, _LIVE_GROUPS.members())


def command_environment(path: str | None = None) -> dict[str, str]:
    """The environment tools run in: the C locale (parsers expect English, `.` decimals),
    this PATH (its trusted directories only), LD_LIBRARY_PATH (nvidia-smi and the CUDA
    driver may live outside the default linker path; trusted directories only) and TZ;
    nothing else of netdoctor's caller."""
    caller = dict(os.environ)
    if path is not None:
        caller["PATH"] = path
    return child_environment(caller)


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


def _run_one(spec: CommandSpec, deadline: float | None, max_output_bytes: int, environment: dict[str, str],
             call: _ProcessGroups, cancelled: threading.Event) -> CommandResult:
    started = time.monotonic()
    if cancelled.is_set():
        return CommandResult(spec.name, CommandState.ERROR, stderr="not started: the run was interrupted", argv=spec.argv)
    if not spec.argv:
        return CommandResult(spec.name, CommandState.ERROR, stderr="empty argument list", argv=spec.argv)
    end = run_end(spec.timeout_s, deadline, started)
    assert end is not None
    if end <= started:
        return CommandResult(spec.name, CommandState.TIMEOUT, stderr="not started: the run deadline had passed", argv=spec.argv)
    # A spec may raise its stdout cap (a fabric dump); stderr keeps the default.
    stdout, stderr = _Capped(spec.max_output_bytes or max_output_bytes), _Capped(max_output_bytes)
    try:
        with spawn(spec.argv, env=environment, deadline=end) as group:
            call.add(group.process.pid)
            try:
                if cancelled.is_set():
                    group.expire()            # interrupted between the check above and the start
                timed_out = _pump(group.process, stdout, stderr, end)
                if timed_out:
                    group.expire()
            finally:
                call.discard(group.process.pid)
    except FileNotFoundError as error:
        return CommandResult(spec.name, CommandState.MISSING, stderr=str(error), argv=spec.argv)
    except UntrustedProgram as error:
        log.warning("tool not run as root: others can change it", command=spec.name, why=str(error))
        return CommandResult(spec.name, CommandState.ERROR, stderr=str(error), argv=spec.argv)
    except PermissionError as error:
        return CommandResult(spec.name, CommandState.ERROR, stderr=f"{spec.argv[0]}: {error.strerror or error}",
                             argv=spec.argv, duration_s=time.monotonic() - started)
    except OSError as error:
        return CommandResult(spec.name, CommandState.ERROR, stderr=f"{spec.argv[0]}: cannot start: {error.strerror or error}",
                             argv=spec.argv, duration_s=time.monotonic() - started)
    process = group.process
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
                stop_group(process.pid)
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


def run_merged(spec: CommandSpec, *, env: Mapping[str, str], deadline: float | None = None,
               while_running: Callable[[IO[bytes]], None] | None = None) -> CommandResult:
    """Run one process whose stdout and stderr go to one log, in the order written (NCCL
    writes to both); `stdout` of the result holds that log, capped at `max_output_bytes`.

    `while_running(stdin)` (optional) does the caller's own work once the process has
    started and may write to its stdin, which is closed afterwards; without it stdin is
    closed from the start. The process ends at `spec.timeout_s` or `deadline`, whichever
    comes first (TIMEOUT, the whole group stopped). A start that fails is MISSING (no
    such program) or ERROR, with the reason in `stderr`.
    """
    started = time.monotonic()
    cap = spec.max_output_bytes or DEFAULT_MAX_OUTPUT_BYTES
    with tempfile.TemporaryFile() as output:
        try:
            with spawn(spec.argv, env=env, timeout_s=spec.timeout_s, deadline=deadline,
                       stdin=subprocess.PIPE if while_running else subprocess.DEVNULL,
                       stdout=output, stderr=subprocess.STDOUT) as group:
                if while_running is not None:
                    assert group.process.stdin is not None
                    try:
                        while_running(group.process.stdin)
                    finally:
                        with contextlib.suppress(OSError):
                            group.process.stdin.close()
                exited = group.wait()
        except OSError as error:
            state = CommandState.MISSING if isinstance(error, FileNotFoundError) else CommandState.ERROR
            return CommandResult(spec.name, state, stderr=f"cannot start {spec.argv[0]}: {error}", argv=spec.argv,
                                 duration_s=time.monotonic() - started)
        size = output.seek(0, os.SEEK_END)
        output.seek(0)
        text = output.read(cap).decode("utf-8", errors="replace")
    returncode = group.process.returncode
    state = CommandState.TIMEOUT if not exited else CommandState.OK if returncode == 0 else CommandState.ERROR
    if state is CommandState.TIMEOUT:
        log.info("process timed out", command=spec.name, after_s=round(time.monotonic() - started, 2))
    return CommandResult(spec.name, state, stdout=text, returncode=None if not exited else returncode,
                         duration_s=time.monotonic() - started, truncated=size > cap, argv=spec.argv)
