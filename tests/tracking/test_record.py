"""The run record (mcsa_bench.tracking.record): the config hash against values computed by the code
it moved from, the method-naming rule, the key-setting tags, the metric catalogue and the encodings of
what runs store for a report (metric declarations, a sweep's job list, a paper block)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mcsa_bench.tracking import record
from mcsa_bench.tracking.record import (
    DIAGNOSTIC,
    HIGHER,
    LOWER,
    METRICS,
    RESULT,
    MetricSpec,
    SweepJobs,
    config_hash,
    decode_metric_spec,
    decode_sweep_jobs,
    encode_metric_spec,
    encode_sweep_jobs,
    method_name,
    metric_spec,
)

EFFECTIVE = {"seed": 3, "n_iters": 100, "n_samples": 10, "eval_every": 10, "eval_schedule": "linear", "threads": 2,
             "resume": True, "checkpoint_every": 5, "tracking": {"uri": "sqlite:///x.db"}, "paper": {"source": "p"},
             "max_rows": None, "diagnostics": {"every": 0, "replicas": 64},
             "model": {"name": "logistic", "dataset": "pima"}, "family": {"name": "meanfield_gaussian"},
             "kernel": {"name": "imh"}, "estimator": {"name": "pmcsa"}, "optimizer": {"name": "adam", "lr": 0.01}}
#: a tag value's longest length in MLflow's stores
TAG_LENGTH = 8000


def test_the_config_hash_is_the_one_runs_were_recorded_with():
    """The digests of mcsa_bench.jobs.config.config_hash before it moved here (computed with that code):
    resume and the reports of older stores find runs by them."""
    assert config_hash(EFFECTIVE) == "babadbca51b1c3ca"
    assert config_hash({**EFFECTIVE, "eval_schedule": "geometric"}) == "9865eae573f231bf"
    # the keys that compute nothing, at any value, leave it alone; a computing key changes it
    assert (
        config_hash({**EFFECTIVE, "threads": 1, "resume": False, "tracking": {}, "paper": None}) == "babadbca51b1c3ca"
    )
    assert config_hash({k: v for k, v in EFFECTIVE.items() if k != "eval_schedule"}) == "babadbca51b1c3ca"
    assert config_hash({**EFFECTIVE, "seed": 4}) != "babadbca51b1c3ca"


def test_the_method_is_the_scheme_unless_its_kernel_is_not_the_default():
    assert method_name("msc", "cis", "cis") == "msc" and method_name("msc", "hmc", "cis") == "msc+hmc"
    assert method_name("elbo", "", None) == "elbo"  # no kernel
    assert method_name("plugin_scheme", "imh", None) == "plugin_scheme+imh"  # no default known


def test_key_setting_tags_are_the_params_they_stand_for():
    tags = record.key_setting_tags(EFFECTIVE, default_kernel="imh")
    assert tags == {
        "method": "pmcsa",
        "model": "logistic",
        "dataset": "pima",
        "scheme": "pmcsa",
        "kernel": "imh",
        "family": "meanfield_gaussian",
        "optimizer": "adam",
        "lr": "0.01",
        "N": "10",
        "T": "100",
        "seed": "3",
    }
    params = record.flatten(EFFECTIVE)
    assert all(tags[key] == params[param] for key, param in record.KEY_SETTINGS.items())
    without_kernel = record.key_setting_tags({**EFFECTIVE, "kernel": None, "estimator": {"name": "elbo"}}, None)
    assert (without_kernel["method"], without_kernel["kernel"]) == ("elbo", "")


def test_every_tag_name_is_defined_once():
    names = [value for name, value in vars(record).items() if name.endswith("_TAG")]
    assert len(names) == len(set(names)) and "error" in names and "mcsa_bench.config_hash" in names


def test_the_catalogue_describes_every_metric_with_a_kind_and_a_direction():
    assert [m for m, spec in METRICS.items() if spec.kind == RESULT][:3] == ["test_lpd", "test_accuracy", "test_rmse"]
    assert {m for m in (*record.ENGINE_METRICS, "log_z_khat") if METRICS[m].kind == DIAGNOSTIC} == {
        *record.ENGINE_METRICS, "log_z_khat"}
    assert all(METRICS[m].kind == RESULT and METRICS[m].direction == LOWER for m in record.REFERENCE_METRICS)
    assert record.axis_label(METRICS["test_lpd"], "test_lpd") == "test log predictive density (nats per point)"
    assert record.axis_label(METRICS["test_accuracy"], "test_accuracy") == "test accuracy"  # no unit, no parentheses
    assert record.axis_label(MetricSpec(DIAGNOSTIC), "jump") == "jump"  # no label: the name
    # a metric nobody described is a diagnostic without a direction, whatever its name says
    assert metric_spec("test_error_plugin") == MetricSpec(DIAGNOSTIC, None, "test_error_plugin")


def test_a_metric_declaration_survives_its_tag_and_bad_ones_are_refused():
    spec = MetricSpec(DIAGNOSTIC, LOWER, "leapfrog step size; adapted", "units of z")
    assert encode_metric_spec(spec) == "diagnostic;lower;units of z;leapfrog step size; adapted"
    assert decode_metric_spec(encode_metric_spec(spec)) == spec
    assert decode_metric_spec("result;higher;;ESS per second") == MetricSpec(RESULT, HIGHER, "ESS per second")
    assert decode_metric_spec("diagnostic;none;;HMC step size ε") == MetricSpec(DIAGNOSTIC, None, "HMC step size ε")
    for text in ("result;higher;nats", "outcome;higher;;x", "result;up;;x", "result;none;;a result needs a direction"):
        with pytest.raises(ValueError):
            decode_metric_spec(text)
    with pytest.raises(ValueError, match="holds no ';'"):
        encode_metric_spec(MetricSpec(RESULT, HIGHER, "x", "a;b"))


def test_declarations_are_stored_for_unknown_metrics_only_and_read_back():
    tags = record.metric_spec_tags({"jump_distance": MetricSpec(DIAGNOSTIC, HIGHER, "mean jump distance"),
                                    "test_lpd": MetricSpec(DIAGNOSTIC, None, "overridden")})
    assert tags == {"mcsa_bench.metric.jump_distance": "diagnostic;higher;;mean jump distance"}
    declared = record.declared_metric_specs([tags, {"mcsa_bench.metric.broken": "nonsense", "other": "x"}])
    assert declared == {"jump_distance": MetricSpec(DIAGNOSTIC, HIGHER, "mean jump distance")}  # a malformed one: none
    assert metric_spec("test_lpd", {"test_lpd": MetricSpec(DIAGNOSTIC, None, "x")}) == METRICS["test_lpd"]


def test_the_shipped_components_declare_their_metrics_as_the_catalogue_describes_them():
    """The catalogue holds what stores written before declarations were stored need; the components'
    own declarations (api.MetricSpec) must not say otherwise."""
    from mcsa_bench import get_registry

    registry = get_registry()
    injected = {"estimator": {"kernel": None, "n_samples": 10}, "model": {}, "kernel": {}}
    declared, built = {}, set()
    for kind in ("kernel", "estimator", "model"):
        for component in registry.components(kind):
            if component.plugin.distribution not in (None, "mcsa-bench"):
                continue  # a plugin's metrics are its own
            try:
                declared.update(registry.build(kind, component.name, **injected[kind]).metric_specs())
                built.add(component.name)
            except Exception:
                continue  # a scheme that needs a kernel: its metrics come from the kernel's declaration
    assert {"imh", "cis", "hmc", "snis", "logistic", "gaussian"} <= built
    assert declared and set(declared) <= set(METRICS), sorted(set(declared) - set(METRICS))
    assert {name: spec for name, spec in declared.items() if METRICS[name] != spec} == {}


def test_a_sweeps_job_list_survives_its_artifact():
    jobs = SweepJobs(("model=gaussian seed=0", "model.x=[1, 2] seed=1"), True, ("0123456789abcdef", "fedcba9876543210"))
    assert decode_sweep_jobs(encode_sweep_jobs(jobs)) == jobs
    assert decode_sweep_jobs(encode_sweep_jobs(SweepJobs(jobs.overrides, False))).config_hashes == ()
    with pytest.raises(ValueError, match="a config hash per job"):
        SweepJobs(jobs.overrides, True)
    for text in ("", "[]", '{"jobs": ["a"], "resume": true, "config_hashes": []}', '{"jobs": []}'):
        with pytest.raises(ValueError, match="sweep_jobs.json is not a sweep's job list"):
            decode_sweep_jobs(text)


def test_every_shipped_paper_block_fits_a_tag_and_reads_back():
    experiments = Path(record.__file__).parents[2] / "conf" / "experiment"
    papers = [yaml.safe_load(path.read_text())["paper"] for path in sorted(experiments.glob("*.yaml"))
              if "paper" in (yaml.safe_load(path.read_text()) or {})]
    assert papers  # the logistic regression experiments have them
    for paper in papers:
        text = record.encode_paper(paper)
        assert len(text) < TAG_LENGTH and record.decode_paper({record.PAPER_TAG: text}) == paper
    assert record.decode_paper({}) is None


def test_the_commands_read_tracking_uri_one_way():
    from mcsa_bench.api import ConfigurationError
    from mcsa_bench.tracking.store import DEFAULT_TRACKING_URI, tracking_uri_of

    assert tracking_uri_of([], "ui") == DEFAULT_TRACKING_URI
    assert tracking_uri_of(["tracking.uri=sqlite:///a.db", "tracking.uri=http://127.0.0.1:5000"], "ui") == "http://127.0.0.1:5000"
    for bad in ("tracking.uri=", "model=gaussian", "tracking.experiment=x"):
        with pytest.raises(
            ConfigurationError, match=rf"^report takes tracking.uri=URI as its only key=value argument, got '{bad}'$"
        ):
            tracking_uri_of([bad], "report")


def test_a_parameter_added_later_keeps_earlier_runs_hashes_at_its_default():
    """radon's parameterization came after radon runs were recorded: at its default (centred) the hash is the
    one those runs have, so resume finds them; non-centred is another computation, another hash."""
    before = {"seed": 0, "model": {"name": "radon", "dataset": "radon", "max_rows": None}}
    centred = {**before, "model": {**before["model"], "parameterization": "centred"}}
    noncentred = {**before, "model": {**before["model"], "parameterization": "noncentred"}}
    assert record.config_hash(centred) == record.config_hash(before) != record.config_hash(noncentred)
