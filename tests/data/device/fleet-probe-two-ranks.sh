#!/usr/bin/env bash
# Run on a GPU machine of the device tool (repo root, wheels in .whl): the fleet probe's code
# path with real NCCL network transport between two "nodes" on one machine, and the NIC
# loopback engine's two-rank path; the measured numbers and NCCL's logs go to $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
ln -sfn "$PWD/rules" /tmp/site/netdoctor_rules; ln -sfn "$PWD/plugins" /tmp/site/netdoctor_plugins
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
kind=${1:-device}
out="$OUT/$kind"; mkdir -p "$out"
nvidia-smi -L | tee "$out/gpus.txt"
python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))" 2>&1 | tee "$out/nccl-wheel.txt"
gpus=$(nvidia-smi -L | wc -l)
# Two node names that resolve here: the bootstrap root is NCCL_COMM_ID=<first node>:<port>.
grep -q ' nodeA$' /etc/hosts || printf '127.0.0.1 nodeA\n127.0.0.1 nodeB\n' >> /etc/hosts
getent hosts nodeA nodeB | tee "$out/hosts.txt"

# 1. fleet probe between nodeA and nodeB (both this machine: NCCL_HOSTID keeps them two nodes,
#    so every byte goes through NCCL's network transport; with no RDMA NIC that is NET/Socket).
/usr/bin/time -f "%e s wall" python3 -m netdoctor fleet probe -w nodeA,nodeB --via clush --rcmd exec \
  --check-command "python3 -m netdoctor check --format json --no-probe" \
  --node-command "python3 -m netdoctor fleet probe-node" --budget 30 --round-timeout 90 -F json \
  > "$out/fleet-probe.json" 2> "$out/fleet-probe.err"
echo "fleet probe rc=$?" | tee "$out/rc.txt"; tail -3 "$out/fleet-probe.err"
python3 -m json.tool "$out/fleet-probe.json" | head -60

# 2. the same two-rank communicator by hand, to keep NCCL's whole log (the worker as the node side runs it).
port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
for rank in 0 1; do
  ( export NCCL_COMM_ID=127.0.0.1:$port NCCL_HOSTID=node$rank NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,NET,ENV,TUNING
    python3 netdoctor/probe/worker.py "{\"gpus\":[0],\"sizes\":[268435456],\"iterations\":8,\"warmup\":2,\"nranks\":2,\"rank_base\":$rank,\"budget_s\":60}" "$out/rank$rank.json" \
      > "$out/rank$rank.log" 2>&1 ) &
done
wait
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
from netdoctor.parsers.nccl import parse_nccl_log
out = Path(sys.argv[1])
for rank in (0, 1):
    result = json.loads((out / f"rank{rank}.json").read_text())
    facts = parse_nccl_log((out / f"rank{rank}.log").read_text())
    print(f"rank {rank}: status {result['status']} {result.get('reason', '')} busbw {result.get('sizes', [{}])[-1].get('busbw_gbps')} GB/s"
          f" verified {result.get('sizes', [{}])[-1].get('verified')} transport {facts.net_transport()} algorithms {facts.algorithms}"
          f" nccl {facts.version} timings {result.get('timings')}")
PY

# 3. the NIC loopback engine on a rail the machine does not have: NCCL finds no IB device and
#    carries the traffic over sockets; the check must say "not the NIC".
python3 - > "$out/loopback.txt" 2>&1 <<'PY'
import json, time
from netdoctor.probe.loopback import LoopbackRequest, Rail, run_loopback
started = time.monotonic()
result = run_loopback(LoopbackRequest((Rail("mlx5_0:1", "mlx5_0", 1, 0, "PIX (synthetic rail)", 400.0),), 40.0))
print(json.dumps(result.to_json(), indent=1))
print(f"wall {time.monotonic() - started:.2f} s")
PY
cat "$out/loopback.txt"
nvidia-smi --query-gpu=index,memory.used --format=csv | tee "$out/gpu-memory-after.txt"
# The device tool returns a few files: everything in one archive.
tar -C "$OUT" -czf "$OUT/$kind.tar.gz" "$kind" && rm -rf "$out"
