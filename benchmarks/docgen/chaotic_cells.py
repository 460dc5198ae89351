"""The chaotic cells of the published tables across arithmetic (docs/results.md, "Posterior accuracy", its
paragraph on chaotic cells across arithmetic).

A cell is chaotic when its runs' last bits decide their final values: run in the published arithmetic
(numpy's AVX2 paths and OpenBLAS's Haswell kernels, which a machine with AVX-512 imitates with the
environment of ``ARITHMETICS["published"]``) and in the machine's own, its seeds end elsewhere. This
script runs the jobs of a table's committed bundle (``TABLES``) in both (one store per arithmetic, one
BLAS thread) and summarizes them against the bundle. The mean-field table's pima cell, which prompted the
question, has its own study over many seeds (``run``, ``parting``, ``summarize``):

    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
    python benchmarks/docgen/chaotic_cells.py run --seeds 30 --stores /tmp/chaotic   # SNIS, MSC-RB on pima
    python benchmarks/docgen/chaotic_cells.py parting --stores /tmp/chaotic          # λ_t of seeds 0-4, both
    python benchmarks/docgen/chaotic_cells.py summarize --stores /tmp/chaotic [--out JSON]
    python benchmarks/docgen/chaotic_cells.py screen --table T --stores /tmp/chaotic          # seed 0, both
    python benchmarks/docgen/chaotic_cells.py summarize-screen --table T --stores /tmp/chaotic
    python benchmarks/docgen/chaotic_cells.py rows --table T --seeds 10 --stores /tmp/chaotic # SNIS, MSC-RB
    python benchmarks/docgen/chaotic_cells.py summarize-rows --table T --stores /tmp/chaotic  # into the JSON
    python benchmarks/docgen/chaotic_cells.py table [--table T] [--out JSON]          # docs/results.md's tables

On a machine without AVX-512 both arithmetics are the published one and every cell agrees.
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import io
import json
import os
import sqlite3
import subprocess
import sys
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
GRIDS = os.path.join(HERE, "..", "results", "grids")
RESULTS = os.path.join(HERE, "..", "results", "chaotic_cells.json")
ARITHMETICS = {"published": {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL", "OPENBLAS_CORETYPE": "Haswell"},
               "native": {}}
METHODS = ("snis", "msc_rb")
ALL_METHODS = ("pmcsa", "jsa", "msc", "msc_rb", "snis", "elbo_n1")
#: the cell the published table's SNIS and MSC-RB numbers come from (pima, mean-field, averaged)
CELL = ["experiment=posterior_accuracy", "experiment@_global_=logistic_pima_all_rows", "family=meanfield_gaussian",
        "optimizer.average_from=0.5"]
METRICS = ("ref_mean_error_max", "excess_inclusive_kl", "ref_log_sd_ratio_max")


@dataclasses.dataclass(frozen=True)
class Table:
    """A published table: its committed bundles, the sweeps over its rows (the overrides its jobs share, one
    sweep per set of rows that takes the same settings; method, averaging and seed are added), the two
    metrics its rows are shown in, and the rows and methods run over seeds (``rows``: the sweeps of the
    rows whose cells the screen found chaotic, default all)."""

    bundles: tuple[str, ...]
    sweeps: tuple[tuple[str, ...], ...]
    metrics: tuple[str, str] = ("ref_mean_error_max", "excess_inclusive_kl")
    rows: tuple[tuple[str, ...], ...] | None = None
    methods: tuple[str, ...] = METHODS


_LOGISTIC = ("experiment=posterior_accuracy",
             "experiment@_global_=logistic_pima_all_rows,logistic_heart_all_rows,logistic_german_all_rows,radon")
_SONAR = ("experiment=gp_classification_sonar", "model.test_fraction=0", "model.max_rows=100", "model.split_seed=0",
          "eval_every=1000")
TABLES = {
    "meanfield": Table(("posterior_accuracy_meanfield.zip",),
                       ((*_LOGISTIC, "family=meanfield_gaussian,meanfield_student_t"),)),
    # every method's cells move with the arithmetic (the screen): its rows over seeds are the default form's
    "fullrank": Table(("posterior_accuracy_fullrank.zip",),
                      ((*_LOGISTIC, "family=fullrank_gaussian", "family.offdiagonal=fan_in,relative,absolute"),),
                      rows=((*_LOGISTIC, "family=fullrank_gaussian", "family.offdiagonal=fan_in"),),
                      methods=ALL_METHODS),
    # the particle-Gibbs reference has no normalizing constant: no excess KL
    "stochastic_volatility": Table(("stochastic_volatility_sp500.zip",),
                                   (("experiment=stochastic_volatility_sp500", "eval_every=10000",
                                     "family=meanfield_gaussian,meanfield_student_t"),),
                                   ("ref_mean_error_max", "ref_log_sd_ratio_max")),
    "gp_classification_sonar": Table(("gp_classification_sonar.zip",),
                                     ((*_SONAR, "family=meanfield_gaussian,meanfield_student_t"),
                                      (*_SONAR, "family=fullrank_gaussian", "family.offdiagonal=relative")),
                                     # the full-rank cells move with the arithmetic, every method's; no other
                                     rows=((*_SONAR, "family=fullrank_gaussian", "family.offdiagonal=relative"),),
                                     methods=ALL_METHODS),
}
CHUNK = 5
#: a cell whose seed-0 value differs from the bundle's by more than this (relative) is chaotic; the
#: deterministic ones agree to 1e-10 or better (docs/results.md, at its top: pinned to the arithmetic)
CHAOTIC = 1e-6


def sweep(store: str, arithmetic: str, overrides: list[str], db: str) -> None:
    """One ``mcsa-bench run -m`` in an arithmetic, into ``store``/<db>.db. A sweep with failed jobs goes on
    (the bundles' own failures, such as the ELBO with a Student-t on stochastic volatility, fail here too);
    only FINISHED runs are summarized."""
    command = ["mcsa-bench", "run", "-m", *overrides, "resume=True",
               f"tracking.uri=sqlite:///{os.path.abspath(store)}/{db}.db",
               f"hydra.sweep.dir={os.path.abspath(store)}/sweeps/{db}"]
    done = subprocess.run(command, env={**os.environ, **ARITHMETICS[arithmetic]})
    if done.returncode != 0:
        print(f"== exit {done.returncode}: {' '.join(overrides)}", flush=True)


def sweep_table(store: str, sweeps: tuple[tuple[str, ...], ...], arithmetic: str, overrides: list[str],
                db: str) -> None:
    """Every sweep of a table's rows with ``overrides`` added, the jobs on every core (joblib: a run's values do
    not depend on the schedule)."""
    for rows in sweeps:
        print(f"== {db} {' '.join(overrides)} load {os.getloadavg()[0]:.1f}", flush=True)
        sweep(store, arithmetic, [*rows, *overrides, "hydra/launcher=joblib"], db)


def run_seeds(store: str, seeds: int) -> None:
    """SNIS and MSC-RB on the cell, seeds 0..seeds-1, the two arithmetics interleaved chunk by chunk (so
    a change of the machine's load falls on both)."""
    for start in range(0, seeds, CHUNK):
        chunk = ",".join(str(s) for s in range(start, min(start + CHUNK, seeds)))
        for arithmetic in ARITHMETICS:
            print(f"== {arithmetic} seeds {chunk} load {os.getloadavg()[0]:.1f}", flush=True)
            sweep(store, arithmetic, [*CELL, f"method={','.join(METHODS)}", f"seed={chunk}"], db=arithmetic)


def run_screen(store: str, table: str) -> None:
    """Seed 0 of every averaged cell of a table in each arithmetic: an averaged run and its last-iterate twin
    share λ_t (the average does not feed back into the chains), so the averaged cells say which are chaotic."""
    for arithmetic in ARITHMETICS:
        sweep_table(store, TABLES[table].sweeps, arithmetic,
                    [f"method={','.join(ALL_METHODS)}", "optimizer.average_from=0.5", "seed=0"],
                    db=f"screen-{table}-{arithmetic}")


def run_rows(store: str, table: str, seeds: int, arithmetics: list[str]) -> None:
    """A table's chaotic methods on its chaotic rows (``Table.rows``, ``Table.methods``), averaged and
    last-iterate, seeds 0..seeds-1, in each of ``arithmetics`` in turn."""
    spec = TABLES[table]
    for arithmetic in arithmetics:
        sweep_table(store, spec.rows or spec.sweeps, arithmetic,
                    ["optimizer.average_from=0.5,null", f"method={','.join(spec.methods)}", f"seed=range({seeds})"],
                    db=f"rows-{table}-{arithmetic}")


def summarize_rows(store: str, table: str) -> dict:
    """Per SNIS or MSC-RB cell of a table: its values in each arithmetic, whether the published one gave the
    bundle's seeds bit for bit, and over seeds × arithmetics the pooled mean [BCa] and the range a 5-seed mean
    falls in. Without a published store (rows run in the native arithmetic only) the published values are the
    bundle's seeds, which the screen found the published arithmetic to give bit for bit."""
    from mcsa_bench.report.stats import mean_interval

    bundle = bundle_runs(table)
    native = finished_runs(os.path.join(store, f"rows-{table}-native.db"))
    published_store = os.path.join(store, f"rows-{table}-published.db")
    published = finished_runs(published_store) if os.path.exists(published_store) else None
    metrics = TABLES[table].metrics
    cells = {}
    for key in sorted({key[:4] for key in native}):
        seeds = sorted(s for s in range(1000) if (*key, s) in native)
        if published is None:
            runs = {"published": bundle, "native": native}
            published_seeds = sorted(s for s in range(1000) if (*key, s) in bundle)
            entry = {"seeds": seeds, "published_seeds": published_seeds, "published_from": "bundle"}
        else:
            runs = {"published": published, "native": native}
            seeds = [s for s in seeds if (*key, s) in published]
            published_seeds = seeds
            compared = [s for s in seeds if (*key, s) in bundle]
            entry = {"seeds": seeds, "published_from": "runs", "published_equals_bundle": all(
                published[(*key, s)][m] == bundle[(*key, s)][m] for s in compared for m in metrics)}
        for metric in metrics:
            values = {"published": [runs["published"][(*key, s)][metric] for s in published_seeds],
                      "native": [native[(*key, s)][metric] for s in seeds]}
            pooled = values["published"] + values["native"]
            i = mean_interval(pooled)
            entry[metric] = {**values, "pooled_mean_bca": [i.mean, i.low, i.high],
                             "five_seed_range": five_seed_range(pooled)}
        cells[" ".join(key)] = entry
    return cells


def finished_runs(db: str) -> dict[tuple, dict[str, float]]:
    """(method, data set, family, average_from, seed) -> final metrics of a store's FINISHED runs."""
    connection = sqlite3.connect(db)
    params = collections.defaultdict(dict)
    for run, key, value in connection.execute(
            "select p.run_uuid, p.key, p.value from params p join runs r on r.run_uuid = p.run_uuid "
            "where r.status = 'FINISHED'"):
        params[run][key] = value
    latest = collections.defaultdict(dict)
    for run, key, value in connection.execute("select run_uuid, key, value from latest_metrics"):
        latest[run][key] = value
    return {_cell_key(p): latest[run] for run, p in params.items() if "estimator.name" in p}


def bundle_runs(table: str = "meanfield") -> dict[tuple, dict[str, float]]:
    """The same, of a table's committed bundles."""
    params, latest = collections.defaultdict(dict), collections.defaultdict(dict)
    for bundle in TABLES[table].bundles:
        archive = zipfile.ZipFile(os.path.join(GRIDS, bundle))
        for row in csv.DictReader(io.TextIOWrapper(archive.open("params.csv"))):
            params[row["run_id"]][row["key"]] = row["value"]
        for row in csv.DictReader(io.TextIOWrapper(archive.open("latest_metrics.csv"))):
            latest[row["run_id"]][row["key"]] = float(row["value"])
    return {_cell_key(p): latest[run] for run, p in params.items() if "estimator.name" in p}


def _cell_key(p: dict[str, str]) -> tuple:
    """(method, data set, family, average_from, seed); a full-rank family as ``fullrank_gaussian/<its
    off-diagonal form>``, the tables' rows."""
    family = "/".join(filter(None, (p["family.name"], p.get("family.offdiagonal"))))
    return (p["estimator.name"], p["model.dataset"], family, p.get("optimizer.average_from", "None"), int(p["seed"]))


def five_seed_range(values, draws: int = 100_000, seed: int = 0) -> list[float]:
    """The central 95 % of the mean of 5 seeds drawn from ``values`` (with replacement): where the mean of a
    5-seed run, the published tables' replication, falls."""
    means = np.random.default_rng(seed).choice(np.asarray(values), size=(draws, 5)).mean(axis=1)
    return [float(q) for q in np.quantile(means, [0.025, 0.975])]


def _paired(difference: np.ndarray) -> dict:
    """The mean of paired differences, its standard error and the two-sided sign test's p-value."""
    from scipy import stats

    positive = int((difference > 0).sum())
    return {"mean": float(difference.mean()), "se": float(difference.std(ddof=1) / np.sqrt(len(difference))),
            "positive": positive, "n": len(difference),
            "sign_test_p": float(stats.binomtest(positive, len(difference)).pvalue)}


def summarize_seeds(store: str) -> dict:
    """Per method and metric: each arithmetic's values by seed, their mean [BCa], the pooled values' mean [BCa]
    and 5-seed range, and the paired native − published differences."""
    from scipy import stats

    from mcsa_bench.report.stats import mean_interval

    runs = {a: finished_runs(os.path.join(store, f"{a}.db")) for a in ARITHMETICS}
    bundle = bundle_runs()
    out = {}
    for method in METHODS:
        def key(seed, method=method):
            return (method, "pima", "meanfield_gaussian", "0.5", seed)

        seeds = sorted(s for s in range(1000) if all(key(s) in runs[a] for a in ARITHMETICS))
        for metric in METRICS:
            by_arithmetic = {a: [runs[a][key(s)][metric] for s in seeds] for a in ARITHMETICS}
            pooled = [v for values in by_arithmetic.values() for v in values]
            difference = np.subtract(by_arithmetic["native"], by_arithmetic["published"])

            def interval(values):
                i = mean_interval(values)
                return [i.mean, i.low, i.high]

            out[f"{method} {metric}"] = {
                "seeds": seeds,
                "bundle": [bundle[key(s)][metric] for s in range(5)],
                "published_equals_bundle": all(runs["published"][key(s)][metric] == bundle[key(s)][metric]
                                               for s in range(5)),
                **{a: {"values": v, "mean_bca": interval(v), "first5_mean": float(np.mean(v[:5])),
                       "sd": float(np.std(v, ddof=1)), "five_seed_range": five_seed_range(v)}
                   for a, v in by_arithmetic.items()},
                "pooled": {"mean_bca": interval(pooled), "sd": float(np.std(pooled, ddof=1)),
                           "five_seed_range": five_seed_range(pooled)},
                # seeds 0-4 are why the question was asked; seeds 5 on are the unselected test of it
                # near 0 when a seed's value in the other arithmetic is a fresh draw
                "twin_correlation": float(stats.spearmanr(by_arithmetic["native"], by_arithmetic["published"])[0]),
                "native_minus_published": {"seeds 0-4": _paired(difference[:5]), "seeds 5 on": _paired(difference[5:])},
            }
    return out


def summarize_screen(store: str, table: str) -> dict:
    """Every screened cell's seed-0 largest mean error in the native arithmetic against the bundle's, which
    differ, and whether the published arithmetic gave the bundle's values bit for bit (where it was run)."""
    bundle = bundle_runs(table)
    native = finished_runs(os.path.join(store, f"screen-{table}-native.db"))
    published_store = os.path.join(store, f"screen-{table}-published.db")
    published = finished_runs(published_store) if os.path.exists(published_store) else {}
    cells = {}
    for key, metrics in sorted(native.items()):
        if key not in bundle or key[3] != "0.5":
            continue
        here, there = metrics["ref_mean_error_max"], bundle[key]["ref_mean_error_max"]
        relative = abs(here - there) / abs(there)
        cells[" ".join(map(str, key[:4]))] = {
            "native": here, "bundle": there, "relative_difference": relative, "chaotic": relative > CHAOTIC,
            **({"published_equals_bundle": all(published[key][m] == bundle[key][m] for m in TABLES[table].metrics)}
               if key in published else {})}
    return cells


def trace(arithmetic: str, method: str, seeds: list[int], out: str) -> None:
    """λ_t after every iteration of the cell's job (composed and run as the job runs it, untracked), one
    .npy per seed: run in a child whose environment sets the arithmetic before numpy loads."""
    from mcsa_bench.engine import run
    from mcsa_bench.jobs.config import RunSettings, compose, register_configs
    from mcsa_bench.plugins import get_registry

    registry = get_registry()
    register_configs(registry)
    for seed in seeds:
        (_, cfg), = compose([*CELL, f"method={method}", f"seed={seed}"],
                            multirun=False).jobs
        settings = RunSettings.from_config(cfg).resolve(registry)
        parts = settings.assemble(registry)
        iterates, step = [], parts.optimizer.step

        def recording_step(params, grad, state, step=step, iterates=iterates):
            new, state = step(params, grad, state)
            iterates.append(np.array(new))
            return new, state

        parts.optimizer.step = recording_step
        run(*parts.run_args(), settings, reference=parts.reference)
        np.save(os.path.join(out, f"{method}_{arithmetic}_seed{seed}.npy"), np.array(iterates))


def parting(store: str) -> dict:
    """Where the two arithmetics' λ_t part, per method and seed: the first iteration at which the largest
    |Δλ| passes 0 (a last bit), 1e-12, 1e-6, 1e-3 and 0.1, |Δλ| every 1,000 iterations, and its median over
    the second half (the averaged iterations) beside the median |Δλ| between two seeds there (all pairs of
    seeds 0-4, published arithmetic): once they are alike, a seed's value in the other arithmetic is a
    fresh draw."""
    def load(method, arithmetic, seed):
        return np.load(os.path.join(store, "traces", f"{method}_{arithmetic}_seed{seed}.npy"))

    out = {}
    for method in METHODS:
        published = [load(method, "published", seed) for seed in range(5)]
        half = len(published[0]) // 2
        between = [float(np.median(np.abs(a - b).max(axis=1)[half:]))
                   for i, a in enumerate(published) for b in published[i + 1:]]
        out[method] = {"between_seeds_median_gap": between}
        for seed in range(5):
            gap = np.abs(published[seed] - load(method, "native", seed)).max(axis=1)
            first = {f"{level:g}": int(np.argmax(gap > level)) + 1 if (gap > level).any() else None
                     for level in (0.0, 1e-12, 1e-6, 1e-3, 0.1)}
            out[method][f"seed {seed}"] = {"first_above": first, "gap_every_1000": [float(g) for g in gap[999::1000]],
                                           "median_gap_second_half": float(np.median(gap[half:]))}
    return out


LABELS = {"snis": "SNIS", "msc_rb": "MSC-RB", "pmcsa": "pMCSA", "jsa": "JSA", "msc": "MSC", "elbo": "ELBO (N=1)",
          "ref_mean_error_max": "largest mean error (sds)", "excess_inclusive_kl": "excess KL (nats)",
          "ref_log_sd_ratio_max": "largest \\|log sd ratio\\|"}


def _number(value: float, metric: str) -> str:
    return f"{value:.3g}" if metric == "excess_inclusive_kl" else f"{value:.2f}"


def table(result: dict, name: str = "meanfield") -> str:
    """The Markdown tables docs/results.md shows of a table (``TABLES``): :func:`screen_table` and
    :func:`rows_table`, after, for the mean-field one, :func:`seeds_table`."""
    lines = [seeds_table(result["seeds"]), ""] if name == "meanfield" else []
    entry = result["tables"][name]
    lines.append(screen_table(entry["screen"]))
    if "rows" in entry:
        lines += ["", rows_table(entry["rows"], TABLES[name].metrics)]
    return "\n".join(lines)


def seeds_table(seeds: dict) -> str:
    """Per method and metric of pima's cell: each arithmetic's mean [95 % BCa] over seeds 0-4 and over all its
    seeds, the pooled mean [BCa] and the range a 5-seed run falls in."""
    lines = ["| method, metric | published arithmetic, seeds 0–4 (the bundle) | published, all seeds | "
             "AVX-512, seeds 0–4 | AVX-512, all seeds | both arithmetics | a 5-seed mean falls in (95 %) |",
             "|---|---|---|---|---|---|---|"]
    from mcsa_bench.report.stats import mean_interval

    for key, entry in seeds.items():
        method, metric = key.split()

        def shown(interval, metric=metric):
            mean, low, high = interval
            return f"{_number(mean, metric)} [{_number(low, metric)}, {_number(high, metric)}]"

        def first5(values):
            i = mean_interval(values[:5])
            return shown([i.mean, i.low, i.high])

        n = len(entry["seeds"])
        low, high = entry["pooled"]["five_seed_range"]
        lines.append(f"| {LABELS[method]}, {LABELS[metric]} | {first5(entry['published']['values'])} | "
                     f"{shown(entry['published']['mean_bca'])} ({n}) | {first5(entry['native']['values'])} | "
                     f"{shown(entry['native']['mean_bca'])} ({n}) | {shown(entry['pooled']['mean_bca'])} ({2 * n}) | "
                     f"[{_number(low, metric)}, {_number(high, metric)}] |")
    return "\n".join(lines)


def screen_table(screen: dict) -> str:
    """Per method, how many of a table's averaged cells move with the arithmetic (seed 0), and in how many the
    published arithmetic gave the bundle's values bit for bit (– where it was not run)."""
    by_method = collections.defaultdict(list)
    for cell, entry in screen.items():
        by_method[cell.split()[0]].append(entry)
    lines = ["| method | averaged cells whose seed 0 moves with the arithmetic | largest relative difference "
             "of the others | the published arithmetic's seed 0 is the bundle's |", "|---|---|---|---|"]
    for method, entries in by_method.items():
        others = [e["relative_difference"] for e in entries if not e["chaotic"]]
        checked = [e["published_equals_bundle"] for e in entries if "published_equals_bundle" in e]
        lines.append(f"| {LABELS[method]} | {sum(e['chaotic'] for e in entries)} of {len(entries)} | "
                     f"{f'{max(others):.0e}' if others else '–'} | "
                     f"{f'{sum(checked)} of {len(checked)}' if checked else '–'} |")
    return "\n".join(lines)


def rows_table(rows: dict, metrics: tuple[str, str]) -> str:
    """Per SNIS or MSC-RB cell of a table and each of its two metrics: the mean of its seeds in the published
    arithmetic and in AVX-512's, the pooled mean [BCa] and the range a 5-seed mean falls in."""
    header = " | ".join(f"{LABELS[m]}: published | AVX-512 | both [BCa] | a 5-seed mean falls in" for m in metrics)
    lines = [f"| method, data set, family, averaged | {header} |", "|---" * (1 + 4 * len(metrics)) + "|"]
    for cell, entry in rows.items():
        method, dataset, family, average_from = cell.split()
        cells = []
        for metric in metrics:
            mean, low, high = entry[metric]["pooled_mean_bca"]
            lower, upper = entry[metric]["five_seed_range"]
            cells += [_number(float(np.mean(entry[metric]["published"])), metric),
                      _number(float(np.mean(entry[metric]["native"])), metric),
                      f"{_number(mean, metric)} [{_number(low, metric)}, {_number(high, metric)}]",
                      f"[{_number(lower, metric)}, {_number(upper, metric)}]"]
        averaged = "yes" if average_from == "0.5" else "no"
        lines.append(f"| {LABELS[method]}, {dataset}, {family}, {averaged} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _update(out: str, change) -> dict:
    """The results JSON with ``change(result)`` applied, written back."""
    result = {}
    if os.path.exists(out):
        with open(out) as handle:
            result = json.load(handle)
    change(result)
    with open(out, "w") as handle:
        json.dump(result, handle, indent=1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["run", "parting", "summarize", "screen", "summarize-screen", "rows",
                                         "summarize-rows", "table", "_trace"])
    parser.add_argument("--table", choices=list(TABLES), default="meanfield")
    parser.add_argument("--stores", default="/tmp/chaotic")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--arithmetics", nargs="+", choices=list(ARITHMETICS), default=list(ARITHMETICS),
                        help="rows: run in these only (without the published one, its values are the bundle's)")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--child", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.makedirs(args.stores, exist_ok=True)
    tables = lambda result: result.setdefault("tables", {}).setdefault(args.table, {})  # noqa: E731
    if args.what == "run":
        run_seeds(args.stores, args.seeds)
    elif args.what == "parting":
        os.makedirs(os.path.join(args.stores, "traces"), exist_ok=True)
        for method in METHODS:
            for arithmetic in ARITHMETICS:
                subprocess.run([sys.executable, __file__, "_trace", "--stores", args.stores, "--child", arithmetic,
                                method], env={**os.environ, **ARITHMETICS[arithmetic]}, check=True)
    elif args.what == "_trace":
        arithmetic, method = args.child
        trace(arithmetic, method, list(range(5)), os.path.join(args.stores, "traces"))
    elif args.what == "summarize":
        def change(result):
            result["seeds"], result["load"] = summarize_seeds(args.stores), os.getloadavg()[0]
            if os.path.isdir(os.path.join(args.stores, "traces")):
                result["parting"] = parting(args.stores)

        result = _update(args.out, change)
        print(seeds_table(result["seeds"]))
    elif args.what == "screen":
        run_screen(args.stores, args.table)
    elif args.what == "summarize-screen":
        result = _update(args.out, lambda result: tables(result).update(
            screen=summarize_screen(args.stores, args.table), screen_load=os.getloadavg()[0]))
        print(screen_table(result["tables"][args.table]["screen"]))
    elif args.what == "rows":
        run_rows(args.stores, args.table, args.seeds, args.arithmetics)
    elif args.what == "summarize-rows":
        result = _update(args.out, lambda result: tables(result).update(
            rows=summarize_rows(args.stores, args.table), rows_load=os.getloadavg()[0]))
        print(rows_table(result["tables"][args.table]["rows"], TABLES[args.table].metrics))
    else:
        print(table(json.load(open(args.out)), args.table))


if __name__ == "__main__":
    main()
