"""CPU-hours of each experiment grid at the papers' settings, from measured per-iteration costs.

Every job of a grid is composed as `mcsa-bench run -m experiment=<grid>` composes it (the papers'
size: no `size` override; nothing runs). Jobs are grouped into cells by what sets their cost per
iteration: the effective configuration without the seed (and parameters that follow it, e.g. the
data split), T, eval_every and the optimizer, i.e. model and data, family, kernel, estimator, N,
rows and diagnostics. Each cell is measured through the engine, one BLAS thread, CPU time of
this process read by a callback at every evaluation (so set-up and initialization are outside):

- run A: T = k, eval_every = k: k iterations and one evaluation;
- run B: T = j, eval_every = 1: j iterations and j evaluations;
  together they give the CPU seconds of an iteration, c, and of an evaluation, e;
- run D (cells with the gradient-variance diagnostic): T = 3 with a diagnostic point at every
  iteration gives d, the cost of one point (R replica estimates);
- the set-up: building the components (data loading, the model's precomputations).

k and j are chosen from a warm-up run so that each part spends about --budget seconds and run A's
iterations at least 4 evaluations (k within [--min-iters, --max-iters]); the runs are repeated
--rounds times and the medians kept. A job costs set-up + T c + (evaluations) e + (diagnostic
points) d; a grid the sum over its jobs. Its wall time on P cores: the jobs in launch order, each
to the first free core (as joblib, Ray and a Slurm array with P slots run them), at least the
longest job. Launcher and tracking costs per job are not included (docs/scaling.md §5 has them).
A job that diverges stops early, so its cost is an upper bound.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/measure/grid_costs.py \
        [--grids logistic bnn] [--budget 0.5]

Results: benchmarks/results/grid_costs.json (grid_costs_<size>.json with --size smoke or bench).
``--schedules`` measures nothing: from those results, each grid's evaluation CPU-hours on every
evaluation schedule (mcsa_bench.engine.EVAL_SCHEDULES) at the grid's own T and eval_every.

``--backend jax`` runs nothing either: it prices each grid on the accelerated backend from those
results and the accelerator's measurements (benchmarks/results/accelerator_h200.json: µs per
replicate-iteration at R replicates, and the compile of start + advance; accelerator_evaluation_h200.json:
an evaluation per replicate, and the compile of start + advance + evaluate), into grid_costs_jax_h200.json.
A grid's configuration (every job but the seed: jobs/cell.py's cells) is one cell of R replicates, R
its seeds; a cell costs T iterations and its evaluations at R, each scaled from the measured model's
pMCSA cell by this cell's numpy cost over that model's (the ratio of N, scheme and data size carried
over from one core to the device: an estimate, not a measurement), plus its programs. The programs
are counted, not assumed: each configuration's components are built and its programs traced by the
engine's own keys (mcsa_bench.accel.engine.program_keys, nothing compiled), and a grid, swept in one
process, compiles each distinct advance program once (priced at the model's start + advance compile)
and each distinct evaluate program once (priced at the evaluation file's compile minus that: derived);
every other configuration finds them in the cache, priced at the hit/compile ratio measured on this
machine's CPU (benchmarks/results/program_cache.json, the larger of its cases) times those figures.
A model the accelerator was not measured on is priced by the stand-in :data:`JAX_STAND_INS` names, and
the results say which.
A grid with the gradient-variance diagnostic (``diagnostics.every`` K, ``diagnostics.replicas`` R_d in
its config) adds T/K diagnostic points per replicate, each R_d more estimates of the iteration's size,
vmapped inside each of the cell's R replicates: priced as R_d iterations at R · R_d replicate-iterations
in a batch (the same scaling); its programs are traced with the diagnostic, like the others.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.docgen.paper_grids import GRIDS  # noqa: E402
from benchmarks.measure.harness import describe, load_average, machine, save  # noqa: E402
from mcsa_bench import get_registry, run  # noqa: E402
from mcsa_bench.engine import EVAL_SCHEDULES, EvaluationSchedule  # noqa: E402
from mcsa_bench.jobs.config import NON_COMPUTING_KEYS, RunSettings, compose_jobs, register_configs  # noqa: E402
from mcsa_bench.plugins import KINDS  # noqa: E402

#: keys of a job's configuration that do not change the cost of one iteration
PER_JOB_KEYS = ("seed", "n_iters", "eval_every", "eval_schedule", "optimizer", *NON_COMPUTING_KEYS)
SEED_INTERPOLATION = "${seed}"
CORES = (2, 64, 1000)
DIAGNOSED = 3  # iterations of run D, each with a diagnostic point
EVALUATION_SHARE = 4  # run A: k iterations cost at least this many evaluations


@dataclass
class Cell:
    """Jobs whose iterations, evaluations and diagnostic points cost the same."""

    label: str
    settings: RunSettings  # one job's, run to measure the cell
    jobs: list[RunSettings] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)  # the jobs' places in the sweep's launch order


def grid_jobs(grid: str, size: str = "paper") -> list[tuple[RunSettings, dict]]:
    """(settings, unresolved config) of every job `mcsa-bench run -m experiment=<grid> [size=<size>]` launches."""
    from omegaconf import OmegaConf

    size_override = [] if size == "paper" else [f"size={size}"]
    jobs = compose_jobs([f"experiment={grid}", *size_override], multirun=True)
    return [(RunSettings.from_config(cfg), OmegaConf.to_container(cfg, resolve=False)) for _, cfg in jobs]


def cost_key(settings: RunSettings, unresolved: dict, registry) -> dict:
    """What sets a job's cost per iteration: its effective config without the per-job keys, with the
    component parameters that follow the seed (the data split, the Gaussian target's draw) as ${seed}."""
    key = {name: value for name, value in settings.effective_config(registry).items() if name not in PER_JOB_KEYS}
    for kind in KINDS:
        for parameter, value in (unresolved.get(kind) or {}).items():
            if value == SEED_INTERPOLATION:
                key[kind] = {**key[kind], parameter: SEED_INTERPOLATION}
    return key


def label(key: dict) -> str:
    model = key["model"]
    data = model.get("dataset") or f"D={model.get('dim')}"
    kernel = f"+{key['kernel']['name']}" if key.get("kernel") else ""
    rows = f", {key['max_rows']} rows" if key.get("max_rows") else ""
    return f"{model['name']}/{data} {key['estimator']['name']}{kernel} N={key['n_samples']}{rows}"


def group_jobs(jobs: list[tuple[RunSettings, dict]], registry) -> list[Cell]:
    """The jobs' cells, in order of first appearance."""
    cells: dict[str, Cell] = {}
    for position, (settings, unresolved) in enumerate(jobs):
        key = cost_key(settings, unresolved, registry)
        text = json.dumps(key, sort_keys=True, default=str)
        cell = cells.setdefault(text, Cell(label(key), settings))
        cell.jobs.append(settings)
        cell.positions.append(position)
    return list(cells.values())


def cpu_between_evaluations(parts, settings: RunSettings, n_iters: int, eval_every: int,
                            diagnostics_every: int = 0) -> tuple[float, float]:
    """(CPU seconds from the evaluation at 0 to the last, the run's optimizing wall seconds)."""
    marks: list[float] = []
    result = run(*parts.run_args(), n_iters=n_iters, seed=0, eval_every=eval_every,
                 callbacks=[lambda snapshot: marks.append(time.process_time())],
                 diagnostics_every=diagnostics_every, diagnostics_replicas=settings.diagnostics_replicas,
                 reference=parts.reference)
    return marks[-1] - marks[0], result.history[-1]["wall_time"]


def measure(cell: Cell, registry, budget: float, min_iters: int, max_iters: int, rounds: int) -> dict:
    """CPU seconds of one iteration, one evaluation, one diagnostic point (medians over the rounds) and
    the set-up of a cell's jobs."""
    settings = cell.settings
    start = time.process_time()
    parts = settings.assemble(registry)
    set_up = time.process_time() - start
    warm, warm_wall = cpu_between_evaluations(parts, settings, 2, 1)  # also imports, caches, the reference
    iteration_guess, evaluation_guess = max(warm_wall / 2, 1e-6), max(warm / 2, 1e-6)
    # run A's iterations outweigh its evaluation (e's error enters c divided by k)
    k = int(min(max(max(budget, EVALUATION_SHARE * evaluation_guess) / iteration_guess, min_iters), max_iters))
    j = int(min(max(budget / evaluation_guess, 1), 20))
    per_iteration, per_evaluation, per_diagnostic = [], [], []
    for _ in range(rounds):
        a, _ = cpu_between_evaluations(parts, settings, k, k)  # k c + e
        b, _ = cpu_between_evaluations(parts, settings, j, 1)  # j c + j e
        per_iteration.append((a - b / j) / (k - 1))
        per_evaluation.append(b / j - per_iteration[-1])
        if settings.diagnostics_every:
            d, _ = cpu_between_evaluations(parts, settings, DIAGNOSED, DIAGNOSED, diagnostics_every=1)  # m c + m d + e
            per_diagnostic.append((d - per_evaluation[-1]) / DIAGNOSED - per_iteration[-1])
    return {"set_up_s": set_up, "iteration_s": statistics.median(per_iteration),
            "evaluation_s": statistics.median(per_evaluation),
            "diagnostic_s": statistics.median(per_diagnostic) if per_diagnostic else 0.0, "k": k, "j": j,
            "rounds": {"iteration_s": per_iteration, "evaluation_s": per_evaluation, "diagnostic_s": per_diagnostic}}


def job_seconds(job: RunSettings, cost: dict) -> float:
    diagnostic_points = job.n_iters // job.diagnostics_every if job.diagnostics_every else 0
    return (cost["set_up_s"] + job.n_iters * cost["iteration_s"]
            + job.evaluation.count() * cost["evaluation_s"] + diagnostic_points * cost["diagnostic_s"])


def launch_order_seconds(cells: list[Cell], costs: list[dict]) -> list[float]:
    """Every job's CPU seconds, in the order the sweep launches the jobs."""
    seconds = [0.0] * sum(len(cell.jobs) for cell in cells)
    for cell, cost in zip(cells, costs):
        for position, job in zip(cell.positions, cell.jobs):
            seconds[position] = job_seconds(job, cost)
    return seconds


def makespan(seconds: list[float], cores: int) -> float:
    """Wall seconds on ``cores`` cores taking the jobs in order, each to the first free core
    (what joblib, Ray and a Slurm array with as many slots do); at least the longest job."""
    free_at = [0.0] * min(cores, len(seconds))
    for duration_s in seconds:
        heapq.heapreplace(free_at, free_at[0] + duration_s)
    return max(free_at)


def grid_summary(grid: str, cells: list[Cell], costs: list[dict], seconds: list[float]) -> dict:
    total = sum(seconds)
    longest = max(range(len(seconds)), key=seconds.__getitem__)
    longest_cell = next(cell for cell in cells if longest in cell.positions)
    longest_t = longest_cell.jobs[longest_cell.positions.index(longest)].n_iters
    return {
        "grid": grid, "jobs": len(seconds), "cells": len(cells), "cpu_hours": total / 3600,
        "longest_job_s": seconds[longest], "longest_job": f"{longest_cell.label}, T={longest_t}",
        "wall_hours": {str(p): makespan(seconds, p) / 3600 for p in CORES},
        "ideal_wall_hours": {str(p): max(total / p, max(seconds)) / 3600 for p in CORES},  # perfect packing
        "cells_detail": [{"cell": cell.label, "jobs": len(cell.jobs), "T": sorted({j.n_iters for j in cell.jobs}),
                          "eval_every": sorted({j.evaluation.every for j in cell.jobs}), **cost,
                          "cpu_hours": sum(job_seconds(j, cost) for j in cell.jobs) / 3600}
                         for cell, cost in zip(cells, costs)],
    }


def print_cells(summary: dict) -> None:
    for c in summary["cells_detail"]:
        diagnostic = f", {c['diagnostic_s'] * 1e3:.1f} ms/diagnostic" if c["diagnostic_s"] else ""
        print(f"#   {c['cell']}: {c['jobs']} jobs x T={c['T'][0]}: {c['iteration_s'] * 1e3:.3f} ms/it (k={c['k']}), "
              f"{c['evaluation_s'] * 1e3:.1f} ms/eval (j={c['j']}){diagnostic}, set-up {c['set_up_s'] * 1e3:.0f} ms "
              f"-> {c['cpu_hours']:.2f} CPU-h", flush=True)


def duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def table(summaries: list[dict], all_seconds: list[float]) -> str:
    lines = ["| grid | jobs | cells | CPU-hours | wall, 2 cores | 64 cores | 1,000 cores | longest job |",
             "|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        wall = " | ".join(duration(s["wall_hours"][str(p)] * 3600) for p in CORES)
        lines.append(f"| {s['grid']} | {s['jobs']} | {s['cells']} | {s['cpu_hours']:.1f} | {wall} | "
                     f"{duration(s['longest_job_s'])} ({s['longest_job']}) |")
    wall = " | ".join(duration(makespan(all_seconds, p)) for p in CORES)
    lines.append(f"| all, one queue | {len(all_seconds)} | {sum(s['cells'] for s in summaries)} | "
                 f"{sum(all_seconds) / 3600:.1f} | {wall} | {duration(max(all_seconds))} |")
    return "\n".join(lines)


def schedule_costs(results: dict) -> list[dict]:
    """Per grid: its CPU-hours as measured and the CPU-hours of its evaluations on each schedule."""
    rows = []
    for grid in results["grids"]:
        evaluation_s = dict.fromkeys(EVAL_SCHEDULES, 0.0)
        for cell in grid["cells_detail"]:
            (n_iters,), (every,) = cell["T"], cell["eval_every"]  # one T and eval_every per cell in every grid
            for schedule in EVAL_SCHEDULES:
                count = EvaluationSchedule(n_iters, every, schedule).count()
                evaluation_s[schedule] += cell["jobs"] * count * cell["evaluation_s"]
        rows.append({"grid": grid["grid"], "cpu_hours": grid["cpu_hours"],
                     "evaluation_hours": {k: v / 3600 for k, v in evaluation_s.items()}})
    return rows


def print_schedule_costs(rows: list[dict]) -> None:
    print("| grid | CPU-hours | of which evaluation | " + " | ".join(f"evaluation, {s}" for s in EVAL_SCHEDULES[1:])
          + " | CPU-hours, " + ", ".join(EVAL_SCHEDULES[1:]) + " |")
    print("|---" * (4 + len(EVAL_SCHEDULES) - 1) + "|")
    for row in rows:
        hours, evaluation = row["cpu_hours"], row["evaluation_hours"]
        others = [evaluation[s] for s in EVAL_SCHEDULES[1:]]
        print(f"| {row['grid']} | {hours:.1f} | {evaluation['linear']:.2f} ({evaluation['linear'] / hours:.1%}) | "
              + " | ".join(f"{e:.2f}" for e in others) + " | "
              + ", ".join(f"{hours - evaluation['linear'] + e:.1f}" for e in others) + " |")


#: model/data of a grid's cell -> the accelerator measurement that prices it (rows of accelerator_h200.json);
#: the models after the first three groups were not measured on the device and borrow the nearest kind
JAX_STAND_INS = {"logistic": "logistic_pima", "gp_classification/sonar": "gp_classification_sonar",
                 "gp_classification": "gp_classification_breast", "bnn": "bnn_boston", "radon": "radon",
                 "gp_regression": "gp_classification_breast", "stochastic_volatility": "radon",
                 "gaussian": "logistic_pima"}
#: the accelerator's evaluation measurements (accelerator_evaluation_h200.json) by iteration row
JAX_EVALUATION_STAND_INS = {"gp_classification_breast": "gp_classification_sonar"}
JAX_DEVICE_FILES = ("accelerator_h200.json", "accelerator_evaluation_h200.json")


def _stand_in(cell_label: str) -> str:
    model_data = cell_label.split(" ")[0]
    return JAX_STAND_INS.get(model_data) or JAX_STAND_INS[model_data.split("/")[0]]


def _at_replicates(points: dict[int, float], replicates: int) -> float:
    """A per-replicate cost measured at a few R, at ``replicates``: log-log between the measured R
    around it, flat past the largest."""
    measured = sorted(points)
    if replicates >= measured[-1]:
        return points[measured[-1]]
    if replicates <= measured[0]:
        return points[measured[0]]
    high = next(r for r in measured if r >= replicates)
    low = max(r for r in measured if r <= replicates)
    if high == low:
        return points[low]
    share = (math.log(replicates) - math.log(low)) / (math.log(high) - math.log(low))
    return math.exp((1 - share) * math.log(points[low]) + share * math.log(points[high]))


def jax_configurations(grid: str, registry, size: str = "paper") -> list[dict]:
    """The grid's configurations (jobs/cell.py's cells: every job but the seed) with their cost cell's
    label, R, and the engine's keys of their programs (traced at R replicates, each replicate on its own
    model arrays where the model follows the seed, as jobs/cellcompute.py runs them)."""
    import jax
    import numpy as np

    from mcsa_bench.accel.engine import CellSettings, program_keys
    from mcsa_bench.jobs.cell import group_cells

    jobs = grid_jobs(grid, size)
    unresolved = {id(settings): config for settings, config in jobs}
    configurations = []
    for cell in group_cells([(settings, None) for settings, _ in jobs]):
        settings, replicates = cell[0][0], len(cell)
        model, *others = settings.assemble(registry).jax_twins(settings.n_iters)
        data = tuple(jax.ShapeDtypeStruct((replicates, *np.shape(a)), a.dtype) for a in model.data
                     ) if settings.seed_following and model.with_data else ()
        keys = program_keys(model, *others, CellSettings.of(settings), replicates, data)
        configurations.append({"cell": label(cost_key(settings, unresolved[id(settings)], registry)),
                               "replicates": replicates, "keys": keys})
    print(f"# {grid}: {len(configurations)} configurations traced", flush=True)
    return configurations


def grid_diagnostics(grid: str) -> tuple[int, int]:
    """(diagnostics.every, diagnostics.replicas) of the grid's config; (0, 0) without the diagnostic."""
    import yaml

    found = yaml.safe_load((ROOT / "conf" / "experiment" / f"{grid}.yaml").read_text()).get("diagnostics") or {}
    every = int(found.get("every", 0))
    return every, int(found.get("replicas", 64)) if every else 0


def hit_over_compile() -> float:
    """A cache hit's seconds over a compile's, measured on this machine's CPU (the larger case)."""
    measured = json.loads((ROOT / "benchmarks" / "results" / "program_cache.json").read_text())
    return max(case["in_process"]["hit_over_compile"] for case in measured["cases"].values())


def compile_figures(row: dict, evaluation: dict) -> dict[str, float]:
    """The device's compile seconds of a cell's advance (with start) and of its evaluate program: the
    iteration file's figure, and the evaluation file's (start + advance + evaluate) less it."""
    advance = max(m.get("compile_s", 0.0) for m in row["jax"].values())
    return {"advance": advance, "evaluate": max(0.0, max(m["compile_s"] for m in evaluation["jax"].values()) - advance)}


def programs_seconds(configurations: list[dict], figures: dict[str, dict], hit_ratio: float) -> tuple[float, dict]:
    """Seconds the grid's configurations spend on their programs in one process: each distinct program
    compiled once, found in the cache by every other configuration; and the counts."""
    seen, seconds = set(), 0.0
    counts = {"configurations": len(configurations), "compiles": 0, "hits": 0}
    for configuration in configurations:
        for program, figure in figures[configuration["cell"]].items():
            key = configuration["keys"][program]
            found = key in seen
            seen.add(key)
            counts["hits" if found else "compiles"] += 1
            seconds += hit_ratio * figure if found else figure
    counts["distinct"] = {program: len({c["keys"][program] for c in configurations})
                          for program in ("advance", "evaluate")}
    return seconds, counts


def jax_prices(results: dict, iterations: dict, evaluations: dict, registry) -> list[dict]:
    """Per grid, its GPU-hours on the accelerated backend (see the module's docstring)."""
    rows = {row["model"]: row for row in iterations["rows"]}
    evaluated = {row["model"]: row for row in evaluations["rows"]}
    every_configuration = {grid["grid"]: jax_configurations(grid["grid"], registry) for grid in results["grids"]}
    hit_ratio = hit_over_compile()
    summaries = []
    for grid in results["grids"]:
        configurations = every_configuration[grid["grid"]]
        replicates = max((c["replicates"] for c in configurations), default=0)
        compute_s, figures, stand_ins = 0.0, {}, set()
        diagnostic_every, copies = grid_diagnostics(grid["grid"])
        diagnostic_s = 0.0
        for cell in grid["cells_detail"]:
            stand_in = _stand_in(cell["cell"])
            stand_ins.add(stand_in)
            row = rows[stand_in]
            evaluation = evaluated[JAX_EVALUATION_STAND_INS.get(stand_in, stand_in)]
            figures[cell["cell"]] = compile_figures(row, evaluation)
            per_iteration = _at_replicates({int(r): m["us"] for r, m in row["jax"].items()}, replicates) * 1e-6
            per_evaluation = _at_replicates({int(r): m["per_replicate_s"] for r, m in evaluation["jax"].items()},
                                            replicates)
            (n_iters,), (every,) = cell["T"], cell["eval_every"]
            count = EvaluationSchedule(n_iters, every, "linear").count()
            scale = cell["iteration_s"] / (row["numpy_one_core_us"] * 1e-6)
            compute_s += cell["jobs"] * (
                n_iters * per_iteration * scale + count * per_evaluation * cell["evaluation_s"] / evaluation[
                    "numpy_one_core_s"])
            if diagnostic_every:
                batched = _at_replicates({int(r): m["us"] for r, m in row["jax"].items()}, replicates * copies) * 1e-6
                diagnostic_s += cell["jobs"] * (n_iters // diagnostic_every) * copies * batched * scale
        programs_s, counts = programs_seconds(configurations, figures, hit_ratio)
        every_compiled_s = sum(sum(figures[c["cell"]].values()) for c in configurations)
        summaries.append({"grid": grid["grid"], "jobs": grid["jobs"],
                          "replicates_per_cell": replicates, "jax_cells": len(configurations),
                          "programs": counts, "programs_hours": programs_s / 3600,
                          "programs_hours_one_compile_per_configuration": every_compiled_s / 3600,
                          "diagnostic_gpu_hours": diagnostic_s / 3600,
                          "gpu_hours": (compute_s + diagnostic_s + programs_s) / 3600, "cpu_hours": grid["cpu_hours"],
                          "cpu_wall_hours_64_cores": grid["wall_hours"]["64"], "priced_by": sorted(stand_ins)})
    return summaries


def jax_table(summaries: list[dict], device: str) -> str:
    lines = [f"| grid | jobs | cells (R seeds each) | programs compiled (advance + evaluate) | numpy: CPU-hours | "
             f"numpy: wall, 64 cores | jax: {device}, hours | of which programs | priced by |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        jax = duration(s["gpu_hours"] * 3600) + (f" (diagnostic {duration(s['diagnostic_gpu_hours'] * 3600)})"
                                                   if s.get("diagnostic_gpu_hours") else "")
        distinct = s["programs"]["distinct"]
        lines.append(f"| {s['grid']} | {s['jobs']} | {s['jax_cells']} (R = {s['replicates_per_cell']}) | "
                     f"{distinct['advance']} + {distinct['evaluate']} | {s['cpu_hours']:.1f} | "
                     f"{duration(s['cpu_wall_hours_64_cores'] * 3600)} | {jax} | "
                     f"{duration(s['programs_hours'] * 3600)} (one compile per configuration: "
                     f"{duration(s['programs_hours_one_compile_per_configuration'] * 3600)}) | "
                     f"{', '.join(s['priced_by'])} |")
    compiled = sum(sum(s["programs"]["distinct"].values()) for s in summaries)
    lines.append(f"| all | {sum(s['jobs'] for s in summaries)} | "
                 f"{sum(s['jax_cells'] for s in summaries)} | {compiled} | "
                 f"{sum(s['cpu_hours'] for s in summaries):.1f} | | "
                 f"{duration(sum(s['gpu_hours'] for s in summaries) * 3600)} | "
                 f"{duration(sum(s['programs_hours'] for s in summaries) * 3600)} | |")
    return "\n".join(lines)


def main() -> None:
    from threadpoolctl import threadpool_limits

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grids", nargs="+", default=list(GRIDS), choices=GRIDS)
    parser.add_argument("--size", default="paper", help="paper (default), bench or smoke")
    parser.add_argument(
        "--budget", type=float, default=0.5, help="CPU seconds per measured part of a cell (default 0.5)"
    )
    parser.add_argument("--min-iters", type=int, default=50)
    parser.add_argument("--max-iters", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each cell; medians (default 3)")
    parser.add_argument("--schedules", action="store_true",
                        help="measure nothing: the saved results' evaluation CPU-hours on every evaluation schedule")
    parser.add_argument("--backend", choices=("numpy", "jax"), default="numpy",
                        help="jax: measure nothing; price the saved results on the accelerator measured")
    args = parser.parse_args()
    name = "grid_costs" if args.size == "paper" else f"grid_costs_{args.size}"  # the paper-size file stays
    if args.schedules:
        print_schedule_costs(schedule_costs(json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())))
        return
    registry = get_registry()
    register_configs(registry)
    if args.backend == "jax":
        results_dir = ROOT / "benchmarks" / "results"
        iterations, evaluations = (json.loads((results_dir / f).read_text()) for f in JAX_DEVICE_FILES)
        summaries = jax_prices(json.loads((results_dir / f"{name}.json").read_text()), iterations, evaluations,
                               registry)
        save("grid_costs_jax_h200", {
            "device": iterations["device"], "from": [f"{name}.json", *JAX_DEVICE_FILES, "program_cache.json"],
            "measured": "device seconds per replicate-iteration, per evaluation and per compile (H200 files); "
                        "the hit/compile ratio (this machine's CPU)",
            "derived": "each cell's costs scaled by its numpy cost over the stand-in's; the evaluate compile "
                       "(evaluation file's compile less the iteration file's); a hit as ratio x compile figure; "
                       "the programs per grid counted from the engine's keys",
            "hit_over_compile": hit_over_compile(), "grids": summaries})
        print(jax_table(summaries, iterations["device"]))
        return
    info, load_start = machine(), load_average()
    summaries, all_seconds = [], []
    with threadpool_limits(limits=1):
        for grid in args.grids:
            cells = group_jobs(grid_jobs(grid, args.size), registry)
            costs = [
                measure(cell, registry, args.budget, args.min_iters, args.max_iters, args.rounds) for cell in cells
            ]
            seconds = launch_order_seconds(cells, costs)
            all_seconds.extend(seconds)
            summaries.append(grid_summary(grid, cells, costs, seconds))
            print(f"# {grid}: load average {load_average()[0]}")
            print_cells(summaries[-1])
            save(name, {"machine": info, "size": args.size, "budget_s": args.budget, "rounds": args.rounds,
                                "load_average_start": load_start, "load_average_end": load_average(),
                                "grids": summaries})  # after every grid: a killed run keeps the rest
    print(describe(info, load_start, load_average()))
    print(table(summaries, all_seconds))


if __name__ == "__main__":
    main()
