"""JAX on the CPU, one XLA thread per test process (the suite runs in parallel under pytest-xdist)."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
