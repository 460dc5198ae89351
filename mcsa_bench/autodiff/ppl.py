"""Models from probabilistic programming languages, from a file: ``model=numpyro`` and ``model=pymc`` with
``model.source=path/to/file.py:function`` and ``model.data=path/to/data.json`` (docs/plugins.md, "Bring your
own model").

The function is a NumPyro model (or builds and returns a PyMC model); the data file's entries are its
keyword arguments: a JSON object as posteriordb stores its data (lists become arrays, integers stay
integers), an ``.npz`` archive, or a CSV file with a header (one array per column). The latents are the
language's unconstrained parameterization, its transforms' log-Jacobians included; each is named after its
site (vector sites element by element: ``theta[3]``) and says which transform it carries
(:meth:`PPLModel.latent_transforms`); :meth:`PPLModel.constrained` maps draws back to the sites.

A model is identified by its files' contents, not their paths (:meth:`PPLModel.identifying_params`: the
config hash, so ``resume`` and the report tell two models apart and recognize one moved elsewhere). Bad
input (a missing file or function, a function that is not a model, data keys the model does not take,
discrete latent sites, a log density that is not finite where q starts) is one ConfigurationError line.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import inspect
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from mcsa_bench.api import Array, ConfigurationError
from mcsa_bench.autodiff import AutodiffModel
from mcsa_bench.hookspecs import hookimpl

#: how much of a file's content identifies it (sha256, hex)
DIGEST_CHARS = 16


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:DIGEST_CHARS]


def _existing(path: str, what: str) -> Path:
    found = Path(os.path.expanduser(path))
    if not found.is_file():
        raise ConfigurationError(f"model.{what}={path}: no such file (from {Path.cwd()})")
    return found.resolve()


def split_source(source: str) -> tuple[Path, str]:
    """(file, function) of ``path.py:function``; the function is ``model`` when not named."""
    if not isinstance(source, str) or not source:
        raise ConfigurationError("model.source must name a Python file and a function: path/to/file.py:function")
    path, _, function = source.rpartition(":") if source.rpartition(":")[2].isidentifier() else (source, "", "model")
    return _existing(path or source, "source"), function


def load_function(source: str) -> tuple[Any, Path]:
    """The function ``source`` names, imported from its file (a module of its own, named by its content)."""
    path, name = split_source(source)
    module_name = f"mcsa_bench_user_model_{digest(path)}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"model.source={source}: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's file: its error, in one line
        raise ConfigurationError(f"model.source={source}: importing {path.name} failed: "
                                 f"{type(error).__name__}: {error}") from error
    function = getattr(module, name, None)
    if not callable(function):
        found = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module_name)
        raise ConfigurationError(f"model.source={source}: {path.name} has no function {name!r}; functions there: "
                                 f"{', '.join(found) or '(none)'}")
    return function, path


def _array(values: Any) -> Any:
    """A JSON value as a model argument: numbers as they are, lists as arrays (integers stay integers)."""
    if not isinstance(values, list):
        return values
    array = np.asarray(values)
    if array.dtype == object:
        raise ConfigurationError("model.data: a list whose rows differ in length cannot be an array")
    return array


def _column(values: list[str]) -> Array:
    numbers = np.asarray([float(v) for v in values])
    return numbers.astype(np.int64) if np.all(numbers == np.round(numbers)) else numbers


def load_data(data: str | None) -> tuple[dict[str, Any], Path | None]:
    """The keyword arguments of a data file (JSON, .npz or CSV with a header), and its path."""
    if data is None or data == "":
        return {}, None
    path = _existing(data, "data")
    try:
        if path.suffix == ".json":
            found = json.loads(path.read_text())
            if not isinstance(found, dict):
                raise ConfigurationError(f"model.data={data}: a JSON data file holds an object of named entries")
            return {key: _array(value) for key, value in found.items()}, path
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                return {key: archive[key] for key in archive.files}, path
        if path.suffix == ".csv":
            with open(path, newline="") as handle:
                rows = list(csv.reader(handle))
            header, body = rows[0], rows[1:]
            return {name: _column([row[i] for row in body]) for i, name in enumerate(header)}, path
    except (ValueError, OSError, IndexError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"model.data={data}: cannot read it: {type(error).__name__}: {error}") from error
    raise ConfigurationError(f"model.data={data}: unknown kind of file {path.suffix!r}; allowed: .json, .npz, .csv")


def check_arguments(function: Any, data: dict[str, Any], source: str) -> None:
    """Data keys the function does not take: one line naming them and the ones it takes."""
    parameters = inspect.signature(function).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(set(data) - set(parameters))
    if unknown:
        raise ConfigurationError(f"model.data has {', '.join(map(repr, unknown))}, which {source} does not take; "
                                 f"it takes: {', '.join(parameters) or '(nothing)'}")


def element_names(site: str, shape: tuple[int, ...]) -> list[str]:
    """``theta[3]``, ``beta[1,2]``: one name per element of a site of ``shape`` (row-major), ``tau`` for a scalar."""
    if not shape:
        return [site]
    return [f"{site}[{','.join(map(str, index))}]" for index in np.ndindex(*shape)]


class PPLModel(AutodiffModel):
    """A model of a probabilistic programming language, as the JAX log density of its unconstrained
    latents (subclasses: :class:`NumPyroModel`, :class:`PyMCModel`). Their ``_build(function, kwargs, source)``
    sets ``_dim``, ``_log_density`` (flat z -> log density), ``_names``, ``_transforms`` (one per latent) and
    ``_constrain`` (flat z -> {site: value}).

    A model is built once per process and files' contents (:data:`_BUILT`): a sweep's pre-flight and its jobs
    in one process build the same files again and again, and each build traces the model and compiles its
    density (2.7 s for posteriordb's low_dim_gauss_mix, most of it XLA's), so later builds take the first's
    functions, compiled programs included."""

    language = ""

    def __init__(self, source: str, data: str | None):
        key = (self.language, *file_identity(source, data).values())
        built = _BUILT.get(key)
        if built is None:
            function, _ = load_function(source)
            kwargs, _ = load_data(data)
            check_arguments(function, kwargs, f"{function.__name__}()")
            self._build(function, kwargs, source)
            super().__init__(self._dim)
            self._check_start(source)
            _BUILT[key] = dict(self.__dict__)
        else:
            self.__dict__.update(built)
        self.source, self.data = source, data

    def _build(self, function, kwargs: dict[str, Any], source: str) -> None:
        raise NotImplementedError

    def _check_start(self, source: str) -> None:
        at_start = self.log_joint_and_grad(np.zeros((1, self.dim)))
        if not (np.isfinite(at_start[0][0]) and np.all(np.isfinite(at_start[1]))):
            raise not_finite_at_start(f"model={self.language} model.source={source}",
                                      f"log density {at_start[0][0]:.4g}")

    def log_density(self, z):
        return self._log_density(z)

    def latent_names(self) -> list[str]:
        return list(self._names)

    def latent_transforms(self) -> list[str]:
        """The transform from the unconstrained coordinate to the site's support, per latent (``identity``,
        ``exp``, ...)."""
        return list(self._transforms)

    def constrained(self, z: Array) -> dict[str, Array]:
        """Draws z (n, D) of the unconstrained latents as the sites' values on their supports (n, *shape)."""
        import jax

        return {site: np.asarray(values) for site, values in jax.vmap(self._constrain)(np.asarray(z)).items()}

    @classmethod
    def identifying_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The parameters as they identify the model: the source file's and the data file's contents
        (sha256) instead of their paths, and the function's name."""
        return file_identity(params["source"], params.get("data"))


def file_identity(source: str, data: str | None) -> dict[str, Any]:
    """A model file's identity: its source file's and data file's contents (sha256) and the function's name."""
    path, function = split_source(source)
    return {"source_sha256": digest(path), "function": function,
            "data_sha256": None if data in (None, "") else digest(_existing(data, "data"))}


#: the state of every PPLModel built in this process, by language and files' contents (PPLModel's docstring)
_BUILT: dict[tuple, dict[str, Any]] = {}


def not_finite_at_start(origin: str, found: str) -> ConfigurationError:
    return ConfigurationError(f"{origin}: the log density or its gradient is not finite at z = 0, where q starts "
                              f"({found}); give the sites proper priors or supports that contain the transformed "
                              "origin")


class NumPyroModel(PPLModel):
    """A NumPyro model function from a file, with its data as keyword arguments (``model.source``,
    ``model.data``): its unconstrained log density, NumPyro's transforms and their log-Jacobians included."""

    language = "numpyro"

    def __init__(self, source: str, data: str | None = None):
        try:
            import numpyro  # noqa: F401
        except ImportError:
            raise ConfigurationError("model=numpyro needs NumPyro: pip install 'mcsa-bench[numpyro]'") from None
        super().__init__(source, data)

    def _build(self, function, kwargs: dict[str, Any], source: str) -> None:
        import jax
        import numpyro
        from numpyro.distributions import biject_to
        from numpyro.infer import init_to_uniform
        from numpyro.infer.util import initialize_model

        at_zero = init_to_uniform(radius=0.0)  # every latent at its unconstrained 0

        where = f"model.source={source}"
        try:
            # its sites at z = 0, where q starts (a prior draw is no value of an improper flat site's, and may be
            # one where the likelihood overflows: an ARMA model's |theta| > 1)
            at_origin = numpyro.handlers.substitute(numpyro.handlers.seed(function, 0), substitute_fn=at_zero)
            trace = numpyro.handlers.trace(at_origin).get_trace(**kwargs)
        except Exception as error:
            raise ConfigurationError(f"{where}: running it as a NumPyro model failed: "
                                     f"{type(error).__name__}: {error}") from error
        latent = {name: site for name, site in trace.items() if site["type"] == "sample" and not site["is_observed"]}
        if not latent:
            raise ConfigurationError(f"{where}: {function.__name__}() is not a NumPyro model with latent "
                                     "variables: it samples no unobserved site (numpyro.sample without obs=)")
        discrete = sorted(name for name, site in latent.items() if site["fn"].support.is_discrete)
        if discrete:
            raise ConfigurationError(f"{where}: MCSA needs a continuous latent space, and the sites "
                                     f"{', '.join(discrete)} are discrete: marginalize them out of the model")
        try:
            info = initialize_model(jax.random.PRNGKey(0), function, model_kwargs=kwargs, init_strategy=at_zero)
        except RuntimeError as error:  # NumPyro's "Cannot find valid initial parameters"
            raise not_finite_at_start(f"model=numpyro model.source={source}", str(error).split(".")[0]) from None
        sites = [name for name in latent if name in info.param_info.z]  # the model's own order
        shapes = {site: np.shape(info.param_info.z[site]) for site in sites}
        bounds = np.cumsum([0] + [math.prod(shapes[site]) for site in sites])
        potential, postprocess = info.potential_fn, info.postprocess_fn

        def unravel(z):
            return {site: z[start:end].reshape(shapes[site]) for site, start, end in zip(sites, bounds, bounds[1:])}

        self._dim = int(bounds[-1])
        self._log_density = lambda z: -potential(unravel(z))
        self._constrain = lambda z: postprocess(unravel(z))
        self._to_support = {site: biject_to(latent[site]["fn"].support) for site in sites}
        self._names = [name for site in sites for name in element_names(site, shapes[site])]
        self._transforms = [transform_name(biject_to(latent[site]["fn"].support))
                            for site in sites for _ in range(math.prod(shapes[site]))]


    def unconstrained(self, values: dict[str, Array]) -> Array:
        """The inverse of :meth:`constrained`: the latent sites' values on their supports, (n, *shape) each,
        as the unconstrained latents z (n, D)."""
        import jax

        def flat(point):
            return jax.numpy.concatenate([self._to_support[site].inv(point[site]).reshape(-1)
                                          for site in self._to_support])

        return np.asarray(jax.jit(jax.vmap(flat))({site: np.asarray(values[site]) for site in self._to_support}))


class PosteriordbModel(NumPyroModel):
    """One of posteriordb's posteriors shipped with the project (``model=posteriordb model.posterior=<name>``,
    mcsa_bench/references/posteriordb/): its NumPyro model file and data, and as its reference posteriordb's
    10 × 1,000 draws by Stan, carried to the model's unconstrained latents (docs/references.md, "Posteriors no
    one here wrote")."""

    language = "posteriordb"

    def __init__(self, posterior: str):
        self.posterior = _shipped(posterior)
        super().__init__(f"{self.posterior.model_file}:model", str(self.posterior.data_file))

    @classmethod
    def identifying_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        posterior = _shipped(params.get("posterior"))
        return {"posterior": posterior.name, "source_sha256": digest(posterior.model_file),
                "data_sha256": digest(posterior.data_file)}

    def reference(self):
        """posteriordb's draws as a reference posterior of the unconstrained latents (made once per process and
        files' contents: the jobs of a sweep share it)."""
        key = tuple(self.identifying_params({"posterior": self.posterior.name}).values())
        if key not in _POSTERIORDB_REFERENCES:
            _POSTERIORDB_REFERENCES[key] = self._published_reference()
        return _POSTERIORDB_REFERENCES[key]

    def _published_reference(self):
        from mcsa_bench.references.nuts import reference_of

        draws = self.posterior.draws()
        chains, n = next(iter(draws.values())).shape[:2]
        pooled = {site: values.reshape(chains * n, *values.shape[2:]) for site, values in draws.items()}
        from_published = self.posterior.latents_of_published()
        if from_published is not None:  # latents posteriordb does not publish, from the ones it does
            pooled = from_published(pooled, **self.posterior.data())
        z = self.unconstrained(pooled).reshape(chains, n, self.dim)
        source = {"method": "posteriordb's reference draws (Stan's NUTS, 10 chains, thinned by 10)",
                  "posterior": self.posterior.name, "chains": chains, "draws_per_chain": n, "divergences": 0}
        identity = self.identifying_params({"posterior": self.posterior.name})
        return reference_of(z, source, f"posteriordb--{self.posterior.name}", "posteriordb", identity,
                            self.latent_names(), self.log_joint)


#: the references PosteriordbModel made in this process, by the identity of the model's files
_POSTERIORDB_REFERENCES: dict[tuple, Any] = {}


def _shipped(name: Any):
    """The shipped posteriordb posterior of this name, or one line naming the shipped ones."""
    from mcsa_bench.references.external import published

    shipped = {posterior.name: posterior for posterior in published("posteriordb")}
    if name not in shipped:
        raise ConfigurationError(f"model.posterior={name}: not a shipped posteriordb posterior; shipped: "
                                 f"{', '.join(shipped)}")
    return shipped[name]


def transform_name(transform) -> str:
    """``identity``, ``exp``, ``sigmoid+affine``, ...: NumPyro's transform classes by name, composed in order."""
    while hasattr(transform, "base_transform"):  # an IndependentTransform (a site's to_event): its base's name
        transform = transform.base_transform
    parts = getattr(transform, "parts", [transform])
    return "+".join(type(part).__name__.removesuffix("Transform").lower() for part in parts)


class PyMCModel(PPLModel):
    """A PyMC model from a file: the function builds and returns a ``pymc.Model`` from the data's keyword
    arguments; its log density through PyMC's JAX conversion (``get_jaxified_logp(model, negative_logp=True)``,
    which, despite its name, returns +log p), PyMC's value transforms and their log-Jacobians included."""

    language = "pymc"

    def __init__(self, source: str, data: str | None = None):
        try:
            import pymc  # noqa: F401
        except ImportError:
            raise ConfigurationError("model=pymc needs PyMC: pip install 'mcsa-bench[pymc]'") from None
        super().__init__(source, data)

    def _build(self, function, kwargs: dict[str, Any], source: str) -> None:
        import pymc
        from pymc.sampling.jax import get_jaxified_graph, get_jaxified_logp

        where = f"model.source={source}"
        try:
            model = function(**kwargs)
        except Exception as error:
            raise ConfigurationError(f"{where}: building the PyMC model failed: {type(error).__name__}: {error}") \
                from error
        if not isinstance(model, pymc.Model):
            raise ConfigurationError(f"{where}: {function.__name__}() returned a {type(model).__name__}, not a "
                                     "pymc.Model: build one in a `with pm.Model() as model:` block and return it")
        if not model.free_RVs:
            raise ConfigurationError(f"{where}: the model has no free random variable to infer")
        discrete = sorted(value.name for value in model.discrete_value_vars)
        if discrete:
            raise ConfigurationError(f"{where}: MCSA needs a continuous latent space, and the variables "
                                     f"{', '.join(discrete)} are discrete: marginalize them out of the model")
        start = model.initial_point()
        values = model.value_vars
        shapes = [np.shape(start[value.name]) for value in values]
        bounds = np.cumsum([0] + [math.prod(shape) for shape in shapes])
        log_p = get_jaxified_logp(model, negative_logp=True)  # +log p (pymc/sampling/jax.py)
        outputs = model.unobserved_value_vars
        constrain = get_jaxified_graph(inputs=values, outputs=outputs)
        kept = [i for i, output in enumerate(outputs) if not output.name.endswith("__")]  # the sites, not their values

        def unravel(z):
            return [z[start:end].reshape(shape) for shape, start, end in zip(shapes, bounds, bounds[1:])]

        self._dim = int(bounds[-1])
        self._log_density = lambda z: log_p(unravel(z))
        self._constrain = lambda z: dict(zip([outputs[i].name for i in kept],
                                             [constrain(*unravel(z))[i] for i in kept]))
        names, transforms = [], []
        for variable, shape in zip(model.free_RVs, shapes):
            transform = model.rvs_to_transforms.get(variable)
            names += element_names(variable.name, shape)
            label = "identity" if transform is None else type(transform).__name__.removesuffix("Transform").lower()
            transforms += [label] * math.prod(shape)
        self._names, self._transforms = names, transforms


@hookimpl
def register_models(register):
    register("numpyro", NumPyroModel)  # written in JAX: its own twin
    register("pymc", PyMCModel)
    register("posteriordb", PosteriordbModel)
