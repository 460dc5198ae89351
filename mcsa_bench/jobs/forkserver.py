"""What the fork server of a joblib sweep loads before it forks the sweep's workers (jobs/workers.py).

The workers of Hydra's joblib launcher are forked from one server process instead of each starting a
fresh interpreter: the server is started by the launching process while pre-flight prepares the store
(the standard library's ``forkserver`` start method, which loky supports), and imports this module
once (``multiprocessing.set_forkserver_preload``). Each worker then starts with numpy, scipy,
Hydra, MLflow, the project and its components' registry already loaded: one import for the sweep
instead of one per worker, on a machine whose cores the launching process needs at the same time.
A forked worker is a clean copy: the server has no threads, no database connection, no open store.
It starts in the launching process's current directory with its ``sys.path`` (the standard library
sends both), and with the environment the server was started with, during the command's pre-flight;
each job then sets what Hydra hands it (``hydra.job.env_set``).

Importing this module has effects, by design; only the fork server imports it:

- everything a job needs, and the registry of components, is loaded;
- what that made is frozen out of garbage collection (``gc.freeze``; the workers inherit it);
- the server leaves without tearing its modules down once the launching process is gone (about 1 s
  of CPU otherwise, during which it keeps the command's output open). Its children end with
  ``os._exit`` and never run this.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os

from mcsa_bench.jobs.workers import JOB_MODULES
from mcsa_bench.plugins import get_registry

for _module in JOB_MODULES:
    importlib.import_module(_module)
get_registry()
gc.freeze()
atexit.register(os._exit, 0)
