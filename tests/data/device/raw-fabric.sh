#!/usr/bin/env bash
# Run on a GPU machine of the device tool: the raw GPU-fabric facts (NVLink, fabric state,
# PCIe tree with ACS/ATS, IOMMU, kernel log, services, versions) as the tools print them,
# for parser tests and fixtures. Writes $OUT/raw-fabric.tar.gz.
set -u
dir=$(mktemp -d)/raw-fabric; mkdir -p "$dir"
run() { local name=$1; shift; timeout 20 "$@" > "$dir/$name.out" 2> "$dir/$name.err"; echo "$?" > "$dir/$name.rc"; }
run id id
run uname uname -a
run nvidia-smi-nvlink-s nvidia-smi nvlink -s
run nvidia-smi-nvlink-e nvidia-smi nvlink -e
run nvidia-smi-nvlink-c nvidia-smi nvlink -c
run nvidia-smi-q nvidia-smi -q
run nvidia-smi-topo-m nvidia-smi topo -m
run lspci-vvv lspci -vvv -D
run lspci-tv lspci -tv
run lspci-nn lspci -nn -D
run dmesg dmesg --time-format iso
run dmesg-plain dmesg
run journalctl-k journalctl -k -o short-iso --no-pager -b
run systemctl-show-nvidia-fabricmanager systemctl show nvidia-fabricmanager -p ActiveState,SubState,Result,NRestarts,ActiveEnterTimestamp
run systemctl-show-nvidia-imex systemctl show nvidia-imex -p ActiveState,SubState,Result,NRestarts,ActiveEnterTimestamp
run nv-fabricmanager-version nv-fabricmanager --version
run ofed_info-s ofed_info -s
run which sh -c 'for t in lspci setpci dmesg journalctl systemctl mlxlink ethtool smpquery lldpctl ibstat ofed_info nv-fabricmanager nvidia-imex; do printf "%s: " $t; command -v $t || echo missing; done'
run proc sh -c 'cat /proc/uptime; cat /proc/sys/kernel/osrelease; cat /proc/cmdline; cat /proc/sys/kernel/dmesg_restrict'
run dmi sh -c 'for f in sys_vendor product_name; do printf "%s=" $f; cat /sys/class/dmi/id/$f; done; printf "hypervisor/type="; cat /sys/hypervisor/type 2>&1; grep -o -m1 hypervisor /proc/cpuinfo'
run iommu sh -c 'for g in /sys/kernel/iommu_groups/*; do printf "%s %s\n" "${g##*/}" "$(cat $g/type 2>/dev/null)"; done | sort -n | head -400'
run pci-paths sh -c '
for dev in /sys/bus/pci/devices/*; do
  v=$(cat $dev/vendor); c=$(cat $dev/class)
  case "$v:$c" in 0x10de:0x03*|0x10de:0x068*|0x15b3:0x02*|0x15b3:0x0207*) ;; *) continue;; esac
  real=$(readlink -f $dev); echo "== ${dev##*/} $real"
  p=$real
  while [ -f "$p/vendor" ]; do
    a=${p##*/}
    printf "%s vendor=%s device=%s class=%s cur=%s/x%s max=%s/x%s group=%s config=%s bytes\n" "$a" "$(cat $p/vendor)" "$(cat $p/device)" "$(cat $p/class)" \
      "$(cat $p/current_link_speed 2>/dev/null)" "$(cat $p/current_link_width 2>/dev/null)" "$(cat $p/max_link_speed 2>/dev/null)" "$(cat $p/max_link_width 2>/dev/null)" \
      "$(basename $(readlink $p/iommu_group) 2>/dev/null)" "$(wc -c < $p/config)"
    p=${p%/*}
  done
done'
run pci-config sh -c '
for dev in /sys/bus/pci/devices/*; do
  v=$(cat $dev/vendor); c=$(cat $dev/class)
  case "$v:$c" in 0x10de:0x03*|0x15b3:0x02*|0x15b3:0x0207*) ;; *) continue;; esac
  p=$(readlink -f $dev)
  while [ -f "$p/vendor" ]; do echo "== ${p##*/}"; od -An -tx1 -v $p/config; p=${p%/*}; done
done'
cat > "$dir/nvml_fabric.py" <<'PY'
import json, pynvml as n
n.nvmlInit()
out = {"driver": n.nvmlSystemGetDriverVersion(), "gpus": []}
def call(f, *a):
    try:
        v = f(*a); return v.decode() if isinstance(v, bytes) else v
    except Exception as e:
        return f"ERROR {type(e).__name__}: {e}"
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    g = {"index": i, "name": call(n.nvmlDeviceGetName, h), "pci": call(lambda h: n.nvmlDeviceGetPciInfo(h).busId, h),
         "vbios": call(n.nvmlDeviceGetVbiosVersion, h), "virt_mode": call(n.nvmlDeviceGetVirtualizationMode, h), "links": []}
    for fname in ("nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"):
        f = getattr(n, fname, None)
        if f is None: g[fname] = "absent"; continue
        r = call(f, h)
        g[fname] = {k: (bytes(getattr(r, k)).hex() if k == "clusterUuid" else getattr(r, k)) for k, _ in r._fields_} if not isinstance(r, str) else r
    for l in range(18):
        link = {"link": l, "state": call(n.nvmlDeviceGetNvLinkState, h, l)}
        if isinstance(link["state"], str): g["links"].append(link); continue
        link["version"] = call(n.nvmlDeviceGetNvLinkVersion, h, l)
        link["remote"] = call(lambda h, l: n.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, l).busId, h, l)
        for name, counter in (("replay", n.NVML_NVLINK_ERROR_DL_REPLAY), ("recovery", n.NVML_NVLINK_ERROR_DL_RECOVERY), ("crc_flit", n.NVML_NVLINK_ERROR_DL_CRC_FLIT), ("crc_data", n.NVML_NVLINK_ERROR_DL_CRC_DATA)):
            link[name] = call(n.nvmlDeviceGetNvLinkErrorCounter, h, l, counter)
        fid = getattr(n, "NVML_FI_DEV_NVLINK_SPEED_MBPS_L0", None)
        if fid is not None:
            vals = call(n.nvmlDeviceGetFieldValues, h, [fid + l if l < 12 else fid])
            link["speed_field"] = vals if isinstance(vals, str) else [(v.nvmlReturn, v.value.uiVal) for v in vals]
        common = getattr(n, "NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON", None)
        if common is not None and l == 0:
            vals = call(n.nvmlDeviceGetFieldValues, h, [common])
            g["speed_common"] = vals if isinstance(vals, str) else [(v.nvmlReturn, v.value.uiVal) for v in vals]
        g["links"].append(link)
    out["gpus"].append(g)
print(json.dumps(out, indent=1, default=str))
PY
run nvml-fabric python3 "$dir/nvml_fabric.py"
run pynvml-version python3 -c 'import pynvml,importlib.metadata as m; print(m.version("nvidia-ml-py"))'
tar -czf "$OUT/raw-fabric.tar.gz" -C "${dir%/*}" raw-fabric
ls -la "$dir" | head -80
cat "$dir/nvml-fabric.out" | head -80; cat "$dir/which.out" "$dir/dmi.out" "$dir/proc.out" "$dir/systemctl-show-nvidia-fabricmanager.out" "$dir/id.out"
