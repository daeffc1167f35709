"""`lspci -vvv -D` -> per function: port type, ACS control, ATS enable, IOMMU group.

A second source for what the sysfs config space gives (CONTRACT 6.2 `lspci-vvv`): lspci
decodes the capabilities only as root; as a user it prints `Capabilities: <access denied>`,
and the facts stay unknown. Blocks start at an unindented `ADDR description` line (without
`-D` the domain is missing: 0000 is assumed); the lines read:

    Capabilities: [40] Express (v2) Downstream Port (Slot+), MSI 00
    Capabilities: [f24 v1] Access Control Services
        ACSCap: SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
        ACSCtl: SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-
    Capabilities: [480 v1] Address Translation Service (ATS)
        ATSCap: Invalidate Queue Depth: 00
        ATSCtl: Enable+, Smallest Translation Unit: 00
    IOMMU group: 24
"""

from __future__ import annotations

import re

from netdoctor.errors import ParseError
from netdoctor.parsers.pci_config import ACS_FLAG_NAMES, AcsControl
from netdoctor.records import record
from netdoctor.util import canonical_pci_address

_HEADER = re.compile(r"^(?P<address>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<description>.*)$")
_EXPRESS = re.compile(r"Express \(v\d\) (?P<type>Root Port|Downstream Port|Upstream Port|Legacy Endpoint|Endpoint|"
                      r"Root Complex Integrated Endpoint|Root Complex Event Collector|PCI-Express to PCI/PCI-X Bridge|"
                      r"PCI/PCI-X to PCI-Express Bridge)")
_FLAG = re.compile(r"(?P<name>[A-Za-z]+)(?P<state>[+-])")
_PORT_TYPES = {
    "Root Port": "root_port",
    "Downstream Port": "downstream_port",
    "Upstream Port": "upstream_port",
    "Endpoint": "endpoint",
    "Legacy Endpoint": "legacy_endpoint",
    "Root Complex Integrated Endpoint": "rc_integrated_endpoint",
    "Root Complex Event Collector": "rc_event_collector",
    "PCI-Express to PCI/PCI-X Bridge": "pcie_to_pci_bridge",
    "PCI/PCI-X to PCI-Express Bridge": "pci_to_pcie_bridge",
}


@record(frozen=True)
class LspciFunction:
    address: str                   # canonical `0000:17:00.0`
    description: str               # `PCI bridge: PLX Technology, Inc. PEX 8747 ...`
    port_type: str | None = None   # as pci_config.PORT_TYPES
    acs: AcsControl | None = None
    ats_enabled: bool | None = None
    iommu_group: str | None = None
    capabilities_read: bool = False   # lspci decoded the capabilities (root)


def parse_lspci_vvv(text: str) -> dict[str, LspciFunction]:
    """Functions by canonical address; ParseError when no function header is found."""
    functions: dict[str, LspciFunction] = {}
    current: dict[str, object] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        header = _HEADER.match(line) if not line[0].isspace() else None
        if header is not None:
            if current is not None:
                _store(functions, current)
            current = {"address": canonical_pci_address(header["address"]), "description": header["description"].strip()}
            continue
        if current is None:
            continue
        body = line.strip()
        if body.startswith("Capabilities:"):
            if "<access denied>" not in body:
                current["capabilities_read"] = True
            express = _EXPRESS.search(body)
            if express is not None and "port_type" not in current:
                current["port_type"] = _PORT_TYPES[express["type"]]
        elif body.startswith("ACSCtl:"):
            flags = {match["name"]: match["state"] == "+" for match in _FLAG.finditer(body.removeprefix("ACSCtl:"))}
            if any(name in flags for name in ACS_FLAG_NAMES):
                current["acs"] = AcsControl.from_flags(flags)
        elif body.startswith("ATSCtl:"):
            enable = re.search(r"Enable([+-])", body)
            if enable is not None:
                current["ats_enabled"] = enable.group(1) == "+"
        elif body.startswith("IOMMU group:"):
            group = body.removeprefix("IOMMU group:").strip()
            if group.isdigit():
                current["iommu_group"] = group
    if current is not None:
        _store(functions, current)
    if not functions:
        raise ParseError("lspci-vvv", "no PCI function header (`0000:17:00.0 PCI bridge: ...`) found")
    return functions


def _store(functions: dict[str, LspciFunction], fields: dict[str, object]) -> None:
    function = LspciFunction(**fields)  # type: ignore[arg-type]
    functions[function.address] = function
