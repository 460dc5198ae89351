"""Convert a checkpoint of the earlier pickle format into today's (plain data and arrays).

    python -m mcsa_bench.tools.convert_checkpoint outputs/checkpoints/<config hash>.pkl [...]

Runs refuse the pickle format, which can run code when read (docs/reliability.md, "Who may
write what"). Convert only a file you wrote yourself: this reads it as a pickle, though only
with numpy's, mcsa-bench's and the installed plugins' classes. Each ``<name>.pkl`` becomes
``<name>.npz`` beside it (the name a job looks for) and the pickle is deleted; then run the same
configuration again with ``resume=true``.
"""

from __future__ import annotations

import pickle
import sys
from importlib.metadata import entry_points
from pathlib import Path

from mcsa_bench.engine import LoopState, write_loop_state


class KnownClassesUnpickler(pickle.Unpickler):
    """An unpickler that makes objects only of numpy's, mcsa-bench's and the plugins' classes."""

    packages = frozenset({"numpy", "mcsa_bench", *(ep.module.split(".")[0] for ep in entry_points(group="mcsa_bench"))})
    #: modules the pickles name that have moved since: the loop was mcsa_bench/engine.py
    moved = {"mcsa_bench.engine": "mcsa_bench.engine.loop"}

    def find_class(self, module: str, name: str):
        if module.split(".")[0] not in self.packages:
            raise pickle.UnpicklingError(f"{module}.{name} is none of numpy's, mcsa-bench's or a plugin's classes")
        return super().find_class(self.moved.get(module, module), name)


def convert(path: Path) -> Path:
    """Write ``path`` (a pickled LoopState) as ``path`` with the suffix .npz; delete the pickle."""
    with open(path, "rb") as handle:
        loop = KnownClassesUnpickler(handle).load()
    if not isinstance(loop, LoopState):
        raise ValueError(f"{path} holds a {type(loop).__name__}, not an mcsa-bench checkpoint")
    target = path.with_suffix(".npz")
    write_loop_state(loop, target)
    path.unlink()
    return target


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    for path in map(Path, paths):
        try:
            print(f"{path} -> {convert(path)}")
        except (OSError, ValueError, pickle.UnpicklingError, EOFError, AttributeError) as error:
            print(f"convert_checkpoint: {path}: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
