"""A real single-node Slurm cluster for the tests: Debian's slurmctld and slurmd with a munged of its
own, all in one temporary directory (slurm.conf, key, socket, state, spool, logs), listening on
127.0.0.1 only, stopped and deleted afterwards (tests/e2e/test_slurm.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support import free_port

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "srun")
#: the seconds a daemon has to start, or to end after SIGTERM
DAEMON_SECONDS = 60

SLURM_CONF = """\
ClusterName=mcsatest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
# every daemon and client binds to the address of its host's name (127.0.0.1), not to every interface
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={directory}/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={directory}/state
SlurmdSpoolDir={directory}/spool
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile={directory}/slurmd.pid
SlurmctldLogFile={directory}/log/slurmctld.log
SlurmdLogFile={directory}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
# the node's CPUs as configured here, not as found (a 2-core machine runs {cpus} one-CPU tasks)
SlurmdParameters=config_overrides
MaxArraySize={max_array_size}
KillWait=5
MinJobAge=600
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def slurm_missing() -> str | None:
    """Why the test cluster cannot run here, or None."""
    missing = [program for program in PROGRAMS if shutil.which(program) is None]
    if missing:
        return (
            f"Slurm and munge are not installed ({', '.join(missing)} missing): apt-get install slurmctld slurmd munge"
        )
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (slurmd starts every job's processes)"
    return None


class SlurmCluster:
    """One slurmctld, one slurmd (node ``localhost``, ``cpus`` CPUs) and a munged, in a fresh
    directory; ``env`` points Slurm's commands at it. ``stop()`` cancels every job, ends the daemons
    (SIGTERM, then SIGKILL) and deletes the directory."""

    def __init__(self, max_array_size: int, cpus: int = 4):
        self.directory = Path(tempfile.mkdtemp(prefix="mcsa-slurm-"))  # munged wants every parent searchable
        self.directory.chmod(0o755)
        for part in ("munge", "state", "spool", "log"):
            (self.directory / part).mkdir(mode=0o755)
        self.conf = self.directory / "slurm.conf"
        self.conf.write_text(SLURM_CONF.format(directory=self.directory, ctld_port=free_port(),
                                               slurmd_port=free_port(), max_array_size=max_array_size, cpus=cpus))
        self.env = {"SLURM_CONF": str(self.conf)}
        self.daemons: dict[str, subprocess.Popen] = {}

    def start(self) -> SlurmCluster:
        try:
            key = self.directory / "munge" / "munge.key"
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
            munge = self.directory / "munge"
            self._start("munged", "--foreground", f"--socket={munge}/munge.socket", f"--key-file={key}",
                        f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/munged.seed",
                        f"--log-file={munge}/munged.log")
            self._wait_for(lambda: (munge / "munge.socket").exists(), "munged's socket")
            self._start("slurmctld", "-D")
            self._start("slurmd", "-D", "-N", "localhost")
            self._wait_for(lambda: self.command("sinfo", "--noheader", "--format=%T", check=False).strip() == "idle",
                           "the node to be idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, program: str, *args: str) -> None:
        log = open(self.directory / "log" / f"{program}.out", "ab")
        self.daemons[program] = subprocess.Popen([program, *args], stdout=log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True,
                                                 env={**os.environ, **self.env})
        log.close()

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + DAEMON_SECONDS
        while not ready():
            ended = [f"{name} exited with {process.returncode}" for name, process in self.daemons.items()
                     if process.poll() is not None]
            if ended or time.monotonic() > deadline:
                raise AssertionError(f"the Slurm test cluster did not start ({'; '.join(ended) or 'timed out'} "
                                     f"waiting for {what}):\n{self.logs()}")
            time.sleep(0.3)

    def logs(self) -> str:
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-1500:]}"
                         for path in sorted((self.directory / "log").glob("*")) if path.is_file())

    def command(self, *args: str, check: bool = True) -> str:
        """A Slurm command against this cluster; its standard output."""
        result = subprocess.run(args, capture_output=True, text=True, timeout=60, env={**os.environ, **self.env})
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result.stdout

    def jobs(self) -> list[dict[str, str]]:
        """Every job and array task slurmctld knows (ended ones for MinJobAge), as `scontrol show job`'s fields."""
        listing = self.command("scontrol", "show", "job", "--oneliner", check=False)
        return [dict(field.split("=", 1) for field in line.split() if "=" in field)
                for line in listing.splitlines() if line.startswith("JobId=")]

    def queued(self) -> list[str]:
        """The tasks pending, running or completing, as ``JOB_TASK``."""
        return self.command("squeue", "--noheader", "--array", "--format=%i").split()

    def stop(self) -> None:
        """Cancel every job and wait for the queue to empty, end the daemons, delete the directory."""
        try:
            if all(process.poll() is None for process in self.daemons.values()) and len(self.daemons) == 3:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._cancel_every_job()
        finally:
            try:
                for name in reversed(list(self.daemons)):  # slurmd, slurmctld, then munged
                    _end(self.daemons[name])
            finally:
                shutil.rmtree(self.directory, ignore_errors=True)

    def _cancel_every_job(self) -> None:
        """So that no job's processes (slurmstepd and its tasks, not the daemons' children) outlive the cluster."""
        self.command("scancel", "--full", "--user=root", check=False)
        deadline = time.monotonic() + DAEMON_SECONDS
        while self.command("squeue", "--noheader", check=False).strip() and time.monotonic() < deadline:
            time.sleep(0.5)


def _end(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=DAEMON_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=DAEMON_SECONDS)
