"""What a reference posterior at today's bar (bulk ESS ≥ 10,000) would cost NUTS here on a GP's full
data set, measured in part and extrapolated (docs/references.md, "What has no reference").

Per data set: the CPU time of one gradient of the log density NUTS samples (jitted, one thread, median
of 20 after compiling), on the full data and on the 100-row subset whose reference is shipped, measured
side by side so that the machine's load cancels in their ratio. The full data set's NUTS time is the
subset reference's recorded time, times that ratio, times the iterations a bulk ESS of 12,000 needs
(4 chains × (1,000 warm-up + draws), the draws from the subset's ESS per draw) over the subset's. It
assumes the full data set takes as many leapfrog steps per iteration and mixes as well per iteration as
its subset: a lower bound where the posterior's geometry worsens with n.

    python benchmarks/measure/reference_nuts_cost.py [--out benchmarks/results/reference_nuts_cost.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from numpyro.infer.util import initialize_model, potential_energy  # noqa: E402

from mcsa_bench.references import shipped  # noqa: E402
from mcsa_bench.tools import generate_references as generate  # noqa: E402

#: the full-data spec -> the shipped 100-row reference it extrapolates from
FULL_DATA = {
    "sonar": ("gp_classification", lambda: generate.gp_classification_spec("sonar", False)),
    "ionosphere": ("gp_classification", lambda: generate.gp_classification_spec("ionosphere", False)),
    "breast": ("gp_classification", lambda: generate.gp_classification_spec("breast", True)),
    "boston": ("gp_regression", lambda: generate.gp_regression_spec("boston")),
    "concrete": ("gp_regression", lambda: generate.gp_regression_spec("concrete")),
}
CHAINS, WARMUP, TARGET_ESS = 4, 1000, 12_000


def gradient_seconds(spec: generate.Spec, repeats: int = 20) -> float:
    """Median CPU time of one jitted gradient of the potential NUTS samples."""
    program = generate._sampled_program(spec)
    init = initialize_model(jax.random.PRNGKey(0), program)
    flat, unravel = ravel_pytree(init.param_info.z)
    gradient = jax.jit(jax.grad(lambda w: potential_energy(program, (), {}, unravel(w))))
    gradient(flat).block_until_ready()
    times = []
    for _ in range(repeats):
        started = time.process_time()
        gradient(flat).block_until_ready()
        times.append(time.process_time() - started)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/reference_nuts_cost.json")
    parser.add_argument("datasets", nargs="*", default=list(FULL_DATA))
    args = parser.parse_args()
    rows = []
    for dataset in args.datasets:
        model, build = FULL_DATA[dataset]
        spec = build()
        subset = next(r for r in shipped(model) if r.name == f"{model}--{dataset}-{generate.GP_ROWS}rows")
        full = gradient_seconds(spec)
        small = gradient_seconds(next(s for s in generate.specs()[subset.name]()))
        ess_per_draw = subset.quality["ess_min"] / (CHAINS * subset.source["draws_per_chain"])
        draws = int(np.ceil(TARGET_ESS / ess_per_draw / CHAINS))
        iterations = (WARMUP + draws) / (subset.source["warmup"] + subset.source["draws_per_chain"])
        hours = subset.source["seconds"] * full / small * iterations / 3600
        rows.append({"dataset": dataset, "rows": int(spec.layout[0].size), "gradient_cpu_s": full,
                     "gradient_cpu_s_100rows": small, "subset_seconds": subset.source["seconds"],
                     "draws_per_chain": draws, "hours": hours, "load": os.getloadavg()[0]})
        print(f"{dataset:11} n={rows[-1]['rows']:5} gradient {full * 1e3:8.2f} ms / 100 rows {small * 1e3:6.2f} ms; "
              f"{subset.source['seconds']:.0f} s x {full / small:.1f} x {iterations:.2f} = {hours:7.1f} h", flush=True)
    with open(args.out, "w") as handle:
        json.dump({"what": __doc__.split("\n")[0], "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
