"""Posteriors written by others, shipped as NumPyro model files with their data and their published answers
(docs/references.md, "Posteriors no one here wrote"):

- ``posteriordb/``: posteriordb's eleven posteriors: ``<name>.py`` (the function ``model``, the Stan program
  written again in NumPyro), ``<name>.json`` (the data, posteriordb's), ``<name>.stan`` (posteriordb's Stan
  program, the specification) and ``<name>.npz`` (posteriordb's 10 chains × 1,000 reference draws by parameter);
- ``inference_gym/``: two targets of Inference Gym above 100 latents: ``<name>.py``, ``<name>.json`` and
  ``<name>_ground_truth.json`` (Gym's published mean, its standard error and sd per site).

A model file is a plain module whose ``model(**data)`` takes the data file's entries as keyword arguments
(lists as arrays, integers as integers), the form ``model=numpyro model.source=<file>:model
model.data=<file>.json`` runs. Reading the files needs numpy only; calling a model needs NumPyro.
:func:`agreement` compares draws of a model with the published moments.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import ndtri

from mcsa_bench.references.diagnostics import mean_mcse

COLLECTIONS_ROOT = Path(__file__).parent
COLLECTIONS = ("posteriordb", "inference_gym")
#: the published and the sampled means agree within this many standard errors of their difference (both
#: Monte Carlo standard errors combined), or the Bonferroni bound of many coordinates where it is larger
MEAN_Z_BAR = 3.0
#: ... and the sds within 5 %
SD_BAR = 0.05


@dataclass(frozen=True)
class Moments:
    """Published moments of one site: mean, sd, standard error of the mean, each of the site's shape or flattened."""

    mean: np.ndarray
    sd: np.ndarray
    mean_se: np.ndarray


@dataclass(frozen=True)
class Published:
    """One shipped posterior of a collection (posteriordb, inference_gym)."""

    collection: str
    name: str

    @property
    def model_file(self) -> Path:
        return COLLECTIONS_ROOT / self.collection / f"{self.name}.py"

    @property
    def data_file(self) -> Path:
        return COLLECTIONS_ROOT / self.collection / f"{self.name}.json"

    def data(self) -> dict:
        return read_data(self.data_file)

    def model(self) -> Callable[..., None]:
        return load_model(self.model_file)

    def latents_of_published(self) -> Callable[..., dict] | None:
        """The model file's ``latents(published, **data)``, where its latent sites are not all published: the
        latents' values (n, *shape) from the published parameters' draws (n, *shape); None where they are."""
        return load_model(self.model_file, "latents", required=False)

    def draws(self) -> dict[str, np.ndarray]:
        """posteriordb's reference draws by parameter, (chains, draws) or (chains, draws, size), constrained."""
        if self.collection != "posteriordb":
            raise ValueError(f"{self.collection} publishes moments, not draws")
        with np.load(COLLECTIONS_ROOT / self.collection / f"{self.name}.npz") as stored:
            return {name: stored[name].astype(float) for name in stored.files}

    def moments(self) -> dict[str, Moments]:
        """The published moments by site: posteriordb's from its draws (ESS-based standard errors), the Gym's
        as published."""
        if self.collection == "posteriordb":
            return {site: _moments_of(draws) for site, draws in self.draws().items()}
        truth = json.loads((COLLECTIONS_ROOT / self.collection / f"{self.name}_ground_truth.json").read_text())
        fields = ("mean", "sd", "mean_se")
        return {site: Moments(*(np.asarray(values[key], dtype=float) for key in fields))
                for site, values in truth.items()}


def published(collection: str | None = None) -> list[Published]:
    """Every shipped posterior (of one collection), by name."""
    return [Published(name, path.stem) for name in (COLLECTIONS if collection is None else (collection,))
            for path in sorted((COLLECTIONS_ROOT / name).glob("*.py"))]


def find(name: str) -> Published:
    found = [posterior for posterior in published() if posterior.name == name]
    if not found:
        raise KeyError(f"no shipped posterior {name!r}; shipped: {', '.join(p.name for p in published())}")
    return found[0]


def read_data(path: Path) -> dict:
    """A JSON object of data as a model's keyword arguments: lists become arrays, numbers stay as they are."""
    return {key: np.asarray(value) if isinstance(value, list) else value
            for key, value in json.loads(Path(path).read_text()).items()}


def load_model(path: Path, function: str = "model", required: bool = True) -> Callable | None:
    """The function of a model file, loaded by its path (the files' names, posteriordb's, are not module names);
    None for a function the file does not define, where it is not ``required``."""
    spec = importlib.util.spec_from_file_location(f"_published_{Path(path).stem.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, function) if required else getattr(module, function, None)


def _coordinates(draws: np.ndarray) -> np.ndarray:
    """(chains, n, size) from (chains, n) or (chains, n, ...)."""
    return draws.reshape(*draws.shape[:2], -1)


def _moments_of(draws: np.ndarray) -> Moments:
    flat = _coordinates(draws)
    pooled = flat.reshape(-1, flat.shape[-1])
    return Moments(pooled.mean(axis=0), pooled.std(axis=0, ddof=1), mean_mcse(flat))


def coordinate_names(site: str, size: int, scalar: bool) -> list[str]:
    """posteriordb's and Stan's names of a site's coordinates: ``mu``, or ``b[1]`` .. ``b[size]``."""
    return [site] if scalar else [f"{site}[{i}]" for i in range(1, size + 1)]


def mean_z_bar(dim: int) -> float:
    """MEAN_Z_BAR, or where larger the |z| that the largest of ``dim`` independent N(0, 1) exceeds with
    probability 5 % (Bonferroni, Φ⁻¹(1 − 0.05/2D): 3.49 for 103 coordinates, 3.89 for 501)."""
    return max(MEAN_Z_BAR, float(ndtri(1.0 - 0.05 / (2 * dim))))


@dataclass(frozen=True)
class Agreement:
    """Sampled against published moments, per coordinate: z of the means' difference (both standard errors
    combined) and the ratio of the sds."""

    names: list[str]
    z: np.ndarray
    sd_ratio: np.ndarray

    @property
    def z_bar(self) -> float:
        return mean_z_bar(len(self.names))

    @property
    def max_abs_z(self) -> float:
        return float(np.max(np.abs(self.z)))

    @property
    def max_sd_deviation(self) -> float:
        return float(np.max(np.abs(self.sd_ratio - 1.0)))

    @property
    def agrees(self) -> bool:
        return self.max_abs_z <= self.z_bar and self.max_sd_deviation <= SD_BAR

    def worst(self) -> dict[str, str]:
        """The coordinates of the largest |z| and the largest sd deviation, by name."""
        return {"mean": self.names[int(np.argmax(np.abs(self.z)))],
                "sd": self.names[int(np.argmax(np.abs(self.sd_ratio - 1.0)))]}


def agreement(draws: dict[str, np.ndarray], published_moments: dict[str, Moments]) -> Agreement:
    """Draws by site, (chains, n) or (chains, n, ...) on the constrained scale, against the published moments
    of the same sites (every published site must be among the draws)."""
    names, z, ratio = [], [], []
    for site, theirs in published_moments.items():
        ours = _moments_of(draws[site])
        names += coordinate_names(site, ours.mean.size, np.ndim(draws[site]) == 2)
        z.append((ours.mean - theirs.mean) / np.sqrt(ours.mean_se**2 + theirs.mean_se**2))
        ratio.append(ours.sd / theirs.sd)
    return Agreement(names, np.concatenate(z), np.concatenate(ratio))
