"""A stand-in for netdoctor/probe/worker.py (NETDOCTOR_PROBE_WORKER): the same config and
result protocol, NCCL's log lines in NCCL's own format, numbers from a scenario.

$NETDOCTOR_FAKE_SCENARIO is a JSON file:
  {"no_nccl": false,
   "rails": {"mlx5_3": {"busbw_gbps": 46.2, "via": "NET/IB/0/GDRDMA"}, ...},   # nic-loopback, by NCCL_IB_HCA
   "nodes": {"node03": {"factor": 0.5}, ...}, "rails_factor": {"node05": {"mlx5_3": 0.5}},  # fleet probe
   "pair_busbw_gbps": 180.0, "hang_hosts": ["node07"]}
"""

import json
import os
import sys
import time


def main() -> int:
    config = json.loads(sys.argv[1])
    result_path = sys.argv[2]
    scenario = json.load(open(os.environ["NETDOCTOR_FAKE_SCENARIO"], encoding="utf-8"))
    host = os.environ.get("NCCL_HOSTID") or os.environ.get("NETDOCTOR_FAKE_HOST", "fake")
    rank = int(config.get("rank_base", 0))
    prefix = f"{host}:{os.getpid()}:{os.getpid()} [{config['gpus'][0] if config.get('gpus') else 0}] NCCL INFO"
    result = {"gpus": config.get("gpus") or [0], "gpu_count": len(config.get("gpus") or [0]), "sizes": [],
              "localisation": [], "timings": {}}
    if scenario.get("no_nccl"):
        result.update(status="skipped", reason="NCCL not found (install netdoctor[probe] or the system libnccl2); "
                      "tried libnccl.so.2: cannot open shared object file", reason_code="no-nccl")
        json.dump(result, open(result_path, "w"))
        return 0
    print(f"{prefix} NCCL version 2.28.9+cuda13.0", flush=True)
    hca = os.environ.get("NCCL_IB_HCA", "").lstrip("^=").split(":")[0].split(",")[0]
    if hca in scenario.get("rails", {}):
        rail = scenario["rails"][hca]
        via, busbw = rail["via"], rail["busbw_gbps"]
    else:
        node = host
        if node in scenario.get("hang_hosts", []):
            time.sleep(3600)
        group = config.get("group") or [node]
        factor = min(scenario.get("nodes", {}).get(peer, {}).get("factor", 1.0) for peer in group)
        slow_rails = {(peer, rail): value for peer, rails in scenario.get("rails_factor", {}).items()
                      for rail, value in rails.items() if peer in group}
        if hca:
            # a rails round: this one rail, of one node or the other
            factor *= min([value for (peer, rail), value in slow_rails.items() if rail == hca] or [1.0])
            busbw = scenario.get("pair_busbw_gbps", 180.0) / 8 * factor
        else:
            # NCCL spreads an all-reduce over every rail: the slowest rail sets the pace
            busbw = scenario.get("pair_busbw_gbps", 180.0) * factor * min(list(slow_rails.values()) or [1.0])
        via = scenario.get("via", "NET/IB/0/GDRDMA")
    print(f"{prefix} NET/IB : Using [0]{hca or 'mlx5_0'}:1/IB [RO]; OOB eth0:10.0.0.{rank + 1}<0>", flush=True)
    print(f"{prefix} Channel 00/0 : {1 - rank if rank < 2 else 0}[0] -> {rank}[0] [receive] via {via}", flush=True)
    print(f"{prefix} Channel 00/0 : {rank}[0] -> {1 - rank if rank < 2 else 0}[0] [send] via {via}", flush=True)
    print(f"{prefix} comm 0x1 rank {rank} nRanks {config.get('nranks', 2)} nNodes 2 localRanks 1 localRank 0 MNNVL 0")
    size = max(config.get("sizes") or [256 << 20])
    time_us = size / (busbw * 1e9) * 1e6
    result.update(status="ok", reason="", nccl_version="2.28.9", busbw_gbps=busbw,
                  sizes=[{"bytes": size, "count": size // 4, "iterations": config.get("iterations", 8), "warmup": 2,
                          "time_us": round(time_us, 3), "algbw_gbps": busbw, "busbw_gbps": busbw, "verified": True,
                          "wrong_elements": 0}])
    json.dump(result, open(result_path, "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
