"""A sweep's jobs by cell (one configuration, differing only in their seeds), one launcher job per cell.

The sweep driver (jobs/launch.py) groups a sweep's jobs (:func:`launcher_cells`) and writes the groups
to a cell file in the sweep directory (:func:`write_cells`); Hydra's launcher, whichever the user chose,
then runs one job per group, which reads its members (:func:`read_cell`) and runs them (jobs/job.py):

- ``backend=jax``: a whole cell at once, as one compiled, vmapped program
  (:func:`mcsa_bench.accel.engine.run_cell`, here :func:`run_cell_jobs`), each replicate recorded as
  its own run through the same run record as a numpy job (:class:`mcsa_bench.jobs.tracked.TrackedRun`);
- ``backend=numpy``: the seeds one after another in that process, each the job it would be alone, so a
  sweep pays Hydra's hand-over and a worker's start-up per group, not per seed. A cell is split into
  parts so that the launcher still has :data:`JOBS_PER_SLOT` jobs per job it runs at once.

Per replicate: resume=true skips a configuration already FINISHED (the others' numbers do not change: a
replicate's stream depends on its seed alone) and claims the others (tracking/claims.py), so two
launcher jobs never compute one replicate; a replicate that fails ends FAILED on its own, its
cell-mates go on; Ctrl-C or SIGTERM ends every replicate still open KILLED. A single run with
backend=jax is a cell of one, run by its Hydra job.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from mcsa_bench.api import Approximation, DivergenceError, NonFiniteError
from mcsa_bench.engine import RunResult, evaluation_rng, remove_checkpoint
from mcsa_bench.jobs.cellcompute import Cell, CellCompute, compute_cell
from mcsa_bench.jobs.config import RunSettings
from mcsa_bench.jobs.threads import limit_threads
from mcsa_bench.jobs.tracked import JobPlace, TrackedRun, checkpoint_file, failed, print_single_run_end
from mcsa_bench.plugins import get_registry
from mcsa_bench.tracking import record as run_record
from mcsa_bench.tracking.lifecycle import interrupt_behind

log = logging.getLogger(__name__)

#: a cell's replicates whose runs are open at once (each run has a writer and a heartbeat thread);
#: a larger cell is computed in groups of this many (a compile each)
MAX_OPEN_RUNS = 256
#: what a job may differ in from its cell-mates
SEED_KEY = "seed"
#: a model parameter that follows the seed, in a cell's key
SEED_MARK = "${seed}"

Job = tuple[RunSettings, JobPlace]


def cell_key(settings: RunSettings) -> str:
    """What a cell's jobs share: the resolved config but the seed, and the kernel that runs. Model
    parameters that follow the seed (``split_seed: ${seed}``, the Gaussian target's ``seed``) are left
    out too: each replicate then runs on its own seed's model data (jobs/cellcompute.py)."""
    shared = {key: value for key, value in settings.resolved.items() if key != SEED_KEY}
    if settings.seed_following:
        shared["model"] = {k: SEED_MARK if k in settings.seed_following else v for k, v in shared["model"].items()}
    return json.dumps([shared, settings.kernel.config if settings.kernel else None], sort_keys=True, default=str)


def group_cells(jobs: list[Job]) -> list[list[Job]]:
    """A sweep's jobs by cell, in the order of each cell's first job."""
    cells: dict[str, list[Job]] = {}
    for job in jobs:
        cells.setdefault(cell_key(job[0]), []).append(job)
    return list(cells.values())


#: a numpy cell is split so that the launcher gets at least this many jobs per job it runs at once: the
#: last jobs leave a worker idle for at most about a quarter of its share of the sweep
JOBS_PER_SLOT = 4


def launcher_cells(jobs: list[Job], parallel: int) -> list[list[Job]]:
    """The launcher jobs of a sweep: each jax cell whole (one compile), each numpy cell in parts of
    :func:`numpy_part_size` seeds for a launcher that runs ``parallel`` jobs at once."""
    cells = group_cells(jobs)
    size = numpy_part_size(sum(len(cell) for cell in cells if cell[0][0].backend == "numpy"), parallel)
    return [part for cell in cells for part in ([cell] if cell[0][0].backend == "jax" else split_evenly(cell, size))]


def numpy_part_size(n_jobs: int, parallel: int) -> int:
    """How many seeds of a numpy cell one launcher job runs: a whole cell for a launcher that runs one job
    at a time, else as many as leave :data:`JOBS_PER_SLOT` launcher jobs per parallel slot (1: none grouped)."""
    return n_jobs if parallel <= 1 else max(1, n_jobs // (JOBS_PER_SLOT * parallel))


def split_evenly(cell: list[Job], size: int) -> list[list[Job]]:
    """``cell`` in consecutive parts of at most ``size`` jobs, as equal as they can be."""
    parts = math.ceil(len(cell) / max(size, 1))
    bounds = [round(i * len(cell) / parts) for i in range(parts + 1)]
    return [cell[start:end] for start, end in zip(bounds, bounds[1:])]


#: the cell file in the sweep directory: the launcher jobs' members
CELLS_FILE = ".mcsa_bench_cells.json"


def write_cells(sweep_dir: str, cells: list[list[Job]]) -> Path:
    """Each launcher job's members (job number, seed, output directory, overrides), in launch order, into
    the sweep directory's cell file; its absolute path (handed to the jobs through their environment)."""
    path = Path(sweep_dir, CELLS_FILE).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    members = [[{"number": place.number, "seed": settings.seed, "output_dir": str(place.output_dir.absolute()),
                 "overrides": list(place.overrides)} for settings, place in cell] for cell in cells]
    path.write_text(json.dumps(members))
    return path


def read_cell(path: str, index: int) -> list[dict]:
    """The members of launcher job ``index`` (Hydra's job number) of the cell file ``path``."""
    return json.loads(Path(path).read_text())[index]


def check_jax_backend(settings: RunSettings, parts) -> None:
    """Refuse, with one line, a backend=jax job JAX or the components' twins do not cover: JAX not
    installed, a component without a twin (naming those covered)."""
    parts.jax_twins(settings.n_iters)


#: how the cells run in this process are computed (:func:`cells_computed_by`)
_computing: list[CellCompute] = [compute_cell]


@contextlib.contextmanager
def cells_computed_by(compute: CellCompute) -> Iterator[None]:
    """Within the block, the cells this process runs take their replicates' results from ``compute``
    (an importer of results computed elsewhere: benchmarks/measure/paper_table_gpu.py, whose sweep's
    cell jobs run in this process, Hydra's basic launcher)."""
    _computing.append(compute)
    try:
        yield
    finally:
        _computing.pop()


def run_cell_jobs(jobs: list[Job]) -> list[str]:
    """Run one cell's jobs; returns each job's status (FINISHED, FAILED, SKIPPED) in order. The
    replicates' results come from :func:`~mcsa_bench.jobs.cellcompute.compute_cell`, or what
    :func:`cells_computed_by` set."""
    compute = _computing[-1]
    registry = get_registry()
    limit_threads(jobs[0][0].threads)
    runs = [TrackedRun(settings, place, registry) for settings, place in jobs]
    statuses = ["SKIPPED" if run.already_finished() else "" for run in runs]
    todo = [i for i, status in enumerate(statuses) if not status]
    for first in range(0, len(todo), MAX_OPEN_RUNS):
        group = todo[first: first + MAX_OPEN_RUNS]
        for i, status in zip(group, _run_group([runs[i] for i in group], registry, compute)):
            statuses[i] = status
    return statuses


def _run_group(runs: list[TrackedRun], registry, compute: CellCompute) -> list[str]:
    settings = runs[0].settings
    for run in runs:
        run.start_record()
    parts, ended, scores = None, {}, {}  # ended: run -> its status, once recorded
    try:
        parts = settings.assemble(registry)  # the cell's components: the same for every seed
        twins = parts.jax_twins(settings.n_iters)  # once per cell; refused in one line before any run opens
        for run in runs:
            run.open(parts, claimant=settings.resume)
        for run in runs:  # under resume=true, a replicate another launcher job computes is left to it
            if (holder := run.claim_cell()) is not None:
                ended[run] = run.skip_for(holder)
        computing = [run for run in runs if run not in ended]
        for members, assemblies, result in _compute(computing, parts, twins, registry, compute) if computing else []:
            cell = {run_record.CELL_TAG: f"{result.device} R={len(members)} chunk={result.chunk_size}",
                    run_record.CELL_SECONDS_TAG: json.dumps(cell_seconds(result))}
            print(f"backend=jax: {len(members)} replicates on {result.device}: " + ", ".join(
                f"{what} {seconds:.1f} s" for what, seconds in cell_seconds(result).items()), flush=True)
            for run, own, replicate in zip(members, assemblies, result.replicates):
                ended[run] = _record(run, own, replicate, cell, scores)
    except KeyboardInterrupt:
        _end_open([run for run in runs if run not in ended], "KILLED")
        raise
    except Exception as error:
        interrupt = interrupt_behind(error)
        if interrupt is not None:
            _end_open([run for run in runs if run not in ended], "KILLED")
            raise interrupt from error
        for run in runs:  # a replicate being recorded when it failed is among them
            if run not in ended:
                _end_open([run], "FAILED", error, parts)
                ended[run] = failed(error, run.place.multirun, run.place.number)
    return [ended[run] for run in runs]


def _compute(runs: list[TrackedRun], parts, twins: tuple, registry,
             compute: CellCompute) -> list[tuple[list, list, object]]:
    """(runs, their assemblies, CellResult) of the runs' replicates, as ``compute`` groups them; the
    cell's checkpoint (with checkpoint_every) is removed once they are computed."""
    settings = runs[0].settings
    cell = Cell(cell_key(settings), _assemblies(runs, parts, registry), [run.settings.seed for run in runs], settings,
                cell_checkpoint(settings, [run.settings.identity for run in runs]), twins)
    print(f"backend=jax: a cell of {len(runs)} replicates gets its programs: compiled, unless this process or JAX's "
          "persistent cache has them (a new structure takes up to a minute or more)", flush=True)
    results = compute(cell)
    saved = cell.checkpoint
    if saved is not None:
        for path in [saved, *saved.parent.glob(f"{saved.stem}-*{saved.suffix}")]:
            remove_checkpoint(path)  # the results are in hand: nothing to resume
    return [([runs[i] for i in members], [cell.assemblies[i] for i in members], result) for members, result in results]


def cell_seconds(result) -> dict[str, float]:
    """Where a computed cell's time went (accel.engine.CellResult), as its runs' CELL_SECONDS_TAG holds it: getting
    its programs, its compiled optimization loop (all replicates together: each replicate's ``wall_time`` is its
    chunk's share, the chunk's seconds over its replicates) and its evaluations."""
    return {"programs": round(result.compile_seconds, 3), "optimization": round(result.compute_seconds, 3),
            "evaluation": round(result.evaluation_seconds, 3)}


def cell_checkpoint(settings: RunSettings, identities: list[str]) -> Path | None:
    """Where a cell with checkpoint_every keeps its checkpoint: by its replicates' config hashes (every
    computing setting, the seed included; not resume or tracking), so a later run of the same cell finds
    it (continued from only with resume=true)."""
    digest = hashlib.sha256(json.dumps(identities).encode()).hexdigest()[:16]
    return checkpoint_file(settings, f"cell-{digest}")


def _assemblies(runs: list[TrackedRun], parts, registry) -> list:
    """Each run's components: the cell's, with its seed's own model where the model follows the seed."""
    first = runs[0].settings.components["model"]
    return [parts if run.settings.components["model"] == first
            else replace(parts, model=run.settings.assemble(registry).model) for run in runs]


def _add_reference_metrics(replicate, parts, settings: RunSettings, scores: dict) -> None:
    """The posterior-accuracy metrics against the model's reference (mcsa_bench.references) and the
    sample-based metrics against draws of π (mcsa_bench.references.samples), at each evaluation's λ,
    computed here on the host by the numpy engine's ReferenceScore and SampleScore, as a numpy run logs
    them (the compiled program has no reference: it may differ between a cell's replicates).
    ``scores``: the cell's ReferenceScore by reference (each finding its family's optimum once) and
    SampleScore by model."""
    from mcsa_bench.references.accuracy import ReferenceScore
    from mcsa_bench.references.samples import SampleScore

    reference_score = sample_score = None
    if parts.reference is not None:
        reference_score = scores.get(("reference", id(parts.reference)))
        if reference_score is None:
            reference_score = scores["reference", id(parts.reference)] = ReferenceScore(parts.reference, parts.family)
    if parts.target_draws is not None:
        sample_score = scores.get(("samples", id(parts.model)))
        if sample_score is None:
            sample_score = scores["samples", id(parts.model)] = SampleScore(parts.model, parts.target_draws)
    if reference_score is None and sample_score is None:
        return
    for row, params in zip(replicate.history, replicate.evaluated):
        q = Approximation(parts.family, params)
        rng = evaluation_rng(replicate.seed, row["iteration"])  # a non-Gaussian q's marginal moments, q's draws
        for score in (reference_score, sample_score if settings.samples_scored_at(row["iteration"]) else None):
            if score is not None:
                row.update(score(q, rng))


def _resumed_tag(replicate) -> dict[str, str]:
    """A replicate continued from a checkpoint is tagged as a numpy run is (its evaluations all reach the store
    through the callbacks here, so nothing else of TrackedRun.complete's resume handling applies)."""
    if replicate.resumed_from is None:
        return {}
    return {run_record.RESUMED_FROM_TAG: str(replicate.resumed_from)}


def _end_open(runs: list[TrackedRun], status: str, error: Exception | None = None, parts=None) -> None:
    """End KILLED (a signal) or FAILED (an error of the whole cell) the runs not yet ended."""
    for run in runs:
        if status == "KILLED":
            run.kill()
        else:
            run.fail(error, parts)


def _record(run: TrackedRun, parts, replicate, cell: dict[str, str], scores: dict) -> str:
    """One replicate's evaluations, results and end, through its run record; ``cell``: its cell's tags."""
    _add_reference_metrics(replicate, parts, run.settings, scores)
    for row in replicate.history:
        snapshot = SimpleNamespace(iteration=row["iteration"],
                                   metrics={k: v for k, v in row.items() if k != "iteration"})
        for callback in run.callbacks:
            callback(snapshot)
    run.tracker.set_tags({**cell, **_resumed_tag(replicate)})
    result = RunResult(q=Approximation(parts.family, replicate.params), state=None, history=replicate.history,
                       iterate=replicate.iterate, trace=replicate.trace)
    if replicate.failure is not None:
        kind = NonFiniteError if replicate.failure.quantity == "log density" else DivergenceError
        error = kind(f"{replicate.failure.message} (backend=jax)", iteration=replicate.failure.iteration,
                     quantity=replicate.failure.quantity)
        error.partial = result  # the evaluations before it and the last finite λ
        run.fail(error, parts)
        return failed(error, run.place.multirun, run.place.number)
    health = run.complete(parts, result)
    lost = run.lost_error()
    if lost is not None:
        return failed(lost, run.place.multirun, run.place.number)
    if not run.place.multirun:
        print_single_run_end(run.settings, run, replicate.history[-1], health, run.place.experiment)
    return "FINISHED"
