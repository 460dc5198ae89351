"""Checkpoints: a run interrupted at a random evaluation and resumed from its last checkpoint ends
with the uninterrupted run's parameters, chains and metrics, bit for bit, in every scheme, with and
without iterate averaging and the gradient-variance diagnostic and on either evaluation schedule; a
checkpoint of another run is refused; a write a kill interrupted leaves a temporary file that the run's
completion removes, one the disk refused leaves none. Pickled checkpoints and their converter:
tests/tools/test_convert_checkpoint.py."""

import io
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mcsa_bench import get_registry, run
from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin.kernels import IMH
from mcsa_bench.engine import Settings, checkpoint, remove_checkpoint
from tests.builtin.test_estimators import build_estimator

SCHEMES = ("msc", "msc_rb", "jsa", "pmcsa")
COST = ("log_density_evals", "gradient_evals")
CHECKPOINT_EVERY = 10


class Interrupt(Exception):
    """Stands for the process being killed."""


def interrupt_at(iteration):
    def callback(snapshot):
        if snapshot.iteration == iteration:
            raise Interrupt
    return callback


def components(scheme, average_from=None, estimator=None):
    """Fresh components, as a new process would build them."""
    registry = get_registry()
    model = registry.build("model", "gaussian", dim=3, seed=2)
    return (model, registry.build("family", "meanfield_gaussian", dim=3), estimator or build_estimator(scheme, 4),
            registry.build("optimizer", "adam", lr=0.05, average_from=average_from))


def assert_same_run(resumed, uninterrupted, ignored=("wall_time",), rtol=0.0):
    """Bit for bit by default; ``rtol`` for a checkpoint written on another machine's arithmetic."""
    for a, b in [(resumed.params, uninterrupted.params), (resumed.iterate, uninterrupted.iterate),
                 (resumed.state.z, uninterrupted.state.z), (resumed.state.log_p, uninterrupted.state.log_p)]:
        np.testing.assert_allclose(a, b, rtol=rtol, atol=0)
    drop_time = [{k: v for k, v in row.items() if k not in ignored} for row in uninterrupted.history]
    kept = [{k: v for k, v in row.items() if k not in ignored} for row in resumed.history]
    assert [sorted(row) for row in kept] == [sorted(row) for row in drop_time]
    for row, other in zip(kept, drop_time):
        np.testing.assert_allclose([row[k] for k in sorted(row)], [other[k] for k in sorted(row)], rtol=rtol, atol=0)


@pytest.mark.parametrize("extras", ["plain", "averaging+diagnostics", "geometric evaluations"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_resumed_run_equals_the_uninterrupted_run_bit_for_bit(tmp_path, scheme, extras):
    settings = Settings(n_iters=60, seed=3, eval_every=7)
    average_from = None
    if extras == "averaging+diagnostics":
        settings = replace(settings, diagnostics_every=4, diagnostics_replicas=5)
        average_from = 0.5
    if extras == "geometric evaluations":
        settings = replace(settings, eval_schedule="geometric")
    evaluations = ([7, 14, 28, 56, 60] if extras == "geometric evaluations"
                   else [t for t in range(7, 61) if t % 7 == 0 or t == 60])
    uninterrupted = run(*components(scheme, average_from), settings)
    assert [row["iteration"] for row in uninterrupted.history] == [0, *evaluations]

    stop = int(np.random.default_rng(SCHEMES.index(scheme)).choice([t for t in evaluations if t >= 14]))
    path = tmp_path / "run.ckpt"
    checkpointed = replace(settings, checkpoint_every=CHECKPOINT_EVERY, checkpoint_path=path)
    with pytest.raises(Interrupt):
        run(*components(scheme, average_from), checkpointed, callbacks=[interrupt_at(stop)])
    seen = []
    resumed = run(*components(scheme, average_from), checkpointed, callbacks=[lambda s: seen.append(s.iteration)])

    last_checkpoint = (stop - 1) // CHECKPOINT_EVERY * CHECKPOINT_EVERY  # the callback raised before the one at stop
    assert resumed.resumed_from == last_checkpoint
    assert seen == [t for t in evaluations if t > last_checkpoint]
    assert_same_run(resumed, uninterrupted)
    assert [p.name for p in tmp_path.iterdir()] == ["run.ckpt"]  # no temporary file left behind


class StatefulIMH(IMH):
    """IMH whose behaviour depends on state kept on the kernel object (as an adaptive kernel's step
    size would be): every third transition draws one extra uniform."""

    def __init__(self):
        self.transitions = 0

    def step(self, rng, state, target, proposal, n_proposals=1):
        self.transitions += 1
        if self.transitions % 3 == 0:
            rng.random()
        return super().step(rng, state, target, proposal, n_proposals)


def stateful_pmcsa():
    return get_registry().build("estimator", "pmcsa", kernel=StatefulIMH(), n_samples=4)


def test_kernel_state_is_checkpointed_and_untouched_by_the_diagnostic(tmp_path):
    settings = Settings(n_iters=40, seed=1, eval_every=5, diagnostics_every=3, diagnostics_replicas=4)
    estimator = stateful_pmcsa()
    uninterrupted = run(*components("pmcsa", estimator=estimator), settings)
    assert estimator.kernel.transitions == 40  # the replicas stepped copies of the kernel
    path = tmp_path / "run.ckpt"
    checkpointed = replace(settings, checkpoint_every=10, checkpoint_path=path)
    with pytest.raises(Interrupt):
        run(*components("pmcsa", estimator=stateful_pmcsa()), checkpointed, callbacks=[interrupt_at(25)])
    resumed = run(*components("pmcsa", estimator=stateful_pmcsa()), checkpointed)
    assert_same_run(resumed, uninterrupted)
    # negative control: the same checkpoint with the kernel state reset gives another run
    header, arrays = read_archive(path)
    assert header["state"]["estimator"]["fields"]["kernel"]["fields"]["transitions"] == 40
    header["state"]["estimator"]["fields"]["kernel"]["fields"]["transitions"] = 1
    header["state"]["t"] = 20
    write_archive(path, header, arrays)
    other = run(*components("pmcsa", estimator=stateful_pmcsa()), replace(settings, checkpoint_path=path))
    assert not np.array_equal(other.params, uninterrupted.params)


def read_archive(path):
    with np.load(path, allow_pickle=False) as archive:
        arrays = dict(archive)
    return json.loads(str(arrays.pop("header")[()])), arrays


def write_archive(path, header, arrays):
    with open(path, "wb") as handle:
        np.savez(handle, header=np.array(json.dumps(header)), **arrays)


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    path = tmp_path / "run.ckpt"
    config_a = Settings(n_iters=20, seed=0, eval_every=10, checkpoint_every=10, checkpoint_path=path,
                        identity="config A")
    run(*components("pmcsa"), config_a)
    with pytest.raises(ConfigurationError, match=r"belongs to another run \(the run's identity\)"):
        run(*components("pmcsa"), replace(config_a, identity="config B"))
    with pytest.raises(ConfigurationError, match=r"belongs to another run \(n_samples: 4 != 5\)"):
        run(*components("pmcsa", estimator=build_estimator("pmcsa", 5)), config_a)
    with pytest.raises(ConfigurationError, match=r"belongs to another run \(estimator: 'PMCSA' != 'JSA'\)"):
        run(*components("jsa"), config_a)
    finished = run(*components("pmcsa"), config_a)
    assert finished.resumed_from == 20 and [row["iteration"] for row in finished.history] == [0, 10, 20]


@pytest.mark.parametrize("change", [{"seed": 1}, {"eval_schedule": "geometric"}, {"diagnostics_every": 5}])
def test_without_an_identity_the_engines_computing_settings_stand_for_it(tmp_path, change):
    path = tmp_path / "run.ckpt"
    settings = Settings(n_iters=20, seed=0, eval_every=10, checkpoint_every=10, checkpoint_path=path)
    run(*components("pmcsa"), settings)
    with pytest.raises(ConfigurationError, match=r"belongs to another run \(the run's identity\)"):
        run(*components("pmcsa"), replace(settings, **change))
    with pytest.raises(ConfigurationError, match=r"belongs to another run \(the run's identity\)"):
        run(*components("pmcsa", average_from=0.5), settings)  # the averaging's start is part of it
    assert run(*components("pmcsa"), replace(settings, checkpoint_every=20)).resumed_from == 20  # not computing


def test_bad_checkpoint_arguments_and_files(tmp_path):
    with pytest.raises(ConfigurationError, match="checkpoint_every > 0 needs a checkpoint_path"):
        run(*components("pmcsa"), n_iters=5, checkpoint_every=2)
    with pytest.raises(ConfigurationError, match="checkpoint_every must be >= 0"):
        run(*components("pmcsa"), n_iters=5, checkpoint_every=-1, checkpoint_path=tmp_path / "x")
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(b"not a pickle")
    with pytest.raises(ConfigurationError, match="cannot read the checkpoint .*broken.ckpt"):
        run(*components("pmcsa"), n_iters=5, checkpoint_every=2, checkpoint_path=broken)
    damaged = tmp_path / "damaged.npz"
    settings = Settings(n_iters=6, eval_every=2, checkpoint_every=2, checkpoint_path=damaged)
    with pytest.raises(Interrupt):
        run(*components("pmcsa"), settings, callbacks=[interrupt_at(4)])
    header, arrays = read_archive(damaged)
    for node, message in [
        ({"type": "tuple", "items": 5}, "its opt_state is malformed"),
        ({"type": "object", "class": "os.system", "fields": {}}, "holds the state of a os.system"),
        ({"type": "generator", "bit_generator": "Evil", "state": {}}, "unknown bit generator 'Evil'"),
    ]:
        write_archive(damaged, {**header, "state": {**header["state"], "opt_state": node}}, arrays)
        with pytest.raises(ConfigurationError, match=message):
            run(*components("pmcsa"), settings)


def test_a_write_a_kill_interrupted_leaves_the_last_checkpoint_and_a_temporary_that_completion_removes(
        tmp_path, monkeypatch):
    path = tmp_path / "run.pkl"
    replace = checkpoint.os.replace
    writes = []

    def killed_at_the_second_write(source, target):
        writes.append(source)
        if len(writes) == 2:
            raise Interrupt  # the process dies between writing the temporary file and renaming it
        replace(source, target)

    monkeypatch.setattr(checkpoint.os, "replace", killed_at_the_second_write)
    with pytest.raises(Interrupt):
        run(*components("pmcsa"), n_iters=30, seed=0, eval_every=10, checkpoint_every=10, checkpoint_path=path)
    (tmp_path / "other.pkl").write_bytes(b"another run's")
    orphan = Path(writes[1]).name
    assert orphan.startswith(".run.pkl.") and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [orphan, "other.pkl", "run.pkl"])
    remove_checkpoint(path)
    assert [p.name for p in tmp_path.iterdir()] == ["other.pkl"]


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
import numpy as np
from tests.engine.test_checkpoint import components
from mcsa_bench import run
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # a checkpoint is larger
result = run(*components("pmcsa"), n_iters=30, seed=0, eval_every=10, checkpoint_every=10,
             checkpoint_path=Path(sys.argv[1]) / "run.npz")
np.save(sys.stdout.buffer, result.params)
"""


def test_a_checkpoint_the_disk_refuses_is_skipped_with_one_line_and_leaves_no_file(tmp_path):
    """issue 39 item 9: a full disk while a checkpoint was written failed the run and left the partial
    temporary file; a file-size limit (RLIMIT_FSIZE) stands for the full disk."""
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(tmp_path)], capture_output=True,
                          cwd=Path(__file__).parents[2], check=True)
    line, = done.stderr.decode().splitlines()  # said once, not at each of the three checkpoints
    assert line.startswith("mcsa-bench: checkpoint at iteration 10 skipped, the run goes on: cannot write")
    array = done.stdout
    assert list(tmp_path.iterdir()) == []  # no checkpoint, no temporary file
    uninterrupted = run(*components("pmcsa"), n_iters=30, seed=0, eval_every=10)
    assert np.array_equal(np.load(io.BytesIO(array)), uninterrupted.params)


def array_paths(node, where=""):
    """Each array member of a checkpoint's header -> where in the loop state it lies (as the engine names it)."""
    if isinstance(node, list):
        return {k: v for i, item in enumerate(node) for k, v in array_paths(item, f"{where}[{i}]").items()}
    if not isinstance(node, dict):
        return {}
    kind = node.get("type")
    if kind == "array":
        return {node["key"]: where}
    children = {"dict": lambda: {f"[{k!r}]": v for k, v in node["items"].items()},
                "tuple": lambda: {f"[{i}]": v for i, v in enumerate(node["items"])},
                "object": lambda: {f".{k}": v for k, v in node["fields"].items()}}.get(kind, dict)()
    return {k: v for name, child in children.items() for k, v in array_paths(child, where + name).items()}


def test_every_array_of_a_checkpoint_is_checked_against_the_run_and_refused_in_one_line_naming_it(tmp_path):
    """Issue 52: a wrong-shaped array in a checkpoint failed deep inside the run (Hydra's 78-line traceback);
    every array (λ, the optimizer's moments, the chains, the average, the trace, the diagnostic's replicas)
    is now checked against what the run expects, its shape and its dtype, and a damaged member (a bad
    CRC) is named: one line naming the file and the array."""
    path = tmp_path / "run.npz"
    settings = Settings(n_iters=12, eval_every=4, checkpoint_every=4, checkpoint_path=path, diagnostics_every=4,
                        diagnostics_replicas=2)
    with pytest.raises(Interrupt):
        run(*components("pmcsa", average_from=0.1), settings, callbacks=[interrupt_at(12)])
    header, arrays = read_archive(path)
    paths = {key: where.lstrip(".") for name, node in header["state"].items()
             for key, where in array_paths(node, name).items()}
    assert set(paths) == set(arrays) and {"params", "opt_state.first", "chains.z", "chains.log_p", "average.mean",
                                          "trace.iterates", "replicas[0].z"} <= set(paths.values())
    for key, array in arrays.items():
        for bad in (np.append(array.ravel(), array.ravel()[:1]).reshape(-1), array.astype(np.float32),
                    array.astype(np.int64)):
            if bad.shape == array.shape and bad.dtype == array.dtype:
                continue
            write_archive(path, header, {**arrays, key: bad})
            with pytest.raises(ConfigurationError) as refused:
                run(*components("pmcsa", average_from=0.1), settings)
            message = str(refused.value)
            assert f"the checkpoint {path}: {paths[key]} is an array of shape {bad.shape}" in message, message
            assert f"where the run expects shape {array.shape}, dtype {array.dtype}" in message and "\n" not in message
    write_archive(path, header, arrays)
    data = bytearray(path.read_bytes())
    with __import__("zipfile").ZipFile(path) as archive:
        info = archive.getinfo("a0.npy")
    data[info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size - 1] ^= 0xFF  # its last byte
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigurationError, match=rf"cannot read the checkpoint {path}: its array a0: BadZipFile: Bad "
                                                 "CRC-32"):
        run(*components("pmcsa", average_from=0.1), settings)
