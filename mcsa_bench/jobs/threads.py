"""BLAS and OpenMP threads per job (the top-level ``threads`` key; docs/performance.md).

Every job limits the thread pools of the numerical libraries loaded in its process (OpenBLAS or
MKL behind numpy and scipy, OpenMP) to ``threads``, one by default: the models' batched linear
algebra is too small to gain from threads inside one job, and when jobs share cores, BLAS threads
that spin-wait make every job many times slower. Parallel sweeps use one job per core instead.
"""

from __future__ import annotations

from mcsa_bench.api import ConfigurationError


def check_threads(threads: object) -> int:
    """``threads`` as an int, or a :class:`ConfigurationError` naming the allowed values."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigurationError(f"threads must be an integer >= 1 (BLAS/OpenMP threads per job), got {threads!r}")
    return threads


def limit_threads(threads: int) -> None:
    """Limit this process's BLAS and OpenMP thread pools to ``threads`` threads each, from now on."""
    from threadpoolctl import threadpool_limits  # imported here: not needed by `mcsa-bench plugins`

    threadpool_limits(limits=check_threads(threads))
