"""run_cell's checkpoints: a cell killed after a checkpoint and started again from it gives every
replicate's λ and every logged metric (wall_time aside) bit for bit as the uninterrupted cell, the
chunks finished before the kill are not computed again, and another cell's checkpoint is refused."""

import dataclasses

import numpy as np
import pytest

pytest.importorskip("jax")

from mcsa_bench import get_registry
from mcsa_bench.accel import engine
from mcsa_bench.accel.engine import CellCheckpoint, CellSettings, run_cell
from mcsa_bench.api import ConfigurationError
from mcsa_bench.assembly import assemble
from tests.accel.test_engine import assert_same_replicate

N_ITERS = 40
#: chunks of 2 (the second padded), the diagnostic on (its copies are state too), checkpoints off the evaluations
SETTINGS = CellSettings(n_iters=N_ITERS, eval_every=10, max_replicates_per_chunk=2, diagnostics_every=4,
                        diagnostics_replicas=3)
SEEDS = [0, 1, 2]


class Killed(BaseException):
    """The process dies right after a checkpoint was written."""


@pytest.fixture(scope="module")
def components():
    parts = assemble(get_registry(), model=("gaussian", {"dim": 3}), estimator="pmcsa", n_samples=4)
    return parts.jax_twins(N_ITERS)


@pytest.fixture(scope="module")
def uninterrupted(components):
    return run_cell(*components, SETTINGS, SEEDS)


def run_until_killed(monkeypatch, components, checkpoint, kill_after=1) -> None:
    """Runs the cell until its ``kill_after``-th checkpoint is written, then kills it."""
    save, saves = engine.save_checkpoint, []

    def killed(path, state):
        save(path, state)
        saves.append(state["progress"] and state["progress"]["t"])
        if len(saves) == kill_after:
            raise Killed

    monkeypatch.setattr(engine, "save_checkpoint", killed)
    with pytest.raises(Killed):
        run_cell(*components, SETTINGS, SEEDS, checkpoint=checkpoint)
    monkeypatch.setattr(engine, "save_checkpoint", save)


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [2, 4], ids=["within-the-first-chunk", "within-the-second-chunk"])
def test_a_killed_cell_resumes_from_its_checkpoint_bit_for_bit(tmp_path, monkeypatch, components, uninterrupted,
                                                               kill_after):
    """Saves: the first chunk at t = 15 and 30, after it (its results), the second chunk at 15 and 30."""
    checkpoint = CellCheckpoint(tmp_path / "cell.npz", every=15, identity="cell A")
    run_until_killed(monkeypatch, components, checkpoint, kill_after)
    starts = []
    start = engine.CompiledCell.start
    monkeypatch.setattr(engine.CompiledCell, "start", lambda self, *a: starts.append(1) or start(self, *a))
    resumed = run_cell(*components, SETTINGS, SEEDS, checkpoint=checkpoint)
    for a, b in zip(resumed.replicates, uninterrupted.replicates, strict=True):
        assert_same_replicate(a, b)
        np.testing.assert_array_equal(a.trace, b.trace)
        assert all(np.array_equal(x, y) for x, y in zip(a.evaluated, b.evaluated, strict=True))
    assert "grad_variance" in resumed.replicates[0].history[-1]
    assert starts == ([1] if kill_after == 2 else [])  # chunk 1 resumed mid-way, then chunk 2 starts / resumed
    # where each replicate was continued from (its run's resumed tag): chunk 1 at 30 and chunk 2 from its start,
    # or chunk 1 finished before the kill (T) and chunk 2 at 15
    assert [r.resumed_from for r in resumed.replicates] == ([30, 30, None] if kill_after == 2 else [40, 40, 15])
    assert all(r.resumed_from is None for r in uninterrupted.replicates)


def test_every_array_of_a_cell_checkpoint_is_checked_and_a_damaged_one_named(tmp_path, monkeypatch, components):
    """Issue 52: a checkpoint array of another shape failed in JAX ("Argument types differ from the types for
    which this computation was compiled"), a bad CRC without naming the file: each is one line naming both."""
    import json
    import zipfile

    path = tmp_path / "cell.npz"
    checkpoint = CellCheckpoint(path, every=15, identity="cell A")
    run_until_killed(monkeypatch, components, checkpoint)
    with np.load(path, allow_pickle=False) as archive:
        arrays = dict(archive)
    header = arrays.pop("header")
    state = json.loads(str(header[()]))["state"]
    params_key = state["progress"]["items"]["replicates"]["fields"]["params"]["key"]
    for key, bad, words in [(params_key, arrays[params_key][:, :-1], "progress.replicates.params is an array of "
                                                                      "shape (2, 5)"),
                            (params_key, arrays[params_key].astype(np.float32), "dtype float32, where the run "
                                                                                "expects shape (2, 6), dtype float64")]:
        with open(path, "wb") as handle:
            np.savez(handle, header=header, **{**arrays, key: bad})
        with pytest.raises(ConfigurationError, match=rf"the checkpoint {path}: .*") as refused:
            run_cell(*components, SETTINGS, SEEDS, checkpoint=checkpoint)
        assert words in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    with open(path, "wb") as handle:
        np.savez(handle, header=header, **arrays)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(f"{params_key}.npy")
    data[info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size - 1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigurationError, match=rf"cannot read the checkpoint {path}: its array {params_key}: "
                                                 "BadZipFile: Bad CRC-32"):
        run_cell(*components, SETTINGS, SEEDS, checkpoint=checkpoint)


def test_a_checkpoint_of_another_cell_is_refused(tmp_path, monkeypatch, components):
    checkpoint = CellCheckpoint(tmp_path / "cell.npz", every=15, identity="cell A")
    run_until_killed(monkeypatch, components, checkpoint)
    longer = dataclasses.replace(SETTINGS, n_iters=45)
    for other in ({"identity": "cell B"}, {"seeds": [0, 1, 3]}, {"settings": longer}):
        with pytest.raises(ConfigurationError, match=r"the checkpoint .*cell.npz belongs to another cell \(differs in: "
                                                     f"{'|'.join(other)}"):
            run_cell(*components, other.get("settings", SETTINGS), other.get("seeds", SEEDS),
                     checkpoint=dataclasses.replace(checkpoint, identity=other.get("identity", "cell A")))
