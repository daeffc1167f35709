#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine (as root) and run it all.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

# Real services and tools the tests start: SLURM + munge, pdsh, clush, headless Chromium,
# iproute2 (network namespaces), systemd-analyze (unit file checks), node_exporter (reads --format prometheus).
SYSTEM_PACKAGES=(slurmctld slurmd slurm-client munge pdsh clustershell chromium iproute2 procps systemd prometheus-node-exporter)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    missing=()
    for package in "${SYSTEM_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi

python3 -m pip install -q --disable-pip-version-check -e '.[test]'

# Property tests run >= 2,000 examples per parser in CI, fewer by hand.
if [ -n "${CI:-}" ]; then export NETDOCTOR_FUZZ_EXAMPLES="${NETDOCTOR_FUZZ_EXAMPLES:-2000}"; fi
# Two workers, one test file each at a time (module fixtures such as the SLURM cluster stay
# in one process): the suite is mostly CPU-bound and takes ~7.5 min this way on 2 cores
# (~12 min in one process). NETDOCTOR_TEST_WORKERS=0 runs it in one process.
exec python3 -m pytest -q -n "${NETDOCTOR_TEST_WORKERS:-2}" --dist loadfile "$@"
