"""The checkpoint check (mcsa_bench.testing.checkpoints): a component whose state a checkpoint cannot
store or restore fails it, naming what is wrong; the built-in IMH passes it."""

from mcsa_bench.builtin.estimators import PMCSA
from mcsa_bench.builtin.kernels import IMH
from mcsa_bench.testing import check_factory
from mcsa_bench.testing.checkpoints import check_estimator_state
from tests.testing.test_conformance import failed


class UnstorableIMH(IMH):
    """Keeps its state in an iterator, which a checkpoint cannot hold."""

    def __init__(self):
        self.counter = iter(range(10**6))


class ClosureIMH(IMH):
    """Keeps its state in a closure, which a checkpoint leaves out as configuration: every transition
    but the first of a kernel's life draws one extra uniform, so a restored kernel steps otherwise."""

    def __init__(self):
        ticks = []
        self.tick = lambda: ticks.append(None) or len(ticks)

    def step(self, rng, state, target, proposal, n_proposals=1):
        if self.tick() > 1:
            rng.random()
        return super().step(rng, state, target, proposal, n_proposals)


def test_a_component_whose_state_a_checkpoint_cannot_restore_fails_the_checkpoint_check():
    detail = failed(check_factory("kernel", UnstorableIMH, checks=["checkpoint_state"]), "checkpoint_state").detail
    assert "cannot be stored in a checkpoint: state.counter is a builtins.range_iterator" in detail
    detail = failed(check_factory("kernel", ClosureIMH, checks=["checkpoint_state"]), "checkpoint_state").detail
    assert detail.startswith("restored from a checkpoint, its next step differs")
    assert not check_estimator_state(lambda: PMCSA(kernel=ClosureIMH(), n_samples=4)).passed  # through its kernel
    (result,) = check_factory("kernel", IMH, checks=["checkpoint_state"])[1:]
    assert result.status == "passed"
