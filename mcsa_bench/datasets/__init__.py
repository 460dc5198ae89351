"""The benchmark data sets shipped with the package, and user CSV files with the same conventions.

``model.dataset`` is either the name of a shipped data set (``pima``, ``sonar``, ...; see
PROVENANCE.md beside this file) or a path to a CSV file. Conventions of a CSV file:

- a header row of distinct names; one row per observation; ``,`` as separator;
- a column whose cells are all numbers is numeric (floats), a column with no number at all is
  categorical (strings); every cell must be filled: an empty or ``NA`` cell, a number in a
  categorical column or text in a numeric one, NaN, infinity or a magnitude above 1e100 is an
  error naming the file, the column and the line;
- supervised data sets (classification, regression): the target is the column named ``y`` if
  there is one, else the last column; every other column is a feature; categorical features are
  one-hot encoded with their first level (in sorted order) dropped;
- the radon and stochastic-volatility models name the columns they need in their docs.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from mcsa_bench.api import Array, ConfigurationError, did_you_mean

#: the fewest training rows a supervised model accepts
MIN_TRAINING_ROWS = 3


def available_datasets() -> list[str]:
    """Names of the shipped data sets."""
    return sorted(p.name[:-4] for p in resources.files(__name__).iterdir() if p.name.endswith(".csv"))


def dataset_path(dataset: str) -> Path:
    """The CSV file of a shipped data set name, or ``dataset`` itself if it is a path to a CSV."""
    if dataset in available_datasets():
        return Path(str(resources.files(__name__).joinpath(f"{dataset}.csv")))
    path = Path(dataset).expanduser()
    if path.suffix == ".csv" or "/" in dataset or "\\" in dataset:
        if not path.is_file():
            raise ConfigurationError(f"dataset file {str(path)!r} does not exist")
        return path
    raise ConfigurationError(
        f"unknown dataset {dataset!r}{did_you_mean(dataset, available_datasets())}; available: "
        f"{', '.join(available_datasets())} (or a path to a .csv file)"
    )


#: cells that mean "no value" in common CSV exports
MISSING_MARKERS = {"", "na", "n/a", "nan", "null", "none", "?", "-"}
#: larger magnitudes overflow squares and standardization in float64
LARGEST_MAGNITUDE = 1e100


def load_columns(dataset: str) -> dict[str, Array]:
    """The CSV as ordered columns: float arrays for numeric columns, str arrays otherwise.

    Every cell is checked; a bad one is a :class:`ConfigurationError` naming the file, column and
    line (the header is line 1).
    """
    path = dataset_path(dataset)
    rows = _read_rows(path)
    if len(rows) < 2:
        raise ConfigurationError(f"dataset {str(path)!r} needs a header row and at least one data row")
    header, body = [name.strip() for name in rows[0]], rows[1:]
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise ConfigurationError(f"dataset {str(path)!r}, line {line}: every row must have {len(header)} fields "
                                     f"(the header's), this one has {len(row)}")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if "" in header or duplicates:
        raise ConfigurationError(f"dataset {str(path)!r}: column names must be non-empty and distinct "
                                 f"(found {duplicates or 'an empty name'})")
    return {name: _column(path, name, [row[j].strip() for row in body]) for j, name in enumerate(header)}


def _read_rows(path: Path) -> list[list[str]]:
    """The CSV's rows as text; a file that is not UTF-8 CSV, or cannot be read, is one line naming it."""
    reader = None
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:  # -sig: a spreadsheet's byte-order mark
            reader = csv.reader(handle)
            return list(reader)
    except UnicodeDecodeError as error:
        raise ConfigurationError(f"dataset {str(path)!r} is not UTF-8 text (byte {error.object[error.start]:#04x} at "
                                 f"offset {error.start}); save it as UTF-8 CSV") from None
    except csv.Error as error:  # e.g. a field over the csv module's limit of 131,072 characters
        line = f", line {reader.line_num}" if reader is not None else ""
        raise ConfigurationError(f"dataset {str(path)!r}{line}: not readable as CSV ({error})") from None
    except OSError as error:
        raise ConfigurationError(f"dataset {str(path)!r} cannot be read: {error.strerror or error}") from None


def _column(path: Path, name: str, cells: list[str]) -> Array:
    try:  # the common case, a clean numeric column, in one vectorized pass
        values = np.array(cells, dtype=float)
        if np.all(np.abs(values) <= LARGEST_MAGNITUDE):
            return values
    except ValueError:
        pass
    numbers = [_as_number(cell) for cell in cells]
    where = f"dataset {str(path)!r}, column {name!r}"
    for line, (cell, number) in enumerate(zip(cells, numbers), start=2):
        if cell.lower() in MISSING_MARKERS and not (number is not None and cell.lower() == "nan"):
            raise ConfigurationError(f"{where}, line {line}: the cell is empty or missing ({cell!r}); "
                                     "fill it in or drop the row")
    if all(number is None for number in numbers):
        return np.array(cells, dtype=str)
    for line, (cell, number) in enumerate(zip(cells, numbers), start=2):
        if number is None:
            raise ConfigurationError(f"{where}, line {line}: {cell!r} is not a number, but the column's other "
                                     "cells are numbers")
        if not abs(number) <= LARGEST_MAGNITUDE:
            raise ConfigurationError(f"{where}, line {line}: {cell!r} is not a finite number of magnitude at most "
                                     f"{LARGEST_MAGNITUDE:g}")
    return np.array(numbers, dtype=float)


def _as_number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _encode_features(columns: dict[str, Array]) -> tuple[Array, list[str]]:
    blocks, names = [], []
    for name, values in columns.items():
        if values.dtype.kind == "f":
            blocks.append(values[:, None])
            names.append(name)
        else:  # one-hot, first level dropped (it is absorbed by the intercept)
            for level in sorted(set(values.tolist()))[1:]:
                blocks.append((values == level).astype(float)[:, None])
                names.append(f"{name}={level}")
    return np.hstack(blocks), names


def train_test_split(n: int, test_fraction: float, seed: int) -> tuple[Array, Array]:
    """Disjoint sorted index arrays (train, test); ``round(test_fraction * n)`` rows go to test."""
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigurationError(f"test_fraction must lie in [0, 1), got {test_fraction}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigurationError(f"split_seed must be a non-negative integer, got {seed!r}")
    n_test = int(round(test_fraction * n))
    permutation = np.random.default_rng(seed).permutation(n)
    return np.sort(permutation[n_test:]), np.sort(permutation[:n_test])


@dataclass(frozen=True)
class Standardizer:
    """z-standardization with statistics of the training rows (ddof = 0; constant columns kept as is)."""

    mean: Array
    std: Array

    @classmethod
    def fit(cls, values: Array) -> Standardizer:
        std = values.std(axis=0)
        return cls(values.mean(axis=0), np.where(std > 0, std, 1.0))

    def __call__(self, values: Array) -> Array:
        return (values - self.mean) / self.std


@dataclass(frozen=True)
class SupervisedData:
    """A split, standardized supervised data set.

    Features are standardized with the training rows' statistics (unless the loader was told not
    to); for regression so is the
    target (``y_scale`` holds its mean and std, to report densities on the original scale: add
    ``-log y_scale.std``); for classification ``y`` is 0/1 and ``y_scale`` is None.
    """

    x_train: Array
    y_train: Array
    x_test: Array
    y_test: Array
    feature_names: list[str]
    train_index: Array
    test_index: Array
    y_scale: Standardizer | None

    @property
    def num_features(self) -> int:
        return self.x_train.shape[1]

    @property
    def has_test(self) -> bool:
        return self.y_test.size > 0


def check_max_rows(max_rows: object, minimum: int = MIN_TRAINING_ROWS + 1) -> int | None:
    """``max_rows`` as an int (or None: every row), with a clear error for anything else."""
    if max_rows is None:
        return None
    if isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer)) or max_rows < minimum:
        raise ConfigurationError(f"max_rows must be null (every row) or an integer >= {minimum}, got {max_rows!r}")
    return int(max_rows)


def row_subset(n: int, max_rows: int | None, seed: int) -> Array:
    """Sorted indices of a seeded random subset of ``max_rows`` of ``n`` rows (all rows if None)."""
    if max_rows is None or max_rows >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[:max_rows])


def load_supervised(dataset: str, *, task: str, test_fraction: float = 0.1, split_seed: int = 0,
                    standardize_features: bool = True, max_rows: int | None = None) -> SupervisedData:
    """Load, encode, split (seeded) and standardize a classification or regression data set.

    ``standardize_features=False`` keeps the features on their original scale (regression targets
    are standardized regardless). ``max_rows`` keeps a random subset of that many rows (seeded
    with ``split_seed``, drawn before the split; a quick look at a large data set, or a smoke test);
    ``train_index`` and ``test_index`` still refer to rows of the file.
    """
    if task not in ("classification", "regression"):
        raise ConfigurationError(f"task must be 'classification' or 'regression', got {task!r}")
    columns = load_columns(dataset)
    target = "y" if "y" in columns else list(columns)[-1]
    y = columns.pop(target)
    if y.dtype.kind != "f":
        raise ConfigurationError(f"dataset {dataset!r}: the target column {target!r} must be numeric")
    if task == "classification" and not np.isin(y, (0.0, 1.0)).all():
        raise ConfigurationError(f"dataset {dataset!r}: the target column {target!r} must hold 0/1 labels")
    if not columns:
        raise ConfigurationError(f"dataset {dataset!r} has no feature columns")
    if task == "classification" and np.unique(y).size < 2:
        raise ConfigurationError(f"dataset {dataset!r}: the target column {target!r} holds a single class")
    for name, values in columns.items():
        if np.unique(values).size < 2:
            raise ConfigurationError(f"dataset {dataset!r}: column {name!r} is constant ({values[0]!s}); "
                                     "a constant feature carries no information, drop it")
    x, names = _encode_features(columns)
    rows = row_subset(len(y), check_max_rows(max_rows), split_seed)
    x, y = x[rows], y[rows]
    train, test = train_test_split(len(y), test_fraction, split_seed)
    if train.size < MIN_TRAINING_ROWS or (test_fraction > 0 and test.size == 0):
        raise ConfigurationError(
            f"dataset {dataset!r} has {len(y)} rows: a split with test_fraction={test_fraction} leaves {train.size} "
            f"training and {test.size} test rows; at least {MIN_TRAINING_ROWS} training rows and, unless "
            "test_fraction=0, one test row are needed")
    x_scale = (
        Standardizer.fit(x[train]) if standardize_features else Standardizer(np.zeros(x.shape[1]), np.ones(x.shape[1]))
    )
    y_scale = Standardizer.fit(y[train]) if task == "regression" else None
    y_std = y_scale if y_scale is not None else (lambda v: v)
    return SupervisedData(
        x_train=x_scale(x[train]),
        y_train=y_std(y[train]),
        x_test=x_scale(x[test]),
        y_test=y_std(y[test]),
        feature_names=names,
        train_index=rows[train],
        test_index=rows[test],
        y_scale=y_scale,
    )
