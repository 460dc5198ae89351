"""Plugin hooks of mcsa-bench (pluggy project name ``mcsa_bench``).

There is one hook per component kind. Each receives a ``register`` callback::

    register(name: str, factory: Callable[..., Component]) -> None

``factory`` is usually the component's class. Its keyword parameters with defaults become the
component's configuration (``kernel.step_size=0.1`` on the command line); parameters the
framework supplies itself are listed in ``mcsa_bench.plugins.INJECTED_PARAMETERS``.

A plugin module implements any subset of the hooks::

    from mcsa_bench import hookimpl

    @hookimpl
    def register_kernels(register):
        register("my_kernel", MyKernel)

Built-in components are registered through exactly these hooks (mcsa_bench/builtin/).
"""

import pluggy

hookspec = pluggy.HookspecMarker("mcsa_bench")
hookimpl = pluggy.HookimplMarker("mcsa_bench")


@hookspec
def register_models(register):
    """Register targets: factories returning :class:`mcsa_bench.api.Model`."""


@hookspec
def register_variational_families(register):
    """Register families: factories ``f(dim, **params)`` returning :class:`mcsa_bench.api.VariationalFamily`."""


@hookspec
def register_kernels(register):
    """Register Markov kernels: factories returning :class:`mcsa_bench.api.Kernel`."""


@hookspec
def register_estimators(register):
    """Register MCSA schemes: factories ``f(kernel, n_samples, **params)`` returning
    :class:`mcsa_bench.api.Estimator`."""


@hookspec
def register_optimizers(register):
    """Register optimizers: factories returning :class:`mcsa_bench.api.Optimizer`."""
