"""Models from NumPyro and PyMC files (mcsa_bench/autodiff/ppl.py): the NumPyro and PyMC forms of eight
schools give the extras' hand-written model's log density and gradient to 1e-10 (PyMC's up to a constant it
rounds, measured); both run through the CLI on both backends; a model is identified by its files' contents;
the data formats; and every bad input is one line, exit 2, nothing created."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numpyro")

from mcsa_bench.api import ConfigurationError
from mcsa_bench.autodiff.ppl import NumPyroModel, load_data
from mcsa_bench_extras.models import EightSchools
from tests.autodiff.test_compiled import RTOL, relative_error

DATA = Path(__file__).resolve().parents[1] / "data" / "ppl"
NUMPYRO, PYMC, JSON = DATA / "eight_schools_numpyro.py", DATA / "eight_schools_pymc.py", DATA / "eight_schools.json"


def random_points(n=64):
    return 1.5 * np.random.default_rng(0).standard_normal((n, 10))


def test_numpyros_eight_schools_is_the_hand_written_model_to_1e_10():
    model, hand = NumPyroModel(f"{NUMPYRO}:model", str(JSON)), EightSchools(centered=False)
    z = random_points()  # the same coordinates: (μ, log τ, η) in the model's order
    (log_p, grad), (hand_log_p, hand_grad) = model.log_joint_and_grad(z), hand.log_joint_and_grad(z)
    assert relative_error(log_p, hand_log_p) < RTOL and relative_error(grad, hand_grad) < RTOL
    assert model.latent_names() == ["mu", "tau"] + [f"eta[{j}]" for j in range(8)]
    assert model.latent_transforms() == ["identity", "exp"] + ["identity"] * 8
    constrained = model.constrained(z[:3])
    assert np.allclose(constrained["tau"], np.exp(z[:3, 1])) and constrained["eta"].shape == (3, 8)


def test_a_numpyro_logistic_regression_is_the_built_in_one_to_1e_10():
    """tests/data/ppl/logistic_numpyro.py on raw pima (768 rows: tests/data/ppl/pima.json); NumPyro orders the
    latents as its sites are sampled, (σ_β, σ_α, β, α), the built-in model (β, α, log σ_β, log σ_α)."""
    from mcsa_bench import get_registry

    model = NumPyroModel(f"{DATA / 'logistic_numpyro.py'}:model", str(DATA / "pima.json"))
    built_in = get_registry().build("model", "logistic", dataset="pima", standardize=False, test_fraction=0.0)
    z = 0.1 * np.random.default_rng(1).standard_normal((16, built_in.dim))
    (log_p, grad), (own_log_p, own_grad) = built_in.log_joint_and_grad(z), model.log_joint_and_grad(np.roll(z, 2, 1))
    assert relative_error(own_log_p, log_p) < RTOL and relative_error(np.roll(own_grad, -2, 1), grad) < RTOL
    assert model.latent_transforms()[:3] == ["exp", "exp", "identity"]


def test_pymcs_eight_schools_is_the_hand_written_model_up_to_a_constant_pymc_rounds():
    """PyMC writes its normalizing constants as float32 (log √(2π) off by 3e-8 per normal term, measured
    against scipy.stats): its log density is the model's plus a constant, −5.8e-8 here, the same at every
    point to 1e-13; the gradient is exact."""
    pytest.importorskip("pymc")
    from mcsa_bench.autodiff.ppl import PyMCModel

    model, hand = PyMCModel(f"{PYMC}:model", str(JSON)), EightSchools(centered=False)
    z = random_points()
    (log_p, grad), (hand_log_p, hand_grad) = model.log_joint_and_grad(z), hand.log_joint_and_grad(z)
    offset = log_p - hand_log_p
    assert abs(offset.mean()) < 1e-6 and relative_error(log_p - offset.mean(), hand_log_p) < RTOL
    assert relative_error(grad, hand_grad) < RTOL
    assert model.latent_names() == ["mu", "tau"] + [f"eta[{j}]" for j in range(8)]
    assert model.latent_transforms() == ["identity", "log"] + ["identity"] * 8


def cli(tmp_path, *arguments, timeout=600):
    return subprocess.run([sys.executable, "-m", "mcsa_bench.cli", *arguments], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("language, source", [("numpyro", NUMPYRO), ("pymc", PYMC)])
@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_a_model_from_a_file_runs_through_the_cli_on_both_backends(tmp_path, language, source, backend):
    if language == "pymc":
        pytest.importorskip("pymc")
    shutil.copy(source, tmp_path / "model.py")
    shutil.copy(JSON, tmp_path / "data.json")
    done = cli(tmp_path, "run", f"model={language}", "model.source=model.py:model", "model.data=data.json",
               f"backend={backend}", "kernel=hmc", "kernel.mass=identity", "n_iters=300", "eval_every=150")
    assert done.returncode == 0, done.stderr
    assert "log_z=" in done.stdout and "log_z_khat=" in done.stdout
    saved = np.load(sorted(tmp_path.rglob("draws.npz"))[0])  # q's draws, and mapped to the sites
    z = saved["z"]
    assert z.shape == (1000, 10) and list(saved["names"]) == ["mu", "tau"] + [f"eta[{j}]" for j in range(8)]
    assert np.allclose(saved["site/tau"], np.exp(z[:, 1]), rtol=1e-12) and saved["site/eta"].shape == (1000, 8)
    assert np.array_equal(saved["site/mu"], z[:, 0])


def config_hash(source: str, data: str) -> str:
    from mcsa_bench import get_registry
    from mcsa_bench.jobs.config import register_configs
    from tests.engine.test_settings import settings_of

    register_configs(get_registry())
    return settings_of("model=numpyro", f"model.source={source}", f"model.data={data}").config_hash(get_registry())


def test_a_model_is_identified_by_its_files_contents_not_their_paths(tmp_path):
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.copy(NUMPYRO, moved / "schools.py")
    shutil.copy(JSON, moved / "schools.json")
    original = config_hash(f"{NUMPYRO}:model", str(JSON))
    assert config_hash(f"{moved / 'schools.py'}:model", str(moved / "schools.json")) == original
    (moved / "schools.json").write_text(JSON.read_text().replace("28", "29"))
    assert config_hash(f"{moved / 'schools.py'}:model", str(moved / "schools.json")) != original


def test_a_model_built_again_from_the_same_contents_shares_the_first_builds_compiled_density(tmp_path):
    """PPLModel's memo: a sweep's pre-flight and its jobs build the same files again; the later builds take the
    first's compiled functions (its XLA programs), wherever the files lie, and edited data is a model of its own."""
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.copy(NUMPYRO, moved / "schools.py")
    shutil.copy(JSON, moved / "schools.json")
    first = NumPyroModel(f"{NUMPYRO}:model", str(JSON))
    again = NumPyroModel(f"{moved / 'schools.py'}:model", str(moved / "schools.json"))
    assert again._compiled() is first._compiled() and again.source.startswith(str(moved))
    (moved / "schools.json").write_text(JSON.read_text().replace("28", "29"))
    edited = NumPyroModel(f"{moved / 'schools.py'}:model", str(moved / "schools.json"))
    assert edited._compiled() is not first._compiled()
    z = np.random.default_rng(0).standard_normal((3, first.dim))
    assert not np.allclose(edited.log_joint(z), first.log_joint(z))  # the first school's y: 28 -> 29
    np.testing.assert_array_equal(again.log_joint(z), first.log_joint(z))


def test_data_files_as_json_npz_and_csv(tmp_path):
    data, _ = load_data(str(JSON))
    assert data["J"] == 8 and data["y"].dtype.kind == "i" and data["sigma"].tolist()[0] == 15
    np.savez(tmp_path / "data.npz", y=np.arange(3.0), J=np.int64(3))
    assert load_data(str(tmp_path / "data.npz"))[0]["y"].tolist() == [0.0, 1.0, 2.0]
    (tmp_path / "data.csv").write_text("y,sigma\n28,15\n8,10.5\n")
    columns, _ = load_data(str(tmp_path / "data.csv"))
    assert columns["y"].dtype.kind == "i" and columns["sigma"].tolist() == [15.0, 10.5]


BAD = {
    "a missing file": (["model.source=nope.py"], "model.source=nope.py: no such file"),
    "a missing function": ([f"model.source={NUMPYRO}:modle", f"model.data={JSON}"],
                           "has no function 'modle'; functions there: discrete, model, no_latents"),
    "a function that is not a model": ([f"model.source={NUMPYRO}:no_latents", f"model.data={JSON}"],
                                       "no_latents() is not a NumPyro model with latent variables"),
    "data keys the model does not take": ([f"model.source={NUMPYRO}:model", f"model.data={DATA / 'extra.json'}"],
                                          "model.data has 'schools', which model() does not take; it takes: J, y, "
                                          "sigma"),
    "discrete latent sites": ([f"model.source={NUMPYRO}:discrete", f"model.data={JSON}"],
                              "MCSA needs a continuous latent space, and the sites school are discrete"),
    "a log density not finite where q starts": ([f"model.source={NUMPYRO}:zero_where_q_starts", f"model.data={JSON}"],
                                                "the log density or its gradient is not finite at z = 0"),
    "a data file of another kind": ([f"model.source={NUMPYRO}:model", f"model.data={NUMPYRO}"],
                                    "unknown kind of file '.py'; allowed: .json, .npz, .csv"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_every_bad_input_is_one_line_exit_2_and_nothing_created(tmp_path, case):
    overrides, message = BAD[case]
    done = cli(tmp_path, "run", "model=numpyro", *overrides, "n_iters=5")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr and list(tmp_path.iterdir()) == []


def test_a_pymc_function_that_returns_no_model_is_one_line():
    pytest.importorskip("pymc")
    from mcsa_bench.autodiff.ppl import PyMCModel

    with pytest.raises(ConfigurationError, match=r"not_a_model\(\) returned a dict, not a pymc.Model"):
        PyMCModel(f"{PYMC}:not_a_model", str(JSON))
