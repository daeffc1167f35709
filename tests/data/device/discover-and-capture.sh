#!/usr/bin/env bash
# Run on a GPU machine of the device tool (repo root, wheels in .whl): netdoctor's own
# discovery and capture of the real node, for the test fixture and the closing note.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
ln -sfn "$PWD/rules" /tmp/site/netdoctor_rules; ln -sfn "$PWD/plugins" /tmp/site/netdoctor_plugins
export PYTHONPATH=/tmp/site:$PWD
nd() { python3 -m netdoctor "$@"; }
kind=${1:-device}
mkdir -p "$OUT/$kind"
nd --version | tee "$OUT/$kind/version.txt"
nd discover > "$OUT/$kind/discover.txt" 2> "$OUT/$kind/discover.err"; echo "discover rc=$?" | tee -a "$OUT/$kind/rc.txt"
nd discover --format json > "$OUT/$kind/discover.json" 2>> "$OUT/$kind/discover.err"
/usr/bin/time -f "%e s %M KB" python3 -m netdoctor capture -o "$OUT/$kind/capture.tar.gz" 2> "$OUT/$kind/capture.err"; echo "capture rc=$?" | tee -a "$OUT/$kind/rc.txt"
tail -1 "$OUT/$kind/capture.err"
nd check --no-probe > "$OUT/$kind/check-no-probe.txt" 2>&1; echo "check --no-probe rc=$?" | tee -a "$OUT/$kind/rc.txt"
nd check --format json > "$OUT/$kind/check.json" 2> "$OUT/$kind/check.err"; echo "check (with probe) rc=$?" | tee -a "$OUT/$kind/rc.txt"
nd check > "$OUT/$kind/check.txt" 2>&1; echo "check text rc=$?" | tee -a "$OUT/$kind/rc.txt"
nd check --snapshot "$OUT/$kind/capture.tar.gz" --no-probe > "$OUT/$kind/check-snapshot.txt" 2>&1; echo "check --snapshot rc=$?" | tee -a "$OUT/$kind/rc.txt"
cat "$OUT/$kind/discover.txt" "$OUT/$kind/check.txt"
nvidia-smi --query-gpu=index,memory.used --format=csv | tee "$OUT/$kind/gpu-memory-after.txt"
