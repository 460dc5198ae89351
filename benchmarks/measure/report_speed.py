"""What `mcsa-bench report` costs on a paper-size store, before and after a change to the report: the largest
grid's report (``--sweep``) and every grid's (``--experiment``), each command run in its own process,
the two source trees alternating round by round (docs/scaling.md §9).

The store is the one benchmarks/measure/paper_store.py builds (``--fraction 0.1``: a tenth of the seven grids);
``--before`` is a source tree of mcsa-bench to compare with (e.g. ``git worktree add /tmp/before main``), put
first on the report process's PYTHONPATH; the current tree is the one this script belongs to.

    OMP_NUM_THREADS=1 python benchmarks/measure/report_speed.py --store /tmp/paperstore --before /tmp/before
        [--rounds 3] [--only sweep|experiment|reads] [--label 0.1]

``reads`` times, in a process of its own, only what the report of every grid reads from the store: the
runs, and the histories its figures draw (each grid's result metric and wall_time, for every run).

The results go to benchmarks/results/report_speed_sqlite_<label>.json (label: the store's size, as a
fraction of the paper's grids).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from harness import describe, load_average, machine, save

from mcsa_bench.tracking import store
from mcsa_bench.tracking.record import ROLE_SWEEP, ROLE_TAG, SWEEP_TAG

HERE = Path(__file__).resolve().parents[2]
EXPERIMENT = "paper"  # paper_store.py's experiment
LARGEST_GRID = "stepsize_robustness"  # 6,400 of the 12,060 jobs


#: the mcsa-bench command line
CLI = "import sys; from mcsa_bench.cli import main; sys.exit(main(sys.argv[1:]))"
#: the store reads of the report of every grid, alone: its runs, and the histories its figures draw
READS = f"""
import sys
from mcsa_bench.report.runs import Histories, load_experiment, open_reader
reader = open_reader(sys.argv[1].removeprefix("tracking.uri="))
runs = load_experiment(reader, {EXPERIMENT!r}).runs
histories = Histories(reader, [run.run_id for run in runs])
for metric in ("kl_inclusive", "test_lpd", "log_z", "wall_time"):
    histories(runs[0].run_id, metric)
"""


def commands(uri: str, out: Path) -> dict[str, tuple[str, str, list[str]]]:
    """What is timed (name, program, arguments): the largest grid's report, every grid's, and the reads of
    every grid's report alone."""
    client = store._client(uri)
    experiment_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
    (parent,) = client.search_runs([experiment_id], f"tags.`{SWEEP_TAG}` = '{LARGEST_GRID}' and "
                                   f"tags.`{ROLE_TAG}` = '{ROLE_SWEEP}'")
    tracking = f"tracking.uri={uri}"
    return {"sweep": (f"report --sweep (the {LARGEST_GRID} grid)", CLI,
                      ["report", "--sweep", parent.info.run_id, "--out", str(out / "grid"), tracking]),
            "experiment": ("report --experiment (every grid's runs)", CLI,
                           ["report", "--experiment", EXPERIMENT, "--out", str(out / "all"), tracking]),
            "reads": ("store reads of every grid's report (runs, histories)", READS, [tracking])}


def timed(program: str, arguments: list[str], source: Path, cwd: Path) -> dict[str, float]:
    """Wall and CPU seconds of one process running ``program`` with mcsa_bench imported from ``source``, and
    the 1-minute load average beside it."""
    environment = {**os.environ, "PYTHONPATH": str(source)}
    load = os.getloadavg()[0]
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run([sys.executable, "-c", program, *arguments], cwd=cwd, env=environment,
                            capture_output=True, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(arguments)} ({source}) failed: {result.stderr[-2000:]}")
    return {"wall": wall, "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, required=True, help="paper_store.py's directory (its mlflow.db)")
    parser.add_argument("--before", type=Path, required=True, help="the source tree to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("sweep", "experiment", "reads"), help="time one of them")
    parser.add_argument("--label", default="0.1", help="the results file's suffix: the store's size (default 0.1)")
    args = parser.parse_args()
    directory = args.store.resolve()
    uri = f"sqlite:///{directory / 'mlflow.db'}"
    trees = {"before": args.before.resolve(), "after": HERE}
    load_start, info = load_average(), machine()
    seconds: dict[str, dict[str, list[dict[str, float]]]] = {}
    for key, (name, program, arguments) in commands(uri, directory / "report-speed").items():
        if args.only != key and (args.only is not None or key == "reads"):
            continue
        seconds[name] = {tree: [] for tree in trees}
        for round_number in range(args.rounds):
            order = list(trees) if round_number % 2 == 0 else list(reversed(trees))
            for tree in order:
                sample = timed(program, arguments, trees[tree], directory)
                seconds[name][tree].append(sample)
                print(f"{name:<45} {tree:<6} {sample['wall']:7.1f} s wall {sample['cpu']:6.1f} s CPU "
                      f"(load {sample['load']:.1f})", flush=True)
    print(describe(info, load_start, load_average()))
    for name, by_tree in seconds.items():
        medians = {tree: sorted(s["cpu"] for s in samples)[len(samples) // 2] for tree, samples in by_tree.items()}
        print(f"{name}: median CPU s before {medians['before']:.1f}, after {medians['after']:.1f}")
    save(f"report_speed_sqlite_{args.label}", {"machine": info, "load_average": [load_start, load_average()],
                                     "store": str(directory), "rounds": args.rounds, "seconds": seconds})


if __name__ == "__main__":
    main()
