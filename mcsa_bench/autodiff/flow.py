"""``family=flow``: coupling normalizing flows (flowjax), written once in JAX (mcsa_bench.autodiff), so they run on
both engines and with every scheme and baseline (the ELBO through the reparameterization gradient).

q is a location-scale map of a coupling flow of a standard normal: z = μ + σ ⊙ T(ε; θ), ε ~ N(0, I), with
λ = (μ, ψ, θ), σ = softplus(ψ) and θ the flow's trainable arrays flattened (its equinox pytree raveled). T is
``layers`` coupling layers (Dinh et al. 2017), each transforming half the coordinates elementwise given the
other half through an MLP conditioner of ``depth`` hidden layers of ``width`` units, with a fixed random
permutation between layers (flowjax.flows.coupling_flow):

- ``coupling=affine``: RealNVP's affine transformer, x ↦ a + b x with b = softplus(·) + 0.01;
- ``coupling=spline``: rational-quadratic splines (Durkan et al. 2019) of ``knots`` bins on
  [−``interval``, ``interval``] (in units of σ), the identity outside.

Coupling layers because the MCSA kernels need both q's draws and log q at the chains' states at every step, and
a coupling layer is one pass either way. The conditioners' last layers start at zero, so at ``init_params`` T
is a permutation of ε's coordinates and q is N(μ, diag σ²) exactly (μ = ``init_mean``, σ = ``init_std``);
the hidden layers start at flowjax's random initialization of a fixed key (``init_seed``), so init_params is
deterministic.

flowjax is the optional extra ``[flows]``: without it (or JAX) building the family is one line naming it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mcsa_bench.api import ConfigurationError
from mcsa_bench.autodiff import AutodiffFamily, require_jax
from mcsa_bench.hookspecs import hookimpl

COUPLINGS = ("affine", "spline")
ACTIVATIONS = ("relu", "tanh")
#: the kept ``__dict__`` entry of the built flow (its static part holds functions: never pickled)
_STRUCTURE = "_flow_structure"


def _require_flowjax() -> None:
    require_jax("family FlowFamily")
    try:
        import flowjax  # noqa: F401
    except ImportError:
        raise ConfigurationError("family FlowFamily needs flowjax: pip install 'mcsa-bench[flows]'") from None


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ConfigurationError(f"family.{what}={value}: must be an integer >= 1")
    return int(value)


class FlowFamily(AutodiffFamily):
    """A coupling flow (the module's docstring): ``coupling`` (affine|spline), ``layers``, ``width`` and
    ``depth`` of the conditioners, ``knots`` and ``interval`` of the splines, the conditioners'
    ``activation`` (relu|tanh), and q's start N(``init_mean``, ``init_std``²)."""

    # its fit to draws is non-convex: the same pMCSA run on the 40-mode mixture scored an excess inclusive KL
    # of 156.5 or 45.3 against two fits that differed in their rounding alone (the mean score summed in
    # another order); its KL(π‖q) is the EUBO's where log Z is known (the sample metrics)
    unique_fit = False

    def __init__(self, dim: int, coupling: str = "affine", layers: int = 4, width: int = 32, depth: int = 1,
                 knots: int = 8, interval: float = 4.0, activation: str = "tanh", init_mean: float = 0.0,
                 init_std: float = 1.0, init_seed: int = 0):
        _require_flowjax()
        super().__init__(dim)
        if coupling not in COUPLINGS:
            raise ConfigurationError(f"family.coupling={coupling}: must be one of {', '.join(COUPLINGS)}")
        if activation not in ACTIVATIONS:
            raise ConfigurationError(f"family.activation={activation}: must be one of {', '.join(ACTIVATIONS)}")
        if not float(interval) > 0 or not float(init_std) > 0:
            raise ConfigurationError(f"family.interval={interval} and family.init_std={init_std} must be > 0")
        self.coupling, self.activation = coupling, activation
        self.layers, self.width = _positive_int(layers, "layers"), _positive_int(width, "width")
        self.depth, self.knots = _positive_int(depth, "depth"), _positive_int(knots, "knots")
        self.interval, self.init_mean, self.init_std = float(interval), float(init_mean), float(init_std)
        self.init_seed = int(init_seed)
        self._structure()  # here, outside any trace (see __setstate__)

    # -- the flow's pytree, built once per process -------------------------------------------------------

    def _structure(self) -> tuple[Any, Any, np.ndarray]:
        """(static part, unravel, θ₀): the flow is eqx.combine(unravel(θ), static)."""
        built = self.__dict__.get(_STRUCTURE)
        if built is None:
            built = self.__dict__[_STRUCTURE] = self._build()
        return built

    def _build(self) -> tuple[Any, Any, np.ndarray]:
        import equinox as eqx
        import jax
        import paramax
        from flowjax.bijections import RationalQuadraticSpline
        from flowjax.distributions import StandardNormal
        from flowjax.flows import coupling_flow
        from jax.flatten_util import ravel_pytree

        transformer = (RationalQuadraticSpline(knots=self.knots, interval=self.interval)
                       if self.coupling == "spline" else None)  # None: flowjax's affine with a scale floor
        flow = coupling_flow(jax.random.PRNGKey(self.init_seed), base_dist=StandardNormal((self.dim,)),
                             transformer=transformer, flow_layers=self.layers, nn_width=self.width,
                             nn_depth=self.depth, nn_activation=getattr(jax.nn, self.activation), invert=False)
        params, static = eqx.partition(_zero_last_layers(flow).bijection, eqx.is_inexact_array,
                                       is_leaf=lambda leaf: isinstance(leaf, paramax.NonTrainable))
        theta, unravel = ravel_pytree(params)
        return static, unravel, np.asarray(theta, dtype=float)

    def __getstate__(self) -> dict:
        return {k: v for k, v in super().__getstate__().items() if k != _STRUCTURE}

    def __setstate__(self, state: dict) -> None:
        """Rebuilt at once: built first inside a trace, the flow's arrays would be tracers."""
        self.__dict__.update(state)
        self._structure()

    def _bijection(self, theta):
        import equinox as eqx
        import paramax

        static, unravel, _ = self._structure()
        return paramax.unwrap(eqx.combine(unravel(theta), static))

    # -- the family -------------------------------------------------------------------------------------

    @property
    def num_params(self) -> int:
        return 2 * self.dim + self._structure()[2].size

    def init_params(self) -> np.ndarray:
        psi = self.init_std + math.log(-math.expm1(-self.init_std))  # softplus⁻¹
        return np.concatenate([np.full(self.dim, self.init_mean), np.full(self.dim, psi), self._structure()[2]])

    def _unpack(self, params):
        import jax

        mu, psi, theta = params[: self.dim], params[self.dim: 2 * self.dim], params[2 * self.dim:]
        return mu, jax.nn.softplus(psi), self._bijection(theta)

    def transform(self, params, eps):
        mu, sigma, bijection = self._unpack(params)
        return mu + sigma * bijection.transform(eps)

    def log_density(self, params, z):
        """log q(z) = log φ(T⁻¹(x)) + log|det ∂T⁻¹/∂x| − Σ log σ, x = (z − μ)/σ."""
        import jax.numpy as jnp

        mu, sigma, bijection = self._unpack(params)
        eps, log_det = bijection.inverse_and_log_det((z - mu) / sigma)
        return (-0.5 * jnp.sum(eps**2) - 0.5 * self.dim * math.log(2.0 * math.pi) + log_det
                - jnp.sum(jnp.log(sigma)))


def _zero_last_layers(flow):
    """``flow`` with every coupling conditioner's output layer (weights and biases) at zero."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    from flowjax.bijections import Coupling

    def zeroed(node):
        if not isinstance(node, Coupling):
            return node
        last = node.conditioner.layers[-1]
        return eqx.tree_at(lambda c: (c.conditioner.layers[-1].weight, c.conditioner.layers[-1].bias), node,
                           (jnp.zeros_like(last.weight), jnp.zeros_like(last.bias)))

    return jax.tree_util.tree_map(zeroed, flow, is_leaf=lambda node: isinstance(node, Coupling))


@hookimpl
def register_variational_families(register):
    register("flow", FlowFamily)  # written in JAX: its own twin
