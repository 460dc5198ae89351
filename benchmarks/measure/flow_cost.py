"""µs per iteration of pMCSA (N = 10 IMH chains, Adam 0.01) with each coupling flow (``family=flow``,
mcsa_bench/autodiff/flow.py) on the CPU, on both backends, beside the full-rank Gaussian (issue 51 §6):

- numpy: mcsa_bench.engine.run's iterations (one replicate; R replicates on numpy are R such runs);
- JAX at R replicates: the compiled cell's ``advance`` program alone (compiled and warmed up first),
  per replicate-iteration.

All blocks interleaved in one process (harness.py), medians of CPU time (all threads) over ``--rounds``
rounds, with the load average; ratios are paired medians against the full-rank Gaussian on numpy. The issue's
aim: at most 0.5 ms per replicate-iteration at R = 100 for the spline flow on many-well (32-D).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/measure/flow_cost.py [--rounds 5]
        [--model many_well] [--replicates 1,64] [--layers 4 --width 32]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
from harness import Sample, describe, interleave, load_average, machine, paired_ratio, save
from overhead import engine_block

from mcsa_bench import get_registry
from mcsa_bench.accel.engine import CellSettings, compile_cell
from mcsa_bench.assembly import assemble


def build(model: str, family):
    parts = assemble(get_registry(), model=(model, {}), family=family, estimator="pmcsa", kernel="imh",
                     n_samples=10, optimizer=("adam", {"lr": 0.01}))
    parts.model.evaluate = lambda q, rng: {}  # evaluation is not part of an iteration
    return parts


def jax_block(parts, replicates: int, iterations: int):
    """The compiled advance program: ``iterations`` iterations of R replicates, per replicate-iteration."""
    compiled = compile_cell(*parts.jax_twins(iterations), CellSettings(n_iters=iterations), replicates,
                            with_evaluate=False)
    seeds = jnp.arange(replicates, dtype=jnp.int64)
    jax.block_until_ready(compiled.advance(compiled.start(seeds), seeds, jnp.int32(0), jnp.int32(2)))  # warm

    def block() -> Sample:
        state = compiled.start(seeds)
        cpu, wall = time.process_time(), time.perf_counter()
        jax.block_until_ready(compiled.advance(state, seeds, jnp.int32(0), jnp.int32(iterations)))
        return Sample(time.process_time() - cpu, time.perf_counter() - wall, iterations * replicates)
    return block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="many_well")
    parser.add_argument("--replicates", default="1,64")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--numpy-iterations", type=int, default=40)
    parser.add_argument("--jax-iterations", type=int, default=40, help="per block, at R = 1 (R = 64: /8)")
    args = parser.parse_args()
    info, load_start = machine(), load_average()
    families = {"fullrank_gaussian": ("fullrank_gaussian", {})}
    families |= {coupling: ("flow", {"coupling": coupling, "layers": args.layers, "width": args.width})
                 for coupling in ("affine", "spline")}
    blocks = {}
    for name, family in families.items():
        parts = build(args.model, family)
        blocks[f"{name} numpy"] = engine_block(parts, args.numpy_iterations)
        for replicates in map(int, args.replicates.split(",")):
            iterations = max(4, args.jax_iterations // max(1, replicates // 8))
            blocks[f"{name} jax R={replicates}"] = jax_block(parts, replicates, iterations)
    series = interleave(blocks, args.rounds)
    baseline = series["fullrank_gaussian numpy"]
    print(f"pMCSA (IMH, N = 10) on {args.model}, flows of {args.layers} layers, width {args.width}: "
          "CPU µs per replicate-iteration (median over interleaved rounds), and the paired ratio to the "
          "full-rank Gaussian on numpy")
    rows = []
    for name, s in series.items():
        row = {"block": name, "cpu_us": 1e6 * s.median_cpu, "wall_us": 1e6 * s.median_wall,
               "ratio_cpu": paired_ratio(s, baseline), "series": s.as_dict()}
        rows.append(row)
        print(f"{name:<28} {row['cpu_us']:>10.1f} µs  (wall {row['wall_us']:>10.1f})  x{row['ratio_cpu']:.2f}")
    load_end = load_average()
    print(describe(info, load_start, load_end))
    path = save("flow_cost", {"machine": info, "jax": jax.__version__, "load_average_start": load_start,
                              "load_average_end": load_end, "args": vars(args), "results": rows})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
