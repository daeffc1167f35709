#!/bin/bash
# Raw captures from a GPU machine (device tool), committed under tests/data/device/<kind>/.
# Usage: capture.sh OUTDIR
out=${1:?usage: capture.sh OUTDIR}
mkdir -p "$out"
nvidia-smi topo -m > "$out/nvidia-smi-topo-m.out" 2>&1
nvidia-smi -q > "$out/nvidia-smi-q.out" 2>&1
nvidia-smi --version > "$out/nvidia-smi-version.out" 2>&1
{ ls /sys/module | grep -i -E 'nvidia|peer|gdr'; echo "--- /sys/class/infiniband:"; ls /sys/class/infiniband 2>&1; } > "$out/modules-and-ib.out"
python3 tests/data/device/dump_nvml.py > "$out/nvml.json" 2>&1
python3 - > "$out/nccl-library.out" 2>&1 <<'PY'
import ctypes, glob, sys, os
for entry in sys.path:
    for path in glob.glob(os.path.join(entry or ".", "nvidia", "nccl", "lib", "libnccl.so*")):
        print("wheel:", path)
try:
    lib = ctypes.CDLL("libnccl.so.2"); v = ctypes.c_int(); lib.ncclGetVersion(ctypes.byref(v)); print("system libnccl.so.2 version code", v.value)
except OSError as error:
    print("system libnccl.so.2:", error)
import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "cuda", torch.version.cuda)
PY
