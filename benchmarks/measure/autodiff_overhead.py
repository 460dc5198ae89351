"""What a model written once in JAX costs on the numpy engine, against the same model written by hand.

The hierarchical logistic regression of mcsa_bench/builtin/models/logistic.py (its density; pima, raw features,
all rows) written again in jax.numpy as an ``mcsa_bench.autodiff.AutodiffModel`` (checked here against the
built-in to 1e-10 first), run by ``mcsa_bench.run`` with pMCSA (IMH, Adam 0.01, mean-field Gaussian) at
each budget N: µs per iteration of both, interleaved in one process (harness.py; evaluation excluded), and
their ratio. The same for the Gaussian target (mcsa_bench/builtin/models/gaussian.py) at N = 10 over its
dimension D: where the compiled call's fixed cost stops mattering. With --ppl, also the NumPyro files of
tests/data/ppl (``model=numpyro``: eight schools against the extras' hand-written model, the logistic
regression against the built-in) at N = 10.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/measure/autodiff_overhead.py [--rounds 11]
        [--n-samples 10,30,100,300,1000] [--dims 10,100,1000] [--ppl]
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from harness import describe, interleave, load_average, machine, paired_ratio, save
from overhead import engine_block

from mcsa_bench import get_registry
from mcsa_bench.assembly import assemble
from mcsa_bench.autodiff import AutodiffModel

PIMA = ("logistic", {"dataset": "pima", "standardize": False, "test_fraction": 0.0})
PIMA_DIM = 8 + 1 + 2  # pima's 8 features, the intercept, the two log scales
PPL_FILES = Path(__file__).resolve().parents[2] / "tests" / "data" / "ppl"


class LogisticJax(AutodiffModel):
    """The built-in hierarchical logistic regression's log joint, in jax.numpy, from its data."""

    def __init__(self, built_in):
        super().__init__(built_in.dim)
        self.d = built_in.num_features
        self.x, self.sign = jnp.asarray(built_in.data.x_train), jnp.asarray(2.0 * built_in.data.y_train - 1.0)

    def log_density(self, z):
        beta, alpha, log_scales = z[: self.d], z[self.d], z[self.d + 1:]
        scales = jnp.exp(log_scales)
        t = self.sign * (self.x @ beta + alpha)  # log p(y | η) = log σ(t) = min(t, 0) − log(1 + e^{−|t|})
        log_lik = jnp.sum(jnp.minimum(t, 0.0) - jnp.log1p(jnp.exp(-jnp.abs(t))))
        log_prior = (jnp.sum(jax.scipy.stats.norm.logpdf(beta, 0.0, scales[0]))
                     + jax.scipy.stats.norm.logpdf(alpha, 0.0, scales[1])
                     + jnp.sum(jax.scipy.stats.norm.logpdf(scales) + math.log(2.0)) + jnp.sum(log_scales))
        return log_lik + log_prior


class GaussianJax(AutodiffModel):
    """The Gaussian target's log density N(z; μ, Σ) from its moments, in jax.numpy."""

    def __init__(self, built_in):
        super().__init__(built_in.dim)
        chol = np.linalg.cholesky(built_in.cov)
        self.mean, self.whitening = jnp.asarray(built_in.mean), jnp.asarray(np.linalg.inv(chol))  # u = L⁻¹(z − μ)
        self.log_norm = float(np.sum(np.log(np.diag(chol))) + 0.5 * self.dim * math.log(2.0 * math.pi))

    def log_density(self, z):
        u = self.whitening @ (z - self.mean)
        return -0.5 * u @ u - self.log_norm


def agreement(built_in, written, order) -> float:
    """Largest relative difference of log joint and gradient at 32 points (their check: below 1e-10);
    ``order``: the written model's coordinate of each of the built-in's."""
    z = 0.5 * np.random.default_rng(0).standard_normal((32, built_in.dim))
    (log_p, grad), (own_log_p, own_grad) = built_in.log_joint_and_grad(z), written.log_joint_and_grad(z[:, order])
    return max(float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(a)))) for a, b in
               ((log_p, own_log_p), (grad, own_grad[:, np.argsort(order)])))


def compare(spec, write, n_samples: int, rounds: int, iterations: int, order=None) -> dict:
    """``write(built_in)``: the same model written in JAX (an AutodiffModel or a NumPyro file's model)."""
    parts = assemble(get_registry(), model=spec, estimator="pmcsa", n_samples=n_samples)
    parts.model.evaluate = lambda q, rng: {}  # evaluation is not part of an iteration
    written = write(parts.model)
    written.evaluate = lambda q, rng: {}
    order = np.arange(parts.model.dim) if order is None else order
    error = agreement(parts.model, written, order)
    assert error < 1e-10, f"the JAX model is not the built-in ({error:.3g})"
    series = interleave({"hand": engine_block(parts, iterations),
                         "jax": engine_block(replace(parts, model=written), iterations)}, rounds)
    return {"model": spec[0] if isinstance(write, type) else f"{spec[0]}/numpyro", "dim": parts.model.dim,
            "n_samples": n_samples, "agreement": error,
            "hand_us": 1e6 * series["hand"].median_cpu, "jax_us": 1e6 * series["jax"].median_cpu,
            "ratio_cpu": paired_ratio(series["jax"], series["hand"]),
            "ratio_wall": paired_ratio(series["jax"], series["hand"], "wall"),
            "series": {name: s.as_dict() for name, s in series.items()}}


def numpyro_comparisons(rounds: int, iterations: int) -> list[dict]:
    """The NumPyro files against the hand-written models, pMCSA at N = 10 (NumPyro orders its latents as its
    sites are sampled: the logistic regression's scales come first)."""
    from mcsa_bench.autodiff.ppl import NumPyroModel

    def numpyro_file(name, data):
        return lambda built_in: NumPyroModel(f"{PPL_FILES / name}:model", str(PPL_FILES / data))

    pima_order = np.roll(np.arange(PIMA_DIM), 2)  # (σ_β, σ_α, β, α) against (β, α, log σ_β, log σ_α)
    return [compare(("eight_schools", {"centered": False}), numpyro_file("eight_schools_numpyro.py",
                                                                         "eight_schools.json"), 10, rounds, iterations),
            compare(PIMA, numpyro_file("logistic_numpyro.py", "pima.json"), 10, rounds, iterations, pima_order)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--iterations", type=int, default=200, help="iterations per block")
    parser.add_argument("--n-samples", default="10,30,100,300,1000")
    parser.add_argument("--dims", default="10,100,1000")
    parser.add_argument("--ppl", action="store_true", help="also the NumPyro files against the hand-written models")
    args = parser.parse_args()
    info, load_start = machine(), load_average()
    print("pMCSA (IMH, N chains), µs per iteration (median CPU over interleaved rounds): hand-written numpy model "
          "vs the same model written in JAX; ratio: paired median, CPU and wall")
    print(f"{'model':<10} {'D':>5} {'N':>5} {'hand µs':>9} {'jax µs':>9} {'cpu x':>6} {'wall x':>6}")
    results = [compare(PIMA, LogisticJax, int(n), args.rounds, args.iterations) for n in args.n_samples.split(",")]
    results += [compare(("gaussian", {"dim": int(d), "nu": float(5 * int(d))}), GaussianJax, 10, args.rounds,
                        args.iterations) for d in args.dims.split(",")]
    if args.ppl:
        results += numpyro_comparisons(args.rounds, args.iterations)
    for r in results:
        print(f"{r['model']:<10} {r['dim']:>5} {r['n_samples']:>5} {r['hand_us']:>9.1f} {r['jax_us']:>9.1f} "
              f"{r['ratio_cpu']:>6.2f} {r['ratio_wall']:>6.2f}")
    load_end = load_average()
    print(describe(info, load_start, load_end))
    path = save("autodiff_overhead", {"machine": info, "jax": jax.__version__, "load_average_start": load_start,
                                      "load_average_end": load_end, "rounds": args.rounds, "results": results})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
