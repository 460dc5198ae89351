"""The models' own cost: log_joint (and log_joint_and_grad) at B = N rows, this checkout against an
earlier revision of the model modules, interleaved (harness.py); optionally where the time goes.

The earlier modules are read with ``git show <revision>:<path>`` and loaded beside the current
package, so both run in the same process on the same data. The default revision is the one
before the speed-ups of docs/performance.md.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/measure/log_joint.py [--before 5ad54a8] [--rows 10]
        [--models logistic,gp,gp_regression,bnn] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
from harness import describe, interleave, load_average, machine, save, timed

from mcsa_bench import get_registry

REPOSITORY = Path(__file__).resolve().parents[2]
#: label -> (module path, class name, parameters)
MODELS = {
    "logistic": ("mcsa_bench/builtin/models/logistic.py", "HierarchicalLogistic", {"dataset": "pima"}),
    "gp": ("mcsa_bench/builtin/models/gp.py", "GPClassification", {"dataset": "sonar", "standardize": False}),
    "gp_regression": ("mcsa_bench/builtin/models/gp.py", "GPRegression", {"dataset": "boston"}),
    "bnn": ("mcsa_bench/builtin/models/bnn.py", "BayesianNeuralNetwork", {"dataset": "boston"}),
}
REGISTERED = {"logistic": "logistic", "gp": "gp_classification", "gp_regression": "gp_regression", "bnn": "bnn"}


def module_at(revision: str, path: str) -> types.ModuleType:
    """The module at ``path`` as it was in ``revision``, imported under a private name."""
    source = subprocess.run(["git", "-C", str(REPOSITORY), "show", f"{revision}:{path}"],
                            capture_output=True, text=True, check=True).stdout
    name = f"_before_{revision}_{Path(path).stem}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"{revision}:{path}", "exec"), module.__dict__)
    return module


def profile(model, z: np.ndarray, calls: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        model.log_joint(z)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="5ad54a8", help="git revision of the earlier model modules")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rows", type=int, default=10, help="B, rows per call (pMCSA at N evaluates N)")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--block-seconds", type=float, default=0.2)
    parser.add_argument("--profile", action="store_true", help="also print cProfile of both log_joint versions")
    args = parser.parse_args()

    info, load_start = machine(), load_average()
    print(f"B={args.rows}; µs per call, CPU medians of {args.rounds} interleaved rounds; before = {args.before}")
    print(
        f"{'model':<14}{'D':>5}{'before':>11}{'after':>11}{'speed-up':>9}"
        f"{'grad before':>13}{'grad after':>12}{'speed-up':>9}"
    )
    results = []
    for label in args.models.split(","):
        path, cls, params = MODELS[label]
        after = get_registry().build("model", REGISTERED[label], **params)
        before = getattr(module_at(args.before, path), cls)(**params)
        z = np.random.default_rng(0).normal(0.0, 0.5, size=(args.rows, after.dim))
        assert np.allclose(before.log_joint(z), after.log_joint(z), rtol=1e-12, atol=0)
        probe = timed(lambda: before.log_joint_and_grad(z), 3)
        calls = max(3, int(args.block_seconds / (probe.wall / 3)))
        series = interleave({
            "before": lambda: timed(lambda: before.log_joint(z), calls),
            "after": lambda: timed(lambda: after.log_joint(z), calls),
            "grad_before": lambda: timed(lambda: before.log_joint_and_grad(z), calls),
            "grad_after": lambda: timed(lambda: after.log_joint_and_grad(z), calls),
        }, args.rounds)
        cpu = {name: s.median_cpu for name, s in series.items()}
        print(
            f"{label:<14}{after.dim:>5}{cpu['before'] * 1e6:11.1f}{cpu['after'] * 1e6:11.1f}"
            f"{cpu['before'] / cpu['after']:9.2f}"
            f"{cpu['grad_before'] * 1e6:13.1f}{cpu['grad_after'] * 1e6:12.1f}"
            f"{cpu['grad_before'] / cpu['grad_after']:9.2f}",
            flush=True,
        )
        results.append({"model": label, "params": params, "dim": after.dim, "rows": args.rows, "calls_per_block": calls,
                        **{name: s.as_dict() for name, s in series.items()}})
        if args.profile:
            for version, model in (("before", before), ("after", after)):
                print(f"--- {label}, {version}: log_joint, {calls} calls")
                profile(model, z, calls)
    load_end = load_average()
    print(describe(info, load_start, load_end))
    path = save("log_joint", {"machine": info, "load_average_start": load_start, "load_average_end": load_end,
                              "before": args.before, "rounds": args.rounds, "results": results})
    print(f"# saved {path}")


if __name__ == "__main__":
    main()
