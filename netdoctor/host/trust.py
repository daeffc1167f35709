"""What root may trust on disk: paths only root can change.

netdoctor runs as root in prologs and timers. Code it loads (plugins), rule packs that
decide a node's grade, and directories it runs tools from must not be changeable by
another user, or that user decides what root runs or how a node is judged.
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

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
