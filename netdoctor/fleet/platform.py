"""What the fleet keeps of a node's platform: the report's `fabric.product` (the DMI product name)
and `fabric.gpus_on_bus` (its GPUs on the PCI bus), for the `gpus` drift (netdoctor.fleet.drift)."""

from __future__ import annotations

import sys
from typing import Any

_MAX_PRODUCT_CHARS = 128


def bounded_platform(fabric: Any) -> tuple[str, int | None] | None:
    """(product, GPUs on the bus or None): a product string cut short and interned (ten thousand
    nodes share a few), a count only where it is a plausible one; None without a product."""
    if fabric.__class__ is not dict:
        return None
    product, on_bus = fabric.get("product"), fabric.get("gpus_on_bus")
    if product.__class__ is not str or not product.strip():
        return None
    count = on_bus if on_bus.__class__ is int and 0 <= on_bus < 1 << 16 else None
    return sys.intern(product.strip()[:_MAX_PRODUCT_CHARS]), count
