"""The table of run settings (mcsa_bench.engine.Settings and mcsa_bench.jobs.config.RunSettings):
each setting is one row from which the Hydra schema, the checks, the config hash's rules and the
engine's settings come; the config hash of every command is the one recorded before the table
existed; the engine takes one Settings value (or its fields as keywords); the default kernel is
resolved once per job."""

import functools
from dataclasses import asdict, replace

import numpy as np
import pytest

from mcsa_bench import assembly, get_registry, run
from mcsa_bench.api import ConfigurationError
from mcsa_bench.assembly import KernelChoice, resolve_kernel
from mcsa_bench.engine import Settings, table
from mcsa_bench.jobs.config import RunConfig, RunSettings, compose_jobs, register_configs
from mcsa_bench.jobs.tracked import key_setting_tags
from mcsa_bench.plugins import KINDS
from mcsa_bench.tracking.record import LATER_KEY_DEFAULTS, NON_COMPUTING_KEYS

#: config hashes recorded by the code of commit 82f5f65, before the settings table: resume=true
#: finds runs by them and checkpoints are named by them, so they must not move
RECORDED_HASHES = {
    "": "4d78c3cc98b7516e",
    "estimator=msc": "be78cd7576b7c7ef",
    "estimator=msc kernel=imh": "c6aae740844a912a",
    "estimator=jsa kernel=hmc": "83032236f45964c2",
    "estimator=elbo": "7c4cb25ca70add3b",
    "estimator=snis": "e849952ec4d578ed",
    "estimator=rws": "305340c1658708fe",
    "eval_schedule=geometric": "787b161596d4b527",
    "experiment=logistic_pima": "062f656c4e7c4de9",
    "experiment=radon size=tiny": "3a10670935a29425",
    "diagnostics.every=5 threads=2 resume=true checkpoint_every=3": "19706c393d276f7b",
    "method=msc_hmc experiment=logistic_heart": "dd30d8c0b27f3242",
    "experiment=gp_classification_sonar optimizer.average_from=0.5": "5256185b09bbf8bf",
    "model=funnel estimator=pmcsa kernel=rwmh": "edc7c9062b4717ca",
}


@pytest.fixture(scope="module", autouse=True)
def configs():
    register_configs(get_registry())


def settings_of(*overrides: str) -> RunSettings:
    (_, cfg), = compose_jobs(list(overrides), multirun=False)
    return RunSettings.from_config(cfg)


@pytest.mark.parametrize("command", RECORDED_HASHES)
def test_the_config_hash_of_a_command_is_the_one_recorded_before_the_table(command):
    assert settings_of(*command.split()).config_hash(get_registry()) == RECORDED_HASHES[command]


def test_the_schema_is_the_table():
    rows, schema = table(RunSettings), asdict(RunConfig())
    assert [key for key in schema if key not in KINDS] == list(dict.fromkeys(row.key.partition(".")[0] for row in rows))
    assert {row.key: functools.reduce(dict.__getitem__, row.key.split("."), schema) for row in rows} == {
        row.key: row.default for row in rows}
    assert [row.name for row in rows[:len(table(Settings))]] == [row.name for row in table(Settings)]
    default = settings_of()
    assert default == replace(RunSettings(), components=default.components, resolved=default.resolved,
                              seed_following=default.seed_following)


def test_the_run_records_hash_rules_agree_with_the_table():
    groups = {}
    for row in table(RunSettings):
        groups.setdefault(row.key.partition(".")[0], set()).add(row.computing)
    assert all(len(computing) == 1 for computing in groups.values()), "a group mixes computing and other settings"
    assert set(NON_COMPUTING_KEYS) == {key for key, computing in groups.items() if computing == {False}}
    assert set(NON_COMPUTING_KEYS) == {"tracking", "resume", "threads", "checkpoint_every", "paper", "sample_metrics",
                                       "objective"}
    # top-level keys: the hash drops whole keys
    assert LATER_KEY_DEFAULTS == {"eval_schedule": "linear", "backend": "numpy"}
    assert LATER_KEY_DEFAULTS == {row.key: row.default for row in table(RunSettings) if row.added_later}
    registry = get_registry()
    default = settings_of().config_hash(registry)
    assert settings_of("threads=3", "tracking.experiment=x").config_hash(registry) == default
    assert settings_of("diagnostics.replicas=8").config_hash(registry) != default


@pytest.mark.parametrize("row", [row for row in table(RunSettings) if row.minimum is not None or row.choices],
                         ids=lambda row: row.key)
def test_each_row_checks_its_values_for_the_config_and_the_engine_alike(row):
    bad = row.minimum - 1 if row.minimum is not None else "nonsense"
    message = f"{row.key} must be >= {row.minimum}" if row.minimum is not None else f"unknown {row.key} 'nonsense'"
    with pytest.raises(ConfigurationError, match=message):
        settings_of(f"{row.key}={bad}")
    with pytest.raises(ConfigurationError, match=message):
        RunSettings(**{row.name: bad})


def test_every_duration_is_bounded_for_the_config_and_the_engine_alike():
    """issue 39 item 9: tracking.outage_seconds=1e300 passed, then overflowed a wait (OverflowError)."""
    durations = [row for row in table(RunSettings) if "seconds" in row.key]
    assert [row.key for row in durations] == ["tracking.outage_seconds"]
    for row in durations:
        assert row.maximum is not None and row.maximum <= 1e7  # far below threading.TIMEOUT_MAX
        with pytest.raises(ConfigurationError, match=rf"{row.key} must be <= {row.maximum:g}, got 1e\+300"):
            settings_of(f"{row.key}=1e300")
        with pytest.raises(ConfigurationError, match=rf"{row.key} must be <= "):
            RunSettings(**{row.name: row.maximum * 2})
        assert getattr(RunSettings(**{row.name: row.maximum}), row.name) == row.maximum


def parts():
    return assembly.assemble(get_registry(), model=("gaussian", {"dim": 3}), estimator="pmcsa", n_samples=4)


def test_the_engine_takes_one_settings_value_or_its_fields_as_keywords():
    one = run(*parts().run_args(), Settings(n_iters=30, seed=1, eval_every=10, eval_schedule="geometric"))
    keywords = run(*parts().run_args(), n_iters=30, seed=1, eval_every=10, eval_schedule="geometric")
    assert np.array_equal(one.params, keywords.params) and len(one.history) == len(keywords.history) == 4
    with pytest.raises(TypeError, match="not both"):
        run(*parts().run_args(), Settings(n_iters=30), seed=1)


def test_the_engine_runs_a_jobs_settings_as_they_are():
    job = settings_of("n_iters=20", "eval_every=10", "seed=2", "diagnostics.every=5", "diagnostics.replicas=3")
    built = job.assemble(get_registry())
    direct = run(*built.run_args(), Settings(n_iters=20, eval_every=10, seed=2, diagnostics_every=5,
                                             diagnostics_replicas=3))
    assert np.array_equal(run(*job.assemble(get_registry()).run_args(), job).params, direct.params)


def test_the_default_kernel_is_resolved_once_per_job_and_read_from_then_on(monkeypatch):
    registry = get_registry()
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[1])
        return resolve_kernel(*args, **kwargs)

    monkeypatch.setattr("mcsa_bench.jobs.config.resolve_kernel", counted)
    monkeypatch.setattr(assembly, "resolve_kernel", counted)
    job = settings_of("estimator=msc", "experiment=logistic_pima", "size=tiny").resolve(registry)
    effective = job.effective_config(registry)
    job.assemble(registry)
    assert job.config_hash(registry) == job.identity
    assert calls == ["msc"]  # assemble, the hash and the effective config read the choice
    assert job.kernel == KernelChoice("cis", {"defensive": 0.0, "defensive_df": 1.0}, "cis")
    assert effective["kernel"] == {"name": "cis", "defensive": 0.0, "defensive_df": 1.0}
    assert key_setting_tags(job, effective)["method"] == "msc"
    hmc = settings_of("estimator=msc", "kernel=hmc", "experiment=logistic_pima", "size=tiny").resolve(registry)
    assert key_setting_tags(hmc, hmc.effective_config(registry))["method"] == "msc+hmc"


def test_resolve_kernel_decides_the_kernel_and_refuses_what_does_not_fit():
    registry = get_registry()
    assert resolve_kernel(registry, "pmcsa", None).name == "imh"
    assert resolve_kernel(registry, "pmcsa", ("imh", {"defensive": 0.1})).params["defensive"] == 0.1
    assert resolve_kernel(registry, "elbo", None) == KernelChoice(None, {}, None)
    assert resolve_kernel(registry, "jsa", "cis") == KernelChoice("cis", {"defensive": 0.0, "defensive_df": 1.0}, "imh")
    with pytest.raises(ConfigurationError, match="estimator 'elbo' uses no kernel"):
        resolve_kernel(registry, "elbo", "imh")
    with pytest.raises(ConfigurationError, match="kernel 'imh' does not fit. Kernels that fit: cis"):
        resolve_kernel(registry, "msc_rb", "imh")
