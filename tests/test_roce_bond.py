"""RoCE LAG: an RDMA device on a bond (mlx5_bond_0 -> bond0) is judged through the bond's slaves."""

from __future__ import annotations

import shutil
from pathlib import Path

from netdoctor.host.snapshot import open_snapshot
from netdoctor.inventory.build import build_inventory
from netdoctor.report.model import Status
from netdoctor.run import CheckOptions, run_check

NODES = Path(__file__).parent / "fixtures" / "nodes"


def _bonded(tmp_path: Path) -> Path:
    """roce-h100 with mlx5_0's RoCE GID on bond0, a LAG of ens1np0 and ens2np0."""
    snapshot = tmp_path / "bonded"
    shutil.copytree(NODES / "roce-h100", snapshot, symlinks=True)
    (snapshot / "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0").write_text("bond0\n")
    bond = snapshot / "sys/class/net/bond0"
    (bond / "bonding").mkdir(parents=True)
    for name, value in {"mtu": "9000", "operstate": "up", "address": "b8:3f:d2:00:00:01", "type": "1"}.items():
        (bond / name).write_text(value + "\n")
    (bond / "bonding" / "slaves").write_text("ens1np0 ens2np0\n")
    return snapshot


def _pfc_ecn(snapshot: Path) -> dict[str, list[Status]]:
    report = run_check(CheckOptions(snapshot=snapshot, no_probe=True, only=("pfc-ecn",)), env={})
    found: dict[str, list[Status]] = {}
    for finding in report.findings:
        found.setdefault(finding.subject, []).append(finding.status)
    return found


def test_bond_takes_its_slaves_settings(tmp_path: Path) -> None:
    snapshot = _bonded(tmp_path)
    with open_snapshot(snapshot) as source:
        inventory = build_inventory(source)
    bond = inventory.netdev("bond0")
    assert bond.bond_slaves == ("ens1np0", "ens2np0")
    assert bond.qos is not None and bond.qos.pfc_enabled == (3,)
    assert bond.ecn_np.get(3) is True
    assert inventory.port("mlx5_0:1").netdev == "bond0"
    assert _pfc_ecn(snapshot)["bond0"] == [Status.PASS]


def test_a_slave_without_pfc_fails_the_bond(tmp_path: Path) -> None:
    snapshot = _bonded(tmp_path)
    qos = snapshot / "commands" / "mlnx_qos-ens2np0.out"
    qos.write_text(qos.read_text().replace("enabled     0   0   0   1", "enabled     0   0   0   0"))
    with open_snapshot(snapshot) as source:
        inventory = build_inventory(source)
    assert any(conflict.subject == "bond0" and conflict.fact == "qos" for conflict in inventory.conflicts)
    assert inventory.netdev("bond0").qos.pfc_enabled == ()   # PFC on priority 3 only where every slave has it
    assert Status.FAIL in _pfc_ecn(snapshot)["bond0"]
