"""NCCL's settings on this node as a job would get them: this process's NCCL/UCX/libfabric
variables and NCCL's config files (`nccl-env.json`, CONTRACT 6.2).

In a SLURM prolog that is the prolog's environment, not the job's: `srun netdoctor check
--only nccl-env` inside the job judges the job's own settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from netdoctor.host.files import read_regular
from netdoctor.vocabulary import NCCL_ETC_CONF, nccl_env_kept

log = structlog.get_logger(__name__)

MAX_CONF_BYTES = 64 * 1024      # NCCL reads lines of up to 1 KiB; a real file is a few lines


def collect_nccl_env(environ: Mapping[str, str] | None = None, home: str | None = None) -> dict[str, Any]:
    """{"environ": {...}, "files": {path: text}, "home": HOME}: what NCCL would read here."""
    environ = os.environ if environ is None else environ
    home = home if home is not None else os.path.expanduser("~")
    user_file = environ.get("NCCL_CONF_FILE") or (home.rstrip("/") + "/.nccl.conf" if home else None)
    files: dict[str, str] = {}
    for path in (user_file, NCCL_ETC_CONF):
        if path is None:
            continue
        try:
            data = read_regular(Path(path), MAX_CONF_BYTES)
        except (OSError, ValueError) as error:
            log.debug("nccl config file unreadable", path=path, error=str(error))
            continue
        if data is not None:
            files[path] = data.decode("utf-8", "replace")
    return {"environ": {name: value for name, value in sorted(environ.items()) if nccl_env_kept(name)},
            "files": files, "home": home}
