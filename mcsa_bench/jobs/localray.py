"""The Ray instance a sweep starts for itself, kept on 127.0.0.1 (docs/scaling.md §4).

With ``hydra/launcher=ray`` and no ``hydra.launcher.ray.init.address``, Hydra's Ray launcher starts
a Ray instance for the sweep. By Ray's defaults (2.60) that instance listens on other addresses
than loopback (12 of 14 listening sockets in a two-job sweep: GCS, raylet, agents, monitor, the
launching process and every worker), and its API server, which Ray starts even with
``include_dashboard=False``, asks the cloud metadata service (169.254.169.254) which cloud it runs
on. :func:`local_only` starts it instead in Ray's single-machine mode, where the
node's address is 127.0.0.1 and every Ray server binds to it, without the API server (dashboard,
usage statistics, cloud probe), and as an instance of its own (``RAY_ADDRESS=local``: not a
``ray start`` cluster that Ray would otherwise find on this machine and join). A cluster named by
an address (``HOST:PORT``, ``auto``, or RAY_ADDRESS) is used as Ray would use it.

Ray's driver also takes SIGTERM over when it starts or joins an instance: ``ray.init`` installs
``sys.exit(15)`` as its handler, the node it starts "kill Ray's processes, exit 1", and its C++ core
worker a failure handler (stack trace, then abort at exit), so a SIGTERM skipped mcsa-bench's clean-up:
the sweep exited 134 with its runs RUNNING. :func:`own_signals` keeps mcsa-bench's handler for every
Ray sweep, with the driver's failure handler off (Ray's switch for it; its workers keep theirs); Ray's
processes still end with the driver (``ray.init`` registers ``ray.shutdown`` to run at exit).

Ray has no public switch for the first two: the single-machine mode is read from the environment
when Ray is first imported (and stays for the rest of the process), and the API server is skipped
by replacing ``Node.start_api_server`` while the instance starts. This module is the only one that
touches Ray's private modules.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from unittest import mock

from mcsa_bench.tracking.lifecycle import Terminated

RAY_LAUNCHER = "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"
#: an instance of its own, Ray's single-machine mode (its default on Windows and macOS), no usage statistics
LOCAL_ONLY_ENV = {"RAY_ADDRESS": "local", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def starts_own_instance(launcher: str, address: str | None) -> bool:
    """Whether the launch starts a Ray instance (Hydra's Ray launcher without a cluster's address)."""
    if launcher != RAY_LAUNCHER:
        return False
    return address == "local" or (address is None and os.environ.get("RAY_ADDRESS", "") in ("", "local"))


@contextlib.contextmanager
def local_only() -> Iterator[None]:
    """A Ray instance started inside listens and connects on 127.0.0.1 only, with no API server."""
    with mock.patch.dict(os.environ, LOCAL_ONLY_ENV):
        from ray._private import node, ray_constants

        if ray_constants.ENABLE_RAY_CLUSTER:  # read when Ray was first imported in this process
            raise RuntimeError("Ray was imported before mcsa-bench could keep its own instance on 127.0.0.1")
        with mock.patch.object(node.Node, "start_api_server", lambda self, **kwargs: None):
            yield


@contextlib.contextmanager
def own_signals() -> Iterator[None]:
    """SIGTERM stays mcsa-bench's (tracking.lifecycle) while Ray starts or joins an instance inside (its
    handlers are not installed, the driver's failure handler is off).

    ``ray.get`` catches the :class:`Terminated` our handler raises inside it and raises a plain
    KeyboardInterrupt (Ctrl-C's) instead: the signal is noted on its way, and the interrupt that
    leaves the block is the termination again."""
    from ray._private import ray_constants, utils

    received: list[int] = []
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}

    def note(signum, frame) -> None:
        received.append(signum)
        handlers[signum](signum, frame)

    for signum in handlers:
        signal.signal(signum, note)
    try:
        with (mock.patch.object(utils, "set_sigterm_handler", lambda handler: None),
              mock.patch.object(ray_constants, "RAY_DISABLE_FAILURE_SIGNAL_HANDLER", True)):
            yield
    except KeyboardInterrupt as interrupt:
        if received and not isinstance(interrupt, Terminated):
            raise Terminated(received[-1]) from interrupt
        raise
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
