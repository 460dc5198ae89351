"""A cell's replicates computed from their built components, with neither Hydra nor MLflow: what
jobs/cell.py records as runs, and what a machine with JAX alone runs (benchmarks/measure/paper_table_gpu.py).

:func:`compute_cell` takes a :class:`Cell` (one :class:`~mcsa_bench.assembly.Assembly` per replicate:
the same object where the replicates share a model; the seed's own model where the model follows the seed)
and runs them as one compiled program (:func:`mcsa_bench.accel.engine.run_cell`), each replicate on its own
model's arrays (``JaxModel.with_data``), or, for a model twin that cannot be rebuilt on another
seed's arrays, one program per distinct model. :func:`replicate_to_json` and :func:`replicate_from_json`
carry a replicate's result between machines, exactly (floats as JSON's shortest round-trip repr).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Cell:
    """One cell's replicates, as one value from where the job groups them to where they are computed: the
    cell's key (its configuration but the seed), one Assembly per replicate (the same object where the
    replicates share a model; the seed's own model where the model follows the seed), their seeds, the
    cell's settings (n_iters, eval_every, eval_schedule, the diagnostic's rows and checkpoint_every), the
    checkpoint file (or None), and the first replicate's components' JAX twins (run_cell's arguments), given
    where the job checked them (once per cell) or built here."""

    key: str
    assemblies: Sequence
    seeds: Sequence[int]
    settings: Any
    checkpoint: Path | None = None
    twins: tuple = ()

    def __post_init__(self) -> None:
        if not self.twins:
            self.twins = self.assemblies[0].jax_twins(self.settings.n_iters)


#: a cell -> [(replicate indices, CellResult of those replicates in that order)]
CellCompute = Callable[[Cell], list[tuple[list[int], Any]]]


def compute_cell(cell: Cell) -> list[tuple[list[int], Any]]:
    """The replicates of one cell, computed together (see the module's docstring). With a checkpoint (and
    ``settings.checkpoint_every``), the cell saves its state there and resumes from it
    (accel.engine.CellCheckpoint, the file's name its identity: jobs/cell.py names it by the replicates'
    config hashes; one program per file: a cell of several numbers theirs)."""
    from mcsa_bench.accel.engine import CellCheckpoint, CellSettings, run_cell

    settings, checkpoint, seeds, assemblies = cell.settings, cell.checkpoint, list(cell.seeds), cell.assemblies

    def saved_at(program: int) -> CellCheckpoint | None:
        if checkpoint is None or not getattr(settings, "checkpoint_every", 0):
            return None
        path = checkpoint if program == 0 else checkpoint.with_name(f"{checkpoint.stem}-{program}{checkpoint.suffix}")
        return CellCheckpoint(path, settings.checkpoint_every, checkpoint.stem)

    cell_settings = CellSettings.of(settings)
    models = [assembly.model for assembly in assemblies]
    data = _replicate_data(cell.twins[0], assemblies)
    if data is not None or all(model is models[0] for model in models):
        return [(list(range(len(seeds))), run_cell(*cell.twins, cell_settings, seeds, data, saved_at(0)))]
    groups: dict[int, list[int]] = {}
    for index, model in enumerate(models):
        groups.setdefault(id(model), []).append(index)
    return [(members, run_cell(*(cell.twins if program == 0 else assemblies[members[0]].jax_twins(settings.n_iters)),
                               cell_settings, [seeds[i] for i in members], checkpoint=saved_at(program)))
            for program, members in enumerate(groups.values())]


def _replicate_data(model_twin, assemblies: Sequence) -> list | None:
    """Each replicate's model arrays (``JaxModel.data``) when the models differ (they follow the seed)
    and the cell's twin rebuilt on each one's arrays is that model's twin (its log density at a point
    agrees to rounding: a twin that reads a seed-dependent value outside its arrays fails this); else None."""
    if len({id(assembly.model) for assembly in assemblies}) == 1 or model_twin.with_data is None:
        return None
    point = 0.1 * np.random.default_rng(0).standard_normal(model_twin.dim)
    shapes = [np.shape(a) for a in model_twin.data]
    data = []
    for assembly in assemblies:
        own = assembly.jax_twin("model")
        if own.with_data is None or [np.shape(a) for a in own.data] != shapes:
            return None
        rebuilt = model_twin.with_data(own.data)
        if not np.isclose(float(own.log_joint(point)), float(rebuilt.log_joint(point)), rtol=1e-12, atol=0):
            return None
        data.append(own.data)
    return data


def _number(value: float) -> float | str:
    return value if math.isfinite(value) else repr(value)  # JSON has no NaN or inf


def replicate_to_json(replicate) -> dict:
    """A ReplicateResult as plain JSON values."""
    failure = replicate.failure
    return {"seed": replicate.seed,
            "history": [{k: _number(float(v)) for k, v in row.items()} for row in replicate.history],
            "params": replicate.params.tolist(), "iterate": replicate.iterate.tolist(),
            "evaluated": [params.tolist() for params in replicate.evaluated],
            "trace": None if replicate.trace is None else replicate.trace.tolist(),
            "failure": None if failure is None else {"iteration": failure.iteration, "quantity": failure.quantity},
            "resumed_from": replicate.resumed_from}


def replicate_from_json(found: dict):
    """The ReplicateResult :func:`replicate_to_json` wrote."""
    from mcsa_bench.accel.engine import Failure, ReplicateResult

    history = [{k: (int(v) if k == "iteration" else float(v)) for k, v in row.items()} for row in found["history"]]
    failure = found["failure"]
    return ReplicateResult(found["seed"], history, np.asarray(found["params"]), np.asarray(found["iterate"]),
                           None if failure is None else Failure(failure["iteration"], failure["quantity"]),
                           [np.asarray(params) for params in found["evaluated"]],
                           None if found.get("trace") is None else np.asarray(found["trace"]),  # absent: older files
                           found.get("resumed_from"))
