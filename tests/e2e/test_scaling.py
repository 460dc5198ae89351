"""Sweeps beyond one process, for real: a local Ray cluster on 127.0.0.1 with tracking to an
`mlflow server` on 127.0.0.1, and 16 joblib workers writing through an `mlflow server` backed by a
private PostgreSQL (docs/scaling.md). Needs the `ray` and `postgres` extras (part of `dev`) and, for
the second, Debian's `postgresql` package (skipped without it)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.support import MlflowServer, free_port

pytestmark = pytest.mark.slow
# Ray's usage statistics would go to the internet; the cluster listens on 127.0.0.1 only (Ray's single-machine
# mode: with --node-ip-address=127.0.0.1 alone Ray takes the machine's address and listens on every interface),
# and this test runs it without Ray's token authentication (default since Ray 2.5x: the client would need the
# token file).
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
GUARD = Path(__file__).parent / "network_guard"  # sitecustomize.py: an audit hook on every socket
TCP_LISTEN = "0A"


@pytest.fixture
def ray_cluster_and_server(tmp_path, store_in):
    """`ray start --head` on 127.0.0.1 with two worker CPUs, in a private temp dir, and an `mlflow server`
    started while Ray starts (each takes seconds of waiting); both stopped afterwards."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="the 'ray' extra is not installed")
    ray = shutil.which("ray", path=os.path.dirname(sys.executable))
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    port = free_port()
    env = guarded({**os.environ, **RAY_ENV}, tmp_path / "network.log")  # Ray's API server asks 169.254.169.254
    log = open(tmp_path / "ray-start.log", "w")  # a file, not a pipe: Ray's daemons could inherit a pipe
    # a session of its own: Ray's daemons and workers stay in its process group, which the end kills
    starting = subprocess.Popen([ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                                 "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
                                 f"--temp-dir={temp}"], stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=tmp_path)  # the jobs' working directory: their outputs/
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
        # A Ray process that left the group (by its temp dir or its cluster's address; the agents end with
        # the raylet). Not `ray stop --force`: it kills every Ray process of the user, and so the instance
        # of a sweep another test runs at the same time (its raylet died so).
        for pid in _processes_mentioning(temp, f"127.0.0.1:{port}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def _processes_mentioning(*texts: str) -> list[int]:
    """Live processes (zombies excluded: ``process_token``) whose command line contains any of ``texts``."""
    from mcsa_bench.tracking.lifecycle import process_token

    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            line = cmdline.read_bytes()
            if any(text.encode() in line for text in texts) and process_token(int(cmdline.parent.name)) is not None:
                found.append(int(cmdline.parent.name))
    return found


def test_a_sweep_runs_on_a_local_ray_cluster_tracked_by_an_mlflow_server(ray_cluster_and_server, tmp_path):
    ray_cluster, server = ray_cluster_and_server
    result = subprocess.run(
        [sys.executable, "-m", "mcsa_bench.cli", "run", "-m", "hydra/launcher=ray",
         f"+hydra.launcher.ray.init.address={ray_cluster}", "+hydra.launcher.ray.init.object_store_memory=null",
         f"tracking.uri={server.uri}", "estimator=msc,pmcsa", "seed=0,1", "model.dim=3", "n_iters=200",
         "eval_every=50"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
        env=guarded({**os.environ, **RAY_ENV}, tmp_path / "network.log"))
    assert result.returncode == 0, result.stdout + result.stderr
    # nothing tried to leave the machine but the cluster's API server, which `ray start` cannot turn off (refused)
    elsewhere = [line for line in (tmp_path / "network.log").read_text().splitlines() if not line.startswith("guarded")]
    assert all("ray/dashboard/dashboard.py" in line for line in elsewhere), elsewhere
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


# ------------------------------------------------------------------ the sweep's own Ray instance



def test_the_ray_instance_a_sweep_starts_listens_and_connects_on_loopback_only(tmp_path, store_in):
    """`hydra/launcher=ray` without a cluster's address: while the sweep runs, every TCP and UDP socket
    of its process tree (the CLI, Ray's GCS, raylet, agents and workers, in C++ or Python) is sampled
    from /proc and must be bound and connected to loopback only; the network guard, loaded by every
    Python process of the tree, sees each connect, send and bind they make, however brief or failed,
    and none may go elsewhere; and Ray starts no dashboard or API server. A brief connect made in C++
    is seen only if it lasts through a sample; `strace -f` over a whole sweep found none (docs/reliability.md)."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="the 'ray' extra is not installed")
    log = tmp_path / "network.log"
    env = guarded({name: value for name, value in os.environ.items()
                   if name not in ("RAY_ADDRESS", "RAY_USAGE_STATS_ENABLED")}, log)
    output = open(tmp_path / "output.txt", "w+")
    sweep = subprocess.Popen([sys.executable, "-m", "mcsa_bench.cli", "run", "-m", "hydra/launcher=ray", "seed=0,1",
                              "model.dim=3", "n_iters=50", "eval_every=50"], cwd=store_in(tmp_path), env=env,
                             stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    seen: dict[int, tuple[str | None, str]] = {}  # pid -> (process token, command line)
    sockets: set[tuple] = set()
    try:
        while sweep.poll() is None:
            tree = _process_tree(sweep.pid)
            seen.update({pid: (_token(pid), _command_line(pid)) for pid in tree if pid not in seen})
            sockets |= {(pid, *entry) for pid, entry in _sockets(tree)}
            time.sleep(0.5)  # Ray's servers listen for the whole sweep; Python's brief sockets: the guard
    finally:
        _kill(sweep.pid, seen)
        output.seek(0)
        printed = output.read()
        output.close()
    assert sweep.returncode == 0 and "2 jobs, 2 FINISHED" in printed, printed
    commands = [command for _, command in seen.values()]
    for daemon in ("gcs_server", "raylet", "default_worker.py", "dashboard/agent.py"):
        assert any(daemon in command for command in commands), f"no {daemon} seen in {commands}"
    assert len([s for s in sockets if s[1].startswith("tcp") and s[2] == TCP_LISTEN]) >= 5  # GCS, raylet, ...
    guard = log.read_text().splitlines()
    assert any("default_worker.py" in line for line in guard if line.startswith("guarded"))  # Ray's workers too
    problems = [f"listening or connected elsewhere: {seen[pid][1][:70]}: {table} {local[0]}:{local[1]} -> "
                f"{remote[0]}:{remote[1]}" for pid, table, _, local, remote in sorted(sockets, key=str)
                if _leaves_loopback(local, remote)]
    problems += [f"seen by the guard: {line}" for line in guard if not line.startswith("guarded")]
    problems += [f"an API server: {command[:120]}" for command in commands if "dashboard/dashboard.py" in command]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)



def test_ray_imported_before_its_instance_could_be_kept_on_loopback_is_an_error():
    """Ray reads its single-machine mode once, on import: imported earlier, the instance would listen everywhere."""
    pytest.importorskip("ray", reason="the 'ray' extra is not installed")
    code = "import ray\nfrom mcsa_bench.jobs.localray import local_only\nwith local_only():\n    pass"
    env = {name: value for name, value in os.environ.items() if name != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1 and "Ray was imported before mcsa-bench could keep" in result.stderr, result.stderr

def guarded(env: dict[str, str], log: Path) -> dict[str, str]:
    """``env`` that loads the network guard into every Python process started with it (tests/e2e/network_guard)."""
    return {**env, "MCSA_TEST_NETWORK_LOG": str(log),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(GUARD), env.get("PYTHONPATH")]))}


def _process_tree(root: int) -> set[int]:
    """``root`` and its live descendants."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += children.get(pid, [])
    return tree


def _command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def _token(pid: int) -> str | None:
    from mcsa_bench.tracking.lifecycle import process_token

    return process_token(pid)


def _sockets(pids: set[int]) -> list[tuple[int, tuple]]:
    """(pid, (table, state, local address, remote address)) of every TCP and UDP socket the processes hold."""
    owners = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if (target := os.readlink(fd)).startswith("socket:["):
                        owners[target[len("socket:["):-1]] = pid
    found = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            _, local, remote, state, *rest = line.split()
            if rest[5] in owners:  # the inode column
                found.append((owners[rest[5]], (table, state, _address(local), _address(remote))))
    return found


def _address(field: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """/proc/net's ``0100007F:1F90``: the address in host-order 32-bit words, the port in hex."""
    host, port = field.split(":")
    raw = bytes.fromhex(host)
    return ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))), int(port, 16)


def _is_loopback(address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _leaves_loopback(local: tuple, remote: tuple) -> bool:
    """Bound to, or connected to, an address other than loopback (an unbound socket is 0.0.0.0:0)."""
    (local_host, local_port), (remote_host, remote_port) = local, remote
    bound_elsewhere = not _is_loopback(local_host) and (local_port != 0 or not local_host.is_unspecified)
    connected_elsewhere = not _is_loopback(remote_host) and (remote_port != 0 or not remote_host.is_unspecified)
    return bound_elsewhere or connected_elsewhere


def _kill(group: int, processes: dict[int, tuple[str | None, str]]) -> None:
    """The sweep's process group, and every process of its tree still alive (Ray's own sessions)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    for pid, (token, _) in processes.items():
        if token is not None and _token(pid) == token:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------ a real multi-writer store


def _query(database: str, sql: str) -> list[tuple]:
    """Rows of ``sql`` in the PostgreSQL database behind the tracking server, read directly."""
    import psycopg

    with psycopg.connect(database) as connection:
        return connection.execute(sql).fetchall()


JOB_RUNS = ("SELECT runs.run_uuid, runs.status, hash.value, pid.value FROM runs JOIN tags AS role "
            "ON role.run_uuid = runs.run_uuid AND role.key = 'mcsa_bench.role' AND role.value = 'job' "
            "JOIN tags AS hash ON hash.run_uuid = runs.run_uuid AND hash.key = 'mcsa_bench.config_hash' "
            "JOIN tags AS pid ON pid.run_uuid = runs.run_uuid AND pid.key = 'mcsa_bench.pid'")


def _steps(database: str) -> dict[str, dict[str, list[int]]]:
    """run id -> metric -> the steps the store holds, in order."""
    steps: dict[str, dict[str, list[int]]] = {}
    for run, key, step in _query(database, "SELECT run_uuid, key, step FROM metrics ORDER BY run_uuid, key, step"):
        steps.setdefault(run, {}).setdefault(key, []).append(step)
    return steps


def _writing(database: str) -> list[int]:
    """The processes of the RUNNING jobs that have logged an evaluation after the first."""
    return [int(pid) for run, status, _, pid in _query(database, JOB_RUNS)
            if status == "RUNNING" and _query(database, f"SELECT 1 FROM metrics WHERE run_uuid = '{run}' AND step > 0")]


def _computed(workdir: Path) -> dict[str, dict[str, list[int]]]:
    """run id -> metric -> the steps its job evaluated, from the jobs' local records."""
    from mcsa_bench.tracking.localrecord import read_metrics_stream, read_run_info

    computed = {}
    for record in (workdir / "outputs").rglob("run.json"):
        steps: dict[str, list[int]] = {}
        for row in read_metrics_stream(record.parent):
            for key in row.keys() - {"iteration"}:
                steps.setdefault(key, []).append(int(row["iteration"]))
        computed[read_run_info(record.parent)["run_id"]] = steps
    return computed


def _holds(stored: dict[str, list[int]], computed: dict[str, list[int]]) -> bool:
    """The store holds every point the job computed (and may hold more: `diverged`, logged at the end)."""
    return all(stored.get(key) == steps for key, steps in computed.items())


def test_sixteen_writers_through_an_mlflow_server_on_postgresql_lose_nothing(postgres, tmp_path, monkeypatch):
    """Issue 24, the cluster path on a real multi-writer store: 16 jobs, all at once (joblib), tracked
    through an `mlflow server` backed by a private PostgreSQL. Eight jobs (T = 300, an evaluation every
    10 iterations) finish; the other eight run until one of their workers is killed (kill -9), which
    ends the sweep early. No run is left RUNNING; each finished run holds every point its job computed
    (its local record), each stopped run an unbroken prefix of them; resume=true runs exactly the 8
    missing cells, leaving 16 FINISHED runs, each with every point. (32 jobs, 16 at a time, took 179.5 s
    alone on a quiet 2-core machine, 16 at once 163.7 s and a third less CPU, checking the same.)

    The server is flooded on purpose (16 writers logging an evaluation every 10 iterations, one server
    worker). On 2 loaded cores it answered a batch slower than the client's 10 s timeout for minutes, so
    the runs ride out outages of up to an hour here (that bound is tested in test_reliability.py); and a
    running job produces points faster than such a server takes them, so its writer may give up once
    200,000 points wait (the writer's bound; the local record keeps them for `sync`) before its first
    batch lands. The kill therefore waits for one writing job, not all eight: what a stopped run holds is
    still a prefix of what it computed."""
    from tests.support import cli_in_process, wait_for

    database = postgres.create_database()
    server = MlflowServer(tmp_path, backend_store_uri=database).start()
    cells = ["model.dim=2", "eval_every=10", "seed=range(8)", f"tracking.uri={server.uri}",
             "tracking.outage_seconds=3600"]
    process = subprocess.Popen([sys.executable, "-m", "mcsa_bench.cli", "run", "-m", "hydra/launcher=joblib",
                                "hydra.launcher.n_jobs=16", "n_iters=300,100000000", *cells], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: sorted(s for _, s, _, _ in _query(database, JOB_RUNS)) == ["FINISHED"] * 8 + ["RUNNING"] * 8
                 and _writing(database), timeout=600, what="8 finished jobs, 8 running and one of them writing")
        os.kill(_writing(database)[0], signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    try:
        assert process.returncode == 1 and "the sweep stopped early" in stderr, stdout + stderr
        runs, stored, computed = _query(database, JOB_RUNS), _steps(database), _computed(tmp_path)
        assert sorted(status for _, status, _, _ in runs) == ["FINISHED"] * 8 + ["KILLED"] * 8
        for run, status, _, _ in runs:
            if status == "FINISHED":
                assert _holds(stored[run], computed[run]) and max(computed[run]["kl_inclusive"]) == 300, run
            else:  # what reached the store before the end: for each metric, its first points, none twice
                for key, steps in stored.get(run, {}).items():  # none, when the kill came before its first batch
                    assert steps == computed[run][key][:len(steps)], (run, key)

        result = cli_in_process("run", "-m", "n_iters=300,400", *cells, "resume=true", cwd=tmp_path,
                                monkeypatch=monkeypatch)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "resume: skipping 8 of 16 jobs" in result.stdout
        runs, stored, computed = _query(database, JOB_RUNS), _steps(database), _computed(tmp_path)
        finished = {run: cell for run, status, cell, _ in runs if status == "FINISHED"}
        assert len(finished) == 16 and len(set(finished.values())) == 16  # every cell once
        assert [status for status, in _query(database, "SELECT status FROM runs")].count("RUNNING") == 0
        assert {max(computed[run]["kl_inclusive"]) for run in finished} == {300, 400}
        assert all(_holds(stored[run], computed[run]) for run in finished)
    finally:
        server.kill()


def test_a_sweep_tracked_straight_to_postgresql_finishes_and_keeps_its_password_out(postgres, tmp_path,
                                                                                     monkeypatch):
    """tracking.uri=postgresql://... with no server between: a two-job sweep ends with its runs and
    its parent FINISHED, every point in the database; the database's password is in no tag or
    param of the store and in no line of mcsa-bench's own (Hydra's launcher echoes each job's
    overrides as typed: docs/scaling.md advises PGPASSWORD or ~/.pgpass over a password in the URI), nor
    in the files of its report, which travel (the command and the store it names, redacted). An export's
    read of every metric at once (PostgreSQL's own plan) gives what the client API gives metric by metric."""
    from mlflow.tracking import MlflowClient

    from mcsa_bench.tracking.tables import ClientReader, open_reader, run_histories
    from tests.support import cli_in_process

    database = postgres.create_database()
    result = cli_in_process("run", "-m", "model.dim=2", "n_iters=100", "eval_every=10", "seed=0,1",
                            f"tracking.uri={database}", cwd=tmp_path, monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stdout + result.stderr
    ours = [line for line in (result.stdout + result.stderr).splitlines() if "[HYDRA]" not in line]
    assert not [line for line in ours if postgres.PASSWORD in line]
    assert "Results are in the database postgresql://mlflow:***@127.0.0.1" in result.stdout
    assert [status for status, in _query(database, "SELECT status FROM runs")] == ["FINISHED"] * 3
    runs, stored, computed = _query(database, JOB_RUNS), _steps(database), _computed(tmp_path)
    assert len(runs) == 2 and all(_holds(stored[run], computed[run]) for run, *_ in runs)
    leaks = _query(database, f"SELECT key FROM tags WHERE value LIKE '%{postgres.PASSWORD}%' "
                             f"UNION SELECT key FROM params WHERE value LIKE '%{postgres.PASSWORD}%'")
    assert leaks == []
    report = cli_in_process("report", "--out", str(tmp_path / "report"), f"tracking.uri={database}", cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert report.returncode == 0, report.stdout + report.stderr
    written = [path for path in (tmp_path / "report").rglob("*") if path.is_file()]
    assert any("postgresql://mlflow:***@127.0.0.1" in path.read_text(errors="ignore") for path in written)
    assert not [path.name for path in written if postgres.PASSWORD.encode() in path.read_bytes()]
    reader = open_reader(database)
    runs = [run for experiment in reader.experiments().values() for run in reader.runs(experiment)]
    histories = run_histories(reader, runs)
    assert len(histories) == 2 and histories == run_histories(ClientReader(MlflowClient(database)), runs)
