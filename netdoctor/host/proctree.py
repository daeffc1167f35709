"""Process lifetimes: waiting for a child without reaping it, and stopping a whole tree.

pdsh and clush run each node's command in a session of its own (`setsid`), so stopping the
shell's process group (`runner.stop_group`) leaves those running: on Ctrl-C or at the
sweep's budget every `sh -c ...` of a node still busy, and what it started, went on under
init. A leader spawned with `tree=True` is in `TREES`; `stop_tree` stops it (SIGSTOP: it
forks no more), finds every descendant by its parent pid in /proc, and stops their
process groups together with the leader's: SIGTERM, a grace for the leader, SIGKILL.

pdsh's own per-node timeout kills the node's `sh`, not what that started; those orphans go
to the nearest child subreaper. The `fleet` commands make netdoctor one
(`become_subreaper`), and when a tree's leader is done (`untrack`) the children netdoctor
gained that way are killed and reaped: those started after the leader that are not the
leader of a group the runner still runs. Library callers and test processes are not made
subreapers, so their other children are never touched.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Iterable

from netdoctor.logging import get_logger

log = get_logger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
_REAP_WAIT_S = 1.0
# Leaders stopped with every process they started -> when they started (clock ticks after boot).
TREES: dict[int, int | None] = {}
_subreaper = [False]


def has_exited(pid: int) -> bool:
    """True once the child exited, WITHOUT reaping it: its pid (= group id) stays reserved
    until we have killed the rest of its group, so killpg cannot hit a recycled pid."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def wait_exited(pid: int, timeout_s: float | None) -> bool:
    """Wait up to `timeout_s` (None: no limit) for child `pid` to exit, WITHOUT reaping it; True if it did.

    Unreaped, its pid (= its process group id) cannot be reused, so its group can still
    be killed safely afterwards.
    """
    end = None if timeout_s is None else time.monotonic() + max(timeout_s, 0.0)
    try:
        pidfd: int | None = os.pidfd_open(pid)   # readable once the child exits
    except (AttributeError, OSError):
        pidfd = None
    try:
        while not has_exited(pid):
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return False
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(0.01 if left is None else min(left, 0.01))
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def process_table() -> dict[int, tuple[int, int, int]]:
    """Every visible process: pid -> (parent pid, process group id, start time in clock
    ticks after boot), from /proc/<pid>/stat."""
    table: dict[int, tuple[int, int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None:
                table[int(name)] = fields
    return table


def _stat_fields(pid: int) -> tuple[int, int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
        # `pid (comm) state ppid pgrp session ... starttime(22nd)`: comm may hold spaces and parentheses.
        fields = text[text.rfind(b")") + 2:].split()
        return int(fields[1]), int(fields[2]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None                        # gone meanwhile


def descendants(root: int, table: dict[int, tuple[int, int, int]]) -> dict[int, int]:
    """The descendants of `root` in `table`: pid -> process group id."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, int] = {}
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found[pid] = table[pid][1]
            stack.extend(children.get(pid, ()))
    return found


def _signal_groups(groups: Iterable[int], signum: int) -> None:
    own = os.getpgrp()
    for group in groups:
        if group > 1 and group != own:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signum)


def track(leader: int) -> None:
    """`leader` (just started, leading its own group) is stopped with its whole tree."""
    fields = _stat_fields(leader)
    TREES[leader] = None if fields is None else fields[2]


def stop_tree(leader: int, grace_s: float) -> None:
    """Stop `leader` (a child not yet reaped) and every process it started, in whatever
    session: TERM all their groups, `grace_s` for the leader, KILL."""
    groups = {leader}
    if not has_exited(leader):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(leader, signal.SIGSTOP)          # no more forks while we look
        groups |= set(descendants(leader, process_table()).values())
        _signal_groups(groups, signal.SIGTERM)
        _signal_groups([leader], signal.SIGCONT)     # so that it acts on the SIGTERM
        wait_exited(leader, grace_s)
    else:
        groups |= set(descendants(leader, process_table()).values())
    _signal_groups(groups, signal.SIGKILL)


def untrack(leader: int, running: Iterable[int]) -> None:
    """`leader` is reaped: as a subreaper, end the orphans its tree left (`running`: the
    leaders of the runner's other groups, which stay)."""
    if leader not in TREES:
        return
    since = TREES.pop(leader)
    if not _subreaper[0] or since is None:
        return
    keep = set(running)
    table = process_table()
    me = os.getpid()
    orphans = {pid: group for pid, (parent, group, started) in table.items()
               if parent == me and pid not in keep and started >= since and not _ssh_master(pid)}
    if not orphans:
        return
    everything = dict(orphans)
    for pid in orphans:
        everything.update(descendants(pid, table))
    _signal_groups(set(everything.values()), signal.SIGKILL)
    for pid in orphans:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)             # one that left its group
    _reap(set(everything))
    log.info("stopped processes the parallel shell left behind", processes=len(everything))


def _ssh_master(pid: int) -> bool:
    """An ssh ControlMaster (`ControlPersist`) that the sweep's ssh started: it daemonizes by
    design and serves the user's later ssh sessions, so it is not a leftover. OpenSSH titles
    it `ssh: <control path> [mux]` (mux.c, setproctitle)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            title = handle.read(4096).split(b"\x00", 1)[0]
    except OSError:
        return False
    return title.startswith(b"ssh: ") and title.rstrip().endswith(b"[mux]")


def become_subreaper() -> bool:
    """Make this process the one that orphaned descendants are reparented to (Linux
    PR_SET_CHILD_SUBREAPER); whether it is."""
    if not _subreaper[0]:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper[0] = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            pass
    return _subreaper[0]


def _reap(pids: set[int]) -> None:
    """Reap those of `pids` that are (or become, as their parents die) this process's
    children, as they die, for up to `_REAP_WAIT_S`."""
    end = time.monotonic() + _REAP_WAIT_S
    me = os.getpid()
    while True:
        table = process_table()
        for pid in pids:
            if pid in table and table[pid][0] == me:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
        if not any(pid in table for pid in pids) or time.monotonic() >= end:
            return
        time.sleep(0.01)
