"""What a command prints when it is done: a final line per run, an aligned table per sweep."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from mcsa_bench.tracking.record import ENGINE_METRICS, REFERENCE_METRICS, SAMPLE_METRICS
from mcsa_bench.tracking.store import DEFAULT_TRACKING_URI, absolute_uri, redacted, sqlite_path

# Summaries lead with the model's own metrics, not the ENGINE_METRICS; the REFERENCE_METRICS, then the
# SAMPLE_METRICS follow as room allows.
#: model and reference metrics shown per row, at most
MODEL_METRICS_SHOWN = 4
OVERRIDES_WIDTH = 60


def result_columns(metric_names: Iterable[str]) -> list[str]:
    """A run's own model metrics (sorted), then its posterior-accuracy and sample-based metrics, at most
    four in all; then wall_time."""
    names = set(metric_names)
    model_metrics = sorted(names - {*ENGINE_METRICS, *REFERENCE_METRICS, *SAMPLE_METRICS, "iteration"})
    accuracy = [m for m in (*REFERENCE_METRICS, *SAMPLE_METRICS) if m in names]
    shown = [*model_metrics, *accuracy][:MODEL_METRICS_SHOWN]
    return [*shown, "wall_time"]


def format_metrics(metrics: Mapping[str, float], columns: Iterable[str] | None = None) -> str:
    columns = result_columns(metrics) if columns is None else columns
    return "  ".join(f"{name}={metrics[name]:.4g}" for name in columns if name in metrics)


def sweep_table(rows: Sequence[tuple[str, str, str, Mapping[str, float]]]) -> list[str]:
    """Aligned lines for (job number, status, overrides, final metrics) rows.

    Each row shows its own run's model metrics, so a sweep over models loses none; long
    override lists are shortened in the middle so the metrics stay in line.
    """
    shown = [(number, status, _shorten(overrides, OVERRIDES_WIDTH), format_metrics(metrics))
             for number, status, overrides, metrics in rows]
    widths = [max([len(row[i]) for row in shown] + [1]) for i in range(3)]
    return [f"  #{number:<{widths[0]}}  {status:<{widths[1]}}  {overrides:<{widths[2]}}  {metrics}".rstrip()
            for number, status, overrides, metrics in shown]


def _shorten(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    half = (width - 3) // 2
    return f"{text[:half]}...{text[len(text) - (width - 3 - half):]}"


def where_to_look(uri: str) -> str:
    """One line naming the store (absolute, so it is found from any directory) and the UI command."""
    if uri.startswith(("http://", "https://")):
        return f"Results are in the tracking server {uri}. Browse them with: mcsa-bench ui tracking.uri={uri}"
    if sqlite_path(uri) is None:  # a database server: its password stays off the screen
        shown = redacted(uri)
        return f"Results are in the database {shown}. Browse them with: mcsa-bench ui tracking.uri={shown}"
    location = absolute_uri(uri)
    here = " (from this directory: mcsa-bench ui)" if uri == DEFAULT_TRACKING_URI else ""
    return f"Results are in {location}. Browse them with: mcsa-bench ui tracking.uri={location}{here}"
