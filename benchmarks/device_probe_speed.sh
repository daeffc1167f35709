#!/usr/bin/env bash
# On a 2-GPU machine of the device tool: `netdoctor probe` and `check --no-probe`, process start
# to exit, of the code before issue 24 and now, alternating, with nccl-tests' all_reduce_perf
# (built here from source) on the same GPUs in the same run. Wheels the image lacks are in .whl/.
# Usage: bash benchmarks/device_probe_speed.sh OUTDIR NCCL_TESTS_SRC RUNS LABEL=TREE...
#   each TREE: a directory with netdoctor/, netdoctor_plugins/, netdoctor_rules/ (an older copy
#   of the code); the working tree is measured as `after`
#   NCCL_TESTS_SRC: a checkout of github.com/NVIDIA/nccl-tests
# Summarise on any machine: python3 benchmarks/probe_speed_summary.py OUTDIR
set -uo pipefail
out=$(realpath -m "${1:?OUTDIR}"); src=${2:?NCCL_TESTS_SRC}; runs=${3:?RUNS}; shift 3
declare -A trees=([after]=/tmp/nd-after)
labels=()
for pair in "$@"; do trees[${pair%%=*}]=$(realpath "${pair#*=}"); labels+=("${pair%%=*}"); done
labels+=(after)
mkdir -p "$out" /tmp/nd-after
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 3
ln -sfn "$PWD/netdoctor" /tmp/nd-after/netdoctor
ln -sfn "$PWD/plugins" /tmp/nd-after/netdoctor_plugins
ln -sfn "$PWD/rules" /tmp/nd-after/netdoctor_rules
# Bytecode cached as an installed package has it, outside the trees; each tree is run once
# untimed first so no timed run compiles.
export NCCL_NVLS_ENABLE=0 PYTHONPYCACHEPREFIX=/tmp/nd-pycache
unset PYTHONDONTWRITEBYTECODE
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$@"; }
{ nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,persistence_mode,memory.used --format=csv
  python3 --version; nproc; uname -r; } > "$out/machine.txt" 2>&1

# nccl-tests against the NCCL the probe loads (the image's nvidia-nccl wheel)
header=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'include', 'nccl.h'))")
library=$(dirname "$(dirname "$header")")/lib
mkdir -p /tmp/ncclhome/lib && ln -sfn "$(dirname "$header")" /tmp/ncclhome/include
ln -sf "$library/libnccl.so.2" /tmp/ncclhome/lib/libnccl.so && ln -sf "$library/libnccl.so.2" /tmp/ncclhome/lib/libnccl.so.2
make -j"$(nproc)" -C "$src/src" MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/tmp/ncclhome BUILDDIR=/tmp/nt \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" /tmp/nt/all_reduce_perf > "$out/nccl-tests-build.txt" 2>&1 || exit 3

run_nd() {  # LABEL NAME ARGS...: one whole process, its wall time in times.tsv
    local label=$1 name=$2; shift 2
    local start end code
    start=$EPOCHREALTIME
    # From /tmp: `python -m` puts the working directory first on sys.path, before PYTHONPATH.
    (cd /tmp && PYTHONPATH="/tmp/site:${trees[$label]}" python3 -m netdoctor "$@") \
        > "$out/$label-$name" 2> "$out/$label-$name.err"; code=$?
    end=$EPOCHREALTIME
    printf '%s\t%s\t%s\t%s\n' "$label" "$name" "$code" "$(secs "$start" "$end")" >> "$out/times.tsv"
}
for label in "${labels[@]}"; do
    (cd /tmp && PYTHONPATH="/tmp/site:${trees[$label]}" python3 -m netdoctor check --no-probe > /dev/null 2>&1)
done
for run in $(seq "$runs"); do
    for label in "${labels[@]}"; do
        run_nd "$label" "probe-$run.json" -vv probe --format json
        run_nd "$label" "full-$run.json" check --format json --state /tmp/nd-state-$label.json
        run_nd "$label" "check-$run.json" -vv check --no-probe --format json
        run_nd "$label" "version-$run.txt" --version
    done
    LD_LIBRARY_PATH=/tmp/ncclhome/lib timeout 120 /tmp/nt/all_reduce_perf -b 1G -e 1G -n 20 -w 5 -g 2 \
        > "$out/nccl-tests-$run.txt" 2>&1
done
nvidia-smi --query-gpu=index,memory.used --format=csv > "$out/gpus-after.txt" 2>&1
ls -la /dev/shm > "$out/shm-after.txt" 2>&1
pgrep -af "netdoctor|worker.py|all_reduce_perf" > "$out/left-running.txt" 2>&1 || echo none > "$out/left-running.txt"
