"""Options declared once: an attrs field that carries its flag, help text and check.

A class of options (:class:`~rstreams.config.RunConfig`,
:class:`~rstreams.config.WorkerConfig`, the ``rstreams run`` command's own) declares
each option with :func:`option`: its name and type are the field's, its default the
field's default. From that one declaration come the command line's arguments
(:func:`add_argument`), the checks of values parsed there (:func:`check_args`), flags
given as text (:func:`parse_flags`) and instances written as JSON and read back with
every check (:func:`to_json`, :func:`from_json`).

    >>> @attrs.frozen(kw_only=True)
    ... class Demo:
    ...     rounds: int = option(3, flag="--rounds", help="how many", check=at_least(1))
    >>> Demo(rounds=0)
    Traceback (most recent call last):
    ...
    rstreams.errors.ConfigError: rounds must be >= 1; got 0
    >>> parse_flags(Demo, ["--rounds", "5"])
    {'rounds': 5}
    >>> from_json(Demo, to_json(Demo(rounds=2)))
    Demo(rounds=2)
    >>> from_json(Demo, '{"rounds": "two"}')
    Traceback (most recent call last):
    ...
    rstreams.errors.ConfigError: rounds must be int; got 'two'
"""

from __future__ import annotations

import argparse
import functools
import json
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal, NoReturn, Union, get_args, get_origin

import attrs

from rstreams.errors import ConfigError

#: Where an option's :class:`Declared` sits in its attrs field's metadata.
KEY = "rstreams.option"

#: A check: what the value must be (``"must be >= 1"``), or None when it is fine.
Check = Callable[[Any], "str | None"]


def at_least(low: float, unit: str = "") -> Check:
    """The value is ``low`` or more (``unit`` follows the bound in the message)."""
    return lambda value: None if value >= low else f"must be >= {low}{unit}"


def above(low: float, unit: str = "") -> Check:
    """The value is more than ``low``."""
    return lambda value: None if value > low else f"must be > {low}{unit}"


def within(low: int, high: int, note: str = "") -> Check:
    """The value is ``low`` to ``high``, both included."""
    return lambda value: None if low <= value <= high else f"must be {low}..{high}{note}"


def one_of(allowed: tuple[str, ...]) -> Check:
    """The value is one of ``allowed`` (for an option typed ``str``; a Literal type says
    its choices itself)."""
    return lambda value: None if value in allowed else f"must be one of {', '.join(allowed)}"


#: A declaration's ``cli_default`` when the command line's default is the field's.
FIELD_DEFAULT: Any = type("FieldDefault", (), {"__repr__": lambda self: "FIELD_DEFAULT"})()


@attrs.frozen
class Declared:
    """What an option declares beyond its name, type and default."""

    #: Its command-line spelling (``--data-dir``); None: it has none.
    flag: str | None = None
    help: str | None = None
    metavar: str | None = None
    check: Check | None = None
    #: Errors from Python name it by its flag too (most runs start at the command line).
    errors_say_flag: bool = False
    #: The command line's default where it differs from the field's (``--data-dir``).
    cli_default: Any = FIELD_DEFAULT


def option(
    default: Any = attrs.NOTHING,
    *,
    flag: str | None = None,
    help: str | None = None,
    metavar: str | None = None,
    check: Check | None = None,
    errors_say_flag: bool = False,
    cli_default: Any = FIELD_DEFAULT,
    converter: Callable[[Any], Any] | None = None,
    factory: Callable[[], Any] | None = None,
    show: Callable[[Any], str] | bool = True,
) -> Any:
    """An attrs field declaring one option; a value it refuses raises ConfigError.
    ``show``: how a repr shows the value (a function hides a secret in it)."""
    declared = Declared(flag, help, metavar, check, errors_say_flag, cli_default)
    return attrs.field(
        default=default,
        factory=factory,
        converter=converter,
        validator=_validate,
        repr=show,
        metadata={KEY: declared},
    )


def declared(cls: type, name: str) -> Declared:
    """The declaration of option ``name`` of ``cls`` (a plain field: no flag, no check)."""
    found: Declared | None = attrs.fields_dict(cls)[name].metadata.get(KEY)
    return found or Declared()


def field_default(cls: type, name: str) -> Any:
    """The default option ``name`` of ``cls`` declares: what other code that needs the
    same default reads, instead of writing it again.

    >>> from rstreams.config import WorkerConfig
    >>> field_default(WorkerConfig, "session_timeout")
    5.0
    """
    default: Any = attrs.fields_dict(cls)[name].default
    return default.factory() if isinstance(default, attrs.Factory) else default  # type: ignore[arg-type]


def sections(cls: type) -> list[tuple[str, type]]:
    """The options of ``cls`` that are classes of options themselves (its sections), as
    (name, class), in declaration order."""
    hints = _hints(cls)
    return [(f.name, hints[f.name]) for f in attrs.fields(cls) if attrs.has(hints[f.name])]


def tree(cls: type) -> list[type]:
    """``cls`` and the classes of its sections, depth first: every class of a tree of
    options (see :class:`rstreams.config.RunConfig`)."""
    return [cls, *(c for _, section in sections(cls) for c in tree(section))]


def flagged(cls: type) -> list[str]:
    """The options of ``cls`` that have a command-line flag, in declaration order."""
    return [f.name for f in attrs.fields(cls) if declared(cls, f.name).flag]


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _unwrap(tp: Any) -> Any:
    """``int | None`` -> ``int``: the type an option's given values have."""
    if get_origin(tp) in (Union, types.UnionType):
        return next(a for a in get_args(tp) if a is not type(None))
    return tp


def choices(cls: type, name: str) -> tuple[str, ...] | None:
    """The allowed values of an option whose type is a Literal."""
    tp = _unwrap(_hints(cls)[name])
    return get_args(tp) if get_origin(tp) is Literal else None


def problem(cls: type, name: str, value: Any) -> str | None:
    """What is wrong with ``value`` for option ``name`` (None: nothing). None is not
    checked: an optional option's None means "not given"."""
    if value is None:
        return None
    allowed = choices(cls, name)
    if allowed is not None and value not in allowed:
        return f"must be one of {', '.join(allowed)}"
    check = declared(cls, name).check
    return check(value) if check is not None else None


def _refuse(label: str, what: str, value: Any) -> NoReturn:
    raise ConfigError(f"{label} {what}; got {value!r}")


def _validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    cls = type(instance)
    what = problem(cls, attribute.name, value)
    if what is not None:
        d = declared(cls, attribute.name)
        _refuse(d.flag if d.errors_say_flag and d.flag else attribute.name, what, value)


# -- the command line ----------------------------------------------------------------------


def cli_default(cls: type, name: str) -> Any:
    """The default the command line shows and passes for option ``name``."""
    d = declared(cls, name)
    return field_default(cls, name) if d.cli_default is FIELD_DEFAULT else d.cli_default


def add_argument(parser: argparse._ActionsContainer, cls: type, name: str) -> None:
    """Add option ``name`` of ``cls`` to ``parser`` as its declaration says: a bool is a
    switch, a tuple a repeatable option, a Literal a choice."""
    d = declared(cls, name)
    assert d.flag is not None, f"{cls.__name__}.{name} has no flag"
    tp = _unwrap(_hints(cls)[name])
    kwargs: dict[str, Any] = {"dest": name, "help": d.help}
    default = cli_default(cls, name)
    if tp is bool:
        kwargs["action"] = "store_true"
    elif get_origin(tp) is tuple:
        kwargs.update(action="append", default=list(default), metavar=d.metavar)
    else:
        kwargs.update(default=default, metavar=d.metavar)
        if get_origin(tp) is Literal:
            kwargs["choices"] = get_args(tp)
        elif tp is not str:
            kwargs["type"] = tp
    parser.add_argument(d.flag, **kwargs)


def check_args(args: argparse.Namespace, cls: type, names: Sequence[str] | None = None) -> None:
    """Check parsed command-line values with the declared checks, naming their flags."""
    for name in flagged(cls) if names is None else names:
        value = getattr(args, name)
        what = problem(cls, name, value)
        if what is not None:
            _refuse(declared(cls, name).flag or name, what, value)


def from_args(cls: type, args: argparse.Namespace) -> Any:
    """A ``cls`` from parsed command-line ``args``: every option of it and of its
    sections that ``args`` holds (under the option's name), the others at their
    defaults. The one way a command line's values become a tree of options: nothing is
    copied field by field.

    >>> @attrs.frozen(kw_only=True)
    ... class Demo:
    ...     rounds: int = option(3, flag="--rounds", help="how many", check=at_least(1))
    ...     name: str = "x"
    >>> from_args(Demo, argparse.Namespace(rounds=5, quiet=True))
    Demo(rounds=5, name='x')
    """
    given = vars(args)
    values: dict[str, Any] = {}
    for f in attrs.fields(cls):
        tp = _hints(cls)[f.name]
        if attrs.has(tp):
            values[f.name] = from_args(tp, args)
        elif f.name in given:
            values[f.name] = given[f.name]
    return cls(**values)


class _FlagParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message}")


def parse_flags(cls: type, argv: Sequence[str], what: str = "") -> dict[str, Any]:
    """The options of ``cls`` given as command-line flags in ``argv``, checked (errors
    start with ``what``): only those given."""
    parser = _FlagParser(
        prog=what or cls.__name__, add_help=False, allow_abbrev=False, exit_on_error=False
    )
    for name in flagged(cls):
        add_argument(parser, cls, name)
    for action in parser._actions:
        action.default = argparse.SUPPRESS  # (only what is given: it goes over a config)
    try:
        args, extra = parser.parse_known_args(list(argv))
    except argparse.ArgumentError as e:
        parser.error(str(e))
    if extra:
        known = ", ".join(declared(cls, n).flag or n for n in flagged(cls))
        parser.error(f"unknown option(s) {extra}; the options are {known}")
    try:
        check_args(args, cls, list(vars(args)))
    except ConfigError as e:
        parser.error(str(e))
    return vars(args)


# -- JSON ---------------------------------------------------------------------------------


def to_json(instance: Any) -> str:
    """``instance`` (attrs, options nested) as JSON that :func:`from_json` reads back."""
    return json.dumps(attrs.asdict(instance, recurse=True), sort_keys=True)


def from_json(cls: type, text: str) -> Any:
    """A ``cls`` from :func:`to_json`'s text, every value checked: its type, then the
    declared checks. Names ``cls`` does not have are refused."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"not JSON: {e}") from None
    return from_dict(cls, data)


def _conforms(value: Any, tp: Any) -> bool:
    origin = get_origin(tp)
    if tp is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_conforms(value, a) for a in get_args(tp))
    if tp is type(None):
        return value is None
    if origin is Literal:
        return isinstance(value, str)  # (which strings: the declared check says)
    if origin is tuple:
        return isinstance(value, list | tuple) and all(_conforms(v, get_args(tp)[0]) for v in value)
    if tp in (int, float):
        return isinstance(value, int | tp) and not isinstance(value, bool)
    return isinstance(value, tp)


def from_dict(cls: type, data: Any) -> Any:
    """A ``cls`` from a dict such as ``attrs.asdict`` makes, checked as :func:`from_json`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{cls.__name__} must be a JSON object; got {type(data).__name__}")
    fields = attrs.fields_dict(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} option(s) {unknown}")
    missing = sorted(n for n, f in fields.items() if f.default is attrs.NOTHING and n not in data)
    if missing:
        raise ConfigError(f"{cls.__name__} is missing {missing}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        tp = _hints(cls)[name]
        if attrs.has(tp):
            value = from_dict(tp, value)
        elif not _conforms(value, tp):
            text = str(tp).replace("typing.", "")
            _refuse(name, f"must be {getattr(tp, '__name__', text)}", value)
        values[name] = value
    return cls(**values)
