"""The chaotic cells of the posterior-accuracy mean-field table across arithmetic (docs/results.md,
"Posterior accuracy", its paragraph on chaotic cells across arithmetic).

A cell is chaotic when its runs' last bits decide their final values: run in the published arithmetic
(numpy's AVX2 paths and OpenBLAS's Haswell kernels, which a machine with AVX-512 imitates with the
environment of ``ARITHMETICS["published"]``) and in the machine's own, its seeds end elsewhere. This
script runs the same jobs of ``experiment=posterior_accuracy`` in both, interleaved in chunks of seeds
(one store per arithmetic, one BLAS thread, one job at a time), and summarizes them against the
committed bundle:

    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
    python benchmarks/docgen/chaotic_cells.py run --seeds 30 --stores /tmp/chaotic   # SNIS, MSC-RB on pima
    python benchmarks/docgen/chaotic_cells.py screen --stores /tmp/chaotic           # every row, seed 0, native
    python benchmarks/docgen/chaotic_cells.py parting --stores /tmp/chaotic          # λ_t of seeds 0-4, both
    python benchmarks/docgen/chaotic_cells.py summarize --stores /tmp/chaotic [--out JSON]
    python benchmarks/docgen/chaotic_cells.py rows --seeds 10 --stores /tmp/chaotic  # every row, both arithmetics
    python benchmarks/docgen/chaotic_cells.py summarize-rows --stores /tmp/chaotic   # adds them to the JSON
    python benchmarks/docgen/chaotic_cells.py table [--out JSON]                    # docs/results.md's tables

On a machine without AVX-512 both arithmetics are the published one and every cell agrees.
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLE = os.path.join(HERE, "..", "results", "grids", "posterior_accuracy_meanfield.zip")
RESULTS = os.path.join(HERE, "..", "results", "chaotic_cells.json")
ARITHMETICS = {"published": {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL", "OPENBLAS_CORETYPE": "Haswell"},
               "native": {}}
METHODS = ("snis", "msc_rb")
#: the cell the published table's SNIS and MSC-RB numbers come from (pima, mean-field, averaged)
CELL = ["experiment@_global_=logistic_pima_all_rows", "family=meanfield_gaussian", "optimizer.average_from=0.5"]
#: every row of the mean-field tables: each data set's experiment with each family
ROWS = ["experiment@_global_=logistic_pima_all_rows,logistic_heart_all_rows,logistic_german_all_rows,radon",
        "family=meanfield_gaussian,meanfield_student_t"]
#: seed 0 of every averaged cell of the mean-field tables: an averaged run and its last-iterate twin share λ_t
#: (the average does not feed back into the chains), so the averaged row says which cells are chaotic in both
SCREEN = [*ROWS, "method=pmcsa,jsa,msc,msc_rb,snis,elbo_n1", "optimizer.average_from=0.5", "seed=0"]
METRICS = ("ref_mean_error_max", "excess_inclusive_kl", "ref_log_sd_ratio_max")
ROW_METRICS = ("ref_mean_error_max", "excess_inclusive_kl")
CHUNK = 5
#: a cell whose seed-0 value differs from the bundle's by more than this (relative) is chaotic; the
#: deterministic ones agree to 1e-10 or better (docs/results.md, at its top: pinned to the arithmetic)
CHAOTIC = 1e-6


def sweep(store: str, arithmetic: str, overrides: list[str], db: str | None = None) -> None:
    """One ``mcsa-bench run -m experiment=posterior_accuracy`` in an arithmetic, into ``store``/<db>.db
    (default: the arithmetic's name)."""
    command = ["mcsa-bench", "run", "-m", "experiment=posterior_accuracy", "resume=True",
               f"tracking.uri=sqlite:///{os.path.abspath(store)}/{db or arithmetic}.db", *overrides]
    subprocess.run(command, env={**os.environ, **ARITHMETICS[arithmetic]}, check=True)


def run_seeds(store: str, seeds: int) -> None:
    """SNIS and MSC-RB on the cell, seeds 0..seeds-1, the two arithmetics interleaved chunk by chunk (so
    a change of the machine's load falls on both)."""
    for start in range(0, seeds, CHUNK):
        chunk = ",".join(str(s) for s in range(start, min(start + CHUNK, seeds)))
        for arithmetic in ARITHMETICS:
            print(f"== {arithmetic} seeds {chunk} load {os.getloadavg()[0]:.1f}", flush=True)
            sweep(store, arithmetic, [*CELL, f"method={','.join(METHODS)}", f"seed={chunk}"])


def run_rows(store: str, seeds: int) -> None:
    """SNIS and MSC-RB on every row of the mean-field tables, averaged and last-iterate, seeds 0..seeds-1, in
    each arithmetic in turn. Values do not depend on the schedule, so the jobs run on every core (joblib)."""
    for arithmetic in ARITHMETICS:
        print(f"== {arithmetic} load {os.getloadavg()[0]:.1f}", flush=True)
        sweep(store, arithmetic, [*ROWS, "optimizer.average_from=0.5,null", f"method={','.join(METHODS)}",
                                  f"seed=range({seeds})", "hydra/launcher=joblib"], db=f"rows-{arithmetic}")


def summarize_rows(store: str) -> dict:
    """Per SNIS or MSC-RB cell of the mean-field tables: its values in each arithmetic, whether the
    published one gave the bundle's seeds 0-4 bit for bit, and over seeds × arithmetics the pooled mean [BCa]
    and the range a 5-seed mean falls in."""
    from mcsa_bench.report.stats import mean_interval

    runs = {a: finished_runs(os.path.join(store, f"rows-{a}.db")) for a in ARITHMETICS}
    bundle = bundle_runs()
    cells = {}
    for key in sorted({key[:4] for key in runs["native"]}):
        seeds = sorted(s for s in range(1000) if all((*key, s) in runs[a] for a in ARITHMETICS))
        entry = {"seeds": seeds, "published_equals_bundle": all(
            runs["published"][(*key, s)][m] == bundle[(*key, s)][m] for s in range(5) for m in ROW_METRICS)}
        for metric in ROW_METRICS:
            values = {a: [runs[a][(*key, s)][metric] for s in seeds] for a in ARITHMETICS}
            pooled = [v for a in ARITHMETICS for v in values[a]]
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


def bundle_runs() -> dict[tuple, dict[str, float]]:
    """The same, of the committed bundle."""
    archive = zipfile.ZipFile(BUNDLE)
    params, latest = collections.defaultdict(dict), collections.defaultdict(dict)
    for row in csv.DictReader(io.TextIOWrapper(archive.open("params.csv"))):
        params[row["run_id"]][row["key"]] = row["value"]
    for row in csv.DictReader(io.TextIOWrapper(archive.open("latest_metrics.csv"))):
        latest[row["run_id"]][row["key"]] = float(row["value"])
    return {_cell_key(p): latest[run] for run, p in params.items() if "estimator.name" in p}


def _cell_key(p: dict[str, str]) -> tuple:
    return (p["estimator.name"], p["model.dataset"], p["family.name"], p.get("optimizer.average_from", "None"),
            int(p["seed"]))


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


def summarize_screen(store: str) -> dict:
    """Every screened cell's seed-0 largest mean error in the native arithmetic against the bundle's, and which
    differ."""
    native, bundle = finished_runs(os.path.join(store, "screen.db")), bundle_runs()
    cells = {}
    for key, metrics in sorted(native.items()):
        if key not in bundle or key[3] != "0.5":
            continue
        here, there = metrics["ref_mean_error_max"], bundle[key]["ref_mean_error_max"]
        relative = abs(here - there) / abs(there)
        cells[" ".join(map(str, key[:4]))] = {"native": here, "bundle": there, "relative_difference": relative,
                                              "chaotic": relative > CHAOTIC}
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
        (_, cfg), = compose(["experiment=posterior_accuracy", *CELL, f"method={method}", f"seed={seed}"],
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


def table(result: dict) -> str:
    """The Markdown tables docs/results.md shows: per method and metric, each arithmetic's mean [95 % BCa] over
    seeds 0-4 and over all its seeds, the pooled mean [BCa] and the range a 5-seed run falls in; then
    :func:`screen_table` and :func:`rows_table`."""
    lines = ["| method, metric | published arithmetic, seeds 0–4 (the bundle) | published, all seeds | "
             "AVX-512, seeds 0–4 | AVX-512, all seeds | both arithmetics | a 5-seed mean falls in (95 %) |",
             "|---|---|---|---|---|---|---|"]
    from mcsa_bench.report.stats import mean_interval

    for key, entry in result["seeds"].items():
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
    if "screen" in result:
        lines += ["", screen_table(result["screen"])]
    if "rows" in result:
        lines += ["", rows_table(result["rows"])]
    return "\n".join(lines)


def screen_table(screen: dict) -> str:
    """Per method, how many of the mean-field tables' averaged cells move with the arithmetic (seed 0)."""
    by_method = collections.defaultdict(list)
    for cell, entry in screen.items():
        by_method[cell.split()[0]].append(entry)
    lines = ["| method | averaged cells whose seed 0 moves with the arithmetic | largest relative difference "
             "of the others |", "|---|---|---|"]
    for method, entries in by_method.items():
        others = [e["relative_difference"] for e in entries if not e["chaotic"]]
        lines.append(f"| {LABELS[method]} | {sum(e['chaotic'] for e in entries)} of {len(entries)} | "
                     f"{f'{max(others):.0e}' if others else '–'} |")
    return "\n".join(lines)


def rows_table(rows: dict) -> str:
    """Per SNIS or MSC-RB cell of the mean-field tables and each of ROW_METRICS: the mean of its seeds
    in the published arithmetic and in AVX-512's, the pooled mean [BCa] and the range a 5-seed mean falls in."""
    header = " | ".join(f"{LABELS[m]}: published | AVX-512 | both [BCa] | a 5-seed mean falls in" for m in ROW_METRICS)
    lines = [f"| method, data set, family, averaged | {header} |", "|---" * (1 + 4 * len(ROW_METRICS)) + "|"]
    for cell, entry in rows.items():
        method, dataset, family, average_from = cell.split()
        cells = []
        for metric in ROW_METRICS:
            mean, low, high = entry[metric]["pooled_mean_bca"]
            lower, upper = entry[metric]["five_seed_range"]
            cells += [_number(float(np.mean(entry[metric]["published"])), metric),
                      _number(float(np.mean(entry[metric]["native"])), metric),
                      f"{_number(mean, metric)} [{_number(low, metric)}, {_number(high, metric)}]",
                      f"[{_number(lower, metric)}, {_number(upper, metric)}]"]
        averaged = "yes" if average_from == "0.5" else "no"
        lines.append(f"| {LABELS[method]}, {dataset}, {family}, {averaged} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["run", "screen", "parting", "summarize", "rows", "summarize-rows", "table",
                                         "_trace"])
    parser.add_argument("--stores", default="/tmp/chaotic")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--child", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.makedirs(args.stores, exist_ok=True)
    if args.what == "run":
        run_seeds(args.stores, args.seeds)
    elif args.what == "screen":
        sweep(args.stores, "native", SCREEN, db="screen")
    elif args.what == "parting":
        os.makedirs(os.path.join(args.stores, "traces"), exist_ok=True)
        for method in METHODS:
            for arithmetic in ARITHMETICS:
                subprocess.run([sys.executable, __file__, "_trace", "--stores", args.stores, "--child", arithmetic,
                                method], env={**os.environ, **ARITHMETICS[arithmetic]}, check=True)
    elif args.what == "rows":
        run_rows(args.stores, args.seeds)
    elif args.what == "summarize-rows":
        with open(args.out) as handle:
            result = json.load(handle)
        result["rows"], result["rows_load"] = summarize_rows(args.stores), os.getloadavg()[0]
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
        print(rows_table(result["rows"]))
    elif args.what == "table":
        print(table(json.load(open(args.out))))
    elif args.what == "_trace":
        arithmetic, method = args.child
        trace(arithmetic, method, list(range(5)), os.path.join(args.stores, "traces"))
    else:
        result = {"seeds": summarize_seeds(args.stores), "load": os.getloadavg()[0]}
        screen = os.path.join(args.stores, "screen.db")
        if os.path.exists(screen):
            result["screen"] = summarize_screen(args.stores)
        if os.path.isdir(os.path.join(args.stores, "traces")):
            result["parting"] = parting(args.stores)
        with open(args.out, "w") as handle:
            json.dump(result, handle, indent=1)
        print(json.dumps({k: {a: result["seeds"][k][a]["mean_bca"] for a in (*ARITHMETICS, "pooled")}
                          for k in result["seeds"]}, indent=1))


if __name__ == "__main__":
    main()
