"""``mcsa-bench references make [--draws N ...] <the run's model overrides>``: a reference posterior for any
model with a JAX log density (a built-in's twin, a component written in JAX, a NumPyro or PyMC file), by
NumPyro's NUTS (references/nuts.py), held to the shipped references' bar, and stored in the user's folder
under the model's identity, where every later run of that model finds it (docs/references.md, "A reference
for any model")."""

from __future__ import annotations

import argparse

from mcsa_bench.api import ConfigurationError
from mcsa_bench.assembly import Assembly
from mcsa_bench.jobs.config import RunSettings, compose_jobs, register_configs
from mcsa_bench.plugins import get_registry
from mcsa_bench.references import identity_digest, user_reference_path
from mcsa_bench.references.nuts import NutsSettings, reference_of, sample, shortfall

USAGE = """usage: mcsa-bench references make [--chains 4] [--draws 5000] [--warmup 1000] [--target-accept 0.8]
                                 [--dense-mass] [--pilot N] [--seed 0] model=<name> [model.<option>=...]

Samples the model with NumPyro's NUTS (chains one after another, from z = 0) and stores the reference where
every later run of the same model finds it, if it meets the shipped references' bar: bulk ESS >= 10,000 for
every latent, R-hat < 1.01, no divergences. Otherwise it says which and what to try, stores nothing and exits 1.
--pilot N first runs N draws per chain with a diagonal mass and makes their covariance the main run's dense
mass matrix: for latents on a ridge, where --dense-mass's own adaptation is slow in hundreds of dimensions.
The model's overrides are a run's (a NumPyro file: model=numpyro model.source=file.py:function model.data=...).
Exit status: 0 stored, 1 short of the bar, 2 usage error."""


def parse(argv: list[str]) -> tuple[NutsSettings, list[str]]:
    """NUTS's settings from the --options, and the model overrides (everything else)."""
    defaults = NutsSettings()
    parser = argparse.ArgumentParser(prog="mcsa-bench references make", add_help=False, exit_on_error=False)
    parser.add_argument("--chains", type=int, default=defaults.chains)
    parser.add_argument("--draws", type=int, default=defaults.draws, help="draws per chain")
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument("--target-accept", type=float, default=defaults.target_accept)
    parser.add_argument("--dense-mass", action="store_true")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--pilot", type=int, default=defaults.pilot, help="draws per chain of a pilot run")
    try:
        options, overrides = parser.parse_known_args(argv)
    except argparse.ArgumentError as error:
        raise ConfigurationError(f"references make: {error}") from None
    unknown = [a for a in overrides if a.startswith("--")]
    if unknown:
        raise ConfigurationError(f"references make: unknown option {unknown[0]}; options: --chains, --draws, "
                                 "--warmup, --target-accept, --dense-mass, --pilot, --seed, then the model's overrides")
    if not any(o.startswith("model=") for o in overrides):
        raise ConfigurationError("references make needs the model, as a run would take it: "
                                 "mcsa-bench references make model=<name> [model.<option>=...]")
    if (options.chains < 2 or options.draws < 100 or options.warmup < 0 or not 0 < options.target_accept < 1
            or options.pilot < 0):
        raise ConfigurationError("references make: --chains >= 2 (R-hat compares chains), --draws >= 100, "
                                 "--warmup >= 0, 0 < --target-accept < 1 and --pilot >= 0")
    return NutsSettings(options.chains, options.draws, options.warmup, options.target_accept, options.dense_mass,
                        options.seed, options.pilot), overrides


def model_of(overrides: list[str]) -> Assembly:
    """The run's components for these overrides (the model as a run of them builds it)."""
    registry = get_registry()
    register_configs(registry)
    (_, cfg), = compose_jobs(overrides, multirun=False)
    return RunSettings.from_config(cfg).assemble(registry)


def make(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(USAGE)
        return 0
    settings, overrides = parse(argv)
    try:
        import numpyro  # noqa: F401
    except ImportError:
        raise ConfigurationError("references make samples with NumPyro's NUTS: pip install "
                                 "'mcsa-bench[numpyro]'") from None
    parts = model_of(overrides)
    name, identity = parts.sources["model"].name, parts.model_identity()
    model = parts.model
    twin = parts.jax_twin("model")
    if 0 < settings.pilot * settings.chains <= model.dim:
        raise ConfigurationError(f"references make: --pilot {settings.pilot} gives {settings.pilot * settings.chains} "
                                 f"draws over {settings.chains} chains, too few for the covariance of {name}'s "
                                 f"{model.dim} latents: use --pilot {2 * model.dim // settings.chains + 1} or more")
    pilot = f", after a pilot of {settings.pilot} draws per chain" if settings.pilot else ""
    print(f"NUTS on {name} (D = {model.dim}): {settings.chains} chains x {settings.draws} draws after "
          f"{settings.warmup} of warm-up{pilot} ...", flush=True)
    draws, run = sample(twin.log_joint, model.dim, settings)
    reference = reference_of(draws, run, f"{name}--{identity_digest(name, identity)}", name, identity,
                             model.latent_names(), model.log_joint, settings.seed)
    problem = shortfall(reference)
    if problem is not None:
        print(f"mcsa-bench: no reference stored for {name} ({run['seconds']:.0f} s of NUTS): {problem}")
        return 1
    path = user_reference_path(name, identity)
    path.parent.mkdir(parents=True, exist_ok=True)
    reference.save(path)
    quality = reference.quality
    print(f"Reference of {name} stored in {path} ({run['seconds']:.0f} s): bulk ESS >= {quality['ess_min']:,.0f}, "
          f"R-hat <= {quality['rhat_max']:.4f}, no divergences. Every run of this model is now scored against it.")
    return 0
