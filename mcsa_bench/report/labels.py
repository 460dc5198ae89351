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

#: the kernels' names in a method's name (``jsa+cis``: JSA+CIS); a kernel not listed is written in capitals
KERNEL_NAMES: dict[str, str] = {"cis": "CIS", "imh": "IMH", "hmc": "HMC"}

#: the papers' data sets under their names, in the order of the papers' tables (the parallel-state paper's
#: Tables 2-3 and the NeurIPS paper's Table 3; docs/methods.md §8); a data set not listed follows, as it is
PAPER_DATASETS: dict[str, str] = {
    "pima": "Pima Indians",
    "heart": "heart disease",
    "german_numeric": "German credit",  # the papers' 24-column numeric file (docs/models.md)
    "german": "German credit (one-hot)",
    "sonar": "sonar",
    "ionosphere": "ionosphere",
    "breast": "breast",
    "boston": "boston",
    "concrete": "concrete",
    "radon": "radon",
    "sp500": "S&P 500",
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
    "model.dim": "dimension D",
}


def natural_key(value: str):
    """Numbers by value, before other strings; other strings alphabetically."""
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def setting_label(name: str) -> str:
    return SETTING_LABELS.get(name, name)


def value_label(setting: str, value: str) -> str:
    """A setting's value as a table or a figure shows it: a data set under the papers' name."""
    return PAPER_DATASETS.get(value, value) if setting == "dataset" else value


def value_sort_key(setting: str, value: str):
    """The order of a setting's values: data sets in the papers' order, then the others in natural order."""
    if setting == "dataset" and value in PAPER_DATASETS:
        return (0, list(PAPER_DATASETS).index(value), natural_key(value))
    return (1, 0, natural_key(value))


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
        """The listed name; a scheme run with another kernel than its own (``jsa+cis``) under the scheme's
        name and the kernel's (``JSA+CIS``); else the key as it is."""
        if key in self.names:
            return self.names[key]
        scheme, plus, kernel = key.partition("+")
        if plus and scheme in self.names:
            return f"{self.names[scheme]}+{KERNEL_NAMES.get(kernel, kernel.upper())}"
        return key

    def sort_key(self, key: str):
        """Listed keys in their order, a scheme's other kernels right after it, then the rest in natural order."""
        order = list(self.names)
        if key in order:
            return (order.index(key), 0, ())
        scheme, plus, kernel = key.partition("+")
        if plus and scheme in order:
            return (order.index(scheme), 1, natural_key(kernel))
        return (len(order), 0, natural_key(key))
