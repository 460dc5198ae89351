"""The command line's answer to bad inputs and interruptions, through the CLI's main in the test's
process (tests.support.cli_in_process): every bad input is refused with one line naming the problem,
exit status 2, no traceback and no run (docs/reliability.md); an interrupted command names its
signal. tests/e2e/test_reliability.py tries a few bad inputs in real processes."""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path

import pytest

from tests.support import CSV_CASES, cli_in_process, free_port, statuses, write_file

CONFIG_FILES = {  # files of --config-dir cases, under {tmp}
    "bad_yaml/model/bad.yaml": b"name: gaussian\ndim: [1, 2\n  x: : y\n",
    "latin1/model/bad.yaml": b"name: gaussian\ndim: 3  # caf\xe9\n",
    "env/env/evil.yaml": b"# @package _global_\nhydra:\n  job:\n    env_set:\n      LD_PRELOAD: /tmp/evil.so\n",
    "env/env/proxy.yaml": b"# @package _global_\nhydra:\n  job:\n    env_set:\n      HTTPS_PROXY: http://127.0.0.1:9\n",
    "env/env/threads.yaml": b"# @package _global_\nhydra:\n  job:\n    env_set:\n      OMP_NUM_THREADS: 1\n",
    # issue 39 item 1: logging group files, where overrides' checks never look
    "log/hydra/job_logging/truncate.yaml": (b"version: 1\nhandlers:\n  f:\n    class: logging.FileHandler\n"
                                            b"    filename: victim.txt\n    mode: w\nroot:\n  handlers: [f]\n"),
    "log/hydra/hydra_logging/truncate.yaml": (b"version: 1\nhandlers:\n  f:\n    class: logging.FileHandler\n"
                                              b"    filename: /tmp/victim.txt\n    mode: w\nroot:\n  handlers: [f]\n"),
    "log/hydra/job_logging/socket.yaml": (b"version: 1\nhandlers:\n  s:\n    class: logging.handlers.SocketHandler\n"
                                          b"    host: 10.0.0.1\n    port: 9\nroot:\n  handlers: [s]\n"),
    "log/hydra/job_logging/factory.yaml": b"version: 1\nfilters:\n  f:\n    (): os.system\n",
    "log/hydra/job_logging/stream.yaml": (b"version: 1\nhandlers:\n  c:\n    class: logging.StreamHandler\n"
                                          b"    stream: ext://evil.module.stream\n"),
    # issue 39: names that become paths, tags or run names take no control character
    "names/experiment/newline.yaml": b'# @package _global_\ntracking:\n  experiment: "a\\nb"\n',
    "names/experiment/rundir.yaml": b'# @package _global_\nhydra:\n  run:\n    dir: "outputs/a\\rb"\n',
    "names/experiment/jobname.yaml": b'# @package _global_\nhydra:\n  job:\n    name: "x\\u0007y"\n',
    "log/experiment/quiet.yaml": (b"# @package _global_\nhydra:\n  job_logging:\n    handlers:\n      file:\n"
                                  b"        filename: ${oc.env:HOME}/.bashrc\n"),
}


LONG_NAME = "d" * 5000


BAD_INPUTS = [  # (command, words the one-line error must contain); {tmp} is a scratch directory
    (["run", "estimator=bogus"], ["unknown estimator 'bogus'", "available: "]),
    (["run", "-m", "estimator=msc,bogus"], ["unknown estimator 'bogus'"]),
    (["run", "kernel=nope"], ["unknown kernel 'nope'"]),
    (["run", "estimator=msc_rb", "kernel=imh"], ["Kernels that fit: cis"]),
    (["run", "n_samples=0"], ["n_samples must be >= 1"]),
    (["run", "estimator=msc", "n_samples=1"], ["needs n_samples >= 2"]),
    (["run", "n_iters=0"], ["n_iters must be >= 1"]),
    (["run", "eval_every=0"], ["eval_every must be >= 1"]),
    (["run", "eval_schedule=log"], ["unknown eval_schedule 'log'; allowed: linear, geometric"]),
    (["run", "optimizer.lr=-0.1"], ["lr must be a positive number"]),
    (["run", "optimizer.lr=0"], ["lr must be a positive number"]),
    (["run", "optimizer.lr=inf"], ["optimizer.lr must be a finite number"]),
    (["run", "optimizer.lr=nan"], ["optimizer.lr must be a finite number"]),
    (["run", "family.init_mean=nan"], ["family.init_mean must be a finite number"]),
    (["run", "model.dim=abc"], ["model.dim: Value 'abc'", "Integer"]),
    (["run", "model.dim=0"], ["dim must be >= 1"]),
    (["run", "n_iters=2.5"], ["n_iters: Value '2.5'"]),
    (["run", "n_samples=1e12"], ["n_samples: Value", "could not be converted to Integer"]),
    (["run", "n_samples=abc"], ["n_samples: Value 'abc'"]),
    (["run", "n_samples=1000000000"], ["n_samples=1000000000 needs about", "available", "Lower n_samples"]),
    (["run", "seed=-1"], ["seed must be >= 0, got -1"]),
    (["run", "model.foo=1"], ["model 'gaussian' has no parameter 'foo'", "allowed: dim, nu, seed"]),
    (["run", "model.dimm=5"], ["did you mean 'dim'?"]),
    (["run", "estimater=pmcsa"], ["unknown key 'estimater'", "did you mean 'estimator'?"]),
    (["run", "model=gaussin"], ["unknown model 'gaussin'", "did you mean 'gaussian'?"]),
    (["run", "optimizer=adamm"], ["did you mean 'adam'?"]),
    (["run", "tracking.url=x"], ["did you mean 'uri'?"]),
    (["run", "kernel=imh", "kernel.foo=1"], ["kernel 'imh' has no parameter 'foo'"]),
    (["run", "estimator.foo=1"], ["estimator 'pmcsa' has no parameter 'foo'"]),
    (["run", "model.nu=-5"], ["nu must be > -1"]),
    (["run", "-m", "seed=0,1", "optimizer.lr=0.1,-1"], ["job #1 (seed=0 optimizer.lr=-1)"]),
    (
        ["run", "-m", "model=gaussian,logistic", "model.dim=5"],
        ["job #1 (model=logistic model.dim=5)", "model 'logistic' has no parameter 'dim'"],
    ),
    (["run", "+foo=1"], ["unknown key 'foo'"]),
    (["run", "=3"], ["has no key"]),
    (["run", "seed"], ["cannot read the override 'seed'"]),
    (["run", "+hydra.callbacks.evil._target_=os.system"], ["arbitrary code", "MCSA_BENCH_ALLOW_TARGETS"]),
    (["run", "hydra.launcher._target_=os.system"], ["arbitrary code"]),
    (["run", "experiment=nosuch"], ["unknown experiment 'nosuch'"]),
    # a grid without -m would run its first job alone
    (["run", "experiment=logistic"], ["is a grid of 2,100 jobs (3 experiment x 7 method x 100 seed)",
                                      "mcsa-bench run -m experiment=logistic hydra/launcher=joblib"]),
    (["run", "experiment=posterior_accuracy", "size=smoke"], ["is a grid of 48 jobs", "run -m experiment=posterior"]),
    (["run", "size=huge"], ["unknown size 'huge'"]),
    (["run", "hydra/launcher=nosuch"], ["unknown hydra/launcher 'nosuch'"]),
    (
        ["run", "optimizer.schedule=cosin"],
        ["schedule must be one of constant, inverse, inverse_sqrt, cosine, step; got 'cosin'"],
    ),
    (["run", "family.scale=expp"], ["scale must be one of softplus, exp; got 'expp'"]),
    (["run", "optimizer=momentum", "optimizer.momentum=1.5"], ["momentum must lie in [0, 1)"]),
    (["run", "optimizer.average_from=1.5"], ["average_from must lie in (0, 1)"]),
    (["run", "estimator=elbo", "kernel=imh"], ["estimator 'elbo' uses no kernel", "leave kernel unset"]),
    (["run", "estimator=rws", "kernel=imh"], ["needs a gradient-based kernel", "Kernels that fit: ex2mcmc, hmc, mala"]),
    (
        ["run", "estimator=elbo", "family=meanfield_student_t", "family.learn_df=true"],
        ["needs a reparameterizable family", "learn_df=false"],
    ),
    (["run", "kernel=hmc", "kernel.mass=dense"], ["mass must be one of identity, diagonal; got 'dense'"]),
    (["run", "kernel=imh", "kernel.defensive=1.0"], ["defensive", "must be in [0, 1), got 1.0"]),
    (["run", "model=logistic", "model.dataset=nosuch"], ["unknown dataset 'nosuch'"]),
    (["run", "model=logistic", "model.dataset={tmp}/missing.csv"], ["does not exist"]),
    (["run", "model=logistic", "model.test_fraction=1.5"], ["test_fraction must lie in [0, 1)"]),
    (["run", "tracking.uri=http://"], ["names no host"]),
    (["run", "tracking.uri=nosuch://x"], ["unsupported scheme 'nosuch'"]),
    (["run", "tracking.uri=mlruns"], ["unsupported scheme"]),
    (["run", "tracking.uri=sqlite:///{tmp}"], ["is a directory"]),
    (["run", "tracking.uri=sqlite:////proc/mcsa/mlflow.db"], ["cannot create"]),
    (["run", "tracking.uri=http://127.0.0.1:{port}"], ["cannot reach the tracking server", "within 3 s"]),
    (["run", "tracking.uri=http://127.0.0.1:99999"], ["Port out of range"]),
    (
        ["run", "tracking.uri=postgresql+nosuch://mlflow:s3cret@127.0.0.1/mlflow"],
        ["Can't load plugin", "postgresql.nosuch", "mlflow:***@"],
    ),
    (["run", "tracking.experiment="], ["tracking.experiment must be a non-empty name"]),
    (["run", "tracking.experiment=gone"], ["was deleted", "mlflow experiments restore"]),
    (["run", "-m", "tracking.experiment=a,b"], ["cannot vary within a sweep"]),
    (["run", "--config-name", "other"], ["--config-path/--config-name are not supported"]),
    (["frobnicate"], ["unknown command 'frobnicate'"]),
    # a near miss names the closest choice (difflib, ignoring case)
    (["raport"], ["unknown command 'raport' (did you mean 'report'?)"]),
    (["run", "estimator=MSC"], ["unknown estimator 'MSC' (did you mean 'msc'?)", "available: "]),
    (["run", "model=logistic", "model.dataset=pmia"], ["unknown dataset 'pmia' (did you mean 'pima'?)"]),
    (["check", "kernal"], ["unknown component kind 'kernal' (did you mean 'kernel'?)", "kinds: model, family, kernel"]),
    (["check", "kernal", "imh"], ["unknown component kind 'kernal' (did you mean 'kernel'?)"]),
    (["check", "kernel", "imhh"], ["unknown kernel 'imhh' (did you mean 'imh'?)"]),
    (["report", "--metrik", "test_lpd"], ["unrecognized arguments: --metrik", "(did you mean '--metric'?)"]),
    # a list of values with a space: the shell made two arguments of it
    (["run", "-m", "estimator=msc,", "pmcsa"], ["split at a space", "write estimator=msc,pmcsa without spaces"]),
    (["run", "-m", "estimator=msc", ",pmcsa"], ["split at a space", "write estimator=msc,pmcsa without spaces"]),
    (["plugins", "--bogus"], ["plugins takes only --json"]),
    (["ui", "--port", "abc"], ["--port needs a number"]),
    (["ui", "tracking.uri=sqlite:///{tmp}/none.db"], ["no MLflow store at"]),
    (["runs"], ["no experiment 'mcsa-bench' in the store; experiments: "]),
    (["runs", "--limit", "many"], ["runs: argument --limit: invalid int value: 'many'"]),
    (["sync"], ["sync needs the output directories"]),
    (["sync", "{tmp}"], ["holds no run.json"]),
    # ui, runs, sync and report read the store the same way (mcsa_bench.tracking.store.tracking_uri_of)
    *[
        ([*command, "model=gaussian"], [f"{command[0]} takes tracking.uri=URI as its only key=value argument"])
        for command in (["ui"], ["runs", "--fix-stale"], ["sync", "{tmp}"], ["report"])
    ],
    *[
        (["run", "model=logistic", f"model.dataset={{tmp}}/{name}.csv"], words)
        for name, (_, words) in CSV_CASES.items()
    ],
    # limits of the store, of Python and of the file system
    (["run", f"tracking.experiment={'e' * 600}"], ["tracking.experiment", "at most 500 characters", "got 600"]),
    (
        ["run", "model=logistic", f"model.dataset={'x' * 7000}.csv"],
        ["model.dataset is 7004 characters long", "at most 6000"],
    ),
    (["run", f"seed={'9' * 5000}"], ["holds an integer too long to read", "64 bits"]),
    (["run", f"seed={'9' * 30}"], ["seed has 30 digits", "64 bits"]),
    (["run", "-m", f"model.dim=2,{'9' * 20}"], ["job #1", "model.dim has 20 digits"]),
    (["run", f"{'k' * 10_000}=1"], ["has a key of 10000 characters", "at most 250"]),
    (["run", "paper={source:x}"], ["the overrides cannot be applied"]),
    (
        ["run", "diagnostics.every=1", "diagnostics.replicas=1000000000"],
        ["diagnostics.replicas=1000000000 needs about", "per copy of the chains", "Lower diagnostics.replicas"],
    ),
    (
        ["run", "hydra.run.dir=/proc/mcsa/run"],
        ["hydra.run.dir: the job directory '/proc/mcsa/run' cannot be created", "(/proc:"],
    ),
    (["run", "hydra.run.dir={tmp}/two_rows.csv/run"], ["two_rows.csv: not a directory"]),
    (["run", f"hydra.run.dir={{tmp}}/{LONG_NAME}"], ["hydra.run.dir", "characters)", "names are at most"]),
    (["run", "-m", "seed=0,1", "hydra.sweep.dir=/proc/mcsa/sweep"], ["hydra.sweep.dir/subdir", "'/proc/mcsa/sweep/0'"]),
    (["run", "-m", "seed=0,1", f"hydra.sweep.subdir={'s' * 300}"], ["hydra.sweep.dir/subdir", "names are at most"]),
    (["run", "-m", "seed=0,1", "hydra.sweep.subdir=/proc/mcsa/${hydra.job.num}"], ["'/proc/mcsa/0'", "(/proc:"]),
    (["run", f"hydra.job.name={'j' * 300}"], ["hydra.run.dir: the job directory", "names are at most"]),
    (["run", "-m", "seed=0,1", f"hydra.sweep.dir={{tmp}}/{LONG_NAME}"], ["hydra.sweep.dir", "names are at most"]),
    (["run", "tracking.outage_seconds=1e300"], ["tracking.outage_seconds must be <= 604800, got 1e+300"]),
    (["run", "tracking.outage_seconds=1e9"], ["tracking.outage_seconds must be <= 604800"]),
    # control characters in names that become paths, tags or run names
    (["run", 'tracking.experiment="a\x1b[2Jb"'], ["the override", "holds the control character U+001B"]),
    (["run", "hydra.job.name=a\tb"], ["holds the control character U+0009"]),
    (["run", "--config-dir", "{tmp}/names", "experiment=newline"], ["tracking.experiment 'a\\nb' holds", "U+000A"]),
    (["run", "--config-dir", "{tmp}/names", "experiment=rundir"], ["hydra.run.dir: the job directory", "U+000D"]),
    (["run", "--config-dir", "{tmp}/names", "experiment=jobname"], ["hydra.job.name 'x\\x07y.log'", "U+0007"]),
    # config directories
    (["run", "--config-dir", "{tmp}/nosuch"], ["--config-dir", "nosuch' does not exist"]),
    (["run", "--cfg", "hydra", "--config-dir", "{tmp}/nosuch"], ["--config-dir", "nosuch' does not exist"]),
    (["run", "--cfg", "hydra", f"seed={'9' * 5000}"], ["holds an integer too long to read"]),
    (["run", "--cfg", "bogus"], ["argument --cfg/-c: invalid choice: 'bogus'", "mcsa-bench run --help"]),
    (["run", "--info", "bogus"], ["argument --info/-i: invalid choice: 'bogus'"]),
    (["run", "--cfg", "hydra", "++hydra.job.env_set.LD_PRELOAD=/tmp/x"], ["sets LD_PRELOAD"]),
    (["run", "--config-dir", "{tmp}/two_rows.csv"], ["two_rows.csv' is not a directory"]),
    (
        ["run", "--config-dir", "{tmp}/bad_yaml", "model=bad"],
        ["config file", "bad_yaml/model/bad.yaml, line 3", "not valid YAML"],
    ),
    (
        ["run", "--config-dir", "{tmp}/latin1", "model=bad"],
        ["config file", "latin1/model/bad.yaml", "not UTF-8", "0xe9"],
    ),
    # configuration that runs code or writes files (MCSA_BENCH_ALLOW_TARGETS=1 allows it)
    (["run", "+hydra.job_logging.handlers.x.class=logging.FileHandler"], ["'class' names a class or callable"]),
    (["run", "class=subprocess.Popen"], ["'class' names a class or callable", "MCSA_BENCH_ALLOW_TARGETS"]),
    (["run", "model._target_=os.system"], ["'_target_' names a class or callable"]),
    (
        ["run", "+hydra.job_logging.handlers.x={class:logging.FileHandler,filename:/tmp/F,mode:w}"],
        ["'class' names a class"],
    ),
    (
        ["run", "-m", "+hydra.job_logging.handlers.x={level:INFO},{class:logging.FileHandler}"],
        ["'class' names a class"],
    ),
    (["run", "hydra.job_logging.handlers.file.filename={tmp}/F"], ["names a file for a log handler to open"]),
    *[
        (["run", f"++hydra.job.env_set.{name}=/tmp/x"], [f"sets {name}: hydra.job.env_set may set only OMP_NUM"])
        for name in (
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "PYTHONPATH",
            "PYTHONSTARTUP",
            "PYTHONHOME",
            "PYTHONINSPECT",
            "PATH",
            "BASH_ENV",
            "MCSA_BENCH_ALLOW_TARGETS",
            # issue 39 item 2: where traffic and credentials go
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "NO_PROXY",
            "REQUESTS_CA_BUNDLE",
            "SSL_CERT_FILE",
            "CURL_CA_BUNDLE",
            "MLFLOW_TRACKING_URI",
            "MLFLOW_TRACKING_TOKEN",
            "MLFLOW_TRACKING_USERNAME",
            "MLFLOW_TRACKING_PASSWORD",
            "omp_num_threads",
        )
    ],
    (["run", "hydra.job.env_set={PYTHONBREAKPOINT:os.system}"], ["sets PYTHONBREAKPOINT"]),
    (["run", "+hydra.job={env_set:{LD_AUDIT:/tmp/x.so}}"], ["sets LD_AUDIT"]),
    (
        ["run", "--config-dir", "{tmp}/env", "+env=evil"],
        ["hydra.job.env_set.LD_PRELOAD: hydra.job.env_set may set only OMP_NUM_THREADS"],
    ),
    (["run", "--config-dir", "{tmp}/env", "+env=proxy"], ["hydra.job.env_set.HTTPS_PROXY", "may set only"]),
    (["run", "-m", "--config-dir", "{tmp}/env", "+env=threads,proxy"], ["job #1 (+env=proxy)", "HTTPS_PROXY"]),
    (
        ["run", "--config-dir", "{tmp}/log", "hydra/job_logging=truncate"],
        ["hydra.job_logging.handlers.f.filename: 'victim.txt' names a file", "allowed: ${hydra.runtime.output_dir}"],
    ),
    (["run", "--config-dir", "{tmp}/log", "hydra/hydra_logging=truncate"], ["hydra.hydra_logging.handlers.f.filename"]),
    (
        ["run", "--config-dir", "{tmp}/log", "hydra/job_logging=socket"],
        ["handlers.s.class: 'logging.handlers.SocketHandler' would make logging import", "may name only"],
    ),
    (["run", "--config-dir", "{tmp}/log", "hydra/job_logging=factory"], ["filters.f.(): 'os.system'"]),
    (["run", "--config-dir", "{tmp}/log", "hydra/job_logging=stream"], ["'ext://evil.module.stream'", "sys.stderr"]),
    (["run", "--config-dir", "{tmp}/log", "experiment=quiet"], ["handlers.file.filename: '${oc.env:HOME}/.bashrc'"]),
]


def _materialize(args: list[str], tmp_path: Path) -> list[str]:
    for name, (content, _) in CSV_CASES.items():
        write_file(tmp_path / f"{name}.csv", content)
    for name, content in CONFIG_FILES.items():
        write_file(tmp_path / name, content)
    port = free_port()
    return [a.replace("{tmp}", str(tmp_path)).replace("{port}", str(port)) for a in args]


@pytest.fixture(scope="module")
def template_store(tmp_path_factory, migrated_store):
    """A store with a deleted experiment 'gone', created once (schema creation takes seconds)."""
    from mlflow.tracking import MlflowClient

    database = tmp_path_factory.mktemp("template") / "mlflow.db"
    shutil.copy(migrated_store, database)
    client = MlflowClient(f"sqlite:///{database}")
    client.delete_experiment(client.create_experiment("gone"))
    return database


@pytest.fixture
def store_with_deleted_experiment(tmp_path, template_store):
    (tmp_path / "outputs").mkdir()
    shutil.copy(template_store, tmp_path / "outputs" / "mlflow.db")
    return tmp_path


def _case_id(args: list[str]) -> str:
    text = " ".join(args)
    return text if len(text) <= 100 else f"{text[:100]}...({len(text)})"


@pytest.mark.parametrize("args,words", BAD_INPUTS, ids=[_case_id(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_refused_with_one_line_and_no_run(args, words, store_with_deleted_experiment, monkeypatch):
    workdir = store_with_deleted_experiment
    scratch = workdir / "scratch"
    scratch.mkdir()
    argv = _materialize(args, scratch)
    before = _contents(workdir)
    result = cli_in_process(*argv, cwd=workdir, monkeypatch=monkeypatch)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result
    assert len(lines) == 1 and lines[0].startswith("mcsa-bench: error: "), result.stderr
    assert all(word in lines[0] for word in words), (words, lines[0])
    assert statuses(workdir) == []  # no run was created
    assert _contents(workdir) == before  # nor anything else


@pytest.mark.parametrize("command", [["runs"], ["runs", "--fix-stale"]])
def test_runs_help_is_its_usage_with_exit_0(command, tmp_path, monkeypatch):
    result = cli_in_process(*command, "--help", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0 and result.stdout.startswith("usage: mcsa-bench runs"), result
    assert "--fix-stale" in result.stdout


def _contents(workdir: Path) -> list[Path]:
    """The files and directories under ``workdir``, but the store's lock file (made on the store's
    first use, and kept: the store exists already here)."""
    return sorted(path for path in workdir.rglob("*") if path.name != "mlflow.db.lock")


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
@pytest.mark.parametrize("command", [["run"], ["runs"], ["runs", "--fix-stale"], ["report", "--sweep", "latest"],
                                     ["ui"], ["sync", "{tmp}"]], ids=" ".join)
def test_bad_input_a_damaged_store_is_refused_by_every_command_in_one_line(command, damage, tmp_path, migrated_store,
                                                                          monkeypatch):
    """issue 39 item 9: on a truncated store `runs --fix-stale` printed an 84-line traceback; every
    command now opens a SQLite store with its integrity check (PRAGMA quick_check)."""
    database = tmp_path / "outputs" / "mlflow.db"
    database.parent.mkdir()
    shutil.copy(migrated_store, database)
    size = database.stat().st_size
    with open(database, "r+b") as handle:
        if damage == "truncated":
            handle.truncate(size // 2)
        else:
            handle.seek(size // 2)
            handle.write(b"\xff" * 8192)
    (tmp_path / "run.json").write_text(  # sync's job directory
        json.dumps({"tracking_uri": f"sqlite:///{database}", "experiment": "Default"}))
    damaged = database.read_bytes()
    result = cli_in_process(*[a.replace("{tmp}", str(tmp_path)) for a in command], cwd=tmp_path,
                            monkeypatch=monkeypatch)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "is unusable: it fails SQLite's integrity check" in lines[0] and "Recovering a store" in lines[0]
    assert database.read_bytes() == damaged


def test_a_logging_file_of_a_config_dir_cannot_truncate_a_file(tmp_path, monkeypatch):
    """issue 39 item 1, its exact command: before, it exited 0 and emptied victim.txt."""
    logging = tmp_path / "c" / "hydra" / "job_logging"
    logging.mkdir(parents=True)
    (logging / "evil.yaml").write_bytes(CONFIG_FILES["log/hydra/job_logging/truncate.yaml"])
    (tmp_path / "victim.txt").write_text("precious\n")
    result = cli_in_process("run", "--config-dir", "c", "hydra/job_logging=evil", "n_iters=200", cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert result.returncode == 2 and "names a file for a log handler to open" in result.stderr
    assert (tmp_path / "victim.txt").read_text() == "precious\n"


def test_a_database_without_its_driver_is_refused_naming_the_extra_and_hiding_the_password(
        store_with_deleted_experiment, monkeypatch):
    workdir = store_with_deleted_experiment
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the postgres extra were not installed
    result = cli_in_process("run", "tracking.uri=postgresql://mlflow:s3cret@127.0.0.1:1/mlflow", cwd=workdir,
                            monkeypatch=monkeypatch)
    line, = result.stderr.strip().splitlines()
    assert result.returncode == 2 and line.startswith("mcsa-bench: error: tracking.uri 'postgresql://mlflow:***@")
    assert "the postgresql driver is not installed" in line and "pip install 'mcsa-bench[postgres]'" in line
    assert "s3cret" not in result.stdout + result.stderr
    assert statuses(workdir) == []


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_an_interrupted_command_names_the_signal(signum, code, tmp_path, monkeypatch):
    from mcsa_bench import cli
    from mcsa_bench.tracking.lifecycle import Terminated

    def interrupted(argv):
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)  # as Ctrl-C or the handler raises

    monkeypatch.setitem(cli.COMMANDS, "run", interrupted)
    result = cli_in_process("run", cwd=tmp_path, monkeypatch=monkeypatch)
    assert (result.returncode, result.stderr) == (code, f"mcsa-bench: interrupted ({signum.name})\n")
