"""The JAX backend's face of a component written in JAX: the component itself, in the twin contract
(accel.models.JaxModel, accel.families.Family), so a cell's compiled program traces the user's code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from mcsa_bench.accel.families import Family
from mcsa_bench.accel.models import JaxModel, importance_log_z_evaluation
from mcsa_bench.metrics import LOG_Z_METRICS
from mcsa_bench.references.accuracy import MOMENT_DRAWS


def model_twin(model) -> JaxModel:
    """An AutodiffModel as a JaxModel: its log density as it is, ``log_z`` and ``log_z_khat`` by
    importance sampling with q as the numpy face's ``evaluate`` computes them."""
    return JaxModel(type(model).__name__, model.dim, model.log_density,
                    importance_log_z_evaluation(model.log_density), tuple(LOG_Z_METRICS))


class FamilyTwin(Family):
    """An AutodiffFamily as a JAX family: :meth:`bind` gives q(·; λ) from its one-point functions."""

    def bind(self, params) -> _AutodiffQ:
        return _AutodiffQ(self.numpy_family, params)


@dataclass(frozen=True)
class _AutodiffQ:
    family: Any  # the AutodiffFamily
    params: jax.Array

    def base_noise(self, key, n: int) -> jax.Array:
        return jax.random.normal(key, (n, self.family.noise_dim), dtype=self.params.dtype)

    def transform(self, eps: jax.Array) -> jax.Array:
        return jax.vmap(self.family.transform, (None, 0))(self.params, eps)

    def log_prob(self, z: jax.Array) -> jax.Array:
        return jax.vmap(self.family.log_density, (None, 0))(self.params, z)

    def sample_with_log_prob(self, key, n: int) -> tuple[jax.Array, jax.Array]:
        z = self.transform(self.base_noise(key, n))
        return z, self.log_prob(z)

    def sample(self, key, n: int) -> jax.Array:
        return self.transform(self.base_noise(key, n))

    def moments(self) -> None:
        """None: no closed form (models take their Monte Carlo paths, as with numpy)."""
        return None

    def marginal_moments(self) -> tuple[jax.Array, jax.Array]:
        """(mean, sd) of q's marginals from MOMENT_DRAWS draws (a fixed key: a function of λ alone)."""
        draws = self.sample(jax.random.PRNGKey(0), MOMENT_DRAWS)
        return jnp.mean(draws, axis=0), jnp.std(draws, axis=0, ddof=1)

    def location_scale(self) -> tuple[jax.Array, jax.Array]:
        return self.marginal_moments()
