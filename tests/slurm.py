"""A real single-node Slurm for the tests: Debian's `slurm-wlm` and `munge`, started from a temporary folder.

munged (its own key and socket), slurmctld and slurmd run from a generated `slurm.conf` whose state,
spool, pid and log files all lie in that folder, on free loopback ports; `SLURM_CONF` points `sbatch`,
`squeue` and `scancel` at it, as on a cluster's login node. Without accounting (no slurmdbd), which
`builder.cluster` does not need. Processes are tracked by process group (`proctrack/pgid`): with
`linuxproc` here, a job's process that outlived its batch shell after `scancel` (submitit's jobs ignore
SIGTERM, as preemption sends it first) was never killed, where a cluster's cgroups kill it. Stopped by
the daemons' pid files, never by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sinfo", "sbatch", "squeue", "scancel", "mungekey")
MIN_CPUS = 4
UP_TIMEOUT_S = 120  # a bound on waiting for the node to come up idle, not a measure


class SlurmUnavailable(RuntimeError):
    """No Slurm or munge binaries here, not running as root (the test cluster's daemons run as root), or a cluster
    that did not come up (with its daemons' log tails)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _which(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if not found:
        raise SlurmUnavailable(f"no `{name}` (Debian: apt-get install -y slurm-wlm munge)")
    return found


def _node() -> str:
    """This machine as a Slurm node (`slurmd -C`'s name and memory), with at least `MIN_CPUS` CPUs.

    `SlurmdParameters=config_overrides` lets slurmd take a count larger than the machine's, so that the tests'
    array tasks (one CPU each) run side by side on a one- or two-core CI machine.
    """
    line = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
    cpus, memory = max(int(fields["CPUs"]), MIN_CPUS), max(int(fields["RealMemory"]) - 512, 256)
    return f"NodeName={fields['NodeName']} CPUs={cpus} RealMemory={memory} NodeAddr=127.0.0.1 State=UNKNOWN"


class SlurmCluster:
    """Start with `SlurmCluster.start()`; `env` is what a client needs (`SLURM_CONF`); `stop()` ends it all."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.socket = root / "munge" / "munge.socket"
        self.env = {"SLURM_CONF": str(self.conf)}

    @classmethod
    def start(cls) -> SlurmCluster:
        for name in DAEMONS:
            _which(name)
        if os.geteuid() != 0:
            raise SlurmUnavailable("the test cluster runs its daemons as root (SlurmUser=root); run the tests as root")
        cluster = cls(Path(tempfile.mkdtemp(prefix="builder-slurm-")))
        try:
            cluster._munge()
            cluster._configure()
            cluster._daemon("slurmctld", "slurmctld", "-f", str(cluster.conf), "-L", str(cluster.root / "slurmctld.log"))
            cluster._daemon("slurmd", "slurmd", "-f", str(cluster.conf), "-L", str(cluster.root / "slurmd.log"))
            cluster._wait_idle()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _munge(self) -> None:
        d = self.root / "munge"
        d.mkdir(mode=0o700)
        key = d / "munge.key"
        made = subprocess.run([_which("mungekey"), "--create", "--keyfile", str(key)], capture_output=True, text=True)
        if made.returncode:
            raise SlurmUnavailable(f"mungekey could not make a key: {made.stderr.strip()}")
        self._daemon("munged", "munged", "--force", f"--socket={self.socket}", f"--key-file={key}",
                     f"--pid-file={d / 'munged.pid'}", f"--log-file={d / 'munged.log'}", f"--seed-file={d / 'munged.seed'}")

    def _configure(self) -> None:
        for sub in ("state", "spool"):
            (self.root / sub).mkdir()
        host, node = socket.gethostname(), _node()
        ctld, slurmd = _free_port(), _free_port()
        self.conf.write_text("\n".join([
            "ClusterName=builder-test",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld}",
            f"SlurmdPort={slurmd}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "MpiDefault=none",
            "KillWait=5",
            "InactiveLimit=0",
            "MinJobAge=3600",  # finished jobs stay known to squeue a while (no accounting to ask)
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'slurmd.log'}",
            node,
            f"PartitionName=debug Nodes={node.split()[0].split('=')[1]} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def _daemon(self, name: str, *args: str) -> None:
        done = subprocess.run([_which(args[0]), *args[1:]], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              env={**os.environ, **self.env}, timeout=60)
        if done.returncode:
            raise SlurmUnavailable(f"{name} did not start ({done.returncode}): {done.stderr.strip()}\n{self.log_tails()}")

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """A Slurm client command (`sinfo`, `squeue`, `scancel`, `sbatch`) against this cluster."""
        return subprocess.run([_which(args[0]), *args[1:]], capture_output=True, text=True, check=check,
                              env={**os.environ, **self.env}, timeout=60)

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + UP_TIMEOUT_S
        state = ""
        while time.monotonic() < deadline:
            state = self.run("sinfo", "--noheader", "--format=%T", check=False).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.5)
        raise SlurmUnavailable(f"the Slurm node never came up idle within {UP_TIMEOUT_S} s (sinfo: {state!r})\n{self.log_tails()}")

    def log_tails(self, chars: int = 1500) -> str:
        logs = [self.root / "slurmctld.log", self.root / "slurmd.log", self.root / "munge" / "munged.log"]
        return "\n".join(f"--- {p.name}:\n{p.read_text(errors='replace')[-chars:]}" for p in logs if p.is_file())

    def stop(self) -> None:
        """End the daemons by their pid files (slurmd, slurmctld, then munged), waiting for each to go."""
        for pidfile in (self.root / "slurmd.pid", self.root / "slurmctld.pid", self.root / "munge" / "munged.pid"):
            try:
                pid = int(pidfile.read_text().strip())
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError):
                continue
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)
