"""The plugin system: registration through hooks, entry points (real dist-info on sys.path),
duplicates, unknown names, broken plugins of every kind (listed, never fatal), factory
validation, the allow-list, strict mode, build errors, and the hooks' documentation and tests."""

import importlib
import json
import re
import textwrap
import types
from pathlib import Path

import pytest

from mcsa_bench import hookimpl, load_registry
from mcsa_bench.api import ConfigurationError
from mcsa_bench.builtin.kernels import IMH
from mcsa_bench.cli import main
from mcsa_bench.plugins import (
    ALLOW_ENV_VAR,
    HOOKS,
    KINDS,
    STRICT_ENV_VAR,
    Component,
    ComponentBuildError,
    DuplicateComponentError,
    PluginDeprecationWarning,
    PluginInfo,
    PluginLoadError,
    PluginWarning,
    UnknownComponentError,
)
from mcsa_bench.testing import assert_conforms, check_component

BUILTINS = {
    "model": {"gaussian"},
    "family": {"meanfield_gaussian"},
    "kernel": {"imh", "cis", "hmc"},
    "estimator": {"msc", "msc_rb", "jsa", "pmcsa", "snis", "rws", "elbo"},
    "optimizer": {"sgd", "momentum", "nesterov", "adam"},
}


def plugin(name, **hooks):
    """An in-test plugin module implementing the given hooks."""
    module = types.ModuleType(name)
    for hook_name, function in hooks.items():
        setattr(module, hook_name, hookimpl(function))
    return module


class SlowKernel(IMH):
    """An IMH kernel with a tunable parameter, for the tests."""

    def __init__(self, patience: int = 3):
        self.patience = patience


def make_distribution(root, dist_name, version, module_name, source, entry_name=None, more_entry_points=""):
    """A minimal installed distribution: <root>/<module>.py plus its .dist-info with an entry point (and
    ``more_entry_points``, further sections of entry_points.txt)."""
    (root / f"{module_name}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist_name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[mcsa_bench]\n{entry_name or module_name} = {module_name}\n"
                                           + more_entry_points)


def test_builtins_are_registered_through_the_hooks():
    registry = load_registry()
    for kind in KINDS:
        assert BUILTINS[kind] <= set(registry.names(kind))
    imh = registry.get("kernel", "imh")
    assert imh.plugin.name == "mcsa_bench.builtin.kernels" and imh.plugin.distribution == "mcsa-bench"


def test_an_in_test_plugin_registers_a_component_that_is_found_and_built():
    registry = load_registry([plugin("my_plugin", register_kernels=lambda register: register("slow", SlowKernel))])
    component = registry.get("kernel", "slow")
    assert component.plugin.name == "my_plugin"
    assert list(component.parameters()) == ["patience"]
    assert registry.build("kernel", "slow", patience=7).patience == 7
    assert "slow" in registry.names("kernel")


def test_duplicate_names_are_refused_naming_both_plugins():
    duplicate = plugin("copycat", register_kernels=lambda register: register("imh", SlowKernel))
    with pytest.warns(PluginWarning, match=r"'mcsa_bench.builtin.kernels'.*'copycat'"):
        registry = load_registry([duplicate], strict=False)
    assert registry.get("kernel", "imh").factory is IMH  # the built-in is kept
    with pytest.raises(PluginLoadError, match="registered twice"):
        load_registry([duplicate], strict=True)


def test_checking_a_name_two_plugins_registered_says_whose_component_it_checks(monkeypatch, capsys):
    """A pasted plugin registering a name another plugin holds is refused; `check kernel imh` then checks
    the holder's kernel, and says so in one line before the results."""
    duplicate = plugin("copycat", register_kernels=lambda register: register("imh", SlowKernel))
    with pytest.warns(PluginWarning):
        registry = load_registry([duplicate], strict=False)
    monkeypatch.setattr("mcsa_bench.testing.runner.get_registry", lambda: registry)
    assert main(["check", "kernel", "imh"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["note: plugin 'copycat' also registers kernel 'imh' and was refused (the name is held by plugin "
                   "'mcsa_bench.builtin.kernels', mcsa-bench): this checks that plugin's kernel; "
                   "give yours another name (mcsa-bench plugins lists what failed)"], err
    monkeypatch.setattr("mcsa_bench.testing.runner.get_registry", load_registry)
    assert main(["check", "kernel", "imh"]) == 0 and capsys.readouterr().err == ""  # no clash: no note


def test_registry_add_refuses_a_duplicate():
    registry = load_registry()
    clash = Component("kernel", "cis", SlowKernel, PluginInfo("other", None, None))
    with pytest.raises(DuplicateComponentError, match=r"'mcsa_bench.builtin.kernels' and by plugin 'other'"):
        registry.add(clash)


def test_unknown_names_list_the_available_ones():
    registry = load_registry()
    available = ", ".join(registry.names("kernel"))
    assert {"cis", "imh"} <= set(available.split(", "))
    with pytest.raises(UnknownComponentError,
                       match=rf"unknown kernel 'hmc2' \(did you mean 'hmc'\?\); available: {available}$"):
        registry.get("kernel", "hmc2")
    with pytest.raises(ConfigurationError, match="unknown component kind 'sampler'"):
        registry.names("sampler")


def test_a_plugin_whose_hook_fails_is_skipped_as_a_whole():
    def register_kernels(register):
        register("half", SlowKernel)
        raise RuntimeError("boom")

    with pytest.warns(PluginWarning, match=r"plugin 'flaky'.*register_kernels: RuntimeError: boom"):
        registry = load_registry([plugin("flaky", register_kernels=register_kernels)], strict=False)
    assert "half" not in registry.names("kernel")
    (failure,) = [f for f in registry.failures if f.plugin.name == "flaky"]
    assert (failure.stage, failure.kind, failure.reason) == ("register_kernels", "kernel", "RuntimeError: boom")


@pytest.mark.parametrize("exit_by", [SystemExit(3), SystemExit("bye"), GeneratorExit()], ids=repr)
def test_a_plugin_that_exits_in_its_hook_its_module_or_its_factory_is_a_plugin_failure(exit_by, tmp_path, monkeypatch):
    """issue 39 item 8: sys.exit in a hook took `run` and `plugins` down (exit 1 with its message)."""
    def register_kernels(register):
        raise exit_by

    with pytest.warns(PluginWarning, match=rf"plugin 'quitter'.*register_kernels: {type(exit_by).__name__}"):
        registry = load_registry([plugin("quitter", register_kernels=register_kernels)], strict=False)
    assert BUILTINS["kernel"] <= set(registry.names("kernel"))

    def exits(**kwargs):
        raise exit_by

    registry = load_registry([plugin("exiting", register_kernels=lambda register: register("exiting", exits))])
    failed = rf"kernel 'exiting' \(plugin exiting\) failed: {type(exit_by).__name__}"
    with pytest.raises(ComponentBuildError, match=failed):
        registry.build("kernel", "exiting")

    make_distribution(tmp_path, "mcsa-bench-quits", "0.1", "quitting_plugin", "import sys\nsys.exit(5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(STRICT_ENV_VAR, raising=False)
    with pytest.warns(PluginWarning, match=r"'quitting_plugin' from distribution 'mcsa-bench-quits'.*SystemExit: 5"):
        registry = load_registry()
    assert BUILTINS["kernel"] <= set(registry.names("kernel"))


def test_an_interrupt_in_a_hook_is_not_a_plugin_failure():
    def register_kernels(register):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        load_registry([plugin("interrupted", register_kernels=register_kernels)], strict=False)


def test_entry_point_plugins_are_found_with_their_distribution(tmp_path, monkeypatch):
    make_distribution(tmp_path, "mcsa-bench-good", "1.2.3", "good_plugin", """
        from mcsa_bench import hookimpl
        from mcsa_bench.builtin.kernels import IMH

        class GoodKernel(IMH):
            '''A kernel shipped by a third-party distribution.'''

        @hookimpl
        def register_kernels(register):
            register("good_kernel", GoodKernel)
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    component = load_registry().get("kernel", "good_kernel")
    assert (component.plugin.name, component.plugin.distribution, component.plugin.version) == (
        "good_plugin", "mcsa-bench-good", "1.2.3")
    assert component.description == "A kernel shipped by a third-party distribution."


def test_a_plugin_whose_import_fails_does_not_break_listing(tmp_path, monkeypatch):
    make_distribution(tmp_path, "mcsa-bench-broken", "0.1", "broken_plugin",
                      "raise ImportError('needs the missing package frobnicate')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(STRICT_ENV_VAR, raising=False)
    with pytest.warns(PluginWarning, match=r"'broken_plugin' from distribution 'mcsa-bench-broken'.*frobnicate"):
        registry = load_registry()
    assert BUILTINS["kernel"] <= set(registry.names("kernel"))
    (failure,) = [f for f in registry.failures if f.plugin.distribution == "mcsa-bench-broken"]
    assert failure.stage == "load" and failure.reason.startswith("ImportError: needs the missing package frobnicate")

    monkeypatch.setenv(STRICT_ENV_VAR, "1")
    with pytest.raises(PluginLoadError, match="frobnicate"):
        load_registry()


def test_build_checks_parameters_and_names_the_plugin_on_failure():
    def explode(**kwargs):
        raise RuntimeError("kaput")

    registry = load_registry([plugin("fragile", register_kernels=lambda register: register("fragile", explode))])
    with pytest.raises(ConfigurationError, match=r"unknown parameter 'step' for kernel 'slow'.*allowed: patience"):
        load_registry([plugin("p", register_kernels=lambda register: register("slow", SlowKernel))]).build(
            "kernel", "slow", step=3)
    with pytest.raises(
        ConfigurationError, match=r"model 'gaussian' \(plugin mcsa_bench.builtin.models\).*allowed: dim, nu, seed"
    ):
        registry.build("model", "gaussian", dimension=3)
    with pytest.raises(ComponentBuildError, match=r"kernel 'fragile' \(plugin fragile\) failed: RuntimeError: kaput"):
        registry.build("kernel", "fragile")
    with pytest.raises(ConfigurationError, match=r"model 'gaussian': nu must be > -1"):
        registry.build("model", "gaussian", nu=-3)


# --- broken third-party plugins: listed with their distribution and reason, never fatal --------

GOOD_PLUGIN = """
    from mcsa_bench import hookimpl
    from mcsa_bench.builtin.kernels import IMH

    class Fine(IMH):
        '''A kernel of a healthy plugin next to the broken one.'''

    @hookimpl
    def register_kernels(register):
        register("fine_{tag}", Fine)
"""

BROKEN_PLUGINS = {  # case -> (module source, stage, reason pattern)
    "import_error": ("import frobnicate\n", "load", r"ModuleNotFoundError: No module named 'frobnicate'"),
    "exception_in_register": ("""
        from mcsa_bench import hookimpl

        @hookimpl
        def register_models(register):
            raise KeyError("no config file")
    """, "register_models", r"KeyError: 'no config file'"),
    "duplicate_name": ("""
        from mcsa_bench import hookimpl
        from mcsa_bench.builtin.kernels import CIS

        @hookimpl
        def register_kernels(register):
            register("imh", CIS)
    """, "register_kernels", r"kernel 'imh' is registered twice: by plugin 'mcsa_bench.builtin.kernels' and by plugin"),
    "not_callable": ("""
        from mcsa_bench import hookimpl

        @hookimpl
        def register_optimizers(register):
            register("fast", 0.01)
    """, "register_optimizers", r"InvalidComponentError: optimizer 'fast': the factory 0.01 is not callable"),
    "builtin_max": ("""
        from mcsa_bench import hookimpl

        @hookimpl
        def register_kernels(register):
            register("biggest", max)
    """, "register_kernels", r"kernel 'biggest': the factory 'max' is a builtin function"),
    "no_signature": ("""
        from mcsa_bench import hookimpl

        @hookimpl
        def register_models(register):
            register("mapping", dict)
    """, "register_models", r"model 'mapping': the factory 'dict' has no inspectable signature"),
    "reserved_parameter": ("""
        from mcsa_bench import hookimpl
        from mcsa_bench.builtin.kernels import IMH

        class Named(IMH):
            def __init__(self, name: str = "x"):
                self.label = name

        @hookimpl
        def register_kernels(register):
            register("named", Named)
    """, "register_kernels", r"the parameter name 'name' is reserved for the component name"),
    "family_without_dim": ("""
        from mcsa_bench import hookimpl

        def make_family(scale: float = 1.0):
            return None

        @hookimpl
        def register_variational_families(register):
            register("dimless", make_family)
    """, "register_variational_families", r"family 'dimless': the factory must accept 'dim'"),
    "bad_name": ("""
        from mcsa_bench import hookimpl
        from mcsa_bench.builtin.kernels import IMH

        @hookimpl
        def register_kernels(register):
            register("my kernel", IMH)
    """, "register_kernels", r"kernel name 'my kernel' is not usable on the command line"),
    "misspelled_hook": ("""
        from mcsa_bench import hookimpl

        @hookimpl
        def register_kernel(register):
            pass
    """, "load", r"unknown hook 'register_kernel'; hooks: register_models"),
}


@pytest.fixture
def broken_site(tmp_path, monkeypatch, request):
    """A broken plugin (case = the test parameter) and a healthy one, installed side by side."""
    case = request.param
    source, stage, reason = BROKEN_PLUGINS[case]
    make_distribution(tmp_path, f"mcsa-bench-{case.replace('_', '-')}", "0.3", f"broken_{case}", source)
    make_distribution(tmp_path, f"mcsa-bench-fine-{case.replace('_', '-')}", "1.0", f"fine_{case}",
                      GOOD_PLUGIN.format(tag=case))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(STRICT_ENV_VAR, raising=False)
    monkeypatch.delenv(ALLOW_ENV_VAR, raising=False)
    return case, stage, reason


@pytest.mark.parametrize("broken_site", list(BROKEN_PLUGINS), indirect=True)
def test_a_broken_plugin_is_skipped_listed_and_stops_nothing(broken_site):
    case, stage, reason = broken_site
    distribution = f"mcsa-bench-{case.replace('_', '-')}"
    with pytest.warns(PluginWarning, match=rf"plugin 'broken_{case}' from distribution '{distribution}' failed"):
        registry = load_registry()
    (failure,) = [f for f in registry.failures if f.plugin.distribution == distribution]
    assert (failure.plugin.name, failure.plugin.version, failure.stage) == (f"broken_{case}", "0.3", stage)
    assert re.search(reason, failure.reason), failure.reason
    assert registry.get("kernel", f"fine_{case}").plugin.distribution == f"mcsa-bench-fine-{case.replace('_', '-')}"
    assert BUILTINS["kernel"] <= set(registry.names("kernel"))
    assert registry.get("kernel", "imh").factory is IMH
    with pytest.raises(PluginLoadError, match=reason):
        load_registry(strict=True)


@pytest.mark.parametrize("broken_site", ["builtin_max"], indirect=True)
def test_plugins_command_lists_the_broken_plugin_with_its_distribution_and_reason(broken_site, monkeypatch, capsys):
    monkeypatch.setattr("mcsa_bench.plugins.get_registry", load_registry)
    assert main(["plugins"]) == 0
    out, err = capsys.readouterr()
    assert "PluginWarning" not in err  # the failure is part of the listing instead
    table = out.split("plugins not loaded (1):")[1].strip().splitlines()
    assert table[0].split() == ["PLUGIN", "DISTRIBUTION", "STATUS", "STAGE", "REASON"]
    assert table[1].split()[:5] == ["broken_builtin_max", "mcsa-bench-builtin-max", "0.3", "failed", "register_kernels"]
    assert "the factory 'max' is a builtin function" in table[1]
    assert main(["plugins", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    (failed,) = [r for r in rows if r["status"] == "failed"]
    assert failed | {"error": None} == {"kind": "kernel", "name": None, "plugin": "broken_builtin_max",
                                        "distribution": "mcsa-bench-builtin-max", "version": "0.3", "status": "failed",
                                        "stage": "register_kernels", "error": None}
    assert {"kind": "kernel", "name": "fine_builtin_max", "status": "loaded"}.items() <= next(
        r for r in rows if r["name"] == "fine_builtin_max").items()


# --- the allow-list ------------------------------------------------------------------------


def test_the_allow_list_loads_only_the_named_plugins(tmp_path, monkeypatch):
    for tag in ("alpha", "beta"):
        make_distribution(tmp_path, f"mcsa-bench-{tag}", "1.0", f"allowed_{tag}", GOOD_PLUGIN.format(tag=tag))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ALLOW_ENV_VAR, "allowed_alpha")  # by entry-point name
    registry = load_registry()
    assert "fine_alpha" in registry.names("kernel") and "fine_beta" not in registry.names("kernel")
    assert "allowed_beta" in {p.name for p in registry.disabled} and not registry.failures
    monkeypatch.setenv(ALLOW_ENV_VAR, " mcsa_bench_BETA ")  # by distribution name, normalized
    assert "fine_beta" in load_registry().names("kernel")
    monkeypatch.setenv(ALLOW_ENV_VAR, "")  # built-ins only
    registry = load_registry()
    assert {c.plugin.distribution for c in registry.components()} == {"mcsa-bench"}
    monkeypatch.setenv(ALLOW_ENV_VAR, "allowed_alpha,gamma")
    with pytest.warns(PluginWarning, match=f"{ALLOW_ENV_VAR} names 'gamma', which matches no installed"):
        load_registry()


# --- every hook: documented with its signature, and registering through a real entry point ---

#: one factory per kind, in a third-party distribution's source
HOOK_EXAMPLES = {
    "model": ("from mcsa_bench.testing import GaussianTarget\n"
              "factory = lambda v=1.0: GaussianTarget.from_moments([0.0], [[v]])"),
    "family": "from mcsa_bench.builtin.families import MeanFieldGaussian as factory",
    "kernel": "from mcsa_bench.builtin.kernels import CIS as factory",
    "estimator": "from mcsa_bench.builtin.estimators import PMCSA as factory",
    "optimizer": "from mcsa_bench.builtin.optimizers import SGD as factory",
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_hook_registers_a_component_from_an_installed_distribution(kind, tmp_path, monkeypatch):
    make_distribution(tmp_path, f"mcsa-bench-hook-{kind}", "0.1", f"hook_{kind}", "\n".join([
        "from mcsa_bench import hookimpl",
        HOOK_EXAMPLES[kind],
        "",
        "@hookimpl",
        f"def {HOOKS[kind]}(register):",
        f"    register('third_party_{kind}', factory)",
    ]))
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = load_registry(strict=True)
    component = registry.get(kind, f"third_party_{kind}")
    assert (component.plugin.name, component.plugin.distribution) == (f"hook_{kind}", f"mcsa-bench-hook-{kind}")
    (built,) = check_component(kind, f"third_party_{kind}", registry=registry, checks=[])
    assert built.status == "passed", built.message


@pytest.mark.parametrize("kind", KINDS)
def test_each_hooks_documented_example_registers_a_conforming_component(kind):
    docs = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()
    section = docs.split(f"### `{HOOKS[kind]}(register)`")[1].split("\n### ")[0]
    namespace = {}
    exec(re.search(r"```python\n(.*?)```", section, re.S).group(1), namespace)
    registered = []
    namespace[HOOKS[kind]](register=lambda name, factory: registered.append((name, factory)))
    (name, factory), = registered
    assert_conforms(kind, factory, name=name)


#: the modules whose public names docs/plugins.md lists in a bullet "- `module`: `name`, ..."
PUBLIC_MODULES = ("mcsa_bench", "mcsa_bench.api", "mcsa_bench.testing", "mcsa_bench.metrics", "mcsa_bench.autodiff",
                  "mcsa_bench.accel.models", "mcsa_bench.accel.families", "mcsa_bench.accel.kernels",
                  "mcsa_bench.accel.schemes", "mcsa_bench.accel.optimizers")


def test_every_name_the_docs_call_public_exists():
    docs = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()
    section = docs.split("## The public API a plugin may use")[1].split("\nPrivate")[0]
    listed = {}
    for bullet in section.split("\n- "):
        match = re.match(r"`([\w.]+)`: (.*)", " ".join(bullet.split()), re.S)
        if match and match[1] in PUBLIC_MODULES:
            listed[match[1]] = re.findall(r"`(\w+)", match[2])
    assert set(listed) == set(PUBLIC_MODULES)
    for module_name, names in listed.items():
        module = importlib.import_module(module_name)
        missing = [name for name in names if not hasattr(module, name)]
        assert names and not missing, f"docs/plugins.md calls {missing} public in {module_name}, which has none"


# --- JAX twins: registered with their components -------------------------------------------------

#: a third-party kernel whose JAX twin is named by module and attribute (never imported by the numpy engine)
TWINNED_PLUGIN = """
    from mcsa_bench import hookimpl
    from mcsa_bench.builtin.kernels import IMH

    class TwinnedKernel(IMH):
        '''IMH under another name.'''

    @hookimpl
    def register_kernels(register):
        register("twinned", TwinnedKernel, jax="{twin}")
"""


def test_a_component_and_its_jax_twin_are_registered_together(tmp_path, monkeypatch):
    make_distribution(tmp_path, "mcsa-bench-twinned", "1.0", "twinned_plugin",
                      TWINNED_PLUGIN.format(twin="mcsa_bench.accel.kernels:IMH"))
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = load_registry(strict=True)
    component = registry.get("kernel", "twinned")
    assert component.backends == ("numpy", "jax") and component.jax == "mcsa_bench.accel.kernels:IMH"
    assert registry.get("kernel", "mala").backends == ("numpy",)
    assert {"twinned", "imh", "cis", "hmc"} <= set(registry.covered("kernel"))
    assert "mala" not in registry.covered("kernel")
    pytest.importorskip("jax")
    from mcsa_bench.accel.kernels import IMH as IMHTwin

    assert registry.jax_twin("kernel", "twinned") is IMHTwin
    with pytest.raises(ConfigurationError, match=r"kernel 'mala' has no JAX twin \(backend=jax\); covered kernels: "
                                                  r"cis, ex2mcmc, hmc, imh, rwmh, twinned"):
        registry.jax_twin("kernel", "mala")


def test_a_twin_that_fails_to_import_is_a_warning_naming_its_plugin_and_strict_makes_it_an_error(tmp_path,
                                                                                                monkeypatch):
    make_distribution(tmp_path, "mcsa-bench-twinned", "1.0", "broken_twin_plugin",
                      TWINNED_PLUGIN.format(twin="twinned_gpu_build:Twin"))
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = load_registry()
    assert registry.get("kernel", "twinned").backends == ("numpy", "jax")  # as registered; not imported yet
    with pytest.warns(PluginWarning, match=r"plugin 'broken_twin_plugin' from distribution 'mcsa-bench-twinned' "
                                           r"failed in the JAX twin of kernel 'twinned': ModuleNotFoundError: "
                                           r".*twinned_gpu_build"):
        with pytest.raises(ConfigurationError, match="kernel 'twinned' has no JAX twin"):
            registry.jax_twin("kernel", "twinned")
    assert [failure.stage for failure in registry.failures] == ["the JAX twin of kernel 'twinned'"]
    assert registry.jax_twin("kernel", "imh")  # the others' twins still load
    with pytest.raises(PluginLoadError, match="twinned_gpu_build"):
        load_registry(strict=True).jax_twin("kernel", "twinned")
    monkeypatch.setenv(ALLOW_ENV_VAR, "")  # the allow-list leaves the plugin, and its twin, out
    assert "twinned" not in load_registry().covered("kernel")


def test_a_twin_that_is_neither_a_factory_nor_a_name_fails_its_plugins_registration():
    bad = plugin("bad_twin", register_kernels=lambda register: register("odd", SlowKernel, jax=42))
    with pytest.warns(PluginWarning, match=r"kernel 'odd': jax= takes the twin's factory or 'module:attribute', "
                                           r"got 42"):
        registry = load_registry([bad])
    assert "odd" not in registry.names("kernel")


def test_the_previous_releases_twin_group_still_gives_twins_with_a_deprecation_warning(tmp_path, monkeypatch):
    make_distribution(tmp_path, "mcsa-bench-old", "0.9", "old_plugin", """
        from mcsa_bench import hookimpl
        from mcsa_bench.builtin.kernels import IMH

        class OldKernel(IMH):
            '''A kernel whose twin comes through the old group.'''

        @hookimpl
        def register_kernels(register):
            register("old_kernel", OldKernel)

        def register_jax_twins(register):
            register("kernel", "old_kernel", lambda kernel: ("twin of", kernel))
    """, more_entry_points="[mcsa_bench.jax_twins]\nold_plugin = old_plugin:register_jax_twins\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = load_registry(strict=True)
    with pytest.warns(PluginDeprecationWarning, match=r"plugin 'old_plugin' registers JAX twins through the "
                                                     r"entry-point group mcsa_bench.jax_twins, which is deprecated"):
        twin = registry.jax_twin("kernel", "old_kernel")
    assert twin("k") == ("twin of", "k") and registry.get("kernel", "old_kernel").backends == ("numpy", "jax")
    monkeypatch.setenv(ALLOW_ENV_VAR, "mcsa-bench-extras")  # the allow-list applies to the old group too
    assert "old_kernel" not in load_registry().names("kernel")
    assert not [w for w in load_registry().failures if "old_plugin" in w.message]


def test_the_plugins_command_shows_the_backends_of_every_component(capsys):
    assert main(["plugins", "--json"]) == 0
    rows = {(row["kind"], row["name"]): row for row in json.loads(capsys.readouterr().out) if row["status"] == "loaded"}
    assert rows["kernel", "imh"]["backends"] == ["numpy", "jax"]
    assert rows["kernel", "mala"]["backends"] == ["numpy"]
    assert rows["model", "eight_schools_jax"]["backends"] == ["numpy", "jax"]  # written in JAX: its own twin
    assert rows["optimizer", "rmsprop"]["backends"] == ["numpy", "jax"]  # a plugin optimizer with a twin
    assert main(["plugins"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:5] == ["KIND", "NAME", "PLUGIN", "DISTRIBUTION", "BACKENDS"]
    (mala,) = [line for line in lines if line.split()[:2] == ["kernel", "mala"]]
    assert " numpy " in mala and "numpy,jax" not in mala
