"""Serializers and deserializers (serdes) for record keys, values and state.

Topics and state stores hold bytes; a :class:`Serde` turns Python values into bytes and
back. rstreams never pickles data: pickles are unsafe to read and tie stored data to
Python class layouts.

Built-in serdes, also selectable by name wherever a serde is accepted:

========== =====================================================================
``"str"``     UTF-8 text (the default for source values and keys)
``"bytes"``   raw bytes, unchanged
``"json"``    JSON text (the default for user sinks; readable by any tool)
``"msgpack"`` MessagePack, round-trips tuples too (used for shuffles and state)
========== =====================================================================

    >>> from rstreams.serde import get_serde
    >>> s = get_serde("msgpack")
    >>> s.deserialize(s.serialize({"word": ("a", 1)}))
    {'word': ('a', 1)}
    >>> get_serde("json").serialize({"n": 1})
    b'{"n":1}'
"""

from __future__ import annotations

import json
import json.scanner
import re
import threading
from collections.abc import Callable, Sequence
from functools import partial
from json.encoder import encode_basestring as _encode_basestring  # the C one
from typing import Any

import msgpack
import msgspec

from rstreams.errors import SerdeError
from rstreams.windowed import Windowed

_TUPLE_EXT = 1
_PACKERS = threading.local()
_WINDOWED_EXT = 2


class Serde:
    """Turns values into bytes and back. Subclass and override both methods."""

    name = "serde"

    def serialize(self, obj: Any) -> bytes:
        raise NotImplementedError

    def deserialize(self, data: bytes) -> Any:
        raise NotImplementedError

    def deserialize_many(self, data: list[bytes]) -> list[Any]:
        """Deserialize a column of values. Raises on the first bad one; callers then
        retry one by one to find it. Override with a faster loop where possible."""
        de = self.deserialize
        return [de(d) for d in data]

    def serialize_many(self, objs: list[Any]) -> list[bytes]:
        """Serialize a column of values (none of them None). Raises on the first bad
        one; callers then retry one by one to find it."""
        ser = self.serialize
        return [ser(o) for o in objs]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def serialize_rows(
    key_serde: Serde, value_serde: Serde, keys: list[Any], values: list[Any], keep_none_key: bool
) -> tuple[list[bytes | None], list[bytes | None]]:
    """The keys and values of a batch as bytes: a None value stays None, and a None key
    when ``keep_none_key``. One ``serialize_many`` per column, or for a batch of one
    (the test driver's records) ``serialize``, which costs a third of it. Raises on the
    first value that does not serialize."""
    if len(values) == 1:
        k, v = keys[0], values[0]
        kb = None if k is None and keep_none_key else key_serde.serialize(k)
        return [kb], [None if v is None else value_serde.serialize(v)]
    return _serialized(key_serde, keys, keep_none_key), _serialized(value_serde, values, True)


def _serialized(serde: Serde, objs: list[Any], keep_none: bool) -> list[bytes | None]:
    if not (keep_none and None in objs):
        return serde.serialize_many(objs)  # type: ignore[return-value]
    done = iter(serde.serialize_many([o for o in objs if o is not None]))
    return [None if o is None else next(done) for o in objs]


def deserialize_rows(
    key_serde: Serde,
    value_serde: Serde,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
) -> tuple[list[Any], list[Any]]:
    """Stored keys and values back as objects, None staying None: as
    :func:`serialize_rows`, one ``deserialize_many`` per column, ``deserialize`` for one."""
    if len(values) == 1:
        k, v = keys[0], values[0]
        return (
            [None if k is None else key_serde.deserialize(k)],
            [None if v is None else value_serde.deserialize(v)],
        )
    return _deserialized(key_serde, keys), _deserialized(value_serde, values)


def _deserialized(serde: Serde, data: Sequence[bytes | None]) -> list[Any]:
    # A column is usually all present, or all None (the keys of lines of input): one C
    # scan tells, and neither needs a list built by a loop.
    nones = data.count(None)
    if not nones:
        return serde.deserialize_many(list(data))  # type: ignore[arg-type]
    if nones == len(data):
        return [None] * nones
    done = iter(serde.deserialize_many([d for d in data if d is not None]))
    return [None if d is None else next(done) for d in data]


class StrSerde(Serde):
    """UTF-8 text. Non-str values are rejected rather than silently ``str()``-ed."""

    name = "str"

    def serialize(self, obj: Any) -> bytes:
        if isinstance(obj, str):
            return obj.encode("utf-8")
        if isinstance(obj, bytes):
            return obj
        raise SerdeError(
            f"the 'str' serde expects a str value; got {type(obj).__name__} {obj!r:.80}; "
            "use serializer='json' or 'msgpack' for other types"
        )

    def deserialize(self, data: bytes) -> Any:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SerdeError(f"invalid UTF-8 at byte {e.start}: {data[:60]!r}") from None

    def deserialize_many(self, data: list[bytes]) -> list[Any]:
        try:
            return list(map(bytes.decode, data))  # UTF-8, strict
        except (UnicodeDecodeError, TypeError):
            return [self.deserialize(d) for d in data]  # raises the clear error

    def serialize_many(self, objs: list[Any]) -> list[bytes]:
        try:
            return list(map(str.encode, objs))
        except TypeError:  # bytes, or a bad value: the general path sorts them out
            return [self.serialize(o) for o in objs]


class BytesSerde(Serde):
    """Bytes in, bytes out."""

    name = "bytes"

    def serialize(self, obj: Any) -> bytes:
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj)
        raise SerdeError(f"the 'bytes' serde expects bytes; got {type(obj).__name__}")

    def deserialize(self, data: bytes) -> Any:
        return data

    def deserialize_many(self, data: list[bytes]) -> list[Any]:
        return list(data)

    def serialize_many(self, objs: list[Any]) -> list[bytes]:
        if all(type(o) is bytes for o in objs):
            return list(objs)
        return [self.serialize(o) for o in objs]


#: msgspec's JSON encoder and decoder (thread-safe; several times the speed of the json
#: module's). They are used only where they give what the json module gives, byte for
#: byte and object for object: see :func:`fast_json` and :meth:`JsonSerde.deserialize`.
_ms_encode: Callable[[Any], bytes] = msgspec.json.Encoder().encode
_ms_decode: Callable[[bytes], Any] = msgspec.json.Decoder().decode

#: The exact types (no subclasses) msgspec writes as ``json.dumps`` does, and the exact
#: types of dict keys it writes so (``json.dumps`` writes a float key with its float
#: repr, a bool or None key as "true" or "null": msgspec differs or refuses).
_MS_SCALARS = frozenset({str, int, bool, type(None)})
_MS_KEYS = frozenset({str, int})
_all_scalars = _MS_SCALARS.issuperset
_all_keys = _MS_KEYS.issuperset
_all_bytes = frozenset({bytes}).issuperset


def _plain(obj: Any) -> bool:
    """Whether msgspec surely writes ``obj`` as ``json.dumps(obj, separators=(",", ":"),
    ensure_ascii=False)`` does: when it is made of dicts (with str or int keys), lists,
    tuples, str, int, bool, None and floats from 1e-4 to 1e16, of exactly these types.

    Not so for others: msgspec writes sets, bytes, datetimes, enums, attrs classes (such
    as :class:`Windowed`)... where json.dumps refuses them or calls its ``default``; a
    float's repr has an exponent below 1e-4 and from 1e16 on, and msgspec writes
    another one (``1e16`` for ``1e+16``, ``0.00001`` for ``1e-05``); NaN and infinities
    are ``NaN`` and ``Infinity`` for json.dumps, ``null`` for msgspec. Raises
    RecursionError on values nested too deep."""
    t = type(obj)
    if t is dict:
        return _all_keys(map(type, obj)) and _plain_items(obj.values())
    if t is list or t is tuple:
        return _plain_items(obj)
    if t is float:
        return 1e-4 <= abs(obj) < 1e16 or obj == 0.0
    return t in _MS_SCALARS


def _plain_items(items: Any) -> bool:
    if _all_scalars(map(type, items)):  # (one C loop for a flat record)
        return True
    for v in items:
        t = type(v)
        if t in _MS_SCALARS:
            continue
        if t is dict:
            if not (_all_keys(map(type, v)) and _plain_items(v.values())):
                return False
        elif t is list or t is tuple:
            if not _plain_items(v):
                return False
        elif t is float:
            if not (1e-4 <= abs(v) < 1e16 or v == 0.0):
                return False
        else:
            return False
    return True


def fast_json(obj: Any) -> bytes | None:
    """``json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()`` written by
    msgspec, or None where msgspec may write other bytes (see :func:`_plain`) or
    refuses (a lone surrogate, an int of more than 4300 digits, too deep): the caller
    then asks json.dumps, which writes or raises as it always did.

    >>> fast_json({"n": [1, 2.5, None], "w": ("a",)}), fast_json([1e16]), fast_json({1, 2})
    (b'{"n":[1,2.5,null],"w":["a"]}', None, None)
    """
    try:
        if _plain(obj):
            return _ms_encode(obj)
    except Exception:
        pass
    return None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Windowed):
        out: dict[str, Any] = {"@windowed": [obj.key, obj.start, obj.end]}
        if obj.closed is not None:
            out["closed"] = obj.closed
        return out
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _json_object(d: dict[str, Any]) -> Any:
    w = d.get("@windowed")
    if w is not None and len(d) <= 2:
        return Windowed(w[0], w[1], w[2], d.get("closed"))
    return d


#: An escape of a character of 0x40..0x7F, which "@windowed" may be written with.
_ESCAPED_LETTER = re.compile(rb"\\u00[4-7]")


def _may_be_windowed(data: bytes) -> bool:
    """Whether JSON text ``data`` may hold the key "@windowed" (that
    :func:`_json_object` reads back as a :class:`Windowed`): written so, or with one of
    its characters escaped (``\\u0040windowed``)."""
    return b"@windowed" in data or (b"\\u00" in data and _ESCAPED_LETTER.search(data) is not None)


def json_texts(objs: list[Any], dumps: Callable[[Any], str]) -> list[str]:
    """``[dumps(o) for o in objs]`` for a ``json.dumps``-like ``dumps``, with str and int
    (the usual keys and counts) written without its Python layers: the same text,
    whatever separators ``dumps`` uses."""
    enc = _encode_basestring
    kinds = set(map(type, objs))
    if kinds == {str}:  # a column of keys: no Python-level loop at all
        return list(map(enc, objs))
    if kinds == {int}:
        return list(map(int.__repr__, objs))
    out: list[str] = []
    append = out.append
    for o in objs:
        t = type(o)
        if t is str:
            append(enc(o))
        elif t is int:
            append(int.__repr__(o))
        else:
            append(dumps(o))
    return out


def scan_json_many(data: list[bytes], deserialize: Callable[[bytes], Any]) -> list[Any]:
    """``json.loads`` of each of ``data`` (with :func:`_json_object`): the C scanner on
    each value, without json.loads's per-call Python layers. A value it does not take
    whole (surrounding blanks, other encodings, bad data) sends the column through
    ``deserialize``, which decides."""
    scan = json.scanner.make_scanner(json.JSONDecoder(object_hook=_json_object))  # type: ignore[arg-type]
    out: list[Any] = []
    append = out.append
    try:
        for d in data:
            text = d.decode("utf-8")
            obj, end = scan(text, 0)
            if end != len(text):
                raise ValueError
            append(obj)
    except Exception:
        return [deserialize(d) for d in data]
    return out


class JsonSerde(Serde):
    """Compact JSON. Tuples come back as lists, as JSON has no tuple; windowed keys are
    written as ``{"@windowed": [key, start, end]}`` and read back as :class:`Windowed`.

    The bytes are ``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)``'s, and
    the objects read ``json.loads``'s: msgspec writes and reads where it surely gives
    the same (most values, several times faster), the json module the rest."""

    name = "json"

    def serialize(self, obj: Any) -> bytes:
        # msgspec where it writes json.dumps's bytes (fast_json), json.dumps otherwise.
        t = type(obj)
        if t is str or t is int:  # (the usual keys and counts)
            try:
                return _ms_encode(obj)
            except Exception:  # a lone surrogate, an int of over 4300 digits: raise as ever
                return (_encode_basestring(obj) if t is str else int.__repr__(obj)).encode()
        # A windowed key is written as json.dumps writes what _json_default makes of it.
        raw = fast_json(_json_default(obj) if t is Windowed else obj)
        if raw is not None:
            return raw
        return self._text(obj).encode("utf-8")

    @staticmethod
    def _text(obj: Any) -> str:
        try:
            return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=_json_default)
        except (TypeError, ValueError) as e:
            raise SerdeError(
                f"value of type {type(obj).__name__} is not JSON-serializable ({e}); "
                "map it to dict/list/str/number first or pass another serializer"
            ) from None

    def deserialize(self, data: bytes) -> Any:
        # msgspec takes less than json.loads, and where it takes a text gives the same
        # objects: json.loads also reads NaN, Infinity, numbers beyond a float (as inf),
        # lone surrogates (escaped, or in bytes), UTF-16 and UTF-32 and a byte order
        # mark. Whatever msgspec refuses goes to json.loads, which decides, and words
        # the error. A text that may hold a windowed key goes to json.loads at once:
        # its object hook turns those into Windowed (and raises on a malformed one).
        if type(data) is bytes and not _may_be_windowed(data):
            try:
                return _ms_decode(data)
            except Exception:
                pass
        try:
            return json.loads(data, object_hook=_json_object)
        except ValueError as e:
            raise SerdeError(f"invalid JSON ({e}): {data[:60]!r}") from None

    def serialize_many(self, objs: list[Any]) -> list[bytes]:
        try:
            if _all_scalars(map(type, objs)):  # keys and counts: msgspec in one C loop
                return list(map(_ms_encode, objs))
            ser = self.serialize
            return [ser(o) for o in objs]
        except Exception:  # raise as json.dumps did (SerdeError, then UnicodeEncodeError)
            return list(map(str.encode, json_texts(objs, self._text)))  # (UTF-8, strict)

    def deserialize_many(self, data: list[bytes]) -> list[Any]:
        # msgspec on each value (see deserialize), when none of them may hold a
        # windowed key (one look at the first: a column of windowed keys; then at all
        # of them) and msgspec takes them all.
        first = data[0] if data else b""
        if (
            not (type(first) is bytes and b"@windowed" in first)
            and _all_bytes(map(type, data))
            and not _may_be_windowed(b"\n".join(data))  # (no newline in either pattern)
        ):
            try:
                return list(map(_ms_decode, data))
            except Exception:
                pass
        return scan_json_many(data, self.deserialize)


#: ``msgpack.ExtType((code, data))`` without its Python ``__new__``'s checks (the codes
#: and data here are right by construction): a tuple's extension is made per tuple.
_ext = partial(tuple.__new__, msgpack.ExtType)


def _pack_nested(obj: Any) -> bytes:
    """``packb(obj)`` for the inside of an extension, by a packer kept per thread and
    nesting depth (``msgpack.packb`` builds a packer per call: most of a tuple's cost)."""
    local = _PACKERS
    try:
        depth, packers = local.depth, local.nested
    except AttributeError:
        depth, packers = local.depth, local.nested = 0, []
    if depth == len(packers):
        packers.append(msgpack.Packer(use_bin_type=True, strict_types=True, default=_pack_default))
    local.depth = depth + 1
    try:
        return packers[depth].pack(obj)
    finally:
        local.depth = depth


def _pack_default(obj: Any) -> Any:

    if isinstance(obj, tuple):
        return _ext((_TUPLE_EXT, _pack_nested(list(obj))))
    if isinstance(obj, Windowed):
        return _ext((_WINDOWED_EXT, _pack_nested([obj.key, obj.start, obj.end, obj.closed])))
    if isinstance(obj, int):  # msgpack hands over only the ints it can not encode
        raise OverflowError(f"int {obj} is outside msgpack's range -2**63 .. 2**64-1")
    raise TypeError(f"can not serialize {type(obj).__name__!r} object")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _TUPLE_EXT:
        return tuple(_unpackb(data))
    if code == _WINDOWED_EXT:
        return Windowed(*_unpackb(data))
    return msgpack.ExtType(code, data)


def _pack() -> Callable[[Any], bytes]:
    """This thread's packer's ``pack``, kept: msgpack.packb builds a new packer per
    call, which costs five times the packing of a word (the test driver packs one
    value at a time). A packer resets itself when packing raises."""
    try:
        return _PACKERS.pack
    except AttributeError:
        packer = msgpack.Packer(use_bin_type=True, strict_types=True, default=_pack_default)
        _PACKERS.pack = packer.pack
        return packer.pack


def _packb(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True, strict_types=True, default=_pack_default)


#: ``msgpack.unpackb`` with rstreams' options (a partial: no Python frame per value).
_unpackb: Callable[[bytes], Any] = partial(
    msgpack.unpackb, raw=False, ext_hook=_ext_hook, strict_map_key=False
)


class MsgpackSerde(Serde):
    """MessagePack with tuples preserved (as an extension type).

    Handles None, bool, int, float, str, bytes, list, tuple and dict.
    """

    name = "msgpack"

    def serialize(self, obj: Any) -> bytes:
        try:  # (_pack() inline: a call less for every value)
            pack = _PACKERS.pack
        except AttributeError:
            pack = _pack()
        try:
            return pack(obj)
        except (TypeError, ValueError, OverflowError) as e:
            raise SerdeError(
                f"value of type {type(obj).__name__} can not be stored ({e}); state and "
                "shuffles hold None/bool/int/float/str/bytes/list/tuple/dict"
            ) from None

    def serialize_many(self, objs: list[Any]) -> list[bytes]:
        try:
            return list(map(_pack(), objs))
        except (TypeError, ValueError, OverflowError):
            return [self.serialize(o) for o in objs]  # raises the clear error

    def deserialize_many(self, data: list[bytes]) -> list[Any]:
        if len(data) <= 4:
            # A few values: unpackb each (it refuses extra or missing bytes itself),
            # cheaper than setting up an Unpacker.
            try:
                return [_unpackb(d) for d in data]
            except Exception:
                return [self.deserialize(d) for d in data]  # raises on the bad one
        # One C-level pass over the concatenation; the count check catches a record
        # that holds zero or several objects, and then the slow path names the bad one.
        unpacker = msgpack.Unpacker(raw=False, ext_hook=_ext_hook, strict_map_key=False)
        joined = b"".join(data)
        unpacker.feed(joined)
        try:
            out = list(unpacker)
        except Exception:
            out = []
        # Unpacking stops quietly at a truncated last object: all bytes must be used.
        if len(out) != len(data) or unpacker.tell() != len(joined) or not all(data):
            return [self.deserialize(d) for d in data]  # raises on the bad one
        return out

    def deserialize(self, data: bytes) -> Any:
        try:
            return _unpackb(data)
        except Exception as e:  # msgpack raises several unrelated exception types
            # Some (FormatError) carry no message; name the type then.
            raise SerdeError(
                f"invalid msgpack data ({str(e) or type(e).__name__}): {data[:60]!r}"
            ) from None


class FunctionSerde(Serde):
    """Wraps plain functions, e.g. ``source("t", deserializer=lambda b: b.decode())``."""

    def __init__(
        self,
        serialize: Callable[[Any], bytes] | None = None,
        deserialize: Callable[[bytes], Any] | None = None,
    ) -> None:
        self._ser = serialize
        self._de = deserialize
        self.name = getattr(deserialize or serialize, "__name__", "function")

    def serialize(self, obj: Any) -> bytes:
        if self._ser is None:
            raise SerdeError(f"serde {self.name!r} can only deserialize")
        return self._ser(obj)

    def deserialize(self, data: bytes) -> Any:
        if self._de is None:
            raise SerdeError(f"serde {self.name!r} can only serialize")
        return self._de(data)


def raw_decoder(serde: Serde) -> Callable[[bytes], Any]:
    """``serde.deserialize`` with no Python frame of its own for the built-in str and
    msgpack serdes (their C decoder), for a caller that decodes one value at a time:
    it gives the same objects, but bad data raises the decoder's own error rather than
    a :class:`SerdeError` (the caller then goes again with ``deserialize``)."""
    if type(serde) is StrSerde:
        return bytes.decode  # UTF-8, strict
    if type(serde) is MsgpackSerde:
        return _unpackb
    return serde.deserialize


#: The types decoded objects may be of for equal bytes to share one (immutable).
SHAREABLE: frozenset[type] = frozenset({str, int, float, bool, bytes, type(None)})


class _Memo(dict[Any, Any]):
    """Argument -> what ``fn`` makes of it, kept when of a type in ``kept`` (None: any);
    at most 65,536 of them (see :func:`remembering_decoder`, :func:`remembering_encoder`)."""

    __slots__ = ("fn", "kept")

    def __init__(self, fn: Callable[[Any], Any], kept: frozenset[type] | None) -> None:
        super().__init__()
        self.fn = fn
        self.kept = kept

    def __missing__(self, arg: Any) -> Any:
        out = self.fn(arg)
        if self.kept is None or type(out) in self.kept:
            if len(self) >= 65_536:
                self.clear()
            self[arg] = out
        return out


def remembering_decoder(serde: Serde) -> Callable[[bytes], Any]:
    """:func:`raw_decoder`, which for msgpack (shuffles: their keys repeat) remembers
    the bytes it decoded to an immutable object: the same object again, with no call
    of the decoder (a dictionary lookup, at C speed)."""
    decode = raw_decoder(serde)
    if type(serde) is not MsgpackSerde:
        return decode
    return _Memo(decode, SHAREABLE).__getitem__


def remembering_encoder(serde: Serde, kind: type) -> Callable[[Any], bytes]:
    """``serde.serialize`` for objects of exactly type ``kind`` (str or int: the keys
    and counts a sink writes again and again), remembering the bytes of each: a
    dictionary lookup, at C speed. Only the built-in serdes are remembered (a user's
    may not give the same bytes twice). Its caller checks the type: equal objects of
    other types (``True``, ``1.0``, a str subclass) may serialize otherwise."""
    if type(serde) not in (StrSerde, JsonSerde, MsgpackSerde):
        return serde.serialize
    return _Memo(serde.serialize, None).__getitem__


SERDES: dict[str, Serde] = {
    s.name: s for s in (StrSerde(), BytesSerde(), JsonSerde(), MsgpackSerde())
}

SerdeLike = Serde | str | Callable[..., Any]


def get_serde(spec: SerdeLike | None, *, default: str = "str", role: str = "deserializer") -> Serde:
    """Resolve a serde given as an instance, a built-in name, or a plain function.

    A plain function is taken as a deserializer when ``role == "deserializer"`` and as a
    serializer otherwise.
    """
    if spec is None:
        spec = default
    if isinstance(spec, Serde):
        return spec
    if isinstance(spec, str):
        try:
            return SERDES[spec]
        except KeyError:
            raise SerdeError(
                f"unknown serde {spec!r}; expected one of {sorted(SERDES)} or a Serde instance"
            ) from None
    if callable(spec):
        if role == "deserializer":
            return FunctionSerde(deserialize=spec)
        return FunctionSerde(serialize=spec)
    raise SerdeError(f"expected a Serde, a serde name or a function; got {type(spec).__name__}")


#: Serde of shuffle topics and state stores: fast and round-trips Python's plain types.
INTERNAL_SERDE: Serde = SERDES["msgpack"]
