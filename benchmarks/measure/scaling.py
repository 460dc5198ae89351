"""Time per pMCSA iteration as the batch grows: vs N for logistic/pima and GP/sonar, vs D for the
Gaussian target (N = 10), engine iterations against the bare work (overhead.py), interleaved.

If the framework had a Python cost per chain, the engine's time would stay above the bare work's
by a constant factor as N grows; batched, its extra cost is fixed per iteration, so the ratio
engine / bare falls towards 1 as the model's batched work grows. Saves the measurements to
benchmarks/results/scaling.json and plots docs/figures/scaling.png from them.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/measure/scaling.py [--rounds 5] [--plot-only]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness import RESULTS, describe, interleave, load_average, machine, paired_ratio, save
from overhead import MODELS, bare_block, block_iterations, engine_block

from mcsa_bench import get_registry
from mcsa_bench.assembly import assemble

N_GRID = (4, 8, 16, 32, 64, 128, 256)
D_GRID = (10, 30, 100, 300, 1000)
FIGURE = Path(__file__).resolve().parents[2] / "docs" / "figures" / "scaling.png"


def measure_point(model_spec: tuple, n_samples: int, rounds: int, seconds: float) -> dict:
    parts = assemble(get_registry(), model=model_spec, estimator="pmcsa", n_samples=n_samples)
    parts.model.evaluate = lambda q, rng: {}
    iterations = block_iterations(parts, seconds)
    series = interleave({"engine": engine_block(parts, iterations),
                         "bare": bare_block(parts, "pmcsa", n_samples, iterations)}, rounds)
    return {"n_samples": n_samples, "dim": parts.model.dim, "iterations_per_block": iterations,
            "paired_ratio_cpu": paired_ratio(series["engine"], series["bare"]),
            **{name: s.as_dict() for name, s in series.items()}}


def measure(rounds: int, seconds: float) -> dict:
    curves = {}
    for label in ("logistic", "gp"):
        curves[label] = [measure_point(MODELS[label], n, rounds, seconds) for n in N_GRID]
        print(label, "done", flush=True)
    curves["gaussian"] = [measure_point(("gaussian", {"dim": d, "nu": 500.0}), 10, rounds, seconds) for d in D_GRID]
    return curves


def x_value(label: str, point: dict) -> int:
    return point["dim"] if label == "gaussian" else point["n_samples"]


def print_tables(curves: dict) -> None:
    for label, points in curves.items():
        axis = "D" if label == "gaussian" else "N"
        print(f"\n{label} (pmcsa): {axis}; µs per iteration (CPU medians): engine, bare work, engine - bare; "
              f"engine/bare (paired); engine µs per chain")
        for p in points:
            engine, bare = p["engine"]["median_cpu_s"] * 1e6, p["bare"]["median_cpu_s"] * 1e6
            print(f"{x_value(label, p):>6}{engine:12.1f}{bare:12.1f}{engine - bare:10.1f}{p['paired_ratio_cpu']:8.2f}"
                  f"{engine / p['n_samples']:10.1f}")


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), sharex="col", gridspec_kw={"height_ratios": [2, 1]})
    titles = {"logistic": "logistic / pima, pMCSA", "gp": "GP classification / sonar, pMCSA",
              "gaussian": "Gaussian target, pMCSA, N = 10"}
    for column, (label, points) in enumerate(curves.items()):
        top, bottom = axes[0, column], axes[1, column]
        xs = [x_value(label, p) for p in points]
        for kind, style, name in (("engine", "o-", "engine iteration"), ("bare", "s--", "bare work (Table 2)")):
            top.plot(xs, [p[kind]["median_cpu_s"] * 1e3 for p in points], style, label=name)
        top.set_yscale("log")
        top.set_ylabel("ms per iteration (CPU)")
        top.set_title(titles[label], fontsize=10)
        top.legend(fontsize=8)
        bottom.plot(xs, [p["paired_ratio_cpu"] for p in points], "o-", color="black")
        bottom.axhline(1.0, color="grey", lw=0.8)
        bottom.set_ylabel("engine / bare")
        bottom.set_xlabel("D" if label == "gaussian" else "N (chains)")
        bottom.set_xscale("log", base=10 if label == "gaussian" else 2)
        for ax in (top, bottom):
            ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"# plotted {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--block-seconds", type=float, default=0.2)
    parser.add_argument("--plot-only", action="store_true", help="re-plot from benchmarks/results/scaling.json")
    args = parser.parse_args()
    if args.plot_only:
        payload = json.loads((RESULTS / "scaling.json").read_text())
    else:
        info, load_start = machine(), load_average()
        curves = measure(args.rounds, args.block_seconds)
        load_end = load_average()
        payload = {"machine": info, "load_average_start": load_start, "load_average_end": load_end,
                   "rounds": args.rounds, "curves": curves}
        print(describe(info, load_start, load_end))
        print(f"# saved {save('scaling', payload)}")
    print_tables(payload["curves"])
    plot(payload["curves"], FIGURE)


if __name__ == "__main__":
    main()
