"""Compiled programs shared by the configurations of one structure, within a process and across them
(docs/architecture.md, "The accelerated backend").

A program is keyed by its traced form: the jaxpr (every shape, dtype, loop length, static setting and
literal the code used), the bytes of the arrays it closes over, its argument and result trees. A
component's numeric hyperparameters, its ``traced`` attributes (an optimizer's learning rate,
HMC's step size), are the programs' arguments instead of constants, so configurations that differ
only in them trace to the same jaxpr and share one executable; anything else that differs (N, T,
the family, a model's code or closed-over data) changes the jaxpr and compiles again. The key
cannot share a program that would compute something else. A hit costs the trace, not the compile.

On import of mcsa_bench.accel, JAX's persistent compilation cache is pointed at
``$XDG_CACHE_HOME/mcsa-bench/jax`` (``~/.cache``), so a re-run or a resumed sweep reads what an
earlier process compiled (JAX caches programs that took at least
``jax_persistent_cache_min_compile_time_secs`` to compile, 1 s by default).
``MCSA_BENCH_JAX_CACHE=<dir>`` puts it elsewhere, ``MCSA_BENCH_JAX_CACHE=off`` turns it off; a
directory set through JAX's own ``JAX_COMPILATION_CACHE_DIR`` is left as it is.
"""

from __future__ import annotations

import copy
import hashlib
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

#: executables kept per process, the least recently used dropped first (a sweep's structures)
CAPACITY = 64
CACHE_ENV = "MCSA_BENCH_JAX_CACHE"


def hyperparameters(component, dtype) -> dict[str, np.ndarray]:
    """The component's ``traced`` attributes that are set, as arrays of ``dtype``: what its programs
    take as arguments (a component without ``traced``, e.g. a plugin's twin, has none)."""
    names = getattr(component, "traced", ())
    return {name: np.asarray(getattr(component, name), dtype) for name in names
            if getattr(component, name) is not None}


def with_hyperparameters(component, values: dict):
    """A shallow copy of ``component`` whose traced attributes are ``values`` (tracers in a program)."""
    if not values:
        return component
    bound = copy.copy(component)
    for name, value in values.items():
        setattr(bound, name, value)
    return bound


def program_key(traced) -> str:
    """The structure of a traced program (``jax.jit(f).trace(...)``): its jaxpr with the closed-over
    arrays' bytes, and its argument and result trees."""
    digest = hashlib.sha256()
    for part in (str(traced.jaxpr), str(traced.in_tree), str(traced.out_tree), str(traced.donate_argnums)):
        digest.update(part.encode())
    for const in traced.jaxpr.consts:
        array = np.asarray(const)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _trace(function, args: tuple, donate_argnums: tuple[int, ...]):
    return jax.jit(function, donate_argnums=donate_argnums).trace(*args)


@dataclass
class Counts:
    """What the cache did in this process: programs compiled, programs found, and their seconds."""

    compiles: int = 0
    hits: int = 0
    compile_seconds: float = 0.0
    hit_seconds: float = 0.0


class ProgramCache:
    """Compiled programs by :func:`program_key`, at most ``capacity`` of them."""

    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self.counts = Counts()
        self._programs: OrderedDict[str, jax.stages.Compiled] = OrderedDict()

    def compiled(self, function, args: tuple, donate_argnums: tuple[int, ...] = ()) -> jax.stages.Compiled:
        """``function`` compiled for arguments shaped as ``args``: an executable of the same structure
        compiled earlier, or a new one."""
        clock = time.perf_counter()
        traced = _trace(function, args, donate_argnums)
        key = program_key(traced)
        found = self._programs.get(key)
        if found is not None:
            self._programs.move_to_end(key)
            self.counts.hits += 1
            self.counts.hit_seconds += time.perf_counter() - clock
            return found
        found = self._programs[key] = traced.lower().compile()
        if len(self._programs) > self.capacity:
            self._programs.popitem(last=False)
        self.counts.compiles += 1
        self.counts.compile_seconds += time.perf_counter() - clock
        return found

    @staticmethod
    def key(function, args: tuple, donate_argnums: tuple[int, ...] = ()) -> str:
        """The key ``compiled`` files ``function`` under, for arguments shaped as ``args`` (traced only)."""
        return program_key(_trace(function, args, donate_argnums))

    def clear(self) -> None:
        self._programs.clear()


#: the process's programs (accel/engine.py compiles through it)
PROGRAMS = ProgramCache()


def persistent_cache_dir() -> Path | None:
    """Where JAX's persistent compilation cache goes (see the module's docstring); None: off."""
    setting = os.environ.get(CACHE_ENV, "")
    if setting.lower() == "off":
        return None
    if setting:
        return Path(setting)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcsa-bench" / "jax"


def use_persistent_cache() -> None:
    """Point JAX's persistent compilation cache at :func:`persistent_cache_dir` unless JAX has one set."""
    where = persistent_cache_dir()
    if where is not None and not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", str(where))
