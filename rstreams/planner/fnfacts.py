"""The facts of a step's function that a topology's identity records: what it computes
(:func:`fingerprint`: its code, constants, closed-over values and defaults, not where it
stands in its file) and what it reads besides its code (:func:`global_reads`: module
globals, closed-over values, defaults, a bound method's object, each hashed by value).
:mod:`rstreams.planner.identity` keeps them per step function."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import fractions
import functools
import hashlib
import json
import logging
import operator
import os
import pathlib
import re
import site
import sys
import sysconfig
import types
import uuid
from typing import Any

import attrs

__all__ = [
    "CLOSURE",
    "DEFAULT",
    "OBJECT",
    "OPAQUE",
    "PARTIAL",
    "READS_FORMAT",
    "SELF",
    "fingerprint",
    "global_reads",
]


def fingerprint(fn: Any) -> str:
    """A short hash of what ``fn`` computes: its code, constants, names, defaults and
    closed-over values, but not its file, line or local names, so a function that only
    moved in its file keeps its fingerprint.

    >>> fingerprint(lambda w: w) == fingerprint(lambda x: x)
    True
    >>> fingerprint(lambda w: w) == fingerprint(lambda w: w.lower())
    False
    """
    return hashlib.sha256(json.dumps(_fn_key(fn)).encode()).hexdigest()[:16]


def _fn_key(fn: Any, seen: frozenset[int] = frozenset()) -> Any:
    fn = getattr(fn, "__func__", fn)  # a bound method: its function
    if id(fn) in seen:  # a function that calls itself through its closure
        return "<recursive>"
    seen = seen | {id(fn)}
    if isinstance(fn, functools.partial):
        return ["partial", _fn_key(fn.func, seen), [_value_key(a, seen) for a in fn.args]]
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        text = repr(fn)  # built-ins (str.split, F.lower()) have a stable repr
        return text if " at 0x" not in text else f"{type(fn).__module__}.{type(fn).__qualname__}"
    cells = [_value_key(c.cell_contents, seen) for c in fn.__closure__ or ()]
    defaults = [_value_key(v, seen) for v in getattr(fn, "__defaults__", None) or ()]
    return [_code_key(code, seen), cells, defaults]


def _code_key(code: types.CodeType, seen: frozenset[int]) -> Any:
    consts = [
        _code_key(c, seen) if isinstance(c, types.CodeType) else _value_key(c, seen)
        for c in code.co_consts
    ]
    return [code.co_code.hex(), list(code.co_names), consts]


def _value_key(value: Any, seen: frozenset[int]) -> Any:
    if isinstance(value, (frozenset, set)):  # (iteration order varies between processes)
        return sorted(repr(v) for v in value)
    if callable(value) and not isinstance(value, type):
        return _fn_key(value, seen)
    if isinstance(value, (tuple, list, dict)) and _holds_set(value):
        # A set inside: its repr's order varies between processes (PYTHONHASHSEED).
        encoded = _Encoder().encode(value, "")
        return ["sorted", encoded] if not isinstance(encoded, _Opaque) else repr(value)
    text = repr(value)
    return text if " at 0x" not in text else type(value).__qualname__


def _holds_set(value: Any, depth: int = 0) -> bool:
    if isinstance(value, (set, frozenset)):
        return True
    if depth > 50:
        return False
    if isinstance(value, dict):
        return any(_holds_set(v, depth + 1) for kv in value.items() for v in kv)
    if isinstance(value, (tuple, list)):
        return any(_holds_set(v, depth + 1) for v in value)
    return False


# -- what a function reads ------------------------------------------------------------------

#: How :func:`global_reads` marks a value that can not be compared, e.g.
#: ``"opaque ConfigParser"``.
OPAQUE = "opaque"

#: Version of the ``reads`` of a step function (kept beside them as ``reads_format``);
#: reads of another version (or none: an identity recorded by an earlier rstreams) are
#: not compared (see :func:`rstreams.planner.diff.diff`).
READS_FORMAT = 2

#: What a key of :func:`global_reads` ends with when the value is not a global.
CLOSURE, DEFAULT = " (closure)", " (default)"
#: The key of what a bound method is bound to.
SELF = "__self__"
#: The key of a callable object itself (its class and attributes).
OBJECT = "(object)"
#: The key of a ``functools.partial``'s arguments.
PARTIAL = "(partial arguments)"

#: Types compared by their repr: complete and stable for these.
_BY_REPR: frozenset[type] = frozenset(
    {type(None), bool, int, float, complex, str, bytes, bytearray, type(Ellipsis), range,
     slice}
)  # fmt: skip
#: Standard library value types (and their subclasses) compared by their repr.
_VALUES_BY_REPR: tuple[type, ...] = (
    datetime.date, datetime.time, datetime.timedelta, datetime.tzinfo, decimal.Decimal,
    fractions.Fraction, uuid.UUID, pathlib.PurePath,
)  # fmt: skip
#: Callable objects of the standard library whose repr is all there is to them.
_CALLABLE_BY_REPR = (operator.itemgetter, operator.attrgetter, operator.methodcaller)
#: Class attributes that say nothing about what its methods compute.
_CLASS_NOISE = frozenset(
    {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
     "__slots__", "__firstlineno__", "__static_attributes__", "__orig_bases__",
     "__parameters__", "__abstractmethods__", "__match_args__", "__attrs_attrs__",
     "__dataclass_fields__", "__dataclass_params__", "__hash__"}
)  # fmt: skip
#: Deeper than this, a value counts as opaque (and recursion stays far from Python's limit).
_MAX_DEPTH = 60


def global_reads(fn: Any) -> dict[str, str]:
    """What ``fn`` reads besides its own code, each with a short hash of its value: the
    module globals its code (and the code nested in it) names, its closed-over values
    (``name (closure)``), its defaults (``name (default)``), what a bound method is bound
    to (``__self__``), a callable object itself (``(object)``) and a
    ``functools.partial``'s arguments (``(partial arguments)``). What a lambda computes
    depends on them: ``WORD.findall(line)`` with another ``WORD`` is another tokenizer.

    Values compare by what they are, the same in every process (no ``id()``, no ``hash()``
    of a ``str``, no address): numbers, strings, bytes, dates by their repr; containers
    by their items (a set's and a dict's sorted, whatever their order); a compiled regex
    by its pattern and flags; an enum member by its class and name; a module by its name
    (one of the pipeline's own also by the values its code uses from it, ``settings.SEP``);
    a function by its code, closed-over values, defaults and the globals it reads in turn
    (a function or class of the standard library or an installed package by its qualified
    name); a class of the user's by its methods and attributes; an instance of one, an
    attrs class or a dataclass by its class and attributes.

    Anything else (an object of a library or C type: a lock, a connection, an array) can
    not be compared: its entry is ``"opaque <type>"`` (an opaque part of a value read,
    say an attribute, gets an entry of its own, ``CFG.lock``), and diffs say so rather
    than count it unchanged.

    >>> import re, threading
    >>> WORD = re.compile(r"\\w+")
    >>> sorted(global_reads(lambda line: WORD.findall(line)))
    ['WORD']
    >>> LOCK = threading.Lock()
    >>> global_reads(lambda line: LOCK)["LOCK"]
    'opaque lock'
    >>> def tokenizer(sep):
    ...     return lambda line: line.split(sep)
    >>> global_reads(tokenizer(",")) == global_reads(tokenizer(","))
    True
    >>> global_reads(tokenizer(",")) == global_reads(tokenizer(";"))
    False
    """
    encoder = _Encoder()
    out: dict[str, str] = {}
    for key, (path, suffix, value) in _direct_reads(fn).items():
        try:
            found = encoder.encode(value, path)
        except Exception:  # (a value that fails to be read can not be compared)
            found = _Opaque(type(value))
        opaque = encoder.take_opaque()
        if isinstance(found, _Opaque):
            out[key] = f"{OPAQUE} {found.kind}"
            continue
        out[key] = _hash(found)
        for part, kind in opaque:
            out[f"{part}{suffix}"] = f"{OPAQUE} {kind}"
    return dict(sorted(out.items()))


def _direct_reads(fn: Any) -> dict[str, tuple[str, str, Any]]:
    """key -> (path for opaque parts, key suffix, value) of what ``fn`` reads directly."""
    out: dict[str, tuple[str, str, Any]] = {}
    if isinstance(fn, functools.partial):
        out[PARTIAL] = (PARTIAL, "", [list(fn.args), fn.keywords])
        return {**_direct_reads(fn.func), **out}
    if isinstance(fn, types.MethodType):
        out[SELF] = (SELF, "", fn.__self__)
        return {**_direct_reads(fn.__func__), **out}
    if isinstance(fn, types.FunctionType):
        for key, value in _function_reads(fn):
            name, _, suffix = key.partition(" ")
            out[key] = (name, f" {suffix}" if suffix else "", value)
        return out
    owner = getattr(fn, "__self__", None)
    if _is_builtin(fn):
        if owner is not None and not isinstance(owner, types.ModuleType):
            out[SELF] = (SELF, "", owner)  # " ".join, WORD.findall
        return out
    if not isinstance(fn, type):  # a callable object: its class and attributes
        out[OBJECT] = (OBJECT, "", fn)
    return out


@attrs.frozen
class _ModuleNames:
    """A module of the user's that a function reads, with the names its code uses that
    the module has (``settings.SEP`` in a lambda: ``SEP``): a library module is only its
    name, but the values a pipeline keeps in a module of its own are what it computes
    with."""

    module: types.ModuleType
    names: tuple[str, ...]


def _function_reads(fn: types.FunctionType) -> list[tuple[str, Any]]:
    code = fn.__code__
    names = fn.__globals__
    used = _code_names(code)
    out: list[tuple[str, Any]] = []
    for name in sorted(used):
        if name not in names:
            continue
        value = names[name]
        if isinstance(value, types.ModuleType) and not _is_library(value.__name__):
            value = _ModuleNames(value, tuple(n for n in sorted(used) if hasattr(value, n)))
        out.append((name, value))
    for var, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            out.append((var + CLOSURE, cell.cell_contents))
        except ValueError:  # (an empty cell)
            continue
    defaults = fn.__defaults__ or ()
    params = code.co_varnames[code.co_argcount - len(defaults) : code.co_argcount]
    out.extend((p + DEFAULT, v) for p, v in zip(params, defaults))
    out.extend((p + DEFAULT, v) for p, v in sorted((fn.__kwdefaults__ or {}).items()))
    return out


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def _hash(key: Any) -> str:
    return hashlib.sha256(json.dumps(key, separators=(",", ":")).encode()).hexdigest()[:12]


def _is_builtin(fn: Any) -> bool:
    return isinstance(
        fn,
        (
            types.BuiltinFunctionType, types.MethodWrapperType, types.WrapperDescriptorType,
            types.MethodDescriptorType, types.ClassMethodDescriptorType,
        ),
    )  # fmt: skip


@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(getattr(site, "getsitepackages", list)())
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


@functools.cache
def _is_library(module: str | None) -> bool:
    """Whether module ``module`` is the standard library's, an installed package's or
    rstreams' own: its functions and classes compare by qualified name, not content."""
    if not isinstance(module, str):
        return False  # (code made by exec without a module name: the user's)
    top = module.partition(".")[0]
    if top in sys.stdlib_module_names or top in ("builtins", "rstreams"):
        return True
    file = getattr(sys.modules.get(module), "__file__", None)
    return isinstance(file, str) and os.path.realpath(file).startswith(_library_roots())


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', '?')}"


class _Opaque:
    """An encoding of a value that has no comparable form."""

    def __init__(self, cls: type) -> None:
        self.kind = cls.__qualname__


class _Encoder:
    """Values as plain JSON data that is the same in every process; what has no such form
    is noted, with where it was found (see :func:`global_reads`)."""

    def __init__(self) -> None:
        self._opaque: list[tuple[str, str]] = []
        self._active: set[int] = set()  # what is being encoded (cycles)
        self._done: dict[int, tuple[Any, list[tuple[str, str]], Any]] = {}

    def take_opaque(self) -> list[tuple[str, str]]:
        found, self._opaque = list(dict.fromkeys(self._opaque)), []
        return found

    def encode(self, value: Any, path: str, depth: int = 0) -> Any:
        """``value``'s encoding, or an :class:`_Opaque` when it has none (which the
        caller notes); opaque parts of it are noted with where they are (``path.attr``)."""
        if type(value) in _BY_REPR:
            return repr(value)  # (alone, it tells these types apart: 1, 1.0, True, '1')
        if depth > _MAX_DEPTH:
            return _Opaque(type(value))
        key = id(value)
        done = self._done.get(key)
        if done is not None and done[2] is value:  # (shared: encoded once, parts noted again)
            encoded, parts, _ = done
            self._opaque.extend((path + sub, kind) for sub, kind in parts)
            return encoded
        if key in self._active:
            return ["cycle", type(value).__qualname__]
        self._active.add(key)
        before = len(self._opaque)
        try:
            encoded = self._compound(value, path, depth + 1)
        finally:
            self._active.discard(key)
        parts = [(p[len(path) :], kind) for p, kind in self._opaque[before:]]
        self._done[key] = (encoded, parts, value)  # (keeps value alive: its id stays its own)
        return encoded

    def _part(self, value: Any, path: str, depth: int) -> Any:
        found = self.encode(value, path, depth)
        if isinstance(found, _Opaque):
            self._opaque.append((path, found.kind))
            return [OPAQUE, found.kind]
        return found

    def _compound(self, value: Any, path: str, depth: int) -> Any:
        cls = type(value)
        if isinstance(value, (*_CALLABLE_BY_REPR, *_VALUES_BY_REPR)) and " at 0x" not in repr(
            value
        ):
            return [_qualified(cls), repr(value)]  # operator.itemgetter(1), a date, a path
        if isinstance(value, logging.Logger):
            return ["logger", value.name]  # (how it logs is no part of what a step computes)
        if isinstance(value, _ModuleNames):
            return self._module(value, path, depth)
        if isinstance(value, enum.Enum):
            member = self._part(value.value, f"{path}.value", depth)
            return ["enum", self._part(cls, f"{path}.__class__", depth), value.name, member]
        if isinstance(value, re.Pattern):
            return ["re", repr(value.pattern), value.flags]
        if isinstance(value, (tuple, list, set, frozenset, dict)):
            return [_qualified(cls), *self._items(value, path, depth)]
        if isinstance(value, types.ModuleType):
            return ["module", value.__name__]  # (what of it is read: see _ModuleNames)
        if isinstance(value, type):
            return self._class(value, path, depth)
        if isinstance(value, types.FunctionType):
            return self._function(value, path, depth)
        if isinstance(value, types.MethodType):
            return [
                "method",
                self._part(value.__func__, path, depth),
                self._part(value.__self__, f"{path}.__self__", depth),
            ]
        if isinstance(value, functools.partial):
            return [
                "partial",
                self._part(value.func, path, depth),
                self._part(list(value.args), f"{path}{PARTIAL}", depth),
                self._part(value.keywords, f"{path}{PARTIAL}", depth),
            ]
        if isinstance(value, (staticmethod, classmethod)):
            return [cls.__name__, self._part(value.__func__, path, depth)]
        if isinstance(value, property):
            return ["property", *(self._part(f, path, depth) for f in (value.fget, value.fset))]
        if _is_builtin(value):
            owner = getattr(value, "__self__", None)
            name = getattr(value, "__qualname__", getattr(value, "__name__", "?"))
            if owner is None or isinstance(owner, (types.ModuleType, type)):
                where = getattr(owner, "__name__", None) or getattr(value, "__module__", None)
                return ["builtin", where, name]
            return ["builtin", name, self._part(owner, f"{path}.__self__", depth)]
        return self._instance(value, path, depth)

    def _items(self, value: Any, path: str, depth: int) -> list[Any]:
        """A container's items (sets and dicts sorted: not in the order they iterate in,
        which a ``str``'s hash decides), and a subclass's attributes."""
        extra = self._extra(value, path, depth)
        if isinstance(value, (tuple, list)):
            if all(type(v) in _BY_REPR for v in value):  # (a list of words, of numbers)
                return [list(map(repr, value)), *extra]
            return [[self._part(v, f"{path}[{i}]", depth) for i, v in enumerate(value)], *extra]
        if isinstance(value, (set, frozenset)):
            if _plain_keys(value):  # (a set of words: sorted as they are)
                return [[repr(v) for v in sorted(value)], *extra]
            return [sorted(json.dumps(self._part(v, f"{path}{{}}", depth)) for v in value), *extra]
        factory = getattr(value, "default_factory", None)
        if factory is not None:
            extra.append(self._part(factory, f"{path}.default_factory", depth))
        if not _plain_keys(value):
            pairs = (
                [self._part(k, f"{path}{{}}", depth), self._part(v, _item(path, k), depth)]
                for k, v in value.items()
            )
            return [sorted(json.dumps(p) for p in pairs), *extra]
        if all(type(v) in _BY_REPR for v in value.values()):  # (a table of words)
            return [[repr(x) for kv in sorted(value.items()) for x in kv], *extra]
        items = sorted(value.items())
        return [[[repr(k), self._part(v, _item(path, k), depth)] for k, v in items], *extra]

    def _extra(self, value: Any, path: str, depth: int) -> list[Any]:
        """The attributes of a container of a subclass (a namedtuple has none)."""
        attributes = getattr(value, "__dict__", None)
        return [self._attributes(attributes, path, depth)] if attributes else []

    def _attributes(self, attributes: dict[str, Any], path: str, depth: int) -> Any:
        return [
            [name, self._part(v, f"{path}.{name}", depth)] for name, v in sorted(attributes.items())
        ]

    def _module(self, value: _ModuleNames, path: str, depth: int) -> Any:
        module = value.module
        return [
            "module",
            module.__name__,
            [[n, self._part(getattr(module, n), f"{path}.{n}", depth)] for n in value.names],
        ]

    def _function(self, fn: types.FunctionType, path: str, depth: int) -> Any:
        if _is_library(fn.__module__):
            return ["function", _qualified(fn)]
        reads = [
            [key, self._part(v, f"{path}.{key.partition(' ')[0]}", depth)]
            for key, v in _function_reads(fn)
        ]
        return ["function", _code_key(fn.__code__, frozenset()), reads]

    def _class(self, cls: type, path: str, depth: int) -> Any:
        if _is_library(cls.__module__):
            return ["class", _qualified(cls)]
        members = [
            [name, self._part(v, f"{path}.{name}", depth)]
            for name, v in sorted(vars(cls).items())
            if not _noise(name, v)
        ]
        bases = [self._part(b, f"{path}.{b.__name__}", depth) for b in cls.__bases__]
        return ["class", _qualified(cls), bases, members]

    def _instance(self, value: Any, path: str, depth: int) -> Any:
        cls = type(value)
        fields: list[str] | None = None
        if attrs.has(cls):
            fields = [f.name for f in attrs.fields(cls) if f.eq]
        elif dataclasses.is_dataclass(cls):
            fields = [f.name for f in dataclasses.fields(value) if f.compare]
        elif _is_library(cls.__module__) or any(
            not (b.__flags__ & _HEAPTYPE) for b in cls.__mro__[1:-1]
        ):
            # A library's object (its state is its implementation's), or one of a class
            # built on a C type (state outside its attributes).
            return _Opaque(cls)
        state: dict[str, Any] = {}
        for name in fields if fields is not None else _state_names(value):
            try:
                state[name] = getattr(value, name) if fields is not None else _raw(value, name)
            except AttributeError:
                continue  # (a slot never set)
        return ["object", self._part(cls, f"{path}.__class__", depth),
                self._attributes(state, path, depth)]  # fmt: skip


def _plain_keys(items: Any) -> bool:
    """Whether ``items`` are all ``str`` or all ``int``: sorted as they are."""
    kinds = set(map(type, items))
    return kinds <= {str} or kinds <= {int}


def _item(path: str, key: Any) -> str:
    """Where a dict's item is, for messages (and keys: the same in every process)."""
    return f"{path}[{key!r}]" if type(key) in (str, int, bool) else f"{path}[...]"


#: ``type.__flags__``: a class made by a class statement (not a C type).
_HEAPTYPE = 1 << 9


def _noise(name: str, value: Any) -> bool:
    if name in _CLASS_NOISE or name.startswith("_abc_"):
        return True
    if isinstance(value, (types.MemberDescriptorType, types.GetSetDescriptorType)):
        return True  # (a slot: its value is the instance's)
    # Other dunder values (not methods) are the interpreter's bookkeeping.
    return (
        name.startswith("__")
        and not callable(value)
        and not isinstance(value, (staticmethod, classmethod, property))
    )


def _state_names(value: Any) -> list[str]:
    names = list(getattr(value, "__dict__", None) or ())
    for c in type(value).__mro__:
        slots = c.__dict__.get("__slots__", ())
        names.extend(
            s for s in ([slots] if isinstance(slots, str) else slots)
            if s not in ("__dict__", "__weakref__")
        )  # fmt: skip
    return sorted(set(names))


def _raw(value: Any, name: str) -> Any:
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict) and name in attributes:
        return attributes[name]
    return object.__getattribute__(value, name)
