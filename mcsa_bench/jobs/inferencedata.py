"""A run's final q as ArviZ's InferenceData in netCDF: ``mcsa-bench export --format arviz`` (docs/report.md,
"Draws for ArviZ").

The draws are made again from what the run saved: its final λ (the artifact ``variational.npz``) and its
configuration (``config.yaml``), which rebuild the model and the family exactly when today's config hash of
that configuration is the run's (else the model's files or a plugin changed since, and the export is refused).
``draws`` independent draws of q(z; λ) from ``numpy.random.default_rng(seed)``, both recorded in the
attributes, so the same command writes the same numbers. Groups, by ArviZ's schema for variational draws
(one chain, ``draw`` the draws):

- ``posterior``: the model's variables: a NumPyro or PyMC model's sites on their supports (its constrained
  scale, as the language maps its latents, NumPyro's deterministic sites too:
  :meth:`~mcsa_bench.autodiff.ppl.PPLModel.constrained`), any other model's latent coordinates as they are,
  ``beta[3]`` gathered into the vector ``beta`` (dims ``beta_dim_0``);
- ``unconstrained_posterior``: a NumPyro or PyMC model's latent z, by site, where q lives;
- ``sample_stats``: ``lp``, log p(x, z), and ``log_q``, log q(z; λ), of each draw on the latent z (log-Jacobians
  included), the log importance weights of π/q being their difference;
- ``reference_posterior``: the draws of the model's reference posterior (mcsa_bench.references), on the
  posterior's scale, where it has draws.

ArviZ (0.x: ArviZ 1 needs Python 3.12) and its netCDF writer h5netcdf come with the extra ``[arviz]``.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from mcsa_bench.api import Array, ConfigurationError, Model
from mcsa_bench.tracking.record import CONFIG_HASH_TAG, ROLE_JOB, ROLE_TAG, SWEEP_TAG, origin_of
from mcsa_bench.tracking.tables import StoredRun, artifact_bytes, artifact_text
from mcsa_bench.version import __version__

#: draws of q written by default: ArviZ's four chains of 1,000, as one chain
DEFAULT_DRAWS = 4000
#: the custom group of the reference posterior's draws
REFERENCE_GROUP = "reference_posterior"
#: what the run saved: its final λ and its configuration
PARAMS_ARTIFACT, CONFIG_ARTIFACT = "variational.npz", "config.yaml"
#: a latent coordinate's name as element of an array: ``beta[3]``, ``W1[2,0]``
_ELEMENT = re.compile(r"^(?P<variable>[^\[\],]+)\[(?P<index>\d+(?:,\d+)*)\]$")


def import_arviz():
    """ArviZ, or one line saying how to install it; ArviZ 1's data sets are another kind of object."""
    try:
        import arviz
    except ImportError:
        raise ConfigurationError("export --format arviz needs ArviZ: pip install 'mcsa-bench[arviz]'") from None
    if int(arviz.__version__.split(".")[0]) >= 1:
        raise ConfigurationError(f"export --format arviz writes ArviZ 0.x's InferenceData; ArviZ "
                                 f"{arviz.__version__} is installed: pip install 'mcsa-bench[arviz]' (arviz<1)")
    return arviz


def variables_of(names: list[str], z: Array) -> dict[str, Array]:
    """Draws z (n, D) by variable, (n, *shape): the coordinates named ``v[i,j]`` of one ``v`` gathered into an
    array when they fill it (in any order, row-major within it), every other name a variable of its own."""
    elements: dict[str, dict[tuple[int, ...], int]] = {}
    for column, name in enumerate(names):
        match = _ELEMENT.match(name)
        if match:
            elements.setdefault(match["variable"], {})[tuple(map(int, match["index"].split(",")))] = column
    variables, gathered = {}, set()
    for column, name in enumerate(names):
        match = _ELEMENT.match(name)
        array = elements.get(match["variable"]) if match else None
        if array is None or not _fills(array, names, match["variable"]):
            variables[name] = z[:, column]
        elif match["variable"] not in gathered:
            gathered.add(match["variable"])
            shape = tuple(np.max(list(array), axis=0) + 1)
            variables[match["variable"]] = z[:, [array[index] for index in np.ndindex(*shape)]].reshape(
                len(z), *shape)
    return variables


def _fills(array: dict[tuple[int, ...], int], names: list[str], variable: str) -> bool:
    """Whether the indices of ``variable``'s elements fill an array of one rank, and no name is ``variable``."""
    ranks = {len(index) for index in array}
    if len(ranks) != 1 or variable in names:
        return False
    shape = np.max(list(array), axis=0) + 1
    return len(array) == int(np.prod(shape)) and sum(1 for n in names if n.startswith(f"{variable}[")) == len(array)


def _one_chain(variables: dict[str, Array]) -> dict[str, Array]:
    return {name: np.asarray(values)[None] for name, values in variables.items()}


def _scales(model: Model, z: Array) -> tuple[dict[str, Array], dict[str, Array] | None]:
    """(the posterior's variables, the unconstrained ones or None): a PPL model's sites on their supports."""
    from mcsa_bench.autodiff.ppl import PPLModel

    latent = variables_of(model.latent_names(), z)
    return (model.constrained(z), latent) if isinstance(model, PPLModel) else (latent, None)


class RunDraws:
    """One FINISHED job run's final q rebuilt from its artifacts (:meth:`of`), and its InferenceData."""

    def __init__(self, run: StoredRun, config: dict[str, Any], params: Array, parts):
        self.run, self.config, self.params, self.parts = run, config, params, parts

    @classmethod
    def of(cls, run: StoredRun) -> RunDraws:
        import yaml
        from omegaconf import OmegaConf

        from mcsa_bench.jobs.config import RunSettings
        from mcsa_bench.plugins import get_registry

        what = f"run {run.run_id} ({run.name})"
        if run.tags.get(ROLE_TAG) != ROLE_JOB:
            raise ConfigurationError(f"{what} is a sweep's parent, not a job: export its jobs with --sweep "
                                     f"{run.run_id}")
        if run.status != "FINISHED":
            raise ConfigurationError(f"{what} is {run.status}: only a FINISHED run has a final q")
        text, stored = artifact_text(run.artifact_uri, CONFIG_ARTIFACT), artifact_bytes(run.artifact_uri,
                                                                                         PARAMS_ARTIFACT)
        if text is None or stored is None:
            missing = " and ".join(n for n, a in ((CONFIG_ARTIFACT, text), (PARAMS_ARTIFACT, stored)) if a is None)
            raise ConfigurationError(f"{what} has no {missing} artifact: its final q was not saved")
        with np.load(io.BytesIO(stored), allow_pickle=False) as saved:
            params = np.asarray(saved["params"], dtype=float)
        config = yaml.safe_load(text)
        registry = get_registry()
        try:
            model = config["model"]
            taken = registry.get("model", model["name"]).parameters()  # not a PPL model's file digests
            built = {**config, "model": {k: v for k, v in model.items() if k == "name" or k in taken}}
            settings = RunSettings.from_config(OmegaConf.create(built))
        except (KeyError, TypeError) as missing:
            raise ConfigurationError(f"{what}'s {CONFIG_ARTIFACT} lacks {missing} (written by an older "
                                     "mcsa-bench?): its q cannot be rebuilt") from None
        today, ran = settings.config_hash(registry), run.tags.get(CONFIG_HASH_TAG)
        if today != ran:
            raise ConfigurationError(f"{what} ran as config hash {ran}, and its configuration is {today} today: "
                                     "its model's files or a plugin changed since, so its q cannot be rebuilt")
        return cls(run, config, params, settings.assemble(registry))

    def inference_data(self, draws: int, seed: int):
        """The InferenceData of ``draws`` draws of q at the final λ from ``default_rng(seed)``."""
        from mcsa_bench.references.samples import blocked_log_joint

        arviz = import_arviz()
        model, family = self.parts.model, self.parts.family
        z, log_q = family.sample_with_log_prob(self.params, np.random.default_rng(seed), draws)
        posterior, unconstrained = _scales(model, z)
        attrs = self.attributes(draws, seed, "constrained" if unconstrained is not None else "latent")
        groups = {"posterior": arviz.dict_to_dataset(_one_chain(posterior), attrs=attrs),
                  "sample_stats": arviz.dict_to_dataset(_one_chain({"lp": blocked_log_joint(model, z),
                                                                    "log_q": log_q}), attrs=attrs)}
        if unconstrained is not None:
            groups["unconstrained_posterior"] = arviz.dict_to_dataset(_one_chain(unconstrained), attrs=attrs)
        reference = self.parts.reference
        if reference is not None and reference.draws is not None:
            scale, _ = _scales(model, reference.draws)
            groups[REFERENCE_GROUP] = arviz.dict_to_dataset(_one_chain(scale), attrs={
                **attrs, "mcsa_bench_reference": reference.name, "mcsa_bench_reference_draws": len(reference.draws),
                "mcsa_bench_reference_source": json.dumps(reference.source),
                "mcsa_bench_reference_quality": json.dumps(reference.quality)})
        return arviz.InferenceData(**groups)

    def attributes(self, draws: int, seed: int, scale: str) -> dict[str, str | int]:
        """ArviZ's provenance attributes (the framework) and the run's identity; netCDF takes no None."""
        run, config = self.run, self.config
        return {
            "inference_library": "mcsa-bench", "inference_library_version": __version__,
            "mcsa_bench_run_id": run.run_id, "mcsa_bench_origin_run_id": origin_of(run.run_id, run.tags),
            "mcsa_bench_run_name": run.name, "mcsa_bench_config_hash": run.tags.get(CONFIG_HASH_TAG, ""),
            "mcsa_bench_sweep_id": run.tags.get(SWEEP_TAG, ""), "mcsa_bench_method": run.tags.get("method", ""),
            "mcsa_bench_model": config["model"]["name"], "mcsa_bench_family": config["family"]["name"],
            "mcsa_bench_seed": int(config["seed"]), "mcsa_bench_n_iters": int(config["n_iters"]),
            "mcsa_bench_draws": draws, "mcsa_bench_draws_seed": seed, "mcsa_bench_scale": scale,
            "mcsa_bench_config": json.dumps(config),
        }


def write(data, path: Path) -> None:
    """The InferenceData to ``path`` through a temporary file beside it (no half-written file left)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    data.to_netcdf(str(partial))
    partial.replace(path)


def export_runs(runs: list[StoredRun], out: Path, single: bool, draws: int, seed: int) -> list[str]:
    """Write each job run's InferenceData: the one run to ``out``, or a sweep's to ``out/<run id>.nc``; the
    lines to print. A sweep's parent is left out, its runs without a final q said and skipped."""
    if draws < 1:
        raise ConfigurationError(f"--draws must be at least 1, got {draws}")
    if single:
        (run,) = runs
        write(RunDraws.of(run).inference_data(draws, seed), out)
        return [f"Wrote {draws} draws of run {run.run_id}'s final q to {out}"]
    lines, written = [], 0
    for run in runs:
        if run.tags.get(ROLE_TAG) != ROLE_JOB:
            continue
        if run.status != "FINISHED":
            lines.append(f"skipped run {run.run_id} ({run.name}): {run.status}, no final q")
            continue
        write(RunDraws.of(run).inference_data(draws, seed), out / f"{run.run_id}.nc")
        written += 1
    if not written:
        raise ConfigurationError("no FINISHED job run to export: a run's final q is saved when it finishes")
    return [*lines, f"Wrote {draws} draws of the final q of {written} runs to {out}/<run id>.nc"]
