"""NCCL's settings (the `nccl-env` source: the environment and NCCL's config files)."""

from __future__ import annotations

from netdoctor.errors import ParseError
from netdoctor.host.budgets import SourceTooLarge
from netdoctor.inventory.merge import Draft
from netdoctor.inventory.model import SourceState
from netdoctor.parsers.nccl_env import nccl_settings


def read_nccl_env(draft: Draft) -> None:
    try:
        report = draft.source.nccl_env()
    except SourceTooLarge as error:
        draft.status("nccl-env", SourceState.TOO_LARGE, str(error))
        return
    if report is None:
        draft.status("nccl-env", SourceState.MISSING, "NCCL settings were not recorded (a snapshot without nccl-env.json)")
        return
    try:
        home = report.get("home")
        draft.inventory.nccl = nccl_settings(report.get("environ", {}), report.get("files", {}),
                                             home if isinstance(home, str) else None, report.get("withheld"))
    except ParseError as error:
        draft.status("nccl-env", SourceState.PARSE_ERROR, str(error))
        return
    draft.status("nccl-env", SourceState.OK)
