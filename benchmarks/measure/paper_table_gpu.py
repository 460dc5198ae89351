"""One paper table at paper size on the accelerated backend, computed where JAX runs and recorded
where MLflow runs, so that ``mcsa-bench report`` renders it beside the numpy table.

Three steps, each one command (docs/scaling.md, "Which backend"):

1. ``plan DIR [overrides]`` (a machine with Hydra; default ``experiment=logistic``: 3 data sets x 7
   methods x 100 seeds): composes the grid with ``backend=jax`` as ``mcsa-bench run -m`` would,
   groups it by cell and writes DIR/plan.json (each cell's key, components and seeds).
2. ``run DIR`` (the accelerator machine: numpy, scipy, pluggy and JAX, no Hydra, no MLflow): builds
   each cell's components from the plan and runs it (jobs/cellcompute.py: one compiled program per
   cell, each seed on its own split), writing DIR/cells/<n>.json (every replicate's history, final λ,
   failure and iterate trace) and DIR/timing.json (device, seconds per cell and in all).
3. ``import DIR [overrides] [tracking.uri=...]`` (the machine with MLflow; the same overrides as
   ``plan``): ``mcsa-bench run -m backend=jax <overrides>`` whose cells are read from DIR instead of
   computed: every replicate becomes a run through the run record, as if it had run there.

    python benchmarks/measure/paper_table_gpu.py plan outputs/gpu_table
    python benchmarks/measure/paper_table_gpu.py run outputs/gpu_table          # on the GPU machine
    python benchmarks/measure/paper_table_gpu.py import outputs/gpu_table
    mcsa-bench report --sweep latest
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mcsa_bench.engine import Settings, table

DEFAULT_OVERRIDES = ["experiment=logistic"]
PLAN, CELLS, TIMING = "plan.json", "cells", "timing.json"
#: what a plan records of a cell's settings: the engine's rows of the settings table that change what it computes
CELL_SETTINGS = tuple(row.name for row in table(Settings) if row.computing and row.name != "seed")


def plan(directory: Path, overrides: list[str]) -> dict:
    """Every cell of the grid ``overrides`` (with backend=jax), as DIR/plan.json."""
    from mcsa_bench.jobs.cell import cell_key, group_cells
    from mcsa_bench.jobs.config import RunSettings, compose, register_configs
    from mcsa_bench.plugins import get_registry

    registry = get_registry()
    register_configs(registry)
    jobs = [(RunSettings.from_config(cfg).resolve(registry), None)
            for _, cfg in compose([*overrides, "backend=jax"], multirun=True).jobs]
    cells = [{"key": cell_key(cell[0][0]), **{k: getattr(cell[0][0], k) for k in CELL_SETTINGS},
              "n_samples": cell[0][0].n_samples,
              "jobs": [{"seed": s.seed, "components": s.components} for s, _ in cell]}
             for cell in group_cells(jobs)]
    found = {"overrides": overrides, "jobs": len(jobs), "cells": cells}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / PLAN).write_text(json.dumps(found, indent=1))
    return found


def _assemblies(cell: dict, registry) -> list:
    """Each job's built components; jobs with the same model spec share one model (jobs/cellcompute.py)."""
    from dataclasses import replace

    from mcsa_bench.assembly import assemble

    def spec(value):
        return None if value is None else (value[0], value[1])

    first = cell["jobs"][0]["components"]
    shared = assemble(registry, n_samples=cell["n_samples"], **{kind: spec(v) for kind, v in first.items()})
    models: dict[str, object] = {json.dumps(first["model"], sort_keys=True): shared.model}
    found = []
    for job in cell["jobs"]:
        model_spec = job["components"]["model"]
        key = json.dumps(model_spec, sort_keys=True)
        if key not in models:
            models[key] = registry.build("model", model_spec[0], **model_spec[1])
        found.append(shared if models[key] is shared.model else replace(shared, model=models[key]))
    return found


def run(directory: Path) -> dict:
    """Every cell of DIR/plan.json, computed here; results in DIR/cells/, times in DIR/timing.json."""
    from mcsa_bench.jobs.cellcompute import Cell, compute_cell, replicate_to_json
    from mcsa_bench.plugins import get_registry

    registry = get_registry()
    cells = json.loads((directory / PLAN).read_text())["cells"]
    (directory / CELLS).mkdir(exist_ok=True)
    timing, start = [], time.perf_counter()
    for number, cell in enumerate(cells):
        clock = time.perf_counter()
        settings = Settings(**{k: cell[k] for k in CELL_SETTINGS})
        seeds = [job["seed"] for job in cell["jobs"]]
        results = compute_cell(Cell(cell["key"], _assemblies(cell, registry), seeds, settings))
        replicates = {seeds[i]: replicate_to_json(r) for members, result in results
                      for i, r in zip(members, result.replicates)}
        (directory / CELLS / f"{number}.json").write_text(json.dumps({"key": cell["key"], "replicates": replicates}))
        first = results[0][1]
        timing.append({"cell": number, "replicates": len(seeds), "programs": len(results),
                       "seconds": time.perf_counter() - clock, "compile_seconds": first.compile_seconds,
                       "compute_seconds": sum(r.compute_seconds for _, r in results),
                       "evaluation_seconds": sum(r.evaluation_seconds for _, r in results)})
        print(f"cell {number + 1}/{len(cells)}: {len(seeds)} replicates in {timing[-1]['seconds']:.1f} s",
              flush=True)
    summary = {"device": first.device, "cells": len(cells), "seconds": time.perf_counter() - start, "per_cell": timing}
    (directory / TIMING).write_text(json.dumps(summary, indent=1))
    return summary


def stored_cells(directory: Path):
    """A cell compute (jobs/cellcompute.py) that reads the replicates DIR/cells/ holds."""
    from mcsa_bench.api import ConfigurationError
    from mcsa_bench.jobs.cellcompute import replicate_from_json

    by_key = {}
    for path in sorted((directory / CELLS).glob("*.json")):
        found = json.loads(path.read_text())
        by_key[found["key"]] = found["replicates"]
    device = json.loads((directory / TIMING).read_text())["device"] if (directory / TIMING).exists() else "?"

    def compute(cell):  # computed elsewhere: nothing to checkpoint
        from mcsa_bench.accel.engine import CellResult

        stored, seeds = by_key.get(cell.key), cell.seeds
        missing = [seed for seed in seeds if stored is None or str(seed) not in stored]
        if missing:
            raise ConfigurationError(f"{directory} holds no result for seeds {missing} of a cell of this grid; "
                                     f"run the plan of the same overrides there first")
        return [(list(range(len(seeds))), CellResult([replicate_from_json(stored[str(s)]) for s in seeds],
                                                     chunk_size=len(seeds), device=f"{device} (imported)"))]

    return compute


def import_cells(directory: Path, overrides: list[str]) -> int:
    """``mcsa-bench run -m backend=jax <overrides>`` with every cell read from DIR; the exit status."""
    from mcsa_bench.jobs.config import register_configs
    from mcsa_bench.jobs.launch import launch
    from mcsa_bench.plugins import get_registry

    register_configs(get_registry())
    command = [*overrides, "backend=jax"]
    return launch(command, ["-m", *command], multirun=True, config_dir=None, compute=stored_cells(directory))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("plan", "run", "import"))
    parser.add_argument("directory", type=Path)
    parser.add_argument("overrides", nargs="*", help=f"the grid (plan, import); default {' '.join(DEFAULT_OVERRIDES)}")
    args = parser.parse_args(argv)
    overrides = args.overrides or DEFAULT_OVERRIDES
    if args.step == "plan":
        found = plan(args.directory, overrides)
        print(f"{found['jobs']} jobs in {len(found['cells'])} cells: {args.directory / PLAN}")
        return 0
    if args.step == "run":
        summary = run(args.directory)
        print(f"{summary['cells']} cells on {summary['device']} in {summary['seconds']:.1f} s: {args.directory}")
        return 0
    return import_cells(args.directory, overrides)


if __name__ == "__main__":
    sys.exit(main())
