"""The public contracts of mcsa-bench: the five kinds of plugin component.

Everything works on batches. Notation (docs/methods.md §1):

- ``D``: latent dimension (unconstrained space), ``P``: number of variational parameters,
- ``B``: a batch of points, ``C``: a number of independent Markov chains,
- ``z``: points of shape ``(B, D)``; ``params`` (λ): a flat float vector of shape ``(P,)``.

A *model* is the target π(z) ∝ p(x, z); a *variational family* is q(z; λ); a *kernel* is a
π-invariant Markov transition that may use q as its proposal; an *estimator* (an MCSA scheme)
turns kernel transitions into a gradient of KL(π‖q); an *optimizer* descends on that gradient.

This module depends on nothing else in the package: plugin authors subclass these classes.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from types import MappingProxyType
from typing import ClassVar, NamedTuple, Protocol, runtime_checkable

import numpy as np

Array = np.ndarray


class MCSAError(Exception):
    """Base class of the errors mcsa-bench raises on purpose (user-facing, no traceback needed)."""


class ConfigurationError(MCSAError, ValueError):
    """A component was asked for something it cannot do: bad parameter, incompatible pairing."""


def did_you_mean(word: str, candidates) -> str:
    """" (did you mean 'x'?)" for the closest candidate, ignoring case (``MSC``: 'msc'), or "" when none is
    close: for messages about a name (a component, a key, a metric, a command) that is not there."""
    import difflib

    by_folded = {str(c).lower(): str(c) for c in candidates}
    close = difflib.get_close_matches(str(word).lower(), list(by_folded), n=1, cutoff=0.6)
    return f" (did you mean {by_folded[close[0]]!r}?)" if close else ""


class NonFiniteError(MCSAError, FloatingPointError):
    """A NaN or +inf where the run needs a finite value; the run cannot go on.

    ``iteration`` and ``quantity`` (e.g. ``"log density"``, ``"gradient"``) name where it happened;
    the engine attaches ``partial``, the run so far (an ``engine.RunResult`` with the evaluations
    made and the last finite λ), so the caller can save it.
    """

    def __init__(self, message: str, *, iteration: int | None = None, quantity: str | None = None):
        super().__init__(message)
        self.iteration = iteration
        self.quantity = quantity
        self.partial = None


class DivergenceError(NonFiniteError):
    """The optimization produced a non-finite gradient, parameter or optimizer state."""


# --------------------------------------------------------------------------------------------
# Metrics a component declares
# --------------------------------------------------------------------------------------------

METRIC_KINDS = ("result", "diagnostic")
METRIC_DIRECTIONS = ("higher", "lower", None)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """What a logged metric is, declared by the component that produces it (``metric_specs()`` of a
    model, an estimator or a kernel): ``kind`` "result" (a table's column: how good q is) or
    "diagnostic" (how the run went: never tabled as a result), ``direction`` "higher" or "lower" when
    one is better (None: neither), a ``label`` for tables and axes, and its ``unit`` ("" for none).
    """

    kind: str
    direction: str | None = None
    label: str = ""
    unit: str = ""

    def __post_init__(self) -> None:
        if self.kind not in METRIC_KINDS:
            raise ConfigurationError(f"metric kind must be one of {', '.join(METRIC_KINDS)}; got {self.kind!r}")
        if self.direction not in METRIC_DIRECTIONS:
            raise ConfigurationError(f"metric direction must be 'higher', 'lower' or None; got {self.direction!r}")


def declared_metrics(*components: object) -> dict[str, MetricSpec]:
    """The metric declarations of a run's components (model, estimator, kernel; None is skipped),
    merged by name: what the job stores beside the run's metrics. Two components that declare one
    name differently are a :class:`ConfigurationError`."""
    specs: dict[str, MetricSpec] = {}
    for component in components:
        if component is None:
            continue
        for name, spec in component.metric_specs().items():
            if specs.setdefault(name, spec) != spec:
                raise ConfigurationError(f"metric {name!r} is declared as {specs[name]} and, by "
                                         f"{type(component).__name__}, as {spec}")
    return specs


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


@runtime_checkable
class Reference(Protocol):
    """A reference posterior over a model's unconstrained latents, as the posterior-accuracy metrics
    read it (docs/references.md); ``mcsa_bench.references.PosteriorReference`` implements it."""

    name: str
    latent_names: list[str]
    mean: Array  # (D,)
    sd: Array  # (D,)
    cov: Array | None  # (D, D), when known
    draws: Array | None  # (S, D) draws of π, when stored
    check_points: Array | None  # latent vectors with known log densities, when stored

    @property
    def dim(self) -> int: ...

    @property
    def exact(self) -> bool: ...

    def discrepancy(self, model: Model) -> float:
        """How far the model's log joint is from the stored densities at the check points, beyond a constant."""
        ...

    def describes(self, model: Model) -> bool:
        """Whether the model's log joint is the density this reference was made for."""
        ...


class Model(ABC):
    """An unnormalized target density π(z) ∝ p(x, z) on R^D.

    Constrained latents are mapped to R^D by bijections whose log-Jacobian is part of
    :meth:`log_joint` (docs/methods.md §1, §6).

    Subclasses set ``dim`` (D) in ``__init__`` and implement :meth:`log_joint`.
    """

    dim: int

    @abstractmethod
    def log_joint(self, z: Array) -> Array:
        """log p(x, z) for a batch ``z`` of shape (B, D); returns shape (B,).

        Must be one vectorized evaluation (no Python loop over the batch).
        May return ``-inf`` where the density is zero; must not return NaN for finite ``z``.
        """

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]:
        """(log p(x, z) of shape (B,), ∇_z log p(x, z) of shape (B, D)).

        Needed by gradient-based kernels (HMC) and by the ELBO baseline. Models without a
        gradient leave this unimplemented; :attr:`has_gradient` reports which case applies.
        """
        raise NotImplementedError(f"{type(self).__name__} provides no gradient of its log joint")

    @property
    def has_gradient(self) -> bool:
        return type(self).log_joint_and_grad is not Model.log_joint_and_grad

    def latent_names(self) -> list[str]:
        """Names of the D latent coordinates, e.g. ``beta[3]`` or ``log_sigma_beta``."""
        return [f"z[{i}]" for i in range(self.dim)]

    def evaluate(self, q: Approximation, rng: np.random.Generator) -> dict[str, float]:
        """Model-specific metrics of the current approximation (exact KL, test LPD, log Z, ...).

        Called every ``eval_every`` iterations; ``rng`` is reserved for evaluation and never
        touches the optimization's random stream.
        """
        return {}

    def exact_inclusive_gradient(self, q: Approximation) -> Array | None:
        """The exact ∇_λ KL(π‖q) = -E_π[s(λ; z)] of shape (P,) when the model knows it, else None.

        Optional; the engine's gradient-variance diagnostic reports ``grad_bias`` against it.
        """
        return None

    #: K, the number of modes :meth:`assign_modes` tells apart (a mixture's components), or None
    num_modes: int | None = None

    def sample(self, rng: np.random.Generator, n: int) -> Array | None:
        """Exact independent draws from π, shape (n, D), when the model can make them, else None.

        Optional; the sample-based accuracy metrics (mcsa_bench.references.samples) compare q's draws
        with these (or with a reference's draws)."""
        return None

    def log_normalizer(self) -> float | None:
        """log Z = log ∫ p(x, z) dz when known exactly (a normalized density: 0), else None.

        Optional; the sample-based metrics report how far the log Z estimates are from it."""
        return None

    def assign_modes(self, z: Array) -> Array | None:
        """The mode (an integer in [0, :attr:`num_modes`)) each point z (B, D) belongs to, for a
        multimodal target that tells its modes apart, else None (the entropic mode coverage's input)."""
        return None

    def reference(self) -> Reference | None:
        """The model's own reference posterior, or None to use the shipped one that matches
        (docs/references.md). Override it for exact moments known in code (the Gaussian target, the
        funnel) or a file a plugin ships; ``mcsa_bench.references.PosteriorReference`` (from
        ``references.exact`` or ``references.load``) is the implementation to return."""
        return None

    def metric_specs(self) -> dict[str, MetricSpec]:
        """What :meth:`evaluate`'s metrics are, by name (:class:`MetricSpec`); default: none declared."""
        return {}

    def artifacts(self) -> dict[str, dict[str, Array]]:
        """Arrays worth saving once per run, as ``{file stem: {array name: array}}``.

        For example the Gaussian target returns ``{"target": {"mean": m, "cov": S}}``.
        """
        return {}


# --------------------------------------------------------------------------------------------
# Variational families
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Moments:
    """What a family knows in closed form of q's marginals at one λ (:meth:`VariationalFamily.moments`).

    ``location`` and ``scale`` (D,) place and size every marginal (a Gaussian's mean and sd, a
    Student-t's μ and σ): kernels centre and scale defensive proposals and HMC's diagonal mass with
    them, and run health watches the scale. ``mean`` and ``sd`` (D,) are the marginals' moments (NaN
    and inf where they do not exist; the posterior-accuracy metrics compare them with π's), by default
    ``location`` and ``scale``. ``gaussian``: q is the Gaussian with this mean and the covariance of
    :meth:`gaussian_moments` (diagonal, or ``scale_tril`` times its transpose), which exact metrics use.
    The arrays may be views of λ: read them, do not write them.
    """

    location: Array
    scale: Array
    mean: Array | None = None
    sd: Array | None = None
    gaussian: bool = False
    scale_tril: Array | None = None  # (D, D), the Cholesky factor of a Gaussian q's full covariance
    shape: Mapping[str, Array] = field(
        default_factory=dict
    )  # saved too: parameters beyond place and size (a Student-t's df)

    def __post_init__(self) -> None:
        if self.mean is None:
            object.__setattr__(self, "mean", self.location)
        if self.sd is None:
            object.__setattr__(self, "sd", self.scale)

    def gaussian_moments(self) -> tuple[Array, Array] | None:
        """(mean (D,), covariance (D, D)) when q is Gaussian, else None. Forms the D × D matrix: call
        it for exact metrics only, not where the marginals serve."""
        if not self.gaussian:
            return None
        if self.scale_tril is not None:
            return self.mean, self.scale_tril @ self.scale_tril.T
        return self.mean, np.diag(self.sd**2)

    def summary(self) -> dict[str, Array]:
        """The arrays saved with a run's final λ (``variational.npz``): ``mean`` and ``std``, and
        ``scale_tril`` for a full-rank Gaussian, ``location``, ``scale`` and ``shape``'s arrays for any other q."""
        arrays = {"mean": self.mean, "std": self.sd}
        if self.scale_tril is not None:
            arrays["scale_tril"] = self.scale_tril
        if not self.gaussian:
            arrays.update(location=self.location, scale=self.scale, **self.shape)
        return arrays


#: the family methods that :meth:`VariationalFamily.moments` replaced (a subclass defining one is warned)
_REPLACED_BY_MOMENTS = ("gaussian_moments", "marginal_moments", "location_scale", "summary")


class VariationalFamily(ABC):
    """A family q(z; λ) over R^D with a flat parameter vector λ of shape (P,).

    Families are stateless: every method receives ``params`` explicitly, so optimizers and
    estimators can hold λ as a plain array. A family implements the five abstract members; the
    rest are optional, with the default each documents.

    Quantities derived from λ alone (σ = softplus(ψ), a log-determinant, ...) can be computed once
    per λ: :meth:`prepare` returns them, :class:`Approximation` calls it once, and passes its
    result as ``params`` to every method. A family that overrides :meth:`prepare` must accept both
    the raw λ and what :meth:`prepare` returns wherever it takes ``params``; the default returns λ
    itself, so families that ignore this keep working unchanged.
    """

    #: the family implements :meth:`base_noise`, :meth:`reparameterize`, :meth:`reparameterize_vjp`
    #: and :meth:`grad_log_prob` (the ELBO baseline needs them); a setting that disables them sets
    #: it False on the instance (meanfield_student_t with learn_df)
    reparameterizable: ClassVar[bool] = False
    #: the family's maximum-likelihood fit to draws has one optimum, which L-BFGS from init_params() finds
    #: (the excess inclusive KL's q* where moment_matched gives none); False for a non-convex family such as a
    #: flow, whose fit ends where the optimizer's path does: its excess inclusive KL is then not logged
    unique_fit: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        replaced = [name for name in _REPLACED_BY_MOMENTS if name in vars(cls)]
        if replaced:
            warnings.warn(f"{cls.__qualname__} defines {', '.join(replaced)}, which mcsa-bench no longer calls: "
                          "describe q's marginals with moments() (docs/plugins.md)", FutureWarning, stacklevel=2)

    def __init__(self, dim: int):
        if int(dim) < 1:
            raise ConfigurationError(f"a variational family needs dim >= 1, got {dim}")
        self.dim = int(dim)

    @property
    @abstractmethod
    def num_params(self) -> int:
        """P, the length of λ."""

    @abstractmethod
    def init_params(self) -> Array:
        """The starting λ, shape (P,)."""

    @abstractmethod
    def sample(self, params: Array, rng: np.random.Generator, n: int) -> Array:
        """n independent draws z ~ q(·; λ), shape (n, D)."""

    @abstractmethod
    def log_prob(self, params: Array, z: Array) -> Array:
        """log q(z; λ) for z of shape (B, D); returns (B,)."""

    @abstractmethod
    def score(self, params: Array, z: Array) -> Array:
        """The score s(λ; z) = ∇_λ log q(z; λ) for z of shape (B, D); returns (B, P)."""

    def prepare(self, params: Array) -> object:
        """The per-λ quantities the other methods need, computed once (default: λ itself).

        Must be idempotent: ``prepare(prepare(λ))`` is ``prepare(λ)``.
        """
        return params

    def mean_log_prob_and_score(self, params: Array, z: Array) -> tuple[float, Array]:
        """(the mean of log q(z; λ) over the rows of z (B, D), the mean of their scores (P,)): a fit of λ to
        draws (the posterior-accuracy metrics' family optimum); override when the mean's gradient is cheaper
        than B scores (a family written in JAX: one reverse pass, not a (B, P) Jacobian)."""
        prepared = self.prepare(params)
        return float(np.mean(self.log_prob(prepared, z))), self.score(prepared, z).mean(axis=0)

    def sample_with_log_prob(self, params: Array, rng: np.random.Generator, n: int) -> tuple[Array, Array]:
        """(z of shape (n, D), log q(z; λ) of shape (n,)); override when it is cheaper jointly."""
        z = self.sample(params, rng, n)
        return z, self.log_prob(params, z)

    def entropy(self, params: Array) -> float:
        """H[q(·; λ)] in nats."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form entropy")

    def moments(self, params: Array) -> Moments | None:
        """q's marginals in closed form (:class:`Moments`), or None (the default): kernels then
        refuse a defensive mixture and HMC's diagonal mass, and the posterior-accuracy metrics
        estimate the marginals from draws."""
        return None

    def moment_matched(self, mean: Array, cov: Array) -> Array | None:
        """λ of the member nearest in inclusive KL to any π with this mean and covariance, when that
        optimum depends on π's first two moments alone (Gaussian families: moment matching), else
        None. The ``excess_inclusive_kl`` metric measures a run against it (mcsa_bench.references)."""
        return None

    # Reparameterization z = T(ε; λ), ε ~ base noise, and ∇_z log q: the ELBO (path-derivative)
    # baseline's, implemented by the families that set ``reparameterizable``.

    def base_noise(self, rng: np.random.Generator, n: int) -> Array:
        """ε of shape (n, D) for :meth:`reparameterize`."""
        raise NotImplementedError(f"{type(self).__name__} is not reparameterizable")

    def reparameterize(self, params: Array, eps: Array) -> Array:
        """z = T(ε; λ), shape (n, D)."""
        raise NotImplementedError(f"{type(self).__name__} is not reparameterizable")

    def reparameterize_vjp(self, params: Array, eps: Array, cotangent: Array) -> Array:
        """Vector-Jacobian product (∂T(ε_b; λ)/∂λ)ᵀ v_b per row b; cotangent (n, D) -> (n, P)."""
        raise NotImplementedError(f"{type(self).__name__} is not reparameterizable")

    def grad_log_prob(self, params: Array, z: Array) -> Array:
        """∇_z log q(z; λ), shape (B, D)."""
        raise NotImplementedError(f"{type(self).__name__} provides no gradient in z")


@dataclass(frozen=True, slots=True)
class Approximation:
    """q(·; λ): a family with its parameters bound. Kernels propose from it; models evaluate it.

    The family's per-λ quantities are prepared once, when the approximation is made
    (:meth:`VariationalFamily.prepare`); its methods below reuse them.
    """

    family: VariationalFamily
    params: Array
    prepared: object = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prepared", self.family.prepare(self.params))

    @property
    def dim(self) -> int:
        return self.family.dim

    def sample(self, rng: np.random.Generator, n: int) -> Array:
        return self.family.sample(self.prepared, rng, n)

    def log_prob(self, z: Array) -> Array:
        return self.family.log_prob(self.prepared, z)

    def sample_with_log_prob(self, rng: np.random.Generator, n: int) -> tuple[Array, Array]:
        return self.family.sample_with_log_prob(self.prepared, rng, n)

    def score(self, z: Array) -> Array:
        """s(λ; z) = ∇_λ log q(z; λ), shape (B, P)."""
        return self.family.score(self.prepared, z)

    def moments(self) -> Moments | None:
        return self.family.moments(self.prepared)

    def gaussian_moments(self) -> tuple[Array, Array] | None:
        """(mean (D,), covariance (D, D)) when q is Gaussian, else None (:meth:`Moments.gaussian_moments`)."""
        moments = self.moments()
        return None if moments is None else moments.gaussian_moments()


class Proposal(Protocol):
    """What an independence kernel needs of its proposal: q itself or a defensive mixture."""

    def sample_with_log_prob(self, rng: np.random.Generator, n: int) -> tuple[Array, Array]: ...

    def log_prob(self, z: Array) -> Array: ...


class Target(Protocol):
    """What a kernel needs of the model."""

    def log_joint(self, z: Array) -> Array: ...

    def log_joint_and_grad(self, z: Array) -> tuple[Array, Array]: ...


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChainState:
    """C independent chains: positions ``z`` (C, D) and their cached ``log_p`` (C,).

    log p does not depend on λ, so it is computed once per state; ``grad_log_p`` (C, D) is
    cached as well by kernels that need it.
    """

    z: Array
    log_p: Array
    grad_log_p: Array | None = None

    @property
    def num_chains(self) -> int:
        return self.z.shape[0]


@dataclass(frozen=True, slots=True)
class Transition:
    """The result of one kernel transition of C chains.

    ``acceptance`` (C,) is the probability of leaving the current state (its expectation given
    the proposals). Kernels with ``exposes_weights`` also return ``candidates`` (C, M, D) and
    their normalized weights ``weights`` (C, M); slot 0 is the previous state.

    ``info`` is the kernel's own diagnostics, by metric name: a number or an array over the chains
    (C,) (e.g. HMC's ``divergences``, per chain 1 if its trajectory diverged, and ``step_size``).
    The schemes log each entry's mean over chains and transitions (:func:`info_means`) under its
    name; the kernel declares them in :meth:`Kernel.metric_specs`. The keyword ``divergent`` (C,) of
    kernels written before ``info`` existed is read as ``info["divergences"]``.
    """

    state: ChainState
    acceptance: Array
    candidates: Array | None = None
    weights: Array | None = None
    info: Mapping[str, float | Array] = field(default_factory=dict)
    divergent: InitVar[Array | None] = None

    def __post_init__(self, divergent: Array | None) -> None:
        if divergent is not None:
            object.__setattr__(self, "info", {**self.info, "divergences": divergent})


class Steps(NamedTuple):
    """``n_steps`` sequential transitions of C chains (:meth:`Kernel.steps`): the states after each
    (``trajectory`` (n_steps, C, D)), the final state, ``acceptance`` (n_steps, C) and the kernel's
    ``info`` over the steps (each entry stacked: (n_steps, ...)). A kernel's own ``steps`` may return
    a plain 3-tuple (trajectory, state, acceptance): ``Steps(*result)`` reads it as one without info.
    """

    trajectory: Array
    state: ChainState
    acceptance: Array
    info: Mapping[str, float | Array] = MappingProxyType({})  # immutable: the default is shared


def info_means(info: Mapping[str, float | Array]) -> dict[str, float]:
    """The metrics of a kernel's info (:attr:`Transition.info`, :attr:`Steps.info`): each entry's mean
    over its chains and steps, under its own name. A scheme passes them on in ``Estimate.metrics``."""
    return {name: float(np.mean(value)) for name, value in info.items()}


class Kernel(ABC):
    """A π-invariant Markov transition applied to C chains at once.

    Capabilities, read by estimators to check compatibility:

    - ``exposes_weights``: returns normalized weights over candidate states (CIS), which
      Rao-Blackwellized schemes need;
    - ``uses_proposal_budget``: one transition can use several fresh proposals; schemes pass
      ``n_proposals`` (e.g. MSC uses N − 1);
    - ``needs_gradient``: the model must provide :meth:`Model.log_joint_and_grad`.

    Every transition makes exactly one batched log-density call over all chains and proposals.
    """

    exposes_weights: ClassVar[bool] = False
    uses_proposal_budget: ClassVar[bool] = False
    needs_gradient: ClassVar[bool] = False

    def model_incompatibility(self, model: Model, family: VariationalFamily) -> str | None:
        """Why this kernel cannot run on ``model`` with proposals from ``family``, or None if it can.

        Checked before anything runs; phrased to follow the kernel's name.
        """
        if self.needs_gradient and not model.has_gradient:
            return "needs the gradient of the log joint (Model.log_joint_and_grad)"
        return None

    def init(self, target: Target, z: Array) -> ChainState:
        """Chain states at positions ``z`` (C, D), with log p (and its gradient if needed) cached."""
        if self.needs_gradient:
            log_p, grad = target.log_joint_and_grad(z)
            return ChainState(z, log_p, grad)
        return ChainState(z, target.log_joint(z))

    @abstractmethod
    def step(
        self,
        rng: np.random.Generator,
        state: ChainState,
        target: Target,
        proposal: Proposal,
        n_proposals: int = 1,
    ) -> Transition:
        """One transition of every chain, with ``n_proposals`` fresh proposals per chain."""

    def steps(
        self,
        rng: np.random.Generator,
        state: ChainState,
        target: Target,
        proposal: Proposal,
        n_steps: int,
    ) -> Steps:
        """``n_steps`` sequential transitions of every chain with the same proposal (:class:`Steps`).

        Kernels whose proposals do not depend on the current state override this to evaluate
        all proposals in one batched call.
        """
        transitions = []
        for _ in range(n_steps):
            transitions.append(self.step(rng, state, target, proposal))
            state = transitions[-1].state
        info = {
            name: np.stack(np.broadcast_arrays(*(t.info[name] for t in transitions))) for name in transitions[0].info
        }
        return Steps(np.stack([t.state.z for t in transitions]), state,
                     np.stack([t.acceptance for t in transitions]), info)

    def metric_specs(self) -> dict[str, MetricSpec]:
        """What the entries of the kernel's :attr:`Transition.info` are, by name (default: none)."""
        return {}


# --------------------------------------------------------------------------------------------
# Estimators (MCSA schemes)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Estimate:
    """One gradient estimate g ≈ ∇_λ KL(π‖q) of shape (P,), the chains after it, and diagnostics.

    (The ELBO baseline is the exception: its g estimates ∇_λ KL(q‖π), the exclusive KL.)

    ``acceptance_rate`` is the mean probability of leaving the state over the iteration's
    transitions, None when the iteration made none (schemes without a kernel, RWS's sleep
    updates); the engine averages it over the iterations that report one. ``metrics`` holds further
    per-iteration diagnostics (e.g. ``snis_ess``, and the kernel's info through :func:`info_means`:
    ``cis_ess``, ``divergences``); the engine averages each over the iterations between two
    evaluations that reported it.
    """

    grad: Array
    state: ChainState
    acceptance_rate: float | None
    metrics: Mapping[str, float] = field(default_factory=dict)


class Estimator(ABC):
    """An MCSA scheme: how a budget of N samples per iteration becomes chains and a gradient.

    Built with its kernel and budget ``n_samples`` (N). ``default_kernel`` names the kernel the
    papers use with the scheme; :meth:`kernel_incompatibility` rejects kernels it cannot use.

    Schemes that draw from q directly (the SNIS and ELBO baselines) set ``uses_kernel = False``
    and ``default_kernel = None``: they are built with ``kernel=None``, refuse any kernel, and keep
    no chains (their state has zero rows).
    """

    default_kernel: ClassVar[str | None]
    #: False for schemes that use no Markov kernel
    uses_kernel: ClassVar[bool] = True
    #: smallest budget N the scheme accepts
    min_samples: ClassVar[int] = 1
    #: the scheme's claim, checked by ``mcsa-bench check estimator``: with chains started from π,
    #: the gradient is an unbiased estimate of ∇_λ KL(π‖q) (NeurIPS paper Prop. 1). True for the
    #: MCSA schemes; baselines that are biased (self-normalized importance sampling) or that
    #: estimate another objective set it False.
    unbiased_at_stationarity: ClassVar[bool] = True

    def __init__(self, kernel: Kernel | None, n_samples: int):
        if kernel is None and self.uses_kernel:
            raise ConfigurationError("needs a kernel")
        problem = None if kernel is None else self.kernel_incompatibility(kernel)
        if problem:
            raise ConfigurationError(problem)
        if int(n_samples) < self.min_samples:
            raise ConfigurationError(f"needs n_samples >= {self.min_samples}, got {n_samples}")
        self.kernel = kernel
        self.n_samples = int(n_samples)

    @classmethod
    def kernel_incompatibility(cls, kernel: Kernel | type) -> str | None:
        """Why ``kernel`` (an instance or class) cannot serve this scheme, or None if it can.

        Phrased to follow the scheme's name, e.g. "needs a kernel that exposes weights".
        """
        if not cls.uses_kernel:
            return "uses no kernel (it draws from q directly)"
        return None

    def model_incompatibility(self, model: Model, family: VariationalFamily) -> str | None:
        """Why the scheme cannot run on ``model`` with ``family``, or None if it can (e.g. ELBO
        needs a model gradient and a reparameterizable family). Checked before anything runs."""
        return None

    def metric_specs(self) -> dict[str, MetricSpec]:
        """What the scheme's own ``Estimate.metrics`` are, by name (its kernel declares its info's)."""
        return {}

    @property
    def num_chains(self) -> int:
        """How many chains the scheme keeps between iterations."""
        return 1 if self.uses_kernel else 0

    def init(self, rng: np.random.Generator, model: Model, q: Approximation) -> ChainState:
        """Initial chains, drawn from the initial q (no rows for schemes without a kernel)."""
        if self.kernel is None:
            return ChainState(np.empty((0, q.dim)), np.empty(0))
        return self.kernel.init(model, q.sample(rng, self.num_chains))

    @abstractmethod
    def estimate(self, rng: np.random.Generator, state: ChainState, model: Model, q: Approximation) -> Estimate:
        """Advance the chains with kernels that use ``q`` and return the gradient at λ of ``q``."""

    def estimate_replicas(self, rng: np.random.Generator, states: Sequence[ChainState], model: Model,
                          q: Approximation) -> list[Estimate]:
        """One :meth:`estimate` for each of R independent copies of the chains, all at the same ``q``.

        Used by the engine's gradient-variance diagnostic. The default loops over the copies; a
        scheme may override it to advance all R·C chains in one batched kernel step.
        """
        return [self.estimate(rng, state, model, q) for state in states]


# --------------------------------------------------------------------------------------------
# Optimizers
# --------------------------------------------------------------------------------------------


class Optimizer(ABC):
    """A first-order method that *descends* on the estimated gradient.

    Explicit state (no hidden mutation) keeps runs reproducible and checkpointable; the state
    must be plain data (numbers, arrays, lists, tuples, dictionaries, named tuples or dataclasses
    of them): a checkpoint restores it into the state ``init`` returns (mcsa_bench/engine/checkpoint.py).
    """

    #: Polyak-Ruppert iterate averaging: when set to a fraction in (0, 1), the engine averages λ
    #: over the iterations t >= ceil(average_from · T) and evaluates and returns the average;
    #: None (the default) turns it off.
    average_from: float | None = None

    def set_horizon(self, n_iters: int) -> None:
        """Told the number of iterations T by the engine before the first step.

        Schedules that depend on T (e.g. cosine) keep it; the default ignores it.
        """

    @abstractmethod
    def init(self, params: Array) -> object:
        """Optimizer state for parameters ``params``."""

    @abstractmethod
    def step(self, params: Array, grad: Array, state: object) -> tuple[Array, object]:
        """(new params, new state) after one update with gradient ``grad``."""
