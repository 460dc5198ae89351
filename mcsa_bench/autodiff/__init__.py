"""Components written once, in JAX: a model's log density and a family's log q and sampling path for one
point, with every gradient by autodiff, run by both engines (docs/plugins.md, "Written once in JAX").

- :class:`AutodiffModel`: ``log_density(z)`` of one latent vector z (D,) in ``jax.numpy``. The numpy engine
  calls it vmapped and compiled (``log_joint``, ``log_joint_and_grad``: HMC, MALA and the ELBO get the
  gradient by reverse mode); the JAX backend traces it as it is (its twin is itself).
- :class:`AutodiffFamily`: ``log_density(params, z)`` and ``transform(params, eps)`` (z = T(ε; λ) with
  ε ~ N(0, I)) of one point, λ a flat vector (P,). Scores ∇_λ log q, ∇_z log q and the
  reparameterization's vector-Jacobian products come from autodiff; draws follow the numpy engine's
  generator (ε = rng.standard_normal) on numpy and the replicate's key on JAX.

The shipped components keep their hand-written numpy code (the reference, and the speed bars); this is
the third party's path, and NumPyro's, PyMC's and the flow families' (docs/plugins.md says what it costs).
This module imports no JAX, so a plugin can register such a component where JAX is not installed; building
it there is one line naming the extra to install. Its :data:`jax` and :data:`jnp` are JAX and ``jax.numpy``
imported on first use, so that a plugin module naming them at its top costs nothing to a process that never
calls it: every mcsa-bench process loads every plugin (a numpy run, ``plugins``, a sweep's launcher and each
of its workers), and importing JAX costs 1–2 s of each one's start.
"""

from __future__ import annotations

import importlib
from abc import abstractmethod
from typing import Any

import numpy as np

from mcsa_bench.api import Approximation, Array, ConfigurationError, MetricSpec, Model, VariationalFamily
from mcsa_bench.metrics import LOG_Z_METRICS, importance_log_z

__all__ = ["AutodiffFamily", "AutodiffModel", "jax", "jnp", "twin_factory", "written_in_jax"]


class LazyModule:
    """A module imported at the first attribute read (``jnp.exp``), not when a plugin module names it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self._name), attribute)

    def __repr__(self) -> str:
        return f"<{self._name}, imported on first use>"


jax = LazyModule("jax")
jnp = LazyModule("jax.numpy")


def require_jax(component: str) -> None:
    """A ConfigurationError in one line when JAX is not installed; else JAX switched to float64 (importing
    mcsa_bench.accel), so that the arrays a component makes in its ``__init__`` after this are float64."""
    try:
        import jax  # noqa: F401
    except ImportError:
        raise ConfigurationError(f"{component} is written in JAX (mcsa_bench.autodiff): "
                                 "pip install 'mcsa-bench[jax]'") from None
    import mcsa_bench.accel  # noqa: F401


class _Compiled:
    """A component's compiled functions, made on first use and never pickled or copied (jitted
    functions are neither): a component stays a plain object for checkpoints and worker processes."""

    def _compiled(self) -> Any:
        compiled = self.__dict__.get("_compiled_functions")
        if compiled is None:
            compiled = self.__dict__["_compiled_functions"] = self._compile()
        return compiled

    def _compile(self) -> Any:
        raise NotImplementedError

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_compiled_functions"}


class AutodiffModel(_Compiled, Model):
    """A target written once in JAX: subclasses call ``super().__init__(dim)`` (before they make JAX arrays:
    it switches JAX to float64) and implement
    :meth:`log_density`; :meth:`latent_names`, :meth:`reference` and the rest of :class:`~mcsa_bench.api.Model`
    are optional as for any model. Metrics: ``log_z`` and ``log_z_khat`` (importance sampling with q), on
    both backends."""

    def __init__(self, dim: int):
        require_jax(f"model {type(self).__name__}")
        if int(dim) < 1:
            raise ConfigurationError(f"a model needs dim >= 1, got {dim}")
        self.dim = int(dim)

    @abstractmethod
    def log_density(self, z: Any) -> Any:
        """log p(x, z) (a scalar) of one latent vector z (D,), in jax.numpy: traced, vmapped and differentiated."""

    def _compile(self) -> Any:
        from mcsa_bench.autodiff import compiled

        return compiled.ModelFunctions(self.log_density)

    def log_joint(self, z: Array) -> Array:
        return self._compiled().log_joint(z)

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        return self._compiled().log_joint_and_grad(z)

    def metric_specs(self) -> dict[str, MetricSpec]:
        return dict(LOG_Z_METRICS)

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        return importance_log_z(self, q, rng)


class AutodiffFamily(_Compiled, VariationalFamily):
    """A family written once in JAX: subclasses call ``super().__init__(dim)`` and implement
    :attr:`num_params`, :meth:`init_params` (numpy), :meth:`log_density` and :meth:`transform` (JAX, one
    point). ``noise_dim`` is the length of ε (default D). Optional: :meth:`moments` (numpy, closed form),
    as for any family; without it, the posterior-accuracy metrics estimate q's marginals from draws."""

    reparameterizable = True

    def __init__(self, dim: int):
        require_jax(f"family {type(self).__name__}")
        super().__init__(dim)

    @property
    def noise_dim(self) -> int:
        return self.dim

    @abstractmethod
    def log_density(self, params: Any, z: Any) -> Any:
        """log q(z; λ) (a scalar) of one point z (D,), in jax.numpy."""

    @abstractmethod
    def transform(self, params: Any, eps: Any) -> Any:
        """z = T(ε; λ) (D,) of one standard normal ε (noise_dim,), in jax.numpy: q's draws."""

    def _compile(self) -> Any:
        from mcsa_bench.autodiff import compiled

        return compiled.FamilyFunctions(self.log_density, self.transform)

    def base_noise(self, rng: np.random.Generator, n: int) -> Array:
        return rng.standard_normal((n, self.noise_dim))

    def sample(self, params: Array, rng: np.random.Generator, n: int) -> Array:
        return self.reparameterize(params, self.base_noise(rng, n))

    def sample_with_log_prob(self, params: Array, rng: np.random.Generator, n: int) -> tuple[Array, Array]:
        return self._compiled().sample_with_log_prob(params, self.base_noise(rng, n))

    def log_prob(self, params: Array, z: Array) -> Array:
        return self._compiled().log_prob(params, z)

    def score(self, params: Array, z: Array) -> Array:
        return self._compiled().score(params, z)

    def mean_log_prob_and_score(self, params: Array, z: Array) -> tuple[float, Array]:
        mean_log_q, mean_score = self._compiled().mean_log_prob_and_score(params, z)
        return float(mean_log_q), np.array(mean_score)

    def reparameterize(self, params: Array, eps: Array) -> Array:
        return self._compiled().reparameterize(params, eps)

    def reparameterize_vjp(self, params: Array, eps: Array, cotangent: Array) -> Array:
        return self._compiled().reparameterize_vjp(params, eps, cotangent)

    def grad_log_prob(self, params: Array, z: Array) -> Array:
        return self._compiled().grad_log_prob(params, z)


def written_in_jax(factory: object) -> bool:
    """Whether ``factory`` is a component class written once in JAX."""
    return isinstance(factory, type) and issubclass(factory, (AutodiffModel, AutodiffFamily))


def twin_factory(kind: str):
    """The JAX twin factory of a ``kind`` component written in JAX (models and families)."""
    from mcsa_bench.autodiff import twins

    return {"model": twins.model_twin, "family": twins.FamilyTwin}[kind]
