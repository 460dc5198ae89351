"""The checkpoint file: plain data and arrays, nothing that runs code when read.

A checkpoint is a numpy ``.npz`` archive (read with ``allow_pickle=False``) holding one JSON
header, ``header``, and the arrays it refers to, ``a0``, ``a1``, ... The header is a tree of
JSON values in which anything JSON has no word for is a node ``{"type": ...}``:

==========  ==========================================================================
type        holds
==========  ==========================================================================
dict        ``items``: a dictionary with string keys
tuple       ``items``: a list (a named tuple is an ``object``)
array       ``key``: the archive member with a numpy array (never an object array)
scalar      ``dtype`` (a boolean, integer or floating numpy type) and ``value``
generator   a ``numpy.random.Generator``: its bit generator's name and ``state`` (plain data)
object      ``class`` (module and qualified name) and ``fields``: a component's own state
==========  ==========================================================================

An object is never made from its class name: reading restores the fields into an object of the
same class that the caller already has (the freshly built estimator and kernel, the optimizer's
``init`` state), so reading can set attributes but import and call nothing. A component's own
state is its attributes (dataclass fields, a named tuple's fields, else ``vars``), each a value
of the table; functions, methods, classes and modules among them are its configuration, made
again by its factory, and are not stored (docs/plugins.md, "Checkpoints").
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import tempfile
import types
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mcsa_bench.api import ConfigurationError

FORMAT = "mcsa-bench checkpoint"
VERSION = 1
#: the bit generators a checkpoint may name (numpy's own)
BIT_GENERATORS = {cls.__name__: cls for cls in (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937,
                                                np.random.Philox, np.random.SFC64)}
#: numpy scalar kinds a checkpoint may hold: boolean, signed and unsigned integer, floating
SCALAR_KINDS = "biuf"
#: what is configuration, not state: made again by the component's factory
CONFIGURATION = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type, types.ModuleType)


class CheckpointError(ConfigurationError):
    """A checkpoint that cannot be written or read as plain data."""


def class_name(value: object) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def state_fields(value: object, where: str) -> dict[str, Any]:
    """A component's own state: its attributes, its configuration (functions, classes) left out."""
    if hasattr(value, "_asdict"):  # a named tuple
        return value._asdict()
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if not hasattr(value, "__dict__"):
        raise CheckpointError(f"{where} is a {class_name(value)}, which has no attributes a checkpoint can hold")
    return {name: field for name, field in vars(value).items() if not isinstance(field, CONFIGURATION)}


class Encoder:
    """Plain data -> (JSON tree, arrays)."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def encode(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise CheckpointError(f"{where} is an array of Python objects, which a checkpoint cannot hold")
            key = f"a{len(self.arrays)}"
            self.arrays[key] = value
            return {"type": "array", "key": key}
        if isinstance(value, np.generic) and value.dtype.kind in SCALAR_KINDS:
            return {"type": "scalar", "dtype": value.dtype.str, "value": value.item()}
        if isinstance(value, np.random.Generator):
            bit_generator = value.bit_generator
            return {"type": "generator", "bit_generator": type(bit_generator).__name__,
                    "state": self.encode(bit_generator.state, f"{where}.bit_generator")}
        if isinstance(value, list):
            return [self.encode(item, f"{where}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, dict):
            if not all(isinstance(key, str) for key in value):
                raise CheckpointError(f"{where} is a dictionary with keys that are not strings")
            return {"type": "dict", "items": {k: self.encode(v, f"{where}[{k!r}]") for k, v in value.items()}}
        if isinstance(value, tuple) and not hasattr(value, "_asdict"):
            return {"type": "tuple", "items": [self.encode(item, f"{where}[{i}]") for i, item in enumerate(value)]}
        if isinstance(value, CONFIGURATION):
            raise CheckpointError(f"{where} is a {type(value).__name__}, which a checkpoint cannot hold")
        return {"type": "object", "class": class_name(value),
                "fields": {name: self.encode(field, f"{where}.{name}")
                           for name, field in state_fields(value, where).items()}}


class Decoder:
    """(JSON tree, arrays) -> plain data, objects restored into the caller's objects of their class.
    Where the caller's object holds an array (``into``: what the run expects there), the checkpoint's must
    be an array of the same shape and dtype (:func:`check_array`), or None (a momentum optimizer's second
    moment after its first step, say)."""

    def __init__(self, arrays: Callable[[str], np.ndarray], path: Path | str = "checkpoint"):
        self.arrays, self.path = arrays, path

    def decode(self, node: Any, into: Any = None, where: str = "checkpoint") -> Any:
        """The value of ``node``; an ``object`` node restores its fields into ``into`` (in place,
        or a new named tuple) and needs ``into`` to be of its class."""
        if isinstance(into, np.ndarray) and node is not None:  # None: absent, as a component may hold it
            found = self.arrays(str(node["key"])) if isinstance(node, dict) and node.get("type") == "array" else node
            check_array(self.path, where, found, into.shape, into.dtype)
            return found
        if not isinstance(node, (dict, list)):
            return node
        if isinstance(node, list):
            return [self.decode(item, _item(into, i), f"{where}[{i}]") for i, item in enumerate(node)]
        kind = node.get("type")
        if kind == "dict":
            return {k: self.decode(v, _item(into, k), f"{where}[{k!r}]") for k, v in _dict(node, "items").items()}
        if kind == "tuple":
            return tuple(self.decode(v, _item(into, i), f"{where}[{i}]") for i, v in enumerate(node["items"]))
        if kind == "array":
            return self.arrays(str(node["key"]))
        if kind == "scalar":
            dtype = np.dtype(str(node["dtype"]))
            if dtype.kind not in SCALAR_KINDS:
                raise CheckpointError(f"{where}: a scalar of type {dtype} is not plain data")
            return dtype.type(node["value"])
        if kind == "generator":
            name = str(node["bit_generator"])
            if name not in BIT_GENERATORS:
                raise CheckpointError(f"{where}: unknown bit generator {name!r}; allowed: {', '.join(BIT_GENERATORS)}")
            bit_generator = BIT_GENERATORS[name]()
            bit_generator.state = self.decode(node["state"], where=f"{where}.bit_generator")
            return np.random.Generator(bit_generator)
        if kind == "object":
            return self.restore(into, node, where)
        raise CheckpointError(f"{where}: unknown node type {kind!r}")

    def restore(self, into: Any, node: dict, where: str) -> Any:
        if into is None or class_name(into) != node.get("class"):
            have = "nothing" if into is None else f"a {class_name(into)}"
            raise CheckpointError(f"{where} holds the state of a {node.get('class')}, but the run has {have} there")
        current = state_fields(into, where)
        fields = {name: self.decode(value, current.get(name), f"{where}.{name}")
                  for name, value in _dict(node, "fields").items()}
        if hasattr(into, "_asdict"):
            return into._replace(**fields)
        for name, value in fields.items():
            object.__setattr__(into, name, value)  # frozen dataclasses too
        return into


def check_array(path: Path | str, where: str, found: Any, shape: tuple, dtype) -> None:
    """A checkpoint's array ``where`` is what the run expects there: an array of ``shape`` and ``dtype``; else
    one line naming the file and the array (a wrong-shaped array failed deep inside the run before)."""
    if isinstance(found, np.ndarray) and found.shape == tuple(shape) and found.dtype == np.dtype(dtype):
        return
    what = (f"an array of shape {found.shape}, dtype {found.dtype}" if isinstance(found, np.ndarray)
            else f"a {type(found).__name__}, not an array")
    raise CheckpointError(f"the checkpoint {path}: {where} is {what}, where the run expects shape {tuple(shape)}, "
                          f"dtype {np.dtype(dtype)}; delete it to start the run afresh")


def _dict(node: dict, key: str) -> dict:
    value = node.get(key)
    if not isinstance(value, dict):
        raise CheckpointError(f"a checkpoint node's {key!r} is not a dictionary")
    return value


def _item(container: Any, key: Any) -> Any:
    """``container[key]`` if there is one (the caller's object to restore into), else None."""
    try:
        return container[key]
    except (TypeError, KeyError, IndexError):
        return None


def write(handle: io.BufferedIOBase, state: dict[str, Any]) -> None:
    """``state`` (names -> plain data, objects and arrays) as a checkpoint into ``handle``."""
    encoder = Encoder()
    nodes = {name: encoder.encode(value, name) for name, value in state.items()}
    text = json.dumps({"format": FORMAT, "version": VERSION, "state": nodes})
    np.savez(handle, header=np.array(text), **encoder.arrays)


def temporary_prefix(path: Path) -> str:
    """The name prefix of a write's temporary file beside ``path``."""
    return f".{path.name}."


def save(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` as a checkpoint atomically: a temporary file in the same directory, synced,
    then os.replace; a failed write removes its temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=temporary_prefix(path), delete=False) as handle:
        try:
            write(handle, state)
            handle.flush()
            os.fsync(handle.fileno())
        except BaseException:
            os.unlink(handle.name)  # before closing, whose flush fails too on a full disk
            raise
    os.replace(handle.name, path)


def remove(path: Path) -> None:
    """Delete a checkpoint and the temporary files of writes a kill interrupted."""
    path.unlink(missing_ok=True)
    for orphan in path.parent.glob(temporary_prefix(path) + "*"):
        orphan.unlink(missing_ok=True)


def read(path: Path) -> tuple[dict[str, Any], Decoder]:
    """The header's state (names -> nodes) of the checkpoint at ``path`` and the decoder of its nodes.

    A file that is not a zip archive (a pickle of the earlier format among them) is refused before
    anything else reads it."""
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic[:1] == b"\x80":
        raise CheckpointError(
            f"{path} is a checkpoint of the earlier pickle format, which can run code when read, so it is not "
            f"read; delete it to start the run afresh, or, if you wrote it yourself, convert it with "
            f"`python -m mcsa_bench.tools.convert_checkpoint {path}` and resume")
    if magic != b"PK\x03\x04":
        raise CheckpointError(f"cannot read the checkpoint {path}: not an mcsa-bench checkpoint (no zip archive)")
    try:
        archive = np.load(path, allow_pickle=False)
        header = json.loads(str(archive["header"][()]))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"cannot read the checkpoint {path}: {type(error).__name__}: {error}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("version") != VERSION:
        raise CheckpointError(f"{path} is not an mcsa-bench checkpoint of version {VERSION}")
    return header.get("state"), Decoder(lambda key: _member(archive, key, path), path)


def _member(archive: Any, key: str, path: Path) -> np.ndarray:
    try:
        return archive[key]
    except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:  # a bad CRC too
        raise CheckpointError(f"cannot read the checkpoint {path}: its array {key}: {type(error).__name__}: "
                              f"{error}") from None
