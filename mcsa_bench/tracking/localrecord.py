"""A job's results on local disk, written as they come: the copy that survives the tracking store.

Each job's Hydra output directory holds:

- ``config.yaml``: the resolved configuration (written first);
- ``run.json``: where the run is tracked (store URI, experiment, run id, name, tags), the record's
  own id, and how it ended (status, error; SKIPPED when another run computed its configuration) —
  updated at the start and at the end;
- ``metrics.jsonl``: one JSON object per evaluation, appended and flushed as each happens, and at
  the end the run-level metrics (``diverged`` and the others logged then, at the last iteration);
- at the end, also after a failure: ``metrics.csv`` (the same rows as a table),
  ``variational.npz`` (raw parameters ``params``, latent ``names``, the family's summary such as
  ``mean`` and ``std``; after a failure the last finite parameters), the model's own arrays
  (e.g. ``target.npz``) and, where q has no closed-form summary or the model has sites (a NumPyro or
  PyMC file), ``draws.npz`` (draws of the final q, and the sites' values: jobs/tracked.final_draws).

``mcsa-bench sync DIR`` uploads such a directory to a store (:mod:`mcsa_bench.tracking.sync`).

A write that fails (a full disk, a directory gone) does not stop the run: the record says so once on
stderr, stops writing (:attr:`LocalRecord.lost` says why), and the run goes on, tracked in the store;
the store records the end whatever happens here, and this record whatever happens to the store.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

RUN_FILE = "run.json"
METRICS_STREAM = "metrics.jsonl"


def write_json_atomically(path: Path, content: Mapping[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(content, indent=2, sort_keys=True))
    os.replace(temporary, path)


class LocalRecord:
    """The job directory; as an engine callback it appends each evaluation to metrics.jsonl."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.lost: str | None = None
        self._info: dict[str, Any] = {"record_id": uuid.uuid4().hex}  # the run's identity before it has a run id
        self._write(self._start)

    def _start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / METRICS_STREAM).write_text("")

    def _write(self, write: Callable[[], None]) -> None:
        """Run one write unless an earlier one failed; the first failure is said once and remembered."""
        if self.lost is not None:
            return
        try:
            write()
        except OSError as error:
            self.lost = f"{type(error).__name__}: {error.strerror or error}"
            print(f"mcsa-bench: cannot write the run's local record in {self.directory} ({self.lost}); "
                  "the run goes on, kept in the tracking store", file=sys.stderr)

    def write_config(self, yaml_text: str) -> None:
        self._write(lambda: (self.directory / "config.yaml").write_text(yaml_text))

    def update_run_info(self, **info: Any) -> None:
        self._info.update(info)
        self._write(lambda: write_json_atomically(self.directory / RUN_FILE, self._info))

    def __call__(self, snapshot) -> None:
        self.log_row({"iteration": snapshot.iteration, **snapshot.metrics})

    def log_row(self, row: Mapping[str, float]) -> None:
        """Append metric values at an iteration (an evaluation's, or the run-level ones at the end)."""
        line = json.dumps({k: int(v) if k == "iteration" else _json_number(float(v)) for k, v in row.items()})
        self._write(lambda: _append_line(self.directory / METRICS_STREAM, line))

    def write_results(self, params, names: list[str], summary: Mapping[str, Any],
                      model_arrays: Mapping[str, Mapping[str, Any]], history: Iterable[Mapping[str, float]]) -> None:
        def write() -> None:
            np.savez(self.directory / "variational.npz", params=params, names=np.array(names), **summary)
            for stem, arrays in model_arrays.items():
                np.savez(self.directory / f"{stem}.npz", **arrays)
            write_metrics_table(self.directory / "metrics.csv", list(history))

        self._write(write)


def _append_line(path: Path, line: str) -> None:
    with open(path, "a") as handle:
        handle.write(line + "\n")


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)  # JSON has no NaN or inf


def write_metrics_table(path: Path, rows: list[Mapping[str, float]]) -> None:
    columns = ["iteration"] + sorted({k for row in rows for k in row} - {"iteration"})
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def read_metrics_stream(directory: Path) -> list[dict[str, float]]:
    """The rows of metrics.jsonl (a torn last line, from a crash mid-write, is ignored)."""
    rows = []
    path = Path(directory) / METRICS_STREAM
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        try:
            rows.append({k: float(v) for k, v in json.loads(line).items()})
        except (ValueError, TypeError):
            continue
    return rows


def read_run_info(directory: Path) -> dict[str, Any]:
    path = Path(directory) / RUN_FILE
    return json.loads(path.read_text()) if path.exists() else {}
