"""Helpers shared by the test modules: short runs of every scheme (finite differences: mcsa_bench.testing)."""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mcsa_bench import get_registry, run
from mcsa_bench.api import Model
from mcsa_bench.engine import RunResult
from mcsa_bench.testing import assert_gradient_matches, central_differences  # noqa: F401  (used by the model tests)

SCHEMES = ("msc", "msc_rb", "jsa", "pmcsa")


def run_scheme(model: Model, scheme: str, *, n_iters: int = 50, n_samples: int = 10, seed: int = 0,
               lr: float = 0.01, eval_every: int | None = None) -> RunResult:
    """A short run of ``scheme`` (default kernel, mean-field Gaussian, Adam) on a built model."""
    registry = get_registry()
    kernel = registry.build("kernel", registry.get("estimator", scheme).factory.default_kernel)
    estimator = registry.build("estimator", scheme, kernel=kernel, n_samples=n_samples)
    family = registry.build("family", "meanfield_gaussian", dim=model.dim)
    optimizer = registry.build("optimizer", "adam", lr=lr)
    return run(model, family, estimator, optimizer, n_iters=n_iters, seed=seed, eval_every=eval_every or n_iters)


def assert_every_scheme_runs(model: Model, n_iters: int = 50) -> dict[str, RunResult]:
    """Every built-in scheme runs ``n_iters`` iterations with finite parameters and metrics."""
    results = {}
    for scheme in SCHEMES:
        result = run_scheme(model, scheme, n_iters=n_iters)
        assert np.all(np.isfinite(result.params)), scheme
        for row in result.history:
            for name, value in row.items():
                assert np.isfinite(value), f"{scheme}: metric {name} = {value} at iteration {row['iteration']}"
        results[scheme] = result
    return results


# --------------------------------------------------------------------------- processes and servers


def assert_monte_carlo_estimates(estimates: list[dict[str, float]], exact: dict[str, float]) -> dict[str, tuple]:
    """Estimates with ``<name>_se`` standard errors, one dict per independent seed (S of them), against the
    exact values: the first seed's estimate within 4 of its standard errors; the mean over the seeds within 4
    of their standard error (mean se/√S: bias); and the standard error matching the estimates' sd over the seeds,
    their ratio within 4/√(2(S−1)) of 1 (the sd's relative sampling error). Returns (z of the first seed, the
    sd/se ratio) by name."""
    seeds, measured = len(estimates), {}
    for name, value in exact.items():
        values, errors = (np.array([e[key] for e in estimates]) for key in (name, f"{name}_se"))
        z = (values[0] - value) / errors[0]
        bias_z = (values.mean() - value) / (errors.mean() / np.sqrt(seeds))
        ratio = values.std(ddof=1) / errors.mean()
        assert abs(z) <= 4 and abs(bias_z) <= 4, (name, z, bias_z)
        assert abs(ratio - 1) <= 4 / np.sqrt(2 * (seeds - 1)), (name, ratio)
        measured[name] = (z, bias_z, ratio)
    return measured


def cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`mcsa-bench *args` in ``cwd``, in a process of its own (``env`` added to this one's)."""
    return subprocess.run([sys.executable, "-m", "mcsa_bench.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def cli_in_process(*args: str, cwd: Path, monkeypatch) -> subprocess.CompletedProcess:
    """`mcsa-bench *args` in ``cwd`` through the CLI's main in this process: no interpreter start-up
    and imports (about 5 s of CPU per command), for tests whose subject is what a command does, not
    its process. Asserts that the command leaves the process's environment as it found it."""
    import mcsa_bench.tracking.store  # noqa: F401  (sets MLflow's defaults in the environment on import)
    from mcsa_bench.cli import main

    for library in ("jax", "ot"):  # they set variables of their own on first import (TF_CPP_MIN_LOG_LEVEL, ...)
        with contextlib.suppress(ImportError):
            importlib.import_module(library)

    monkeypatch.chdir(cwd)
    out, err, environment = io.StringIO(), io.StringIO(), dict(os.environ)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    assert dict(os.environ) == environment, "the command changed its process's environment"
    return subprocess.CompletedProcess(["mcsa-bench", *args], code, out.getvalue(), err.getvalue())


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A directory ``name`` that ``build(directory)`` fills once per test session, shared by all xdist
    workers (a file lock; a build that raised is retried by the next caller). For expensive set-up
    that the tests only read, which a module fixture would repeat on every worker that runs one."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's directory, above the workers' own
    directory, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            done.touch()
    return directory


def completed_process_once(tmp_path_factory, name: str, command: Callable[[Path], subprocess.CompletedProcess]):
    """(directory, result) of ``command(directory)`` run once per session (:func:`built_once`)."""
    def build(directory: Path) -> None:
        result = command(directory)
        (directory / "result.json").write_text(json.dumps([result.args, result.returncode, result.stdout,
                                                           result.stderr]))

    directory = built_once(tmp_path_factory, name, build)
    return directory, subprocess.CompletedProcess(*json.loads((directory / "result.json").read_text()))


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], bool], timeout: float = 180, what: str = "condition") -> None:
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 with its artifacts in ``directory`` and its runs in
    ``backend_store_uri`` (default: an SQLite file ``directory/server.db``); start/kill at will."""

    def __init__(self, directory, port: int | None = None, backend_store_uri: str | None = None, workers: int = 1):
        self.directory, self.port, self.workers = directory, port or free_port(), workers
        self.backend_store_uri = backend_store_uri or f"sqlite:///{directory / 'server.db'}"
        self.process = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MlflowServer:
        import os
        import subprocess
        import sys

        command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                   self.backend_store_uri, "--host", "127.0.0.1", "--port", str(self.port),
                   "--workers", str(self.workers), "--artifacts-destination", str(self.directory / "artifacts")]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True,
                                        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        wait_for(lambda: answers(f"{self.uri}/health"), timeout=180, what="the mlflow server")
        return self

    def kill(self) -> None:
        import os
        import signal

        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def freeze(self, frozen: bool = True) -> None:
        """SIGSTOP the server's process group (it accepts connections and never answers), or SIGCONT it."""
        import os
        import signal

        os.killpg(self.process.pid, signal.SIGSTOP if frozen else signal.SIGCONT)


def postgres_programs() -> Path | None:
    """The directory of PostgreSQL's server programs (initdb, pg_ctl): on PATH, else Debian's
    /usr/lib/postgresql/<major>/bin (the newest major), else None."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent  # Debian links some programs into /usr/local/bin
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb") if p.parts[-3].isdigit()]
    return max(found, key=lambda directory: int(directory.parts[-2]), default=None)


def postgres_missing() -> str | None:
    """Why a test on a real PostgreSQL cannot run here, or None."""
    if postgres_programs() is None:
        return "PostgreSQL's server programs (initdb, pg_ctl) are not installed: apt-get install postgresql"
    from mcsa_bench.api import ConfigurationError
    from mcsa_bench.tracking.store import check_tracking_uri

    try:
        check_tracking_uri("postgresql://user@127.0.0.1/database")  # the driver, as a run checks it
    except ConfigurationError as error:
        return str(error)
    return None


class PostgresServer:
    """A private PostgreSQL server: a fresh cluster (initdb) in a temporary directory, password
    authentication, listening on 127.0.0.1 only at a free port (no Unix socket). PostgreSQL refuses to
    run as root, so as root the server runs as the package's `postgres` user (else `nobody`).
    ``stop()`` ends it and deletes its files; with a ``directory`` (a benchmark's store, kept for
    reuse) the cluster lives there, an existing one is started as it is, and ``stop()`` keeps it."""

    USER, PASSWORD = "mlflow", "mcsa-bench-test"

    def __init__(self, directory: Path | None = None):
        self.programs = postgres_programs()
        self.port = free_port()
        self.kept = directory is not None
        if self.kept:
            directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory or Path(tempfile.mkdtemp(prefix="mcsa-postgres-"))  # not under pytest's 0700 root
        self._as_owner: list[str] = []
        if os.geteuid() == 0:
            owner = "postgres" if _user_exists("postgres") else "nobody"
            shutil.chown(self.directory, owner)
            self._as_owner = ["runuser", "-u", owner, "--"]

    def uri(self, database: str = "mlflow") -> str:
        return f"postgresql://{self.USER}:{self.PASSWORD}@127.0.0.1:{self.port}/{database}"

    def _run(self, program: str, *args: str, as_owner: bool = False) -> str:
        """The program's output; a failure raises with the server's log."""
        command = [*(self._as_owner if as_owner else []), str(self.programs / program), *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                env={**os.environ, "PGPASSWORD": self.PASSWORD})
        if result.returncode != 0:
            log = self.directory / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise AssertionError(f"{program} failed ({result.returncode}): {result.stdout}{result.stderr}{tail}")
        return result.stdout

    def start(self) -> PostgresServer:
        if not (self.directory / "data" / "PG_VERSION").exists():
            self._initdb()
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories=''"
        self._run("pg_ctl", "-D", str(self.directory / "data"), "-l", str(self.directory / "server.log"),
                  "-o", options, "-w", "start", as_owner=True)
        return self

    def _initdb(self) -> None:
        password = self.directory / "password"
        password.write_text(self.PASSWORD)
        if self._as_owner:
            shutil.chown(password, self._as_owner[2])
        self._run("initdb", "-D", str(self.directory / "data"), "-U", self.USER, f"--pwfile={password}",
                  "--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", as_owner=True)
        password.unlink()

    @property
    def postmaster_pid(self) -> int:
        """The server's main process (its sessions are its children)."""
        return int((self.directory / "data" / "postmaster.pid").read_text().split()[0])

    def create_database(self, name: str = "mlflow") -> str:
        """A new, empty database; returns its URI."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.USER, name)
        return self.uri(name)

    def database(self, name: str) -> str:
        """The URI of database ``name``, created if the cluster has none of that name."""
        found = self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.USER, "-d", "postgres",
                          "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{name}'")
        return self.uri(name) if found.strip() else self.create_database(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.directory / "data"), "-m", "fast", "-w", "stop", as_owner=True)
        finally:
            if not self.kept:
                shutil.rmtree(self.directory, ignore_errors=True)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def assert_unbiased(grads: np.ndarray, expected: np.ndarray) -> None:
    """Replicate gradients (R, P) average to ``expected`` within Z_LIMIT standard errors everywhere."""
    from mcsa_bench.testing import unbiasedness_measurement

    measurement = unbiasedness_measurement(grads, expected)
    assert measurement.passed, measurement.detail


def exact_inclusive_kl_gradient(target, q) -> np.ndarray:
    """∇_λ KL(π‖q) = -E_π[s(λ; z)] for a mean-field Gaussian q with softplus scales, in closed form:
    an independent check of the Gaussian target's own ``exact_inclusive_gradient`` (sigma points)."""
    from mcsa_bench.builtin.families import _sigmoid, _softplus

    mu, psi = q.params[: q.dim], q.params[q.dim :]
    sigma = _softplus(psi)
    e_u = (target.mean - mu) / sigma  # E_π[(z-μ)/σ]
    e_u2 = (np.diag(target.cov) + (target.mean - mu) ** 2) / sigma**2
    return -np.concatenate([e_u / sigma, (e_u2 - 1.0) * _sigmoid(psi) / sigma])


CHECKOUT = Path(__file__).resolve().parents[1]
#: what a test session may add to the checkout: the environment, caches and packaging metadata
EXPECTED_LEFTOVERS = ("/.venv/", "/__pycache__/", "/.pytest_cache/", "/.ruff_cache/", "/.mypy_cache/", ".egg-info/")


def checkout_leftovers() -> set[str] | None:
    """The checkout's untracked and ignored paths (``git status --porcelain --ignored``; a new folder is
    one entry) but the expected ones; None outside a git checkout (an unpacked sdist)."""
    done = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=CHECKOUT, capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        return None
    paths = {line[3:] for line in done.stdout.splitlines() if line[:2] in ("??", "!!")}
    return {path for path in paths if not any(part in f"/{path}" for part in EXPECTED_LEFTOVERS)}


EPS = float(np.finfo(float).eps)


def assert_standardized(standardized: np.ndarray, raw: np.ndarray) -> None:
    """Each column of ``standardized`` = (raw − m)/s, with m and s the column's computed mean and sd,
    has mean 0 and sd 1 up to the rounding of any summation order (Higham 2002, §4.2: a sum of n terms
    is off by at most n·eps·Σ|terms|). The computed m is off by n·eps·mean|raw|, which shifts every
    standardized value by that over s; the check's own mean adds n·eps·mean|standardized|, and its sd
    (a sum of n squares) is relatively off by n·eps, as is s, twice for margin."""
    n = len(raw)
    shift = n * EPS * (np.abs(raw).mean(axis=0) / raw.std(axis=0) + np.abs(standardized).mean(axis=0))
    np.testing.assert_array_less(np.abs(standardized.mean(axis=0)), shift)
    np.testing.assert_allclose(standardized.std(axis=0), 1.0, rtol=4 * n * EPS, atol=0)


def cholesky_rounding_bound(matrix: np.ndarray) -> float:
    """First-order bound on the relative rounding error of a Cholesky factorization of a positive
    definite matrix M and of what is computed from it (log det in nats, solves, L times a vector):
    n · eps · κ(A), with A = D^{-1/2} M D^{-1/2} the matrix scaled to a unit diagonal (a Cholesky
    factorization's backward error is componentwise relative to that scaling, so its condition
    number, not M's, governs; Demmel 1989, SIAM J. Matrix Anal. Appl. 10(3))."""
    scale = 1.0 / np.sqrt(np.diag(matrix))
    equilibrated = matrix * scale[:, None] * scale[None, :]
    return len(matrix) * EPS * float(np.linalg.cond(equilibrated))


def assert_within(actual, desired, bound) -> None:
    """|actual − desired| <= bound elementwise (bound broadcast: a rounding bound per row or coordinate);
    the message gives the largest error as a multiple of its bound."""
    error = np.abs(np.asarray(actual, dtype=float) - np.asarray(desired, dtype=float))
    assert np.all(error <= bound), f"error up to {np.max(error / bound):.3g} times its rounding bound"


def store_rows(workdir: Path, query: str) -> list[tuple]:
    """The rows of ``query`` on workdir/outputs/mlflow.db (the CLI's default store), straight from the
    database (an MLflow client could race the CLI's first-time schema creation); none before the store
    and its tables exist. Opened for writing, never created: a hot journal (a writer killed
    mid-transaction, as a Ray worker is when its driver ends) is rolled back, which a read-only open
    refuses."""
    database = workdir / "outputs" / "mlflow.db"
    if not database.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=rw", uri=True, timeout=30)) as connection:
            return connection.execute(query).fetchall()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):  # tables not created yet
            return []
        raise


def statuses(workdir: Path, role: str | None = None) -> list[str]:
    """The statuses of the runs in the CLI's default store (:func:`store_rows`); ``role`` filters by the
    mcsa_bench.role tag."""
    query = "SELECT status FROM runs"
    if role is not None:
        query = ("SELECT runs.status FROM runs JOIN tags ON tags.run_uuid = runs.run_uuid "
                 f"WHERE tags.key = 'mcsa_bench.role' AND tags.value = '{role}'")
    return [row[0] for row in store_rows(workdir, query)]


CSV_CASES = {  # a user data set for the logistic model: name -> (content, expected words in the error)
    "nan_cell": ("a,b,y\n1,2,0\nnan,3,1\n" + "2,1,0\n3,4,1\n" * 10, ["column 'a'", "line 3", "not a finite number"]),
    "inf_cell": ("a,b,y\n1,2,0\n2,inf,1\n" + "2,1,0\n3,4,1\n" * 10, ["column 'b'", "line 3"]),
    "huge_cell": ("a,b,y\n1,2,0\n1e308,3,1\n" + "2,1,0\n3,4,1\n" * 10, ["column 'a'", "line 3", "magnitude"]),
    "empty_cell": ("a,b,y\n1,2,0\n,3,1\n" + "2,1,0\n3,4,1\n" * 10, ["column 'a'", "line 3", "empty or missing"]),
    "na_cell": ("a,b,y\n1,2,0\n4,NA,1\n" + "2,1,0\n3,4,1\n" * 10, ["column 'b'", "line 3", "'NA'"]),
    "text_in_numbers": (
        "a,b,y\n1,2,0\n4,x7,1\n" + "2,1,0\n3,4,1\n" * 10,
        ["column 'b'", "line 3", "'x7' is not a number"],
    ),
    "constant_column": ("a,b,y\n" + "1,5,0\n2,5,1\n" * 10, ["column 'b' is constant"]),
    "two_rows": ("a,b,y\n1,2,0\n2,3,1\n", ["has 2 rows", "training"]),
    "one_class": ("a,b,y\n" + "1,2,1\n2,3,1\n" * 10, ["single class"]),
    "ragged_row": ("a,b,y\n1,2,0\n2,3\n", ["line 3", "3 fields"]),
    "duplicate_header": ("a,a,y\n1,2,0\n2,3,1\n", ["distinct"]),
    "labels_not_binary": ("a,b,y\n" + "1,2,0\n2,3,2\n" * 10, ["0/1 labels"]),
    "not_utf8": (b"a,b,y\n1,2,0\n2,caf\xe9,1\n" + b"2,1,0\n3,4,1\n" * 10, ["not UTF-8", "0xe9"]),
    "huge_field": ("a,b,y\n1,2,0\n1," + "9" * 140_000 + ",1\n", ["line 3", "field larger than field limit"]),
}


def write_file(path: Path, content: str | bytes) -> None:
    """Write ``content`` (text as UTF-8), creating the parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
