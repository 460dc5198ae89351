"""MLflow tracking: the store, one run per job, and one parent run per sweep.

The embedded default is MLflow's SQLite store (``sqlite:///outputs/mlflow.db``, artifacts in
``outputs/mlartifacts``); a tracking-server URI (``http://host:port``) works the same way, and so does
a database server's (``postgresql://user:password@host/db``, with the ``postgres`` extra installed).
``mlflow`` is imported lazily: it takes about a second, which ``mcsa-bench plugins`` and
``--help`` must not pay.

Faults are bounded and named (docs/reliability.md):

- the URI is checked before anything runs (scheme, path, a server answering within a few seconds);
- first-time schema creation of an SQLite store holds a file lock, so separate commands may
  create the same store at once;
- a job whose server goes away stops sending after the first failed request (MLflow's HTTP
  retries are bounded here) and keeps everything on local disk (:mod:`mcsa_bench.tracking.localrecord`),
  to be uploaded later with ``mcsa-bench sync``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mcsa_bench.api import ConfigurationError, MCSAError
from mcsa_bench.tracking.claims import claim_cell
from mcsa_bench.tracking.lifecycle import Heartbeat, identity_tags, judge
from mcsa_bench.tracking.record import (
    CLAIM_TAG,
    CLAIMED_BY_TAG,
    COMMIT_TAG,
    CONFIG_HASH_TAG,
    DIRTY_TAG,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    HEARTBEAT_TAG,
    STALE_TAG,
    VERSION_TAG,
    error_tags,
)
from mcsa_bench.tracking.tablewriter import DirectMetrics
from mcsa_bench.tracking.writer import DRAIN_AFTER_SIGNAL_SECONDS, Retrying, StoreWriter, first_line
from mcsa_bench.version import __version__

DEFAULT_TRACKING_URI = "sqlite:///outputs/mlflow.db"
DEFAULT_EXPERIMENT = "mcsa-bench"
PARAMS_PER_BATCH = 100
DEFAULT_OUTAGE_SECONDS = 60.0  # tracking.outage_seconds: how long a run rides out a store that went away
MAX_OUTAGE_SECONDS = 7 * 24 * 3600.0  # its bound, a week (1e300 s overflowed the writer's waits)
#: schemes MLflow 3 can track to (the file store is not one of them)
SUPPORTED_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql")
#: database servers, through SQLAlchemy: a scheme, or scheme+driver (postgresql+psycopg://)
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")
#: the extra of pyproject.toml that installs a database's driver
DRIVER_EXTRAS = {"postgresql": "postgres"}
#: seconds a tracking server gets to answer the check before a run starts
REACHABLE_TIMEOUT = 3.0
#: MLflow's own switches, set unless the user set them: no usage telemetry, and HTTP requests that
#: fail within seconds rather than minutes (MLflow's defaults: 7 retries with backoff, 120 s timeout)
MLFLOW_DEFAULTS = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
for _name, _value in MLFLOW_DEFAULTS.items():
    os.environ.setdefault(_name, _value)


class _RetriedDatabaseErrors(logging.Filter):
    """MLflow logs a traceback (about 40 lines) for every failed database session, a locked SQLite file
    included, which the writes here retry (tracking.writer): those records are dropped, and the
    retry says one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SQLAlchemy database error")


logging.getLogger("mlflow.store.db.utils").addFilter(_RetriedDatabaseErrors())


class TrackingError(MCSAError):
    """The tracking store failed or became unreachable."""


def _client(uri: str):
    """One MLflow client per store and process (building one takes ~0.1 s); a relative SQLite path
    names the store under the current directory, which a process calling several commands changes."""
    return _client_of(absolute_uri(uri))


@functools.lru_cache(maxsize=8)
def _client_of(absolute: str):
    from mlflow.tracking import MlflowClient

    check_integrity(absolute)
    return MlflowClient(tracking_uri=absolute)


def check_integrity(uri: str) -> None:
    """An existing SQLite store passes SQLite's ``PRAGMA quick_check`` (every page and record well
    formed; the indexes are not compared to their tables); else one line. A truncated or overwritten
    file is found here, before MLflow's queries fail in their own ways.

    The file is opened for writing (never created): a writer killed mid-transaction (kill -9, OOM) leaves
    a hot journal, which SQLite rolls back on the next open that may write, and which a read-only open
    refuses ("attempt to write a readonly database"). Nothing else is written."""
    import sqlite3

    path = sqlite_path(uri)
    if path is None or not path.is_file():
        return
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True)) as connection:
            problems = [row[0] for row in connection.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.DatabaseError as error:
        problems = [str(error)]
    if problems != ["ok"]:
        raise ConfigurationError(
            f"tracking store {redacted(uri)} is unusable: it fails SQLite's integrity check ({problems[0]}"
            f"{f', and {len(problems) - 1} more problems' if len(problems) > 1 else ''}); "
            "see docs/reliability.md, 'Recovering a store'")


# ------------------------------------------------------------------------------- the store


def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def is_database_store(uri: str) -> bool:
    """A store MLflow keeps in a database (SQLite, PostgreSQL, ...), whose tables can be read and written
    directly; not a tracking server."""
    return sqlite_path(uri) is not None or uri.split(":", 1)[0].split("+")[0] in DATABASE_SCHEMES


def absolute_uri(uri: str) -> str:
    """The URI with an SQLite path made absolute (valid from any directory)."""
    path = sqlite_path(uri)
    return f"sqlite:///{path.resolve()}" if path is not None else uri


def tracking_uri_of(arguments: Iterable[str], command: str) -> str:
    """The store a command other than ``run`` reads (ui, runs, sync, report): the last ``tracking.uri=URI``
    among its key=value arguments, else the default store; any other key is one line naming it."""
    uri = DEFAULT_TRACKING_URI
    for item in arguments:
        key, sep, value = item.partition("=")
        if key != "tracking.uri" or not value:
            raise ConfigurationError(f"{command} takes tracking.uri=URI as its only key=value argument, got {item!r}")
        uri = value
    return uri


def check_tracking_uri(uri: str) -> None:
    """Refuse a URI MLflow cannot use, naming the problem, before anything runs."""
    scheme = urllib.parse.urlparse(uri).scheme.split("+")[0]
    if scheme not in SUPPORTED_SCHEMES:
        raise ConfigurationError(
            f"tracking.uri {uri!r}: unsupported scheme {scheme or '(none)'!r}; use sqlite:///path/to/mlflow.db or "
            f"http://host:port (supported: {', '.join(SUPPORTED_SCHEMES)})")
    if scheme == "sqlite":
        _check_sqlite_path(uri)
    elif scheme in DATABASE_SCHEMES:
        _check_database_driver(uri, scheme)
    elif scheme in ("http", "https"):
        parsed = urllib.parse.urlparse(uri)
        try:
            parsed.port  # noqa: B018 (raises on a bad port)
        except ValueError as error:
            raise ConfigurationError(f"tracking.uri {uri!r}: {error}") from None
        if not parsed.hostname:
            raise ConfigurationError(f"tracking.uri {uri!r} names no host; e.g. http://127.0.0.1:5000")


def _check_sqlite_path(uri: str) -> None:
    path = sqlite_path(uri)
    if path is None or not str(path).strip():
        raise ConfigurationError(f"tracking.uri {uri!r}: write sqlite:///relative/path.db or sqlite:////absolute/path.db")
    if path.is_dir():
        raise ConfigurationError(f"tracking.uri {uri!r}: {path} is a directory; name a database file inside it")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if existing == path and not os.access(path, os.R_OK | os.W_OK):
        raise ConfigurationError(f"tracking.uri {uri!r}: {path} is not readable and writable")
    if existing != path and (not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK)):
        raise ConfigurationError(f"tracking.uri {uri!r}: cannot create {path} ({existing} is not a writable directory)")


def _check_database_driver(uri: str, scheme: str) -> None:
    """A database server's URI needs the driver SQLAlchemy loads for it (psycopg for postgresql://
    since SQLAlchemy 2.1, or the one named after a +) installed here; a missing one is named, with the
    extra that installs it. The password stays off the screen."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    shown = redacted(uri)
    try:
        make_url(uri).get_dialect().import_dbapi()
    except (ArgumentError, NoSuchModuleError, ValueError) as error:
        raise ConfigurationError(f"tracking.uri {shown!r}: {first_line(error)}") from None
    except ImportError as error:
        extra = DRIVER_EXTRAS.get(scheme)
        remedy = f"pip install 'mcsa-bench[{extra}]'" if extra else f"install a {scheme} driver for SQLAlchemy"
        raise ConfigurationError(f"tracking.uri {shown!r}: the {scheme} driver is not installed ({error}); "
                                 f"{remedy}") from None


def redacted(text: str) -> str:
    """``text`` (a URI, an override, a message) with the password of every URI in it replaced by ***."""
    return _URI_PASSWORD.sub(r"\1***@", text)


_URI_PASSWORD = re.compile(r"(://[^:/?#@\s]*:)[^/?#@\s]*@")


def check_reachable(uri: str, timeout: float = REACHABLE_TIMEOUT) -> None:
    """A tracking server must answer its health check within ``timeout`` seconds."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as error:
        raise ConfigurationError(f"tracking server {uri} answered its health check with HTTP {error.code}; "
                                 "is it an MLflow server?") from None
    except (OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise ConfigurationError(f"cannot reach the tracking server {uri} within {timeout:g} s ({reason}); "
                                 "start it (mlflow server ...) or choose another tracking.uri") from None


@contextlib.contextmanager
def _store_lock(uri: str):
    """An exclusive file lock beside an SQLite store: first-time schema creation is not concurrency-safe."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigurationError(f"tracking.uri {uri!r}: cannot create {path.parent} ({error.strerror})") from None
    with file_lock(Path(f"{path}.lock")):
        yield


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive lock on the file ``path`` (made if needed) while the block runs; OSError if it cannot be
    made. Without flock (Windows) nothing is locked: concurrent use is then not protected."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def copy_empty_store(database: Path) -> None:
    """Create the SQLite store ``database`` as a copy of an empty store that MLflow made, once per
    MLflow release, in the user's cache (``$XDG_CACHE_HOME/mcsa-bench``): MLflow's own creation
    runs its schema migrations, about 1.4 s of CPU on a quiet machine, for every new store. The
    copy holds MLflow's schema and no experiment; MLflow adds its Default experiment when it first
    opens the store, as in a store it creates. Where the cache cannot be used, MLflow creates the
    store itself."""
    import shutil

    try:
        template = _empty_store()
        partial = database.with_name(f".{database.name}.{os.getpid()}.partial")
        shutil.copyfile(template, partial)
        os.replace(partial, database)  # whole, or not there
    except OSError:
        pass


def _empty_store() -> Path:
    """An SQLite store with the schema of the installed MLflow release and no experiment."""
    import sqlite3

    import mlflow
    from mlflow.tracking import MlflowClient

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcsa-bench"
    template = cache / f"empty-mlflow-{mlflow.__version__}.db"
    if not template.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = cache / f".{template.name}.{os.getpid()}.partial"
        partial.unlink(missing_ok=True)
        MlflowClient(f"sqlite:///{partial}").search_experiments()  # MLflow creates the schema (and Default)
        with contextlib.closing(sqlite3.connect(partial)) as connection, connection:
            connection.execute("DELETE FROM experiments")  # its artifact location names this directory
        os.replace(partial, template)
    return template


#: a database server's schema is created by the first client; two at once collide (PostgreSQL: a unique
#: violation on its catalogue), and the one that lost finds the schema made on its next try
SCHEMA_CREATION_ATTEMPTS = 3


def _experiment_in_new_or_old_store(uri: str, experiment: str) -> tuple[str, str]:
    """The experiment's id and lifecycle stage, the experiment (and the store's schema) created if needed.
    An SQLite store is created under a file lock; a database server's creation that collides with
    another is tried again."""
    from mlflow.exceptions import MlflowException

    database = sqlite_path(uri)
    artifact_location = (database.resolve().parent / "mlartifacts").as_uri() if database is not None else None
    for attempt in range(1, SCHEMA_CREATION_ATTEMPTS + 1):
        try:
            with _store_lock(uri):
                if database is not None and not database.exists():
                    copy_empty_store(database)
                client = _client(uri)
                found = client.get_experiment_by_name(experiment)
                if found is None:
                    try:
                        return client.create_experiment(experiment, artifact_location=artifact_location,
                                                        tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}), "active"
                    except MlflowException:  # created meanwhile through a server by another process
                        found = client.get_experiment_by_name(experiment)
                return found.experiment_id, found.lifecycle_stage
        except Exception:
            if database is not None or urllib.parse.urlparse(uri).scheme.split("+")[0] not in DATABASE_SCHEMES \
                    or attempt == SCHEMA_CREATION_ATTEMPTS:
                raise
            time.sleep(random.uniform(1.0, 2.0))


def store_exists(uri: str) -> bool:
    path = sqlite_path(uri)
    return path is None or path.exists()


def prepare_store(uri: str, experiment: str) -> str:
    """Create the store (schema) and the experiment if needed; returns the experiment id.

    Safe to call from several processes at once. Errors are one line naming the store.
    """
    from mlflow.exceptions import MlflowException

    try:
        experiment_id, stage = _experiment_in_new_or_old_store(uri, experiment)
    except MCSAError:
        raise
    except MlflowException as error:
        raise ConfigurationError(f"tracking store {redacted(uri)}: {first_line(error)} "
                                 "(see docs/reliability.md)") from None
    except Exception as error:  # SQLAlchemy and driver errors: a damaged or foreign database
        raise ConfigurationError(f"tracking store {redacted(uri)} is unusable: {type(error).__name__}: "
                                 f"{first_line(error)} (see docs/reliability.md, 'recovering a store')") from None
    if stage == "deleted":
        raise ConfigurationError(
            f"experiment {experiment!r} in {redacted(uri)} was deleted; restore it with "
            f"`mlflow experiments restore --experiment-id {experiment_id}` "
            f"(MLFLOW_TRACKING_URI={redacted(uri)}) "
            "or choose another tracking.experiment")
    return experiment_id


@functools.cache
def source_tags() -> dict[str, str]:
    """Package version and, when the package runs from a git checkout, its commit."""
    tags = {VERSION_TAG: __version__}
    source = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10)
        if commit.returncode == 0:
            tags[COMMIT_TAG] = commit.stdout.strip()
            # --no-optional-locks: a read-only look; never write (or, when killed, leave a lock on) the
            # user's index, which `git status` would refresh
            dirty = subprocess.run(["git", "--no-optional-locks", "-C", str(source), "status", "--porcelain",
                                    "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10)
            tags[DIRTY_TAG] = str(bool(dirty.stdout.strip())).lower()
    except (OSError, subprocess.SubprocessError):
        pass
    return tags


def _chunks(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def finished_run_with_hash(uri: str, experiment_id: str, config_hash: str):
    """A FINISHED run of the experiment whose resolved config has this hash, or None."""
    runs = _client(uri).search_runs(
        [experiment_id], max_results=1,
        filter_string=f"tags.`{CONFIG_HASH_TAG}` = '{config_hash}' and attributes.status = 'FINISHED'")
    return runs[0] if runs else None


# ---------------------------------------------------------------------------------- a job run


class JobTracker:
    """One MLflow run; as an engine callback it queues metrics for the run's store writer.

    Every write goes through a :class:`~mcsa_bench.tracking.writer.StoreWriter`: in order, from a
    background thread, retried through an outage of up to ``outage_seconds``. The run carries its
    host, pid and a heartbeat tag updated every 30 s, so a run whose process died is recognized as
    stale. Once the writer gives up (:attr:`lost` says why), the job's local record keeps everything,
    and the job ends with a clear error once its computation is done.
    """

    def __init__(self, uri: str, experiment_id: str, run_name: str, tags: Mapping[str, str],
                 outage_seconds: float = DEFAULT_OUTAGE_SECONDS):
        self.uri, self.experiment_id = uri, experiment_id
        self.client = _client(uri)
        self._store = Retrying(self.client, outage_seconds)  # the calls made outside the writer
        tags = {**source_tags(), **identity_tags(), **tags}
        try:
            run = self._store.create_run(experiment_id, run_name=run_name, tags=tags)
        except Exception as error:
            raise TrackingError(f"cannot create a run in {redacted(uri)}: {first_line(error)}") from None
        self.run_id = run.info.run_id
        self._heartbeat = Heartbeat(lambda: self.client.set_tag(self.run_id, HEARTBEAT_TAG, f"{time.time():.0f}"))
        writes = DirectMetrics(self.client) if is_database_store(uri) else self.client
        self._writer = StoreWriter(writes, self.run_id, redacted(uri), outage_seconds, on_lost=self._heartbeat.stop)

    @property
    def lost(self) -> str | None:
        """Why the store stopped taking this run's writes, or None."""
        return self._writer.lost

    def claim(self, config_hash: str):
        """Claim the run's cell (tracking.claims) before anything is queued; returns None when this run
        holds it, else the run that computes the cell."""
        return claim_cell(self._store, self.experiment_id, self.run_id, config_hash)

    def unclaim(self) -> None:
        """Go on without a claim: the run is one that claims nothing."""
        self._store.delete_tag(self.run_id, CLAIM_TAG)

    def discard(self, computed_by: str) -> None:
        """End and delete a run that computed nothing (another run, ``computed_by``, computes its cell),
        tagged with that run's id, by which its sweep counts it skipped."""
        self._heartbeat.stop()
        self._writer.close()
        self._store.set_tag(self.run_id, CLAIMED_BY_TAG, computed_by)
        self._store.set_terminated(self.run_id, "KILLED")
        self._store.delete_run(self.run_id)

    def log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        for chunk in _chunks([Param(k, redacted(v)) for k, v in params.items()], PARAMS_PER_BATCH):
            self._writer.put("log_batch", self.run_id, params=chunk)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        for chunk in _chunks([RunTag(k, v) for k, v in tags.items()], PARAMS_PER_BATCH):
            self._writer.put("log_batch", self.run_id, tags=chunk)

    def log_history(self, rows: Iterable[Mapping[str, float]]) -> None:
        """Metrics of evaluations made before this run existed (a run resumed from a checkpoint)."""
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        self._writer.put_metrics([Metric(k, float(v), timestamp, int(row["iteration"]))
                                  for row in rows for k, v in row.items() if k != "iteration"])

    def __call__(self, snapshot) -> None:
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        self._writer.put_metrics([Metric(k, float(v), timestamp, snapshot.iteration)
                                  for k, v in snapshot.metrics.items()])

    def log_artifacts(self, directory: Path) -> None:
        self._writer.put("log_artifacts", self.run_id, str(directory))

    def finish(self, status: str, error: BaseException | None = None) -> None:
        """Send what is queued and end the run as FINISHED, FAILED (with the error as tags) or KILLED.

        A KILLED run (a signal) waits for the store at most DRAIN_AFTER_SIGNAL_SECONDS, so a
        supervisor's grace period is not spent waiting on a slow store."""
        self._heartbeat.stop()
        if error is not None:
            self.set_tags(error_tags(error))
        self._writer.put("set_terminated", self.run_id, status)
        self._writer.close(DRAIN_AFTER_SIGNAL_SECONDS if status == "KILLED" else None)


# ------------------------------------------------------------------------- stale runs


def mark_stale_runs(uri: str, experiment_ids: Iterable[str] | None = None) -> list[tuple[Any, str]]:
    """Mark KILLED every RUNNING run whose process is gone; returns (run, reason) for each."""
    client = Retrying(_client(uri), DEFAULT_OUTAGE_SECONDS)
    if experiment_ids is None:
        experiment_ids = [e.experiment_id for e in client.search_experiments()]
    experiment_ids = list(experiment_ids)
    if not experiment_ids:
        return []
    marked = []
    for run in client.search_runs(experiment_ids, filter_string="attributes.status = 'RUNNING'", max_results=50_000):
        verdict = judge(run.data.tags)
        if verdict.stale:
            client.set_tag(run.info.run_id, STALE_TAG, verdict.reason)
            client.set_terminated(run.info.run_id, "KILLED")
            marked.append((run, verdict.reason))
    return marked


def report_stale(marked: list[tuple[Any, str]]) -> None:
    if marked:
        names = ", ".join(f"{run.info.run_name} ({reason})" for run, reason in marked[:5])
        more = f" and {len(marked) - 5} more" if len(marked) > 5 else ""
        print(f"mcsa-bench: marked {len(marked)} stale run(s) KILLED: {names}{more}", file=sys.stderr)
