#!/usr/bin/env bash
# Run on a GPU machine of the device tool (repo root, wheels in .whl): CONTRACT 8's NVML facts as
# a real pre-Blackwell driver answers them (fabric info v3 health, platform info, NVLink5 field
# ids 219-222), nvidia-smi -q / -q -x as text sources, and netdoctor's own live view and capture.
# Usage: nvml-v4-capture.sh KIND
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
ln -sfn "$PWD/rules" /tmp/site/netdoctor_rules; ln -sfn "$PWD/plugins" /tmp/site/netdoctor_plugins
export PYTHONPATH=/tmp/site:$PWD
kind=${1:-device}; out="$OUT/$kind/nvml-v4"; mkdir -p "$out"
run() { local name=$1; shift; timeout 30 "$@" > "$out/$name" 2>&1; echo "rc=$?" >> "$out/$name.rc"; }
run nvidia-smi-q.out nvidia-smi -q
run nvidia-smi-q-x.xml nvidia-smi -q -x
run nvidia-smi-nvlink-s.out nvidia-smi nvlink -s
run nvidia-imex-ctl-N.out nvidia-imex-ctl -N
python3 - > "$out/nvml-raw.txt" 2>&1 <<'PY'
import ctypes, pynvml as n
n.nvmlInit()
print("driver", n.nvmlSystemGetDriverVersion(), "nvidia-ml-py", getattr(n, "__version__", "?"))
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    print(f"GPU{i}", n.nvmlDeviceGetName(h))
    for name, struct, version in (("v3", "c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3"),
                                  ("v2", "c_nvmlGpuFabricInfo_v2_t", "nvmlGpuFabricInfo_v2")):
        info = getattr(n, struct)(); info.version = getattr(n, version)
        try:
            n.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
            print(f"  fabric {name}: state={info.state} status={info.status} clique={info.cliqueId} "
                  f"healthMask=0x{info.healthMask:x} summary={getattr(info, 'healthSummary', '-')}")
        except n.NVMLError as error:
            print(f"  fabric {name}: {error}")
    for struct, version in (("c_nvmlPlatformInfo_v2_t", "nvmlPlatformInfo_v2"), ("c_nvmlPlatformInfo_v1_t", "nvmlPlatformInfo_v1")):
        info = getattr(n, struct)(); info.version = getattr(n, version)
        try:
            n.nvmlDeviceGetPlatformInfo(h, ctypes.byref(info))
            print(f"  platform {struct}:", {f[0]: getattr(info, f[0]) for f in info._fields_ if f[0] != "version"})
        except (n.NVMLError, TypeError) as error:
            print(f"  platform {struct}: {error!r}")
    try:
        print("  nvlink version link0:", n.nvmlDeviceGetNvLinkVersion(h, 0))
    except n.NVMLError as error:
        print("  nvlink version link0:", error)
    values = n.nvmlDeviceGetFieldValues(h, [(field, 0) for field in (219, 220, 221, 222, 164)])
    for field, value in zip((219, 220, 221, 222, 164), values):
        print(f"  field {field} link0: ret={value.nvmlReturn} value={value.value.ullVal}")
n.nvmlShutdown()
PY
python3 -m netdoctor check --no-probe --format json > "$out/check-no-probe.json" 2> "$out/check-no-probe.stderr"; echo "rc=$?" >> "$out/check-no-probe.stderr"
python3 -m netdoctor discover > "$out/discover.txt" 2>&1
python3 -m netdoctor capture -o /tmp/v4-capture.tar.gz > /dev/null 2>&1 && cp /tmp/v4-capture.tar.gz "$out/capture.tar.gz"
python3 -m netdoctor check --no-probe --snapshot /tmp/v4-capture.tar.gz --format json > "$out/check-snapshot.json" 2>/dev/null; echo "snapshot rc=$?" >> "$out/check-no-probe.stderr"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for name in ("check-no-probe.json", "check-snapshot.json"):
    report = json.load(open(f"{out}/{name}"))
    rows = [(f["check"], f["status"], f["subject"], f["summary"][:90]) for f in report["findings"]
            if f["check"] in ("nvswitch-fabric", "nvlink", "inventory", "gpu-nic-affinity")]
    print(name, report.get("grade"), *rows, sep="\n  ")
PY
