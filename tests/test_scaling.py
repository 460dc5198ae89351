"""Sweeps beyond one process, for real: a local Ray cluster on 127.0.0.1 with tracking to an
`mlflow server` on 127.0.0.1 (docs/scaling.md). Needs the `ray` extra (part of `dev`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support import MlflowServer, free_port

pytestmark = pytest.mark.slow
# Ray's usage statistics would go to the internet; the cluster listens on 127.0.0.1 only, and this test
# runs it without Ray's token authentication (default since Ray 2.5x: the client would need the token file).
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


@pytest.fixture
def ray_cluster_and_server(tmp_path, store_in):
    """`ray start --head` on 127.0.0.1 with two worker CPUs, in a private temp dir, and an `mlflow server`
    started while Ray starts (each takes seconds of waiting); both stopped afterwards."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="the 'ray' extra is not installed")
    ray = shutil.which("ray", path=os.path.dirname(sys.executable))
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    port = free_port()
    env = {**os.environ, **RAY_ENV}
    log = open(tmp_path / "ray-start.log", "w")  # a file, not a pipe: Ray's daemons could inherit a pipe
    # a session of its own: Ray's daemons and workers stay in its process group, which the end kills
    starting = subprocess.Popen([ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                                 "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
                                 f"--temp-dir={temp}"], stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    server = MlflowServer(store_in(tmp_path, "server.db"))  # its database ready-made
    try:
        server.start()
        assert starting.wait(timeout=300) == 0, (tmp_path / "ray-start.log").read_text()
        yield f"127.0.0.1:{port}", server
    finally:
        log.close()
        server.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(starting.pid, signal.SIGKILL)  # what `ray stop --force` does, without its 4 s of imports
        starting.wait()
        if _processes_mentioning(temp):  # a Ray process that left the group
            subprocess.run([ray, "stop", "--force"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def _processes_mentioning(text: str) -> list[int]:
    """Live processes (zombies excluded: ``process_token``) whose command line contains ``text``."""
    from mcsa_bench.tracking.lifecycle import process_token

    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if text.encode() in cmdline.read_bytes() and process_token(int(cmdline.parent.name)) is not None:
                found.append(int(cmdline.parent.name))
    return found


def test_a_sweep_runs_on_a_local_ray_cluster_tracked_by_an_mlflow_server(ray_cluster_and_server, tmp_path):
    ray_cluster, server = ray_cluster_and_server
    result = subprocess.run(
        [sys.executable, "-m", "mcsa_bench.cli", "run", "-m", "hydra/launcher=ray",
         f"+hydra.launcher.ray.init.address={ray_cluster}", "+hydra.launcher.ray.init.object_store_memory=null",
         f"tracking.uri={server.uri}", "estimator=msc,pmcsa", "seed=0,1", "model.dim=3", "n_iters=200",
         "eval_every=50"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900, env={**os.environ, **RAY_ENV})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 jobs, 4 FINISHED" in result.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server.uri)
    runs = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
    parent, = [r for r in runs if r.data.tags.get("mcsa_bench.role") == "sweep"]
    jobs = [r for r in runs if r.data.tags.get("mcsa_bench.role") == "job"]
    assert len(jobs) == 4 and parent.info.status == "FINISHED"
    for run in jobs:
        assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert [m.step for m in client.get_metric_history(run.info.run_id, "kl_inclusive")] == [0, 50, 100, 150, 200]
        assert int(run.data.tags["mcsa_bench.pid"]) != os.getpid()  # ran in a Ray worker process
        assert {"variational.npz", "metrics.csv"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
