"""Words and order for a report's keys: the methods under the papers' names and in the papers' order,
the settings as axis labels in words, and the natural order of values (the metrics' labels and units
are the run record's: mcsa_bench.tracking.record.METRICS).

The method names and order are the default of ``mcsa-bench report --methods`` (docs/report.md); a
key without a name here is shown as it is, so a plugin's method needs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcsa_bench.api import ConfigurationError

#: the papers' names (docs/methods.md §1), in the order of the papers' tables: the MCSA schemes, then the baselines
PAPER_METHODS: dict[str, str] = {
    "pmcsa": "pMCSA",
    "jsa": "JSA",
    "msc": "MSC",
    "msc_rb": "MSC-RB",
    "msc+hmc": "single-HMC",
    "rws": "RWS",
    "snis": "SNIS",
    "elbo": "ELBO",
}

#: a setting's label on an axis, in a column label or in a caption
SETTING_LABELS: dict[str, str] = {
    "lr": "stepsize γ",
    "N": "samples per iteration N",
    "T": "iterations T",
    "iteration": "iteration t",
    "wall_time": "wall-clock time (s)",
    "optimizer": "optimizer",
    "dataset": "data set",
    "model": "model",
    "family": "family",
    "method": "method",
}


def natural_key(value: str):
    """Numbers by value, before other strings; other strings alphabetically."""
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def setting_label(name: str) -> str:
    return SETTING_LABELS.get(name, name)


@dataclass(frozen=True)
class MethodNames:
    """How a report names and orders the values of its column factor (the methods): listed keys first,
    in the listed order, under their names; the others after them, in natural order, as they are."""

    names: dict[str, str] = field(default_factory=lambda: dict(PAPER_METHODS))

    @classmethod
    def parse(cls, spec: str) -> MethodNames:
        """``pmcsa=pMCSA,msc,jsa=JSA`` (``KEY[=NAME]``, comma-separated); ``none``: the keys as they are."""
        if spec.strip() == "none":
            return cls({})
        names = {}
        for item in spec.split(","):
            key, sep, name = (part.strip() for part in item.partition("="))
            if not key or (sep and not name):
                raise ConfigurationError(
                    f"--methods takes KEY[=NAME],... (e.g. pmcsa=pMCSA,msc=MSC) or none, got {spec!r}"
                )
            names[key] = name or key
        return cls(names)

    def name(self, key: str) -> str:
        return self.names.get(key, key)

    def sort_key(self, key: str):
        order = list(self.names)
        return (order.index(key), ()) if key in order else (len(order), natural_key(key))
