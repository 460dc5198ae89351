"""Start-up time of the fast CLI paths: ``mcsa-bench plugins``, ``mcsa-bench --help`` (goal: < 1 s)
and ``mcsa-bench run --help``; each command run ``--repeats`` times in a fresh process, medians of
wall time and of the child's CPU time (user + system).

    python benchmarks/measure/startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time

from harness import load_average, machine, save

COMMANDS = (["plugins"], ["--help"], ["run", "--help"])


def once(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    executable = shutil.which("mcsa-bench") or sys.exit("mcsa-bench is not on PATH (activate the venv)")
    info, load_start = machine(), load_average()
    results = []
    print(f"{'command':<28}{'wall s':>8}{'cpu s':>8}")
    for command in COMMANDS:
        once([executable, *command])  # warm the file cache
        samples = [once([executable, *command]) for _ in range(args.repeats)]
        wall, cpu = statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)
        results.append({"command": " ".join(command), "median_wall_s": wall, "median_cpu_s": cpu})
        print(f"{'mcsa-bench ' + ' '.join(command):<28}{wall:8.2f}{cpu:8.2f}", flush=True)
    path = save("startup", {"machine": info, "load_average_start": load_start, "load_average_end": load_average(),
                            "results": results})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
