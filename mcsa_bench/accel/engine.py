"""The compiled, batched engine: one grid cell (R replicates of one configuration, differing only in
their seeds) as one program (docs/architecture.md, "The accelerated backend").

The replicates are vmapped; the iterations between two evaluation points of
:class:`mcsa_bench.engine.EvaluationSchedule` (linear or geometric) run inside one compiled loop
whose bounds are arguments, so a cell compiles three programs (start, advance, evaluate) whatever
its schedule. The host only calls them once per evaluation point. The programs come from the
process's cache (accel/programs.py): the components' numeric hyperparameters (a learning rate,
HMC's step size) are their arguments, so the cells of a sweep that differ only in those share one
compilation, and evaluate, which takes the evaluated λ, is shared by every scheme and optimizer
run on one model and family. A model whose data follows the seed
(a data split, a Gaussian target) gives each replicate its own arrays, vmapped with the seeds
(``run_cell(..., data=)``; the twin rebuilt on them inside the program, ``JaxModel.with_data``).

Randomness: replicate r's stream is ``PRNGKey(seed_r)``, folded with 0 (initialization), 1 (the
chains: folded again with the iteration t) and 2 (evaluation: folded with t). So a replicate's
numbers depend on its seed alone, not on R, its position or its chunk; they are not the numpy
engine's numbers (another generator), only the same distribution.

Failures: a replicate whose gradient, λ, optimizer state or chains' log density turns non-finite
(NaN or +inf; -inf is a zero density) is frozen at its last finite state from that iteration on and
reported failed with it, as the numpy engine's NonFiniteError/DivergenceError would end its run;
its cell-mates go on. Its history holds the evaluations before the failure.

Cost and trace, as the numpy engine's: each evaluation logs ``log_density_evals`` and
``gradient_evals`` (the scheme's declared rows, ``Scheme.cost``), and the program keeps λ_t at the
numpy engine's :class:`~mcsa_bench.engine.IterateTrace` iterations (the second half, at most
TRACE_DRAWS) in a fixed-size buffer per replicate, returned as ``ReplicateResult.trace`` for the
run's health.

Gradient-variance diagnostic (``diagnostics_every`` K > 0), as the numpy engine's: each replicate
carries R = ``diagnostics_replicas`` independent copies of its scheme's chains, drawn from q(·; λ_0)
with its own stream (``PRNGKey(seed)`` folded with 3: with 0 at the start, with t at iteration t);
at every t divisible by K, before iteration t's own estimate, each copy advances one estimate at
λ_{t-1} with the replicate's current kernel state (used, never written back), and the window sums
``grad_variance`` (the trace of the R gradients' sample covariance) and, where the model twin knows
the exact gradient (``JaxModel.exact_inclusive_gradient``), ``grad_bias`` = ‖mean − exact‖; logged
as means over the window's diagnostic points. The optimization's own stream is untouched, and the
copies are not in the cost. A copy's non-finite log density fails the replicate, as it fails a
numpy run.

Wall time: ``wall_time`` in a replicate's history is the seconds its chunk spent in the advance
program (compilation and evaluation excluded), divided by the number of replicates in the chunk:
each replicate's share of the compute it ran in (with the diagnostic, its copies' estimates are
inside that time: the compiled loop does not separate them).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mcsa_bench.accel.kernels import Chains, Target, density_ok
from mcsa_bench.accel.models import JaxModel
from mcsa_bench.accel.optimizers import Average, Moments, Optimizer
from mcsa_bench.accel.programs import PROGRAMS, hyperparameters, with_hyperparameters
from mcsa_bench.accel.schemes import Scheme
from mcsa_bench.api import ConfigurationError
from mcsa_bench.engine import TRACE_DRAWS, EvaluationSchedule, IterateTrace, Settings, table
from mcsa_bench.engine.checkpoint import check_array
from mcsa_bench.engine.checkpoint import read as read_checkpoint
from mcsa_bench.engine.checkpoint import save as save_checkpoint
from mcsa_bench.engine.interrupts import raise_swallowed_interrupt

DTYPES = {"float64": jnp.float64, "float32": jnp.float32}
#: failure codes carried in the compiled program -> the quantity named in the failure record
FAILURES = {1: "log density", 2: "gradient", 3: "parameters", 4: "optimizer state"}
#: fraction of the device's memory a chunk's programs may use when the chunk size is automatic
MEMORY_FRACTION = 0.5
#: cells up to this many replicates run as one chunk without measuring their programs' memory
PROBE_ABOVE = 64


@dataclass(frozen=True, kw_only=True)
class CellSettings(Settings):
    """A cell's run settings: the engine's rows of the one settings table (engine/settings.py: T, the
    evaluation schedule, the gradient-variance diagnostic; each replicate's seed is its own, not this
    ``seed``), and what only a compiled cell has: the floating-point type, and the largest chunk of
    replicates run at once (None: as many as fit in MEMORY_FRACTION of the device's memory, from the
    compiled programs' memory use at a small probe size)."""

    dtype: str = "float64"
    max_replicates_per_chunk: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dtype not in DTYPES:
            raise ConfigurationError(f"unknown dtype {self.dtype!r}; allowed: {', '.join(DTYPES)}")
        if self.max_replicates_per_chunk is not None and self.max_replicates_per_chunk < 1:
            raise ConfigurationError(f"max_replicates_per_chunk must be >= 1, got {self.max_replicates_per_chunk}")

    @classmethod
    def of(cls, settings: Settings, **cell) -> CellSettings:
        """The cell settings of a run's settings (its rows of the engine's table) and ``cell``'s own."""
        return cls(**{row.name: getattr(settings, row.name) for row in table(Settings)}, **cell)

    def fingerprint(self) -> dict:
        """What a cell's checkpoint is made for: the rows that change what a cell computes (not a seed)."""
        rows = {row.name: getattr(self, row.name) for row in table(Settings) if row.computing and row.name != "seed"}
        return {**rows, "dtype": self.dtype, "max_replicates_per_chunk": self.max_replicates_per_chunk}

    def evaluation_points(self) -> list[int]:
        """The iterations that end with an evaluation, 0 and T included."""
        schedule = EvaluationSchedule(self.n_iters, self.eval_every, self.eval_schedule)
        points = [t for t in range(self.eval_every, self.n_iters + 1, self.eval_every) if schedule.at(t)]
        return [0, *points, *([self.n_iters] if not points or points[-1] != self.n_iters else [])]

    @property
    def trace(self) -> IterateTrace:
        """The numpy engine's trace of a T-iteration run (its iterations: ``start``, ``stride``)."""
        return IterateTrace.for_run(self.n_iters, 0)

    def trace_draws(self, done: int) -> int:
        """How many iterates the trace holds after iterations 1..done (IterateTrace.add's rule)."""
        trace = self.trace
        return 0 if done < trace.start else (done - trace.start) // trace.stride + 1


@dataclass(frozen=True)
class CellCheckpoint:
    """A cell's checkpoints: after the evaluation (if any) of every t divisible by ``every`` (t < T)
    and after every chunk but the last, the cell's whole state goes to ``path`` (mcsa_bench.checkpoint's
    plain-data format, written atomically): the finished chunks' results and the running chunk's
    replicates (λ, optimizer state, chains, kernel state, averaging, window, failure, trace, the
    diagnostic's copies: the keys are the seeds folded with t), evaluations and compute time. A cell
    started with a checkpoint at ``path`` continues from it, provided it is this cell's: the same
    ``identity`` (the caller's name for the configuration: jobs/cell.py passes the cell key), seeds,
    settings, chunk size and components, else a ConfigurationError. The result equals the
    uninterrupted cell's bit for bit (wall_time aside)."""

    path: Path
    every: int
    identity: str = ""

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ConfigurationError(f"checkpoint every must be >= 1, got {self.every}")


@dataclass(frozen=True)
class Failure:
    """Why and when a replicate stopped: the iteration and the non-finite quantity."""

    iteration: int
    quantity: str

    @property
    def message(self) -> str:
        return f"non-finite {self.quantity} at iteration {self.iteration}"


@dataclass
class ReplicateResult:
    """One replicate: its evaluations (dicts with ``iteration`` and the numpy engine's metric names),
    the evaluated λ (the iterate average once averaging has begun), the last iterate, its failure,
    the λ each evaluation evaluated (for metrics the host adds: the posterior-accuracy ones), the
    traced iterates (engine.RunResult's ``trace``: those before a failure), and the iteration a checkpoint
    continued it from (T: it had finished before; None: computed from its start)."""

    seed: int
    history: list[dict[str, float]]
    params: np.ndarray
    iterate: np.ndarray
    failure: Failure | None = None
    evaluated: list[np.ndarray] = field(default_factory=list)
    trace: np.ndarray | None = None
    resumed_from: int | None = None


@dataclass
class CellResult:
    """Every replicate in the order of the seeds, and where the cell's time went."""

    replicates: list[ReplicateResult]
    chunk_size: int
    compile_seconds: float = 0.0  # getting the programs: compiling them, or tracing them on a cache hit
    compute_seconds: float = 0.0
    evaluation_seconds: float = 0.0
    device: str = field(default_factory=lambda: str(jax.devices()[0]))


class Window(NamedTuple):
    """Sums over the iterations since the last evaluation (engine.Window): their means are logged."""

    iterations: jnp.ndarray
    grad_norm: jnp.ndarray
    sums: dict
    counts: dict
    diagnostic_points: jnp.ndarray
    diagnostics: dict  # grad_variance (and grad_bias) summed over the diagnostic points


class Replicate(NamedTuple):
    """What one replicate carries from one iteration to the next."""

    params: jnp.ndarray
    opt_state: Moments
    chains: Chains
    kernel_state: object
    average: Average
    window: Window
    failed_at: jnp.ndarray  # -1 while running
    failure: jnp.ndarray  # a FAILURES code, 0 while running
    trace: jnp.ndarray  # (TRACE_DRAWS, P): λ at the IterateTrace iterations, written outside _iteration
    replicas: Chains | None  # the gradient-variance diagnostic's copies of the chains (leading axis R); None: off


def _all_finite(tree) -> jnp.ndarray:
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


class _Cell:
    """The cell's components and its three programs: start, advance, evaluate. ``hyper``: the
    components' numeric hyperparameters, which start and advance take as their last argument."""

    def __init__(self, model: JaxModel, family, scheme: Scheme, optimizer: Optimizer, settings: CellSettings):
        self.model, self.family, self.scheme, self.optimizer, self.settings = model, family, scheme, optimizer, settings
        self.dtype = DTYPES[settings.dtype]
        self.metric_names = self._scheme_metric_names()
        self.hyper = {"optimizer": hyperparameters(optimizer, self.dtype),
                      "kernel": hyperparameters(scheme.kernel, self.dtype)}

    def _bound(self, hyper) -> _Cell:
        """This cell with its components' hyperparameters the program's arguments ``hyper``."""
        bound = copy.copy(self)
        bound.optimizer = with_hyperparameters(self.optimizer, hyper["optimizer"])
        if hyper["kernel"]:
            bound.scheme = copy.copy(self.scheme)
            bound.scheme.kernel = with_hyperparameters(self.scheme.kernel, hyper["kernel"])
        return bound

    def _model(self, data) -> JaxModel:
        """The model on one replicate's data (its own arrays for ``()``: every replicate shares them)."""
        return self.model.with_data(data) if data else self.model

    def _target(self, data) -> Target:
        return Target.of(self._model(data).log_joint)

    def _scheme_metric_names(self) -> tuple[str, ...]:
        """The names the scheme's metrics come under, from the traced shapes of one estimate."""
        def one(seed):
            params, chains, kernel_state = self._initial(seed, ())
            return self.scheme.estimate(jax.random.PRNGKey(0), chains, kernel_state, self._target(()), self.family,
                                        params, 1).metrics

        return tuple(jax.eval_shape(one, jnp.zeros((), jnp.int64)))

    def _keys(self, seed):
        """The streams of initialization, the chains, evaluation and the gradient-variance diagnostic."""
        base = jax.random.PRNGKey(seed)
        return [jax.random.fold_in(base, purpose) for purpose in range(4)]

    @property
    def diagnostic_names(self) -> tuple[str, ...]:
        if not self.settings.diagnostics_every:
            return ()
        gaussian_q = self.family.bind(self.family.init_params()).moments() is not None
        exact = self.model.exact_inclusive_gradient is not None and gaussian_q  # as the numpy model's None
        return ("grad_variance",) + (("grad_bias",) if exact else ())

    def _empty_window(self) -> Window:
        zero = jnp.zeros((), self.dtype)
        return Window(zero, zero, dict.fromkeys(self.metric_names, zero), dict.fromkeys(self.metric_names, zero),
                      zero, dict.fromkeys(self.diagnostic_names, zero))

    def _initial(self, seed, data):
        """λ_0, and the chains drawn from q(·; λ_0) with the kernel's state."""
        init_key = self._keys(seed)[0]
        params = self.family.init_params().astype(self.dtype)
        return (params, *self.scheme.init(init_key, self._target(data), self.family.bind(params), self.dtype))

    def _diagnostic_keys(self, seed, t):
        """One key per copy of the chains for the diagnostic at iteration t (t = 0: their initialization)."""
        key = jax.random.fold_in(self._keys(seed)[3], t)
        return jax.random.split(key, self.settings.diagnostics_replicas)

    def _initial_replicas(self, seed, data, params) -> Chains | None:
        """The diagnostic's copies of the chains, drawn like the scheme's own from q(·; λ_0)."""
        if not self.settings.diagnostics_every:
            return None
        target, q = self._target(data), self.family.bind(params)
        return jax.vmap(lambda key: self.scheme.init(key, target, q, self.dtype)[0])(self._diagnostic_keys(seed, 0))

    def _start(self, seed, data) -> Replicate:
        params, chains, kernel_state = self._initial(seed, data)
        replicas = self._initial_replicas(seed, data, params)
        ok = density_ok(chains.log_p) & (True if replicas is None else density_ok(replicas.log_p))
        return Replicate(params, self.optimizer.init(params), chains, kernel_state, Average.empty(params),
                         self._empty_window(), jnp.where(ok, -1, 0).astype(jnp.int32),
                         jnp.where(ok, 0, 1).astype(jnp.int32), jnp.zeros((TRACE_DRAWS, params.size), self.dtype),
                         replicas)

    def start(self, seeds, data, hyper) -> Replicate:
        return jax.vmap(self._bound(hyper)._start)(seeds, data)

    def _diagnose(self, replicate: Replicate, seed, data, t):
        """Every copy of the chains advanced by one estimate at λ_{t-1} with the replicate's kernel state
        (not written back): (the copies, {grad_variance, grad_bias}, whether their densities were
        numbers), as engine._Runner.diagnose."""
        target, params = self._target(data), replicate.params

        def one(key, chains):
            estimate = self.scheme.estimate(key, chains, replicate.kernel_state, target, self.family, params, t)
            return estimate.grad, estimate.chains, jnp.asarray(estimate.density_ok)

        grads, replicas, ok = jax.vmap(one)(self._diagnostic_keys(seed, t), replicate.replicas)
        metrics = {"grad_variance": jnp.sum(jnp.var(grads, axis=0, ddof=1))}
        if "grad_bias" in self.diagnostic_names:
            exact = self._model(data).exact_inclusive_gradient(self.family, params)
            metrics["grad_bias"] = jnp.linalg.norm(jnp.mean(grads, axis=0) - exact)
        return replicas, metrics, jnp.all(ok)

    def _diagnosed(self, replicate: Replicate, seed, data, t):
        """_diagnose at the diagnostic's iterations (t is every replicate's: one branch), else nothing:
        (the copies, the metrics, 1.0 where diagnosed, whether their densities were numbers)."""
        if not self.settings.diagnostics_every:
            return None, {}, 0.0, True

        def skip(_):
            zero = jnp.zeros((), self.dtype)
            return replicate.replicas, dict.fromkeys(self.diagnostic_names, zero), jnp.asarray(True)

        replicas, metrics, ok = jax.lax.cond(t % self.settings.diagnostics_every == 0,
                                             lambda _: self._diagnose(replicate, seed, data, t), skip, None)
        return replicas, metrics, (t % self.settings.diagnostics_every == 0).astype(self.dtype), ok

    def _iteration(self, replicate: Replicate, seed, data, t) -> Replicate:
        replicas, diagnostics, diagnosed, replicas_ok = self._diagnosed(replicate, seed, data, t)
        chain_key = self._keys(seed)[1]
        grad, chains, kernel_state, metrics, densities_ok = self.scheme.estimate(
            jax.random.fold_in(chain_key, t), replicate.chains, replicate.kernel_state, self._target(data),
            self.family, replicate.params, t)
        grad_norm = jnp.sqrt(grad @ grad)
        params, opt_state = self.optimizer.step(replicate.params, grad, replicate.opt_state, t)
        # the first failing check names the quantity, in the numpy engine's order
        checks = [replicas_ok & densities_ok, jnp.isfinite(grad_norm), _all_finite(params), _all_finite(opt_state)]
        code = jnp.select([~ok for ok in checks], [1, 2, 3, 4], 0).astype(jnp.int32)
        running = replicate.failed_at < 0
        advance = running & (code == 0)
        start = self.optimizer.average_start
        average = replicate.average if start is None else replicate.average.add(params, t >= start)
        window = replicate.window
        window = Window(window.iterations + 1, window.grad_norm + grad_norm,
                        {name: window.sums[name] + value * reported for name, (value, reported) in metrics.items()},
                        {name: window.counts[name] + reported for name, (_, reported) in metrics.items()},
                        window.diagnostic_points + diagnosed,
                        {name: window.diagnostics[name] + value for name, value in diagnostics.items()})
        moved = Replicate(params, opt_state, chains, kernel_state, average, window, replicate.failed_at,
                          replicate.failure, None, replicas)
        # the trace buffer stays out of the select: copying it every iteration would cost O(TRACE_DRAWS · P)
        kept = jax.tree_util.tree_map(lambda new, old: jnp.where(advance, new, old), moved,
                                      replicate._replace(trace=None))
        failing = running & (code != 0)
        return kept._replace(failed_at=jnp.where(failing, t, replicate.failed_at).astype(jnp.int32),
                             failure=jnp.where(failing, code, replicate.failure), trace=replicate.trace)

    def _record(self, replicates: Replicate, t) -> Replicate:
        """λ_t of every replicate into its trace's row for iteration t (a failed replicate's frozen λ
        is written too; the host keeps only the rows before its failure)."""
        trace = self.settings.trace
        row = (t - trace.start) // trace.stride
        written = jax.lax.dynamic_update_slice_in_dim(replicates.trace, replicates.params[:, None], row, axis=1)
        return replicates._replace(trace=written)

    def _traced(self, t):
        trace = self.settings.trace
        return (t >= trace.start) & ((t - trace.start) % trace.stride == 0)

    def fresh_window(self, replicates: Replicate, seeds) -> Replicate:
        """Every replicate's window emptied (after an evaluation, as engine._Runner.evaluate)."""
        return replicates._replace(window=jax.vmap(lambda _: self._empty_window())(seeds))

    def advance(self, replicates: Replicate, seeds, start, stop, data, hyper) -> Replicate:
        """Iterations start+1 .. stop of every replicate; the window goes on summing."""
        step = jax.vmap(self._bound(hyper)._iteration, in_axes=(0, 0, 0, None))

        def iteration(t, replicates):
            replicates = step(replicates, seeds, data, t)
            # t is every replicate's: one branch for the chunk, the buffer untouched off the trace's iterations
            return jax.lax.cond(self._traced(t), self._record, lambda r, _: r, replicates, t)

        return jax.lax.fori_loop(start + 1, stop + 1, iteration, replicates)

    def _evaluate(self, params, seed, data, t) -> dict:
        if self.model.evaluate is None:
            return {}
        eval_key = self._keys(seed)[2]
        return self._model(data).evaluate(jax.random.fold_in(eval_key, t), self.family.bind(params))

    def evaluate(self, params, seeds, t, data) -> dict:
        """The model's metrics at each replicate's evaluated λ (``_evaluated_params``): the program
        depends on the model and the family alone."""
        return jax.vmap(self._evaluate, in_axes=(0, 0, 0, None))(params, seeds, data, t)


def _window_means(window: Window, r: int) -> dict[str, float]:
    """engine.Window.means for replicate r (host arrays)."""
    iterations = float(window.iterations[r])
    if not iterations:
        return {}
    means = {"grad_norm": float(window.grad_norm[r]) / iterations}
    for name in window.sums:
        count = float(window.counts[name][r])
        if count:
            means[name] = float(window.sums[name][r]) / count
    points = float(window.diagnostic_points[r])
    if points:
        means.update({name: float(total[r]) / points for name, total in window.diagnostics.items()})
    return means


def _device_memory_budget() -> int:
    """MEMORY_FRACTION of the device's memory (of the machine's RAM for the CPU)."""
    stats = jax.devices()[0].memory_stats() or {}
    total = stats.get("bytes_limit") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(MEMORY_FRACTION * total)


def _program_bytes(compiled) -> int:
    analysis = compiled.memory_analysis()
    if analysis is None:
        return 0
    return sum(getattr(analysis, name, 0) for name in (
        "temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes"))


def _start_hyper(cell: _Cell) -> dict:
    """start reads the kernel's hyperparameters only (its initial state): one program for every optimizer."""
    return {"optimizer": {}, "kernel": cell.hyper["kernel"]}


def _programs(cell: _Cell, chunk: int, data: tuple) -> dict[str, tuple]:
    """(function, abstract arguments, donated arguments) of the cell's start, advance, fresh_window and
    evaluate for chunks of ``chunk`` replicates (``data``: the model's arrays stacked over replicates, or ())."""
    seeds = jax.ShapeDtypeStruct((chunk,), jnp.int64)
    t = jax.ShapeDtypeStruct((), jnp.int32)
    replicates = chunk_shapes(cell, chunk, data)
    data = _chunk_data(data, chunk)
    return {"start": (cell.start, (seeds, data, _start_hyper(cell)), ()),
            "advance": (cell.advance, (replicates, seeds, t, t, data, cell.hyper), (0,)),
            "fresh_window": (cell.fresh_window, (replicates, seeds), ()),
            "evaluate": (cell.evaluate, (replicates.params, seeds, t, data), ())}


def program_keys(model: JaxModel, family, estimator: Scheme, optimizer: Optimizer, settings: CellSettings,
                 chunk: int, data: tuple = ()) -> dict[str, str]:
    """The cache keys (accel/programs.py) of a cell's start, advance and evaluate at ``chunk`` replicates,
    traced, not compiled: configurations with equal keys share those programs (benchmarks/measure/grid_costs.py
    counts a grid's compiles by them). ``data``: per-replicate model arrays, stacked (arrays or shapes)."""
    with _precision(settings.dtype):
        cell = _Cell(model, family, estimator, optimizer, settings)
        return {name: PROGRAMS.key(*program) for name, program in _programs(cell, chunk, data).items()}


class CompiledCell:
    """A cell's programs for one chunk of ``chunk`` replicates, from the process's cache (compiled
    unless a configuration of the same structure compiled them): ``start(seeds)``,
    ``advance(replicates, seeds, start, stop)`` (iterations start+1..stop), ``fresh_window`` and, unless
    ``with_evaluate`` is False, ``evaluate(replicates, seeds, t)``; ``seconds`` is the time spent
    getting them (compiling, or tracing on a hit). With ``data`` (each model array stacked over the
    chunk's replicates: :func:`stack_data`) every replicate runs on its own data, given to each call
    as its last argument. run_cell uses it; benchmarks time ``advance`` alone."""

    def __init__(self, cell: _Cell, chunk: int, with_evaluate: bool = True, data: tuple = ()):
        self.hyper = cell.hyper
        self.start_hyper = _start_hyper(cell)
        clock = time.perf_counter()
        found = {name: PROGRAMS.compiled(*program) for name, program in _programs(cell, chunk, data).items()
                 if with_evaluate or name != "evaluate"}
        self._start, self._advance, self._evaluate = found["start"], found["advance"], found.get("evaluate")
        self._fresh_window = found["fresh_window"]
        self.seconds = time.perf_counter() - clock

    def start(self, seeds, data=()):
        return self._start(seeds, data, self.start_hyper)

    def advance(self, replicates, seeds, start, stop, data=()):
        return self._advance(replicates, seeds, start, stop, data, self.hyper)

    def fresh_window(self, replicates, seeds):
        return self._fresh_window(replicates, seeds)

    def evaluate(self, replicates, seeds, t, data=()):
        return self.evaluate_at(_evaluated_params(replicates.average, replicates.params), seeds, t, data)

    def evaluate_at(self, params, seeds, t, data=()):
        """The model's metrics at the evaluated λ ``params`` (chunk, P)."""
        return self._evaluate(params, seeds, t, data)

    @property
    def bytes(self) -> int:
        return max(_program_bytes(p) for p in (self._start, self._advance, self._evaluate) if p is not None)


def _chunk_data(data: tuple, chunk: int) -> tuple:
    """The shapes of a chunk's slice of the replicates' stacked data."""
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct((chunk, *a.shape[1:]), a.dtype), data)


def chunk_shapes(cell: _Cell, chunk: int, data: tuple = ()) -> Replicate:
    """The shapes of a chunk's replicates (what a checkpoint's state is restored into)."""
    return jax.eval_shape(cell.start, jax.ShapeDtypeStruct((chunk,), jnp.int64), _chunk_data(data, chunk),
                          _start_hyper(cell))


def _chunk_size(cell: _Cell, replicates: int, settings: CellSettings, data: tuple = ()) -> int:
    """The replicates run at once: the setting's, all of them up to PROBE_ABOVE, else all of them if
    their programs fit the memory budget (then those programs are the ones run, from the cache), or
    as many as fit at their memory per replicate (programs' memory grows linearly in the chunk)."""
    if settings.max_replicates_per_chunk is not None:
        return min(replicates, settings.max_replicates_per_chunk)
    if replicates <= PROBE_ABOVE:
        return replicates
    whole = CompiledCell(cell, replicates, data=data).bytes
    budget = _device_memory_budget()
    if whole <= budget:
        return replicates
    return max(1, min(replicates, budget // max(1, whole // replicates)))


def compile_cell(model: JaxModel, family, estimator: Scheme, optimizer: Optimizer, settings: CellSettings,
                 chunk: int, with_evaluate: bool = True) -> CompiledCell:
    """The cell's programs for chunks of ``chunk`` replicates (seeds as int arrays of that length), in float64."""
    return CompiledCell(_Cell(model, family, estimator, optimizer, settings), chunk, with_evaluate)


def run_cell(model: JaxModel, family, estimator: Scheme, optimizer: Optimizer, settings: CellSettings,
             seeds: Sequence[int], data: Sequence[Sequence] | None = None,
             checkpoint: CellCheckpoint | None = None) -> CellResult:
    """Run one cell: every seed's replicate of the optimization, compiled and vmapped.

    ``model`` is a JaxModel, ``family``, ``estimator`` (a scheme with its kernel) and ``optimizer``
    are JAX twins (``Assembly.jax_twins`` builds them from numpy components). Seeds
    are run in chunks (``settings.max_replicates_per_chunk`` or automatic), the last one padded
    with copies of its last seed, so every chunk uses the same compiled programs. ``data``: each
    replicate's model arrays (``JaxModel.data`` of the twin of its seed's model: a split or a
    Gaussian target that follows the seed), None when every replicate runs on ``model``'s own.
    ``checkpoint``: where and how often the cell's state is saved, and resumed from (:class:`CellCheckpoint`).
    """
    seeds = [int(seed) for seed in seeds]
    if not seeds:
        raise ConfigurationError("run_cell needs at least one seed")
    with _precision(settings.dtype):
        return _run_cell(model, family, estimator, optimizer, settings, seeds, stack_data(model, data, len(seeds)),
                         checkpoint)


def stack_data(model: JaxModel, data: Sequence[Sequence] | None, replicates: int) -> tuple:
    """Each of the model's arrays stacked over the replicates (host memory; a chunk's slice goes to the
    device), or () when they all run on the model's own; a ConfigurationError for arrays that do not
    fit the model's."""
    if data is None:
        return ()
    if model.with_data is None or len(data) != replicates:
        raise ConfigurationError(f"model {model.name!r}: per-replicate data needs a twin built by twin() and one "
                                 f"set of arrays per seed ({len(data)} for {replicates})")
    shapes = [np.shape(a) for a in model.data]
    for arrays in data:
        if [np.shape(a) for a in arrays] != shapes:
            raise ConfigurationError(f"model {model.name!r}: a replicate's data has shapes "
                                     f"{[np.shape(a) for a in arrays]}, the cell's {shapes}")
    return tuple(np.stack([np.asarray(arrays[i], dtype=model.data[i].dtype) for arrays in data])
                 for i in range(len(shapes)))


@contextlib.contextmanager
def _precision(dtype: str):
    """float32: the programs traced with x64 off, so that the model's float64 constants are taken
    as float32 too (JAX warns about each; that is the point here, so those warnings are silenced)."""
    if dtype == "float64":
        yield
        return
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Explicitly requested dtype", category=UserWarning)
        yield


def _run_cell(model, family, estimator, optimizer, settings: CellSettings, seeds: list[int], data: tuple,
              checkpoint: CellCheckpoint | None) -> CellResult:
    cell = _Cell(model, family, estimator, optimizer, settings)
    clock = time.perf_counter()
    chunk = _chunk_size(cell, len(seeds), settings, data)
    saved = _Saved(checkpoint, _cell_fingerprint(cell, seeds, chunk, checkpoint))
    done, progress = saved.resume(chunk_shapes(cell, chunk, data))
    programs = CompiledCell(cell, chunk, data=data)
    result = CellResult(_resumed(done, settings.n_iters), chunk, compile_seconds=time.perf_counter() - clock)
    for first in range(len(result.replicates), len(seeds), chunk):
        rows = list(range(first, min(first + chunk, len(seeds))))
        rows += [rows[-1]] * (chunk - len(rows))  # padded with the last replicate
        padded = jnp.asarray([seeds[r] for r in rows], jnp.int64)
        part = tuple(jnp.asarray(arrays[rows]) for arrays in data)
        result.replicates += _resumed(_run_chunk(programs, settings, estimator, padded, part,
                                                 min(chunk, len(seeds) - first), result, saved, progress),
                                      None if progress is None else progress.t)
        progress = None
        if len(result.replicates) < len(seeds):
            saved.save(result.replicates, None)  # a finished chunk is not computed again
    return result


def _resumed(replicates: list[ReplicateResult], t: int | None) -> list[ReplicateResult]:
    """The replicates, marked continued from a checkpoint's iteration ``t`` (None: not resumed), as a numpy
    run is (tracking.record.RESUMED_FROM_TAG)."""
    return replicates if t is None else [replace(r, resumed_from=t) for r in replicates]


def _run_chunk(programs: CompiledCell, settings: CellSettings, scheme: Scheme, seeds, data: tuple, count: int,
               result: CellResult, saved: _Saved, progress: _Progress | None) -> list[ReplicateResult]:
    """One chunk's replicates from their start, or from ``progress`` (a checkpoint's), to T."""
    chunk = seeds.shape[0]
    if progress is None:
        progress = _Progress(None, programs.start(seeds, data), [[] for _ in range(count)], [[] for _ in range(count)])
    replicates, histories, evaluated, compute = progress.replicates, progress.histories, progress.evaluated, 0.0
    points = set(settings.evaluation_points())
    previous = progress.t
    for t in sorted(points | saved.points(settings.n_iters)):
        if previous is not None and t <= previous:
            continue
        if previous is not None:
            clock = time.perf_counter()
            replicates = programs.advance(replicates, seeds, jnp.int32(previous), jnp.int32(t), data)
            jax.block_until_ready(replicates)
            compute += time.perf_counter() - clock
            raise_swallowed_interrupt()  # a SIGTERM inside JAX's garbage-collection callback
        if t in points:
            replicates = _evaluate_chunk(programs, scheme, seeds, data, t, previous, replicates, histories, evaluated,
                                         (progress.compute + compute) / chunk, result)
        if saved.at(t, settings.n_iters):
            saved.save(result.replicates, _Progress(t, jax.device_get(replicates), histories, evaluated,
                                                    progress.compute + compute))
        previous = t
    result.compute_seconds += compute
    final = jax.device_get(replicates)
    last = jax.device_get(_evaluated_params(replicates.average, replicates.params))
    return [ReplicateResult(int(seeds[r]), histories[r], np.asarray(last[r]), np.asarray(final.params[r]),
                            None if final.failed_at[r] < 0 else
                            Failure(int(final.failed_at[r]), FAILURES[int(final.failure[r])]), evaluated[r],
                            np.asarray(final.trace[r, :settings.trace_draws(_iterations_done(final, r, settings))]))
            for r in range(count)]


def _evaluate_chunk(programs: CompiledCell, scheme: Scheme, seeds, data, t: int, previous: int | None, replicates,
                    histories: list, evaluated: list, wall_time: float, result: CellResult) -> Replicate:
    """The evaluation at t of every running replicate, appended to its history; the windows emptied."""
    clock = time.perf_counter()
    evaluated_params = _evaluated_params(replicates.average, replicates.params)
    metrics = jax.device_get(programs.evaluate_at(evaluated_params, seeds, jnp.int32(t), data))
    window, failed_at, params = jax.device_get((replicates.window, replicates.failed_at, evaluated_params))
    result.evaluation_seconds += time.perf_counter() - clock
    for r in range(len(histories)):
        if failed_at[r] >= 0:
            continue
        row = {"iteration": t, **(_window_means(window, r) if previous is not None else {}),
               "wall_time": wall_time, **scheme.cost(t).metrics()}
        row.update({name: float(values[r]) for name, values in metrics.items()})
        histories[r].append(row)
        evaluated[r].append(np.asarray(params[r]))
    return programs.fresh_window(replicates, seeds)


@dataclass
class _Progress:
    """A chunk's state at iteration t (None: not started): its replicates (host arrays in a checkpoint),
    each replicate's evaluations and evaluated λ so far, and the seconds its advance took."""

    t: int | None
    replicates: Replicate
    histories: list
    evaluated: list
    compute: float = 0.0


def _cell_fingerprint(cell: _Cell, seeds: list[int], chunk: int, checkpoint: CellCheckpoint | None) -> dict:
    """What a checkpoint must match to resume: the caller's identity and what the engine alone knows."""
    if checkpoint is None:
        return {}
    kernel = cell.scheme.kernel
    return {"identity": hashlib.sha256(checkpoint.identity.encode()).hexdigest()[:16], "seeds": seeds,
            "settings": json.dumps(cell.settings.fingerprint(), sort_keys=True), "chunk": chunk,
            "model": cell.model.name,
            "components": [type(c).__qualname__ for c in (cell.family, cell.scheme, kernel, cell.optimizer)]}


class _Saved:
    """A cell's checkpoint file (none without a CellCheckpoint): what it resumes and its writes."""

    def __init__(self, checkpoint: CellCheckpoint | None, fingerprint: dict):
        self.checkpoint, self.fingerprint = checkpoint, fingerprint

    def points(self, n_iters: int) -> set[int]:
        """The iterations a chunk stops at to save."""
        every = self.checkpoint.every if self.checkpoint else n_iters + 1
        return set(range(every, n_iters, every))

    def at(self, t: int, n_iters: int) -> bool:
        return self.checkpoint is not None and t < n_iters and t % self.checkpoint.every == 0 and t > 0

    def save(self, done: list[ReplicateResult], progress: _Progress | None) -> None:
        if self.checkpoint is None:
            return
        save_checkpoint(self.checkpoint.path, {
            "fingerprint": self.fingerprint, "done": [_plain_result(r) for r in done],
            "progress": None if progress is None else {
                "t": progress.t, "replicates": progress.replicates, "histories": progress.histories,
                "evaluated": progress.evaluated, "compute": progress.compute}})

    def resume(self, template: Replicate) -> tuple[list[ReplicateResult], _Progress | None]:
        """(the finished replicates, the running chunk's progress) of the checkpoint, ([], None) without one;
        ``template``: the shapes of a chunk's replicates, which its state is restored into."""
        path = None if self.checkpoint is None else self.checkpoint.path
        if path is None or not path.exists():
            return [], None
        state, decoder = read_checkpoint(path)
        if not isinstance(state, dict) or set(state) != {"fingerprint", "done", "progress"}:
            raise ConfigurationError(f"{path} is not a checkpoint of a jax cell (its fields differ)")
        old = decoder.decode(state["fingerprint"])
        if old != self.fingerprint:
            new = self.fingerprint
            differences = ", ".join(key for key in {**old, **new} if old.get(key) != new.get(key))
            raise ConfigurationError(f"the checkpoint {path} belongs to another cell (differs in: {differences}); "
                                     "delete it or choose another checkpoint path")
        done = [_result_of(found) for found in decoder.decode(state["done"])]
        found = decoder.decode(state["progress"], {"replicates": template})
        _check_restored(path, done, found, template)
        if found is None:
            return done, None
        replicates = jax.tree_util.tree_map(jnp.asarray, found["replicates"])
        return done, _Progress(found["t"], replicates, found["histories"], found["evaluated"], found["compute"])


def _check_restored(path, done: list[ReplicateResult], found: dict | None, template: Replicate) -> None:
    """Every array of a checkpoint is what the cell's programs take (else JAX's "Argument types differ from
    the types for which this computation was compiled", deep in the advance): the running chunk's, the shape
    and dtype of ``template``'s; a finished replicate's λ, each replicate's (P,). One line naming the file
    and the array (mcsa_bench.engine.checkpoint.check_array)."""
    params = template.params
    for i, replicate in enumerate(done):
        for name in ("params", "iterate"):
            check_array(path, f"done[{i}].{name}", getattr(replicate, name), params.shape[1:], params.dtype)
    if found is None:
        return
    if type(found.get("t")) is not int or found["t"] < 0:
        raise ConfigurationError(f"the checkpoint {path}: progress.t is {found.get('t')!r}, not a count of iterations")
    expected, structure = jax.tree_util.tree_flatten_with_path(template)
    leaves, found_structure = jax.tree_util.tree_flatten_with_path(found["replicates"])
    if found_structure != structure:
        raise ConfigurationError(f"the checkpoint {path}: progress.replicates is not the state this cell's "
                                 "programs carry; delete it to start the cell afresh")
    for (key, leaf), (_, shape) in zip(leaves, expected):
        check_array(path, f"progress.replicates{jax.tree_util.keystr(key)}", leaf, shape.shape, shape.dtype)


def _plain_result(replicate: ReplicateResult) -> dict:
    failure = replicate.failure
    return {**{f.name: getattr(replicate, f.name) for f in fields(ReplicateResult)},
            "failure": None if failure is None else [failure.iteration, failure.quantity]}


def _result_of(found: dict) -> ReplicateResult:
    failure = found.pop("failure")
    return ReplicateResult(**found, failure=None if failure is None else Failure(*failure))


def _iterations_done(final: Replicate, r: int, settings: CellSettings) -> int:
    """The iterations replicate r completed: all T, or those before the one it failed at."""
    failed_at = int(final.failed_at[r])
    return settings.n_iters if failed_at < 0 else max(failed_at - 1, 0)


@jax.jit
def _evaluated_params(average: Average, params):
    """Each replicate's evaluated λ: the iterate average once averaging has begun, else λ."""
    return jax.vmap(lambda a, p: a.evaluated(p))(average, params)
