"""The checkpoint check: a component's own state survives a checkpoint (docs/plugins.md, "Checkpoints").

A component that has run a few steps is stored as a checkpoint stores it (plain data and arrays)
and restored into a freshly built one; both then make one more step from the same state with
copies of one generator, and must agree exactly. A state that a checkpoint cannot hold (an
attribute of Python objects, an object created after the factory) is a failure naming it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from mcsa_bench.api import Estimator, Kernel, Optimizer
from mcsa_bench.engine.checkpoint import CheckpointError, Decoder, Encoder
from mcsa_bench.testing.estimators import stationary_state
from mcsa_bench.testing.results import Measurement
from mcsa_bench.testing.targets import gaussian_target, offset_proposal

STEPS = 3  # steps before the checkpoint: adaptive state has moved
FINE = "restored from a checkpoint into a fresh component, the next step is the same, bit for bit"


def through_a_checkpoint(value: Any, into: Any) -> Any:
    """``value`` written as a checkpoint writes it, read back into ``into``."""
    encoder = Encoder()
    node = json.loads(json.dumps(encoder.encode(value, "state")))
    return Decoder(encoder.arrays.__getitem__).decode(node, into, "state")


def _compare(advance: Callable[[Any, np.random.Generator], np.ndarray], component: Any, fresh: Any,
             rng: np.random.Generator) -> Measurement:
    try:
        restored = through_a_checkpoint(component, fresh)
    except CheckpointError as error:
        return Measurement.problems([f"its state cannot be stored in a checkpoint: {error}"], FINE)
    same = np.array_equal(advance(component, copy.deepcopy(rng)), advance(restored, rng))
    return Measurement.problems([] if same else ["restored from a checkpoint, its next step differs"], FINE)


def check_kernel_state(make_kernel: Callable[[], Kernel]) -> Measurement:
    kernel, target = make_kernel(), gaussian_target(3)
    proposal, rng = offset_proposal(target), np.random.default_rng(0)
    state = kernel.init(target, proposal.sample(rng, 8))
    for _ in range(STEPS):
        state = kernel.step(rng, state, target, proposal).state
    return _compare(lambda k, r: k.step(r, state, target, proposal).state.z, kernel, make_kernel(), rng)


def check_estimator_state(make_estimator: Callable[[], Estimator]) -> Measurement:
    estimator, target = make_estimator(), gaussian_target(3)
    q, rng = offset_proposal(target), np.random.default_rng(0)
    state = stationary_state(estimator, target, rng)
    for _ in range(STEPS):
        state = estimator.estimate(rng, state, target, q).state
    return _compare(lambda e, r: e.estimate(r, state, target, q).grad, estimator, make_estimator(), rng)


def check_optimizer_state(make_optimizer: Callable[[], Optimizer]) -> Measurement:
    optimizer, rng = make_optimizer(), np.random.default_rng(0)
    params = rng.standard_normal(3)
    state = optimizer.init(params)
    for _ in range(STEPS):
        params, state = optimizer.step(params, rng.standard_normal(3), state)
    grad = rng.standard_normal(3)
    try:
        restored = through_a_checkpoint(state, make_optimizer().init(params))
    except CheckpointError as error:
        return Measurement.problems([f"its state cannot be stored in a checkpoint: {error}"], FINE)
    same = np.array_equal(optimizer.step(params, grad, state)[0], optimizer.step(params, grad, restored)[0])
    return Measurement.problems([] if same else ["restored from a checkpoint, its next step differs"], FINE)
