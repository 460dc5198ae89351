"""The papers' published values for a report's runs: the ``paper`` block of the experiment config a
run composed (``experiment=logistic_pima``, or a grid's ``experiment@_global_=logistic_pima``), which
the run stored when it ran (mcsa_bench.tracking.record.PAPER_TAG).

Runs written before runs stored it get the block of their experiment as today's configs have it, from
the report's :class:`~mcsa_bench.report.runs.Reconstruction` (an experiment config removed since gives
no value; the paper's setting, e.g. its T, may differ from the run's: the table's notes state the run's).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcsa_bench.api import ConfigurationError
from mcsa_bench.report.runs import Reconstruction, RunRecord
from mcsa_bench.tracking.record import PAPER_TAG, decode_paper, override_key, split_overrides


@dataclass(frozen=True)
class Published:
    """What a paper reported for one experiment: per method key, per metric, its mean."""

    source: str
    replications: int
    values: dict[str, dict[str, str | float]]  # as published ("-0.50"); numbers in tags stored before strings were
    n_iters: int | None = None  # the paper's T (None: a block stored before it was recorded)

    def value(self, method: str, metric: str) -> float | None:
        found = self.values.get(method, {}).get(metric)
        return None if found is None else float(found)

    def text(self, method: str, metric: str) -> str:
        """The value as the paper printed it, trailing zeros kept (``-0.50``)."""
        found = self.values.get(method, {}).get(metric)
        return found if isinstance(found, str) else f"{found:g}"

    @classmethod
    def of(cls, paper: dict | None) -> Published | None:
        """From a ``paper`` block; None for a block without values."""
        if not paper or not paper.get("values"):
            return None
        n_iters = paper.get("n_iters")
        return cls(str(paper.get("source", "")), int(paper.get("replications") or 0), paper["values"],
                   None if n_iters is None else int(n_iters))

    def at_its_size(self, run: RunRecord) -> bool:
        """Whether ``run`` ran as the paper did, so that its values are expected to match: on all rows of the data
        (no ``max_rows``), without a ``size`` override (size=tiny, a grid's smoke or bench size), for the paper's T
        where the block records it."""
        overrides = split_overrides(run.overrides)
        if any(override_key(o) == "size" for o in overrides) or run.params.get("max_rows", "None") != "None":
            return False
        return self.n_iters is None or run.settings.get("T") == str(self.n_iters)


def experiment_of(run: RunRecord) -> str | None:
    """The experiment config a run composed: a grid's per-job choice (``experiment@_global_=logistic_pima``)
    over the grid itself (``experiment=logistic``)."""
    chosen = [o for o in split_overrides(run.overrides) if override_key(o) == "experiment"]
    chosen.sort(key=lambda o: "@" in o.partition("=")[0])  # the per-job choice last
    return chosen[-1].partition("=")[2] if chosen else None


class _TodaysPapers:
    """The ``paper`` blocks of runs that did not store theirs, by experiment, from the reconstruction."""

    def __init__(self, reconstruction: Reconstruction | None):
        self._reconstruction = reconstruction
        self._by_experiment: dict[str, Published | None] = {}

    def __call__(self, run: RunRecord) -> Published | None:
        experiment = experiment_of(run)
        if experiment is None or self._reconstruction is None:
            return None
        if experiment not in self._by_experiment:
            try:
                self._by_experiment[experiment] = Published.of(self._reconstruction.paper(experiment))
            except ConfigurationError:
                self._by_experiment[experiment] = None
        return self._by_experiment[experiment]


def published_values(runs: list[RunRecord], reconstruction: Reconstruction | None = None) -> dict[str, Published]:
    """Run id -> the paper's values for the run's experiment, for the runs whose experiment has them; runs
    with the same values share one object (a table shows a cell's value when its runs have one block)."""
    todays = _TodaysPapers(reconstruction)
    stored: dict[str, Published | None] = {}
    found = {}
    for run in runs:
        if PAPER_TAG in run.tags:
            text = run.tags[PAPER_TAG]
            published = (
                stored[text] if text in stored else stored.setdefault(text, Published.of(decode_paper(run.tags)))
            )
        else:
            published = todays(run)
        if published is not None:
            found[run.run_id] = published
    return found
