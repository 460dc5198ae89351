"""The run's settings: one table (docs/architecture.md, "Run settings").

Every run setting is a field made by :func:`setting`, a row of the table: its config key, default,
allowed values and whether it enters the config hash. :class:`Settings` holds the engine's rows; the
job's settings (``mcsa_bench.jobs.config.RunSettings``) extend it with the job's own, and both backends
read them: the numpy loop (engine/loop.py) and the JAX cell (accel/engine.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from mcsa_bench.api import ConfigurationError

#: when a run evaluates, besides iterations 0 and T: ``linear``, every ``eval_every`` iterations;
#: ``geometric``, at eval_every · 2^j (j = 0, 1, ...), the same resolution relative to t on every scale
EVAL_SCHEDULES = ("linear", "geometric")


@dataclass(frozen=True)
class EvaluationSchedule:
    """The iterations at which a run of ``n_iters`` evaluates (docs/performance.md, "What evaluation costs");
    its values are checked where they are settings (:class:`Settings`)."""

    n_iters: int
    every: int
    kind: str  # one of EVAL_SCHEDULES

    def at(self, t: int) -> bool:
        """Whether iteration t ends with an evaluation (iteration 0 always has one)."""
        if t == self.n_iters:
            return True
        if t % self.every:
            return False
        multiple = t // self.every
        return self.kind == "linear" or multiple & (multiple - 1) == 0  # a power of two has a single bit set

    def count(self) -> int:
        """How many evaluations a whole run makes, the one at iteration 0 included: of the multiples of
        ``every`` those :meth:`at` keeps, and T when it is not one of them."""
        multiples = range(self.every, self.n_iters + 1, self.every)
        return 1 + sum(self.at(t) for t in multiples) + (self.n_iters % self.every != 0)


# --------------------------------------------------------------------------------------------
# The run's settings: one table
# --------------------------------------------------------------------------------------------

#: when a run logs the metrics measured from samples of π (mcsa_bench.references.samples: 1-5 s a scoring):
#: ``final``, at T only; ``every``, at every evaluation; ``off``
SAMPLE_METRICS = ("final", "every", "off")

#: the key of a setting's row in its dataclass field's metadata
ROW = "mcsa_bench.setting"


@dataclass(frozen=True)
class Setting:
    """One row of the run settings' table: a field of :class:`Settings` (or of a subclass, such as a
    job's settings) made by :func:`setting`, and everything declared about it."""

    name: str  # the field's name, the attribute the engine and the job read
    key: str  # its config key (``diagnostics.every``)
    default: Any
    minimum: float | None = None
    maximum: float | None = None  # a duration's bound: beyond it, what waits that long overflows (OverflowError)
    choices: tuple = ()
    check: Callable[[Any], object] | None = None  # raises ConfigurationError for a value it refuses
    computing: bool = True  # whether it changes what a run computes: then it enters the config hash
    added_later: bool = False  # left out of the config hash at its default: runs recorded before it keep their hash
    doc: str = ""

    def check_value(self, value: Any) -> None:
        if self.minimum is not None and not value >= self.minimum:
            raise ConfigurationError(f"{self.key} must be >= {self.minimum}, got {value}")
        if self.maximum is not None and not value <= self.maximum:
            raise ConfigurationError(f"{self.key} must be <= {self.maximum:g}, got {value}")
        if self.choices and value not in self.choices:
            raise ConfigurationError(f"unknown {self.key} {value!r}; allowed: {', '.join(map(str, self.choices))}")
        if self.check is not None:
            self.check(value)


def setting(default: Any, *, key: str | None = None, **row: Any) -> Any:
    """A settings field: its default and its row of the table (:class:`Setting`'s fields; ``key``
    defaults to the field's name)."""
    return field(default=default, metadata={ROW: {"key": key, **row}})


def table(settings: type) -> list[Setting]:
    """The rows of a settings class, in field order."""
    return [Setting(name=f.name, default=f.default, **{**f.metadata[ROW], "key": f.metadata[ROW]["key"] or f.name})
            for f in fields(settings) if ROW in f.metadata]


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The run's settings, checked when made: the table in which each run setting is declared once.

    Each field made by :func:`setting` is a row: config key, default, allowed values, whether it
    enters the config hash (docs/architecture.md, "Run settings"). The job's settings
    (``mcsa_bench.jobs.config.RunSettings``) extend this class with the job's own rows; the Hydra
    schema, the checks, the config hash's rules and what the engine receives all come from them.
    """

    seed: int = setting(0, minimum=0, doc="the run's seed: chains, initialization, evaluation")
    n_iters: int = setting(1000, minimum=1, doc="T, SGD iterations")
    eval_every: int = setting(100, minimum=1, doc="evaluate every this many iterations (and at 0 and T)")
    eval_schedule: str = setting(EVAL_SCHEDULES[0], choices=EVAL_SCHEDULES, added_later=True,
                                 doc="linear: every eval_every iterations; geometric: at eval_every · 2^j")
    diagnostics_every: int = setting(0, key="diagnostics.every", minimum=0,
                                     doc="gradient-variance diagnostic every this many iterations; 0: off")
    diagnostics_replicas: int = setting(64, key="diagnostics.replicas", minimum=2,
                                        doc="R, independent copies of the estimator's chains")
    checkpoint_every: int = setting(0, minimum=0, computing=False,
                                    doc="write a resumable checkpoint every this many iterations; 0: never")
    sample_metrics: str = setting(SAMPLE_METRICS[0], choices=SAMPLE_METRICS, computing=False,
                                  doc="the metrics from draws of π (MMD, Sinkhorn, EUBO, mode coverage, ...): at the "
                                      "final evaluation, at every one, or off")
    # given by the caller for one run, not configured
    checkpoint_path: Path | None = None
    identity: str = ""  # the run's identity, e.g. its config hash: a checkpoint resumes only under the same

    def __post_init__(self) -> None:
        for row in table(type(self)):
            row.check_value(getattr(self, row.name))
        if self.checkpoint_path is not None:
            object.__setattr__(self, "checkpoint_path", Path(self.checkpoint_path))

    @cached_property
    def evaluation(self) -> EvaluationSchedule:
        return EvaluationSchedule(self.n_iters, self.eval_every, self.eval_schedule)

    def computing_values(self) -> dict[str, Any]:
        """The engine's settings that change what it computes, by field name, each added later left
        out at its default: the config hash's rule (a later setting cannot change an old identity)."""
        return {row.name: getattr(self, row.name) for row in table(Settings) if row.computing
                and not (row.added_later and getattr(self, row.name) == row.default)}

    def diagnoses_at(self, t: int) -> bool:
        return bool(self.diagnostics_every) and t % self.diagnostics_every == 0

    def checkpoints_at(self, t: int) -> bool:
        return bool(self.checkpoint_every) and t % self.checkpoint_every == 0

    def samples_scored_at(self, t: int) -> bool:
        """Whether the evaluation at iteration t logs the metrics from draws of π."""
        return self.sample_metrics == "every" or (self.sample_metrics == "final" and t == self.n_iters)
