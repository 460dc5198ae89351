"""Cost of each model's log joint, alone (what IMH and CIS ask) and with its gradient (HMC, ELBO): the numpy
model on one core against its JAX twin (mcsa_bench/accel/models.py), in µs per point.

numpy: ``log_joint`` and ``log_joint_and_grad`` of B = N = 10 points (one iteration's batch). JAX:
``jit(vmap(log_joint))`` and ``jit(vmap(value_and_grad(log_joint)))`` of R × N points (R replicates of a
grid cell), on the device JAX finds (a GPU where one is present; on the CPU one XLA thread and one BLAS thread,
for numpy's and JAX's LAPACK calls alike). A batch whose estimated time exceeds ``--budget`` seconds (from the R = 1
timing) is skipped. A few minutes on one CPU core.

    python benchmarks/measure/accelerator_models.py [--replicates 1,64] [--pairs logistic_pima,radon,...] [--budget 2]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # JAX's LAPACK calls too
    os.environ.setdefault(_variable, "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402

from mcsa_bench import get_registry  # noqa: E402
from mcsa_bench.accel.models import twin  # noqa: E402

PAIRS = ("gaussian_fig2", "logistic_pima", "logistic_heart", "logistic_german", "gp_classification_sonar",
         "gp_classification_ionosphere", "gp_classification_breast", "gp_regression_boston", "gp_regression_concrete",
         "bnn_boston", "bnn_concrete", "radon", "stochastic_volatility_sp500")
N = 10  # points per replicate and iteration (the papers' budget)
EXPERIMENTS = Path(__file__).parents[1] / "conf" / "experiment"


def build_model(pair: str):
    """The model of conf/experiment/<pair>.yaml, with split 0 (the model choice and its parameters only)."""
    config = yaml.safe_load((EXPERIMENTS / f"{pair}.yaml").read_text())
    name = next(entry["override /model"] for entry in config["defaults"]
                if isinstance(entry, dict) and "override /model" in entry)
    return get_registry().build("model", name, **config.get("model", {}))


def seconds_per_call(call, min_seconds: float = 0.2) -> float:
    """The median of 5 rounds, each repeating ``call`` for about ``min_seconds`` (after one warm-up call)."""
    call()
    start, repeats = time.perf_counter(), 0
    while time.perf_counter() - start < min_seconds / 5 or repeats == 0:
        call()
        repeats += 1
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        rounds.append((time.perf_counter() - start) / repeats)
    return float(np.median(rounds))


def time_pair(pair: str, replicates: list[int], budget: float) -> tuple[int, dict[str, tuple[float, list]]]:
    """(D, {quantity: (numpy µs per point, JAX µs per point for each R, None where skipped)})."""
    model = build_model(pair)
    points = 0.5 * np.random.default_rng(0).standard_normal((max(replicates) * N, model.dim))
    log_joint = twin(model).log_joint
    quantities = {"log joint": (model.log_joint, jax.jit(jax.vmap(log_joint))),
                  "with gradient": (model.log_joint_and_grad, jax.jit(jax.vmap(jax.value_and_grad(log_joint))))}
    timings = {}
    for quantity, (numpy_call, jax_call) in quantities.items():
        numpy_us = seconds_per_call(lambda: numpy_call(points[:N])) / N * 1e6
        jax_us, estimate = [], None
        for r in replicates:
            if estimate is not None and estimate * r * N > budget:
                jax_us.append(None)
                continue
            batch = jnp.asarray(points[: r * N])
            seconds = seconds_per_call(lambda: jax.block_until_ready(jax_call(batch)))
            estimate = estimate or seconds / (r * N)
            jax_us.append(seconds / (r * N) * 1e6)
        timings[quantity] = numpy_us, jax_us
    return model.dim, timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicates", default="1,64", help="R values: the JAX batch is R × 10 points")
    parser.add_argument("--pairs", default=",".join(PAIRS))
    parser.add_argument("--budget", type=float, default=2.0, help="seconds a JAX batch may take (else skipped)")
    args = parser.parse_args()
    replicates = sorted(int(r) for r in args.replicates.split(","))
    device = jax.devices()[0]
    print(
        f"JAX {jax.__version__} on {device.platform} ({device.device_kind}); numpy on one core; float64; µs per point"
    )
    print(f"| pair | D | | numpy (B = {N}) | {' | '.join(f'JAX, R = {r} ({r * N} points)' for r in replicates)} |")
    print(f"|---|---|---|---|{'---|' * len(replicates)}")
    for pair in args.pairs.split(","):
        dim, timings = time_pair(pair, replicates, args.budget)
        for quantity, (numpy_us, jax_us) in timings.items():
            cells = " | ".join("skipped" if us is None else f"{us:.2f}" for us in jax_us)
            print(f"| {pair} | {dim} | {quantity} | {numpy_us:.2f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
