"""Hydra's Slurm launcher (hydra-submitit-launcher) on a real cluster (docs/scaling.md §3).

The launcher submits a sweep as one job array through submitit and waits for its tasks. In the
launching process, :func:`slurm_arrays` mends what goes wrong on a real cluster:

- Slurm refuses an array whose task ids reach MaxArraySize, or with more tasks than
  SchedulerParameters' ``max_array_tasks`` ("Invalid job array specification"). The sweep is
  submitted as consecutive arrays that fit, and ``array_parallelism``, the sweep's limit on tasks
  running at once, is shared between them.
- submitit asks ``sacct`` for the tasks' states. On a cluster without accounting storage
  (``AccountingStorageType=accounting_storage/none``) that fails, and a task that ends without a
  result (scancel, a node failure, out of memory) would be waited for forever: there the states come
  from ``squeue``, and a task that left the queue has ended.
- Ctrl-C or SIGTERM on the launching process cancels every array it submitted (scancel) and waits,
  boundedly, until their tasks have left the queue, so that each task has marked its run KILLED. A
  task that ends without a result (the launcher raises) leaves the others running: the launching
  process waits for them before it reports.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from unittest import mock

from mcsa_bench.api import ConfigurationError
from mcsa_bench.tracking.lifecycle import signals_deferred

SLURM_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
#: how long a command of Slurm's may take to answer
COMMAND_SECONDS = 60
#: the state given to a task that left the queue (Slurm keeps ended jobs there for MinJobAge seconds)
LEFT_THE_QUEUE = "ENDED"


@dataclass(frozen=True)
class ClusterLimits:
    """What the cluster's configuration (``scontrol show config``) allows a sweep."""

    array_tasks: int  # the most tasks in one array (1: arrays are disabled, every task is a job)
    accounting: bool  # whether sacct answers (accounting storage is configured)
    kill_wait: int  # seconds between a cancelled task's SIGTERM and its SIGKILL

    @classmethod
    def parse(cls, config: str) -> ClusterLimits:
        values = dict(line.split("=", 1) for line in config.splitlines() if "=" in line)
        values = {key.strip(): value.strip() for key, value in values.items()}
        max_array_size = int(values.get("MaxArraySize", "1001"))  # task ids 0 .. MaxArraySize - 1
        options = dict(option.partition("=")[::2] for option in values.get("SchedulerParameters", "").split(","))
        array_tasks = min(max_array_size, int(options.get("max_array_tasks") or max_array_size))
        kill_wait = int(values.get("KillWait", "30 sec").split()[0])
        return cls(max(array_tasks, 1), values.get("AccountingStorageType") != "accounting_storage/none", kill_wait)


def read_limits() -> ClusterLimits:
    """The cluster's limits; a machine that cannot ask Slurm is one line of error."""
    try:
        result = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                                timeout=COMMAND_SECONDS)
    except FileNotFoundError:
        raise ConfigurationError("hydra/launcher=submitit_slurm needs Slurm's commands (scontrol, sbatch), which "
                                 "are not on PATH: run the sweep on a machine of the cluster, or try it here with "
                                 "hydra/launcher=submitit_local") from None
    except subprocess.TimeoutExpired:
        raise ConfigurationError(f"hydra/launcher=submitit_slurm: `scontrol show config` did not answer within "
                                 f"{COMMAND_SECONDS} s: is slurmctld running?") from None
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        raise ConfigurationError(f"hydra/launcher=submitit_slurm: `scontrol show config` failed ({reason}); "
                                 "is slurmctld running, and SLURM_CONF the cluster's?")
    return ClusterLimits.parse(result.stdout)


def split(n_tasks: int, array_tasks: int) -> list[range]:
    """Consecutive ranges of the sweep's tasks, each at most ``array_tasks`` long."""
    return [range(start, min(start + array_tasks, n_tasks)) for start in range(0, n_tasks, array_tasks)]


def shares(parallelism: int, n_arrays: int) -> list[int]:
    """``parallelism`` running tasks shared between ``n_arrays`` arrays, each at least one (so the
    sweep runs at most max(parallelism, n_arrays) tasks at once)."""
    return [max(1, parallelism // n_arrays + (i < parallelism % n_arrays)) for i in range(n_arrays)]


def queued(job_ids: set[str]) -> list[str]:
    """The tasks of the jobs ``job_ids`` still pending, running or completing, as ``JOB_TASK``."""
    listing = _squeue("--format=%i")
    return [task for task in listing if task.split("_")[0] in job_ids]


def _squeue(*options: str) -> list[str]:
    result = subprocess.run(["squeue", "--me", "--noheader", "--array", *options], capture_output=True, text=True,
                            timeout=COMMAND_SECONDS, check=True)
    return result.stdout.split()


class SubmittedArrays:
    """The sweep's submissions through submitit's Slurm executor, split into arrays that fit."""

    def __init__(self, limits: ClusterLimits, submit):
        self.limits, self._submit = limits, submit  # submit: SlurmExecutor._internal_process_submissions
        self.job_ids: list[str] = []

    def submit(self, executor, delayed: list) -> list:
        """In place of ``SlurmExecutor._internal_process_submissions``: one array per part."""
        parts = split(len(delayed), self.limits.array_tasks)
        parallelism = executor.parameters.get("array_parallelism", 256)
        jobs = []
        try:
            for part, share in zip(parts, shares(parallelism, len(parts))):
                executor.parameters["array_parallelism"] = share
                with signals_deferred():  # the array's id is known before a signal is handled
                    submitted = self._submit(executor, delayed[part.start:part.stop])
                    self.job_ids.append(submitted[0].job_id.split("_")[0])
                jobs += submitted
        except BaseException:  # a part refused, or interrupted: nothing of the sweep runs on
            self.cancel()
            raise
        finally:
            executor.parameters["array_parallelism"] = parallelism
        if len(parts) > 1:
            print(f"Slurm: {len(delayed)} jobs in {len(parts)} arrays of at most {self.limits.array_tasks} tasks "
                  f"(the cluster's limit), array_parallelism {parallelism} shared as "
                  f"{'+'.join(map(str, shares(parallelism, len(parts))))}: jobs {', '.join(self.job_ids)}", flush=True)
        return jobs

    def cancel(self) -> None:
        """scancel every array submitted, then wait (up to KillWait and a minute) until they left the queue."""
        if not self.job_ids:
            return
        subprocess.run(["scancel", *self.job_ids], capture_output=True, timeout=COMMAND_SECONDS)
        if not self._wait(self.limits.kill_wait + 60):
            print(f"mcsa-bench: Slurm jobs {', '.join(self.job_ids)} were cancelled but are still in the queue",
                  file=sys.stderr)

    def wait(self) -> None:
        """Until no task of the sweep is pending or running any more."""
        if self.job_ids and not self._wait(0):
            print("Slurm: a job of the sweep ended without a result; waiting for the others to end",
                  file=sys.stderr, flush=True)
            self._wait(None)

    def _wait(self, seconds: float | None) -> bool:
        """Whether the sweep's tasks left the queue within ``seconds`` (None: however long it takes)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            with contextlib.suppress(subprocess.SubprocessError):
                if not queued(set(self.job_ids)):
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(1)


def read_queue(watcher, output: str | bytes) -> dict[str, dict[str, str]]:
    """In place of submitit's reading of sacct: the states from ``squeue``'s listing, and those of
    the watched tasks no longer in it (:data:`LEFT_THE_QUEUE`)."""
    text = output.decode() if isinstance(output, bytes) else output
    states = {}
    for line in text.split():
        task, state, nodes = (line.split("|") + ["", ""])[:3]
        states[task] = {"JobID": task, "State": state, "NodeList": nodes}
    gone = {task: {"JobID": task, "State": LEFT_THE_QUEUE} for task in watcher._registered - watcher._finished
            if task not in states}
    return {**states, **gone}


def queue_command(watcher) -> list[str] | None:
    """In place of submitit's sacct command: the user's jobs in the queue, ended ones included."""
    if not watcher._registered - watcher._finished:
        return None
    return ["squeue", "--me", "--noheader", "--array", "--states=all", "--format=%i|%T|%N"]


@contextlib.contextmanager
def slurm_arrays(limits: ClusterLimits | None) -> Iterator[None]:
    """While Hydra's Slurm launcher runs (``limits``: the cluster's; None: another launcher)."""
    if limits is None:
        yield
        return
    from submitit.slurm.slurm import SlurmExecutor, SlurmInfoWatcher

    arrays = SubmittedArrays(limits, SlurmExecutor._internal_process_submissions)
    with contextlib.ExitStack() as patches:
        patches.enter_context(mock.patch.object(SlurmExecutor, "_internal_process_submissions",
                                                lambda executor, delayed: arrays.submit(executor, delayed)))
        if not limits.accounting:
            patches.enter_context(mock.patch.object(SlurmInfoWatcher, "_make_command", queue_command))
            patches.enter_context(mock.patch.object(SlurmInfoWatcher, "read_info", read_queue))
        try:
            yield
        except KeyboardInterrupt:
            arrays.cancel()
            raise
        except Exception:
            arrays.wait()
            raise
