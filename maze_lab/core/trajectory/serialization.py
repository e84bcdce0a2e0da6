"""JSON-safe encoding of recorded values, and the class allow-list that decides what is rebuilt on load.

Values are encoded into plain JSON types; anything JSON has no type for is a dict tagged with ``"__t__"``:
numpy arrays (small ones inline, large ones as ``.npy`` members of the episode file), tuples, numpy scalars,
and objects. Objects with ``to_dict()``/``from_dict()`` (MazeStates, MazeActions), dataclasses and enums are
stored with their class's dotted path. Decoding never runs code named by a file unless the class is on the
allow-list: a class outside it (or one that cannot be found) loads as its plain data, with a warning.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import math
import re
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

TAG = "__t__"
INLINE_ARRAY_SIZE = 256
"""Arrays up to this many elements are written inline as JSON lists; larger ones go to ``.npy`` members."""

DEFAULT_ALLOWED = ("maze_lab.",)
"""Module prefixes whose classes are rebuilt by default: maze-lab's own (including its examples)."""


MAX_INLINE_ARRAY_BYTES = 512 << 20
"""The largest array a JSON value may describe inline (checked before it is allocated)."""


class NotATrajectoryFileError(ValueError):
    """A file is not a maze-lab trajectory file, is damaged, or describes a value that cannot be read safely."""


def checked_array_dtype(text: Any, where: str) -> np.dtype:
    """The numpy dtype named by ``text`` if it is a plain numeric (or bool) dtype of at most 16 bytes."""
    try:
        dtype = np.dtype(text) if isinstance(text, str) else None
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in "biufc" or dtype.hasobject or dtype.fields is not None or (
            dtype.itemsize > 16):
        raise NotATrajectoryFileError(f"{where}: dtype {text!r} is not a plain numeric dtype (expected e.g. "
                                      f"'<f4', '<i8', '|b1')")
    return dtype


def checked_shape(shape: Any, where: str) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints (it must be a list/tuple of them)."""
    if not isinstance(shape, list | tuple) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                       for d in shape):
        raise NotATrajectoryFileError(f"{where}: shape {shape!r} is not a list of non-negative integers")
    return tuple(shape)



class UntrustedClassWarning(UserWarning):
    """A recorded object's class is not on the allow-list (or cannot be imported): it loads as plain data."""


def class_path(cls: type) -> str:
    """The dotted path ``module.QualName`` of a class."""
    return f"{cls.__module__}.{cls.__qualname__}"


class ClassAllowList:
    """The classes that may be imported and rebuilt when a trajectory is loaded.

    :param allowed: classes, exact dotted class paths, or module prefixes ending in ``.`` (``"my_project."``).
    :param include_defaults: also allow everything under ``maze_lab.``.
    """

    def __init__(self, allowed: Iterable[str | type] = (), include_defaults: bool = True):
        self.prefixes: list[str] = list(DEFAULT_ALLOWED) if include_defaults else []
        self.paths: set[str] = set()
        for item in allowed:
            if isinstance(item, type):
                self.paths.add(class_path(item))
            elif isinstance(item, str) and item.endswith("."):
                self.prefixes.append(item)
            elif isinstance(item, str) and item:
                self.paths.add(item)
            else:
                raise TypeError(f"allowed classes are classes, dotted class paths or module prefixes ending in '.', "
                                f"got {item!r}")

    @classmethod
    def of(cls, allowed: ClassAllowList | Iterable[str | type] | None) -> ClassAllowList:
        """An allow-list from an allow-list, an iterable of classes/paths/prefixes, or None (the defaults)."""
        if isinstance(allowed, ClassAllowList):
            return allowed
        return cls(allowed or ())

    def allows(self, path: str) -> bool:
        """Whether the class with this dotted path may be imported and rebuilt."""
        return path in self.paths or any(path.startswith(p) for p in self.prefixes)

    def resolve(self, path: str, base: type | None = None) -> type | None:
        """The allowed class at ``path`` (None where it is not allowed or not found; the caller warns).

        The class must live where the path says (re-exports of other modules' classes are refused), so that
        an allowed module prefix cannot be used to reach code outside it.
        """
        if not isinstance(path, str) or not self.allows(path) or "<" in path:
            return None
        parts = path.split(".")
        obj: Any = None
        for cut in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr, None)
                if obj is None:
                    return None
            break
        if not isinstance(obj, type) or class_path(obj) != path:
            return None
        if base is not None and not issubclass(obj, base):
            return None
        return obj

    def __repr__(self) -> str:
        return f"ClassAllowList(prefixes={self.prefixes}, classes={sorted(self.paths)})"


# --- encoding -------------------------------------------------------------------------------------------------
ArraySink = Callable[[np.ndarray], str]
"""Stores a large array and returns the name it is stored under."""


class Encoder:
    """Encodes values into JSON-safe form and remembers the classes of the objects it encoded.

    :param sink: stores arrays too large to inline (None: every array is inlined).
    """

    def __init__(self, sink: ArraySink | None = None):
        self.sink = sink
        self.classes: set[str] = set()
        """Dotted paths of every object class encoded (trusted when the record is rebuilt in this process)."""

    def encode(self, value: Any) -> Any:
        """A JSON-safe form of ``value`` (see the module docstring)."""
        if value is None or isinstance(value, bool | int | float | str):
            return value
        enc = self.encode
        if isinstance(value, np.ndarray):
            return self._array(value)
        if isinstance(value, np.generic):
            if value.dtype.kind in "biuf":
                return {TAG: "scalar", "dtype": value.dtype.str, "value": value.item()}
            return enc(value.item())
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value) and TAG not in value:
                return {k: enc(v) for k, v in value.items()}
            return {TAG: "dict", "items": [[enc(k), enc(v)] for k, v in value.items()]}
        if isinstance(value, list):
            return [enc(v) for v in value]
        if isinstance(value, tuple):  # named tuples (ActorID, ...) keep their values, not their class
            return {TAG: "tuple", "items": [enc(v) for v in value]}
        if isinstance(value, set | frozenset):
            return {TAG: "tuple", "items": [enc(v) for v in sorted(value, key=repr)]}
        cls = type(value)
        path = class_path(cls)
        if isinstance(value, enum.Enum):
            self.classes.add(path)
            return {TAG: "enum", "class": path, "name": value.name, "value": enc(value.value)}
        to_dict = getattr(value, "to_dict", None)
        if callable(to_dict) and callable(getattr(cls, "from_dict", None)):
            self.classes.add(path)
            return {TAG: "object", "class": path, "data": enc(to_dict())}
        if dataclasses.is_dataclass(value):
            self.classes.add(path)
            fields = {f.name: enc(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
            return {TAG: "dataclass", "class": path, "data": fields}
        if hasattr(value, "tolist") and hasattr(value, "dtype"):  # torch tensors and other array-likes
            return self._array(np.asarray(value))
        return {TAG: "repr", "class": path, "repr": repr(value)[:2000]}

    def _array(self, arr: np.ndarray) -> Any:
        if arr.dtype.kind not in "biufc":
            if arr.dtype.kind == "U":
                return {TAG: "ndarray_str", "shape": list(arr.shape), "data": arr.ravel().tolist()}
            return {TAG: "list", "items": [self.encode(v) for v in arr.tolist()]}  # object arrays: their items
        if arr.size > INLINE_ARRAY_SIZE and self.sink is not None:
            return {TAG: "npy", "member": self.sink(np.ascontiguousarray(arr))}
        if arr.dtype.kind == "c":
            return {TAG: "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape),
                    "data": [[float(v.real), float(v.imag)] for v in arr.ravel()]}
        return {TAG: "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape), "data": arr.ravel().tolist()}


def encode(value: Any, sink: ArraySink | None = None) -> Any:
    """A JSON-safe form of ``value``; ``sink`` takes arrays too large to inline."""
    return Encoder(sink).encode(value)


# --- decoding -------------------------------------------------------------------------------------------------
class Decoder:
    """Turns encoded values back into Python values; classes are rebuilt only where the allow-list says so.

    :param allowed: the allow-list.
    :param arrays: loads an ``.npy`` member by name (for large arrays).
    :param source: where the data comes from, for warnings.
    :param warn: warn once per class that is not rebuilt (False: only :attr:`refused` records it, for callers that
        report for many files at once).
    """

    def __init__(self, allowed: ClassAllowList, arrays: Callable[[str], np.ndarray] | None = None,
                 source: str = "trajectory", warn: bool = True):
        self.allowed = allowed
        self.arrays = arrays
        self.source = source
        self.warn = warn
        self.refused: dict[str, str] = {}
        """Dotted path -> reason, for every class that was not rebuilt."""

    def decode(self, value: Any) -> Any:
        """The Python value of an encoded value."""
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        tag = value.get(TAG)
        if tag is None:
            return {k: self.decode(v) for k, v in value.items()}
        if tag == "ndarray":
            dtype, shape, data = self._checked_inline(value, strings=False)
            if dtype.kind == "c":
                flat = np.array([complex(*_pair(v, self.source)) for v in data], dtype=dtype)
            else:
                flat = np.array(data, dtype=dtype)
            return flat.reshape(shape)
        if tag == "ndarray_str":
            _, shape, data = self._checked_inline(value, strings=True)
            return np.array(data, dtype=str).reshape(shape)
        if tag == "npy":
            if self.arrays is None:
                raise ValueError(f"{self.source}: array member {value['member']!r} referenced but no archive is open")
            return self.arrays(value["member"])
        if tag == "scalar":
            return checked_array_dtype(value.get("dtype"), self.source).type(value["value"])
        if tag == "tuple":
            return tuple(self.decode(v) for v in value["items"])
        if tag == "list":
            return [self.decode(v) for v in value["items"]]
        if tag == "dict":
            return {_hashable(self.decode(k)): self.decode(v) for k, v in value["items"]}
        if tag == "object":
            return self._rebuild(value, lambda cls, data: cls.from_dict(data), "from_dict")
        if tag == "dataclass":
            return self._rebuild(value, lambda cls, data: cls(**data), None)
        if tag == "enum":
            cls = self._allowed_class(value["class"], enum.Enum)
            if cls is None:
                return value["name"]
            return cls[value["name"]]
        if tag == "repr":
            return value["repr"]
        return {k: self.decode(v) for k, v in value.items()}

    def _checked_inline(self, value: dict, strings: bool) -> tuple[np.dtype, tuple[int, ...], list]:
        """dtype, shape and data of an inline array, checked before anything is allocated."""
        dtype = np.dtype("<U1") if strings else checked_array_dtype(value.get("dtype"), self.source)
        shape = checked_shape(value.get("shape"), self.source)
        data = value.get("data")
        if not isinstance(data, list) or len(data) != math.prod(shape):
            got = len(data) if isinstance(data, list) else repr(data)[:80]
            raise NotATrajectoryFileError(f"{self.source}: an inline array of shape {list(shape)} needs "
                                          f"{math.prod(shape)} values, got {got}")
        if strings:
            if not all(isinstance(v, str) for v in data):
                raise NotATrajectoryFileError(f"{self.source}: an inline string array holds non-strings")
            nbytes = 4 * len(data) * max((len(v) for v in data), default=0)
        else:
            nbytes = len(data) * dtype.itemsize
        if nbytes > MAX_INLINE_ARRAY_BYTES:
            raise NotATrajectoryFileError(f"{self.source}: an inline array would take {nbytes:,} bytes, more than "
                                          f"the limit of {MAX_INLINE_ARRAY_BYTES:,}")
        return dtype, shape, data

    def _rebuild(self, value: dict, build: Callable[[type, Any], Any], method: str | None) -> Any:
        data = self.decode(value["data"])
        path = value.get("class", "?")
        cls = self._allowed_class(path, None)
        if cls is None:
            return data
        if method is not None and not callable(getattr(cls, method, None)):
            self._refuse(path, f"it has no {method}()")
            return data
        if method is None and not dataclasses.is_dataclass(cls):
            self._refuse(path, "it is not a dataclass")
            return data
        try:
            return build(cls, data)
        except Exception as err:  # noqa: BLE001 - a changed class must not make the whole file unreadable
            self._refuse(path, f"rebuilding it failed: {type(err).__name__}: {err}")
            return data

    def _allowed_class(self, path: str, base: type | None) -> type | None:
        if not self.allowed.allows(path):
            self._refuse(path, "it is not on the allow-list")
            return None
        cls = self.allowed.resolve(path, base)
        if cls is None:
            self._refuse(path, "it cannot be imported from that path")
        return cls

    def _refuse(self, path: str, reason: str) -> None:
        if path in self.refused:
            return
        self.refused[path] = reason
        if not self.warn:
            return
        if _could_be_a_class(path):
            advice = (f"If you trust where the file comes from, pass allowed_classes=['{path}'] (or the class "
                      f"itself).")
        else:
            advice = "It does not name a class, so it cannot be allowed: the file may have been tampered with."
        warnings.warn(f"{self.source}: '{path}' is not rebuilt because {reason}; its data loads as a plain dict. "
                      f"{advice}", UntrustedClassWarning, stacklevel=4)


_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def _could_be_a_class(path: str) -> bool:
    """Whether a dotted path may name a class, decided without importing anything the file names.

    Where the module is already imported, the attribute itself is looked at; otherwise the last part must be
    written as classes are (CapWords): ``os.system`` or ``builtins.eval`` never qualify.
    """
    if not isinstance(path, str) or not _DOTTED.match(path):
        return False
    module, _, name = path.rpartition(".")
    loaded = sys.modules.get(module)
    if loaded is not None:
        return isinstance(getattr(loaded, name, None), type)
    return name[:1].isupper()


def _pair(value: Any, source: str) -> tuple[float, float]:
    if not isinstance(value, list) or len(value) != 2:
        raise NotATrajectoryFileError(f"{source}: a complex value must be [real, imag], got {value!r}")
    return float(value[0]), float(value[1])


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, np.ndarray):
        return tuple(key.tolist())
    return key
