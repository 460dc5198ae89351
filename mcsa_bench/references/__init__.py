"""Reference posteriors: the ground truth every run on a model with one is scored against.

A :class:`PosteriorReference` holds, per latent coordinate (by name), the posterior mean, sd, the
Monte Carlo standard error of the mean, bulk ESS and R-hat, optionally the covariance and thinned
draws, its provenance (sampler, version, settings, date) and its quality. It also stores check
points: ≥ 100 latent vectors with the log density the independent implementation (NumPyro's)
gave them. A reference applies to a model exactly when the model's own ``log_joint`` agrees with
those values up to a constant (:meth:`PosteriorReference.discrepancy`), so a reference is never
used for a posterior it does not describe: another data set, a train/test split, another prior.

The references shipped with the package are made by ``python -m mcsa_bench.tools.generate_references``
(the optional extra ``[reference]``, NumPyro's NUTS); docs/references.md lists them with their
provenance. A plugin ships the references of its models as package data: ``<model>--<variant>.npz``
files in the folder ``references/`` of the top-level package that defines the model's class
(:func:`folder`), found like the core's; or it overrides :meth:`mcsa_bench.api.Model.reference`
(an exact reference built in code, or :func:`load` of a file of its own).

A user makes a reference for any model of their own with ``mcsa-bench references make <the run's model
overrides>`` (references/nuts.py): it is stored in the user's folder (:func:`user_folder`), named by the
model's identity (:func:`identity_digest`: its registry name and identifying parameters, a model file's
contents for ``model=numpyro``), where every later run of that model finds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import numpy as np

from mcsa_bench.api import Array, Model

#: agreement of a model's log joint with the stored check densities, up to a constant: the largest
#: |difference − mean difference| allowed, relative to max(1, |log density|)
DENSITY_TOLERANCE = 1e-8
#: quality bar of a sampled reference: R-hat ≤ 1.01, bulk ESS ≥ 10,000 per coordinate (posteriordb's
#: reference posteriors keep 10,000 draws with lag-1 autocorrelation < 0.05), no divergences
RHAT_BAR, ESS_BAR = 1.01, 10_000.0
_ARRAYS = ("mean", "sd", "mean_mcse", "ess", "rhat", "cov", "draws", "check_points", "check_log_density")


@dataclass(frozen=True, eq=False)
class PosteriorReference:
    """Posterior moments of one model's posterior over its unconstrained latents z ∈ R^D.

    ``params`` are the model's constructor arguments that define the posterior (data set,
    preprocessing, prior); ``source`` the provenance; ``quality`` the sampler's diagnostics
    summarized (``rhat_max``, ``ess_min``, ``divergences``, ``meets_bar`` under the bar it was made with,
    ``exact_moments``) or ``{"exact": true}``. An exact reference has ``mean_mcse`` 0, ``ess`` and ``rhat``
    NaN; one with exact moments (radon) has ``mean_mcse`` 0 and the ESS and R-hat of its sampled draws.
    """

    name: str
    model: str
    params: dict
    latent_names: list[str]
    mean: Array
    sd: Array
    mean_mcse: Array
    ess: Array
    rhat: Array
    source: dict
    quality: dict
    cov: Array | None = None
    draws: Array | None = None
    check_points: Array | None = field(default=None, repr=False)
    check_log_density: Array | None = field(default=None, repr=False)

    @property
    def dim(self) -> int:
        return self.mean.size

    @property
    def exact(self) -> bool:
        return bool(self.quality.get("exact", False))

    @property
    def exact_moments(self) -> bool:
        """Mean and covariance known exactly (computed, not sampled); the draws may still be a sampler's."""
        return self.exact or bool(self.quality.get("exact_moments", False))

    @property
    def meets_bar(self) -> bool:
        """Whether it meets today's quality bar (:func:`meets_bar`), whatever bar it was made under."""
        return self.exact or meets_bar(self.quality)

    def discrepancy(self, model: Model) -> float:
        """The largest |log_joint − stored density − constant| at the check points, relative to
        max(1, |density|); ``inf`` when the dimensions or latent names differ or nothing is stored."""
        if self.check_points is None or model.dim != self.dim or list(model.latent_names()) != self.latent_names:
            return float("inf")
        with np.errstate(all="ignore"):
            difference = np.asarray(model.log_joint(self.check_points), dtype=float) - self.check_log_density
        if not np.all(np.isfinite(difference)):
            return float("inf")
        scale = np.maximum(1.0, np.abs(self.check_log_density))
        return float(np.max(np.abs(difference - difference.mean()) / scale))

    def describes(self, model: Model) -> bool:
        return self.discrepancy(model) <= DENSITY_TOLERANCE

    def save(self, path: str | Path) -> None:
        meta = {key: getattr(self, key) for key in ("name", "model", "params", "latent_names", "source", "quality")}
        arrays = {key: getattr(self, key) for key in _ARRAYS if getattr(self, key) is not None}
        if "draws" in arrays:  # single precision: the metrics average over them, and it halves the file
            arrays["draws"] = np.asarray(arrays["draws"], dtype=np.float32)
        np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)

    def as_json(self) -> dict:
        """The public summary (``mcsa-bench references --json``): no draws, no check points."""
        def listed(values: Array) -> list[float | None]:
            return [None if not np.isfinite(v) else float(v) for v in values]
        return {"name": self.name, "model": self.model, "params": self.params, "latent_names": self.latent_names,
                "mean": listed(self.mean), "sd": listed(self.sd), "mean_mcse": listed(self.mean_mcse),
                "ess": listed(self.ess), "rhat": listed(self.rhat), "source": self.source, "quality": self.quality}


def meets_bar(quality: dict) -> bool:
    """R-hat ≤ :data:`RHAT_BAR` and no divergences; and bulk ESS ≥ :data:`ESS_BAR`, unless the moments are
    exact (then the sampler's draws serve only the Monte Carlo metrics, whose error their count sets)."""
    mixed = quality["rhat_max"] <= RHAT_BAR and not quality["divergences"]
    return bool(mixed and (quality.get("exact_moments", False) or quality["ess_min"] >= ESS_BAR))


def load(path: str | Path) -> PosteriorReference:
    with np.load(path, allow_pickle=False) as stored:
        meta = json.loads(str(stored["meta"]))
        arrays = {key: np.asarray(stored[key], dtype=float) for key in _ARRAYS if key in stored.files}
    return PosteriorReference(**meta, **arrays)


#: exact draws an exact reference carries for the Monte Carlo metrics of non-Gaussian families
EXACT_DRAWS = 2000


def exact(name: str, model: str, params: dict, latent_names: list[str], mean: Array, cov: Array, draws: Array,
          source: str) -> PosteriorReference:
    """The reference of a posterior whose mean and covariance are known in closed form, with
    exact independent draws (:data:`EXACT_DRAWS` of them, for the Monte Carlo metrics)."""
    mean, cov = np.asarray(mean, dtype=float), np.asarray(cov, dtype=float)
    nan = np.full(mean.size, np.nan)
    return PosteriorReference(name=name, model=model, params=params, latent_names=list(latent_names), mean=mean,
                              sd=np.sqrt(np.diag(cov)), mean_mcse=np.zeros(mean.size), ess=nan, rhat=nan,
                              source={"method": source}, quality={"exact": True}, cov=cov, draws=draws)


CORE = "mcsa_bench"
SHIPPED = resources.files(__name__) / "data"
#: the folder of a plugin's top-level package that holds the references of its models
PLUGIN_FOLDER = "references"


def folder(package: str) -> Traversable | None:
    """Where the references of the models a top-level package defines are shipped: the core's
    ``data/``, a plugin's ``references/`` (which may not exist); None for a single module or a
    script (``__main__``), which have no package data. The package is imported: its model was."""
    if package == CORE:
        return SHIPPED
    module = sys.modules.get(package)
    return None if not hasattr(module, "__path__") else resources.files(package) / PLUGIN_FOLDER


def package_of(model_class: type | Callable) -> str:
    """The top-level package that defines a model's class (or factory): whose references it uses."""
    return model_class.__module__.partition(".")[0]


@cache
def shipped(model_name: str | None = None, package: str = CORE) -> tuple[PosteriorReference, ...]:
    """The references a package ships (of one registry model name, whose files are named
    ``<model>--<variant>.npz``), ordered by name."""
    prefix = "" if model_name is None else f"{model_name}--"
    where = folder(package)
    if where is None or not where.is_dir():
        return ()
    paths = sorted(p for p in where.iterdir() if p.name.endswith(".npz") and p.name.startswith(prefix))
    return tuple(load(p) for p in paths)


#: the folder of the references users make (``mcsa-bench references make``); default below $XDG_DATA_HOME
USER_FOLDER_ENV = "MCSA_BENCH_REFERENCES"


def user_folder() -> Path:
    """Where ``mcsa-bench references make`` stores references: ``$MCSA_BENCH_REFERENCES``, else
    ``$XDG_DATA_HOME/mcsa-bench/references`` (``~/.local/share/mcsa-bench/references``)."""
    configured = os.environ.get(USER_FOLDER_ENV)
    if configured:
        return Path(configured).expanduser()
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data / "mcsa-bench" / "references"


def identity_digest(model_name: str, identity: Mapping) -> str:
    """A model's identity as a file name's part: its registry name and identifying parameters, hashed."""
    text = json.dumps([model_name, dict(identity)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def user_reference_path(model_name: str, identity: Mapping) -> Path:
    return user_folder() / f"{model_name}--{identity_digest(model_name, identity)}.npz"


def user_references() -> tuple[PosteriorReference, ...]:
    """The references in the user's folder, ordered by name."""
    where = user_folder()
    return tuple(load(path) for path in sorted(where.glob("*.npz"))) if where.is_dir() else ()


def find(model_name: str, model: Model, identity: Mapping | None = None) -> PosteriorReference | None:
    """The model's own :meth:`~mcsa_bench.api.Model.reference`; else the reference a user made for this
    model (by its ``identity``: :func:`user_reference_path`); else the reference of the registry name
    ``model_name`` shipped by the package that defines the model's class, or by the core; each only if it
    describes this model's posterior (None when none does)."""
    own = model.reference()
    if own is not None:
        return own
    if identity is not None:
        path = user_reference_path(model_name, identity)
        if path.is_file():
            made = load(path)
            if made.dim == model.dim and made.describes(model):
                return made
    for package in dict.fromkeys((package_of(type(model)), CORE)):
        for reference in shipped(model_name, package):
            if reference.dim == model.dim and reference.describes(model):
                return reference
    return None
