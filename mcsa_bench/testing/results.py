"""What a conformance check reports: one :class:`CheckResult` per (component, check)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from mcsa_bench.api import MetricSpec

PASSED, FAILED, NOT_APPLICABLE = "passed", "failed", "not applicable"


class NotApplicable(Exception):
    """Raised by a check that does not apply to the component (e.g. no reparameterization)."""


@dataclass(frozen=True)
class Measurement:
    """What a check measured, the tolerance it holds it to, and the numbers behind it.

    The check passes when ``measured <= tolerance`` (both are chosen so that smaller is better:
    a largest |z-score|, a largest relative error, ...).
    """

    measured: float
    tolerance: float
    detail: str
    #: what ``measured`` is, e.g. "largest |z|", "relative error", "problems"
    quantity: str = ""

    @property
    def passed(self) -> bool:
        return bool(self.measured <= self.tolerance)  # NaN fails

    @classmethod
    def problems(cls, problems: list[str], fine: str) -> Measurement:
        """A contract check: the number of problems found (tolerance 0), the first three described."""
        return cls(len(problems), 0, "; ".join(problems[:3]) or fine, "problems")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check of one component."""

    kind: str
    name: str
    plugin: str | None
    distribution: str | None
    version: str | None
    check: str
    status: str
    measured: float | None = None
    tolerance: float | None = None
    detail: str = ""
    quantity: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    @property
    def component(self) -> str:
        origin = [f"plugin {self.plugin}"] if self.plugin else []
        if self.distribution:
            origin.append(f"distribution {self.distribution} {self.version or ''}".rstrip())
        return f"{self.kind} {self.name!r}" + (f" ({', '.join(origin)})" if origin else "")

    @property
    def message(self) -> str:
        """One line: status, component, check, measured value against the tolerance, details."""
        numbers = ""
        if self.measured is not None:
            relation = "<=" if self.status == PASSED else ">"
            quantity = f"{self.quantity} " if self.quantity else ""
            numbers = f": {quantity}{_format(self.measured)} {relation} {_format(self.tolerance)}"
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.status.upper()} {self.component}: {self.check}{numbers}{detail}"

    def as_dict(self) -> dict:
        row = asdict(self)
        for key in ("measured", "tolerance"):  # JSON has no NaN or infinity
            if row[key] is not None and not math.isfinite(row[key]):
                row[key] = str(row[key])
        return row


def _format(value: float | None) -> str:
    return "None" if value is None else f"{value:.3g}"


def declaration_problems(specs: Mapping[str, object], produced: Iterable[str], source: str) -> list[str]:
    """What is wrong with a component's ``metric_specs()`` given the metrics it ``produced`` (from
    ``source``, e.g. "evaluate returns"): every spec is a MetricSpec, and a component that declares
    any declares all it produces (one that declares none leaves them diagnostics)."""
    problems = [
        f"metric_specs()[{k!r}] is {v!r}, not a MetricSpec" for k, v in specs.items() if not isinstance(v, MetricSpec)
    ]
    undeclared = sorted(set(produced) - set(specs)) if specs else []
    if undeclared:
        problems.append(f"{source} {', '.join(undeclared)}, which metric_specs() does not declare")
    return problems
