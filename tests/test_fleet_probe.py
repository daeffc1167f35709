"""`netdoctor fleet probe` end to end: the check sweep, the rounds through a real parallel
shell (pdsh's exec module here; srun in tests/test_slurm.py), the node side (`fleet
probe-node`) discovering the dgx-h100 fixture's GPUs and rails from its sys tree, and a
stand-in NCCL worker (tests/fakebin/fake_nccl_worker.py) with a planted slow node, a planted
slow rail, a node that hangs. The real NCCL logs of the same two-rank path on an H100 (device
tool, tests/data/device/nvidia-h100-x1/fleet-probe) are read here too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from netdoctor.errors import UsageError
from netdoctor.fleet.probe_node import decode_plan, encode_plan, my_name, run_probe_node
from netdoctor.parsers.nccl import parse_nccl_log

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "nodes"
FAKE_WORKER = REPO / "tests" / "fakebin" / "fake_nccl_worker.py"
DEVICE = REPO / "tests" / "data" / "device" / "nvidia-h100-x1" / "fleet-probe"
needs_pdsh = pytest.mark.skipif(shutil.which("pdsh") is None, reason="pdsh not installed (scripts/test.sh installs it)")


def lab(directory: Path, scenario: dict, *, failing: tuple[str, ...] = (), hanging: tuple[str, ...] = ()) -> dict[str, str]:
    """Snapshots for the check sweep, a node command that runs the node side on the fixture's sys tree."""
    snapshots = directory / "snapshots"
    snapshots.mkdir()
    for index in range(1, 9):
        name = f"n{index}"
        (snapshots / name).symlink_to(FIXTURES / ("dgx-h100-port-down" if name in failing else "dgx-h100"))
    (directory / "scenario.json").write_text(json.dumps(scenario))
    node = directory / "node.sh"
    hang = " ".join(hanging)
    node.write_text(f"""#!/bin/sh
for name in {hang}; do case " $* " in *" --as $name "*) sleep 600;; esac; done
export PYTHONPATH={REPO} NETDOCTOR_SYSFS_ROOT={FIXTURES / 'dgx-h100' / 'sys'} NETDOCTOR_PROBE_WORKER={FAKE_WORKER}
export NETDOCTOR_FAKE_SCENARIO={directory / 'scenario.json'}
exec {sys.executable} -m netdoctor fleet probe-node "$@"
""")
    node.chmod(0o755)
    return {"check": f"env PYTHONPATH={REPO} {sys.executable} -m netdoctor check --format json --no-probe "
                     f"--snapshot {snapshots}/{{host}}", "node": str(node)}


def fleet_probe(commands: dict[str, str], *extra: str, shell: tuple[str, ...] = ("--rcmd", "exec"),
                env: dict[str, str] | None = None) -> tuple[dict, int, str]:
    done = subprocess.run([sys.executable, "-m", "netdoctor", "fleet", "probe", "-w", "n[1-8]", *shell,
                           "--check-command", commands["check"], "--node-command", commands["node"], "--budget", "4",
                           "--format", "json", *extra], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    return json.loads(done.stdout or "{}"), done.returncode, done.stderr


@needs_pdsh
def test_a_slow_node_and_a_slow_rail_are_the_suspects(tmp_path: Path) -> None:
    commands = lab(tmp_path, {"pair_busbw_gbps": 350.0, "nodes": {"n3": {"factor": 0.45}},
                              "rails_factor": {"n6": {"mlx5_4": 0.5}}})
    fleet, code, stderr = fleet_probe(commands, "--round-timeout", "60")
    probe = fleet["probe"]
    assert sorted((item["kind"], item["host"], item.get("subject")) for item in probe["suspects"]) == [
        ("node", "n3", None), ("rail", "n6", "mlx5_4:1")], stderr
    grades = {node["host"]: node["grade"] for node in fleet["nodes"]}
    assert grades == {**{f"n{index}": "pass" for index in range(1, 9)}, "n3": "fail", "n6": "fail"}
    assert [round_["round"] for round_ in probe["rounds"]] == [1, 2, 3]
    first = probe["pairs"][0]
    # No `sharp`: nothing says this fabric offers SHARP (no pack word, no SHARP plugin in NCCL's log).
    assert first == {"hosts": ["n1", "n2"], "round": 1, "busbw_gbps": 350.0, "expected_gbps": 360.0,
                     "transport": "NET/IB/GDRDMA", "status": "pass"}
    assert code == 2


@needs_pdsh
def test_a_hanging_node_is_unreachable_and_a_failing_one_left_out(tmp_path: Path) -> None:
    commands = lab(tmp_path, {"pair_busbw_gbps": 350.0}, failing=("n8",), hanging=("n7",))
    fleet, code, stderr = fleet_probe(commands, "--round-timeout", "8")
    nodes = {node["host"]: node for node in fleet["nodes"]}
    assert nodes["n7"]["grade"] == "unreachable" and "command timeout" in nodes["n7"]["top"]["summary"], stderr
    assert nodes["n8"]["grade"] == "fail"
    assert nodes["n8"]["top"]["summary"].startswith("left out of the probe: check --no-probe: fail: port-state")
    assert {host: node["grade"] for host, node in nodes.items() if host not in ("n7", "n8")} == {
        f"n{index}": "pass" for index in range(1, 7)}
    assert all("n8" not in pair["hosts"] for pair in fleet["probe"]["pairs"])
    assert fleet["probe"]["suspects"] == [] and code == 2


@needs_pdsh
def test_pairs_on_sockets_leave_no_node_at_pass_and_claim_no_sharp(tmp_path: Path) -> None:
    """Every group's NCCL fell back to TCP (NET/Socket) at full speed: each pair warns, so does
    each node (it used to say pass), and nothing speaks of SHARP on a fabric with none to use."""
    commands = lab(tmp_path, {"pair_busbw_gbps": 350.0, "via": "NET/Socket"})
    fleet, code, stderr = fleet_probe(commands, "--round-timeout", "60")
    pairs = fleet["probe"]["pairs"]
    assert {(pair["transport"], pair["status"], pair["expected_gbps"]) for pair in pairs} == {("NET/Socket", "warn", 360.0)}, stderr
    nodes = {node["host"]: node for node in fleet["nodes"]}
    assert {host: node["grade"] for host, node in nodes.items()} == {f"n{index}": "warn" for index in range(1, 9)}
    assert all("NCCL ran over TCP sockets (NET/Socket)" in node["top"]["summary"] for node in nodes.values())
    assert "SHARP" not in json.dumps(fleet) and "sharp" not in json.dumps(pairs)
    assert fleet["probe"]["suspects"] == [] and code == 1


def test_plans_round_trip_and_garbage_is_a_usage_error() -> None:
    plan = {"round": 1, "budget_s": 4, "groups": [{"hosts": ["a", "b"], "port": 29400, "rails": False}],
            "nodes": {"a": {"gpus": 8, "rails": 8}, "b": {"gpus": 8, "rails": 8}}}
    assert decode_plan(encode_plan(plan)) == plan
    for garbage in ("not-base64!", encode_plan([1, 2]), "eJwDAAAAAAE="):
        with pytest.raises(UsageError):
            decode_plan(garbage)
    done = subprocess.run([sys.executable, "-m", "netdoctor", "fleet", "probe-node", "--as", "a", "--plan", "@@"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 3 and "is not a fleet probe plan" in done.stderr and "Traceback" not in done.stderr


def test_a_node_names_itself_from_the_shell_else_slurm_else_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    assert my_name("n1", {"n1", "n2"}) == "n1"
    assert my_name("%h", {"n1", "n2"}) == "n2"          # pdsh over ssh does not substitute %h
    line, code = run_probe_node(encode_plan({"round": 1, "groups": [], "nodes": {"n1": {"gpus": 1}}}), "n9")
    assert code == 3 and json.loads(line)["probe"]["reason"] == "not in the plan"


def test_the_real_two_rank_log_from_an_h100() -> None:
    facts = parse_nccl_log((DEVICE / "rank0.log").read_text())
    assert facts.net_transport() == "NET/Socket"
    assert facts.algorithms == {268435456: "RING"} and facts.version == "2.28.9+cuda13.0"
    result = json.loads((DEVICE / "rank0.json").read_text())
    assert result["status"] == "ok" and result["sizes"][-1]["verified"]
    fleet = json.loads((DEVICE / "fleet-probe.json").read_text())
    assert fleet["probe"]["pairs"][0]["transport"] == "NET/Socket"
    assert fleet["probe"]["pairs"][0]["busbw_gbps"] > 0
