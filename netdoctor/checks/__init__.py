"""The check API: what a plugin imports.

A check is a plain function with metadata::

    from netdoctor.checks import check, CheckContext, Finding

    @check("port-state", "each RDMA port is ACTIVE and LinkUp", needs=("rdma",))
    def port_state(ctx: CheckContext):
        for port in ctx.inventory.ports:
            yield ctx.passed(port.name)

It yields findings; it never runs a command or reads a file.
"""

from netdoctor.checks.api import Check, CheckContext, check
from netdoctor.report.model import Finding, Status

__all__ = ["Check", "CheckContext", "Finding", "Status", "check"]
