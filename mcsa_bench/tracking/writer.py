"""A run's writes to the tracking store, sent in order from a background thread.

The iteration loop only appends to a queue (:meth:`StoreWriter.put`, :meth:`StoreWriter.put_metrics`);
the writer thread sends the queue's head and removes it once the store has taken it, so

- a slow or frozen store never stalls the optimization;
- a signal never breaks a write half-way (Python runs signal handlers in the main thread only), and
  nothing already sent is sent again;
- a store that goes away and comes back within ``outage_seconds`` (``tracking.outage_seconds``,
  default 60 s) loses nothing: a transient failure (no connection, a timeout, an HTTP 5xx, a locked
  SQLite file) is retried with back-off, 0.5 s doubling to 8 s. Past that bound, or on any other error,
  the writer stops (:attr:`StoreWriter.lost` says why) and the job's local record keeps everything; a
  write the store refused (it answered, but not yes) also ends the run FAILED there, saying which;
- the queue is bounded (:data:`MAX_BACKLOG_POINTS` metric values): an outage that outgrows it counts
  as lost at once, so memory stays bounded too.

:meth:`StoreWriter.close` sends what is queued and waits for it within a deadline: at a run's normal end
up to the outage bound plus one request, after a signal :data:`DRAIN_AFTER_SIGNAL_SECONDS`.

The writes made outside a run's writer (creating a run, a sweep's parent run and its end, claims, stale
runs, ``sync``) go through the same retry: :func:`retried`, or a client wrapped in :class:`Retrying`.
The first retry of a process says so in one line on stderr.
"""

from __future__ import annotations

import collections
import functools
import itertools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

FLUSH_SECONDS = 2.0  # metrics reach the store within this long of their evaluation
METRICS_PER_BATCH = 1000
MAX_BACKLOG_POINTS = 200_000
BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0)  # then 8 s between tries until the outage bound
#: one request's longest time with MLflow's own HTTP retries (tracking.MLFLOW_DEFAULTS: 3 tries of 10 s, 3 s back-off)
REQUEST_SECONDS = 35.0
DRAIN_AFTER_SIGNAL_SECONDS = 5.0  # after a signal: a run's drain, its sweep's end, each
_TRANSIENT_NAMES = {"ConnectionError", "Timeout", "ConnectTimeout", "ReadTimeout", "TimeoutError",
                    "ConnectionRefusedError", "ConnectionResetError", "RemoteDisconnected", "OperationalError"}


def is_transient(error: BaseException) -> bool:
    """A failure worth retrying: the store could not be reached or was busy, not a refused request.

    MLflow wraps the cause (``requests``' ConnectionError, SQLAlchemy's OperationalError for a locked
    or vanished database) in an MlflowException, so the whole chain of causes is searched."""
    seen = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if {cls.__name__ for cls in type(link).__mro__} & _TRANSIENT_NAMES:
            return True
        status = getattr(link, "get_http_status_code", lambda: None)()
        if isinstance(status, int) and status >= 500:
            return True
        if getattr(link, "error_code", None) == "TEMPORARILY_UNAVAILABLE":  # MLflow's name for a busy database
            return True
        text = str(link)
        if "Max retries exceeded" in text or "database is locked" in text or "Connection refused" in text:
            return True
        link = link.__cause__ or link.__context__
    return False


def retried(method: Callable[..., Any], *args: Any, outage_seconds: float, **kwargs: Any) -> Any:
    """``method(*args, **kwargs)``, retried with back-off while it fails transiently (:func:`is_transient`),
    for up to ``outage_seconds``; then, or on any other error, the error is raised."""
    outage_started = None
    for attempt in itertools.count():
        try:
            return method(*args, **kwargs)
        except Exception as error:
            now = time.monotonic()
            outage_started = outage_started or now
            pause = BACKOFF_SECONDS[min(attempt, len(BACKOFF_SECONDS) - 1)]
            if not is_transient(error) or now + pause - outage_started > outage_seconds:
                raise
            _say_retrying(error, outage_seconds)
            time.sleep(pause)


_retrying_said = threading.Event()


def _say_retrying(error: BaseException, outage_seconds: float) -> None:
    """One line per process, the first time a write is retried (MLflow's own traceback is silenced:
    tracking.store quiets its logger)."""
    if not _retrying_said.is_set():
        _retrying_said.set()
        while error.__cause__ is not None:  # the driver's reason, not MLflow's wrapping of it
            error = error.__cause__
        print(f"mcsa-bench: the tracking store did not take a write ({type(error).__name__}: "
              f"{first_line(error)[:200]}); retrying for up to {outage_seconds:g} s", file=sys.stderr)


def within(seconds: float, call: Callable[[], Any]) -> str | None:
    """Run ``call()`` in a daemon thread, waiting at most ``seconds``: None once it is done, else why not
    (its error, or that it had not finished; it is then left to itself)."""
    failure: list[str] = []

    def attempt() -> None:
        try:
            call()
        except Exception as error:
            failure.append(f"{type(error).__name__}: {first_line(error)[:300]}")

    thread = threading.Thread(target=attempt, name="mcsa-bench-bounded-write", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        return f"no answer within {seconds:g} s"
    return failure[0] if failure else None


class Retrying:
    """A store client whose every method call goes through :func:`retried`."""

    def __init__(self, client, outage_seconds: float):
        self._client, self._outage_seconds = client, outage_seconds

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return functools.partial(retried, getattr(self._client, name), outage_seconds=self._outage_seconds)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class StoreWriter:
    """Sends ``(method, args, kwargs)`` calls on ``client`` in order, metric values in batches."""

    def __init__(self, client, run_id: str, describe: str, outage_seconds: float,
                 on_lost: Callable[[], None] = lambda: None):
        self.client, self.run_id, self.describe, self.outage_seconds = client, run_id, describe, outage_seconds
        self.lost: str | None = None
        self._on_lost = on_lost
        self._queue: collections.deque = collections.deque()  # ("metrics", list) or (method, args, kwargs)
        self._backlog = 0  # metric values queued
        self._calls = 0  # other calls queued
        self._changed = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="mcsa-bench-store-writer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the caller's side

    def put(self, method: str, *args: Any, **kwargs: Any) -> None:
        with self._changed:
            if self.lost is None:
                self._queue.append((method, args, kwargs))
                self._calls += 1
                self._changed.notify()

    def put_metrics(self, metrics: list) -> None:
        with self._changed:
            if self.lost is not None:
                return
            self._queue.append(("metrics", metrics))
            self._backlog += len(metrics)
            if self._backlog > MAX_BACKLOG_POINTS:
                self._give_up(f"more than {MAX_BACKLOG_POINTS} metric values waited for the store")
            elif self._backlog >= METRICS_PER_BATCH:
                self._changed.notify()

    def close(self, deadline_seconds: float | None = None) -> None:
        """Send everything queued, then stop; past the deadline the rest counts as lost."""
        if deadline_seconds is None:
            deadline_seconds = self.outage_seconds + REQUEST_SECONDS
        with self._changed:
            self._closing = True
            self._changed.notify()
        self._thread.join(deadline_seconds)
        if self._thread.is_alive():
            with self._changed:
                self._give_up(f"the store took more than {deadline_seconds:.0f} s to take the run's last writes")

    # ------------------------------------------------------------------ the writer thread

    def _loop(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(self._ready, timeout=FLUSH_SECONDS)
                if self.lost is not None or (self._closing and not self._queue):
                    return
                if not self._queue:
                    continue
                call, size = self._head()
            if not self._send(call):
                return
            with self._changed:
                if self.lost is not None:  # close() gave up while the call was on its way
                    return
                for _ in range(size):
                    item = self._queue.popleft()
                    if item[0] == "metrics":
                        self._backlog -= len(item[1])
                    else:
                        self._calls -= 1

    def _ready(self) -> bool:
        return self.lost is not None or self._closing or self._backlog >= METRICS_PER_BATCH or self._calls > 0

    def _head(self) -> tuple[tuple, int]:
        """The next call and how many queue items it covers: consecutive metric items make one batch."""
        first = self._queue[0]
        if first[0] != "metrics":
            return first, 1
        batch, size = [], 0
        for item in self._queue:
            if item[0] != "metrics" or (batch and len(batch) + len(item[1]) > METRICS_PER_BATCH):
                break
            batch.extend(item[1])
            size += 1
        return ("log_batch", (self.run_id,), {"metrics": batch}), size

    def _send(self, call: tuple) -> bool:
        """One call, retried through a transient outage; False once the store counts as lost."""
        method, args, kwargs = call
        try:
            retried(getattr(self.client, method), *args, outage_seconds=self.outage_seconds, **kwargs)
            return True
        except Exception as error:
            reason = f"{type(error).__name__}: {first_line(error)}"
            with self._changed:
                self._give_up(reason)
            if not is_transient(error):
                self._end_refused(method, reason)
            return False

    def _end_refused(self, method: str, reason: str) -> None:
        """After a write the store refused (it answered: an artifact upload got 401, say): end the run FAILED,
        saying so, within one request's time, rather than leave it RUNNING while its process ends. `mcsa-bench
        sync` of the job's directory completes it later."""
        from mlflow.entities import RunTag

        from mcsa_bench.tracking.record import ERROR_TAG, ERROR_TYPE_TAG

        error = f"the tracking store refused the run's {method} ({reason})"[:5000]
        tags = [RunTag(ERROR_TAG, error), RunTag(ERROR_TYPE_TAG, "TrackingError")]
        within(REQUEST_SECONDS, lambda: (self.client.log_batch(self.run_id, tags=tags),
                                         self.client.set_terminated(self.run_id, "FAILED")))

    def _give_up(self, reason: str) -> None:
        """(With the lock held.) Stop sending; the local record keeps the run."""
        if self.lost is None:
            self.lost = reason
            self._queue.clear()
            self._backlog = self._calls = 0
            self._changed.notify_all()
            self._on_lost()
            print(f"mcsa-bench: lost the tracking store {self.describe} ({reason[:300]}); "
                  "the run goes on and keeps its results on local disk", file=sys.stderr)
