"""A co-author's bundle is untrusted input (mcsa_bench.tracking.bundleformat; docs/reliability.md, "Who may write
what"): planted edits to a good bundle of a 2-job sweep, each refused by `merge` and by `report --bundle` alike in
exactly one line, exit 2, the target store and the working directory as they were."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sqlite3
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from mcsa_bench.tracking.record import ORIGIN_TAG, STALE_TAG
from tests.support import built_once, cli_in_process

SWEEP = ["run", "-m", "experiment=logistic_pima", "size=tiny", "estimator=msc", "seed=0,1"]


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """`mcsa-bench export` of a 2-job sweep (its parent and two runs of one cell), made once per session."""
    def build(directory: Path) -> None:
        with pytest.MonkeyPatch.context() as patch:
            for args in (SWEEP, ("export", "--sweep", "latest", "--out", "good.zip")):
                result = cli_in_process(*args, cwd=directory, monkeypatch=patch)
                assert result.returncode == 0, result.stderr

    return built_once(tmp_path_factory, "bundle_of_a_sweep", build) / "good.zip"


# ------------------------------------------------------------------------------- planting edits


def members_of(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as bundle:
        return {info.filename: bundle.read(info) for info in bundle.infolist()}


def table(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))


def csv_bytes(rows) -> bytes:
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    return text.getvalue().encode("utf-8")


def write_bundle(path: Path, members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression=method) as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
    return path


def plant(good: Path, out: Path, edits: dict[str, Callable[[bytes | None], bytes | None]], resize: bool = True,
          method: int = zipfile.ZIP_DEFLATED) -> Path:
    """A copy of ``good`` with each member's bytes replaced by ``edit(bytes)`` (None: the member left out); the
    manifest's ``sizes`` made to agree with the edits, as a careful forger would (``resize``), before the
    manifest's own edit."""
    members = members_of(good)
    for name, edit in edits.items():
        if name != "manifest.json":
            members[name] = edit(members.get(name))
    members = {name: data for name, data in members.items() if data is not None}
    if resize:
        manifest = json.loads(members["manifest.json"])
        manifest["sizes"] = {name: len(data) for name, data in members.items() if name != "manifest.json"}
        members["manifest.json"] = json.dumps(manifest).encode()
    if "manifest.json" in edits:
        members["manifest.json"] = edits["manifest.json"](members["manifest.json"])
    return write_bundle(out, members, method)


def cell(row: int, column: int, value: str) -> Callable[[bytes], bytes]:
    """A table's edit: row ``row`` (0: the header), column ``column`` set to ``value``."""
    def edit(data: bytes) -> bytes:
        rows = table(data)
        rows[row][column] = value
        return csv_bytes(rows)

    return edit


def rows_edit(change: Callable[[list[list[str]]], list[list[str]]]) -> Callable[[bytes], bytes]:
    return lambda data: csv_bytes(change(table(data)))


def manifest_edit(**changes) -> Callable[[bytes], bytes]:
    return lambda data: json.dumps({**json.loads(data), **changes}).encode()


def patched_header(path: Path, member: str, offset_local: int, offset_central: int, fmt: str, value) -> Path:
    """``path`` with a field of ``member``'s local and central zip headers overwritten (``struct`` format ``fmt``
    at the offsets from each header's start): what no zip library writes, as a forger would."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as bundle:
        info = bundle.getinfo(member)
    struct.pack_into(fmt, data, info.header_offset + offset_local, value)
    for entry in re.finditer(b"PK\x01\x02", data):  # the member's entry in the central directory
        start = entry.start()
        length = struct.unpack_from("<H", data, start + 28)[0]
        if data[start + 46:start + 46 + length] == member.encode():
            struct.pack_into(fmt, data, start + offset_central, value)
    path.write_bytes(bytes(data))
    return path


def first_job(members: dict[str, bytes]) -> tuple[str, str]:
    """(parent's id, a job's id) of the good bundle."""
    runs = table(members["runs.csv"])[1:]
    tags = table(members["tags.csv"])[1:]
    parent = next(r for r, k, v in tags if k == "mcsa_bench.role" and v == "sweep")
    return parent, next(row[0] for row in runs if row[0] != parent)


# ----------------------------------------------------------------------------------- the cases


def cases(good: Path, tmp: Path) -> dict[str, tuple[Path, str]]:
    """Each planted bundle and the words its one line must hold."""
    members = members_of(good)
    parent, job = first_job(members)
    metrics = table(members["metrics.csv"])
    points = len(metrics) - 1
    runs = len(table(members["runs.csv"])) - 1

    tmp.mkdir(parents=True, exist_ok=True)

    def planted(name, edits, **options):
        return plant(good, tmp / f"{name}.zip", edits, **options)

    found = {
        # the issue's tracebacks
        "a ragged row in tags.csv": (planted("ragged_tags", {"tags.csv": rows_edit(
            lambda rows: rows[:1] + [rows[1] + ["x"]] + rows[2:])}),
                                     "tags.csv line 2: 4 fields, where its rows have 3"),
        "a ragged row in params.csv": (planted("ragged_params", {"params.csv": rows_edit(
            lambda rows: rows[:2] + [rows[2][:2]] + rows[3:])}), "params.csv line 3: 2 fields"),
        "a metric value abc": (planted("abc", {"metrics.csv": cell(1, 4, "abc")}), "value 'abc' is not a number"),
        "a step nan": (planted("step_nan", {"metrics.csv": cell(1, 2, "nan")}), "step 'nan' is not an integer"),
        "a start time yesterday": (planted("yesterday", {"runs.csv": cell(2, 5, "yesterday")}),
                                   "start_time 'yesterday' is not an integer"),
        "a status BOGUS": (planted("bogus", {"runs.csv": cell(2, 4, "BOGUS")}), "status 'BOGUS'"),
        "every point twice": (planted("twice", {"metrics.csv": rows_edit(
            lambda rows: rows[:1] + [row for row in rows[1:] for _ in range(2)]),
            "manifest.json": manifest_edit(points=2 * points)}), "a second time"),
        "every point twice, the manifest's count kept": (planted("twice_counted", {"metrics.csv": rows_edit(
            lambda rows: rows + rows[1:])}), f"more rows than the {points} the manifest counts"),
        "manifest.json a JSON list": (planted("list", {"manifest.json": lambda d: b"[1, 2]"}), "a JSON list"),
        "no metrics.csv": (planted("no_metrics", {"metrics.csv": lambda d: None}), "metrics.csv: missing"),
        "runs.csv not UTF-8": (planted("latin1", {"runs.csv": lambda d: d.replace(b"msc", b"ms\xe9", 1)}),
                               "runs.csv: not UTF-8 text (byte 0xe9)"),
        "a 1 MB run name": (planted("long_name", {"runs.csv": cell(2, 3, "n" * 2**20)}),
                            "runs.csv: its header says it inflates to 1,049,"),
        "a 1 MB tag value": (planted("long_tag", {"tags.csv": cell(5, 2, "v" * 2**20)}),
                             "tags.csv: its header says it inflates to 1,05"),
        "a 100 kB tag value": (planted("long_line", {"tags.csv": cell(5, 2, "v" * 100_000)}),
                               "tags.csv line 6: a line longer than 65,536 characters"),
        # the rest of the format
        "not a ZIP": (tmp / "not.zip", "is not an mcsa-bench bundle"),
        "a truncated ZIP": (tmp / "truncated.zip", "is not an mcsa-bench bundle"),
        "manifest.json not JSON": (planted("not_json", {"manifest.json": lambda d: d[:-5]}), "not UTF-8 JSON"),
        "another format version": (planted("version", {"manifest.json": manifest_edit(version=2)}),
                                   "not an mcsa-bench bundle of version 1"),
        "a count that is a string": (planted("count_text", {"manifest.json": manifest_edit(runs=str(runs))}),
                                     f"'runs' is '{runs}'"),
        "fewer runs than the manifest counts": (planted("runs_count", {"manifest.json": manifest_edit(runs=runs + 1)}),
                                                f"runs.csv: {runs} runs, where the manifest counts {runs + 1}"),
        "more points than the manifest counts": (planted("points_count", {
            "manifest.json": manifest_edit(points=points - 1)}), f"more rows than the {points - 1} the manifest"),
        "sizes the headers contradict": (planted("sizes", {"manifest.json": lambda d: json.dumps({
            **json.loads(d), "sizes": {**json.loads(d)["sizes"], "params.csv": 17}}).encode()}),
            "params.csv: its header says"),
        "a header of other columns": (planted("header", {"metrics.csv": cell(0, 2, "iteration")}),
                                      "metrics.csv has columns"),
        "a run id twice in runs.csv": (planted("dup_run", {"runs.csv": rows_edit(lambda rows: rows + [rows[2]]),
                                                           "manifest.json": manifest_edit(runs=runs + 1)}),
                                       f"run {job} again (first on line"),
        "a run id that is a path": (planted("run_path", {"runs.csv": lambda d: d.replace(job.encode(), b"../../x")}),
                                    "'../../x' is not an MLflow run id"),
        "an end time abc": (planted("end_abc", {"runs.csv": cell(2, 6, "abc")}), "end_time 'abc' is not an integer"),
        "an empty experiment name": (planted("no_experiment", {"runs.csv": cell(1, 2, "")}),
                                     "experiment name of 0 characters"),
        "a 300-character run name": (planted("name300", {"runs.csv": cell(2, 3, "n" * 300)}),
                                     "run name of 300 characters (at most 250)"),
        "a tag of a run runs.csv lacks": (planted("tag_orphan", {"tags.csv": cell(3, 0, "f" * 32)}),
                                          "which runs.csv does not hold"),
        "a tag key that is a path": (planted("tag_path", {"tags.csv": cell(3, 1, "../../etc/x")}),
                                     "key '../../etc/x' is not a name MLflow takes"),
        "a tag key twice": (planted("tag_twice", {"tags.csv": rows_edit(lambda rows: rows + [rows[1]])}),
                            "a second time"),
        "a 9,000-character tag value": (planted("tag9000", {"tags.csv": cell(5, 2, "v" * 9000)}),
                                        "value of 9,000 characters (MLflow's limit: 8,000)"),
        "a 7,000-character param value": (planted("param7000", {"params.csv": cell(5, 2, "v" * 7000)}),
                                          "value of 7,000 characters (MLflow's limit: 6,000)"),
        "a NUL byte in params.csv": (planted("nul", {"params.csv": cell(3, 2, "a\0b")}),
                                     "params.csv line 4: a NUL character"),
        "a quoted field beyond csv's limit": (planted("huge_field", {"tags.csv": cell(5, 2, "v\n" * 70_000)}),
                                              "not CSV (field larger than field limit"),
        "a metric value inf": (planted("inf", {"metrics.csv": cell(1, 4, "inf")}), "value 'inf' is infinite"),
        "a latest value 1e400": (planted("e400", {"latest_metrics.csv": cell(1, 2, "1e400")}),
                                 "value '1e400' is infinite"),
        "a negative timestamp": (planted("timestamp", {"metrics.csv": cell(1, 3, "-5")}),
                                 "timestamp '-5' is not an integer in [0, 2^63)"),
        "a step beyond 64 bits": (planted("step64", {"metrics.csv": cell(1, 2, str(2**63))}), "is not an integer"),
        "a point of a run runs.csv lacks": (planted("point_orphan", {"metrics.csv": cell(1, 0, "f" * 32)}),
                                            "is not in runs.csv, or its points are not together"),
        "points not in runs.csv's order": (planted("order", {"metrics.csv": rows_edit(
            lambda rows: rows[:1] + sorted(rows[1:], key=lambda row: row[0] == job))}),
            "not together in runs.csv's order"),
        "a metric's points apart": (planted("apart", {"metrics.csv": rows_edit(
            lambda rows: rows[:1] + rows[2:4] + rows[1:2] + rows[4:])}), "are not together"),
        "a latest value its history contradicts": (planted("latest", {"latest_metrics.csv": cell(1, 2, "0.123")}),
                                                   "but its latest point (metrics.csv line"),
        "a latest value missing": (planted("latest_missing", {"latest_metrics.csv": rows_edit(
            lambda rows: rows[:1] + rows[2:])}), "is missing (metrics.csv has its points)"),
        "an origin column its tags contradict": (planted("origin_column", {"runs.csv": cell(2, 1, "f" * 32)}),
                                                 "but run"),
        "a forged origin: a job claims its parent's": (planted("forged_origin", {
            "runs.csv": lambda d: d.replace(f"{job},{job}".encode(), f"{job},{parent}".encode()),
            "tags.csv": rows_edit(lambda rows: rows + [[job, ORIGIN_TAG, parent]])}), "both claim origin"),
        "a job list that is not JSON": (planted("jobs_json", {f"artifacts/{parent}/sweep_jobs.json": lambda d: d[:-3]}),
                                        "not a sweep's job list"),
        "a job list of a run that is no sweep": (planted("jobs_of_job", {
            f"artifacts/{job}/sweep_jobs.json": lambda d: members[f"artifacts/{parent}/sweep_jobs.json"]}),
            "is not a sweep's parent"),
        "an unexpected member": (planted("extra", {"run.py": lambda d: b"import os"}), "nothing else"),
        "two members of one name": (tmp / "duplicate.zip", "two members of this name"),
        # bombs (the small ones here; benchmarks/measure/bundle_bombs.py measures the issue's sizes)
        "a manifest that inflates to 2 MB": (planted("manifest_bomb", {"manifest.json": lambda d: d[:-2] + b" " * 2**21
                                                                       + b"}\n"}), "a manifest is at most 1,048,576"),
        "tags.csv inflating past its runs' bound": (planted("tags_bomb", {"tags.csv": lambda d: d + b"\n" * 2**21}),
                                                    f"a bundle of {runs} runs (the manifest's count) may hold"),
        "metrics.csv inflating past its points' bound": (planted("metrics_bomb", {
            "metrics.csv": lambda d: d + b"\n" * 2**18}), f"a bundle of {points} points"),
        # the zip itself
        "a member compressed by an unsupported method": (patched_header(planted(
            "method", {}, method=zipfile.ZIP_STORED), "tags.csv", 8, 10, "<H", 9), "compressed with method 9"),
        "an encrypted member": (patched_header(planted("encrypted", {}), "params.csv", 6, 8, "<H", 1), "encrypted"),
        "a member with a bad CRC": (patched_header(planted("crc", {}), "runs.csv", 14, 16, "<I", 12345),
                                    "runs.csv: the archive's data is damaged (Bad CRC-32"),
        "a header that understates a member's size": (patched_header(planted("understated", {
            "manifest.json": lambda d: json.dumps({k: v for k, v in json.loads(d).items() if k != "sizes"}).encode()}),
            "metrics.csv", 22,
                                                                     24, "<I", 100), "metrics.csv: the archive's data"),
    }
    good_bytes = good.read_bytes()
    (tmp / "truncated.zip").write_bytes(good_bytes[: len(good_bytes) // 2])
    (tmp / "not.zip").write_text("hello")
    with zipfile.ZipFile(tmp / "duplicate.zip", "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for name, content in members.items():
            bundle.writestr(name, content)
        with pytest.warns(UserWarning, match="Duplicate name"):
            bundle.writestr("runs.csv", b"id,name\n")  # zipfile reads the later one, other tools the first
    return found


def store_dump(path: Path) -> list[str]:
    """Every row of every table of an SQLite store, as SQL."""
    database = sqlite3.connect(path)
    try:
        return list(database.iterdump())
    finally:
        database.close()


def test_every_planted_edit_is_one_line_exit_2_from_merge_and_report_alike_and_changes_nothing(
        good, tmp_path, store_in, monkeypatch):
    """The issue's malformed bundles and the rest of the format: merge and report --bundle give the same one
    line (one reader, one set of checks), exit 2, no traceback; the target store's rows and the directory's
    files stay as they were (no experiment made, no report written)."""
    planted = cases(good, tmp_path / "planted")
    work = store_in(tmp_path / "work")
    target = work / "outputs" / "mlflow.db"
    assert cli_in_process("merge", str(good), cwd=work, monkeypatch=monkeypatch).returncode == 0
    before, files = store_dump(target), sorted(work.rglob("*"))
    problems = []
    for case, (bundle, words) in planted.items():
        lines = []
        for command in (("merge", str(bundle)), ("report", "--bundle", str(bundle), "--no-figures", "--out", "r")):
            result = cli_in_process(*command, cwd=work, monkeypatch=monkeypatch)
            lines.append(result.stderr)
            if result.returncode != 2 or result.stderr.count("\n") != 1 or "Traceback" in result.stderr \
                    or words not in result.stderr or result.stdout:
                problems.append(f"{case}: {command[0]} exit {result.returncode}: {result.stderr[:600]!r}")
        if lines[0] != lines[1]:
            problems.append(f"{case}: merge and report disagree: {lines}")
        if store_dump(target) != before or sorted(work.rglob("*")) != files:
            problems.append(f"{case}: the store or the directory changed")
            before, files = store_dump(target), sorted(work.rglob("*"))
    assert not problems, "\n".join(problems)
    assert len(planted) >= 50


def test_the_good_bundle_and_every_committed_one_pass_the_checks(good):
    """The checks refuse nothing an export writes: the sweep's bundle, and every grid's bundle committed in
    benchmarks/results/grids/ (written before the checks existed, so without sizes in the manifest)."""
    from mcsa_bench.tracking.bundle import BundleReader

    grids = sorted((Path(__file__).parents[2] / "benchmarks" / "results" / "grids").glob("*.zip"))
    assert len(grids) == 16
    for path in (good, *grids):
        reader = BundleReader(path)
        assert len(reader.all_runs) == reader.manifest["runs"] and not reader.unfinished, path


def test_the_checks_limits_are_mlflows():
    """KEY_LENGTH and the others are MLflow's, and a name is refused exactly where MLflow's validation refuses
    it (a merge straight into the tables bypasses MLflow's checks)."""
    from mlflow.exceptions import MlflowException
    from mlflow.store.tracking.dbmodels.models import SqlRun
    from mlflow.utils import validation

    import mcsa_bench.tracking.bundleformat as bf

    assert (bf.KEY_LENGTH, bf.TAG_VALUE_LENGTH, bf.PARAM_VALUE_LENGTH, bf.EXPERIMENT_NAME_LENGTH) == (
        validation.MAX_ENTITY_KEY_LENGTH, validation.MAX_TAG_VAL_LENGTH, validation.MAX_PARAM_VAL_LENGTH,
        validation.MAX_EXPERIMENT_NAME_LENGTH)
    assert bf.RUN_NAME_LENGTH == SqlRun.__table__.c.name.type.length
    assert bf.RUN_ID.pattern == validation._RUN_ID_REGEX.pattern.strip("^$")
    from mlflow.entities import RunStatus

    assert set(bf.STATUSES) == {RunStatus.to_string(s) for s in RunStatus.all_status()}
    checker = bf._Checker(Path("b.zip"))
    for name in ("test_lpd", "a/b", "a b:c", "x.y-z", "../x", "/x", "a//b", "a/./b", ".", "", "a\nb", "é", "a$b",
                 "a" * 250, "a" * 251):
        try:
            validation._validate_tag_name(name)
            validation._validate_length_limit("key", validation.MAX_ENTITY_KEY_LENGTH, name)
            mlflow_takes = True
        except MlflowException:
            mlflow_takes = False
        try:
            checker._name(name, "here", "key")
            we_take = True
        except ValueError:
            we_take = False
        assert we_take == mlflow_takes, name


def test_nan_and_mlflows_infinity_are_read_alike_by_merge_and_report(good, tmp_path, store_in, monkeypatch):
    """NaN and ±1.797e308 (MLflow's ±∞) are values a store holds: a bundle with them in one cell's two runs
    merges, and its report from the bundle and from the merged store are the same (the cell's mean non-finite or
    huge, no bootstrap interval where it has none), exit 0 both."""
    members = members_of(good)
    _, job = first_job(members)
    for value, other_value in (("nan", "-0.7"), ("1.7976931348623157e+308", "-1.7976931348623157e+308")):
        def final(rows, value=value, other_value=other_value):
            for row in rows:
                if row[1] == "test_lpd":
                    last = max((r for r in rows if r[0] == row[0] and r[1] == "test_lpd"), key=lambda r: int(r[2]))
                    if row is last:
                        row[-1] = value if row[0] == job else other_value
            return rows

        def latest(rows, value=value, other_value=other_value):
            for row in rows:
                if row[1] == "test_lpd":
                    row[2] = value if row[0] == job else other_value
            return rows

        bundle = plant(good, tmp_path / "values.zip", {"metrics.csv": rows_edit(final),
                                                       "latest_metrics.csv": rows_edit(latest)})
        work = store_in(tmp_path / f"work-{value[:3]}")
        for command in (("merge", str(bundle)), ("report", "--bundle", str(bundle), "--no-figures", "--out", "b"),
                        ("report", "--sweep", "latest", "--no-figures", "--out", "s")):
            result = cli_in_process(*command, cwd=work, monkeypatch=monkeypatch)
            assert result.returncode == 0, (value, command, result.stderr)
        cells = []
        for name in ("b", "s"):
            summary = json.loads((work / name / "summary.json").read_text())
            (cell_,) = [c for t in summary["tables"] if t["metric"] == "test_lpd" for c in t["cells"]]
            cells.append(cell_)
        assert cells[0]["values"] == cells[1]["values"] and cells[0]["interval"] == cells[1]["interval"]
        mean = cells[0]["mean"]
        if value == "nan":
            assert math.isnan(mean) and cells[0]["low"] is None and cells[0]["interval"] == "non-finite"
        else:  # the mean of MLflow's +∞ and -∞ halves: exact, no overflow
            assert mean == 0.0


def test_a_forged_origin_against_the_store_is_refused_naming_both_runs(good, tmp_path, store_in, monkeypatch):
    """A bundle's job tagged with the origin of another run the store holds (its parent) would be skipped as
    already there: merge refuses in one line naming both, before writing anything."""
    members = members_of(good)
    parent, job = first_job(members)
    work = store_in(tmp_path)
    assert cli_in_process("merge", str(good), cwd=work, monkeypatch=monkeypatch).returncode == 0
    runs = table(members["runs.csv"])
    lone = plant(good, tmp_path / "lone.zip", {
        "runs.csv": lambda d: csv_bytes([runs[0], [f"{'a' * 32}", parent, *[r for r in runs if r[0] == job][0][2:]]]),
        "tags.csv": rows_edit(lambda rows: [rows[0], ["a" * 32, ORIGIN_TAG, parent]]),
        "params.csv": rows_edit(lambda rows: rows[:1]), "latest_metrics.csv": rows_edit(lambda rows: rows[:1]),
        "metrics.csv": rows_edit(lambda rows: rows[:1]), f"artifacts/{parent}/sweep_jobs.json": lambda d: None,
        "manifest.json": manifest_edit(runs=1, points=0)})
    before = store_dump(work / "outputs" / "mlflow.db")
    result = cli_in_process("merge", str(lone), cwd=work, monkeypatch=monkeypatch)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"run {'a' * 32}" in result.stderr and "which the store holds as run" in result.stderr
    assert "another run: nothing merged" in result.stderr
    assert store_dump(work / "outputs" / "mlflow.db") == before
    again = cli_in_process("merge", str(good), cwd=work, monkeypatch=monkeypatch)
    assert again.returncode == 0 and "0 runs copied, 3 already" in again.stdout  # the same runs: no collision


def test_a_run_running_when_exported_is_read_killed_by_merge_and_report_and_says_so(good, tmp_path, store_in,
                                                                                   monkeypatch):
    """A RUNNING run in a bundle: merged KILLED with the stale tag, as the stale check marks a run whose process
    is gone (no process writes to a copy), and the report from the bundle lists it KILLED; both say so."""
    from mlflow.tracking import MlflowClient

    _, job = first_job(members_of(good))
    bundle = plant(good, tmp_path / "running.zip", {"runs.csv": lambda d: d.replace(b"FINISHED", b"RUNNING")})
    work = store_in(tmp_path / "work")
    merged = cli_in_process("merge", str(bundle), cwd=work, monkeypatch=monkeypatch)
    assert merged.returncode == 0 and "3 run(s) were RUNNING when exported, read as KILLED" in merged.stderr
    client = MlflowClient(f"sqlite:///{work}/outputs/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("mcsa-bench").experiment_id])
    assert {r.info.status for r in runs} == {"KILLED"} and all(r.info.end_time for r in runs)
    assert all(r.data.tags[STALE_TAG].startswith("RUNNING when exported") for r in runs)
    report = cli_in_process("report", "--bundle", str(bundle), "--no-figures", "--out", "r", cwd=work,
                            monkeypatch=monkeypatch)
    assert report.returncode == 2 and "read as KILLED" in report.stderr  # nothing FINISHED to report
    assert "no FINISHED run" in report.stderr


def test_report_neutralizes_spreadsheet_formulas_in_runs_csv(good, tmp_path, monkeypatch):
    """A run name (or a setting, an error) that a spreadsheet would take for a formula (=, +, -, @, tab, CR
    first) is written to runs.csv with a ' before it (OWASP's CSV injection advice); numbers stay numbers."""
    _, job = first_job(members_of(good))
    forged = "=cmd|' /C calc'!A0"
    bundle = plant(good, tmp_path / "formula.zip", {
        "runs.csv": rows_edit(lambda rows: [r[:3] + [forged if r[0] == job else r[3]] + r[4:] for r in rows]),
        "tags.csv": rows_edit(lambda rows: [r[:2] + ["@SUM(A1)" if r[0] == job and r[1] == "dataset" else r[2]]
                                            for r in rows])})
    result = cli_in_process("report", "--bundle", str(bundle), "--no-figures", "--out", "r", cwd=tmp_path,
                            monkeypatch=monkeypatch)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "r" / "runs.csv").read_text())))
    row = next(r for r in rows if r["run_id"] == job)
    assert row["name"] == "'" + forged and row["dataset"] == "'@SUM(A1)"
    assert all(not value.startswith(("=", "+", "@", "\t", "\r")) for r in rows for value in r.values())
    assert float(row["test_lpd"]) < 0  # a negative number is not neutralized
