"""Where a joblib sweep's time goes, stage by stage, in the launching process and in each worker.

Runs the ``short`` sweep of sweep_overhead.py (24 jobs of T = 3000 on pima, 2 workers) through the
real CLI with a ``sitecustomize`` module on PYTHONPATH that times named functions in every process
of the sweep (the launcher and its loky workers), then prints, from the log:

- the launching process: the start of pre-flight, composition, the store, the end of pre-flight,
  the first and last job, the exit;
- each worker: its start, the warm-up, and per job (medians) the stages between receiving a job
  and starting the next: Hydra's set-up and composition, the job's own set-up, the optimization
  with its evaluations (``engine.run``), the job's end, and the gap to the next job.

    python benchmarks/measure/sweep_timeline.py [--sweep short|table]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from harness import load_average, machine, save
from sweep_overhead import ENV, SWEEPS, WORKERS

#: (module, attribute path) of the timed functions and the event name each is logged under
TIMED = {
    ("mcsa_bench.jobs.launch", "preflight"): "preflight",
    ("mcsa_bench.jobs.config", "compose"): "compose",
    ("mcsa_bench.tracking.store", "prepare_store"): "store",
    ("mcsa_bench.jobs.workers", "warm_worker"): "warm_up",
    ("hydra.core.utils", "setup_globals"): "job_received",  # the first call of Hydra's execute_job
    ("hydra.core.utils", "run_job"): "hydra_run_job",
    ("mcsa_bench.jobs.job", "_run_tracked_job"): "job",
    ("mcsa_bench.engine.loop", "run"): "engine",
}

SITECUSTOMIZE = '''
import functools, importlib.abc, importlib.machinery, os, sys, time
LOG, TIMED = os.environ["SWEEP_TIMELINE_LOG"], {timed!r}

def mark(event):
    with open(LOG, "a") as log:
        log.write(f"{{time.time():.4f}} {{os.getpid()}} {{event}}\\n")

def timed(function, event):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        mark(event + ">")
        try:
            return function(*args, **kwargs)
        finally:
            mark(event + "<")
    return wrapper

class Timing(importlib.abc.MetaPathFinder):
    """Wraps the timed functions of a module once it has executed (before anyone imports names from it)."""
    def find_spec(self, name, path, target=None):
        if not any(module == name for module, _ in TIMED):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module
            def exec_module(module):
                execute(module)
                for (module_name, attribute), event in TIMED.items():
                    if module_name == name:
                        setattr(module, attribute, timed(getattr(module, attribute), event))
            spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Timing())
mark("process_start")
import atexit
atexit.register(mark, "process_exit")
'''


def run(sweep: str) -> tuple[float, list[tuple[float, int, str]]]:
    with tempfile.TemporaryDirectory(prefix="mcsa-timeline-") as directory:
        Path(directory, "sitecustomize.py").write_text(SITECUSTOMIZE.format(timed=TIMED))
        log = Path(directory, "timeline.log")
        env = {**ENV, "PYTHONPATH": os.pathsep.join(filter(None, [directory, ENV.get("PYTHONPATH")])),
               "SWEEP_TIMELINE_LOG": str(log)}
        command = [sys.executable, "-m", "mcsa_bench.cli", "run", "-m", *SWEEPS[sweep], "hydra/launcher=joblib",
                   f"hydra.launcher.n_jobs={WORKERS}", f"tracking.uri=sqlite:///{directory}/mlflow.db",
                   f"hydra.sweep.dir={directory}/sweep"]
        started = time.time()
        done = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"exit {done.returncode}\n{done.stderr[-2000:]}")
        lines = [line.split() for line in log.read_text().splitlines()]
        return started, [(float(t) - started, int(pid), event) for t, pid, event in lines]


def stages(events: list[tuple[float, int, str]]) -> dict:
    """The launching process's milestones and each worker's median stage durations (seconds)."""
    by_pid: dict[int, list[tuple[float, str]]] = defaultdict(list)
    for t, pid, event in events:
        by_pid[pid].append((t, event))
    launcher = min(by_pid, key=lambda pid: by_pid[pid][0][0])
    first = {event: t for t, event in reversed(by_pid[launcher])}
    last = {event: t for t, event in by_pid[launcher]}
    result = {"launcher": {name: first.get(event) for name, event in [
        ("preflight_start", "preflight>"), ("composed", "compose<"), ("store_start", "store>"),
        ("store_end", "store<"), ("preflight_end", "preflight<")]} | {"exit": last.get("process_exit")}}
    workers = {}
    for pid, timeline in by_pid.items():
        times = defaultdict(list)
        for t, event in timeline:
            times[event].append(t)
        if not times["job>"]:
            continue
        received, hydra, job, engine, engine_end, job_end = (
            times[e] for e in ("job_received>", "hydra_run_job>", "job>", "engine>", "engine<", "job<"))
        median = lambda pairs: statistics.median(b - a for a, b in pairs)  # noqa: E731
        workers[pid] = {
            "start": timeline[0][0], "warm_up_s": (times["warm_up<"] or [0])[0] - (times["warm_up>"] or [0])[0],
            "first_engine": engine[0], "last_job_end": job_end[-1], "jobs": len(job),
            "compose_and_hydra_s": median(zip(received, job)),  # Hydra: the job's composition, run_job's set-up
            "job_set_up_s": median(zip(job, engine)),
            "engine_s": median(zip(engine, engine_end)),
            "job_end_s": median(zip(engine_end, job_end)),
            "gap_s": median(zip(job_end, received[1:])) if len(received) > 1 else None,
        }
    result["workers"] = workers
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", default="short", choices=["short", "table"])
    args = parser.parse_args()
    info, load_start = machine(), load_average()
    _, events = run(args.sweep)
    result = stages(events)
    launcher = result["launcher"]
    print("launching process (s from the command's start): " + ", ".join(
        f"{name} {value:.2f}" for name, value in launcher.items() if value is not None))
    print(f"{'worker':>8}{'start':>7}{'warm-up':>9}{'1st job':>9}{'last end':>10}{'jobs':>6}"
          f"{'Hydra':>8}{'set-up':>8}{'engine':>8}{'end':>7}{'gap':>7}   (per job: medians, s)")
    for pid, w in result["workers"].items():
        print(f"{pid:8d}{w['start']:7.2f}{w['warm_up_s']:9.2f}{w['first_engine']:9.2f}{w['last_job_end']:10.2f}"
              f"{w['jobs']:6d}{w['compose_and_hydra_s']:8.3f}{w['job_set_up_s']:8.3f}{w['engine_s']:8.3f}"
              f"{w['job_end_s']:7.3f}{(w['gap_s'] or 0):7.3f}")
    print(f"load average {load_start} -> {load_average()}")
    path = save(f"sweep_timeline_{args.sweep}", {"machine": info, "load_average_start": load_start,
                                                 "load_average_end": load_average(), **result})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
