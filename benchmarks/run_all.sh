#!/usr/bin/env bash
# Run every benchmark on this machine and write benchmarks/results/*.md.
# Usage: bash benchmarks/run_all.sh   (takes about two minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/results
status=0
python3 benchmarks/check_bench.py --runs 20 --label after --markdown benchmarks/results/check.md || status=1
# Start-up of --version, checks and a snapshot check: the code before issue 24 and this tree, in one run.
python3 benchmarks/startup_bench.py --runs 21 --markdown benchmarks/results/startup.md || status=1
python3 benchmarks/discovery_bench.py --runs 10 --markdown benchmarks/results/discovery.md || status=1
python3 benchmarks/iblinkinfo_bench.py --runs 7 --markdown benchmarks/results/iblinkinfo.md || status=1
python3 benchmarks/kernel_log_bench.py || status=1
if [ -f benchmarks/fleet_report_bench.py ]; then
    python3 benchmarks/fleet_report_bench.py || status=1
fi
exit "$status"
