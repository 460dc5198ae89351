"""`mcsa-bench server` for real: MLflow's server on a private PostgreSQL, with authentication, on
127.0.0.1 only; a run tracked through it with credentials, refused without them (docs/scaling.md §10)."""

from __future__ import annotations

import base64
import os
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support import answers, cli, free_port, wait_for

PASSWORD = "a-long-test-password-for-the-admin"


def status_of(url: str, user: str | None = None, password: str | None = None) -> int:
    request = urllib.request.Request(url)
    if user is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the sockets listening on ``port`` (/proc/net/tcp and tcp6, hex)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, local_port = local.rsplit(":", 1)
            if state == "0A" and int(local_port, 16) == port:
                found.add(address)
    return found


def start_server(database: str, port: int, password: str, directory: Path) -> subprocess.Popen:
    env = {**os.environ, "MLFLOW_AUTH_ADMIN_PASSWORD": password}
    return subprocess.Popen(
        [sys.executable, "-m", "mcsa_bench.cli", "server", f"tracking.uri={database}", "--auth",
         "--port", str(port), "--workers", "1", "--artifacts-destination", str(directory / "state" / "artifacts")],
        cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


@pytest.mark.slow  # a PostgreSQL server, an MLflow server with its auth app, one tracked run: about 40 s
def test_the_shared_server_on_postgresql_authenticates_and_listens_on_loopback_only(postgres, tmp_path):
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    database = postgres.create_database()
    server = start_server(database, port, PASSWORD, tmp_path)
    try:
        wait_for(lambda: answers(f"{uri}/health") or server.poll() is not None, what="the shared server")
        assert server.poll() is None, server.stdout.read()
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, nothing else
        search = f"{uri}/api/2.0/mlflow/experiments/search?max_results=10"
        assert status_of(search) == 401
        assert status_of(search, "admin", "wrong-password") == 401
        assert status_of(search, "admin", PASSWORD) == 200
        auth_db = tmp_path / "state" / "basic_auth.db"  # users and permissions beside the artifacts, the user's alone
        assert auth_db.is_file() and stat.S_IMODE(auth_db.stat().st_mode) == 0o600

        run = ["run", "model.dim=2", "n_iters=20", "eval_every=10", f"tracking.uri={uri}"]
        refused = cli(*run, cwd=tmp_path)
        assert refused.returncode != 0
        tracked = cli(*run, cwd=tmp_path, env={"MLFLOW_TRACKING_USERNAME": "admin",
                                              "MLFLOW_TRACKING_PASSWORD": PASSWORD})
        assert tracked.returncode == 0, tracked.stderr
        from mlflow.tracking import MlflowClient

        os.environ.update(MLFLOW_TRACKING_USERNAME="admin", MLFLOW_TRACKING_PASSWORD=PASSWORD)
        try:
            client = MlflowClient(uri)
            runs = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
        finally:
            del os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]
        assert [r.info.status for r in runs] == ["FINISHED"] and "kl_inclusive" in runs[0].data.metrics
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=60)
    assert not answers(f"{uri}/health")

    # issue 52: restarted on the same directory with another password, the banner named the new one, which got
    # 401, while the old one still worked: the stored password is now replaced, and the banner says so
    server = start_server(database, port, PASSWORD + "-rotated", tmp_path)
    try:
        banner = server.stdout.readline()
        wait_for(lambda: answers(f"{uri}/health") or server.poll() is not None, what="the restarted server")
        assert "which replaced the admin's earlier password" in banner, banner
        assert status_of(search, "admin", PASSWORD + "-rotated") == 200
        assert status_of(search, "admin", PASSWORD) == 401
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=60)
