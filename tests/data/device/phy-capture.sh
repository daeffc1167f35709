#!/usr/bin/env bash
# Run on a GPU machine of the device tool (repo root, wheels in .whl): what the physical-layer
# sources (CONTRACT 9) find on a node without InfiniBand or RoCE: `check` and `discover` live,
# a capture read back, and the node's own view (RDMA devices, MFT, ethtool, configfs) beside it.
# Usage: phy-capture.sh KIND
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
ln -sfn "$PWD/rules" /tmp/site/netdoctor_rules; ln -sfn "$PWD/plugins" /tmp/site/netdoctor_plugins
export PYTHONPATH=/tmp/site:$PWD
kind=${1:-device}; out="$OUT/$kind/phy"; mkdir -p "$out"
{
  echo "== id: $(id -u)"
  echo "== /sys/class/infiniband:"; ls /sys/class/infiniband 2>&1
  echo "== mlxlink: $(command -v mlxlink || echo absent)"; echo "== ethtool: $(command -v ethtool || echo absent)"
  echo "== configfs rdma_cm:"; ls /sys/kernel/config/rdma_cm 2>&1
  echo "== netdevs:"; for n in /sys/class/net/*; do printf '%s driver=%s\n' "${n##*/}" "$(basename "$(readlink "$n/device/driver" 2>/dev/null)" 2>/dev/null)"; done
  for n in /sys/class/net/*; do
    name=${n##*/}; [ "$name" = lo ] && continue
    if command -v ethtool >/dev/null; then echo "== ethtool -S $name"; timeout 5 ethtool -S "$name" 2>&1 | head -400; fi
  done
} > "$out/node-facts.txt" 2>&1
python3 -m netdoctor check --no-probe --format json > "$out/check-no-probe.json" 2> "$out/check-no-probe.stderr"; echo "rc=$?" >> "$out/check-no-probe.stderr"
python3 -m netdoctor discover > "$out/discover.txt" 2>&1
python3 -m netdoctor capture -o /tmp/phy-capture.tar.gz > /dev/null 2>&1
python3 -m netdoctor check --no-probe --snapshot /tmp/phy-capture.tar.gz --format json > "$out/check-snapshot.json" 2>/dev/null; echo "snapshot rc=$?" >> "$out/check-no-probe.stderr"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for name in ("check-no-probe.json", "check-snapshot.json"):
    report = json.load(open(f"{out}/{name}"))
    rows = [(f["check"], f["status"], f["subject"], f["summary"][:100]) for f in report["findings"] if f["check"] in ("phy", "pfc-ecn")]
    print(name, report.get("grade"), rows)
PY
