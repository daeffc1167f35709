"""What root may trust on disk and pass on to the processes it starts.

netdoctor runs as root in prologs and timers. Code it loads (plugins), rule packs that
decide a node's grade, programs it runs (tools, the probe worker, libraries the worker
loads) and directories it runs tools from must not be changeable by another user, or that
user decides what root runs or how a node is judged. Every process netdoctor starts is
resolved here (`resolve_program`, against the trusted search path only) and gets an
environment built here (`child_environment`): the caller's loader and interpreter
variables (`LD_PRELOAD`, `PYTHONPATH`, ...) never reach a child.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from netdoctor.logging import get_logger

log = get_logger(__name__)

# Where root looks for tools when nothing on its PATH can be trusted (the FHS directories).
SAFE_SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def running_as_root() -> bool:
    return os.geteuid() == 0


def unsafe_path_reason(path: Path) -> str | None:
    """Why root must not trust `path` (code, a rule pack, a tool directory), or None when only
    root can change it.

    The path itself and every parent up to `/` must be owned by root and not writable by
    group or other. A world-writable parent with the sticky bit (like /tmp) is accepted:
    there nobody but the owner of an entry can rename or replace it.
    """
    current = path.absolute()
    # A sticky world-writable parent is fine (others cannot replace our entry in it); the
    # path itself may not be writable by others, sticky or not.
    for place, allow_sticky in [(current, False), *((parent, True) for parent in current.parents)]:
        try:
            info = place.stat()
        except OSError as error:
            return f"cannot stat {place}: {error.strerror}"
        reason = _unsafe_mode(place, info, allow_sticky=allow_sticky)
        if reason:
            return reason
    return None


def _unsafe_mode(path: Path, info: os.stat_result, *, allow_sticky: bool) -> str | None:
    if info.st_uid != 0:
        return f"{path} is owned by uid {info.st_uid}, not root"
    writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and not (allow_sticky and stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX):
        who = "group and other" if writable == (stat.S_IWGRP | stat.S_IWOTH) else (
            "group" if writable & stat.S_IWGRP else "other")
        return f"{path} is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


@functools.lru_cache(maxsize=64)
def tool_search_path(path: str | None) -> str:
    """The PATH tools are run with: `path` without empty or relative elements (an empty one
    means the current directory), and, as root, only the directories only root can change
    (SAFE_SEARCH_PATH when none is left). Root-owned OFED or CUDA directories on root's
    PATH stay usable; a user's ~/bin or a shared scratch directory is never searched by root."""
    elements = [element for element in (path or "").split(os.pathsep) if os.path.isabs(element)]
    if running_as_root():
        trusted = [element for element in elements if unsafe_path_reason(Path(element)) is None]
        dropped = [element for element in elements if element not in trusted]
        if dropped:
            log.warning("PATH directories not searched as root: others can change them", dropped=dropped)
        elements = trusted or list(SAFE_SEARCH_PATH)
    return os.pathsep.join(dict.fromkeys(elements)) or os.pathsep.join(SAFE_SEARCH_PATH)


class UntrustedProgram(PermissionError):
    """A program (or a file named to replace one) that root must not run: its reason says why."""


def untrusted_reason(path: Path) -> str | None:
    """As root, why `path` must not be run, loaded or honoured as an override; None when it
    may be (and always for other users, who can only hurt themselves)."""
    return unsafe_path_reason(path) if running_as_root() else None


def resolve_program(program: str, path: str | None) -> str:
    """The file `program` runs: found on the trusted search path (`tool_search_path(path)`)
    only, or, where it names a file, that file. As root, the file itself and its
    directories must be root's alone. FileNotFoundError when there is none;
    UntrustedProgram (a PermissionError) when root must not run it."""
    if "/" in program:
        candidate = Path(program)
        if not candidate.is_absolute() and running_as_root():
            raise UntrustedProgram(f"{program}: a relative program path is not run as root")
        if not candidate.exists():
            raise FileNotFoundError(f"{program}: no such file")
        found = str(candidate)
    else:
        import shutil   # only where a tool is looked for: ~5 ms of imports (its archive modules) otherwise

        located = shutil.which(program, path=tool_search_path(path))
        if located is None:
            raise FileNotFoundError(f"{program}: not found in PATH")
        found = located
    # The name found and the file it finally leads to (a link in a trusted directory may
    # point anywhere) must both be root's alone.
    reason = untrusted_reason(Path(found)) or untrusted_reason(Path(found).resolve())
    if reason:
        raise UntrustedProgram(f"{found} is not run as root: {reason}")
    return found


def trusted_override(variable: str, value: str | None) -> Path | None:
    """The file an override variable (`NETDOCTOR_PROBE_WORKER`, `NETDOCTOR_NCCL_LIBRARY`, a
    test hook) names, when it may be honoured: as root only a file root alone can change.
    An untrusted one is ignored with a warning (the built-in default stands)."""
    if not value:
        return None
    path = Path(value)
    reason = "not an absolute path" if not path.is_absolute() and running_as_root() else untrusted_reason(path)
    if reason:
        log.warning("override ignored as root: others can change what it names", variable=variable, value=value,
                    reason=reason)
        return None
    return path


# Hidden, for tests and benchmarks only: judge a copied /sys tree (a fixture's sys/) as if
# it were this node's, with whatever tools are on PATH. Not for operators: a live run
# against a foreign tree mixes that tree with this node's NVML and hostname.
SYSFS_ROOT_ENV = "NETDOCTOR_SYSFS_ROOT"


def live_sys_root(env: Mapping[str, str] | None = None) -> str:
    """/sys, or the tree $NETDOCTOR_SYSFS_ROOT names (tests and benchmarks only; as root only a
    tree root alone can change, or another user would decide the node's verdict)."""
    environment = os.environ if env is None else env
    override = trusted_override(SYSFS_ROOT_ENV, environment.get(SYSFS_ROOT_ENV))
    return str(override) if override else "/sys"


# Loader, interpreter and shell start-up variables: each makes a child run code it names.
# Never passed on, whatever a caller's allowlist says.
NEVER_INHERITED = frozenset({
    "LD_PRELOAD", "LD_AUDIT", "LD_DEBUG_OUTPUT", "LD_PROFILE", "LD_ORIGIN_PATH", "GCONV_PATH", "HOSTALIASES",
    "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONINSPECT", "PYTHONBREAKPOINT",
    "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS",
    "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYLIB", "RUBYOPT", "NODE_OPTIONS",
})
# What every child gets from the caller besides PATH, the C locale and LD_LIBRARY_PATH:
# the time zone (dmesg prints local time with its offset) and netdoctor's own variables
# (test hooks such as a fake tool's delay; no tool reads them otherwise).
TOOL_VARIABLES = ("TZ",)
TOOL_PREFIXES = ("NETDOCTOR_",)


@functools.lru_cache(maxsize=64)
def library_search_path(value: str | None) -> str | None:
    """LD_LIBRARY_PATH for children: absolute directories only, and as root only those root
    alone can change (a CUDA or OFED directory outside the linker's default stays usable).
    Cached like tool_search_path: every spawn applies it, and it warns once per value."""
    elements = [element for element in (value or "").split(os.pathsep) if os.path.isabs(element)]
    if running_as_root():
        dropped = [element for element in elements if unsafe_path_reason(Path(element)) is not None]
        if dropped:
            log.warning("LD_LIBRARY_PATH directories not passed on as root: others can change them", dropped=dropped)
        elements = [element for element in elements if element not in dropped]
    return os.pathsep.join(dict.fromkeys(elements)) or None


def child_environment(caller: Mapping[str, str], *, names: Iterable[str] = (),
                      prefixes: tuple[str, ...] = ()) -> dict[str, str]:
    """A child's whole environment, explicit: the trusted PATH, the C locale, a filtered
    LD_LIBRARY_PATH, TZ, and only the caller's variables the child's kind needs (`names`,
    and those starting with one of `prefixes`), never one of NEVER_INHERITED."""
    wanted = set(names) | set(TOOL_VARIABLES)
    environment = {name: value for name, value in caller.items()
                   if (name in wanted or name.startswith(prefixes + TOOL_PREFIXES)) and name not in NEVER_INHERITED
                   and name not in ("PATH", "LD_LIBRARY_PATH")}
    environment.update({"PATH": tool_search_path(caller.get("PATH")), "LC_ALL": "C", "LANG": "C"})
    libraries = library_search_path(caller.get("LD_LIBRARY_PATH"))
    if libraries:
        environment["LD_LIBRARY_PATH"] = libraries
    return environment
