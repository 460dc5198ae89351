"""The bundle's format (docs/scaling.md §9), and a bundle read whole and checked before anything uses it.

A bundle comes from someone else, a co-author or another cluster: mcsa-bench defends against it as it
does against a configuration directory or a store (docs/reliability.md, "Who may write what").
:func:`read_bundle` is the one reading of a bundle that `merge` and `report --bundle` share; it
checks, before either command uses any of it:

- the ZIP: exactly the members a bundle has, each named once, unencrypted, compressed by a method
  Python reads, its size in the zip's headers within what the manifest's counts allow (runs, points)
  and equal to the size the manifest declares (``sizes``, written since this check existed); every
  member is read to its end, so a bad CRC is found here. A member is never read past the size its
  header gives (Python's zipfile stops there), so the bounds hold whatever the member inflates to;
- every table: its columns, every row's number of fields, lines of at most :data:`LINE_LIMIT`
  characters, UTF-8, and every field as MLflow takes it: run ids, statuses, 64-bit times and steps,
  floats (NaN, and MLflow's ±1.797e308 for ±∞; no infinity), names of tags, params and metrics, and
  MLflow's lengths (:data:`KEY_LENGTH`, ...);
- the whole: each run once in runs.csv and each origin once (a forged origin tag would make merge
  skip a run as "already there"), rows only of those runs, each (run, key) once, metrics.csv's
  points grouped run by run in runs.csv's order and metric by metric, no point twice (MLflow's
  primary key), each run's latest values those of its histories (MLflow's rule), the manifest's
  counts of runs and points, and a sweep parent's job list.

Memory stays bounded: the tables but metrics.csv are kept (what a report reads anyway), metrics.csv
is streamed, keeping one metric history's points at a time. Every problem is one ConfigurationError
naming the bundle, the member, the line and what was expected.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mcsa_bench.api import ConfigurationError
from mcsa_bench.tracking.record import ROLE_SWEEP, ROLE_TAG, SWEEP_JOBS_ARTIFACT, decode_sweep_jobs, origin_of
from mcsa_bench.tracking.tablewriter import stored_value

FORMAT, VERSION = "mcsa-bench-bundle", 1
MANIFEST = "manifest.json"
#: the bundle's tables: file -> columns (docs/scaling.md §9)
COLUMNS = {
    "runs.csv": ("run_id", "origin_run_id", "experiment", "name", "status", "start_time", "end_time"),
    "tags.csv": ("run_id", "key", "value"),
    "params.csv": ("run_id", "key", "value"),
    "latest_metrics.csv": ("run_id", "key", "value"),
    "metrics.csv": ("run_id", "key", "step", "timestamp", "value"),
}
ARTIFACTS = "artifacts/"  # + run id + / + SWEEP_JOBS_ARTIFACT: a sweep parent's job list

#: MLflow's limits (mlflow.utils.validation, and its tables' columns; tests/tracking/test_bundle.py ties them)
KEY_LENGTH, TAG_VALUE_LENGTH, PARAM_VALUE_LENGTH = 250, 8000, 6000
EXPERIMENT_NAME_LENGTH, RUN_NAME_LENGTH = 500, 250
RUN_ID = re.compile(r"[a-zA-Z0-9][\w\-]{0,255}")  # MLflow's run ids
NAME = re.compile(r"[/\w.\- :]*")  # MLflow's names of tags, params and metrics (on POSIX)
STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")  # MLflow's RunStatus
INT64 = 2**63

KIB, MIB = 1024, 1024 * 1024
#: the most a line of a table may hold: far above a row of MLflow's longest fields (8,000 characters)
LINE_LIMIT = 64 * KIB
#: what a member may inflate to: manifest.json and a job list at most, the tables a header plus at most so
#: much per run (per point for metrics.csv). An export writes about 120 bytes per run to runs.csv, 3 kB of
#: tags, 2 kB of params, 300 bytes of latest values, 75 bytes per point (benchmarks/results/grids/).
MANIFEST_BYTES, JOB_LIST_BYTES, HEADER_BYTES = MIB, 64 * MIB, 64 * KIB
BYTES_PER_ROW = {"runs.csv": 64 * KIB, "tags.csv": 256 * KIB, "params.csv": 256 * KIB,
                 "latest_metrics.csv": 64 * KIB, "metrics.csv": KIB}
#: the compression methods Python's zipfile reads (a bundle is written deflated)
METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated", zipfile.ZIP_BZIP2: "bzip2",
           zipfile.ZIP_LZMA: "lzma"}


@dataclass(frozen=True)
class RunRow:
    """A row of runs.csv, checked."""

    run_id: str
    origin: str
    experiment: str
    name: str
    status: str
    start_time: int
    end_time: int | None
    line: int


@dataclass
class BundleContents:
    """What a checked bundle holds, but its metric histories (streamed from metrics.csv when read)."""

    zip: zipfile.ZipFile
    manifest: dict
    runs: list[RunRow]
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    params: dict[str, dict[str, str]] = field(default_factory=dict)
    latest: dict[str, dict[str, float]] = field(default_factory=dict)
    job_lists: dict[str, str] = field(default_factory=dict)  # run id -> its sweep_jobs.json


def read_bundle(path: Path) -> BundleContents:
    """The bundle at ``path``, every member checked (the module's docstring); ConfigurationError, one line,
    for anything a bundle made by ``mcsa-bench export`` does not hold."""
    return _Checker(Path(path)).read()


def job_list_member(run_id: str) -> str:
    return f"{ARTIFACTS}{run_id}/{SWEEP_JOBS_ARTIFACT}"


def table_rows(bundle: zipfile.ZipFile, name: str) -> Iterator[list[str]]:
    """The rows of a table of a bundle :func:`read_bundle` checked, the header left out."""
    with bundle.open(name) as handle:
        rows = csv.reader(io.TextIOWrapper(handle, encoding="utf-8", newline=""))
        next(rows)
        yield from rows


class _Checker:
    """One bundle's reading; each method checks one member or one rule."""

    def __init__(self, path: Path):
        self.path = path
        self._names: set[str] = set()  # the keys found good

    def error(self, where: str, problem: str) -> ConfigurationError:
        return ConfigurationError(f"{self.path}: {where}: {problem}; not a bundle mcsa-bench export wrote, "
                                  "nothing read from it")

    def read(self) -> BundleContents:
        try:
            bundle = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile, EOFError, zlib.error) as error:
            raise ConfigurationError(f"{self.path} is not an mcsa-bench bundle ({error}); make one with "
                                     "mcsa-bench export") from None
        try:
            return self._read(bundle)
        except BaseException:
            bundle.close()
            raise

    def _read(self, bundle: zipfile.ZipFile) -> BundleContents:
        members = self._members(bundle)
        manifest = self._manifest(bundle, members)
        self._sizes(members, manifest)
        contents = BundleContents(bundle, manifest, self._runs(bundle, manifest["runs"]))
        known = {run.run_id: i for i, run in enumerate(contents.runs)}
        contents.tags = self._pairs(bundle, "tags.csv", known, TAG_VALUE_LENGTH)
        contents.params = self._pairs(bundle, "params.csv", known, PARAM_VALUE_LENGTH)
        latest = self._pairs(bundle, "latest_metrics.csv", known, None, lines=True)
        contents.latest = {run_id: {key: self._float(value, "latest_metrics.csv", line, key)
                                    for key, (value, line) in pairs.items()} for run_id, pairs in latest.items()}
        histories = self._metrics(bundle, known, manifest["points"])
        self._latest_agree(contents.latest, histories)
        self._origins(contents)
        contents.job_lists = self._job_lists(bundle, members, contents)
        return contents

    # ------------------------------------------------------------------------------- the ZIP

    def _members(self, bundle: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
        members: dict[str, zipfile.ZipInfo] = {}
        for info in bundle.infolist():
            name = info.filename
            if name in members:
                raise self.error(name, "the archive holds two members of this name (tools disagree on which "
                                       "one counts)")
            if not (name in COLUMNS or name == MANIFEST or name.startswith(ARTIFACTS)):
                raise self.error(name, f"a bundle holds {MANIFEST}, {', '.join(COLUMNS)} and "
                                       f"{ARTIFACTS}<run_id>/{SWEEP_JOBS_ARTIFACT}, nothing else")
            if info.flag_bits & 0x1:
                raise self.error(name, "the member is encrypted")
            if info.compress_type not in METHODS:
                raise self.error(name, f"compressed with method {info.compress_type}, which Python's zipfile does "
                                       f"not read (it reads {', '.join(METHODS.values())})")
            members[name] = info
        for name in (MANIFEST, *COLUMNS):
            if name not in members:
                raise self.error(name, "missing from the archive")
        return members

    def _member_bytes(self, bundle: zipfile.ZipFile, name: str) -> bytes:
        try:
            return bundle.read(name)
        except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as error:
            raise self.error(name, f"the archive's data is damaged ({error})") from None

    def _manifest(self, bundle: zipfile.ZipFile, members) -> dict:
        if members[MANIFEST].file_size > MANIFEST_BYTES:
            raise self.error(MANIFEST, f"its header says it inflates to {members[MANIFEST].file_size:,} bytes; a "
                                       f"manifest is at most {MANIFEST_BYTES:,}")
        try:
            manifest = json.loads(self._member_bytes(bundle, MANIFEST).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise self.error(MANIFEST, f"not UTF-8 JSON ({error})") from None
        if not isinstance(manifest, dict):
            raise self.error(MANIFEST, f"a JSON {type(manifest).__name__}, where a bundle's manifest is an object")
        if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
            found = f"format {manifest.get('format')!r}, version {manifest.get('version')!r}"
            raise ConfigurationError(f"{self.path} is not an mcsa-bench bundle of version {VERSION} ({found})")
        for key in ("runs", "points"):
            if type(manifest.get(key)) is not int or not 0 <= manifest[key] < INT64:
                raise self.error(MANIFEST, f"{key!r} is {manifest.get(key)!r}, where it counts the bundle's {key} "
                                           "(an integer >= 0)")
        for key in ("experiment", "source"):
            if not isinstance(manifest.get(key), str):
                raise self.error(MANIFEST, f"{key!r} is {manifest.get(key)!r}, where it is a string")
        return manifest

    def _sizes(self, members: dict[str, zipfile.ZipInfo], manifest: dict) -> None:
        """Each member's size in the zip's headers: within the bound of the manifest's counts, and the size
        the manifest declares."""
        declared = manifest.get("sizes")
        if declared is not None and not (isinstance(declared, dict) and set(declared) == set(members) - {MANIFEST}):
            raise self.error(MANIFEST, "'sizes' does not give the size of each member but the manifest")
        counts = {"runs.csv": manifest["runs"], "metrics.csv": manifest["points"]}
        for name, info in members.items():
            if name == MANIFEST:
                continue
            bound = (JOB_LIST_BYTES if name.startswith(ARTIFACTS)
                     else HEADER_BYTES + counts.get(name, manifest["runs"]) * BYTES_PER_ROW[name])
            if info.file_size > bound:
                what = f"{manifest['points']:,} points" if name == "metrics.csv" else f"{manifest['runs']:,} runs"
                raise self.error(name, f"its header says it inflates to {info.file_size:,} bytes, more than the "
                                       f"{bound:,} a bundle of {what} (the manifest's count) may hold")
            if declared is not None and declared[name] != info.file_size:
                raise self.error(name, f"its header says {info.file_size:,} bytes, the manifest "
                                       f"{declared[name]!r}")

    # ------------------------------------------------------------------------------ the tables

    def _rows(self, bundle: zipfile.ZipFile, name: str, limit: int | None = None) -> Iterator[list[str]]:
        """Every row of a table after its header, which must be the table's columns; each row with the table's
        number of fields; at most ``limit`` rows. While it runs, :attr:`line` is the line of the row last
        yielded and :attr:`rows_read` the rows so far."""
        columns = COLUMNS[name]
        self.rows_read = 0
        with bundle.open(name) as handle:
            reader = csv.reader(self._lines(io.TextIOWrapper(handle, encoding="utf-8", newline=""), name))
            self._reader = reader
            try:
                header = next(reader, None)
                if header is None or tuple(header) != columns:
                    raise ConfigurationError(f"{self.path}: {name} has columns {header}, expected {list(columns)}")
                width = len(columns)
                for row in reader:
                    self.rows_read += 1
                    if len(row) != width or (limit is not None and self.rows_read > limit):
                        raise self.error(f"{name} line {reader.line_num}", (
                            f"{len(row)} fields, where its rows have {width} ({', '.join(columns)})"
                            if len(row) != width else f"more rows than the {limit:,} the manifest counts"))
                    yield row
            except csv.Error as error:
                raise self.error(f"{name} line {reader.line_num + 1}", f"not CSV ({error})") from None
            except UnicodeDecodeError as error:
                raise self.error(name, f"not UTF-8 text (byte {error.object[error.start]:#04x})") from None
            except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as error:
                raise self.error(name, f"the archive's data is damaged ({error})") from None

    @property
    def line(self) -> int:
        """The line of the row :meth:`_rows` yielded last (the line its record ends on)."""
        return self._reader.line_num

    def _lines(self, text: io.TextIOWrapper, name: str) -> Iterator[str]:
        number = 0
        while line := text.readline(LINE_LIMIT + 1):
            number += 1
            if len(line) > LINE_LIMIT:
                raise self.error(f"{name} line {number}", f"a line longer than {LINE_LIMIT:,} characters (no field "
                                                          f"of a bundle is longer than {TAG_VALUE_LENGTH:,})")
            if "\0" in line:
                raise self.error(f"{name} line {number}", "a NUL character (U+0000), which no MLflow store on "
                                                          "PostgreSQL can hold")
            yield line

    def _int(self, text: str, where: str, what: str, minimum: int = -INT64) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not minimum <= value < INT64:
            raise self.error(where, f"{what} {text[:40]!r} is not an integer in [{minimum}, 2^63)")
        return value

    def _float(self, text: str, name: str, line: int, key: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise self.error(f"{name} line {line}", f"{key}'s value {text[:40]!r} is not a number") from None
        if math.isinf(value):
            raise self.error(f"{name} line {line}", f"{key}'s value {text[:40]!r} is infinite: MLflow keeps ±∞ as "
                                                    f"±{sys.float_info.max!r}, which is what an export writes")
        return value

    def _name(self, key: str, where: str, what: str) -> None:
        if key in self._names:
            return
        if not (key and len(key) <= KEY_LENGTH and NAME.fullmatch(key) and not _resolves_elsewhere(key)):
            raise self.error(where, f"{what} {key[:60]!r} is not a name MLflow takes (1 to {KEY_LENGTH} "
                                    "alphanumerics, _ - . : / and spaces, not a path that resolves elsewhere)")
        self._names.add(key)

    def _runs(self, bundle: zipfile.ZipFile, count: int) -> list[RunRow]:
        runs, lines = [], {}
        for run_id, origin, experiment, name, status, start, end in self._rows(bundle, "runs.csv", count):
            line = self.line
            where = f"runs.csv line {line}"
            if not RUN_ID.fullmatch(run_id):
                raise self.error(where, f"run id {run_id[:60]!r} is not an MLflow run id")
            if run_id in lines:
                raise self.error(where, f"run {run_id} again (first on line {lines[run_id]})")
            if not 0 < len(origin) <= TAG_VALUE_LENGTH:
                raise self.error(where, f"origin_run_id of {len(origin):,} characters (1 to {TAG_VALUE_LENGTH:,})")
            if not 0 < len(experiment) <= EXPERIMENT_NAME_LENGTH:
                raise self.error(where, f"experiment name of {len(experiment):,} characters "
                                        f"(1 to {EXPERIMENT_NAME_LENGTH})")
            if len(name) > RUN_NAME_LENGTH:
                raise self.error(where, f"run name of {len(name):,} characters (at most {RUN_NAME_LENGTH})")
            if status not in STATUSES:
                raise self.error(where, f"status {status[:40]!r} (MLflow's are {', '.join(STATUSES)})")
            lines[run_id] = line
            runs.append(RunRow(run_id, origin, experiment, name, status, self._int(start, where, "start_time", 0),
                               self._int(end, where, "end_time", 0) if end else None, line))
        if len(runs) != count:
            raise self.error("runs.csv", f"{len(runs):,} runs, where the manifest counts {count:,}")
        return runs

    def _pairs(self, bundle: zipfile.ZipFile, name: str, known: dict[str, int], value_length: int | None,
               lines: bool = False) -> dict[str, dict]:
        """A key-value table (tags, params, latest metrics): run id -> key -> value (with ``lines``, (value,
        line))."""
        found: dict[str, dict] = {}
        for run_id, key, value in self._rows(bundle, name):
            line = self.line
            where = f"{name} line {line}"
            if run_id not in known:
                raise self.error(where, f"run {run_id[:60]!r}, which runs.csv does not hold")
            self._name(key, where, "key")
            if value_length is not None and len(value) > value_length:
                raise self.error(where, f"{key}'s value of {len(value):,} characters (MLflow's limit: "
                                        f"{value_length:,})")
            pairs = found.setdefault(run_id, {})
            if key in pairs:
                raise self.error(where, f"run {run_id}'s {key} a second time")
            pairs[key] = (value, line) if lines else value
        return found

    def _metrics(self, bundle: zipfile.ZipFile, known: dict[str, int], count: int
                 ) -> dict[tuple[str, str], tuple[tuple, int]]:
        """Stream metrics.csv: every point checked, the points of each run together in runs.csv's order and
        each metric's together, no point twice; returns each (run, metric)'s latest point (step, timestamp,
        stored value, is_nan) as MLflow's store picks it (the largest of the first three) and its line."""
        latest: dict[tuple[str, str], tuple[tuple, int]] = {}
        run = key = None
        names: set[str] = set()
        points: set[tuple] = set()
        best = top = None
        position = -1
        rows = self._rows(bundle, "metrics.csv", count)
        for run_id, metric, step, timestamp, value in rows:
            if run_id != run or metric != key:
                if key is not None:
                    latest[(run, key)] = (best, top)
                where = f"metrics.csv line {self.line}"
                if run_id != run:
                    if known.get(run_id, -1) <= position:
                        raise self.error(where, f"run {run_id[:60]!r} is not in runs.csv, or its points are not "
                                                "together in runs.csv's order of runs (as export writes them)")
                    run, position, names = run_id, known[run_id], set()
                if metric in names:
                    raise self.error(where, f"run {run_id}'s points of {metric[:60]!r} are not together")
                self._name(metric, where, "metric")
                key, points, best = metric, set(), None
                names.add(metric)
            try:  # the common case in few operations; the checkers below say what is wrong
                point = (int(step), int(timestamp), float(value), False)
                good = -INT64 <= point[0] < INT64 and 0 <= point[1] < INT64 and abs(point[2]) != math.inf
            except ValueError:
                good = False
            if not good:
                where = f"metrics.csv line {self.line}"
                point = (self._int(step, where, "step"), self._int(timestamp, where, "timestamp", 0),
                         self._float(value, "metrics.csv", self.line, metric), False)
            if point[2] != point[2]:
                point = (point[0], point[1], 0.0, True)  # NaN as MLflow's store keeps it (tablewriter.stored_value)
            if point in points:
                raise self.error(f"metrics.csv line {self.line}", f"run {run_id}'s point of {metric} at step "
                                                                  f"{point[0]}, timestamp {point[1]} a second time")
            points.add(point)
            if best is None or point[:3] > best[:3]:
                best, top = point, self.line
        if key is not None:
            latest[(run, key)] = (best, top)
        if self.rows_read != count:
            raise self.error("metrics.csv", f"{self.rows_read:,} points, where the manifest counts {count:,}")
        return latest

    def _latest_agree(self, latest: dict[str, dict[str, float]], histories: dict) -> None:
        """latest_metrics.csv holds each history's latest value, and nothing else."""
        for run_id, values in latest.items():
            for key, value in values.items():
                held = histories.get((run_id, key))
                if held is None:
                    raise self.error("latest_metrics.csv", f"run {run_id}'s {key} has no point in metrics.csv")
                (_, _, last, is_nan), line = held
                if stored_value(value) != (last, is_nan):
                    last = math.nan if is_nan else last
                    raise self.error("latest_metrics.csv", f"run {run_id}'s {key} is {value!r}, but its latest point "
                                                           f"(metrics.csv line {line}) is {last!r}")
        for run_id, key in histories:
            if key not in latest.get(run_id, {}):
                raise self.error("latest_metrics.csv", f"run {run_id}'s {key} is missing (metrics.csv has its points)")

    def _origins(self, contents: BundleContents) -> None:
        """runs.csv's origin_run_id is the run's origin tag, and no two runs claim one origin."""
        claimed: dict[str, RunRow] = {}
        for run in contents.runs:
            origin = origin_of(run.run_id, contents.tags.get(run.run_id, {}))
            where = f"runs.csv line {run.line}"
            if origin != run.origin:
                raise self.error(where, f"origin_run_id {run.origin[:60]!r}, but run {run.run_id}'s tags name "
                                        f"{origin[:60]!r}")
            if origin in claimed:
                first = claimed[origin]
                raise self.error(where, f"run {run.run_id} ({run.name!r}) and run {first.run_id} ({first.name!r}, line "
                                        f"{first.line}) both claim origin {origin[:60]!r}: merge would copy one and "
                                        "skip the other as already there")
            claimed[origin] = run

    def _job_lists(self, bundle: zipfile.ZipFile, members, contents: BundleContents) -> dict[str, str]:
        lists = {}
        runs = {run.run_id for run in contents.runs}
        for name in members:
            if not name.startswith(ARTIFACTS) or name.endswith("/"):
                continue  # a directory entry, as zip tools write them
            run_id = name[len(ARTIFACTS):].split("/")[0]
            if name != job_list_member(run_id) or run_id not in runs:
                raise self.error(name, f"a bundle's artifacts are {ARTIFACTS}<run_id>/{SWEEP_JOBS_ARTIFACT} of its "
                                       "sweep parents")
            if contents.tags.get(run_id, {}).get(ROLE_TAG) != ROLE_SWEEP:
                raise self.error(name, f"run {run_id} is not a sweep's parent (tag {ROLE_TAG} is "
                                       f"{contents.tags.get(run_id, {}).get(ROLE_TAG)!r})")
            data = self._member_bytes(bundle, name)
            try:
                text = data.decode("utf-8")
                decode_sweep_jobs(text)
            except (UnicodeDecodeError, ValueError) as error:
                raise self.error(name, f"not a sweep's job list ({error})") from None
            lists[run_id] = text
        return lists


def _resolves_elsewhere(name: str) -> bool:
    """MLflow's rule for names that may become paths: one that normalizes to another name, to ., .. or /."""
    import posixpath

    normal = posixpath.normpath(name)
    return normal != name or normal == "." or normal.startswith("..") or normal.startswith("/")
