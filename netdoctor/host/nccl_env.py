"""NCCL's settings on this node as a job would get them: this process's NCCL/UCX/libfabric
variables and NCCL's config files (`nccl-env.json`, CONTRACT 6.2).

In a SLURM prolog that is the prolog's environment, not the job's: `srun netdoctor check
--only nccl-env` inside the job judges the job's own settings.

`NCCL_CONF_FILE` may name any file, and root reads what it names, so: as root only a file
root owns is read (a user's `~/.nccl.conf`, under sudo's HOME say, is `withheld` with why:
`srun netdoctor check --only nccl-env` as that user judges it); of what is read only NCCL's
lines are kept (the others blanked, so line numbers stay true); and a file others cannot
read is judged live but never copied into a snapshot (`withheld`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from netdoctor.host.files import read_regular_with_info
from netdoctor.host.trust import running_as_root
from netdoctor.logging import get_logger
from netdoctor.vocabulary import NCCL_ETC_CONF, nccl_env_kept

log = get_logger(__name__)

MAX_CONF_BYTES = 64 * 1024      # NCCL reads lines of up to 1 KiB; a real file is a few lines
# In-memory only: the files judged live that a snapshot must not carry (see shareable).
PRIVATE_KEY = "private"


def collect_nccl_env(environ: Mapping[str, str] | None = None, home: str | None = None) -> dict[str, Any]:
    """{"environ": {...}, "files": {path: NCCL lines}, "home": HOME, "withheld": {path: why},
    "private": [paths others cannot read]}: what NCCL would read here."""
    environ = os.environ if environ is None else environ
    home = home if home is not None else os.path.expanduser("~")
    user_file = environ.get("NCCL_CONF_FILE") or (home.rstrip("/") + "/.nccl.conf" if home else None)
    files: dict[str, str] = {}
    withheld: dict[str, str] = {}
    private: list[str] = []
    for path in (user_file, NCCL_ETC_CONF):
        if path is None:
            continue
        try:
            read = read_regular_with_info(Path(path), MAX_CONF_BYTES)
        except (OSError, ValueError) as error:
            log.debug("nccl config file unreadable", path=path, error=str(error))
            continue
        if read is None:
            continue
        data, info = read
        if running_as_root() and info.st_uid != 0:
            withheld[path] = f"not read as root: owned by uid {info.st_uid} (root reads only root's files)"
            log.warning("nccl config file not read as root", path=path, owner=info.st_uid)
            continue
        files[path] = nccl_lines(data.decode("utf-8", "replace"))
        if not info.st_mode & stat.S_IROTH:
            private.append(path)
    return {"environ": {name: value for name, value in sorted(environ.items()) if nccl_env_kept(name)},
            "files": files, "home": home, "withheld": withheld, PRIVATE_KEY: private}


def shareable(report: Mapping[str, Any]) -> dict[str, Any]:
    """The report as a snapshot may carry it: a file others cannot read is withheld, not copied."""
    private = set(report.get(PRIVATE_KEY, ()))
    withheld = dict(report.get("withheld", {}))
    for path in sorted(private):
        withheld[path] = "others cannot read it: not copied into the snapshot"
    files = {path: text for path, text in report.get("files", {}).items() if path not in private}
    return {**{key: value for key, value in report.items() if key != PRIVATE_KEY}, "files": files, "withheld": withheld}


def nccl_lines(text: str) -> str:
    """`text` with every line but NCCL's blanked: a line whose name (before `=`, spaces
    trimmed) or whose first word is a variable NCCL settings keep. Line numbers stay."""
    kept = []
    for line in text.split("\n"):
        name = line.partition("=")[0].strip()
        words = name.split()
        relevant = bool(words) and (nccl_env_kept(name) or nccl_env_kept(words[-1]) or nccl_env_kept(words[0]))
        kept.append(line if relevant and not line.startswith("#") else "")
    return "\n".join(kept)

