"""Checks of a component's JAX twin against the numpy component (``mcsa-bench check <kind> <name> --jax``).

- model: log joint and its gradient at random points equal the numpy model's to :data:`RTOL`;
- family: log q and the score ∇_λ log q at random λ and z equal the numpy family's to :data:`RTOL`,
  and ``sample_with_log_prob``'s log q is log q of its draws;
- kernel: π-invariance, the numpy kernels' check (mcsa_bench/testing/kernels.py) run on the twin:
  chains started at exact draws of a Gaussian π stay π-distributed after a few transitions, in
  each way a scheme drives a kernel;
- optimizer: the same iterates as the numpy optimizer, to :data:`RTOL`, along a fixed sequence of
  gradients (schedule and averaging start included);
- kernel and estimator: the cost the twin declares (a kernel's ``init_cost``/``step_cost``, a scheme's
  ``iteration_cost``/``cost``) is what the numpy engine counts (engine.CheckedModel) over
  :data:`COST_ITERATIONS` iterations on a small Gaussian target, for every built-in scheme the kernel
  fits (an estimator: with its default kernel): the cost axis a jax run logs.

Imports JAX (mcsa_bench.accel): used only when asked for.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from mcsa_bench.api import ConfigurationError
from mcsa_bench.plugins import Registry, get_registry
from mcsa_bench.testing import families as family_checks
from mcsa_bench.testing.kernels import INVARIANCE_CHAINS, INVARIANCE_TRANSITIONS, SEQUENTIAL_STEPS, invariance_z_scores
from mcsa_bench.testing.numerics import Z_LIMIT
from mcsa_bench.testing.results import CheckResult, Measurement
from mcsa_bench.testing.runner import _run
from mcsa_bench.testing.targets import gaussian_target, offset_proposal

#: relative agreement of a twin's numbers with the numpy component's (float64)
RTOL = 1e-10
POINTS = 16
KERNEL_DIM = 5
OPTIMIZER_STEPS = 50
#: the cost check: iterations of each run, the target's dimension, the budget N, the schemes a kernel is run by
COST_ITERATIONS, COST_DIM, COST_SAMPLES = 4, 3, 4
COST_SCHEMES = ("msc", "msc_rb", "jsa", "pmcsa")
COST_NAMES = ("log_density_evals", "gradient_evals")


def _relative_error(twin: np.ndarray, numpy: np.ndarray) -> float:
    twin, numpy = np.asarray(twin, dtype=float), np.asarray(numpy, dtype=float)
    return float(np.max(np.abs(twin - numpy) / np.maximum(1.0, np.abs(numpy)), initial=0.0))


def _agreement(pairs: dict[str, tuple[np.ndarray, np.ndarray]], what: str) -> Measurement:
    errors = {name: _relative_error(*pair) for name, pair in pairs.items()}
    worst = max(errors, key=lambda name: errors[name])
    return Measurement(errors[worst], RTOL, f"{what}; largest at {worst}: " +
                       ", ".join(f"{name} {error:.2g}" for name, error in errors.items()), "relative error")


def model_twin(model, twin) -> Measurement:
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    z = rng.standard_normal((POINTS, model.dim)) * 0.5
    log_p, grad = model.log_joint_and_grad(z)
    twin_log_p, twin_grad = jax.vmap(jax.value_and_grad(twin.log_joint))(jnp.asarray(z))
    return _agreement({"log joint": (twin_log_p, log_p), "gradient": (twin_grad, grad)},
                      f"{POINTS} points z ~ N(0, 0.25 I)")


def family_twin(numpy_family, twin) -> Measurement:
    import jax
    import jax.numpy as jnp

    from mcsa_bench.accel.families import score

    rng = np.random.default_rng(0)
    params = numpy_family.init_params() + 0.3 * rng.standard_normal(numpy_family.num_params)
    z = numpy_family.sample(params, rng, POINTS)
    q = twin.bind(jnp.asarray(params))
    draws, log_q = q.sample_with_log_prob(jax.random.PRNGKey(0), POINTS)
    return _agreement({
        "log q": (q.log_prob(jnp.asarray(z)), numpy_family.log_prob(params, z)),
        "score": (score(twin, jnp.asarray(params), jnp.asarray(z)), numpy_family.score(params, z)),
        "log q of its own draws": (log_q, numpy_family.log_prob(params, np.asarray(draws))),
    }, f"{POINTS} points of q at a random λ")


def kernel_invariance(twin, *, dim: int = KERNEL_DIM, chains: int = INVARIANCE_CHAINS,
                      transitions: int = INVARIANCE_TRANSITIONS, seed: int = 0) -> Measurement:
    """π-invariance of a JAX kernel (mcsa_bench.testing.kernels.check_pi_invariance's statistics)."""
    import jax
    import jax.numpy as jnp

    from mcsa_bench.accel.families import MeanFieldGaussian
    from mcsa_bench.accel.kernels import Target
    from mcsa_bench.accel.models import twin as model_twin_of

    target = gaussian_target(dim)
    proposal = offset_proposal(target)
    jax_target = Target.of(model_twin_of(target).log_joint)
    q = MeanFieldGaussian(proposal.family).bind(jnp.asarray(proposal.params))
    modes: dict[str, Callable] = {"step": lambda key, c, s: twin.step(key, c, s, jax_target, q)[:2]}
    if twin.uses_proposal_budget:
        modes["step with 4 proposals"] = lambda key, c, s: twin.step(key, c, s, jax_target, q, 4)[:2]
    modes[f"steps({SEQUENTIAL_STEPS})"] = lambda key, c, s: twin.steps(key, c, s, jax_target, q, SEQUENTIAL_STEPS)[1:3]
    start_z = jnp.asarray(target.sample(np.random.default_rng(seed), chains))
    worst_z, where, moved = 0.0, "no statistic", []
    for index, (mode, advance) in enumerate(modes.items()):
        state = twin.init_state(chains, start_z.dtype)
        current = start = twin.init(jax_target, start_z)
        advance = jax.jit(advance)
        for t in range(transitions):
            current, state = advance(jax.random.fold_in(jax.random.PRNGKey(seed), 100 * index + t), current, state)
        z = np.asarray(current.z)
        moved.append(f"{mode} {np.mean(np.any(z != np.asarray(start.z), axis=1)):.0%}")
        for statistic, (score, measured, exact) in invariance_z_scores(target, z).items():
            if not abs(score) <= worst_z:
                worst_z, where = abs(score), f"{mode}: {statistic} {measured:.4g} vs exact {exact:.4g}, z = {score:.3g}"
    return Measurement(worst_z, Z_LIMIT, f"{transitions} transitions of {chains} chains started at π "
                                         f"({dim}-D Gaussian), {where}; chains moved: {', '.join(moved)}",
                       "largest |z|")


def optimizer_twin(numpy_optimizer, twin) -> Measurement:
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    params = rng.standard_normal(4)
    numpy_optimizer.set_horizon(OPTIMIZER_STEPS)
    numpy_params, numpy_state = params, numpy_optimizer.init(params)
    twin_params = jnp.asarray(params)
    twin_state = twin.init(twin_params)
    for t in range(1, OPTIMIZER_STEPS + 1):
        grad = rng.standard_normal(4)
        numpy_params, numpy_state = numpy_optimizer.step(numpy_params, grad, numpy_state)
        twin_params, twin_state = twin.step(twin_params, jnp.asarray(grad), twin_state, t)
    start = twin.average_start
    expected_start = (None if numpy_optimizer.average_from is None
                      else max(1, int(np.ceil(numpy_optimizer.average_from * OPTIMIZER_STEPS))))
    if start != expected_start:
        return Measurement(float("inf"), RTOL, f"averaging starts at {start}, the numpy engine's at {expected_start}",
                           "relative error")
    return _agreement({"λ": (twin_params, numpy_params)}, f"{OPTIMIZER_STEPS} updates with N(0, I) gradients")


def declared_cost(registry: Registry, estimator, kernel) -> Measurement:
    """The twin's declared cost against the numpy engine's count at every iteration, for the estimator
    spec with its default kernel, or the kernel spec run by every built-in scheme that accepts it."""
    from mcsa_bench.engine import run

    problems, labels = [], []
    for label, parts in _cost_assemblies(registry, estimator, kernel):
        labels.append(label)
        counted = run(*parts.run_args(), n_iters=COST_ITERATIONS, seed=0, eval_every=1).history
        twin = parts.jax_twins(COST_ITERATIONS)[2]
        for row in counted:
            try:
                declared = twin.cost(row["iteration"]).metrics()
            except NotImplementedError:
                problems.append(f"{label}: the twin declares no cost (step_cost or iteration_cost not implemented)")
                break
            numpy = {name: row[name] for name in COST_NAMES}
            if declared != numpy:
                problems.append(f"{label}: through iteration {row['iteration']} the twin declares "
                                f"{_rows(declared)}, the numpy engine counted {_rows(numpy)}")
                break
    return Measurement.problems(problems, f"declared cost = counted over {COST_ITERATIONS} iterations: "
                                          f"{', '.join(labels)}")


def _rows(cost: dict) -> str:
    return f"{int(cost['log_density_evals'])} log densities and {int(cost['gradient_evals'])} gradients"


def _cost_assemblies(registry: Registry, estimator, kernel) -> list[tuple[str, Any]]:
    """(label, assembly) of each pair to run on a small Gaussian target: the estimator with its default
    kernel, or the kernel with every built-in scheme that accepts it (assembly refuses the others)."""
    from mcsa_bench.assembly import assemble

    pairs = [(estimator, None)] if kernel is None else [(scheme, kernel) for scheme in COST_SCHEMES]
    found = []
    for scheme, kernel_spec in pairs:
        try:
            parts = assemble(registry, model=("gaussian", {"dim": COST_DIM}), estimator=scheme, kernel=kernel_spec,
                             n_samples=COST_SAMPLES)
        except ConfigurationError:
            if kernel is None:
                raise
            continue  # a scheme that does not take this kernel
        kernel_name = parts.sources["kernel"].name if parts.kernel is not None else "no kernel"
        found.append((f"{parts.sources['estimator'].name} + {kernel_name} N={COST_SAMPLES}", parts))
    return found


def check_twin(kind: str, name: str, params: Mapping[str, Any] | None = None, *,
               registry: Registry | None = None) -> list[CheckResult]:
    """The twin check of the registered ``kind`` component ``name`` built with ``params``; a
    component without a twin is a ConfigurationError naming the covered ones."""
    import mcsa_bench.accel  # noqa: F401  (without JAX: one line saying which extra to install)

    registry = registry or get_registry()
    component = registry.get(kind, name)
    factory = registry.jax_twin(kind, name)
    params = dict(params or {})
    label = functools.partial(CheckResult, kind, name, component.plugin.name if component.plugin else None,
                              component.plugin.distribution if component.plugin else None,
                              component.plugin.version if component.plugin else None)
    if kind == "model":
        built = registry.build(kind, name, **params)
        return [_run(label, "jax twin", lambda m: model_twin(m, factory(m)), built)]
    if kind == "family":
        built = registry.build(kind, name, dim=family_checks.DIM, **params)
        return [_run(label, "jax twin", lambda f: family_twin(f, factory(f)), built)]
    if kind == "kernel":
        return [_run(label, "jax twin π-invariance", lambda k: kernel_invariance(factory(k)),
                     registry.build(kind, name, **params)),
                _run(label, "jax twin cost", lambda spec: declared_cost(registry, None, spec), (name, params))]
    if kind == "optimizer":
        built = registry.build(kind, name, **params)
        return [_run(label, "jax twin", lambda o: optimizer_twin(o, factory(o, OPTIMIZER_STEPS)), built)]
    if kind == "estimator":
        return [_run(label, "jax twin cost", lambda spec: declared_cost(registry, spec, None), (name, params))]
    raise ConfigurationError(f"--jax checks models, families, kernels, estimators and optimizers, not {kind}s")
