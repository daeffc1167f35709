"""Version lines of the RDMA and NVSwitch software stacks: `ofed_info -s` and
`nv-fabricmanager --version`.

Both print one line a fleet compares across nodes (CONTRACT 6.3 `versions`): the OFED
distribution and build a node runs, and the fabric manager, which must match the GPU
driver to the build.
"""

from __future__ import annotations

import re

from netdoctor.errors import ParseError
from netdoctor.parsers.common import is_paste_noise, numbered_lines, require_text, screen_tool_errors
from netdoctor.records import record

OFED_SOURCE = "ofed_info-s"
FABRIC_MANAGER_SOURCE = "nv-fabricmanager-version"
_MAX_CHARS = 128

# `MLNX_OFED_LINUX-23.10-1.1.9.0:` (MLNX_OFED), `OFED-internal-24.10-1.1.4.0.200:` (DOCA-Host, the
# Network Operator's container): a distribution name, a dash, a version that starts with digits.
_OFED = re.compile(r"^(?P<distribution>[A-Za-z][A-Za-z0-9_.+-]*?)-(?P<version>\d+\.\d+[A-Za-z0-9_.+-]*?):?$")
# `Fabric Manager version is : 580.159.03`; from r610 on a `Build Info - Branch: ...` line follows.
_FABRIC_MANAGER = re.compile(r"^Fabric Manager version is\s*:\s*(?P<version>\d[\w.+-]*)\s*$")


@record(frozen=True)
class OfedVersion:
    """`ofed_info -s`: distribution `MLNX_OFED_LINUX` (or `OFED-internal`, DOCA's), version `23.10-1.1.9.0`."""

    distribution: str
    version: str

    @property
    def text(self) -> str:
        """As ofed_info prints it, without the trailing colon: `MLNX_OFED_LINUX-23.10-1.1.9.0`."""
        return f"{self.distribution}-{self.version}"


def parse_ofed_info(text: str) -> OfedVersion:
    """`ofed_info -s` -> OfedVersion.

    Sample::

        MLNX_OFED_LINUX-23.10-1.1.9.0:
    """
    require_text(OFED_SOURCE, text)
    screen_tool_errors(OFED_SOURCE, text)
    for number, line in numbered_lines(text):
        stripped = line.strip()
        if is_paste_noise(line):
            continue
        match = _OFED.match(stripped[:_MAX_CHARS])
        if match is None or len(stripped) > _MAX_CHARS:
            raise ParseError(OFED_SOURCE, "expected `DISTRIBUTION-VERSION:` such as `MLNX_OFED_LINUX-23.10-1.1.9.0:`",
                             number, line)
        return OfedVersion(match.group("distribution"), match.group("version"))
    raise ParseError(OFED_SOURCE, "no version line")


def parse_fabricmanager_version(text: str) -> str:
    """`nv-fabricmanager --version` -> the version, `580.95.05`.

    Sample::

        Fabric Manager version is : 610.57.04
        Build Info - Branch: rel/gpu_drv/r610/r610_85-4, Changelist: 0
    """
    require_text(FABRIC_MANAGER_SOURCE, text)
    screen_tool_errors(FABRIC_MANAGER_SOURCE, text)
    for _, line in numbered_lines(text):
        match = _FABRIC_MANAGER.match(line.strip()[:_MAX_CHARS])
        if match is not None:
            return match.group("version")
    raise ParseError(FABRIC_MANAGER_SOURCE, "no `Fabric Manager version is : VERSION` line")
