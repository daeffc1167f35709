"""How remedies name their subjects (shared by the checks; defines no check).

A remedy is pasted into a shell on the node: every command in it names the real RDMA device,
port, netdev, PCI address or GPU index of the finding, never a placeholder (`<dev>`, `DEV`,
`-i N`) or a glob (`ens[1-8]np0`, `mlx5_*`). Where the name is not known the remedy says so in
words and how to find it. A remedy that covers several subjects gives one command per subject,
the first few written out and the rest named.
"""

from __future__ import annotations

from collections.abc import Sequence

from netdoctor.inventory.model import Inventory, Port
from netdoctor.inventory.queries import path_from_root

# Commands written out in one remedy before the rest are only named (a display bound, not a threshold).
SPELLED_OUT = 3


def netdev_of(inventory: Inventory, port: Port) -> str | None:
    """The netdev of an RDMA port (ibdev2netdev / sysfs, else a netdev that names the port)."""
    if port.netdev:
        return port.netdev
    return next((netdev.name for netdev in inventory.netdevs if netdev.rdma_port == port.name), None)


def unknown_netdev(port_name: str) -> str:
    """The words for a port whose netdev is not known, with the command that finds it."""
    return f"the netdev of {port_name} is not known: find it with `ibdev2netdev`"


def commands(template: str, names: Sequence[str]) -> str:
    """`template` (one `{}`) for each of `names`, comma-separated: the first SPELLED_OUT written out,
    the others named after them (`... (likewise for mlx5_7, mlx5_8)`)."""
    unique = list(dict.fromkeys(names))
    shown = ", ".join(template.format(name) for name in unique[:SPELLED_OUT])
    rest = unique[SPELLED_OUT:]
    return shown + (f" (likewise for {', '.join(rest)})" if rest else "")


def gpu_index(inventory: Inventory, pci_address: str) -> int | None:
    """The NVML index (nvidia-smi's, with CUDA_DEVICE_ORDER=PCI_BUS_ID) of the GPU at `pci_address`."""
    return next((gpu.index for gpu in inventory.gpus if gpu.pci_address == pci_address), None)


def dcgm_diag(index: int | None) -> str:
    """NVIDIA's field diagnostic on one GPU: its command where the GPU's index is known."""
    if index is None:
        return ("NVIDIA's field diagnostic (`dcgmi diag -r 3` with `-i` and this GPU's index; NVML does not list it, "
                "so its index is not known here)")
    return f"NVIDIA's field diagnostic (`dcgmi diag -r 3 -i {index}` on an idle node)"


def bridge_above(inventory: Inventory, address: str) -> str | None:
    """The PCI bridge directly above `address` (the slot's port), where the PCIe tree holds it."""
    tree = inventory.pci_tree or {}
    if address not in tree:
        return None
    path = path_from_root(tree, address)
    return path[-2] if len(path) >= 2 else None
