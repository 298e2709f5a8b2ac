"""A one-host Slurm cluster of two nodes for the tests, started and stopped here; nothing is
installed here (scripts/setup.sh installs Debian's ``slurm-wlm`` and ``munge`` under CI).

Everything lives under one temporary folder: a munge key and ``munged`` on its own socket,
``slurm.conf`` (clients find it through ``SLURM_CONF``), ``slurmctld`` and two ``slurmd -N n1`` /
``-N n2`` daemons on this host with ports of their own and ``%n`` in their spool, pid and log
paths; ``proctrack/linuxproc`` and ``task/none`` (no cgroups or systemd needed), one CPU per node
(two 2-node jobs share it, one that asks --exclusive waits for both), the job completion log ``jobcomp/filetxt`` (no slurmdbd: plain
``sacct`` fails and ``sacct -c`` answers). The daemons run as root (``slurmd`` starts jobs as
their users); :func:`why_not` says why a cluster cannot start here, for a loud skip.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "sacct", "scontrol", "sinfo")


def why_not() -> str | None:
    """Why no test cluster can start on this machine (``None``: it can)."""
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if missing:
        return (f"Slurm/munge not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge "
                "(scripts/setup.sh does it under CI or as root)")
    if os.geteuid() != 0:
        return "the one-host Slurm test cluster runs slurmd as root, and this is not root"
    return None


def _exe(name: str) -> str:
    found = shutil.which(name)
    return found or str(Path("/usr/sbin", name))


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class Cluster:
    root: Path
    conf: Path
    env: dict[str, str]

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} -> {proc.returncode}: {proc.stdout}{proc.stderr}")
        return proc

    def squeue(self) -> str:
        return self.run("squeue", "-h", "-o", "%i|%T|%r").stdout

    def idle(self) -> bool:
        return self.squeue().strip() == ""

    def logs(self) -> str:
        out = []
        for p in sorted((self.root / "log").glob("*.log")):
            out.append(f"== {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)


def write_config(root: Path, host: str) -> tuple[Path, dict[str, int]]:
    ctld, d1, d2 = _free_ports(3)
    for sub in ("munge", "state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(f"""\
ClusterName=fttuitest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
KillWait=15
MinJobAge=600
InactiveLimit=0
NodeName=n1 NodeHostname={host} NodeAddr=127.0.0.1 Port={d1} CPUs=2 State=UNKNOWN
NodeName=n2 NodeHostname={host} NodeAddr=127.0.0.1 Port={d2} CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
""")
    return conf, {"slurmctld": ctld, "n1": d1, "n2": d2}


def start(root: Path, timeout: float = 60) -> Cluster:
    """Start munged, slurmctld and the two slurmd; wait until both nodes are idle."""
    host = socket.gethostname().split(".")[0]
    conf, _ports = write_config(root, host)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(128))
    os.chmod(root / "munge", 0o700)
    os.chmod(key, 0o400)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for k in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and k != "SLURM_CONF"]:
        del env[k]  # the suite may itself run inside a Slurm job: these are not that job's
    m = root / "munge"
    subprocess.run([_exe("munged"), "--force", f"--key-file={key}", f"--socket={m}/munge.sock",
                    f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"],
                   env=env, check=True, capture_output=True, timeout=30)
    cluster = Cluster(root, conf, env)
    subprocess.run([_exe("slurmctld"), "-f", str(conf)], env=env, check=True, capture_output=True, timeout=30)
    for node in ("n1", "n2"):
        subprocess.run([_exe("slurmd"), "-f", str(conf), "-N", node], env=env, check=True, capture_output=True,
                       timeout=30)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = cluster.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
        states = dict(line.split() for line in proc.stdout.splitlines() if len(line.split()) == 2)
        if proc.returncode == 0 and states.get("n1") == "idle" and states.get("n2") == "idle":
            return cluster
        time.sleep(0.5)
    stop(cluster)
    raise RuntimeError(f"the test cluster did not come up: sinfo {proc.stdout}{proc.stderr}\n{cluster.logs()}")


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def stop(cluster: Cluster) -> None:
    """Cancel what is left, stop the daemons this module started (by their pid files), wait."""
    cluster.run("scancel", "--user", str(os.getuid()), check=False)
    root = cluster.root
    pids = [p for p in (_pid(root / "slurmd-n1.pid"), _pid(root / "slurmd-n2.pid"), _pid(root / "slurmctld.pid"),
                        _pid(root / "munge" / "munged.pid")) if p]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 20
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
