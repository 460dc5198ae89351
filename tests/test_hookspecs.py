"""The plugin hooks (mcsa_bench.hookspecs): one per component kind, each documented in docs/plugins.md with
its signature and an example, tested by tests/test_plugins.py, and checked by mcsa_bench.testing."""

import inspect
from pathlib import Path

from mcsa_bench import hookspecs
from mcsa_bench.plugins import HOOKS
from mcsa_bench.testing import CHECKS
from tests.test_plugins import HOOK_EXAMPLES


def test_every_hook_is_a_kind_documented_with_its_signature_and_tested():
    docs = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()
    specs = {name for name, value in vars(hookspecs).items() if inspect.isfunction(value)}
    assert specs == set(HOOKS.values())
    for kind, name in HOOKS.items():
        assert list(inspect.signature(getattr(hookspecs, name)).parameters) == ["register"]
        assert f"### `{name}(register)`" in docs, f"{name} is not documented in docs/plugins.md"
        section = docs.split(f"### `{name}(register)`")[1].split("\n### ")[0]
        assert f"def {name}(register):" in section, f"the documentation of {name} has no example"
        assert kind in HOOK_EXAMPLES, f"{name} has no test: add its kind to HOOK_EXAMPLES"
        assert CHECKS[kind], f"{kind} components have no conformance checks (mcsa_bench.testing)"
