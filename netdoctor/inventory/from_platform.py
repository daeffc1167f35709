"""The platform as the firmware names it (DMI) and what may hide GPUs from this process.

`/sys/class/dmi/id/{sys_vendor,product_name,board_name,board_vendor}` (CONTRACT 7.2): any
user may read these four. Firmware fills unset fields with placeholders ("To Be Filled By
O.E.M.", "Default string"): those, and text that is no name at all, are read as unknown.
"""

from __future__ import annotations

import re
from typing import Any

from netdoctor.inventory.merge import Draft
from netdoctor.inventory.model import Dmi, ProcessVisibility

# snapshot.json `visibility.device_nodes` states (netdoctor.host.visibility).
DEVICE_NODE_STATES = frozenset({"ok", "absent", "denied", "unknown"})
DMI_FIELDS = ("sys_vendor", "product_name", "board_name", "board_vendor")
MAX_DMI_CHARS = 96
# Lower-case placeholders firmware leaves in fields nobody set (SMBIOS defaults of AMI/Insyde).
DMI_PLACEHOLDERS = frozenset({
    "to be filled by o.e.m.", "to be filled by oem", "default string", "system product name", "system manufacturer",
    "not specified", "not applicable", "none", "n/a", "na", "unknown", "oem", "o.e.m.", "0123456789", "123456789",
    "invalid", "empty", "type1productconfigid", "base board product name",
})


def dmi_text(raw: str | None) -> str | None:
    """A DMI field as a name: printable, spaces collapsed, placeholders and garbage as None."""
    if raw is None:
        return None
    text = " ".join("".join(character if character.isprintable() else " " for character in raw).split())
    if not text or len(text) > MAX_DMI_CHARS or text.lower() in DMI_PLACEHOLDERS:
        return None
    # A name has a letter or digit; a field of punctuation or one repeated character is filler.
    if not re.search(r"[A-Za-z0-9]", text) or len(set(text.replace(" ", ""))) == 1:
        return None
    return text


def read_dmi(draft: Draft) -> None:
    """Inventory.dmi: None where the node has no DMI table (no /sys/class/dmi/id: ARM without
    SMBIOS, a snapshot from before it was recorded)."""
    if not draft.sys.is_dir("class/dmi/id"):
        return
    values = {name: dmi_text(draft.sys.read(f"class/dmi/id/{name}")) for name in DMI_FIELDS}
    draft.inventory.dmi = Dmi(**values)


def read_visibility(draft: Draft) -> None:
    """Inventory.visibility from the node source (a live process's own view, or what the
    capturing process recorded); None where the source has no such record."""
    reader = getattr(draft.source, "visibility", None)
    report = reader() if callable(reader) else None
    if not isinstance(report, dict):
        return
    fields: dict[str, Any] = {key: value if isinstance(value, str) and value else None for key, value in report.items()
                              if key in ProcessVisibility.__dataclass_fields__ and key != "device_nodes"}
    nodes = report.get("device_nodes")
    if isinstance(nodes, dict):
        fields["device_nodes"] = {address: state for address, state in nodes.items()
                                  if isinstance(address, str) and state in DEVICE_NODE_STATES}
    draft.inventory.visibility = ProcessVisibility(**fields)
