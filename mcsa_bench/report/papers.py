"""The papers' published values for a report's runs: the ``paper:`` block of the experiment config
a run composed (``experiment=logistic_pima``, or a grid's ``experiment@_global_=logistic_pima``).

A run's experiment is read from its ``hydra.overrides`` tag and composed once per distinct
experiment with the configs installed now (an experiment config removed since gives no value; the
paper's setting, e.g. its T, may differ from the run's: the table's notes state the run's).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcsa_bench.api import ConfigurationError
from mcsa_bench.report.runs import RunRecord, split_overrides


@dataclass(frozen=True)
class Published:
    """What a paper reported for one experiment: per method key, per metric, its mean."""

    source: str
    replications: int
    values: dict[str, dict[str, float]]

    def value(self, method: str, metric: str) -> float | None:
        found = self.values.get(method, {}).get(metric)
        return None if found is None else float(found)


def experiment_of(run: RunRecord) -> str | None:
    """The experiment config a run composed: a grid's per-job choice (``experiment@_global_=logistic_pima``)
    over the grid itself (``experiment=logistic``)."""
    from mcsa_bench.jobs.job import override_key

    chosen = [o for o in split_overrides(run.overrides) if override_key(o) == "experiment"]
    chosen.sort(key=lambda o: "@" in o.partition("=")[0])  # the per-job choice last
    return chosen[-1].partition("=")[2] if chosen else None


def _compose_paper(experiment: str) -> Published | None:
    from omegaconf import OmegaConf

    from mcsa_bench.jobs.config import compose, register_configs
    from mcsa_bench.plugins import get_registry

    register_configs(get_registry())
    try:
        (_, cfg), = compose([f"experiment={experiment}"], multirun=False).jobs
    except ConfigurationError:
        return None
    paper = cfg.get("paper")
    if not paper or not paper.get("values"):
        return None
    return Published(str(paper.get("source", "")), int(paper.get("replications") or 0),
                     OmegaConf.to_container(paper["values"]))


def published_values(runs: list[RunRecord]) -> dict[str, Published]:
    """Run id -> the paper's values for the run's experiment, for the runs whose experiment has them."""
    by_experiment: dict[str, Published | None] = {}
    found = {}
    for run in runs:
        experiment = experiment_of(run)
        if experiment is None:
            continue
        if experiment not in by_experiment:
            by_experiment[experiment] = _compose_paper(experiment)
        if by_experiment[experiment] is not None:
            found[run.run_id] = by_experiment[experiment]
    return found
