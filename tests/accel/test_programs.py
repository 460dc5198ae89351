"""The compiled programs' cache (accel/programs.py): configurations that differ only in numeric
hyperparameters (a learning rate, HMC's step size) compile once and give the numbers they give
alone; a change of structure (N, the family, a model's code) compiles again; the persistent cache
lets a second process skip its compiles."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("jax")

import jax
import jax.numpy as jnp

from mcsa_bench import get_registry
from mcsa_bench.accel import engine, programs
from mcsa_bench.accel.engine import CellSettings, run_cell
from mcsa_bench.assembly import assemble

N_ITERS = 30
SETTINGS = CellSettings(n_iters=N_ITERS, eval_every=10)
SEEDS = range(3)
MODEL = ("gaussian", {"dim": 4})


@pytest.fixture
def cache(monkeypatch):
    """A fresh program cache for the engine, whatever this process compiled before."""
    fresh = programs.ProgramCache()
    monkeypatch.setattr(engine, "PROGRAMS", fresh)
    return fresh


@pytest.fixture
def xla_compiles():
    """XLA compilations while the test runs, counted by JAX's own compile event."""
    from jax._src.dispatch import BACKEND_COMPILE_EVENT

    events = []

    def listener(event, duration, **_):
        if event == BACKEND_COMPILE_EVENT:
            events.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    yield events
    jax.monitoring.unregister_event_duration_listener(listener)


def cell(settings=SETTINGS, model=MODEL, **components):
    parts = assemble(get_registry(), model=model, **{"estimator": "pmcsa", "n_samples": 5, **components})
    return run_cell(*parts.jax_twins(settings.n_iters), settings, SEEDS)


def numbers(result) -> list:
    """Everything a replicate returns but the wall time."""
    return [([{k: v for k, v in row.items() if k != "wall_time"} for row in r.history], r.params.tolist(),
             r.iterate.tolist(), r.trace.tolist(), r.failure) for r in result.replicates]


SWEEPS = {
    "learning rate": [{"optimizer": ("adam", {"lr": lr})} for lr in (0.05, 0.01, 0.2)],
    "hmc step size": [{"estimator": "msc", "kernel": ("hmc", {"step_size": eps, "target_accept": accept})}
                      for eps, accept in ((0.3, 0.8), (0.1, 0.8), (0.5, 0.65))],
}
#: the fast suite's sweep (each sweep compiles a cell's programs: 10-50 s of CPU on the loaded 2-core machine)
SWEEP_CASES = [pytest.param(name, marks=[] if name == "learning rate" else pytest.mark.slow) for name in SWEEPS]


@pytest.mark.parametrize("sweep", SWEEP_CASES)
def test_configurations_differing_in_hyperparameters_compile_once(sweep, cache, xla_compiles):
    first, *others = SWEEPS[sweep]
    cell(**first)
    assert cache.counts.compiles == 4  # start, advance, fresh_window, evaluate
    compiled_by_first = len(xla_compiles)
    results = [cell(**components) for components in others]
    assert cache.counts.compiles == 4 and cache.counts.hits == 4 * len(others)
    assert len(xla_compiles) == compiled_by_first, "XLA compiled again for a configuration of the same structure"
    assert numbers(results[0]) != numbers(results[1])  # the hyperparameters did reach the programs


@pytest.mark.parametrize("sweep", SWEEP_CASES)
def test_a_configuration_gives_the_same_numbers_after_a_cell_mate_warmed_the_cache(sweep, cache):
    first, second, _ = SWEEPS[sweep]
    after_warm_up = (cell(**first), cell(**second))[1]
    cache.clear()
    alone = cell(**second)
    assert cache.counts.compiles == 8 and numbers(alone) == numbers(after_warm_up)


STRUCTURE_CHANGES = {
    "N": {"n_samples": 6},
    "family": {"family": "fullrank_gaussian"},
    "dimension": {"model": ("gaussian", {"dim": 5})},
    "optimizer": {"optimizer": "sgd"},
    "T": {"settings": CellSettings(n_iters=N_ITERS + 10, eval_every=10)},
}


@pytest.mark.slow
@pytest.mark.parametrize("change", STRUCTURE_CHANGES)
def test_a_change_of_structure_compiles_again(change, cache):
    cell()
    before = cache.counts.compiles
    cell(**STRUCTURE_CHANGES[change])
    assert cache.counts.compiles > before


@pytest.mark.slow
def test_a_program_that_computes_something_else_is_never_shared(cache):
    """Two model twins that differ only in a constant their code closes over: two programs, two results."""
    parts = assemble(get_registry(), model=MODEL, estimator="pmcsa", n_samples=5)
    model, family, scheme, optimizer = parts.jax_twins(N_ITERS)
    shifted = [dataclasses.replace(model, log_joint=lambda z, c=c: model.log_joint(z) - c * z[0]) for c in (0.0, 1.0)]
    results = [run_cell(m, family, scheme, optimizer, SETTINGS, SEEDS) for m in shifted]
    assert cache.counts.hits == 2  # fresh_window and evaluate only: they do not read log_joint
    assert numbers(results[0]) != numbers(results[1])


def test_the_cache_keeps_its_capacity(monkeypatch):
    small = programs.ProgramCache(capacity=2)
    for scale in (1.0, 2.0, 3.0):
        small.compiled(lambda x, s=scale: x * s, (jnp.zeros(3),))
    assert small.counts.compiles == 3 and len(small._programs) == 2
    small.compiled(lambda x: x * 3.0, (jnp.zeros(3),))  # the most recent stays
    assert small.counts.hits == 1


def test_hyperparameters_are_the_traced_attributes_that_are_set():
    parts = assemble(get_registry(), model=MODEL, estimator="msc", kernel=("hmc", {"step_size": 0.25}),
                     optimizer=("sgd", {"lr": 0.03}), n_samples=5)
    _, _, scheme, optimizer = parts.jax_twins(N_ITERS)
    (name, stepsizes), = programs.hyperparameters(optimizer, np.float64).items()  # γ_t of the numpy optimizer
    assert name == "stepsizes" and np.array_equal(stepsizes, np.full(N_ITERS, 0.03))
    kernel = programs.hyperparameters(scheme.kernel, np.float32)
    assert kernel["initial_step_size"].dtype == np.float32 and kernel["log_initial_step"] == np.float32(np.log(2.5))
    bound = programs.with_hyperparameters(optimizer, {"stepsizes": np.ones(N_ITERS)})
    assert bound.stepsizes[0] == 1.0 and optimizer.stepsizes[0] == 0.03


@pytest.mark.parametrize("setting, expected", [("off", None), ("OFF", None), ("/somewhere/jax", "/somewhere/jax"),
                                               ("", "CACHE/mcsa-bench/jax")])
def test_the_persistent_cache_directory(setting, expected, monkeypatch):
    monkeypatch.setenv(programs.CACHE_ENV, setting)
    monkeypatch.setenv("XDG_CACHE_HOME", "CACHE")
    found = programs.persistent_cache_dir()
    assert (None if found is None else str(found)) == expected


SECOND_RUN = textwrap.dedent("""
    import json, time
    clock = time.perf_counter()
    import jax
    hits = []
    jax.monitoring.register_event_listener(lambda event, **_: hits.append(event))
    from mcsa_bench import get_registry
    from mcsa_bench.accel.engine import CellSettings, run_cell
    from mcsa_bench.assembly import assemble
    parts = assemble(get_registry(), model=("gaussian", {"dim": 4}), estimator="pmcsa", n_samples=5)
    result = run_cell(*parts.jax_twins(20), CellSettings(n_iters=20, eval_every=10), range(2))
    print(json.dumps({"hits": hits.count("/jax/compilation_cache/cache_hits"), "compile_s": result.compile_seconds,
                      "kl": result.replicates[1].history[-1]["kl_inclusive"]}))
""")


@pytest.mark.slow
def test_a_second_process_reads_the_persistent_cache(tmp_path):
    env = {**os.environ, programs.CACHE_ENV: str(tmp_path / "jax"), "JAX_PLATFORMS": "cpu",
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    runs = [json.loads(subprocess.run([sys.executable, "-c", SECOND_RUN], env=env, check=True, capture_output=True,
                                      text=True).stdout.splitlines()[-1]) for _ in range(2)]
    assert any((tmp_path / "jax").iterdir())
    assert runs[0]["hits"] == 0 and runs[1]["hits"] >= 3  # start, advance and evaluate read back
    assert runs[1]["kl"] == runs[0]["kl"]
