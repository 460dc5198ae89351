"""Test-session settings: one BLAS thread per process (tests run in parallel under pytest-xdist,
and oversubscribed OpenBLAS threads spin), no persistent JAX compilation cache, no user-made references, the slow tests
first (so the two xdist workers do not end on a long tail), a migrated MLflow store to copy, a
private PostgreSQL server, the reliability count in the summary, and a session that fails if the
tests left files in the checkout."""

import gc
import os
import shutil
import signal
import tempfile

import pytest

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
# JAX's persistent compilation cache stays off in the tests and the commands they start (a test that
# wants it gives its own directory: tests/accel/test_programs.py)
os.environ.setdefault("MCSA_BENCH_JAX_CACHE", "off")
# the references a user made (`mcsa-bench references make`) are theirs: the tests neither read nor add to them
os.environ["MCSA_BENCH_REFERENCES"] = os.path.join(tempfile.gettempdir(), f"mcsa-bench-test-references-{os.getpid()}")

from threadpoolctl import threadpool_limits  # noqa: E402  (after the variables: numpy may load BLAS here)

threadpool_limits(limits=1)  # in case BLAS was loaded before this file

# A background job of a non-interactive shell starts with SIGINT ignored, and Python then leaves it
# ignored in this process and in every command a test starts: give the Ctrl-C tests Python's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from tests.support import PostgresServer, built_once, checkout_leftovers, postgres_missing  # noqa: E402

LEFTOVERS_BEFORE, LEFTOVERS_GAINED = pytest.StashKey[set](), pytest.StashKey[list]()


def pytest_sessionstart(session):
    """In the process that runs the session (xdist's controller, not a worker): what the checkout
    holds besides its tracked files before the tests run."""
    if not hasattr(session.config, "workerinput"):
        session.config.stash[LEFTOVERS_BEFORE] = checkout_leftovers()


def pytest_sessionfinish(session):
    """Fail the session if the tests added files to the checkout: a test writes into tmp_path, never
    beside the sources (MLflow's default artifact root ./mlruns, Hydra's ./outputs, ...)."""
    before = session.config.stash.get(LEFTOVERS_BEFORE, None)
    if before is None:
        return
    gained = sorted(checkout_leftovers() - before)
    if gained:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        session.config.stash[LEFTOVERS_GAINED] = gained


def pytest_collection_finish(session):
    """In the process that runs the tests: load what most of them use (MLflow's tracking client and
    SQL store, Hydra, scipy.stats), then move everything the imports made (some 360,000 objects) out
    of the garbage collector's sight. Every full collection would scan them again, and the tests
    that compose configs or track runs allocate enough to trigger many: composing the logistic grid
    at size=smoke with these modules loaded took 2.82 s of CPU instead of 3.41 s (medians of 6
    interleaved rounds)."""
    import hydra  # noqa: F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    import scipy.stats  # noqa: F401
    from mlflow.tracking import MlflowClient  # noqa: F401

    gc.freeze()


def pytest_collection_modifyitems(items):
    """Slow (end-to-end) tests first, in their usual order: under `--dist loadgroup` (pyproject) the
    workers take the queue in this order, so the short tests fill the gaps at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory):
    """An SQLite file with MLflow's schema, created once per test session and shared by the xdist
    workers (the migrations cost seconds of CPU in every command that creates a store); copy it
    (:func:`store_in`), never write to it."""
    def create(directory):
        from mlflow.tracking import MlflowClient

        MlflowClient(f"sqlite:///{directory / 'mlflow.db'}").search_experiments()  # creates the schema

    return built_once(tmp_path_factory, "migrated_store", create) / "mlflow.db"


@pytest.fixture
def store_in(migrated_store):
    """``store_in(workdir)`` puts a copy of the migrated store at workdir/outputs/mlflow.db (the CLI's
    default store) and returns the workdir, for tests whose subject is not the store's creation."""
    def put(workdir, name="outputs/mlflow.db"):
        target = workdir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(migrated_store, target)
        return workdir

    return put


@pytest.fixture
def postgres():
    """A private PostgreSQL server on 127.0.0.1 (tests.support.PostgresServer), stopped and deleted
    afterwards; the test is skipped, with the reason, where PostgreSQL or its driver is not installed."""
    reason = postgres_missing()
    if reason:
        pytest.skip(reason)
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter, config):
    """Name the files the tests left in the checkout (the session fails); say how many bad inputs the
    reliability suite tried and how many were refused cleanly."""
    gained = config.stash.get(LEFTOVERS_GAINED, [])
    if gained:
        terminalreporter.write_sep("=", f"the tests left {len(gained)} path(s) in the checkout (the session fails)",
                                   red=True)
        for path in gained:
            terminalreporter.write_line(path)
    reports = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])
               if getattr(r, "when", "call") == "call" and "::test_bad_input_" in r.nodeid]
    if reports:
        refused = sum(r.passed for r in reports)
        terminalreporter.write_line(f"mcsa-bench reliability: {len(reports)} bad inputs tried, {refused} refused "
                                    "with exit 2, one line, no traceback and no run")


@pytest.fixture
def compositions_from_scratch(monkeypatch):
    """The group overrides of every job composed from scratch (``composition.compose_from_scratch``)."""
    from mcsa_bench.jobs import composition

    calls, compose_base = [], composition.compose_from_scratch
    monkeypatch.setattr(composition, "compose_from_scratch",
                        lambda loader, name, groups: calls.append(groups) or compose_base(loader, name, groups))
    return calls
