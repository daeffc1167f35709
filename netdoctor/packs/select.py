"""Which rule pack is in force: an explicit name or path, else auto-selection.

Auto-selection: every bundled pack whose `[pack.match]` holds for the inventory is a
candidate and the highest `priority` wins (ties: the alphabetically first name, so the
choice is deterministic). `match_reasons` says what held, for `netdoctor rules`.
The match itself: netdoctor.packs.match.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from netdoctor.errors import RulesError
from netdoctor.logging import get_logger
from netdoctor.packs.load import (
    DEFAULT_PACK,
    RULES_PACKAGE,
    bundled_packs,
    load_pack,
    pack_table,
    read_pack,
)
from netdoctor.packs.model import RulePack

if TYPE_CHECKING:     # the inventory model only where a pack is auto-selected for one
    from netdoctor.inventory.model import Inventory

log = get_logger(__name__)


def _auto_select(inventory: Inventory | None) -> tuple[Path, str]:
    packs = bundled_packs()
    if DEFAULT_PACK not in packs:
        raise RulesError(f"the bundled default rule pack is missing from {RULES_PACKAGE}")
    if inventory is None:
        return packs[DEFAULT_PACK], "default (no inventory to match packs against)"
    from netdoctor.packs.match import match_reasons

    candidates: list[tuple[int, str, list[str]]] = []
    for name, path in packs.items():
        # Only the pack's own [pack] table selects it; its merged port classes are read (the
        # whole chain) only where the rest of the match held and it asks for the compute
        # ports' link layer.
        table = pack_table(path)
        holds, reasons = match_reasons({"pack": table}, lambda path=path: read_pack(path)[2], inventory)
        if holds:
            candidates.append((int(table.get("priority", 0)), name, reasons))
        else:
            log.debug("rule pack does not match", pack=name, reason="; ".join(reasons))
    if not candidates:
        return packs[DEFAULT_PACK], "default (no other pack matches)"
    candidates.sort(key=lambda item: (-item[0], item[1]))
    priority, name, reasons = candidates[0]
    why = "; ".join(reasons) if reasons else "matches every node"
    return packs[name], f"auto-selected {name} (priority {priority}): {why}"



def load_rules(selector: str | None, inventory: Inventory | None = None, *, site_path: Path | None = None,
               env: Mapping[str, str] | None = None) -> RulePack:
    """The rule pack in force: explicit (`selector` = bundled name or .toml path) or auto-selected.

    Site overrides are merged over it (netdoctor.packs.load.load_pack). Raises RulesError
    with the file and key on any problem.
    """
    packs = bundled_packs()
    if selector is None:
        path, reason = _auto_select(inventory)
    elif selector in packs:
        path, reason = packs[selector], f"--rules {selector}"
    elif selector.endswith(".toml") or os.sep in selector:
        path, reason = Path(selector), f"--rules {selector}"
        if not path.is_file():
            raise RulesError(f"rule pack file {path} does not exist")
    else:
        raise RulesError(f"unknown rule pack {selector!r}; bundled packs: {', '.join(packs)} (or give a .toml path)")
    return load_pack(path, reason, site_path=site_path, env=env)
