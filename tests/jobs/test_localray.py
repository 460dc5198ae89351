"""A sweep's own Ray instance (mcsa_bench.jobs.localray): confined to 127.0.0.1 only when the sweep starts
it itself; a cluster named by an address is joined as Ray would."""

import pytest

from mcsa_bench import get_registry
from mcsa_bench.jobs.config import register_configs


@pytest.fixture(scope="module", autouse=True)
def configs():
    register_configs(get_registry())


@pytest.mark.parametrize(("overrides", "ray_address", "starts_own"), [
    (["hydra/launcher=ray"], "", True),
    (["hydra/launcher=ray", "+hydra.launcher.ray.init.address=local"], "", True),
    (["hydra/launcher=ray", "+hydra.launcher.ray.init.address=10.0.0.5:6379"], "", False),
    (["hydra/launcher=ray", "+hydra.launcher.ray.init.address=auto"], "", False),
    (["hydra/launcher=ray"], "10.0.0.5:6379", False),
    (["hydra/launcher=joblib"], "", False),
])
def test_only_a_ray_instance_that_the_sweep_starts_itself_is_confined(overrides, ray_address, starts_own, monkeypatch):
    """A sweep's own Ray instance is kept on 127.0.0.1 (jobs/localray.py; tests/e2e/test_scaling.py runs one);
    a cluster named by ray.init.address or RAY_ADDRESS is joined as Ray would."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="the 'ray' extra is not installed")
    from mcsa_bench.jobs.config import compose as compose_sweep
    from mcsa_bench.jobs.localray import starts_own_instance

    monkeypatch.setenv("RAY_ADDRESS", ray_address)
    composition = compose_sweep([*overrides, "seed=0,1"], multirun=True)
    assert starts_own_instance(composition.launcher, composition.ray_address) is starts_own
