"""Run lifecycle (mcsa_bench.tracking.lifecycle): signals deferred while a run is created, an
interrupt found behind a library's clean-up error, and the rules that judge a run's process gone."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import wait_for


def test_an_interrupt_masked_by_a_librarys_clean_up_error_is_found():
    """SIGTERM inside a database call whose clean-up then fails (a locked SQLite file): the job must
    still end KILLED with the signal's exit code, so it looks for the interrupt behind the error."""
    from mcsa_bench.tracking.lifecycle import Terminated, exit_code, interrupt_behind

    def query():
        try:
            raise Terminated(signal.SIGTERM)  # what the signal handler raises mid-query
        except KeyboardInterrupt:
            # the library's rollback fails; its error chains the interrupt implicitly (__context__), as a
            # library's does, which is what interrupt_behind must see through
            raise sqlite3.OperationalError("database is locked")  # noqa: B904

    with pytest.raises(RuntimeError) as masked:
        try:
            query()
        except sqlite3.OperationalError as error:
            raise RuntimeError("(sqlite3.OperationalError) database is locked") from error
    found = interrupt_behind(masked.value)
    assert isinstance(found, Terminated) and exit_code(found) == 143
    assert interrupt_behind(RuntimeError("no signal")) is None
    looped = ValueError("a cycle")
    looped.__context__ = RuntimeError("back")
    looped.__context__.__context__ = looped
    assert interrupt_behind(looped) is None


@pytest.mark.parametrize("signum,raised", [(signal.SIGTERM, "Terminated"), (signal.SIGINT, "KeyboardInterrupt")])
def test_a_signal_while_a_run_is_created_is_handled_once_the_run_is_known(signum, raised):
    """A signal inside MLflow's create_run would leave a RUNNING run whose id nobody holds (seen in
    CI: a SIGTERMed single run stayed RUNNING). Under signals_deferred the block completes, then the
    signal is raised as usual, and the handlers are what they were."""
    from mcsa_bench.tracking.lifecycle import install_signal_handlers, signals_deferred

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        install_signal_handlers()
        before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        created = []
        with pytest.raises(KeyboardInterrupt) as interrupt:
            with signals_deferred():
                os.kill(os.getpid(), signum)
                time.sleep(0.05)  # the handler runs here, in the block
                created.append("run id")
        assert created == ["run id"] and type(interrupt.value).__name__ == raised
        assert {s: signal.getsignal(s) for s in before} == before
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_a_process_is_judged_gone_when_it_has_ended_was_replaced_or_went_silent():
    """The stale-run rules of lifecycle.judge, one case each; a zombie (ended, not yet reaped: a
    launcher killed by kill -9 under a parent still reading its pipes) counts as gone, or its
    joblib workers would run on."""
    import socket

    from mcsa_bench.tracking.lifecycle import HEARTBEAT_TAG, STALE_SECONDS, identity_tags, judge, process_token

    here = identity_tags()
    assert not judge(here).stale and judge({}).reason.startswith("no liveness tags")
    assert judge({**here, "mcsa_bench.process": "another boot:1"}).stale  # the pid was reused
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
             what="the child to end")
    assert process_token(child.pid) is None and judge({**here, "mcsa_bench.pid": str(child.pid)}).stale
    child.wait()
    assert judge({**here, "mcsa_bench.pid": str(child.pid)}).reason.endswith("is gone")
    elsewhere = {**here, "mcsa_bench.host": f"not-{socket.gethostname()}"}
    now = float(here[HEARTBEAT_TAG])
    assert not judge(elsewhere, now=now + STALE_SECONDS - 1).stale
    assert judge(elsewhere, now=now + STALE_SECONDS + 1).stale


SWALLOWED_SIGTERM = """
import gc, os, signal, sys, time
from mcsa_bench import get_registry
from mcsa_bench.assembly import assemble
from mcsa_bench.tracking.lifecycle import Terminated, install_signal_handlers

install_signal_handlers()
parts = assemble(get_registry(), model=("gaussian", {"dim": 3}), estimator="pmcsa", n_samples=4)
if sys.argv[1] == "numpy":
    from mcsa_bench.engine import run
    def compute():
        run(*parts.run_args(), n_iters=4000, seed=0, eval_every=200)
else:
    from mcsa_bench.accel.engine import CellSettings, run_cell
    def compute():
        run_cell(*parts.jax_twins(4000), CellSettings(n_iters=4000, eval_every=200), range(3))
    compute()  # compiled once, so the signal below comes while the cell runs

def sigterm_inside_a_collection(phase, info):
    if phase == "start":
        gc.callbacks.remove(sigterm_inside_a_collection)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler raises here, in the callback, where Python ignores it

gc.set_threshold(1)  # a collection at the next few allocations
gc.callbacks.append(sigterm_inside_a_collection)
try:
    compute()
except Terminated as interrupt:
    print("stopped by", interrupt.signum)
else:
    print("ran to the end")
"""


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_a_sigterm_python_swallows_in_a_garbage_collection_callback_still_stops_the_loop(backend):
    """Seen in CI: SIGTERM arrived inside JAX's garbage-collection callback, Python printed "Exception
    ignored" and the cell computed on. The interrupt is kept and the loop raises it at its next step."""
    if backend == "jax":
        pytest.importorskip("jax")
    result = subprocess.run([sys.executable, "-c", SWALLOWED_SIGTERM, backend], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"stopped by {int(signal.SIGTERM)}", result.stdout + result.stderr
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr, result.stderr
