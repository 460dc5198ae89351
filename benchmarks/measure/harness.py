"""What every benchmark script shares: interleaved timing, the machine's description, JSON results.

A measurement compares blocks (e.g. engine iterations vs the bare work, before vs after). On a
shared machine the load drifts, so the blocks alternate within each round (A B, then B A), a
warm-up round is discarded, and per-iteration CPU time (``time.process_time``) and wall time are
reported as medians over the rounds, with ratios of those medians and the median of the rounds'
own ratios (paired: the two blocks of a round ran back to back). CPU time is the robust one when
other processes compete for the cores; wall time shows what a user waits.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


@dataclass(frozen=True)
class Sample:
    """One block: CPU and wall seconds spent in ``iterations`` iterations."""

    cpu: float
    wall: float
    iterations: int


#: a block runs some iterations and measures itself (so that it can exclude set-up work)
Block = Callable[[], Sample]


def timed(step: Callable[[], object], iterations: int) -> Sample:
    """A block that calls ``step`` ``iterations`` times."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(iterations):
        step()
    return Sample(time.process_time() - cpu, time.perf_counter() - wall, iterations)


@dataclass
class Series:
    """Per-iteration seconds of one block over the rounds."""

    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)

    def add(self, sample: Sample) -> None:
        self.cpu.append(sample.cpu / sample.iterations)
        self.wall.append(sample.wall / sample.iterations)

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpu)

    @property
    def median_wall(self) -> float:
        return statistics.median(self.wall)

    def as_dict(self) -> dict:
        return {
            "median_cpu_s": self.median_cpu,
            "median_wall_s": self.median_wall,
            "cpu_s": self.cpu,
            "wall_s": self.wall,
        }


def paired_ratio(numerator: Series, denominator: Series, clock: str = "cpu") -> float:
    """Median over rounds of the ratio of two blocks run back to back: robust to load that drifts between rounds."""
    return statistics.median(a / b for a, b in zip(getattr(numerator, clock), getattr(denominator, clock)))


def interleave(blocks: dict[str, Block], rounds: int) -> dict[str, Series]:
    """Run every block once per round, alternating their order between rounds, after a warm-up round."""
    names = list(blocks)
    for name in names:  # warm-up: imports, caches, first-touch allocations
        blocks[name]()
    series = {name: Series() for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            series[name].add(blocks[name]())
    return series


def machine() -> dict:
    """The machine and numerical stack the numbers were measured on."""
    import numpy
    import scipy
    from threadpoolctl import threadpool_info

    cpu_model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as handle:
            cpu_model = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu_model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "thread_pools": [
            {k: pool.get(k) for k in ("user_api", "internal_api", "version", "num_threads", "architecture")}
            for pool in threadpool_info()
        ],
        "env": {
            k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ
        },
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def describe(info: dict, load_start: list[float], load_end: list[float]) -> str:
    """One line for the printed output."""
    blas = ", ".join(f"{p['internal_api']} {p['version']} ({p['num_threads']} threads)" for p in info["thread_pools"]
                     if p["user_api"] == "blas")
    return (f"# {info['cpu']}, {info['cores']} cores; numpy {info['numpy']}, scipy {info['scipy']}; BLAS: {blas}; "
            f"load average {load_start[0]} -> {load_end[0]}")


def save(name: str, payload: dict, directory: Path | None = None) -> Path:
    """Write ``payload`` as benchmarks/results/<name>.json (or under ``directory``)."""
    directory = Path(directory) if directory else RESULTS
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return path


def benchmark_store(backend: str, directory: Path, database: str):
    """(tracking URI, the private PostgreSQL server or None) of a benchmark's store in ``directory``:
    SQLite's file there, or a database on a private PostgreSQL server on 127.0.0.1 whose cluster lives
    in ``directory``/postgres, started again as it is when there is one (stop it after; both stay for reuse)."""
    if backend != "postgresql":
        return f"sqlite:///{directory / 'mlflow.db'}", None
    from tests.support import PostgresServer

    postgres = PostgresServer(directory / "postgres").start()
    return postgres.database(database), postgres


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its descendants so far: each live process's own
    and those of its children that ended (the kernel adds a reaped child's times to its parent's)."""
    stats = {}
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stats[int(path.parent.name)] = path.read_text().rsplit(")", 1)[1].split()  # fields from the state on
        except OSError:  # ended meanwhile
            continue
    tree, ticks = [pid], 0
    while tree:
        process = tree.pop()
        ticks += sum(int(value) for value in stats[process][11:15])  # utime, stime, cutime, cstime
        tree += [child for child, fields in stats.items() if int(fields[1]) == process]
    return ticks / os.sysconf("SC_CLK_TCK")
