"""How runs end: signals, process liveness, heartbeats, and the stale-run sweep.

Every run ends in a terminal state. SIGTERM (and SIGHUP) become :class:`Terminated`, a
``KeyboardInterrupt``, so the code that marks runs KILLED on Ctrl-C handles them too; the
command exits 130 after SIGINT and 143 after SIGTERM. A process killed outright (``kill -9``,
the OS's out-of-memory killer) cannot clean up: its runs carry their host, pid and process
start time, and a heartbeat tag, so a later command recognizes them as stale and marks them KILLED.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mcsa_bench.engine.interrupts import keep_swallowed_interrupts
from mcsa_bench.tracking.record import HEARTBEAT_TAG, HOST_TAG, PID_TAG, PROCESS_TAG

#: a live run updates its heartbeat this often (seconds)
HEARTBEAT_SECONDS = 30.0
#: a run on another host whose heartbeat is older than this is considered gone (seconds)
STALE_SECONDS = 10 * HEARTBEAT_SECONDS
#: ``host|pid|token`` of the process that launched a run or sweep; jobs in worker processes on
#: the same host end when it is gone
LAUNCHER_ENV = "MCSA_BENCH_LAUNCHER"
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM or SIGHUP: stop like Ctrl-C, with that signal's exit code."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(interrupt: KeyboardInterrupt) -> signal.Signals:
    """The signal behind an interrupt: SIGTERM or SIGHUP for :class:`Terminated`, else SIGINT (Ctrl-C)."""
    return signal.Signals(getattr(interrupt, "signum", signal.SIGINT))


def exit_code(interrupt: KeyboardInterrupt) -> int:
    return EXIT_CODES[signal_of(interrupt)]


def interrupt_behind(error: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM during whose handling ``error`` was raised, if any. A signal arrives
    in the middle of whatever runs, e.g. a database query; the library's own clean-up can then
    fail (a locked SQLite file) and replace the interrupt by its error, with the interrupt as
    ``__context__``."""
    pending, seen = [error], set()
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        if isinstance(error, KeyboardInterrupt):
            return error
        seen.add(id(error))
        pending += [error.__cause__, error.__context__]
    return None


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (no-op elsewhere); an interrupt
    raised where Python swallows it (a garbage-collection callback) is kept for the loops to raise again."""
    if threading.current_thread() is not threading.main_thread():
        return
    keep_swallowed_interrupts()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_terminated)


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT, SIGTERM and SIGHUP until the block is done, then act on the first one received.

    For creating a run in the store: a signal inside ``create_run`` would leave a RUNNING run whose
    id nobody knows; after the block the run exists and its id is bound, so the usual clean-up
    marks it KILLED. For every write to the store: a transaction is not broken half-way. Blocks
    nest (an inner block's signal goes to the outer one). (Only in the main thread, where Python
    runs signal handlers.)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, lambda signum, frame: received.append(signum)) for signum in held}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if received:
            signal.raise_signal(received[0])  # now handled as it would have been


# ------------------------------------------------------------------------------ liveness


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_token(pid: int) -> str | None:
    """``<boot id>:<start time>`` of a live process, None if there is none with that pid or it
    has ended and waits to be reaped (a zombie: a launcher killed by ``kill -9`` whose parent
    has not collected it yet).

    Linux only (``/proc``); elsewhere ``""`` for a live process, which makes liveness a pid check.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return _pid_exists(pid)
    fields = stat.rsplit(")", 1)[1].split()  # field 3 onwards: after the command name
    if fields[0] == "Z":
        return None
    return f"{_boot_id()}:{fields[19]}"  # field 22: start time


def _pid_exists(pid: int) -> str | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return ""


def identity_tags() -> dict[str, str]:
    """Where this process runs, for the stale-run sweep."""
    pid = os.getpid()
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), PROCESS_TAG: process_token(pid) or "",
            HEARTBEAT_TAG: f"{time.time():.0f}"}


@dataclass(frozen=True)
class Verdict:
    stale: bool
    reason: str


def judge(tags: dict[str, str], now: float | None = None) -> Verdict:
    """Whether a RUNNING run's process is gone, from its identity and heartbeat tags."""
    now = time.time() if now is None else now
    if PID_TAG not in tags:
        return Verdict(False, "no liveness tags (not started by this version of mcsa-bench)")
    if tags.get(HOST_TAG) == socket.gethostname():
        token = process_token(int(tags[PID_TAG]))
        if token is None:
            return Verdict(True, f"its process {tags[PID_TAG]} is gone")
        if tags.get(PROCESS_TAG) and token and token != tags[PROCESS_TAG]:
            return Verdict(True, f"its process {tags[PID_TAG]} is gone (the pid was reused)")
        return Verdict(False, "its process is alive")
    age = now - float(tags.get(HEARTBEAT_TAG, 0))
    if age > STALE_SECONDS:
        return Verdict(True, f"no heartbeat from {tags.get(HOST_TAG)} for {age / 60:.0f} min")
    return Verdict(False, f"heartbeat {age:.0f} s ago from {tags.get(HOST_TAG)}")


# ------------------------------------------------------------------------- background threads


class Heartbeat:
    """Calls ``beat()`` every ``interval`` seconds in a daemon thread until stopped."""

    def __init__(self, beat, interval: float = HEARTBEAT_SECONDS):
        self._beat, self._interval = beat, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mcsa-bench-heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._beat()
            except Exception:  # the run itself reports tracking failures; a heartbeat never crashes it
                return

    def stop(self) -> None:
        self._stop.set()


def launcher_identity() -> str:
    """This process as the launcher of jobs, for :data:`LAUNCHER_ENV`."""
    pid = os.getpid()
    return f"{socket.gethostname()}|{pid}|{process_token(pid) or ''}"


def _launcher() -> tuple[str, int, str] | None:
    host, _, rest = os.environ.get(LAUNCHER_ENV, "").partition("|")
    pid, _, token = rest.partition("|")
    return (host, int(pid), token) if pid.isdigit() else None


def in_worker_process() -> bool:
    """True in a job process other than the launcher (joblib, submitit, Ray workers)."""
    launcher = _launcher()
    return launcher is not None and (launcher[0], launcher[1]) != (socket.gethostname(), os.getpid())


def watch_launcher(interval: float = 2.0) -> None:
    """In a worker process on the launcher's host, end this process (as SIGTERM) once the
    launching process is gone: a joblib or submitit worker whose launcher was killed would
    otherwise run on, orphaned. Workers on other hosts (Ray, Slurm) are not watched.
    """
    launcher = _launcher()
    if (not in_worker_process() or launcher[0] != socket.gethostname()
            or getattr(watch_launcher, "_started", False)):
        return
    _, pid, token = launcher

    def loop() -> None:
        while True:
            time.sleep(interval)
            current = process_token(pid)
            if current is None or (token and current and current != token):
                os.kill(os.getpid(), signal.SIGTERM)
                return

    watch_launcher._started = True
    threading.Thread(target=loop, name="mcsa-bench-launcher-watch", daemon=True).start()
