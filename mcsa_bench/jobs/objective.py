"""What a trial returns to a sweeper that chooses its jobs as it goes (Hydra's Optuna or Nevergrad sweeper
tuning a stepsize; docs/tuning.md): the final values of the metrics the setting ``objective`` names.

A search is a sweep whose ``hydra.sweeper`` is not Hydra's basic one. Before it launches, the driver
resolves the objective (:func:`resolve_goals`: each named metric with its better direction, by default
the model's headline metric), sets the sweeper's own direction to match (:func:`sweeper_direction`) and
hands the goals to every trial (:data:`OBJECTIVE_ENV`). Each trial is a job with its own run; it
returns (:func:`trial_value`) the final values its run logged, the values of the earlier FINISHED run it
reused under ``resume=true``, or, for a run whose fit went non-finite (a stepsize too large), each
goal's worst value (−inf for a metric to maximize), so that a diverging stepsize is a bad trial rather
than the end of the study. A trial whose run failed otherwise raises :class:`TrialFailed`, a failed
trial as the sweeper counts them (its ``max_failure_rate`` decides whether the search goes on).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mcsa_bench.api import Approximation, ConfigurationError, MCSAError, did_you_mean
from mcsa_bench.assembly import Assembly
from mcsa_bench.tracking.localrecord import read_metrics_stream, read_run_info
from mcsa_bench.tracking.record import (
    ENGINE_METRICS,
    HIGHER,
    LOWER,
    METRICS,
    REFERENCE_METRICS,
    RESULT,
    metric_spec,
)

#: set by the driver for every trial of a search (hydra.job.env_set): the goals, ``metric:max,metric:min``
OBJECTIVE_ENV = "MCSA_BENCH_OBJECTIVE"
#: a goal's direction as written in ``objective=NAME:max``
SUFFIXES = {"max": HIGHER, "min": LOWER}
#: Hydra's sweepers whose direction the driver sets, by the class path hydra.sweeper._target_ names
OPTUNA_SWEEPER = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
NEVERGRAD_SWEEPER = "hydra_plugins.hydra_nevergrad_sweeper.nevergrad_sweeper.NevergradSweeper"
#: the error types of a run that went non-finite (api.NonFiniteError and its DivergenceError: a non-finite gradient
#: or λ, what a stepsize too large gives): its trial scores its worst
DIVERGED_ERRORS = ("NonFiniteError", "DivergenceError")


class TrialFailed(MCSAError):
    """A trial's run failed for another reason than a divergence: no value for the sweeper."""

    exit_code = 1


@dataclass(frozen=True)
class Goal:
    """One metric a search optimizes: its final value, in its better direction (HIGHER or LOWER)."""

    metric: str
    direction: str

    @property
    def worst(self) -> float:
        return -math.inf if self.direction == HIGHER else math.inf

    def __str__(self) -> str:
        return f"{self.metric}:{'max' if self.direction == HIGHER else 'min'}"


def named(value: Any) -> list[tuple[str, str | None]]:
    """The (metric, direction or None) pairs the setting names: ``NAME``, ``NAME:max|min`` or a list of them."""
    items = value if isinstance(value, (list, tuple)) else [value]
    pairs = []
    for item in items:
        name, _, suffix = str(item).partition(":")
        pairs.append((name, SUFFIXES.get(suffix) if suffix else None))
    return pairs


def check_objective(value: Any) -> None:
    """The setting's own check: unset, or metric names, each with an optional ``:max`` or ``:min``."""
    if value is None:
        return
    items = value if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ConfigurationError("objective names no metric; write objective=NAME, NAME:max or NAME:min, or a "
                                 "list of them: objective=[test_lpd,test_accuracy]")
    for item in items:
        name, _, suffix = str(item).partition(":")
        if not isinstance(item, str) or not name or (suffix and suffix not in SUFFIXES):
            raise ConfigurationError(f"objective {item!r}: write a metric's name, optionally with :max or :min "
                                     "(e.g. objective=test_lpd, objective=grad_norm:min)")


def reported_metrics(parts: Assembly) -> dict[str, float]:
    """The metrics the model's evaluation reports, from one evaluation of the family's initial q."""
    q = Approximation(parts.family, parts.family.init_params())
    return parts.model.evaluate(q, np.random.default_rng(0))


def result_metrics(parts: Assembly, reported: Mapping[str, float]) -> list[str]:
    """The results a run of ``parts`` logs, its headline first: the model's, in the catalogue's order (test_lpd
    before test_accuracy, kl_inclusive before kl_exclusive) and then its own declared ones, then the
    posterior-accuracy metrics when it has a reference."""
    declared = parts.metric_specs()
    own = [name for name in dict.fromkeys([*METRICS, *reported]) if name in reported
           and metric_spec(name, declared).kind == RESULT]
    return own + (list(REFERENCE_METRICS) if parts.reference is not None else [])


def resolve_goals(value: Any, parts: Assembly) -> list[Goal]:
    """The goals of the setting ``objective`` (None: the model's headline metric, the first of
    :func:`result_metrics`), each with its direction: the one written, else the metric's own (catalogue or
    declaration). A metric neither known nor reported by the model, or one without a better direction and none
    written, is one line."""
    reported, declared = reported_metrics(parts), parts.metric_specs()
    results = result_metrics(parts, reported)
    if value is None and not results:
        raise ConfigurationError(f"model {parts.sources['model'].name!r} reports no result metric to optimize; "
                                 "name one with objective=NAME:max or NAME:min")
    known = {*results, *declared, *reported, *ENGINE_METRICS}  # what a run of parts may log
    goals = []
    for name, direction in named(value) if value is not None else [(results[0], None)]:
        if name not in known:
            raise ConfigurationError(f"objective {name!r}: no such metric{did_you_mean(name, known)}; the run's "
                                     f"results: {', '.join(results) or '(none)'}")
        direction = direction or metric_spec(name, declared).direction
        if direction is None:
            raise ConfigurationError(f"objective {name!r} has no better direction; write {name}:max or {name}:min")
        goals.append(Goal(name, direction))
    return goals


def encode(goals: list[Goal]) -> str:
    return ",".join(map(str, goals))


def decode(text: str) -> list[Goal]:
    return [Goal(name, direction) for name, direction in named(text.split(","))]


def sweeper_direction(goals: list[Goal], sweeper: str, node: Mapping[str, Any],
                      command_keys: set[str]) -> tuple[str | None, str]:
    """(the Hydra override that sets the sweeper's direction to the goals', or None; a line saying what it does).
    A direction the command line gives that contradicts a goal's is one line. Optuna: ``hydra.sweeper.direction``
    (one per goal); Nevergrad: ``hydra.sweeper.optim.maximize`` (one goal); another sweeper is left as it is."""
    shown = ", ".join(f"{g.metric} ({'higher' if g.direction == HIGHER else 'lower'} is better)" for g in goals)
    if sweeper == OPTUNA_SWEEPER:
        key = "hydra.sweeper.direction"
        wanted = ["maximize" if g.direction == HIGHER else "minimize" for g in goals]
        current = node.get("direction")
        current = [str(d).rpartition(".")[2] for d in (current if isinstance(current, list) else [current])]
        value = wanted[0] if len(wanted) == 1 else f"[{','.join(wanted)}]"
    elif sweeper == NEVERGRAD_SWEEPER:
        if len(goals) > 1:
            raise ConfigurationError(f"Nevergrad's sweeper optimizes one objective; objective names {len(goals)}: "
                                     f"{encode(goals)}")
        key = "hydra.sweeper.optim.maximize"
        wanted, current = [goals[0].direction == HIGHER], [bool((node.get("optim") or {}).get("maximize"))]
        value = str(wanted[0]).lower()
    else:
        return None, f"Each trial returns {shown}; hydra.sweeper._target_ {sweeper} chooses its own direction"
    if current == wanted:
        return None, f"Each trial returns {shown}; {key}={value} agrees"
    if key in command_keys:
        raise ConfigurationError(f"{key} contradicts the objective: {shown}; leave {key} out (mcsa-bench sets it "
                                 "from the objective) or name the direction, e.g. objective=NAME:min")
    return f"{key}={value}", f"Each trial returns {shown}; the sweeper runs with {key}={value}"


def trial_value(goals: list[Goal], status: str, output_dir, reused_metrics: Mapping[str, float] | None,
                number: int | None) -> float | list[float]:
    """What a trial hands its sweeper: the final value of each goal's metric (one float for one goal). ``status``:
    how its job ended; ``output_dir``: its local record; ``reused_metrics``: under resume=true, the final metrics of
    the FINISHED run of its configuration, when the job was skipped for one."""
    where = f"trial #{number or 0}"
    if status == "FINISHED":
        final: dict[str, float] = {}
        for row in read_metrics_stream(output_dir):
            final.update(row)
    elif status == "SKIPPED" and reused_metrics is not None:
        final = dict(reused_metrics)
    elif status == "FAILED" and str(read_run_info(output_dir).get("error", "")).partition(":")[0] in DIVERGED_ERRORS:
        final = {goal.metric: goal.worst for goal in goals}  # a stepsize that diverges: the worst trial
    else:
        error = read_run_info(output_dir).get("error") or "no run of its own"
        raise TrialFailed(f"{where} ended {status}: {error}")
    missing = [goal.metric for goal in goals if goal.metric not in final]
    if missing:
        raise TrialFailed(f"{where}: its run logged no {', '.join(missing)}")
    values = [float(final[goal.metric]) for goal in goals]
    return values[0] if len(values) == 1 else values


def goals_of_this_trial() -> list[Goal] | None:
    """The goals the driver handed this job, when it is a trial of a search; else None."""
    text = os.environ.get(OBJECTIVE_ENV)
    return decode(text) if text else None
