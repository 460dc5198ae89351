"""The run record: what a run leaves in the MLflow store, defined once for the code that writes it
(:mod:`mcsa_bench.jobs`, :mod:`mcsa_bench.tracking`) and the code that reads it (:mod:`mcsa_bench.report`).
docs/report.md, "What a run records", describes it for readers of a store.

- **Tags**: every tag name the project writes.
- **Key settings**: short tags standing for params (the MLflow UI's columns, a report's factors) and
  the one rule that names a method.
- **Run identity**: the config hash, with its rules for keys that compute nothing and keys added later.
- **The metric catalogue**: every metric the project logs, with its kind (a result, or a diagnostic
  about the run), its direction, label and unit; a producer's declaration of a metric the catalogue
  does not know is stored on the run as a tag (:func:`metric_spec_tags`).
- **What a sweep and a paper setting store** for a later report: the sweep's job list
  (:data:`SWEEP_JOBS_ARTIFACT`) and the papers' published values (:data:`PAPER_TAG`).

Plain strings and dicts only: nothing here imports MLflow, Hydra or the plugin registry.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mcsa_bench.api import METRIC_DIRECTIONS, METRIC_KINDS, ConfigurationError, MetricSpec

# ------------------------------------------------------------------------------------ tags

ROLE_TAG = "mcsa_bench.role"  # ROLE_JOB or ROLE_SWEEP
ROLE_JOB, ROLE_SWEEP = "job", "sweep"
SWEEP_TAG = "mcsa_bench.sweep.id"  # the sweep's directory, on the parent and on every job
PARENT_TAG = "mlflow.parentRunId"  # a job's sweep parent run
OVERRIDES_TAG = "hydra.overrides"  # the command's overrides (parent), the job's own (job)
JOB_NUMBER_TAG = "hydra.job.num"
JOB_COUNT_TAG = "mcsa_bench.jobs"  # on a sweep's parent: how many jobs it launches
SEARCH_TAG = "mcsa_bench.search"  # on a search's parent (its sweeper chooses the jobs): the sweeper and its goals
CONFIG_HASH_TAG = "mcsa_bench.config_hash"  # config_hash() of the job
BACKEND_TAG = "mcsa_bench.backend"  # the engine that computed the run: numpy or jax (the setting `backend`)
CELL_TAG = "mcsa_bench.cell"  # backend=jax: the cell (replicates computed together) the run was one of
#: backend=jax: where the cell's time went, JSON: seconds getting its programs (compiling them, or tracing them
#: when a cache had them), in its compiled optimization loop (all its replicates together) and evaluating
CELL_SECONDS_TAG = "mcsa_bench.cell_seconds"
ERROR_TAG, ERROR_TYPE_TAG = "error", "error.type"  # a FAILED run's error
HEALTH_TAG, HEALTH_REASON_TAG = "mcsa_bench.health", "mcsa_bench.health_reason"  # mcsa_bench.jobs.health
HEALTH_DIVERGED, HEALTH_OK = "diverged", "ok"
HEALTH_SUSPECT = "suspect"  # finished without diverging, but a signal doubts q (mcsa_bench.jobs.health)
HEALTH_TOO_SHORT = "too_short"  # shorter than the health signals need, and not diverged: no verdict (jobs.health)
HEALTH_SIGNALS_TAG = "mcsa_bench.health_signals"  # the health signals that flagged the run, comma-separated
#: a run with a reference: how close its final q is (mcsa_bench.references.accuracy.accuracy_verdict), best first
ACCURACY_TAG, ACCURACY_REASON_TAG = "mcsa_bench.accuracy", "mcsa_bench.accuracy_reason"
ACCURACY_LEVELS = ("accurate", "rough", "off")
RESUMED_FROM_TAG = "mcsa_bench.resumed_from_iteration"  # a run continued from a checkpoint
REFERENCE_TAG = "mcsa_bench.reference"  # the reference posterior the run's accuracy metrics use
PAPER_TAG = "mcsa_bench.paper"  # a paper setting's published values, JSON (encode_paper)
METRIC_TAG_PREFIX = "mcsa_bench.metric."  # + a metric's name: its producer's declaration (encode_metric_spec)
COMPONENT_TAG_PREFIX = "component."  # component.<kind>, .plugin, .distribution
VERSION_TAG, COMMIT_TAG, DIRTY_TAG = "mcsa_bench.version", "mlflow.source.git.commit", "mcsa_bench.git.dirty"
#: a live run's process (mcsa_bench.tracking.lifecycle): host, pid, boot id and start time (tells a
#: reused pid from the original), a heartbeat; and why a later command marked it KILLED
HOST_TAG, PID_TAG, PROCESS_TAG = "mcsa_bench.host", "mcsa_bench.pid", "mcsa_bench.process"
HEARTBEAT_TAG, STALE_TAG = "mcsa_bench.heartbeat", "mcsa_bench.stale"
#: a run's claim on its cell (mcsa_bench.tracking.claims); on a run that found its cell computed by
#: another and was deleted (a job skipped), that run's id
CLAIM_TAG, CLAIMED_BY_TAG = "mcsa_bench.claim", "mcsa_bench.claimed_by"
#: on a copy of a run in another store (`merge` of a bundle, `sync` of a job directory): the identity of
#: the run where it was made (its id; for a run `sync` made from a local record alone, the record's id),
#: kept through every later copy: copying is idempotent by it (origin_of)
ORIGIN_TAG = "mcsa_bench.origin_run_id"
#: what `sync` called ORIGIN_TAG on the copies it made before the two were one tag: still read
SYNCED_FROM_TAG = "mcsa_bench.synced_from"
#: on a run while its merge from a bundle is under way
MERGING_TAG = "mcsa_bench.merge_incomplete"

#: on the experiment: the kind MLflow 3's UI opens it as (its Model-training view, not GenAI's); set when it is created
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
#: on the experiment: the runs table's columns and order that `mcsa-bench ui` opens (MLflow's shared view state,
#: named by the URL's viewStateShareKey)
RUNS_VIEW_TAG = "mlflow.sharedViewState.mcsa-bench"

#: a sweep's parent run's artifact: every job it launches (encode_sweep_jobs); a file, not a tag: a
#: paper-size grid's job list is far longer than a tag holds (docs/report.md, "What a run records")
SWEEP_JOBS_ARTIFACT = "sweep_jobs.json"


def origin_of(run_id: str, tags: Mapping[str, str]) -> str:
    """The identity of the run where a run was made: its origin tag on a copy (the old `sync` tag on an
    old store's), else its own id."""
    return tags.get(ORIGIN_TAG) or tags.get(SYNCED_FROM_TAG) or run_id


def error_tags(error: BaseException, limit: int = 5000) -> dict[str, str]:
    """A failed run's error as tags (cut to ``limit`` characters, within MLflow's tag length)."""
    return {ERROR_TAG: f"{type(error).__name__}: {error}"[:limit], ERROR_TYPE_TAG: type(error).__name__}


# ---------------------------------------------------------------------------- key settings

#: the key settings (tags, in the order tables show them) and the param each stands for
KEY_SETTINGS: dict[str, str] = {
    "model": "model.name",
    "dataset": "model.dataset",
    "scheme": "estimator.name",
    "kernel": "kernel.name",
    "family": "family.name",
    "optimizer": "optimizer.name",
    "lr": "optimizer.lr",
    "N": "n_samples",
    "T": "n_iters",
    "seed": "seed",
}
METHOD_TAG = "method"


def method_name(scheme: str, kernel: str, default_kernel: str | None) -> str:
    """The method a run ran: the scheme's name when its kernel is the scheme's default (or it uses
    none), else ``<scheme>+<kernel>`` (``msc+hmc``: the parallel-state paper's single-HMC)."""
    return scheme if not kernel or kernel == default_kernel else f"{scheme}+{kernel}"


def flatten(mapping: Mapping[str, Any], prefix: str = "", *, drop_none: bool = False) -> dict[str, str]:
    """{"model": {"dim": 10}} -> {"model.dim": "10"}, a config as MLflow params; with ``drop_none``, unset
    keys (a scheme without a kernel: ``kernel: null``) are left out rather than written ``None``."""
    flat: dict[str, str] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}.", drop_none=drop_none))
        elif value is not None or not drop_none:
            flat[name] = str(value)
    return flat


_OVERRIDE_START = re.compile(r"^[~+]{0,2}[A-Za-z_][\w.@/-]*(=|$)")


def split_overrides(text: str) -> list[str]:
    """Hydra overrides joined by spaces (as in the ``hydra.overrides`` tag) back into a list.

    A space-separated piece that does not start like an override (``key=`` or ``~key``) belongs
    to the previous one, e.g. ``model.x=[1, 2]``.
    """
    pieces: list[str] = []
    for piece in text.split():
        if pieces and not _OVERRIDE_START.match(piece):
            pieces[-1] += " " + piece
        else:
            pieces.append(piece)
    return pieces


def override_key(override: str) -> str:
    """The config key an override sets: ``experiment@_global_=x`` and ``+experiment=x`` set ``experiment``."""
    return override.partition("=")[0].lstrip("+~").partition("@")[0]


def key_setting_tags(effective: Mapping[str, Any], default_kernel: str | None) -> dict[str, str]:
    """The key-setting tags of a job from its effective config (the kernel that runs filled in) and
    its scheme's default kernel."""
    params = flatten(effective, drop_none=True)
    settings = {key: params.get(param, "") for key, param in KEY_SETTINGS.items()}
    return {METHOD_TAG: method_name(settings["scheme"], settings["kernel"], default_kernel), **settings}


# ---------------------------------------------------------------------------- run identity

#: keys that change how a run executes, where it is recorded or what is said about it, not what it computes
NON_COMPUTING_KEYS = ("tracking", "resume", "threads", "checkpoint_every", "paper", "sample_metrics", "objective")
#: keys added after runs were recorded, left out of the hash at these defaults: earlier runs keep their hash
LATER_KEY_DEFAULTS = {"eval_schedule": "linear", "backend": "numpy"}
#: a component's parameters added after runs were recorded, by (group, component name, parameter): left out
#: of the hash at their defaults likewise
LATER_PARAM_DEFAULTS = {("model", "radon", "parameterization"): "centred"}
#: settings that change no result: the non-computing keys, how often a run evaluates (each evaluation
#: draws from a stream of its own, mcsa_bench.engine) and the gradient diagnostic (a stream of its own)
NON_RESULT_SETTINGS = (*NON_COMPUTING_KEYS, "eval_every", "eval_schedule", "diagnostics")


def config_hash(effective: dict[str, Any]) -> str:
    """A short stable hash of what a run computes: its effective config without the non-computing keys.

    Runs with equal hashes compute the same numbers (the seed is part of the config); ``resume``
    uses it to find jobs that already have a FINISHED run.
    """
    computed = {key: value for key, value in effective.items() if key not in NON_COMPUTING_KEYS
                and not (key in LATER_KEY_DEFAULTS and value == LATER_KEY_DEFAULTS[key])}
    for (group, name, param), default in LATER_PARAM_DEFAULTS.items():
        section = computed.get(group)
        if isinstance(section, dict) and section.get("name") == name and section.get(param) == default:
            computed[group] = {key: value for key, value in section.items() if key != param}
    text = json.dumps(computed, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def changes_results(setting: str) -> bool:
    """Whether runs that differ in ``setting`` (a key or a param) may compute different numbers."""
    return not any(setting == key or setting.startswith(key + ".") for key in NON_RESULT_SETTINGS)


# ------------------------------------------------------------------------ metric catalogue

RESULT, DIAGNOSTIC = METRIC_KINDS
HIGHER, LOWER, NO_DIRECTION = METRIC_DIRECTIONS
SPEC_SEPARATOR = ";"


def axis_label(spec: MetricSpec, name: str) -> str:
    """A metric's label (its name when it has none) with its unit in parentheses, for an axis or a caption."""
    label = spec.label or name
    return f"{label} ({spec.unit})" if spec.unit else label


def _result(direction: str, label: str, unit: str = "") -> MetricSpec:
    return MetricSpec(RESULT, direction, label, unit)


def _diagnostic(direction: str, label: str, unit: str = "") -> MetricSpec:
    return MetricSpec(DIAGNOSTIC, direction, label, unit)


#: every metric the project logs; the results in the order of a report's tables (docs/methods.md
#: defines them, docs/references.md the posterior-accuracy ones)
METRICS: dict[str, MetricSpec] = {
    "test_lpd": _result(HIGHER, "test log predictive density", "nats per point"),
    "test_accuracy": _result(HIGHER, "test accuracy"),
    "test_rmse": _result(LOWER, "test RMSE", "units of the target"),
    "kl_inclusive": _result(LOWER, "KL(π‖q)", "nats"),
    "kl_exclusive": _result(LOWER, "KL(q‖π)", "nats"),
    "log_z": _result(HIGHER, "log marginal likelihood estimate", "nats"),
    "excess_inclusive_kl": _result(LOWER, "excess KL(π‖q) over the family's best", "nats"),
    "ref_mean_error_max": _result(LOWER, "largest mean error", "posterior sd"),
    "ref_mean_error_rms": _result(LOWER, "RMS mean error", "posterior sd"),
    "ref_log_sd_ratio_max": _result(LOWER, "largest |log sd ratio|"),
    "ref_log_sd_ratio_rms": _result(LOWER, "RMS |log sd ratio|"),
    # the sample-based metrics (mcsa_bench.references.samples): q's draws and log q against draws of π
    "elbo": _result(HIGHER, "ELBO E_q[log w]", "nats"),
    "eubo": _result(LOWER, "EUBO E_π[log w]", "nats"),
    "log_z_q": _result(HIGHER, "log Z by importance sampling with q", "nats"),
    "log_z_pi": _result(LOWER, "log Z by reverse importance sampling over π", "nats"),
    "log_z_q_error": _result(LOWER, "|Δ log Z| of importance sampling with q", "nats"),
    "log_z_pi_error": _result(LOWER, "|Δ log Z| of reverse importance sampling over π", "nats"),
    "ess_q": _result(HIGHER, "normalized ESS of q's importance weights"),
    "ess_pi": _result(HIGHER, "normalized ESS over π's draws"),
    "mmd": _result(LOWER, "MMD of q's and π's draws (Gaussian kernel, median bandwidth)"),
    "sinkhorn": _result(LOWER, "Sinkhorn divergence of q's and π's draws", "squared distance"),
    "mode_coverage": _result(HIGHER, "entropic mode coverage"),
    # qualifies log_z: k̂ > 0.7 and the estimate is unreliable (docs/models.md)
    "log_z_khat": _diagnostic(LOWER, "Pareto k̂ of the log Z weights"),
    "excess_inclusive_kl_se": _diagnostic(NO_DIRECTION, "Monte Carlo standard error of the excess KL(π‖q)", "nats"),
    # the Monte Carlo standard errors of the estimates where q has no closed form (a flow's): the Gaussian
    # target's KLs (mcsa_bench.metrics.KL_STANDARD_ERRORS) and q's marginal moments' metrics (REFERENCE_METRICS')
    "kl_inclusive_se": _diagnostic(NO_DIRECTION, "Monte Carlo standard error of KL(π‖q)", "nats"),
    "kl_exclusive_se": _diagnostic(NO_DIRECTION, "Monte Carlo standard error of KL(q‖π)", "nats"),
    **{f"{name}_se": _diagnostic(NO_DIRECTION, f"Monte Carlo standard error of {name}", "its unit") for name in (
        "ref_mean_error_max", "ref_log_sd_ratio_max", "ref_mean_error_rms", "ref_log_sd_ratio_rms")},
    # the engine's, the kernels', the estimators' and the gradient diagnostic's (docs/architecture.md, "Engine")
    "grad_norm": _diagnostic(NO_DIRECTION, "gradient norm ‖g‖"),
    "acceptance_rate": _diagnostic(HIGHER, "acceptance rate"),
    "step_size": _diagnostic(NO_DIRECTION, "HMC step size ε"),
    "wall_time": _diagnostic(LOWER, "wall-clock time", "s"),
    # the cost so far: the points the scheme evaluated the log density (and its gradient) at (mcsa_bench.engine.Cost)
    "log_density_evals": _diagnostic(LOWER, "log-density evaluations", "points"),
    "gradient_evals": _diagnostic(LOWER, "gradient evaluations", "points"),
    "cis_ess": _diagnostic(HIGHER, "effective sample size of the CIS weights", "slots"),
    "mala_acceptance": _diagnostic(HIGHER, "MALA acceptance rate of the local steps"),
    "snis_ess": _diagnostic(HIGHER, "effective sample size of the SNIS weights", "draws"),
    "divergences": _diagnostic(LOWER, "divergent HMC transitions"),
    "grad_variance": _diagnostic(LOWER, "gradient variance tr\u00a0Cov[g]"),
    "grad_bias": _diagnostic(LOWER, "gradient bias ‖E[g] − ∇KL‖"),
    # the run's health (mcsa_bench.jobs.health): 1 when the fit diverged
    "diverged": _diagnostic(LOWER, "diverged fit"),
    # the health's signals (mcsa_bench.jobs.health), logged once at the end
    "iterate_rhat": _diagnostic(LOWER, "split R̂ of the iterates over the run's second half"),
    "iterate_mcse": _diagnostic(LOWER, "MCSE of the iterates' mean over the second half", "q's sd"),
    "iterate_sd": _diagnostic(LOWER, "sd of the iterates over the second half", "q's sd"),
    "final_khat": _diagnostic(LOWER, "Pareto k̂ of π/q at the final q"),
    # the posterior-accuracy metrics' noise floors (mcsa_bench.references.accuracy.noise_floors), logged once
    **{f"{name}_floor": _diagnostic(NO_DIRECTION, f"noise floor of {name}", "its unit") for name in (
        "excess_inclusive_kl", "ref_mean_error_max", "ref_log_sd_ratio_max", "ref_mean_error_rms",
        "ref_log_sd_ratio_rms")},  # the names of REFERENCE_METRICS, defined below
}
#: the posterior-accuracy metrics (mcsa_bench.references.accuracy), most telling first
REFERENCE_METRICS = ("excess_inclusive_kl", "ref_mean_error_max", "ref_log_sd_ratio_max", "ref_mean_error_rms",
                     "ref_log_sd_ratio_rms")
#: the sample-based metrics (mcsa_bench.references.samples), most telling first
SAMPLE_METRICS = ("mode_coverage", "log_z_q_error", "mmd", "sinkhorn", "elbo", "eubo", "log_z_q", "log_z_pi",
                  "log_z_pi_error", "ess_q", "ess_pi")
#: the metrics the framework logs about every run (engine, kernels, estimators, diagnostics, health, the
#: references' noise floors), as opposed to the model's own and the posterior-accuracy metrics
ENGINE_METRICS = ("grad_norm", "acceptance_rate", "wall_time", "cis_ess", "mala_acceptance", "snis_ess",
                  "divergences", "step_size", "grad_variance", "grad_bias", "diverged",
                  *(f"{name}_se" for name in REFERENCE_METRICS),
                  "log_density_evals", "gradient_evals", "iterate_rhat", "iterate_mcse", "iterate_sd", "final_khat",
                  *(f"{name}_floor" for name in REFERENCE_METRICS))

#: the cost axes every run logs at each evaluation (mcsa_bench.engine.Cost, and the optimization's wall time)
COST_METRICS = ("log_density_evals", "gradient_evals", "wall_time")


def floor_metric(name: str) -> str:
    """The metric that holds a posterior-accuracy metric's noise floor: a report never ranks by differences below it."""
    return f"{name}_floor"


def encode_metric_spec(spec: MetricSpec) -> str:
    """``kind;direction;unit;label`` (the label last: it may hold the separator; no direction: ``none``),
    e.g. ``diagnostic;none;;HMC step size ε``."""
    if SPEC_SEPARATOR in spec.unit or "\n" in spec.label + spec.unit:
        raise ValueError(f"a metric's unit holds no {SPEC_SEPARATOR!r} and its label and unit no line break; "
                         f"got {spec.label!r} and {spec.unit!r}")
    return SPEC_SEPARATOR.join((spec.kind, spec.direction or "none", spec.unit, spec.label))


def decode_metric_spec(text: str) -> MetricSpec:
    """The spec :func:`encode_metric_spec` wrote; ValueError naming the problem for anything else,
    a result without a better direction included (it could not be ranked)."""
    parts = text.split(SPEC_SEPARATOR, 3)
    if len(parts) != 4:
        raise ValueError(f"a metric declaration reads kind;direction;unit;label, got {text!r}")
    kind, direction, unit, label = parts
    try:
        spec = MetricSpec(kind, None if direction == "none" else direction, label, unit)
    except ConfigurationError as error:
        raise ValueError(str(error)) from None
    if spec.kind == RESULT and spec.direction is None:
        raise ValueError(f"a result has a better direction ({HIGHER} or {LOWER}): {text!r}")
    return spec


def metric_spec_tags(specs: Mapping[str, Any]) -> dict[str, str]:
    """The tags that store producers' declarations (name -> spec) on a run; the catalogue's own
    metrics need none."""
    return {METRIC_TAG_PREFIX + name: encode_metric_spec(spec) for name, spec in specs.items() if name not in METRICS}


def declared_metric_specs(tag_sets: Iterable[Mapping[str, str]]) -> dict[str, MetricSpec]:
    """The declarations stored on runs (their tags); a malformed one counts as none, and of runs that
    disagree the last one's counts."""
    declared = {}
    for tags in tag_sets:
        for key, value in tags.items():
            if key.startswith(METRIC_TAG_PREFIX):
                try:
                    declared[key[len(METRIC_TAG_PREFIX):]] = decode_metric_spec(value)
                except ValueError:
                    continue
    return declared


def metric_spec(name: str, declared: Mapping[str, MetricSpec] | None = None) -> MetricSpec:
    """A metric's spec: the catalogue's, else its producer's stored declaration, else a diagnostic with
    no direction (so a metric nobody described is never tabled as a result)."""
    return METRICS.get(name) or (declared or {}).get(name) or MetricSpec(DIAGNOSTIC, NO_DIRECTION, name)


# ---------------------------------------------------------------- sweeps and paper settings


@dataclass(frozen=True)
class SweepJobs:
    """What a sweep launches, stored on its parent run at launch: each job's overrides (as the job's
    OVERRIDES_TAG will read), whether it resumes (skips jobs already FINISHED) and, when it does, each
    job's config hash, by which a report finds the earlier run of a job it skipped."""

    overrides: tuple[str, ...]
    resume: bool
    config_hashes: tuple[str, ...] = ()
    chosen_by: str = ""  # a search's sweeper (hydra/sweeper=optuna), which chose the jobs as it went: none stored

    def __post_init__(self):
        if self.resume and len(self.config_hashes) != len(self.overrides):
            raise ValueError(f"a resuming sweep stores a config hash per job: {len(self.overrides)} jobs, "
                             f"{len(self.config_hashes)} hashes")


def encode_sweep_jobs(jobs: SweepJobs) -> str:
    return json.dumps({"resume": jobs.resume, "jobs": list(jobs.overrides), "config_hashes": list(jobs.config_hashes),
                       **({"chosen_by": jobs.chosen_by} if jobs.chosen_by else {})},
                      ensure_ascii=False, separators=(",", ":"))


def decode_sweep_jobs(text: str) -> SweepJobs:
    """The job list :func:`encode_sweep_jobs` wrote; ValueError for anything else."""
    try:
        stored = json.loads(text)
        return SweepJobs(tuple(map(str, stored["jobs"])), bool(stored["resume"]),
                         tuple(map(str, stored["config_hashes"])), str(stored.get("chosen_by", "")))
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{SWEEP_JOBS_ARTIFACT} is not a sweep's job list: {error}") from None


def encode_paper(paper: Mapping[str, Any]) -> str:
    """A paper setting's ``paper`` block (source, replications, values per method and metric) as a tag."""
    return json.dumps(paper, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def decode_paper(tags: Mapping[str, str]) -> dict[str, Any] | None:
    """The ``paper`` block a run stored, or None (not a paper setting, or a run written before it was stored)."""
    text = tags.get(PAPER_TAG)
    return None if text is None else json.loads(text)
