#!/usr/bin/env bash
# Run on a GPU machine of the device tool (repo root, wheels in .whl): the CONTRACT 7.2 health
# fields as netdoctor's collector reads them, beside nvidia-smi -q (an independent reader of the
# same driver) idle and under load, and the real formats issue 22 needs (DMI, the driver's kernel
# log lines), then `check` with and without the NCCL probe. Usage: health-capture.sh KIND
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
ln -sfn "$PWD/rules" /tmp/site/netdoctor_rules; ln -sfn "$PWD/plugins" /tmp/site/netdoctor_plugins
export PYTHONPATH=/tmp/site:$PWD
kind=${1:-device}; out="$OUT/$kind"; mkdir -p "$out"
nvml() { python3 -c 'import json,sys; from netdoctor.host.nvml import collect_nvml; r,s=collect_nvml(); json.dump({"status": s, **(r or {})}, sys.stdout, indent=1)'; }
fields=index,name,pstate,utilization.gpu,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,clocks_event_reasons.active
{
  echo "== $(date -u +%FT%TZ) idle"; nvidia-smi --query-gpu=$fields --format=csv
  nvml > "$out/nvml-idle.json"
  nvidia-smi -q > "$out/nvidia-smi-q-health-idle.out" 2>&1
  # Load: a matmul loop for 25 s; read NVML and nvidia-smi while it runs.
  python3 - <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
end = time.time() + 25
while time.time() < end:
    for _ in range(50): c = a @ b
    torch.cuda.synchronize()
PY
  load=$!; sleep 12
  echo "== $(date -u +%FT%TZ) under load"; nvidia-smi --query-gpu=$fields --format=csv
  nvml > "$out/nvml-load.json"
  nvidia-smi -q > "$out/nvidia-smi-q-health-load.out" 2>&1
  wait $load
  sleep 5; echo "== $(date -u +%FT%TZ) after load"; nvidia-smi --query-gpu=$fields --format=csv
} > "$out/idle-vs-load.txt" 2>&1
{
  echo "== DMI"
  for f in sys_vendor product_name board_name board_vendor; do printf '%s: ' $f; cat /sys/class/dmi/id/$f 2>&1; done
  ls /sys/class/dmi/id 2>&1 | head
  echo "== dmesg (NVIDIA lines)"; dmesg 2>&1 | grep -i -E "nvrm|nvidia|xid" | head -60
} > "$out/facts.txt"
python3 -m netdoctor check --no-probe > "$out/check-no-probe.txt" 2>&1; echo "check rc=$?" >> "$out/check-no-probe.txt"
python3 -m netdoctor check > "$out/check.txt" 2>&1; echo "check (with the NCCL probe) rc=$?" >> "$out/check.txt"
tar -C "$out" -czf "$out/nvidia-smi-q.tar.gz" nvidia-smi-q-health-idle.out nvidia-smi-q-health-load.out && rm "$out"/nvidia-smi-q-health-*.out
cat "$out/idle-vs-load.txt" "$out/facts.txt" "$out/check-no-probe.txt" "$out/check.txt"
