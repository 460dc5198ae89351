"""Start-up time of the CLI: the fast paths ``mcsa-bench plugins`` and ``--help`` (goal: < 1 s), ``run --help``,
``run --cfg job`` (composes and prints one job, runs nothing; goal: < 3 s on a quiet 2-core machine) and a single
2,000-iteration run of the default Gaussian setting on a store that exists (goal: < 5 s; about 0.5 s of it is
the optimization). Each command runs ``--repeats`` times in a fresh process; medians of wall time and of the
child's CPU time (user + system, its own children included), with the load average beside every sample.

``--against DIR`` times another checkout's code too (e.g. ``git worktree add /tmp/before <commit>``), the two
alternating command by command (A B, then B A), so that both see the same load; the ratios are medians over
the pairs, of CPU time (robust to load) and of wall time.

    python benchmarks/measure/startup.py [--repeats 7] [--against DIR] [--commands cfg,single]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import load_average, machine, save

ROOT = Path(__file__).resolve().parents[2]
#: name -> the command's arguments
COMMANDS = {
    "plugins": ["plugins"],
    "help": ["--help"],
    "run-help": ["run", "--help"],
    "cfg": ["run", "--cfg", "job"],
    "single": ["run", "n_iters=2000"],
}
#: the program as the installed ``mcsa-bench`` script runs it, from the checkout on PYTHONPATH
PROGRAM = "from mcsa_bench.cli import program; program()"


def once(checkout: Path, argv: list[str], cwd: Path) -> dict:
    """One fresh process of ``checkout``'s CLI: wall and CPU seconds, and the load average before it."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    load = load_average()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", PROGRAM, *argv], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "load": load}


def summary(samples: list[dict]) -> dict:
    return {"median_wall_s": statistics.median(s["wall_s"] for s in samples),
            "median_cpu_s": statistics.median(s["cpu_s"] for s in samples), "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--against", type=Path, help="another checkout to time alternately with this one")
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"comma-separated, of {', '.join(COMMANDS)}")
    parser.add_argument("--name", default="startup", help="results file name (benchmarks/results/<name>.json)")
    args = parser.parse_args()
    checkouts = {"this": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    info, load_start = machine(), load_average()
    results = []
    print(f"{'command':<26}" + "".join(f"{name + ' wall':>14}{name + ' cpu':>13}" for name in checkouts)
          + ("  cpu ratio  wall ratio" if args.against else ""))
    with tempfile.TemporaryDirectory(prefix="mcsa-startup-") as work:
        for name in args.commands.split(","):
            argv = COMMANDS[name]
            cwds = {}
            for label, checkout in checkouts.items():  # warm the file cache; a run creates its store here
                cwds[label] = Path(work) / f"{name}-{label}"
                cwds[label].mkdir()
                once(checkout, argv, cwds[label])
            samples: dict[str, list[dict]] = {label: [] for label in checkouts}
            for r in range(args.repeats):
                for label in list(checkouts) if r % 2 == 0 else reversed(list(checkouts)):
                    samples[label].append(once(checkouts[label], argv, cwds[label]))
            row = {"command": " ".join(argv), **{label: summary(s) for label, s in samples.items()}}
            line = f"{'mcsa-bench ' + ' '.join(argv):<26}" + "".join(
                f"{row[label]['median_wall_s']:14.2f}{row[label]['median_cpu_s']:13.2f}" for label in checkouts)
            if args.against:
                pairs = list(zip(samples["this"], samples["against"]))
                row["cpu_ratio"] = statistics.median(a["cpu_s"] / b["cpu_s"] for a, b in pairs)
                row["wall_ratio"] = statistics.median(a["wall_s"] / b["wall_s"] for a, b in pairs)
                line += f"{row['cpu_ratio']:11.2f}{row['wall_ratio']:12.2f}"
            results.append(row)
            print(line, flush=True)
    load_end = load_average()
    print(f"# load average {load_start} -> {load_end}")
    path = save(args.name, {"machine": info, "checkouts": {k: str(v) for k, v in checkouts.items()},
                            "load_average_start": load_start, "load_average_end": load_end, "results": results})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
