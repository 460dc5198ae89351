"""Third-party plugins end to end: the extras package (installed with the project), the template
copied, renamed and pip-installed exactly as its README says, and broken plugins installed next to
them. `mcsa-bench plugins` lists them all, `mcsa-bench check` passes the template's kernel, its
own tests pass, and one `mcsa-bench run -m` sweep mixes built-in, extras and template components
into MLflow with the right plugin tags, while the broken plugins stop nothing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from mcsa_bench import get_registry
from tests.e2e.test_cli import all_runs, split_runs
from tests.support import built_once, cli, completed_process_once
from tests.test_plugins import make_distribution

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "plugins" / "template"
EXTRAS = {("kernel", "rwmh"), ("kernel", "mala"), ("kernel", "barker_imh"), ("family", "meanfield_laplace"),
          ("model", "eight_schools"), ("model", "funnel")}


def readme_rename_commands() -> str:
    """The shell commands of the template README's first step (copy and rename)."""
    readme = (TEMPLATE / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    return "\n".join(line.strip() for line in block.splitlines())


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(working directory, environment) with the renamed template and two broken plugins installed,
    once per session (the tests only read it)."""
    root = built_once(tmp_path_factory, "third_party", install_plugins)
    site = root / "site"
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "MCSA_BENCH_STRICT_PLUGINS": "0"}
    return root, env


def install_plugins(root: Path) -> None:
    script = readme_rename_commands().replace("plugins/template", str(TEMPLATE))
    renamed = subprocess.run(["bash", "-ec", script], cwd=root, capture_output=True, text=True)
    assert renamed.returncode == 0, renamed.stderr
    copy = root / "mcsa-bench-tempered"
    assert (copy / "mcsa_bench_tempered" / "__init__.py").exists() and not list(copy.rglob("*myplugin*"))

    site = root / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", str(site), str(copy)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    shutil.rmtree(copy / "build", ignore_errors=True)
    make_distribution(site, "mcsa-bench-broken", "0.3", "broken_plugin", "import frobnicate\n")
    make_distribution(site, "mcsa-bench-maxed", "0.2", "maxed_plugin", """
        from mcsa_bench import hookimpl

        @hookimpl
        def register_kernels(register):
            register("biggest", max)
    """)


def test_the_extras_are_registered_with_their_distribution():
    registry = get_registry()
    for kind, name in EXTRAS:
        plugin = registry.get(kind, name).plugin
        assert (plugin.name, plugin.distribution, plugin.version) == ("extras", "mcsa-bench-extras",
                                                                      version("mcsa-bench-extras"))


def test_plugins_lists_extras_template_and_broken_plugins(installed):
    root, env = installed
    result = cli("plugins", "--json", cwd=root, env=env)
    assert result.returncode == 0 and "Traceback" not in result.stderr
    rows = json.loads(result.stdout)
    loaded = {(r["kind"], r["name"]): r for r in rows if r["status"] == "loaded"}
    for key in EXTRAS:
        assert (loaded[key]["plugin"], loaded[key]["distribution"]) == ("extras", "mcsa-bench-extras")
    template = loaded["kernel", "tempered_imh"]
    assert (template["plugin"], template["distribution"], template["version"]) == ("tempered", "mcsa-bench-tempered",
                                                                                   "0.1.0")
    assert template["parameters"] == {"laziness": 0.5}
    failed = {r["distribution"]: r for r in rows if r["status"] == "failed"}
    assert set(failed) == {"mcsa-bench-broken", "mcsa-bench-maxed"}
    assert failed["mcsa-bench-broken"]["error"].startswith("ModuleNotFoundError: No module named 'frobnicate'")
    assert "the factory 'max' is a builtin function" in failed["mcsa-bench-maxed"]["error"]


def test_the_renamed_template_passes_its_own_tests_and_the_check_command(installed):
    root, env = installed
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                           cwd=root / "mcsa-bench-tempered", capture_output=True, text=True,
                           env={**os.environ, **env})
    assert tests.returncode == 0 and "2 passed" in tests.stdout, tests.stdout + tests.stderr
    check = cli("check", "kernel", "tempered_imh", "kernel.laziness=0.2", "--json", cwd=root, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    results = json.loads(check.stdout)
    assert {r["status"] for r in results} == {"passed"} and len(results) == 6  # builds and 5 checks
    assert {r["distribution"] for r in results} == {"mcsa-bench-tempered"}


@pytest.fixture(scope="module")
def sweep(installed, tmp_path_factory):
    """One `run -m` mixing the components, in its own directory, once per session."""
    _, env = installed
    return completed_process_once(tmp_path_factory, "third_party_sweep", lambda workdir: cli(
        "run", "-m", "model=gaussian,funnel", "kernel=imh,mala,barker_imh,tempered_imh", "family=meanfield_laplace",
        "estimator=pmcsa", "n_samples=4", "n_iters=20", "eval_every=10", cwd=workdir, env=env))


def test_a_sweep_mixes_builtin_extras_and_template_components_in_mlflow(sweep):
    root, result = sweep
    assert result.returncode == 0, result.stderr
    assert "mcsa-bench-broken" in result.stderr  # warned about, not fatal
    _, children = split_runs(all_runs(root))
    assert sorted((c.data.params["model.name"], c.data.params["kernel.name"]) for c in children) == sorted(
        (m, k) for m in ("gaussian", "funnel") for k in ("imh", "mala", "barker_imh", "tempered_imh"))
    extras = ("extras", "mcsa-bench-extras 0.1.0")
    expected_kernel = {"imh": ("mcsa_bench.builtin.kernels", "mcsa-bench"), "mala": extras, "barker_imh": extras,
                       "tempered_imh": ("tempered", "mcsa-bench-tempered 0.1.0")}
    for run in children:
        tags, params = run.data.tags, run.data.params
        assert run.info.status == "FINISHED"
        kernel = params["kernel.name"]
        plugin, distribution = expected_kernel[kernel]
        assert tags["component.kernel"] == kernel and tags["component.kernel.plugin"] == plugin
        assert tags["component.kernel.distribution"].startswith(distribution)
        assert (tags["component.family"], tags["component.family.plugin"]) == ("meanfield_laplace", "extras")
        model_origin = ("extras", "mcsa-bench-extras 0.1.0") if params["model.name"] == "funnel" else (
            "mcsa_bench.builtin.models", tags["component.estimator.distribution"])
        assert (tags["component.model.plugin"], tags["component.model.distribution"]) == model_origin
        assert tags["component.estimator.plugin"] == "mcsa_bench.builtin.estimators"
        if kernel == "tempered_imh":
            assert params["kernel.laziness"] == "0.5"
        if kernel == "mala":
            assert params["kernel.step_size"] == "0.2"
        assert "kl_inclusive" in run.data.metrics and run.data.metrics["kl_inclusive"] >= 0


def test_kernel_glob_sweeps_every_kernel_including_the_extras():
    from mcsa_bench.jobs.config import compose_jobs, register_configs

    register_configs(get_registry())
    jobs = compose_jobs(["kernel=glob(*)", "model=funnel", "model.dim=3"], multirun=True)
    assert sorted(cfg.kernel.name for _, cfg in jobs) == get_registry().names("kernel")
    assert {"rwmh", "mala", "barker_imh", "imh", "cis"} <= {cfg.kernel.name for _, cfg in jobs}
