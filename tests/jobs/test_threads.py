"""The ``threads`` key: BLAS/OpenMP threads per job (mcsa_bench.jobs.threads)."""

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from mcsa_bench import get_registry
from mcsa_bench.api import ConfigurationError
from mcsa_bench.jobs.config import RunSettings, compose_jobs, register_configs
from mcsa_bench.jobs.threads import check_threads, limit_threads


def blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_limit_threads_sets_every_blas_pool():
    assert blas_threads(), "numpy's BLAS is not visible to threadpoolctl"
    with threadpool_limits(limits=2):  # restores this process's pools afterwards
        assert blas_threads() == {2}
        limit_threads(1)
        assert blas_threads() == {1}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_bad_thread_counts_name_the_allowed_values(bad):
    with pytest.raises(ConfigurationError, match=r"threads must be an integer >= 1 .*got"):
        check_threads(bad)


def test_threads_is_a_top_level_key_defaulting_to_one():
    register_configs(get_registry())
    (_, default), = compose_jobs([], multirun=False)
    assert RunSettings.from_config(default).threads == 1
    (_, zero), = compose_jobs(["threads=0"], multirun=False)
    with pytest.raises(ConfigurationError, match="threads must be an integer >= 1"):
        RunSettings.from_config(zero)
