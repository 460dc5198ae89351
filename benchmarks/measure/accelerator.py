"""µs per replicate-iteration (one iteration of one independent run) of pMCSA (N = 10 IMH chains,
mean-field Gaussian, Adam 0.01, float64; issue 37's table) on the papers' models:

- numpy, one core: mcsa_bench.engine.run, its own ``wall_time`` (evaluation excluded);
- numpy, every core: one process per core running the same at once (throughput: the slowest
  process's time over all their iterations);
- JAX at R replicates (accelerated backend, mcsa_bench.accel): the compiled cell's ``advance``
  program alone, after compilation and a warm-up call; on the CPU with ``--xla-threads`` XLA
  threads (default 1, the numpy single-core comparison), and on a GPU when JAX finds one.

Each measurement runs for about ``--budget`` seconds (at least 3 iterations, at most ``--iters``).
Models without a JAX twin get "no twin" in the JAX columns. Writes JSON and a markdown table
(benchmarks/results/accelerator_<device>.{json,md}, or ``--out``).

Imports nothing of Hydra or MLflow (the accelerator machines have numpy, scipy, pluggy and JAX).

    python benchmarks/measure/accelerator.py --quick          # CPU smoke run, under a minute
    python benchmarks/measure/accelerator.py                  # every model, R in 1, 64, 1024 (+16384 logistic)
    python benchmarks/measure/accelerator.py --models logistic_pima --replicates 64 --budget 10
    python benchmarks/measure/accelerator.py --compare 64 --models logistic_pima   # CPU: interleaved, CPU time

``--compare R`` measures the CPU claim on a shared machine the way the other benchmarks do
(benchmarks/measure/harness.py): numpy engine iterations and the JAX advance program at R replicates in
alternating blocks of about ``--budget`` seconds, medians of CPU time (``time.process_time``, all
threads) per replicate-iteration over ``--rounds`` rounds, and the paired ratio.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: name -> (registry model name, its parameters): the papers' settings (conf/experiment/<name>.yaml),
#: with the split seed fixed (it does not change the cost)
MODELS = {
    "logistic_pima": ("logistic", {"dataset": "pima", "standardize": False}),
    "gp_classification_sonar": ("gp_classification", {"dataset": "sonar", "standardize": False}),
    "gp_classification_breast": ("gp_classification", {"dataset": "breast"}),
    "radon": ("radon", {}),
    "bnn_boston": ("bnn", {"dataset": "boston"}),
}
REPLICATES = (1, 64, 1024)
EXTRA_REPLICATES = {"logistic_pima": (16384,)}
N_SAMPLES = 10
BANNED = ("hydra", "mlflow", "tqdm", "threadpoolctl", "matplotlib")


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: logistic_pima, R = 1 and 64, 1 s each")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    parser.add_argument("--replicates", default=None,
                        help="comma-separated R values (default 1,64,1024, and 16384 for logistic_pima)")
    parser.add_argument("--iters", type=int, default=5000, help="most iterations per measurement")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per measurement (timed part)")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="processes for the numpy all-core figure")
    parser.add_argument("--xla-threads", type=int, default=1, help="XLA CPU threads (the GPU is not affected)")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: numpy, numpy_all, jax")
    parser.add_argument("--out", default=None, help="path stem of the JSON and markdown results")
    parser.add_argument("--compare", type=int, default=None,
                        help="instead: numpy on one core vs JAX at this R, interleaved, CPU time")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of --compare")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models.split(",")) - set(MODELS))
    if unknown:
        parser.exit(2, f"accelerator.py: error: unknown model {', '.join(unknown)}; allowed: {', '.join(MODELS)}\n")
    if args.quick:
        args.models, args.replicates, args.budget, args.cores = "logistic_pima", "1,64", 1.0, min(args.cores, 2)
    return args


def build(name: str):
    from mcsa_bench import get_registry
    from mcsa_bench.assembly import assemble

    model, params = MODELS[name]
    return assemble(get_registry(), model=(model, params), estimator="pmcsa", kernel="imh", n_samples=N_SAMPLES,
                    optimizer=("adam", {"lr": 0.01}))


def iterations_for(seconds_per_iteration: float, budget: float, most: int) -> int:
    return int(max(3, min(most, budget / max(seconds_per_iteration, 1e-9))))


# --- numpy ---------------------------------------------------------------------------------------

def numpy_seconds_per_iteration(name: str, budget: float, most: int, seed: int = 0) -> tuple[float, int]:
    """(seconds per iteration of one run, iterations timed): engine.run's wall_time, evaluation excluded."""
    from mcsa_bench.engine import run

    parts = build(name)
    probe = run(*parts.run_args(), n_iters=3, seed=seed, eval_every=3).history[-1]["wall_time"] / 3
    iters = iterations_for(probe, budget, most)
    result = run(*parts.run_args(), n_iters=iters, seed=seed, eval_every=iters)
    return result.history[-1]["wall_time"] / iters, iters


def _numpy_worker(name, budget, most, seed, barrier, results):
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "1"
    build(name)  # data and imports before the start line
    barrier.wait()
    results.put(numpy_seconds_per_iteration(name, budget, most, seed))


def numpy_all_cores(name: str, budget: float, most: int, cores: int) -> float:
    """Seconds per replicate-iteration of ``cores`` processes at once: each runs for about the
    budget; throughput = Σ iterations / the slowest process's time."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(cores), context.Queue()
    workers = [context.Process(target=_numpy_worker, args=(name, budget, most, seed, barrier, results))
               for seed in range(cores)]
    for worker in workers:
        worker.start()
    measured = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    return max(seconds * iters for seconds, iters in measured) / sum(iters for _, iters in measured)


# --- JAX -----------------------------------------------------------------------------------------

def jax_seconds_per_replicate_iteration(name: str, replicates: int, budget: float, most: int) -> dict:
    """The compiled cell's advance program alone, after a warm-up call."""
    import jax
    import jax.numpy as jnp

    from mcsa_bench.accel.engine import CellSettings, compile_cell

    parts = build(name)
    try:
        components = parts.jax_twins(most)
    except Exception as error:  # noqa: BLE001 - a model without a twin yet is a row, not a crash
        return {"error": str(error).splitlines()[0]}
    compiled = compile_cell(*components, CellSettings(n_iters=most, eval_every=most), replicates, with_evaluate=False)
    seeds = jnp.arange(replicates, dtype=jnp.int64)
    state = compiled.start(seeds)
    clock = time.perf_counter()
    state = jax.block_until_ready(compiled.advance(state, seeds, jnp.int32(0), jnp.int32(2)))
    probe = (time.perf_counter() - clock) / 2
    iters = iterations_for(probe, budget, most)
    clock = time.perf_counter()
    state = jax.block_until_ready(compiled.advance(state, seeds, jnp.int32(2), jnp.int32(2 + iters)))
    seconds = time.perf_counter() - clock
    failed = int((state.failed_at >= 0).sum())
    return {"us": 1e6 * seconds / (iters * replicates), "iters": iters, "compile_s": compiled.seconds,
            "failed": failed}


def numpy_block(name: str, iterations: int):
    """engine.run's iterations, timed from the snapshot at iteration 0 to the one at T (harness.Sample)."""
    from harness import Sample

    from mcsa_bench.engine import run

    parts = build(name)

    def block():
        marks = {}
        run(*parts.run_args(), n_iters=iterations, seed=0, eval_every=iterations,
            callbacks=[lambda s: marks.__setitem__(s.iteration, (time.process_time(), time.perf_counter()))])
        (cpu0, wall0), (cpu1, wall1) = marks[0], marks[iterations]
        return Sample(cpu1 - cpu0, wall1 - wall0, iterations)
    return block


def jax_block(name: str, replicates: int, iterations: int):
    """The compiled advance program for ``iterations`` iterations of R replicates, per replicate-iteration."""
    import jax
    import jax.numpy as jnp
    from harness import Sample

    from mcsa_bench.accel.engine import CellSettings, compile_cell

    compiled = compile_cell(*build(name).jax_twins(iterations), CellSettings(n_iters=iterations), replicates,
                            with_evaluate=False)
    seeds = jnp.arange(replicates, dtype=jnp.int64)

    def block():
        state = compiled.start(seeds)
        cpu, wall = time.process_time(), time.perf_counter()
        jax.block_until_ready(compiled.advance(state, seeds, jnp.int32(0), jnp.int32(iterations)))
        return Sample(time.process_time() - cpu, time.perf_counter() - wall, iterations * replicates)
    return block


def compare(args) -> dict:
    """numpy on one core vs JAX at R, interleaved (harness.interleave), per model."""
    from harness import interleave, load_average, paired_ratio

    rows = []
    for name in args.models.split(","):
        numpy_us, _ = numpy_seconds_per_iteration(name, 0.5, args.iters)
        numpy_iters = iterations_for(numpy_us, args.budget, args.iters)
        jax_iters = iterations_for(numpy_us * args.compare, args.budget, args.iters)  # the same work, roughly
        load = load_average()
        series = interleave({"numpy": numpy_block(name, numpy_iters),
                             "jax": jax_block(name, args.compare, jax_iters)}, args.rounds)
        row = {"model": name, "replicates": args.compare, "load_average": [load, load_average()],
               "numpy_cpu_us": 1e6 * series["numpy"].median_cpu, "jax_cpu_us": 1e6 * series["jax"].median_cpu,
               "numpy_wall_us": 1e6 * series["numpy"].median_wall, "jax_wall_us": 1e6 * series["jax"].median_wall,
               "paired_cpu_ratio_jax_over_numpy": paired_ratio(series["jax"], series["numpy"]),
               "rounds": {k: v.as_dict() for k, v in series.items()}}
        print(f"{name}: CPU µs per replicate-iteration, numpy one core {row['numpy_cpu_us']:.1f}, "
              f"JAX R = {args.compare} {row['jax_cpu_us']:.1f} (paired ratio JAX/numpy "
              f"{row['paired_cpu_ratio_jax_over_numpy']:.2f}; wall {row['numpy_wall_us']:.1f} vs "
              f"{row['jax_wall_us']:.1f}; load {row['load_average'][0][0]} -> {row['load_average'][1][0]})", flush=True)
        rows.append(row)
    return {"compare": rows, "device": device_name(), "xla_threads": args.xla_threads}


def device_name() -> str:
    import jax

    device = jax.devices()[0]
    return f"{device.platform}: {getattr(device, 'device_kind', '')}".strip()


# --- the table -------------------------------------------------------------------------------------

def measure(args) -> dict:
    skip = set(filter(None, args.skip.split(",")))
    rows = []
    for name in args.models.split(","):
        replicate_counts = ([int(r) for r in args.replicates.split(",")] if args.replicates
                            else [*REPLICATES, *EXTRA_REPLICATES.get(name, ())])
        row = {"model": name, "dim": build(name).model.dim, "jax": {}}
        if "numpy" not in skip:
            row["numpy_one_core_us"] = 1e6 * numpy_seconds_per_iteration(name, args.budget, args.iters)[0]
        if "numpy_all" not in skip:
            row["numpy_all_cores_us"] = 1e6 * numpy_all_cores(name, args.budget, args.iters, args.cores)
        if "jax" not in skip:
            for r in replicate_counts:
                row["jax"][str(r)] = jax_seconds_per_replicate_iteration(name, r, args.budget, args.iters)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return {"rows": rows, "device": device_name() if "jax" not in skip else None, "cores": args.cores,
            "xla_threads": args.xla_threads,
            "machine": f"{platform.node()} ({platform.processor() or platform.machine()})",
            "budget_s": args.budget}


def markdown(results: dict) -> str:
    counts = sorted({int(r) for row in results["rows"] for r in row["jax"]})
    header = ["model", "D", "numpy 1 core", f"numpy {results['cores']} processes",
              *[f"JAX R = {r:,}" for r in counts]]
    lines = [f"pMCSA (N = {N_SAMPLES} IMH, mean-field, Adam 0.01, float64), µs per replicate-iteration; "
             f"JAX on {results['device']} ({results['xla_threads']} XLA CPU threads), {results['machine']}", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in results["rows"]:
        cells = [row["model"], str(row["dim"]), _us(row.get("numpy_one_core_us")), _us(row.get("numpy_all_cores_us"))]
        for r in counts:
            entry = row["jax"].get(str(r))
            cells.append("" if entry is None else "no twin" if "error" in entry else _us(entry["us"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _us(value) -> str:
    if value is None:
        return ""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def main(argv=None) -> int:
    args = parse_arguments(argv)
    os.environ.setdefault("XLA_FLAGS", f"--xla_cpu_multi_thread_eigen={'true' if args.xla_threads > 1 else 'false'} "
                                       f"intra_op_parallelism_threads={args.xla_threads}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if args.compare:
        sys.path.insert(0, str(Path(__file__).resolve().parent))  # harness.py beside this script
        results = compare(args)
        stem = Path(args.out) if args.out else RESULTS / f"accelerator_compare_{results['device'].split(':')[0]}"
        stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
        return 0
    results = measure(args)
    loaded = sorted({m.split(".")[0] for m in sys.modules} & set(BANNED))
    if loaded:
        print(f"warning: imported {', '.join(loaded)}, which the accelerator machines lack", file=sys.stderr)
    stem = Path(args.out) if args.out else RESULTS / f"accelerator_{(results['device'] or 'cpu').split(':')[0]}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    stem.with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
