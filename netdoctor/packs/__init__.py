"""Rule packs: the thresholds and port classes every check judges against.

- `model`: RulePack and PortClass (what a check sees as `ctx.pack`);
- `load`: TOML, the `extends` chain, merging, validation, site overrides, bundled packs;
- `select`: which pack is in force (explicit, or auto-selected by `[pack.match]`: `match`);
- `toml_out`: a loaded pack written back as TOML (`netdoctor rules`).
"""

from netdoctor.packs.load import bundled_packs, load_pack
from netdoctor.packs.model import PortClass, RulePack, role_of
from netdoctor.packs.select import load_rules
from netdoctor.packs.toml_out import pack_toml

__all__ = ["PortClass", "RulePack", "bundled_packs", "load_pack", "load_rules", "pack_toml", "role_of"]
