"""``mcsa-bench check <kind> <name> [param=value ...] [--json]``: run a component's conformance checks.

Exit status: 0 when every check passes (or does not apply), 1 when any fails, 2 for a usage
error (unknown kind, name, parameter or check; the message lists the allowed ones).
"""

from __future__ import annotations

import json

from mcsa_bench.api import ConfigurationError
from mcsa_bench.plugins import KINDS, _check_kind
from mcsa_bench.testing.results import FAILED, NOT_APPLICABLE, PASSED

USAGE = """\
usage: mcsa-bench check <kind> <name> [param=value ...] [--json] [--jax]

Runs the conformance checks of one component with fixed seeds; statistical checks hold
|z| < {z_limit} against Monte Carlo standard errors. Parameters build the component
(e.g. kernel.step_size=0.3 becomes step_size=0.3); for an estimator, kernel=<name> chooses the
kernel to run it with (default: the scheme's default kernel). --json prints the results as a list.
--jax checks the component's JAX twin (the accelerated backend) against it instead: log densities
and scores at random points to 1e-10, kernels' π-invariance, the cost kernels and schemes declare
against the numpy engine's counts, optimizers' iterates (needs JAX).
Exit status: 0 all passed, 1 a check failed, 2 usage error.

checks:
{checks}"""


def usage() -> str:
    from mcsa_bench.testing.numerics import Z_LIMIT
    from mcsa_bench.testing.runner import CHECKS

    checks = "\n".join(f"  {kind:<10} {', '.join(['builds', *CHECKS[kind]])}" for kind in KINDS)
    return USAGE.format(z_limit=Z_LIMIT, checks=checks)


def parse_value(text: str) -> object:
    """A command-line value typed as YAML would type it (3 -> int, 0.1 -> float, true -> bool)."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (int, float, bool, str, type(None))) else text


def parse_arguments(argv: list[str]) -> tuple[str, str, dict[str, object], str | None, bool]:
    as_json = "--json" in argv
    positional = [a for a in argv if a not in ("--json", "--jax") and "=" not in a]
    assignments = [a for a in argv if "=" in a]
    if positional and not positional[0].startswith("-"):
        _check_kind(positional[0])  # a misspelt kind: the kinds, with a "did you mean"
    if len(positional) != 2 or any(a.startswith("-") for a in positional):
        raise ConfigurationError(f"check needs <kind> <name>, got {' '.join(argv) or 'nothing'}; "
                                 f"kinds: {', '.join(KINDS)} (mcsa-bench check --help)")
    kind, name = positional
    params: dict[str, object] = {}
    for assignment in assignments:
        key, _, value = assignment.partition("=")
        params[key.removeprefix(f"{kind}.")] = parse_value(value)
    kernel = params.pop("kernel", None) if kind == "estimator" else None
    return kind, name, params, None if kernel is None else str(kernel), as_json


def clash_note(registry, kind: str, name: str) -> str:
    """One line when another plugin also registered ``kind`` ``name`` and was refused for it: the check runs
    the holder's component, not the refused plugin's."""
    clash = f"{kind} {name!r} is registered twice"
    refused = [failure.plugin.name for failure in registry.failures if clash in failure.reason]
    if not refused:
        return ""
    holder = registry.get(kind, name).plugin
    return (f"note: plugin {', '.join(map(repr, refused))} also registers {kind} {name!r} and was refused (the name "
            f"is held by plugin {holder.name!r}, {holder.distribution or 'no distribution'}): this checks that "
            f"plugin's {kind}; give yours another name (mcsa-bench plugins lists what failed)")


def check_command(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(usage())
        return 0
    import sys

    from mcsa_bench.testing import runner

    kind, name, params, kernel, as_json = parse_arguments(argv)
    registry = runner.get_registry()
    if note := clash_note(registry, kind, name):
        print(note, file=sys.stderr)
    if "--jax" in argv:
        from mcsa_bench.testing.twins import check_twin  # imports JAX: a one-line error without it

        results = check_twin(kind, name, params)
    else:
        results = runner.check_component(kind, name, params, kernel=kernel, registry=registry)
    if as_json:
        print(json.dumps([r.as_dict() for r in results], indent=2, ensure_ascii=False))
    else:
        for result in results:
            print(result.message)
        counts = {status: sum(r.status == status for r in results) for status in (PASSED, FAILED, NOT_APPLICABLE)}
        print(f"{results[0].component}: " + ", ".join(f"{n} {status}" for status, n in counts.items()))
    return 1 if any(r.status == FAILED for r in results) else 0

