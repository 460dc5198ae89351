"""Framework overhead per MCSA iteration, as a ratio to the bare work each scheme must do.

For each model and scheme at budget N, in one process, interleaved (harness.py): (a) engine
iterations through ``mcsa_bench.run`` (kernel transition, score, optimizer step; set-up and
evaluation excluded), (b) the bare work of Table 2 of the NeurIPS paper (docs/methods.md §3): the
scheme's batched log-density and family calls on inputs of the same shapes, and (c) if JAX is
installed, the same pMCSA loop jitted in JAX (jax_reference.py), and (d) for pMCSA with IMH, the
iteration written by hand as one plain numpy function over the same model, family and optimizer
(no engine, scheme or kernel objects, no checks): (b) < (d) is the algorithm's own per-operation
cost, (a)/(d) what the framework adds to it. Prints medians of CPU and wall time per iteration
and the ratios (a)/(b), (a)/(c), (a)/(d); saves everything to benchmarks/results/.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/measure/overhead.py [--models gaussian,logistic,gp,bnn]
        [--schemes msc,msc_rb,jsa,pmcsa] [--kernel cis] [--n-samples 10] [--rounds 21] [--block-seconds 0.1] [--no-jax]

The bare work prepares the family's per-λ quantities once per iteration (σ(ψ), log-normalizer:
``VariationalFamily.prepare``), as the engine does, and passes them to the family's calls.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from harness import Sample, describe, interleave, load_average, machine, paired_ratio, save, timed

from mcsa_bench import get_registry, run
from mcsa_bench.assembly import Assembly, assemble
from mcsa_bench.builtin.kernels import acceptance_probability

#: the papers' model/data pairs the goals are stated for (docs/performance.md)
MODELS = {
    "gaussian": ("gaussian", {"dim": 100, "nu": 500.0}),
    "logistic": ("logistic", {"dataset": "pima"}),
    "gp": ("gp_classification", {"dataset": "sonar", "standardize": False}),
    "bnn": ("bnn", {"dataset": "boston"}),
}
#: per iteration, rows passed to each call (Table 2): (log p rows, sampled rows, extra log q rows, score rows)
BARE_WORK = {
    "msc": lambda n: (n - 1, n - 1, 1, 1),
    "msc_rb": lambda n: (n - 1, n - 1, 1, n),
    "jsa": lambda n: (n, n, 1, n),
    "pmcsa": lambda n: (n, n, n, n),
}
#: goals for pMCSA at N = 10, engine / bare work (CPU time)
GOALS = {"gaussian": 1.3, "logistic": 1.15, "gp": 1.05, "bnn": 1.05}


def build(model: str, scheme: str, n_samples: int, kernel: str | None = None) -> Assembly:
    """The components; ``kernel`` None: the scheme's default kernel."""
    parts = assemble(get_registry(), model=MODELS[model], estimator=scheme, n_samples=n_samples, kernel=kernel)
    parts.model.evaluate = lambda q, rng: {}  # evaluation is not part of an iteration
    return parts


def engine_block(parts: Assembly, iterations: int):
    """Iterations of ``mcsa_bench.run``, timed from the snapshot at iteration 0 to the one at T."""
    def block() -> Sample:
        marks = {}

        def mark(snapshot) -> None:
            marks[snapshot.iteration] = (time.process_time(), time.perf_counter())

        run(*parts.run_args(), n_iters=iterations, seed=0, eval_every=iterations, callbacks=[mark])
        (cpu0, wall0), (cpu1, wall1) = marks[0], marks[iterations]
        return Sample(cpu1 - cpu0, wall1 - wall0, iterations)
    return block


def bare_block(parts: Assembly, scheme: str, n_samples: int, iterations: int):
    """Only the scheme's density and family calls, on inputs of the same shapes (λ prepared once per iteration)."""
    model, family = parts.model, parts.family
    params = family.init_params()
    rng = np.random.default_rng(0)
    log_p_rows, sampled_rows, log_q_rows, score_rows = BARE_WORK[scheme](n_samples)
    z_p, z_q, z_s = (family.sample(params, rng, rows) for rows in (log_p_rows, log_q_rows, score_rows))

    def step() -> None:
        prepared = family.prepare(params)
        model.log_joint(z_p)
        family.sample_with_log_prob(prepared, rng, sampled_rows)
        family.log_prob(prepared, z_q)
        family.score(prepared, z_s)
    return lambda: timed(step, iterations)


def hand_block(parts: Assembly, n_samples: int, iterations: int):
    """pMCSA with IMH written out (Alg. 1 and 3): N fresh proposals, the Metropolis-Hastings choice
    per chain, the mean score, the optimizer's step; the floor for any numpy implementation."""
    model, family, optimizer = parts.model, parts.family, parts.optimizer
    rng = np.random.default_rng(0)
    params = family.init_params()
    prepared = family.prepare(params)
    z, _ = family.sample_with_log_prob(prepared, rng, n_samples)
    state = {"z": z, "log_p": model.log_joint(z), "params": params, "prepared": prepared,
             "opt": optimizer.init(params)}

    def step() -> None:
        prepared, z, log_p = state["prepared"], state["z"], state["log_p"]
        z_new, log_q_new = family.sample_with_log_prob(prepared, rng, n_samples)
        log_p_new = model.log_joint(z_new)
        log_ratio = (log_p_new - log_q_new) - (log_p - family.log_prob(prepared, z))
        accept = rng.random(n_samples) < acceptance_probability(log_ratio)
        z, state["log_p"] = np.where(accept[:, None], z_new, z), np.where(accept, log_p_new, log_p)
        grad = np.add.reduce(family.score(prepared, z), axis=0) / -n_samples
        state["params"], state["opt"] = optimizer.step(state["params"], grad, state["opt"])
        state["z"], state["prepared"] = z, family.prepare(state["params"])
    return lambda: timed(step, iterations)


def block_iterations(parts: Assembly, seconds: float) -> int:
    """Iterations that take about ``seconds`` (from a short calibration run)."""
    probe = engine_block(parts, 5)()
    return max(5, int(seconds / max(probe.wall / 5, 1e-7)))


def jax_block(model: str, n_samples: int, iterations: int):
    """The jitted JAX pMCSA loop, or None when JAX or this model's JAX version is unavailable."""
    try:
        import jax_reference
    except ImportError:
        return None
    loop = jax_reference.pmcsa_loop(*MODELS[model], n_samples=n_samples)
    if loop is None:
        return None

    def block() -> Sample:
        once = timed(lambda: loop(iterations), 1)  # one call runs all iterations
        return Sample(once.cpu, once.wall, iterations)
    return block


def measure(model: str, scheme: str, kernel: str | None, n_samples: int, rounds: int, seconds: float,
            use_jax: bool) -> dict:
    parts = build(model, scheme, n_samples, kernel)
    iterations = block_iterations(parts, seconds)
    blocks = {"engine": engine_block(parts, iterations), "bare": bare_block(parts, scheme, n_samples, iterations)}
    if scheme == "pmcsa" and parts.sources["kernel"].name == "imh":
        blocks["hand"] = hand_block(parts, n_samples, iterations)
    if use_jax and scheme == "pmcsa":
        reference = jax_block(model, n_samples, iterations)
        if reference is not None:
            blocks["jax"] = reference
    series = interleave(blocks, rounds)
    engine = series["engine"]
    result = {"model": model, "spec": MODELS[model], "scheme": scheme, "kernel": parts.sources["kernel"].name,
              "n_samples": n_samples, "dim": parts.model.dim,
              "iterations_per_block": iterations, **{name: s.as_dict() for name, s in series.items()}}
    for name in series.keys() - {"engine"}:
        result[f"ratio_cpu_{name}"] = engine.median_cpu / series[name].median_cpu
        result[f"ratio_wall_{name}"] = engine.median_wall / series[name].median_wall
        result[f"paired_ratio_cpu_{name}"] = paired_ratio(engine, series[name], "cpu")
    return result


HEADER = (f"{'model':<9}{'scheme':<8}{'eng cpu':>9}{'bare cpu':>9}{'ratio':>7}{'paired':>7}{'goal':>6}"
          f"{'eng wall':>10}{'bare wall':>10}{'ratio':>7}{'hand cpu':>9}{'hand/bare':>10}{'eng/hand':>9}"
          f"{'jax cpu':>9}{'eng/jax':>8}{'wall':>6}")


def print_row(r: dict) -> None:
    engine, bare = r["engine"], r["bare"]
    goal = GOALS.get(r["model"]) if r["scheme"] == "pmcsa" else None
    cells = (f"{r['model']:<9}{r['scheme']:<8}{engine['median_cpu_s'] * 1e6:9.1f}{bare['median_cpu_s'] * 1e6:9.1f}"
             f"{r['ratio_cpu_bare']:7.2f}{r['paired_ratio_cpu_bare']:7.2f}{goal if goal else '':>6}"
             f"{engine['median_wall_s'] * 1e6:10.1f}{bare['median_wall_s'] * 1e6:10.1f}{r['ratio_wall_bare']:7.2f}")
    if "hand" in r:
        cells += (f"{r['hand']['median_cpu_s'] * 1e6:9.1f}{r['hand']['median_cpu_s'] / bare['median_cpu_s']:10.2f}"
                  f"{r['ratio_cpu_hand']:9.2f}")
    elif "jax" in r:
        cells += " " * 28
    if "jax" in r:
        cells += f"{r['jax']['median_cpu_s'] * 1e6:9.1f}{r['ratio_cpu_jax']:8.2f}{r['ratio_wall_jax']:6.2f}"
    print(cells, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--schemes", default=",".join(BARE_WORK))
    parser.add_argument("--kernel", default=None, help="the kernel of every scheme (default: each scheme's own)")
    parser.add_argument("--n-samples", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=21, help="interleaved rounds (after one warm-up round)")
    parser.add_argument("--block-seconds", type=float, default=0.1, help="about how long one block runs")
    parser.add_argument("--no-jax", action="store_true", help="skip the JAX reference even if JAX is installed")
    parser.add_argument("--name", default="overhead", help="results file: benchmarks/results/<name>.json")
    args = parser.parse_args()

    info, load_start = machine(), load_average()
    kernels = f"kernel {args.kernel}" if args.kernel else "each scheme's default kernel"
    print(
        f"N={args.n_samples}, {kernels}, {args.rounds} interleaved rounds; µs per iteration (medians); "
        "ratio: engine/bare (of the medians; paired: median of the rounds' own); goal: pMCSA's CPU ratio; "
        "hand: pMCSA+IMH written by hand in numpy (CPU); eng/jax: CPU and wall"
    )
    print(HEADER)
    results = []
    for model in args.models.split(","):
        for scheme in args.schemes.split(","):
            results.append(measure(model, scheme, args.kernel, args.n_samples, args.rounds, args.block_seconds,
                                   not args.no_jax))
            print_row(results[-1])
    load_end = load_average()
    print(describe(info, load_start, load_end))
    path = save(args.name, {"machine": info, "load_average_start": load_start, "load_average_end": load_end,
                            "rounds": args.rounds, "kernel": args.kernel, "results": results})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
