"""One node's part of a `fleet probe` round (`netdoctor fleet probe-node`), run through the
parallel shell on every node of the round.

The coordinator (netdoctor.fleet.probe_run) hands every node the same round plan (`--plan`,
zlib+base64 JSON: the groups, each node's GPU and rail counts, the traffic budget). The
node finds its group (by `--as`, the name the shell substituted, else `$SLURMD_NODENAME`,
else its hostname: only to pick its own part, never to attribute its output, which the
shell does), discovers its GPUs and rails, runs netdoctor's NCCL worker with its ranks of
the group's communicator (the bootstrap root on the group's first node: NCCL_COMM_ID), and
prints one `netdoctor.report/1` line whose `probe` section carries the measurement.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import socket
import sys
import time
import zlib
from typing import Any

from netdoctor import __version__
from netdoctor.errors import UsageError
from netdoctor.util import utc_now_iso

MAX_PLAN_BYTES = 4 * 1024 * 1024       # a 10,000-node round is ~400 kB of JSON
PAIR_BYTES = 256 << 20
PAIR_ITERATIONS = 8
PAIR_WARMUP = 2


def encode_plan(plan: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(zlib.compress(json.dumps(plan, separators=(",", ":")).encode(), 9)).decode()


def decode_plan(text: str) -> dict[str, Any]:
    try:
        raw = zlib.decompressobj().decompress(base64.urlsafe_b64decode(text.encode()), MAX_PLAN_BYTES)
        plan = json.loads(raw)
    except (binascii.Error, zlib.error, ValueError, UnicodeError) as error:
        raise UsageError(f"--plan is not a fleet probe plan: {error}") from error
    if not isinstance(plan, dict) or not isinstance(plan.get("groups"), list) or not isinstance(plan.get("nodes"), dict):
        raise UsageError("--plan is not a fleet probe plan: no groups/nodes")
    return plan


def my_name(given: str | None, hosts: set[str]) -> str:
    """This node's name in the plan: `--as` unless the shell left it unsubstituted, else SLURM's, else hostname."""
    candidates = [given if given and given not in ("%h", "{host}") else None, os.environ.get("SLURMD_NODENAME")]
    full = socket.gethostname()
    candidates += [full, full.split(".")[0]]
    return next((name for name in candidates if name and name in hosts), candidates[0] or full.split(".")[0])


def report_line(host: str, status: str, summary: str, probe: dict[str, Any], started: float) -> str:
    grade = "pass" if status == "ok" else "unknown"
    report = {"schema": "netdoctor.report/1", "host": host, "grade": grade, "started_at": utc_now_iso(),
              "duration_s": round(time.monotonic() - started, 3), "rules": "fleet-probe", "netdoctor": __version__,
              "findings": [{"check": "fleet-probe", "status": "pass" if status == "ok" else "unknown",
                            "subject": "+".join(probe.get("group", [])) or "node", "summary": summary}],
              "checks": [{"check": "fleet-probe", "status": "pass" if status == "ok" else "unknown", "required": True}],
              "probe": probe}
    return json.dumps(report, separators=(",", ":"))


def run_probe_node(plan_text: str, given_name: str | None) -> tuple[str, int]:
    """(the report line, exit code) of this node's part of the round."""
    started = time.monotonic()
    plan = decode_plan(plan_text)
    nodes = plan["nodes"]
    me = my_name(given_name, set(nodes))
    group = next((entry for entry in plan["groups"] if isinstance(entry, dict) and me in entry.get("hosts", [])), None)
    base = {"round": plan.get("round"), "group": [], "status": "error"}
    if group is None:
        return report_line(me, "error", f"{me} is not in this round's plan", {**base, "reason": "not in the plan"},
                           started), 3
    hosts = [str(host) for host in group["hosts"]]
    probe: dict[str, Any] = {**base, "group": hosts}
    budget_s = float(plan.get("budget_s", 10.0))
    try:
        from netdoctor.fleet.probe_traffic import measure_group
        probe.update(measure_group(me, hosts, group, nodes, budget_s, bool(group.get("rails"))))
    except Exception as error:  # noqa: BLE001 - the coordinator must get a line saying why
        probe.update(status="error", reason=f"{type(error).__name__}: {error}")
    summary = (f"{probe.get('busbw_gbps')} GB/s with {'+'.join(host for host in hosts if host != me)} "
               f"({probe.get('transport') or 'transport unknown'})" if probe["status"] == "ok"
               else f"no measurement: {probe.get('reason', '')}")
    return report_line(me, probe["status"], summary, probe, started), 0 if probe["status"] == "ok" else 3


def main(plan_text: str, given_name: str | None) -> int:
    line, code = run_probe_node(plan_text, given_name)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return code

