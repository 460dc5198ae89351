"""The fork server as mcsa-bench once shipped it (benchmarks/archive/forked_workers.py ``--server design``):
imported by the server only (``set_forkserver_preload``), it loads what jobs need and the registry
of components, then freezes what that made out of garbage collection; the workers inherit it all."""

import gc
import importlib

from mcsa_bench.jobs.workers import JOB_MODULES
from mcsa_bench.plugins import get_registry

for _module in JOB_MODULES:
    importlib.import_module(_module)
get_registry()
gc.freeze()
