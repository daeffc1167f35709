"""Fake node tools on PATH, made from a snapshot's recorded command outputs.

Each fake is a small Python script that maps its argv to the snapshot command NAME
(`perfquery -x -C mlx5_0 -P 1` -> `perfquery-x-mlx5_0-1`), prints the recorded stdout and
stderr and exits with the recorded status; a recorded `timeout` makes it sleep forever, a
tool all of whose NAMEs are `missing` is not created at all. Test fakes are data.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

# tool -> how its argv maps to a snapshot command NAME
_SCRIPT = '''#!{python}
import os, sys, time
args = sys.argv[1:]
tool = {tool!r}
if tool == "perfquery":
    # perfquery -x -C DEV -P PORT
    dev = args[args.index("-C") + 1] if "-C" in args else ""
    port = args[args.index("-P") + 1] if "-P" in args else ""
    name = f"perfquery-x-{{dev}}-{{port}}"
elif tool == "mlnx_qos":
    name = "mlnx_qos-" + (args[args.index("-i") + 1] if "-i" in args else "")
elif tool == "nvidia-smi":
    name = "nvidia-smi-" + "-".join(a.lstrip("-") for a in args)
elif tool == "nvidia-imex-ctl":
    # nvidia-imex-ctl -N
    name = "nvidia-imex-ctl-" + "-".join(a.lstrip("-") for a in args)
elif tool == "ibv_devinfo":
    name = "ibv_devinfo-" + "-".join(a.lstrip("-") for a in args)
elif tool == "systemctl":
    # systemctl show UNIT -p ...
    name = "systemctl-show-" + (args[1] if len(args) > 1 else "")
elif tool == "mlxlink":
    # mlxlink -d DEV -m | mlxlink -d DEV -c
    name = ("mlxlink-c-" if "-c" in args else "mlxlink-m-") + (args[args.index("-d") + 1] if "-d" in args else "")
elif tool == "ethtool":
    # ethtool -m NETDEV | ethtool -S NETDEV
    flag = "-S" if "-S" in args else "-m"
    name = "ethtool-" + flag[1] + "-" + (args[args.index(flag) + 1] if flag in args else "")
elif tool == "lspci":
    name = "lspci-vvv"
elif tool == "smpquery":
    # smpquery -C DEV -P PORT -D nodeinfo|nodedesc 0,PORT
    dev = args[args.index("-C") + 1] if "-C" in args else ""
    port = args[args.index("-P") + 1] if "-P" in args else ""
    op = args[args.index("-D") + 1] if "-D" in args else ""
    name = f"smpquery-{{op}}-{{dev}}-{{port}}"
elif tool == "ofed_info":
    name = "ofed_info-s"
elif tool == "nv-fabricmanager":
    name = "nv-fabricmanager-version"
elif tool == "lldpctl":
    name = "lldpctl-json"
elif tool == "ip":
    # ip -j address show
    name = "ip-j-addr"
elif tool == "fi_info":
    # fi_info -p efa | fi_info --version
    name = "fi_info-version" if "--version" in args else "fi_info-p-" + (args[args.index("-p") + 1] if "-p" in args else "")
else:
    name = tool
base = os.path.join({commands!r}, name)
delay = float(os.environ.get("NETDOCTOR_FAKE_DELAY", "{delay}"))
if delay:
    time.sleep(delay)
try:
    status = open(base + ".status").read().strip()
except FileNotFoundError:
    sys.stderr.write(f"fake {{tool}}: {{name}} not recorded\\n")
    sys.exit(1)
if status == "timeout":
    while True:
        time.sleep(3600)
for suffix, stream in ((".out", sys.stdout), (".err", sys.stderr)):
    try:
        stream.write(open(base + suffix, encoding="utf-8", errors="replace").read())
    except FileNotFoundError:
        pass
sys.exit(int(status) if status.lstrip("-").isdigit() else 127)
'''

TOOLS = {
    "nvidia-smi": ("nvidia-smi-",),
    "nvidia-imex-ctl": ("nvidia-imex-ctl-",),
    "ibstat": ("ibstat",),
    "ibv_devinfo": ("ibv_devinfo-",),
    "iblinkinfo": ("iblinkinfo",),
    "ibdev2netdev": ("ibdev2netdev",),
    "perfquery": ("perfquery-x-",),
    "mlnx_qos": ("mlnx_qos-",),
    "systemctl": ("systemctl-show-",),
    "dmesg": ("dmesg",),
    "mlxlink": ("mlxlink-m-", "mlxlink-c-"),
    "ethtool": ("ethtool-m-", "ethtool-S-"),
    "lspci": ("lspci-vvv",),
    "smpquery": ("smpquery-",),
    "ofed_info": ("ofed_info-s",),
    "nv-fabricmanager": ("nv-fabricmanager-version",),
    "lldpctl": ("lldpctl-json",),
    "ip": ("ip-j-addr",),
    "fi_info": ("fi_info-",),
}


def make_fake_tools(snapshot: Path, bin_dir: Path, *, delay_s: float = 0.0) -> Path:
    """Write fake tools for `snapshot` into `bin_dir`; returns bin_dir (put it first on PATH)."""
    commands = snapshot / "commands"
    bin_dir.mkdir(parents=True, exist_ok=True)
    statuses = {path.name.removesuffix(".status"): path.read_text().strip() for path in commands.glob("*.status")}
    for tool, prefixes in TOOLS.items():
        names = [name for name in statuses if any(name == prefix or name.startswith(prefix) for prefix in prefixes)]
        if not names or all(statuses[name] == "missing" for name in names):
            continue
        script = bin_dir / tool
        script.write_text(_SCRIPT.format(python=sys.executable, tool=tool, commands=str(commands), delay=delay_s))
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def path_with(bin_dir: Path) -> str:
    """A PATH with only the fakes and the basic system directories (no real node tools)."""
    return os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])


def live_source_for(fixture: Path, bin_dir: Path, *, record: bool = False, tool_timeout_s: float = 10.0):
    """A live-like source: the fixture's sys/ as the live /sys, its tools as fakes on PATH,
    and its nvml.json as what NVML reports (this machine has no NVIDIA driver)."""
    import json

    from netdoctor.host.live import LiveSource

    make_fake_tools(fixture, bin_dir)
    nvml_path = fixture / "nvml.json"
    nvml_report = (json.loads(nvml_path.read_text()), "ok") if nvml_path.exists() else (None, "no NVIDIA driver: test node")

    nccl_path = fixture / "nccl-env.json"
    nccl_report = json.loads(nccl_path.read_text()) if nccl_path.exists() else None

    class FixtureLiveSource(LiveSource):
        def nccl_env(self):
            if self.recording is not None:
                self.recording.nccl_env = nccl_report
            return nccl_report

        def nvml(self):
            if self.recording is not None:
                self.recording.set_nvml(*nvml_report)
            return nvml_report

    return FixtureLiveSource(sys_root=fixture / "sys", record=record, tool_timeout_s=tool_timeout_s, path_env=path_with(bin_dir))
