"""A one-node SLURM cluster for the tests: munged, slurmctld and slurmd on localhost.

The daemons run as root on free ports; their state, spool, logs and the munge key and
socket live in a fresh temporary folder. The configuration goes where SLURM's commands
look for it, /etc/slurm/slurm.conf and gres.conf (written only where neither exists, and
removed afterwards): inside a job the jobstep executor drops every SLURM_* variable but
the job's identity before calling srun, SLURM_CONF included, as on a real cluster. The
node says it has 16 CPUs, 256 GB and one GPU (`SlurmdParameters=config_overrides`, a
gres.conf whose GPU is /dev/null), so jobs ask for what profiles/slurm asks for on a real
cluster: SLURM allocates the GPU and sets CUDA_VISIBLE_DEVICES, with no GPU behind it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scontrol", "srun", "scancel")
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
SYSTEM_GRES = Path("/etc/slurm/gres.conf")


def missing() -> str | None:
    """Why a cluster cannot be started here (a skip reason), or None."""
    if os.geteuid() != 0:
        return "starting slurmctld and slurmd needs root"
    absent = [name for name in DAEMONS + CLIENTS if shutil.which(name, path=_sbin_path()) is None]
    if absent:
        return f"needs the Debian packages slurm-wlm and munge (.ci/run installs them); missing: {', '.join(absent)}"
    for path in (SYSTEM_CONF, SYSTEM_GRES):
        if path.exists() or path.is_symlink():
            return f"{path} exists: this machine has a SLURM configuration of its own"
    return None


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_config(root: Path) -> Path:
    """slurm.conf and gres.conf in /etc/slurm for a node `localhost` with partitions cpu (default) and gpu."""
    for sub in ("state", "spool", "log", "run"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
    SYSTEM_CONF.write_text("\n".join([
        "ClusterName=metrobench-test",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'run' / 'munge.socket'}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",  # no cgroups
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",  # no slurmdbd: no sacct, squeue only
        "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        "SlurmdParameters=config_overrides",  # the node is what this file says, not the machine
        "GresTypes=gpu",
        "MpiDefault=none",
        "ReturnToService=2",
        "MinJobAge=3600",  # finished jobs stay visible to squeue (the executor) and to the test
        "NodeName=localhost NodeAddr=127.0.0.1 CPUs=16 RealMemory=262144 Gres=gpu:1 State=UNKNOWN",
        "PartitionName=cpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=gpu Nodes=localhost MaxTime=INFINITE State=UP",
        "",
    ]))
    SYSTEM_GRES.write_text("NodeName=localhost Name=gpu File=/dev/null\n")
    return SYSTEM_CONF


def cluster_env(conf: Path) -> dict[str, str]:
    """The environment of a SLURM client of this cluster (no SLURM_* variables of an outer job)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    env["SLURM_CONF"] = str(conf)
    env["PATH"] = _sbin_path()
    return env


def _start_munged(root: Path, env: dict[str, str]) -> subprocess.Popen:
    key_dir = root / "munge"
    key_dir.mkdir(mode=0o700)
    key = key_dir / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o600)
    for folder in (root, root / "run"):
        folder.chmod(0o755)  # munged wants its socket reachable by every user
    socket_path = root / "run" / "munge.socket"
    proc = subprocess.Popen(
        ["munged", "--foreground", "--force", f"--socket={socket_path}", f"--key-file={key}",
         f"--log-file={root / 'log' / 'munged.log'}", f"--pid-file={key_dir / 'munged.pid'}",
         f"--seed-file={key_dir / 'munged.seed'}"],
        env=env, stdout=subprocess.DEVNULL, stderr=(root / "log" / "munged.out").open("w"))
    _wait(lambda: _running([proc], root) and socket_path.exists(), 20, "munged did not create its socket", root)
    return proc


def _node_states(env: dict[str, str]) -> list[str]:
    done = subprocess.run(["sinfo", "--noheader", "--format=%P %T"], env=env,
                          capture_output=True, text=True, timeout=20)
    return done.stdout.split() if done.returncode == 0 else []


def _wait(ready: Callable[[], bool], seconds: float, what: str, root: Path) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {seconds:.0f} s\n{log_tail(root)}")
        time.sleep(0.5)


def log_tail(root: Path, lines: int = 20) -> str:
    """The last lines of every daemon log, for a failure message."""
    parts = []
    for path in sorted((root / "log").glob("*")):
        text = path.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {path.name}\n" + "\n".join(text))
    return "\n".join(parts)


def _running(procs: list[subprocess.Popen], root: Path) -> bool:
    dead = [str(proc.args[0]) for proc in procs if proc.poll() is not None]
    if dead:
        raise RuntimeError(f"{', '.join(dead)} exited\n{log_tail(root)}")
    return True


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
    for proc in reversed(procs):
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class Cluster(NamedTuple):
    env: dict[str, str]  # a SLURM client's environment
    root: Path           # state, spool, logs (log/), munge key and socket


@contextmanager
def single_node_cluster() -> Iterator[Cluster]:
    """Start the cluster, wait until its node is idle, yield a client environment; then stop it.

    Its folder is short-named under the system's temporary directory (a munge socket's path
    must fit in 108 bytes); it and the two files in /etc/slurm are removed afterwards.
    """
    reason = missing()
    if reason:
        raise RuntimeError(reason)
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="metrobench-slurm-") as folder:
        root = Path(folder)
        try:
            env = cluster_env(write_config(root))
            procs.append(_start_munged(root, env))
            for command in (["slurmctld", "-D", "-c"], ["slurmd", "-D", "-N", "localhost"]):
                out = (root / "log" / f"{command[0]}.out").open("w")
                procs.append(subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT))
            _wait(lambda: _running(procs, root) and _node_states(env) == ["cpu*", "idle", "gpu", "idle"],
                  60, "the node did not become idle", root)
            yield Cluster(env, root)
        finally:
            _stop(procs)
            for path in (SYSTEM_CONF, SYSTEM_GRES):
                path.unlink(missing_ok=True)
