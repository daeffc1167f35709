#!/usr/bin/env bash
# On a GPU machine (the device tool's nvidia-h200-x2): the released code's live discover,
# probe and check, with wall times, the P2P-disabled fault, and the GPUs' state afterwards.
# Wheels of what the machine lacks are in .whl/ (structlog, pyroute2, ClusterShell, typer<0.16).
# Usage: bash benchmarks/device_probe_check.sh OUTDIR
set -uo pipefail
out=${1:?OUTDIR}
mkdir -p "$out" /tmp/nd-packages
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
ln -sfn "$PWD/plugins" /tmp/nd-packages/netdoctor_plugins
ln -sfn "$PWD/rules" /tmp/nd-packages/netdoctor_rules
export PYTHONPATH="/tmp/site:$PWD:/tmp/nd-packages" PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nd() { python3 -m netdoctor "$@"; }
timed() {  # NAME ARGS...: stdout to OUT/NAME, wall time and exit code to OUT/times.txt
    local name=$1; shift
    local start end code
    start=$EPOCHREALTIME; nd "$@" > "$out/$name" 2> "$out/$name.err"; code=$?; end=$EPOCHREALTIME
    # bash's own clock: the GPU image has no bc.
    printf '%-28s exit %s  %s s  netdoctor %s\n' "$name" "$code" \
        "$(python3 -c "print(f'{$end - $start:.2f}')")" "$*" >> "$out/times.txt"
}
nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv > "$out/machine.txt" 2>&1
timed discover.txt discover
for run in 1 2 3; do timed "probe-$run.txt" probe; done
timed probe.json probe --format json
timed check.json check --format json --state /tmp/nd-state.json
timed check.txt check --state /tmp/nd-state.json
timed check-only-probe.json check --only nccl-probe --format json
NCCL_P2P_DISABLE=1 timed probe-p2p-disabled.txt probe
timed probe-nccl-tests.txt probe --engine nccl-tests
timed probe-tight.txt check --deadline 2 --only nccl-probe
nvidia-smi --query-gpu=index,memory.used --format=csv > "$out/gpus-after.txt" 2>&1
pgrep -af "netdoctor|worker.py" > "$out/left-running.txt" 2>&1 || echo "none" > "$out/left-running.txt"
cat "$out/times.txt"
