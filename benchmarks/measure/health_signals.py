"""What each run-health signal catches (docs/reliability.md, "What the health signals catch"): the papers'
methods (pMCSA, JSA, MSC, MSC-RB with their default kernels, SNIS, ELBO with one draw) with mean-field and
full-rank Gaussians on logistic regression on all rows of pima, N = 10, Adam 0.01, T = 10^4, scored
against the shipped references: with raw features (the papers' setting), iterate averaging off and from
T/2 (as the posterior-accuracy grid, conf/experiment/posterior_accuracy.yaml); with standardized features
(where runs come within 0.1 sd), averaging from T/2. Runs are appended to
benchmarks/results/health_signals.partial.jsonl as they finish, and a rerun skips those. Per run it stores the
final posterior-accuracy metrics, their noise floors, the accuracy verdict and every health signal's value
(mcsa_bench.jobs.health), then tables, per signal, how many runs that end more than 1 posterior sd off it
flags and how many runs within 0.1 sd it flags wrongly: by the true error (the larger of the largest mean
error and the largest |log sd ratio|), then by the mean error alone.

    OMP_NUM_THREADS=1 python benchmarks/measure/health_signals.py [--seeds 5] [--iters 10000]
    python benchmarks/measure/health_signals.py --table   # the table again from benchmarks/results/health_signals.json

The same table for runs already made, from run bundles (`mcsa-bench export`), by the health signals each
job run was tagged with and its final errors (docs/results.md's accuracy grids):

    python benchmarks/measure/health_signals.py --bundles benchmarks/results/grids/*.zip

Those runs were tagged by the health code of their day, whose k̂ came from 2^12 draws of another stream
and which had no iterate_sd. The runs whose verdict those two signals decide in the goal's columns (> 1 sd
off or within 0.1 sd by either measure, no other signal) are judged again by today's: k̂
(mcsa_bench.jobs.health.final_khat: 2^12 draws, or 2^16 near the bar) from each run's final q (its job
directory's variational.npz, found by the run's origin id) over health_rng(seed)'s draws, and for a run
that reports its last iterate the iterates' sd, from the run made again from its job's config.yaml (bit
for bit: its final λ must equal the saved one), both as the job computes them today, stored with q's λ in
benchmarks/results/health_khat.json.gz; --bundles then counts those runs by them. --khat-check
recomputes every stored k̂ from its stored λ.

    OMP_NUM_THREADS=1 python benchmarks/measure/health_signals.py --khat-from outputs/ \
        --bundles benchmarks/results/grids/*.zip
    python benchmarks/measure/health_signals.py --khat-check
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
from harness import RESULTS, load_average, machine, save

from mcsa_bench import get_registry, run
from mcsa_bench.api import Approximation
from mcsa_bench.assembly import assemble
from mcsa_bench.jobs.health import (
    ADVISORY_SIGNALS,
    DIVERGENCE_SIGNALS,
    KHAT_FIRST_DRAWS,
    SUSPECT_SIGNALS,
    Flag,
    Health,
    assess_run,
    final_khat,
    health_rng,
    near_the_bar,
    suspicions,
)
from mcsa_bench.references.accuracy import accuracy_verdict, noise_floors
from mcsa_bench.tracking.bundle import BundleReader
from mcsa_bench.tracking.record import ACCURACY_TAG, HEALTH_SIGNALS_TAG, ORIGIN_TAG, ROLE_JOB, ROLE_TAG

#: data set -> (model, the averaging settings run on it)
DATASETS = {
    "pima raw": (("logistic", {"dataset": "pima", "standardize": False, "test_fraction": 0.0}), (None, 0.5)),
    "pima std": (("logistic", {"dataset": "pima", "standardize": True, "test_fraction": 0.0}), (0.5,)),
}
#: method -> (scheme, N)
METHODS = {"pmcsa": ("pmcsa", 10), "jsa": ("jsa", 10), "msc": ("msc", 10), "msc_rb": ("msc_rb", 10),
           "snis": ("snis", 10), "elbo_n1": ("elbo", 1)}
FAMILIES = ("meanfield_gaussian", "fullrank_gaussian")
PARTIAL = RESULTS / "health_signals.partial.jsonl"
KHAT_RUNS = RESULTS / "health_khat.json.gz"
SIGNALS = (*DIVERGENCE_SIGNALS, *SUSPECT_SIGNALS, *ADVISORY_SIGNALS)
#: the table's last rows: a run tagged diverged or suspect (the verdict), and flagged by any signal at all
VERDICT, ANY = "diverged or suspect", "any signal"
#: a run's true error, in the measure docs/results.md's "Radon to 0.2 posterior sd" uses: its largest error on
#: any coordinate, of the mean in posterior sds or of the log sd (|log sd ratio|); a q with every mean right
#: and some sd 10 times too small is not within 0.1 sd. The tables give the mean error alone too.
OFF, CLOSE = 1.0, 0.1


class Scored(NamedTuple):
    """A run as the table counts it: its true errors, the signals that flag it, its accuracy verdict."""

    error: float  # of the mean or the log sd, the larger
    mean_error: float
    signals: set[str]
    accuracy: str
    label: str
    origin: str = ""  # a bundled run's origin id
    judged_today: bool = True  # a bundled run tagged by today's health code (it logs iterate_sd)


def one_run(model, family: str, method: str, average_from: float | None, seed: int, n_iters: int) -> dict:
    scheme, n_samples = METHODS[method]
    parts = assemble(get_registry(), model=model, family=family, estimator=scheme, n_samples=n_samples,
                     optimizer=("adam", {"lr": 0.01, "average_from": average_from}))
    result = run(*parts.run_args(), n_iters=n_iters, seed=seed, eval_every=n_iters // 10, reference=parts.reference)
    health = assess_run(parts, result, n_iters, seed, n_samples)
    final = result.history[-1]
    floors = noise_floors(parts.reference, parts.family)
    late = [row for row in result.history if row["iteration"] > n_iters / 2]
    return {
        "final": {k: v for k, v in final.items() if k.startswith(("ref_", "excess", "log_density", "gradient"))},
        "floors": floors, "accuracy": accuracy_verdict(final, floors).level,
        "signals": list(health.signals), "values": health.values,
        "acceptance": float(np.mean([r["acceptance_rate"] for r in late])) if "acceptance_rate" in final else None,
        "snis_ess": float(np.mean([r["snis_ess"] for r in late])) if "snis_ess" in final else None,
        "wall_time": final["wall_time"],
    }


def measure(seeds: int, n_iters: int) -> list[dict]:
    done = [json.loads(line) for line in PARTIAL.read_text().splitlines()] if PARTIAL.exists() else []
    runs = []
    for dataset, (model, averaging) in DATASETS.items():
        for family in FAMILIES:
            for method in METHODS:
                for average_from in averaging:
                    for seed in range(seeds):
                        key = {"dataset": dataset, "family": family, "method": method, "average_from": average_from,
                               "seed": seed}
                        stored = [r for r in done if all(r[k] == v for k, v in key.items())]
                        runs.append(stored[0] if stored else {**key, **one_run(model, family, method, average_from,
                                                                                   seed, n_iters)})
                        if not stored:
                            with open(PARTIAL, "a") as handle:
                                handle.write(json.dumps(runs[-1]) + "\n")
                        r = runs[-1]
                        print(f"{dataset:8} {family:18} {method:7} {average_from!s:4} {seed} "
                              f"err {r['final']['ref_mean_error_max']:8.3g} {r['accuracy']:8} "
                              f"{','.join(sorted(signals_of(r))) or 'ok'}", flush=True)
    return runs


def signals_of(run: dict) -> set[str]:
    """The signals that flag a stored run by today's bars (mcsa_bench.jobs.health), from its stored values."""
    diverged = {s for s in run["signals"] if s in DIVERGENCE_SIGNALS}
    return diverged | {f.signal for f in suspicions(run["values"], run["snis_ess"], METHODS[run["method"]][1],
                                                    last_iterate=run["average_from"] is None)}


def health_of(signals: set[str]) -> str:
    """The health tag today's code gives a run these signals flag."""
    return Health(tuple(Flag(signal, "") for signal in sorted(signals))).status


def flags(signal: str, signals: set[str]) -> bool:
    if signal == VERDICT:
        return bool(signals & {*DIVERGENCE_SIGNALS, *SUSPECT_SIGNALS})
    return bool(signals) if signal == ANY else signal in signals


def scored(stored: dict) -> Scored:
    """A run of this script's measurement, scored by today's bars."""
    return Scored(true_error(stored["final"]), stored["final"]["ref_mean_error_max"], signals_of(stored),
                  stored["accuracy"],
                  f"{stored['dataset']} {stored['family']} {stored['method']} average_from={stored['average_from']} "
                  f"seed {stored['seed']}")


def tagged_signals(tags: dict[str, str]) -> set[str]:
    """The signals a job run's health tag names (comma-separated, empty for none)."""
    return set(filter(None, tags.get(HEALTH_SIGNALS_TAG, "").split(",")))


def bundle_runs(paths: list[Path], khat: dict[str, dict] | None = None) -> list[Scored]:
    """The finished job runs of run bundles that were scored against a reference, by the health signals
    and accuracy verdict they were tagged with; the runs tagged before today's health code with their k̂
    and iterate-sd signals judged from ``khat`` (origin id -> stored run with today's values), where
    stored."""
    runs = [Scored(true_error(stored.metrics), stored.metrics["ref_mean_error_max"], tagged_signals(stored.tags),
                   stored.tags.get(ACCURACY_TAG, ""), f"{path.name}: {stored.name}",
                   stored.tags.get(ORIGIN_TAG, stored.run_id), "iterate_sd" in stored.metrics)
            for path in paths for stored in BundleReader(path).all_runs
            if stored.tags.get(ROLE_TAG) == ROLE_JOB and stored.status == "FINISHED"
            and "ref_mean_error_max" in stored.metrics]
    return [rejudged(run, khat[run.origin]) if khat and not run.judged_today and run.origin in khat else run
            for run in runs]


#: the signals the bundled runs' tags predate or judge differently today (their runs are judged again)
REJUDGED = {"khat", "iterate_sd"}


def rejudged(run: Scored, stored: dict) -> Scored:
    """``run`` with its k̂ and iterate-sd signals as today's bars judge their stored values."""
    values = {"final_khat": stored["khat"], "iterate_sd": stored.get("iterate_sd", 0.0)}
    new = {flag.signal for flag in suspicions(values, None, None, stored["draws"], stored["last_iterate"])}
    return run._replace(signals=(run.signals - REJUDGED) | new)


def rejudging_decides(run: Scored) -> bool:
    """Tagged before today's health code, in the goal's columns by either measure of the error, and no signal
    but those judged again (and the advisory ones) flags it."""
    others = run.signals & {*DIVERGENCE_SIGNALS, *SUSPECT_SIGNALS} - REJUDGED
    in_goal_columns = any(error <= CLOSE or not error <= OFF for error in (run.error, run.mean_error))
    return not run.judged_today and not others and in_goal_columns


def job_directories(roots: list[Path]) -> dict[str, Path]:
    """Run id -> job directory (run.json, config.yaml, variational.npz) under ``roots``."""
    found = {}
    for record in (path for root in roots for path in root.rglob("run.json")):
        if (record.parent / "variational.npz").exists():
            found[json.loads(record.read_text())["run_id"]] = record.parent
    return found


def khat_of_job(directory: Path) -> dict:
    """A job's final q (model, family, seed, λ) and its k̂ and draws, as the job's health computes them."""
    import yaml

    config = yaml.safe_load((directory / "config.yaml").read_text())
    stored = {"model": config["model"], "family": config["family"], "seed": config["seed"],
              "params": np.load(directory / "variational.npz")["params"].tolist()}
    khat, draws = khat_of(stored)
    return {**stored, "khat": khat, "draws": draws}


def iterate_sd_of_job(directory: Path) -> dict:
    """Whether a job reports its last iterate, and if so its iterates' sd (iterate_convergence), from the run
    made again from its config.yaml; SystemExit when it does not end at the saved λ."""
    from dataclasses import replace

    from omegaconf import OmegaConf

    from mcsa_bench.jobs.config import RunSettings
    from mcsa_bench.jobs.health import iterate_convergence

    registry = get_registry()
    settings = RunSettings.from_config(OmegaConf.load(directory / "config.yaml")).resolve(registry)
    if settings.components["optimizer"][1].get("average_from") is not None:
        return {"last_iterate": False}
    parts = settings.assemble(registry)
    result = run(*parts.run_args(), replace(settings, checkpoint_every=0, checkpoint_path=None))
    if not np.array_equal(result.q.params, np.load(directory / "variational.npz")["params"]):
        raise SystemExit(f"{directory}: made again, the run does not end at its saved λ")
    return {"last_iterate": True, "iterate_sd": iterate_convergence(parts.family, result.trace)["iterate_sd"]}


def khat_of(stored: dict) -> tuple[float, int]:
    def options(section: dict) -> tuple[str, dict]:
        return section["name"], {k: v for k, v in section.items() if k != "name"}

    parts = assemble(get_registry(), model=options(stored["model"]), family=options(stored["family"]),
                     estimator="elbo", n_samples=1)
    q = Approximation(parts.family, np.asarray(stored["params"]))
    return final_khat(parts.model, q, health_rng(stored["seed"]))


def measure_khat(bundles: list[Path], roots: list[Path]) -> None:
    """Today's k̂ and iterate sd of every bundled run they decide, from its job directory, into KHAT_RUNS
    (what is stored there already is kept), saved after each run."""
    directories = job_directories(roots)
    stored = stored_khat()
    decided = [run for run in bundle_runs(bundles) if rejudging_decides(run) and not current(stored.get(run.origin))]
    missing = [run.label for run in decided if run.origin not in directories]
    if missing:
        raise SystemExit(f"no job directory for {len(missing)} runs, e.g. {missing[0]}")
    for number, job in enumerate(decided, 1):
        directory = directories[job.origin]
        entry = stored.get(job.origin)
        if entry is None or not khat_current(entry):
            entry = {"label": job.label, **(entry or {}), **khat_of_job(directory)}
        stored[job.origin] = entry if "last_iterate" in entry else {**entry, **iterate_sd_of_job(directory)}
        print(f"{number}/{len(decided)} {job.label}: k̂ {entry['khat']:.3f}, iterate sd "
              f"{stored[job.origin].get('iterate_sd', '(averaged)')}", flush=True)
        KHAT_RUNS.write_bytes(gzip.compress(json.dumps({"runs": stored}).encode(), mtime=0))


def khat_current(entry: dict) -> bool:
    """Whether a stored k̂ came from the draws final_khat takes today (more when it is near the bar)."""
    return entry["draws"] != KHAT_FIRST_DRAWS or not near_the_bar(entry["khat"])


def current(entry: dict | None) -> bool:
    return entry is not None and "last_iterate" in entry and khat_current(entry)


def stored_khat() -> dict[str, dict]:
    return json.loads(gzip.decompress(KHAT_RUNS.read_bytes()))["runs"] if KHAT_RUNS.exists() else {}


def true_error(final: dict) -> float:
    return max(final["ref_mean_error_max"], final["ref_log_sd_ratio_max"])


def confusion(runs: list[Scored], measure: str = "error") -> dict:
    """Per signal, the verdict and any signal: how many runs > OFF sd off, between, and ≤ CLOSE sd it flags,
    by the true error (``measure="mean_error"``: by the mean error alone)."""
    groups = {"off": [], "between": [], "close": []}
    for scored_run in runs:
        error = getattr(scored_run, measure)
        groups["close" if error <= CLOSE else "between" if error <= OFF else "off"].append(scored_run.signals)
    table = {"runs": len(runs), **{name: len(group) for name, group in groups.items()}}
    for signal in (*SIGNALS, VERDICT, ANY):
        table[signal] = {f"flags_{name}": sum(flags(signal, s) for s in group) for name, group in groups.items()}
    off = [scored_run for scored_run in runs if not getattr(scored_run, measure) <= OFF]
    table["verdict_off_shown_accurate"] = sum(r.accuracy == "accurate" for r in off)
    table["missed"] = [f"{r.label}: mean {r.mean_error:.3g} sd, error {r.error:.3g}" for r in off
                       if not flags(VERDICT, r.signals)]
    return table


def print_tables(runs: list[Scored]) -> None:
    """The table by the true error, then by the mean error alone."""
    for measure, what in (("error", "largest error of a mean (in posterior sds) or a log sd"),
                          ("mean_error", "largest mean error alone")):
        print(f"\nby the {what}:")
        print_table(confusion(runs, measure))


def print_table(table: dict) -> None:
    print(f"{table['runs']} runs: {table['off']} end > {OFF:g} sd off, {table['between']} between, "
          f"{table['close']} within {CLOSE:g} sd")
    print(f"| signal | flags > {OFF:g} sd off | flags {CLOSE:g}–{OFF:g} sd | flags ≤ {CLOSE:g} sd |\n|---|---|---|---|")
    for signal in (*SIGNALS, VERDICT, ANY):
        row = table[signal]
        print(f"| {signal} | {row['flags_off']} of {table['off']} | {row['flags_between']} of {table['between']} | "
              f"{row['flags_close']} of {table['close']} |")
    print(f"runs > {OFF:g} sd off with the verdict accurate: {table['verdict_off_shown_accurate']}")
    for line in table["missed"]:
        print("missed:", line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10_000)
    parser.add_argument("--table", action="store_true", help="only the table, from the stored runs")
    parser.add_argument("--bundles", nargs="+", type=Path, metavar="ZIP", help="the table of these run bundles' runs")
    parser.add_argument("--khat-from", nargs="+", type=Path, metavar="DIR",
                        help="first judge the bundles' runs again by k̂ and iterate sd from their job "
                        "directories under DIR")
    parser.add_argument("--khat-check", action="store_true", help="recompute the stored k̂ from the stored λ")
    args = parser.parse_args()
    if args.khat_check:
        runs = stored_khat()
        differ = [run["label"] for run in runs.values() if khat_of(run) != (run["khat"], run["draws"])]
        print(f"{len(runs) - len(differ)} of {len(runs)} k̂ recomputed exactly", *differ, sep="\n")
        return
    if args.bundles:
        if args.khat_from:
            measure_khat(args.bundles, args.khat_from)
        print_tables(bundle_runs(args.bundles, stored_khat()))
        return
    if args.table:
        print_tables([scored(r) for r in json.loads((RESULTS / "health_signals.json").read_text())["runs"]])
        return
    load, start = load_average(), time.process_time()
    runs = measure(args.seeds, args.iters)
    scored_runs = [scored(r) for r in runs]
    table = confusion(scored_runs)
    print_tables(scored_runs)
    PARTIAL.unlink()
    save("health_signals", {"machine": machine(), "load": [load, load_average()], "seeds": args.seeds,
                            "n_iters": args.iters, "cpu_seconds_this_invocation": time.process_time() - start,
                            "optimization_seconds": sum(r["wall_time"] for r in runs), "table": table, "runs": runs})


if __name__ == "__main__":
    main()
