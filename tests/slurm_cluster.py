"""A real single-host SLURM cluster for tests: private munged, slurmctld, N slurmd "nodes".

Follows the project research notes on a single-host SLURM (slurm-pdsh-local.md): everything lives under one
directory, all daemons run as root, munge is private (`--force`, own socket and key),
each node n1..nN is its own slurmd on its own port, proctrack/linuxproc, no cgroups.
`cred_expire=10` and a 1-2 s scheduler keep a requeued job's delay near 11 s instead of
150 s. Only the PIDs recorded at start are ever signalled.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "sinfo", "sbatch")


def missing_tools() -> list[str]:
    return [tool for tool in DAEMONS if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]


def _free_port_block(count: int) -> int:
    """A base port with `count` consecutive free ports above it (loopback)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count >= 65000:
            continue
        ports_free = True
        for port in range(base, base + count + 1):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    ports_free = False
                    break
        if ports_free:
            return base
    raise RuntimeError("no block of free loopback ports")


def _alive(pid: int) -> bool:
    # A killed daemon lingers as a zombie until PID 1 reaps it; kill -0 would still succeed.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class SlurmCluster:
    directory: Path
    nodes: int = 2
    prolog: Path | None = None
    health_check: Path | None = None
    health_check_interval: int = 5
    pids: dict[str, int] = field(default_factory=dict)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.directory / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def node_names(self) -> list[str]:
        return [f"n{index}" for index in range(1, self.nodes + 1)]

    def start(self) -> None:
        for sub in ("state", "spool", "log", "munge"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        self._start_munge()
        self._write_conf()
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._wait(lambda: "UP" in self.run(["scontrol", "ping"], check=False).stdout, 15, "slurmctld did not come up")
        for name in self.node_names():
            self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-f", str(self.conf), "-N", name])
        self.wait_idle(names=self.node_names(), allow_drain=True)

    def stop(self) -> None:
        order = [name for name in self.pids if name.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            pid = self.pids.pop(name, None)
            if pid is None or not _alive(pid):
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 5
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        for process in self._processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def run(self, argv: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{argv} failed ({done.returncode}): {done.stderr}")
        return done

    def node_state(self, name: str) -> tuple[str, str]:
        """(State=..., Reason=...) of one node, from `scontrol show node -o`."""
        line = self.run(["scontrol", "show", "node", name, "-o"]).stdout
        state = line.split("State=", 1)[1].split()[0]
        reason = line.split("Reason=", 1)[1].rsplit(" [", 1)[0] if "Reason=" in line else ""
        return state, reason

    def wait_idle(self, names: list[str], allow_drain: bool = False, timeout: float = 20) -> None:
        def ready() -> bool:
            for name in names:
                state = self.node_state(name)[0]
                bad = ("*" in state or "UNKNOWN" in state or "DOWN" in state or "NOT_RESPONDING" in state)
                if bad or (not allow_drain and state != "IDLE"):
                    return False
            return True

        self._wait(ready, timeout, f"nodes {names} not idle")

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        self._wait(predicate, timeout, what)

    def log_tail(self) -> str:
        texts = []
        for path in sorted((self.directory / "log").glob("*.log")):
            texts.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(texts)

    # ---- internals ----------------------------------------------------------------------

    def _start_munge(self) -> None:
        munge = self.directory / "munge"
        key = munge / "munge.key"
        if not key.exists():
            subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True, timeout=30)
        munge.chmod(0o711)
        key.chmod(0o600)
        subprocess.run(
            ["munged", "--force", "-S", str(munge / "sock"), f"--key-file={key}", f"--pid-file={munge / 'munged.pid'}",
             f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"],
            check=True, capture_output=True, timeout=30,
        )
        # munged daemonizes itself and writes its own pid.
        self.pids["munged"] = int((munge / "munged.pid").read_text().strip())

    def _write_conf(self) -> None:
        base = _free_port_block(self.nodes + 1)
        host = socket.gethostname().split(".")[0]
        directory = self.directory
        node_ports = f"[{base + 1}-{base + self.nodes}]" if self.nodes > 1 else str(base + 1)
        node_names = f"n[1-{self.nodes}]" if self.nodes > 1 else "n1"
        lines = [
            "ClusterName=nd-test",
            f"SlurmctldHost={host}",
            f"SlurmctldPort={base}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={directory}/munge/sock,cred_expire=10",
            f"StateSaveLocation={directory}/state",
            f"SlurmdSpoolDir={directory}/spool/%n",
            f"SlurmctldPidFile={directory}/state/slurmctld.pid",
            f"SlurmdPidFile={directory}/spool/slurmd-%n.pid",
            f"SlurmctldLogFile={directory}/log/slurmctld.log",
            f"SlurmdLogFile={directory}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=nohold_on_prolog_fail,bf_interval=1,sched_interval=2",
            "PrologEpilogTimeout=60",
        ]
        if self.prolog:
            lines += [f"Prolog={self.prolog}", "PrologFlags=Alloc"]
        if self.health_check:
            lines += [f"HealthCheckProgram={self.health_check}", f"HealthCheckInterval={self.health_check_interval}",
                      "HealthCheckNodeState=ANY"]
        lines += [
            f"NodeName={node_names} NodeHostname={host} NodeAddr=127.0.0.1 Port={node_ports} CPUs=1 "
            "Sockets=1 CoresPerSocket=1 ThreadsPerCore=1 RealMemory=500 State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.directory / "log" / f"{name}.stdout").open("wb")
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, stdin=subprocess.DEVNULL)
        log.close()
        self._processes.append(process)
        self.pids[name] = process.pid

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except (RuntimeError, IndexError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{what} within {timeout} s\n{self.log_tail()}")

