"""Rule packs: the thresholds and port classes every check judges against.

- `model`: RulePack and PortClass (what a check sees as `ctx.pack`);
- `load`: TOML, the `extends` chain, merging, validation, site overrides, bundled packs;
- `select`: which pack is in force (explicit, or auto-selected by `[pack.match]`: `match`);
- `toml_out`: a loaded pack written back as TOML (`netdoctor rules`).
"""

from typing import Any

from netdoctor.packs.load import bundled_packs, load_pack
from netdoctor.packs.model import PortClass, RulePack, role_of
from netdoctor.packs.select import load_rules
from netdoctor.packs.toml_out import pack_toml

__all__ = ["PortClass", "RulePack", "bundled_packs", "load_pack", "load_rules", "match_reasons", "pack_toml",
           "role_of"]


def __getattr__(name: str) -> Any:
    """`match_reasons`, imported on use: the match reads the inventory model, which a pack read by
    name (`fleet report`'s settings) does without."""
    if name == "match_reasons":
        from netdoctor.packs.match import match_reasons

        return match_reasons
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
