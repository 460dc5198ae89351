"""The MCSA loop: Markov chain gradient descent (NeurIPS paper eq. (1), Alg. 1).

    for t = 1..T:  z_t ~ K_{λ_{t-1}}(z_{t-1}, ·);  g = estimator(z_t, λ_{t-1});  λ_t = optimizer(λ_{t-1}, g)

The engine knows nothing of Hydra or MLflow: tracking and progress bars are callbacks. Randomness
comes from one ``numpy.random.SeedSequence(seed)``, spawned into independent streams for
initialization, the chains, evaluation and the gradient-variance diagnostic; evaluation and
diagnostics therefore never perturb the optimization, and the same seed gives the same numbers bit
for bit, also across a checkpoint and resume.

Everything the loop carries between iterations lives in one :class:`LoopState`; a checkpoint is
that object as plain data and arrays (:mod:`mcsa_bench.engine.checkpoint`), so what is saved is exactly
what the next iteration needs, and reading it runs no code.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from mcsa_bench.api import (
    Approximation,
    Array,
    ChainState,
    ConfigurationError,
    DivergenceError,
    Estimate,
    Estimator,
    MCSAError,
    Model,
    NonFiniteError,
    Optimizer,
    VariationalFamily,
)
from mcsa_bench.engine import checkpoint
from mcsa_bench.engine.interrupts import raise_swallowed_interrupt
from mcsa_bench.engine.settings import Settings
from mcsa_bench.references import PosteriorReference
from mcsa_bench.references.accuracy import ReferenceScore
from mcsa_bench.references.samples import SampleScore


@dataclass(frozen=True)
class Snapshot:
    """What callbacks receive every ``eval_every`` iterations (and at iteration 0 and T).

    ``q`` is the evaluated approximation: the averaged iterate once iterate averaging has begun,
    else the current one; ``iterate`` is the optimizer's current λ either way.
    """

    iteration: int
    q: Approximation
    state: ChainState
    metrics: dict[str, float]
    iterate: Array

    @property
    def params(self) -> Array:
        return self.q.params


Callback = Callable[[Snapshot], None]


@dataclass
class RunResult:
    """The final approximation and chains, and every evaluation's metrics (with ``iteration``).

    ``q`` is what the run evaluated last and should be saved (the averaged iterate when averaging
    is on); ``iterate`` is the optimizer's last λ; ``resumed_from`` is the iteration of the
    checkpoint the run continued from (None for a fresh run). A failed run's partial result
    (``NonFiniteError.partial``) holds the evaluations made so far and the last finite λ (and
    ``state`` None if it failed while initializing the chains).
    """

    q: Approximation
    state: ChainState
    history: list[dict[str, float]] = field(default_factory=list)
    iterate: Array | None = None
    resumed_from: int | None = None
    trace: Array | None = None  # IterateTrace.draws(): λ over the second half, (n, P) (None: not traced)

    @property
    def params(self) -> Array:
        return self.q.params


# --------------------------------------------------------------------------------------------
# The loop's state
# --------------------------------------------------------------------------------------------


@dataclass
class Window:
    """Sums over the iterations since the last evaluation; their means are the logged engine metrics
    (each estimator metric's over the iterations that reported it: rws's divergences over its wake
    iterations)."""

    iterations: int = 0
    grad_norm: float = 0.0
    acceptance: float = 0.0
    transitions: int = 0  # iterations that reported an acceptance rate
    estimator: dict[str, float] = field(default_factory=dict)  # Estimate.metrics
    reports: dict[str, int] = field(default_factory=dict)  # iterations that reported each of them
    diagnostic_points: int = 0
    diagnostics: dict[str, float] = field(default_factory=dict)  # grad_variance, grad_bias

    def add_iteration(self, grad_norm: float, estimate: Estimate) -> None:
        self.iterations += 1
        self.grad_norm += grad_norm
        if estimate.acceptance_rate is not None:
            self.acceptance += estimate.acceptance_rate
            self.transitions += 1
        _accumulate(self.estimator, estimate.metrics)
        _accumulate(self.reports, dict.fromkeys(estimate.metrics, 1))

    def add_diagnostics(self, metrics: dict[str, float]) -> None:
        self.diagnostic_points += 1
        _accumulate(self.diagnostics, metrics)

    def means(self) -> dict[str, float]:
        if not self.iterations:
            return {}
        n = self.iterations
        means = {"grad_norm": self.grad_norm / n}
        if self.transitions:
            means["acceptance_rate"] = self.acceptance / self.transitions
        means.update({name: total / self.reports[name] for name, total in self.estimator.items()})
        means.update({name: total / self.diagnostic_points for name, total in self.diagnostics.items()})
        return means


def _accumulate(sums: dict[str, float], values: dict[str, float]) -> None:
    for name, value in values.items():
        sums[name] = sums.get(name, 0.0) + value


@dataclass
class IterateAverage:
    """Polyak-Ruppert average of λ_t over t >= ``start`` (a running mean)."""

    start: int
    mean: Array | None = None
    count: int = 0

    def add(self, params: Array) -> None:
        self.count += 1
        self.mean = params.copy() if self.mean is None else self.mean + (params - self.mean) / self.count


@dataclass
class Cost:
    """What the run has asked of the model so far: rows of ``log_joint`` and of ``log_joint_and_grad``
    (the scheme's own calls; the gradient diagnostic's copies and evaluation are not the method's cost)."""

    log_density: int = 0  # every row either call evaluated the log density at
    gradient: int = 0  # the rows of log_joint_and_grad
    known: bool = True  # False: resumed from a checkpoint written before the counts, which logs none

    def metrics(self) -> dict[str, float]:
        if not self.known:
            return {}
        return {"log_density_evals": float(self.log_density), "gradient_evals": float(self.gradient)}


#: iterates the trace keeps (docs/estimators.md, "Run health": the optimization's convergence)
TRACE_DRAWS = 200


@dataclass
class IterateTrace:
    """λ_t at every ``stride``-th iteration of the run's second half, at most :data:`TRACE_DRAWS` of
    them, in an array allocated at the start (memory independent of T): the draws the health's
    convergence diagnostic reads."""

    start: int
    stride: int
    iterates: Array  # (TRACE_DRAWS, P)
    count: int = 0

    @classmethod
    def for_run(cls, n_iters: int, num_params: int) -> IterateTrace:
        start = n_iters // 2 + 1
        stride = max(1, math.ceil((n_iters - start + 1) / TRACE_DRAWS))
        return cls(start, stride, np.empty((TRACE_DRAWS, num_params)))

    def add(self, t: int, params: Array) -> None:
        if t >= self.start and (t - self.start) % self.stride == 0:
            self.iterates[self.count] = params
            self.count += 1

    def draws(self) -> Array:
        return self.iterates[:self.count].copy()


@dataclass
class LoopState:
    """Everything the loop carries from one iteration to the next (and all a checkpoint holds).

    The estimator is part of it because kernels may adapt (e.g. an HMC step size kept as an
    attribute). ``replicas`` and ``diagnostic_rng`` belong to the gradient-variance diagnostic.
    """

    fingerprint: dict[str, object]
    t: int  # iterations done
    params: Array  # λ_t
    opt_state: object
    chains: ChainState
    chain_rng: np.random.Generator
    estimator: Estimator
    window: Window
    average: IterateAverage | None
    history: list[dict[str, float]]
    wall_time: float  # seconds spent optimizing (evaluation, diagnostics, checkpoints excluded)
    diagnostic_rng: np.random.Generator | None = None
    replicas: list[ChainState] | None = None
    # added later, with defaults: checkpoints written before them resume (without counts or a trace)
    cost: Cost = field(default_factory=Cost)
    trace: IterateTrace | None = None

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({"cost": Cost(known=False), "trace": None, **state})


# --------------------------------------------------------------------------------------------
# Non-finite log densities
# --------------------------------------------------------------------------------------------


class CheckedModel:
    """The model as the estimator sees it: a NaN or +inf log density (or a non-finite gradient at a
    point of positive density) raises :class:`NonFiniteError` naming the iteration. -inf is a
    legitimate zero density. Everything else is the wrapped model's.

    The message says whose fault it is: at finite points it is a bug in the model; asked at
    non-finite points (q's draws or the chains overflowed) it blames what diverged. Kernels that
    integrate trajectories (HMC) stop a divergent trajectory before it reaches a non-finite point,
    so their divergences never get here."""

    def __init__(self, model: Model):
        self.model = model
        self.iteration = 0
        self.cost = Cost()  # the loop's (LoopState.cost) once it has one: the rows asked for are counted there

    def __getattr__(self, name: str):
        if name == "model":  # not set yet (e.g. while copying): no recursion
            raise AttributeError(name)
        return getattr(self.model, name)

    def log_joint(self, z: Array) -> Array:
        self.cost.log_density += len(z)
        return self._checked(z, self.model.log_joint(z))

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        self.cost.log_density += len(z)
        self.cost.gradient += len(z)
        log_p, grad = self.model.log_joint_and_grad(z)
        self._checked(z, log_p)
        if not _all_finite_array(grad):
            bad = ~np.isfinite(grad).all(axis=1) & (log_p > -np.inf)
            if bad.any():
                raise NonFiniteError(
                    f"gradient of the log density is non-finite for {int(bad.sum())} of {len(log_p)} points "
                    f"at iteration {self.iteration} {self._whose_fault(z, bad)}",
                    iteration=self.iteration, quantity="gradient of the log density")
        return log_p, grad

    def _checked(self, z: Array, log_p: Array) -> Array:
        # the max is NaN or +inf if any value is; -inf is fine (np.maximum.reduce: ndarray.max without its Python layer)
        if not np.maximum.reduce(log_p, initial=-np.inf) < np.inf:
            bad = ~(log_p < np.inf)
            counts = [(int(np.isnan(log_p).sum()), "NaN"), (int(np.sum(log_p == np.inf)), "+inf")]
            what = " and ".join(f"{name} for {count}" for count, name in counts if count)
            raise NonFiniteError(
                f"log density returned {what} of {len(log_p)} points at iteration {self.iteration} "
                f"{self._whose_fault(z, bad)}", iteration=self.iteration, quantity="log density")
        return log_p

    def _whose_fault(self, z: Array, bad: Array) -> str:
        """The end of the message: a model bug if a bad point is finite, else a divergence upstream."""
        model = type(self.model).__name__
        finite = np.isfinite(z[bad]).all(axis=1)
        if finite.any():
            return (f"(model {model}; at finite points, largest |z| among them {np.abs(z[bad][finite]).max():.3g}: "
                    f"a bug in the model's log density)")
        return (f"(model {model}; asked at non-finite points: q or the chains diverged, "
                f"e.g. from a too large optimizer stepsize)")


def _all_finite_array(values: Array) -> bool:
    """Whether every entry of ``values`` is finite, usually from their sum alone: a sum is finite
    unless an entry is ±inf or NaN, or unless it overflows, when the entries are checked one by one."""
    return math.isfinite(np.add.reduce(values, axis=None)) or bool(np.isfinite(values).all())


def _all_finite(value: object) -> bool:
    """Whether every float in an optimizer state (arrays, floats, nested tuples/lists/dicts) is finite."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind not in "fc" or bool(np.isfinite(value).all())
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (tuple, list)):
        return all(_all_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    return True


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def run(
    model: Model,
    family: VariationalFamily,
    estimator: Estimator,
    optimizer: Optimizer,
    settings: Settings | None = None,
    *,
    callbacks: Iterable[Callback] = (),
    init_params: Array | None = None,
    reference: PosteriorReference | None = None,
    target_draws: Array | None = None,
    **setting_values: Any,
) -> RunResult:
    """Run ``settings.n_iters`` iterations of estimator -> optimizer and report to ``callbacks``.

    ``settings`` is a :class:`Settings`; or its fields are given as keywords
    (``run(..., n_iters=1000, seed=0)``, the documented form of earlier releases).

    Metrics at each evaluation: ``grad_norm``, ``acceptance_rate`` and the estimator's own
    ``Estimate.metrics`` (means over the iterations since the previous evaluation), ``wall_time``
    (seconds spent optimizing; evaluation, diagnostics and checkpoints excluded), the cost so far
    ``log_density_evals`` and ``gradient_evals`` (the points the scheme asked the model's ``log_joint``
    and ``log_joint_and_grad`` for, initialization included: :class:`Cost`), and whatever
    ``model.evaluate`` returns (e.g. exact KL for the Gaussian target), and with a ``reference``
    posterior the posterior-accuracy metrics of mcsa_bench.references.accuracy; with ``target_draws``, draws of
    π (``mcsa_bench.references.samples.target_draws``: the model's exact draws or the reference's), the
    sample-based metrics of mcsa_bench.references.samples.

    Evaluations: at iteration 0, at T, and every ``eval_every`` iterations (``eval_schedule``
    "linear") or at eval_every · 2^j (j = 0, 1, ...; "geometric", for models whose evaluation costs
    hundreds of iterations). Each evaluation point draws from its own random stream, so the values
    at iteration t do not depend on the schedule; the window means cover the iterations since the
    previous evaluation.

    Iterate averaging (``optimizer.average_from``): from iteration ⌈average_from · T⌉ on, λ is
    averaged; evaluations from then on, the snapshots' ``q`` and the result's ``q`` are the
    average, while the chains keep using the current iterate.

    Gradient-variance diagnostic (``diagnostics_every`` > 0): R = ``diagnostics_replicas``
    independent copies of the estimator's chains, initialized like its own from their own random
    stream, advance one ``estimate`` at λ_{t-1} (the λ of iteration t's own estimate) for every t
    divisible by ``diagnostics_every``. Logged: ``grad_variance``, the trace of the sample
    covariance of the R gradients, and, when ``model.exact_inclusive_gradient`` knows it,
    ``grad_bias`` = ‖mean - exact‖ (which includes a Monte Carlo error of order
    √(grad_variance / R)); both are means over the diagnostic points since the previous
    evaluation. The optimization does not depend on it.

    Checkpoints (``checkpoint_every`` > 0): every that many iterations the loop state is written
    atomically to ``checkpoint_path``. If that file exists when a run starts, the run continues
    from it, provided it was written by the same run: the same ``identity`` (the job passes its
    config hash, which covers every computing setting; without one, the engine's own computing
    settings stand for it) and the same components' types, budget and initial λ, else
    :class:`ConfigurationError`. The estimator given (with its kernel) then takes its state from the
    checkpoint (an adapted step size). A resumed run's result equals the uninterrupted run's bit
    for bit; its callbacks see only the evaluations after the checkpoint (the result's ``history``
    has them all). Checkpoints hold plain data and arrays (:mod:`mcsa_bench.engine.checkpoint`): reading
    one runs no code. A checkpoint that cannot be written (a full disk) is skipped, said in one line
    on stderr.

    Failures: a NaN or +inf log density, or a non-finite gradient, λ or optimizer state raises
    :class:`NonFiniteError` (:class:`DivergenceError` for the latter three) naming the iteration
    and the quantity, with ``partial``: the :class:`RunResult` so far and the last finite λ.
    """
    if settings is None:
        settings = Settings(**setting_values)
    elif setting_values:
        raise TypeError(f"run() takes settings or their keywords, not both (got {', '.join(setting_values)})")
    if settings.checkpoint_every and settings.checkpoint_path is None:
        raise ConfigurationError("checkpoint_every > 0 needs a checkpoint_path to write to")
    if family.dim != model.dim:
        raise ConfigurationError(f"family dimension {family.dim} does not match the model's {model.dim}")
    if init_params is not None:
        init_params = np.array(init_params, dtype=float)
        if init_params.shape != (family.num_params,):
            raise ConfigurationError(f"init_params must have shape ({family.num_params},), got {init_params.shape}")
    optimizer.set_horizon(settings.n_iters)
    runner = _Runner(model, family, optimizer, settings, list(callbacks), reference, target_draws)
    parts = _component_fingerprint(model, family, estimator, optimizer, init_params)
    loop = runner.resume(parts, estimator)
    resumed_from = None if loop is None else loop.t
    if loop is None:
        loop = runner.start(estimator, init_params, _fingerprint(settings, runner.average_start, parts))
    runner.iterate(loop)
    return runner.result(loop, resumed_from)


def _average_start(optimizer: Optimizer, n_iters: int) -> int | None:
    """The first averaged iteration, ⌈average_from · T⌉ (None: no averaging)."""
    average_from = optimizer.average_from
    return None if average_from is None else max(1, math.ceil(average_from * n_iters))


def _component_fingerprint(model: Model, family: VariationalFamily, estimator: Estimator, optimizer: Optimizer,
                           init_params: Array | None) -> dict[str, object]:
    """What the engine alone knows of a run: the components' types, the budget, λ_0."""
    return {
        "model": type(model).__qualname__, "family": type(family).__qualname__, "num_params": family.num_params,
        "estimator": type(estimator).__qualname__, "n_samples": getattr(estimator, "n_samples", None),
        "kernel": type(getattr(estimator, "kernel", None)).__qualname__, "optimizer": type(optimizer).__qualname__,
        "init_params": None if init_params is None else _digest(init_params.tobytes()),
    }


def _fingerprint(settings: Settings, average_start: int | None, parts: dict[str, object]) -> dict[str, object]:
    """What identifies a run for resuming: its identity (the caller's, e.g. the config hash; without
    one, the engine's computing settings by the config hash's rule) and the engine's own part."""
    identity = settings.identity or json.dumps({**settings.computing_values(), "average_start": average_start},
                                               sort_keys=True)
    return {"identity": _digest(identity.encode()), **parts}


def _legacy_fingerprint(settings: Settings, average_start: int | None, parts: dict[str, object]) -> dict[str, object]:
    """The fingerprint of checkpoints written before it derived from the run's identity (they name the
    engine's settings and hold the caller's string as ``caller``): such checkpoints still resume."""
    return {**settings.computing_values(), "average_start": average_start, **parts,
            "caller": _digest(settings.identity.encode())}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _evaluation_rng(stream: np.random.SeedSequence, iteration: int) -> np.random.Generator:
    # One generator per evaluation point: metrics at iteration t do not depend on eval_every.
    return np.random.default_rng(np.random.SeedSequence(stream.entropy, spawn_key=(*stream.spawn_key, iteration)))


def _run_streams(seed: int) -> list[np.random.SeedSequence]:
    """A run's streams: its initialization, its chains, its evaluations and its diagnostics (spawn(4) extends
    spawn(3): the first three streams are those of runs without diagnostics)."""
    return np.random.SeedSequence(seed).spawn(4)


def evaluation_rng(seed: int, iteration: int) -> np.random.Generator:
    """The generator of a run's evaluation at ``iteration``: the engine's evaluation stream of ``seed`` keyed
    by the iteration, apart from every stream the optimization draws from."""
    return _evaluation_rng(_run_streams(seed)[2], iteration)


def remove_checkpoint(checkpoint_path: Path) -> None:
    """Delete a checkpoint and the temporary files of writes a kill interrupted (a complete run
    has nothing to resume)."""
    checkpoint.remove(checkpoint_path)


def write_loop_state(loop: LoopState, path: Path) -> None:
    """Write a checkpoint atomically (checkpoint.save)."""
    checkpoint.save(path, {f.name: getattr(loop, f.name) for f in fields(LoopState)})


def read_loop_state(path: Path, check_fingerprint: Callable[[dict[str, object]], None], like: LoopState) -> LoopState:
    """The loop state of the checkpoint at ``path``, once ``check_fingerprint`` accepted its fingerprint.
    ``like`` is what the run expects (:meth:`_Runner.expected`): its estimator (with its kernel) and
    optimizer state are what their saved state is restored into (:mod:`mcsa_bench.engine.checkpoint`:
    nothing is made from a class name), and every array it holds is the shape and dtype the saved one
    must have; an array that differs is refused in one line naming the file and the array."""
    state, decoder = checkpoint.read(path)
    if not isinstance(state, dict) or set(state) != {f.name for f in fields(LoopState)}:
        raise ConfigurationError(f"{path} is not an mcsa-bench checkpoint of this engine (fields differ)")

    def value(name: str) -> Any:
        try:
            return decoder.decode(state[name], getattr(like, name), name)
        except MCSAError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:  # a damaged header
            raise ConfigurationError(f"cannot read the checkpoint {path}: its {name} is malformed "
                                     f"({type(error).__name__}: {error})") from None

    fingerprint = value("fingerprint")
    check_fingerprint(fingerprint)
    loop = LoopState(**{f.name: value(f.name) for f in fields(LoopState) if f.name != "fingerprint"},
                     fingerprint=fingerprint)
    _check_restored(path, loop, like)
    return loop


def _check_restored(path: Path, loop: LoopState, like: LoopState) -> None:
    """What decoding into ``like`` leaves open: the iterations done, the arrays that must not be None (λ, the
    chains), the iterate average's mean (none until averaging begins) and the chains' cached gradients (kept
    by some kernels only)."""
    if type(loop.t) is not int or loop.t < 0:
        raise ConfigurationError(f"the checkpoint {path}: t is {loop.t!r}, not a count of iterations")
    expect = {"params": (loop.params, like.params)}
    if loop.average is not None and loop.average.mean is not None:  # none until averaging begins
        expect["average.mean"] = (loop.average.mean, like.params)
    for where, chains in [("chains", loop.chains), *((f"replicas[{i}]", c) for i, c in enumerate(loop.replicas or []))]:
        expect[f"{where}.z"], expect[f"{where}.log_p"] = (chains.z, like.chains.z), (chains.log_p, like.chains.log_p)
        if chains.grad_log_p is not None:
            expect[f"{where}.grad_log_p"] = (chains.grad_log_p, like.chains.z)
    for where, (found, expected) in expect.items():
        checkpoint.check_array(path, where, found, expected.shape, expected.dtype)


class _Runner:
    """The run's fixed parts (components, settings, streams) and the steps that advance a LoopState."""

    def __init__(self, model: Model, family: VariationalFamily, optimizer: Optimizer, settings: Settings,
                 callbacks: list[Callback], reference: PosteriorReference | None = None,
                 target_draws: Array | None = None):
        self.model = model
        self.reference_score = None if reference is None else ReferenceScore(reference, family)
        self.sample_score = None if target_draws is None else SampleScore(model, target_draws)
        self.target = CheckedModel(model)  # what estimators see
        self.family = family
        self.optimizer = optimizer
        self.settings = settings
        self.average_start = _average_start(optimizer, settings.n_iters)
        self.callbacks = callbacks
        self.init_stream, self.chain_stream, self.eval_stream, self.diagnostic_stream = _run_streams(settings.seed)
        self.q: Approximation | None = None  # q(·; λ_t) of the current iterate, prepared once per λ
        self.checkpoint_failed = False  # a checkpoint write failed (said once)

    # --- starting and resuming ----------------------------------------------------------------

    def start(self, estimator: Estimator, init_params: Array | None, fingerprint: dict[str, object]) -> LoopState:
        """Iteration 0: λ_0, the chains (and the diagnostic's replicas) drawn from q(·; λ_0), evaluation."""
        params = self.family.init_params() if init_params is None else init_params
        self.q = Approximation(self.family, params)
        self.target.iteration = 0
        self.target.cost = Cost()
        try:
            chains = estimator.init(np.random.default_rng(self.init_stream), self.target, self.q)
        except NonFiniteError as error:
            error.partial = RunResult(self.q, None, [], params)  # no chains yet
            raise
        loop = LoopState(
            fingerprint=fingerprint, t=0, params=params, opt_state=self.optimizer.init(params), chains=chains,
            chain_rng=np.random.default_rng(self.chain_stream), estimator=estimator, window=Window(),
            average=None if self.average_start is None else IterateAverage(self.average_start),
            history=[], wall_time=0.0, cost=self.target.cost,
            trace=IterateTrace.for_run(self.settings.n_iters, params.size),
        )
        try:
            if self.settings.diagnostics_every:
                loop.diagnostic_rng = np.random.default_rng(self.diagnostic_stream)
                copies = copy.deepcopy(estimator)  # initializing must not touch the estimator's own state
                self.target.cost = Cost()  # nor count as the method's cost
                loop.replicas = [copies.init(loop.diagnostic_rng, self.target, self.q)
                                 for _ in range(self.settings.diagnostics_replicas)]
                self.target.cost = loop.cost
            self.evaluate(loop)
        except NonFiniteError as error:
            error.partial = self.result(loop)
            raise
        return loop

    def expected(self, estimator: Estimator) -> LoopState:
        """What a checkpoint of this run must hold, as :meth:`start` makes it (nothing evaluated): λ_0's shape,
        the optimizer's state of it, the estimator's chains (C = its num_chains, D), the trace's arrays."""
        params = self.family.init_params()

        def chains() -> ChainState:
            return ChainState(np.empty((estimator.num_chains, self.family.dim)), np.empty(estimator.num_chains))

        settings = self.settings
        return LoopState(
            fingerprint={}, t=0, params=params, opt_state=self.optimizer.init(params), chains=chains(),
            chain_rng=None, estimator=estimator, window=Window(),
            average=None if self.average_start is None else IterateAverage(self.average_start), history=[],
            wall_time=0.0, diagnostic_rng=None,
            replicas=[chains() for _ in range(settings.diagnostics_replicas)] if settings.diagnostics_every else None,
            cost=Cost(), trace=IterateTrace.for_run(settings.n_iters, params.size))

    def resume(self, parts: dict[str, object], estimator: Estimator) -> LoopState | None:
        """The loop state of the checkpoint at the checkpoint path, if there is one of this run
        (``parts``: :func:`_component_fingerprint`), else None; another run's is refused. The
        estimator (and its kernel) takes its state from the checkpoint."""
        path = self.settings.checkpoint_path
        if path is None or not path.exists():
            return None
        loop = read_loop_state(path, lambda old: self._check_fingerprint(path, old, parts), self.expected(estimator))
        self.q = Approximation(self.family, loop.params)
        self.target.cost = loop.cost
        return loop

    def _check_fingerprint(self, path: Path, old: dict[str, object], parts: dict[str, object]) -> None:
        new = (_legacy_fingerprint if "caller" in old else _fingerprint)(self.settings, self.average_start, parts)
        if old != new:
            differences = ", ".join(
                "the run's identity" if key in ("identity", "caller")
                else f"{key}: {old.get(key)!r} != {new.get(key)!r}"
                for key in {**old, **new} if old.get(key) != new.get(key))
            raise ConfigurationError(f"the checkpoint {path} belongs to another run ({differences}); "
                                     "delete it or choose another checkpoint path")

    def _save(self, loop: LoopState) -> None:
        """Write the checkpoint, or skip it with one warning if the disk refuses (full, quota)."""
        try:
            write_loop_state(loop, self.settings.checkpoint_path)
        except OSError as error:
            if not self.checkpoint_failed:  # one line, as the job's local record says its own failure
                print(f"mcsa-bench: checkpoint at iteration {loop.t} skipped, the run goes on: cannot write "
                      f"{self.settings.checkpoint_path}: {error}", file=sys.stderr)
            self.checkpoint_failed = True

    # --- iterating ----------------------------------------------------------------------------

    def iterate(self, loop: LoopState) -> None:
        settings = self.settings
        try:
            for t in range(loop.t + 1, settings.n_iters + 1):
                raise_swallowed_interrupt()
                self.target.iteration = t
                if settings.diagnoses_at(t):
                    self.diagnose(loop)
                self.step(loop, t)
                if settings.evaluation.at(t):
                    self.evaluate(loop)
                if settings.checkpoints_at(t):
                    self._save(loop)
        except NonFiniteError as error:
            error.partial = self.result(loop)
            raise

    def step(self, loop: LoopState, t: int) -> None:
        """One MCSA iteration: the estimate at λ_{t-1}, the update, then the bookkeeping."""
        clock = time.perf_counter()
        estimate = loop.estimator.estimate(loop.chain_rng, loop.chains, self.target, self.q)
        grad = estimate.grad
        grad_norm = math.sqrt(float(grad @ grad))
        if not math.isfinite(grad_norm):
            raise DivergenceError(f"non-finite gradient at iteration {t} (estimator {type(loop.estimator).__name__})",
                                  iteration=t, quantity="gradient")
        params, opt_state = self.optimizer.step(loop.params, grad, loop.opt_state)
        if not _all_finite_array(params):
            raise DivergenceError(f"non-finite variational parameters λ at iteration {t} "
                                  f"(optimizer {type(self.optimizer).__name__})", iteration=t, quantity="parameters")
        loop.t, loop.params, loop.opt_state, loop.chains = t, params, opt_state, estimate.state
        self.q = Approximation(self.family, params)
        if loop.average is not None and t >= loop.average.start:
            loop.average.add(params)
        if loop.trace is not None:
            loop.trace.add(t, params)
        loop.window.add_iteration(grad_norm, estimate)
        loop.wall_time += time.perf_counter() - clock

    def diagnose(self, loop: LoopState) -> None:
        """Advance the R replica chains one estimate at λ_{t-1} (what iteration t's own estimate uses);
        record the spread of their gradients and, if known, their distance to the exact one."""
        copies = copy.deepcopy(loop.estimator)  # the kernel's current adaptation, without writing it back
        self.target.cost = Cost()  # the diagnostic's copies are not the method's cost
        try:
            estimates = copies.estimate_replicas(loop.diagnostic_rng, loop.replicas, self.target, self.q)
        finally:
            self.target.cost = loop.cost
        loop.replicas = [estimate.state for estimate in estimates]
        grads = np.stack([estimate.grad for estimate in estimates])
        metrics = {"grad_variance": float(grads.var(axis=0, ddof=1).sum())}
        exact = self.model.exact_inclusive_gradient(self.q)
        if exact is not None:
            metrics["grad_bias"] = float(np.linalg.norm(grads.mean(axis=0) - exact))
        loop.window.add_diagnostics(metrics)

    def evaluated_q(self, loop: LoopState) -> Approximation:
        average = loop.average
        if average is not None and average.count:
            return Approximation(self.family, average.mean)
        return self.q

    def evaluate(self, loop: LoopState) -> None:
        t = loop.t
        if not _all_finite(loop.opt_state):
            raise DivergenceError(
                f"non-finite optimizer state at iteration {t} (optimizer {type(self.optimizer).__name__})",
                iteration=t, quantity="optimizer state")
        q = self.evaluated_q(loop)
        metrics = {**loop.window.means(), "wall_time": loop.wall_time, **loop.cost.metrics()}
        rng = _evaluation_rng(self.eval_stream, t)
        metrics.update(self.model.evaluate(q, rng))
        if self.reference_score is not None:
            metrics.update(self.reference_score(q, rng))
        if self.sample_score is not None and self.settings.samples_scored_at(t):
            metrics.update(self.sample_score(q, rng))
        loop.history.append({"iteration": t, **metrics})
        loop.window = Window()
        snapshot = Snapshot(t, q, loop.chains, metrics, loop.params)
        for callback in self.callbacks:
            callback(snapshot)

    def result(self, loop: LoopState, resumed_from: int | None = None) -> RunResult:
        trace = None if loop.trace is None else loop.trace.draws()
        return RunResult(self.evaluated_q(loop), loop.chains, list(loop.history), loop.params, resumed_from, trace)
