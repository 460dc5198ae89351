"""The package has no import circles: the graph of every import between mcsa_bench's modules (at
module level, inside functions and for type checking alike) is acyclic. ``from package import
name`` counts as an import of the submodule ``package.name`` when there is one, else of the package.
And Hydra's private modules are used by one module, mcsa_bench.jobs.composition, which refuses other
Hydra releases than it was written for with one line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mcsa_bench

ROOT = Path(mcsa_bench.__file__).parent


def module_files() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_circles():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_graph()["mcsa_bench.report.page"] >= {"mcsa_bench.report.tables", "mcsa_bench.report.document"}


def test_hydras_private_modules_are_used_in_one_module_only():
    users = {name for name, path in module_files().items()
             if any(isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hydra._internal")
                    or isinstance(node, ast.Import) and any(a.name.startswith("hydra._internal") for a in node.names)
                    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))}
    assert users == {"mcsa_bench.jobs.composition"}


def test_another_hydra_release_is_one_line_naming_the_mismatch():
    import subprocess
    import sys

    from mcsa_bench.api import ConfigurationError
    from mcsa_bench.jobs.composition import check_hydra_version

    check_hydra_version("1.3.2")  # the releases it was written for pass
    with pytest.raises(ConfigurationError, match=r"hydra-core 1\.4\.0 is installed.*1\.3\.2 to before 1\.4"):
        check_hydra_version("1.4.0")
    with pytest.raises(ConfigurationError, match="hydra-core 1.2.0 is installed"):
        check_hydra_version("1.2.0")
    # the command: the version is checked before any private module is imported, and the user sees one line
    code = ("import sys, hydra; hydra.__version__ = '1.4.0'; from mcsa_bench.cli import main; "
            "sys.exit(main(['run', 'n_iters=1']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "hydra-core 1.4.0 is installed" in done.stderr


#: the package's layers, bottom to top: a module may import its own layer and those below, never above
#: (docs/architecture.md draws them). A module belongs to the layer of its longest listed prefix; the
#: package itself (``mcsa_bench``: its public names) only to its own.
LAYERS = (
    ("contracts", ("mcsa_bench.version", "mcsa_bench.api", "mcsa_bench.hookspecs")),
    ("ground truth", ("mcsa_bench.metrics", "mcsa_bench.references")),
    ("the loop", ("mcsa_bench.engine",)),
    ("components", ("mcsa_bench.builtin", "mcsa_bench.datasets", "mcsa_bench.accel", "mcsa_bench.autodiff")),
    ("registry", ("mcsa_bench.plugins", "mcsa_bench.assembly", "mcsa_bench")),
    ("checks and tools", ("mcsa_bench.testing", "mcsa_bench.tools")),
    ("tracking", ("mcsa_bench.tracking",)),
    ("jobs", ("mcsa_bench.jobs",)),
    ("report", ("mcsa_bench.report",)),
    ("command line", ("mcsa_bench.cli",)),
)


def layer_of(module: str) -> int:
    matches = [(len(prefix), rank) for rank, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
               if module == prefix or (prefix != "mcsa_bench" and module.startswith(prefix + "."))]
    assert matches, f"{module} is in no layer: add it to LAYERS and docs/architecture.md"
    return max(matches)[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
                  for module, targets in graph.items() for target in targets if layer_of(target) > layer_of(module))


def test_every_import_points_down_the_layers():
    assert upward_imports(import_graph()) == []


def test_the_layer_check_finds_an_upward_import_and_an_unplaced_module():
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("mcsa_bench.newcomer")
    assert upward_imports({"mcsa_bench.engine": {"mcsa_bench.jobs.job"}, "mcsa_bench.jobs.job": set()}) == [
        "mcsa_bench.engine (the loop) imports mcsa_bench.jobs.job (jobs)"]


#: the modules that may import JAX (module level or inside a function; docs/architecture.md,
#: "The accelerated backend"): the backend, the faces of components written in JAX, the twin checks, the
#: reference generator.
#: The autodiff package's own __init__ only asks whether JAX is installed (its components' plugins load without).
JAX_USERS = ("mcsa_bench.accel", "mcsa_bench.autodiff.compiled", "mcsa_bench.autodiff.twins",
             "mcsa_bench.testing.twins", "mcsa_bench.tools.generate_references", "mcsa_bench.references.nuts",
             "mcsa_bench.autodiff.ppl", "mcsa_bench.autodiff.flow",
             # the shipped NumPyro model files (loaded by their paths by model=posteriordb and model=numpyro)
             "mcsa_bench.references.posteriordb.", "mcsa_bench.references.inference_gym.")


def test_jax_is_imported_only_by_the_backend_the_autodiff_faces_the_twin_checks_and_the_reference_generator():
    users = {name for name, path in module_files().items()
             if any(module == "jax" or module.startswith("jax.") for module in third_party_imports(path))}
    allowed = {name for name in users if name.startswith(JAX_USERS)} | {"mcsa_bench.autodiff"}
    assert users == allowed, sorted(users - allowed)
    assert {"mcsa_bench.accel.engine", "mcsa_bench.autodiff.compiled", "mcsa_bench.tools.generate_references"} <= users


#: what the report must not import: it reads only the store (docs/architecture.md, "From a store to a report")
NOT_FOR_THE_REPORT = ("mcsa_bench.jobs", "mcsa_bench.plugins", "mcsa_bench.assembly", "hydra", "omegaconf")
#: what a process that imported the report has not loaded: the package's own __init__ imports the module
#: mcsa_bench.plugins for its public names, but no registry is built, so no component's module is imported
NOT_LOADED_BY_THE_REPORT = ("mcsa_bench.jobs", "mcsa_bench.assembly", "mcsa_bench.builtin", "mcsa_bench_extras",
                            "hydra", "omegaconf")


def third_party_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_the_report_imports_neither_the_jobs_nor_hydra_nor_the_plugin_registry():
    """Statically (every import of every report module, inside functions too) and in a process that
    imports every report module (tests/report/test_build.py reports a store in a process where they cannot load)."""
    import subprocess
    import sys

    report = {name: path for name, path in module_files().items() if name.startswith("mcsa_bench.report")}
    graph = import_graph()
    reached = {target for name in report for target in graph[name]} | {
        module for path in report.values() for module in third_party_imports(path)}
    assert not [m for m in reached if m.startswith(NOT_FOR_THE_REPORT)], sorted(reached)
    code = ("import sys; import " + ", ".join(sorted(report)) + "; "
            f"print(sorted(m for m in sys.modules if m.startswith({NOT_LOADED_BY_THE_REPORT!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


#: the share of the package's modules with a test module of their own below which the suite fails
#: (docs/architecture.md states the measured share where it says the tests mirror the package)
OWN_TEST_MODULE_BAR = 0.80


def package_modules() -> list[Path]:
    """mcsa_bench/**/<module>.py but __init__, in packages: not the shipped NumPyro model files
    (references/posteriordb/, references/inference_gym/: data read by path, in folders without __init__.py)."""
    return [path for path in ROOT.rglob("*.py")
            if path.name != "__init__.py" and (path.parent / "__init__.py").exists()]


def modules_without_a_test_module(tests: Path = Path(__file__).parent) -> list[str]:
    """The modules of :func:`package_modules` for which tests/ holds no test_<module>.py nor
    test_<module>_<suffix>.py."""
    named = {path.stem for path in tests.rglob("test_*.py")}
    return sorted(str(path.relative_to(ROOT)) for path in package_modules()
                  if not any(stem == f"test_{path.stem}" or stem.startswith(f"test_{path.stem}_") for stem in named))


def test_most_modules_have_a_test_module_of_their_own():
    modules = package_modules()
    missing = modules_without_a_test_module()
    share = 1 - len(missing) / len(modules)
    assert share >= OWN_TEST_MODULE_BAR, f"{share:.0%} of {len(modules)} modules; without one: {missing}"


def test_the_test_module_count_sees_a_missing_one(tmp_path):
    (tmp_path / "test_loop_failures.py").touch()
    missing = modules_without_a_test_module(tmp_path)
    assert "engine/loop.py" not in missing and "engine/checkpoint.py" in missing
