"""The checkpoint converter (mcsa_bench.tools.convert_checkpoint): a checkpoint written before the settings
table (a pickle) is refused unread by a run and resumes once converted; a planted pickle never runs, in a
run nor in the converter."""

import os
import pickle
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mcsa_bench import run
from mcsa_bench.api import ConfigurationError
from mcsa_bench.engine import Settings
from mcsa_bench.tools.convert_checkpoint import convert
from tests.engine.test_checkpoint import (
    COST,
    Interrupt,
    assert_same_run,
    components,
    interrupt_at,
    read_archive,
    write_archive,
)


@pytest.mark.parametrize("written,scheme,average_from,settings", [
    ("before_settings_table.pkl", "pmcsa", 0.5,
     dict(n_iters=30, seed=4, eval_every=10, eval_schedule="geometric", diagnostics_every=5, diagnostics_replicas=3,
          identity="config A")),
    ("before_settings_table_linear.pkl", "jsa", None, dict(n_iters=30, seed=5, eval_every=10)),
])
def test_a_pickled_checkpoint_is_refused_unread_and_resumes_once_converted(tmp_path, written, scheme, average_from,
                                                                          settings):
    """tests/data/checkpoints/: pickles, interrupted at iteration 30 by the engine of commit 82f5f65,
    which named the engine's settings in the fingerprint (the default eval_schedule left out) and the
    caller's string as ``caller``; those runs' settings are the ones here."""
    pickled = tmp_path / "run.pkl"
    shutil.copy(Path(__file__).parents[1] / "data" / "checkpoints" / written, pickled)
    settings = Settings(**settings)
    uninterrupted = run(*components(scheme, average_from), settings)
    with pytest.raises(ConfigurationError, match=r"earlier pickle format, which can run code.*convert_checkpoint"):
        run(*components(scheme, average_from), replace(settings, checkpoint_every=10, checkpoint_path=pickled))
    path = convert(pickled)
    assert path == tmp_path / "run.npz" and not pickled.exists()
    settings = replace(settings, checkpoint_every=10, checkpoint_path=path)
    converted = path.read_bytes()
    resumed = run(*components(scheme, average_from), settings)
    assert resumed.resumed_from == 20
    # written before the cost counts and the iterate trace: the evaluations after it log no counts, no trace.
    # Written on a machine with AVX-512, whose last bits differ from AVX2's (docs/results.md: pinned to the
    # code and to the arithmetic): the 20 iterations before it are that machine's, so equal to rounding
    # carried through 10 more (measured on AVX2: λ within 3e-16 relative; a lost or misplaced state entry is O(1))
    assert_same_run(resumed, uninterrupted, ignored=("wall_time", *COST), rtol=1e-9)
    assert all(COST[0] not in row for row in resumed.history if row["iteration"] > 20) and resumed.trace is None
    path.write_bytes(converted)
    with pytest.raises(ConfigurationError, match=r"belongs to another run \(seed: \d != 9\)"):
        run(*components(scheme, average_from), replace(settings, seed=9))


class Payload:
    """What a planted pickle runs when it is loaded: it creates a file."""

    def __init__(self, witness):
        self.witness = witness

    def __reduce__(self):
        return (os.system, (f"touch {self.witness}",))


def test_a_planted_pickle_is_never_executed_by_a_run_nor_by_the_converter(tmp_path):
    witness = tmp_path / "executed"
    planted = pickle.dumps(Payload(witness))
    path = tmp_path / "run.pkl"
    path.write_bytes(planted)
    with pytest.raises(ConfigurationError, match="earlier pickle format"):
        run(*components("pmcsa"), n_iters=5, checkpoint_every=2, checkpoint_path=path)
    with pytest.raises(pickle.UnpicklingError, match="posix.system is none of numpy's, mcsa-bench's or a plugin's"):
        convert(path)
    disguised = tmp_path / "run.npz"  # a pickle under the new name
    disguised.write_bytes(planted)
    with pytest.raises(ConfigurationError, match="earlier pickle format"):
        run(*components("pmcsa"), n_iters=5, checkpoint_every=2, checkpoint_path=disguised)
    disguised.unlink()  # a real checkpoint whose λ became an array of objects: a pickle inside the archive
    settings = Settings(n_iters=6, eval_every=2, checkpoint_every=2, checkpoint_path=disguised)
    with pytest.raises(Interrupt):
        run(*components("pmcsa"), settings, callbacks=[interrupt_at(4)])
    header, arrays = read_archive(disguised)
    arrays[header["state"]["params"]["key"]] = np.array([Payload(witness)], dtype=object)
    write_archive(disguised, header, arrays)
    with pytest.raises(ConfigurationError, match="cannot read the checkpoint .*allow_pickle=False"):
        run(*components("pmcsa"), settings)
    assert not witness.exists()
