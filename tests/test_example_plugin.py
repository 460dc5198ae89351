"""The example third-party plugin (plugins/mcsa-bench-example): its components are correct, and a
real pip install of the distribution makes them listed and runnable from the CLI with no YAML."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as st

from mcsa_bench import get_registry, load_registry
from tests.support import assert_gradient_matches
from tests.test_kernels import assert_matches_exact_marginal, fixed_proposal, gaussian_target

PLUGIN_SOURCE = Path(__file__).resolve().parents[1] / "plugins" / "mcsa-bench-example"


@pytest.fixture(scope="module")
def example():
    sys.path.insert(0, str(PLUGIN_SOURCE))
    try:
        import mcsa_bench_example

        yield mcsa_bench_example
    finally:
        sys.path.remove(str(PLUGIN_SOURCE))


def test_funnel_density_and_gradient(example):
    model = load_registry([example], strict=True).build("model", "funnel", dim=4)
    z = np.random.default_rng(0).normal(size=(5, 4))
    expected = st.norm(0, 3).logpdf(z[:, 0]) + st.norm(0, np.exp(z[:, :1] / 2)).logpdf(z[:, 1:]).sum(axis=1)
    np.testing.assert_allclose(model.log_joint(z), expected, rtol=1e-12)
    assert_gradient_matches(model.log_joint_and_grad, z)


def test_rwm_kernel_leaves_pi_invariant(example):
    target = gaussian_target(5)
    kernel = load_registry([example], strict=True).build("kernel", "rwm", step_size=0.7)
    rng = np.random.default_rng(1)
    state = kernel.init(target, target.sample(rng, 20_000))
    for _ in range(5):
        state = kernel.step(rng, state, target, fixed_proposal(target)).state
    assert_matches_exact_marginal(target, state.z)


@pytest.mark.slow
def test_pip_installed_plugin_is_listed_and_runs_from_the_cli(tmp_path):
    site, source = tmp_path / "site", tmp_path / "source"
    shutil.copytree(PLUGIN_SOURCE, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                              str(source)], capture_output=True, text=True)  # builds in the copy, not the repo
    assert install.returncode == 0, install.stderr
    env = {**os.environ, "PYTHONPATH": str(site), "MCSA_BENCH_STRICT_PLUGINS": "1"}
    listing = subprocess.run([sys.executable, "-m", "mcsa_bench.cli", "plugins", "--json"], cwd=tmp_path, env=env,
                             capture_output=True, text=True)
    rows = {(r["kind"], r["name"]): r for r in json.loads(listing.stdout)}
    for key in (("model", "funnel"), ("kernel", "rwm")):
        assert (rows[key]["plugin"], rows[key]["distribution"], rows[key]["version"]) == (
            "example", "mcsa-bench-example", "0.1.0")
    run = subprocess.run([sys.executable, "-m", "mcsa_bench.cli", "run", "model=funnel", "model.dim=3", "kernel=rwm",
                          "kernel.step_size=0.4", "estimator=pmcsa", "n_iters=20", "eval_every=10"],
                         cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "funnel" not in get_registry().names("model")  # the test process itself is untouched
