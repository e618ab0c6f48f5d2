"""The "json" serde and the ``--output`` writer go through msgspec where it gives what
the json module gives: the same bytes out, the same objects (and errors) in. These
properties hold them to the json module's own results, on many random values and texts
(fixed seeds) full of the cases where msgspec differs: floats with exponents, NaN and
infinities, non-str keys, subclasses, sets, bytes, windowed keys, big ints, escapes,
lone surrogates, NaN literals, other encodings."""

from __future__ import annotations

import collections
import contextlib
import datetime
import enum
import json
import math
import random
import struct
from collections.abc import Callable
from typing import Any

import pytest

from rstreams.dsl.external import RedisStream
from rstreams.errors import SerdeError
from rstreams.runtime import results, streamentries
from rstreams.serde import (
    JsonSerde,
    _json_default,
    _json_object,
    fast_json,
    get_serde,
    json_texts,
)
from rstreams.windowed import Windowed, result_row

SERDE = get_serde("json")


# -- what the json module gives (the serde before msgspec) -------------------------------


def stdlib_serialize(obj: Any) -> bytes:
    """``JsonSerde.serialize`` as it was: json.dumps (str and int: its C parts)."""
    if type(obj) is str:
        return json.encoder.encode_basestring(obj).encode("utf-8")  # type: ignore[attr-defined]
    if type(obj) is int:
        return int.__repr__(obj).encode("utf-8")
    return JsonSerde._text(obj).encode("utf-8")


def stdlib_serialize_many(objs: list[Any]) -> list[bytes]:
    """``JsonSerde.serialize_many`` as it was."""
    return list(map(str.encode, json_texts(objs, JsonSerde._text)))


def stdlib_deserialize(data: bytes) -> Any:
    try:
        return json.loads(data, object_hook=_json_object)
    except ValueError as e:
        raise SerdeError(f"invalid JSON ({e}): {data[:60]!r}") from None


def stdlib_table_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=results._output_default)


def outcome(fn: Callable[[Any], Any], arg: Any) -> tuple[str, Any]:
    """("ok", result) or ("raised", (type, message))."""
    try:
        return "ok", fn(arg)
    except Exception as e:
        return "raised", (type(e), str(e))


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (floats to the bit, NaN too; dict
    keys in the same order; a Windowed's ``closed`` too)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(map(same, a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is Windowed:
        return same([a.key, a.start, a.end, a.closed], [b.key, b.start, b.end, b.closed])
    return bool(a == b)


def same_outcome(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    return a[0] == b[0] and (same(a[1], b[1]) if a[0] == "ok" else a[1] == b[1])


# -- random values ------------------------------------------------------------------------


class Text(str):
    pass


class Count(int):
    pass


class Ratio(float):
    pass


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


Pair = collections.namedtuple("Pair", "left right")

EDGE_FLOATS = [
    0.0, -0.0, 1.0, -1.5, 0.1 + 0.2, 1e16, -1e16, 1e15, 9999999999999998.0, 1e17, 1e22,
    1.5e300, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 1e-4, 0.0001,
    9.999999999999999e-05, 1e-5, 1.23e-5, 1e-7, 123456789012345678.0, 1 / 3,
    float("inf"), float("-inf"), float("nan"),
    math.nextafter(1e-4, 0), math.nextafter(1e-4, 1), math.nextafter(1e16, 0),
]  # fmt: skip
EDGE_INTS = [
    0, -1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64,
    2**100, -(2**200), 10**4299, -(10**4299), 10**4300,
]  # fmt: skip
EDGE_CHARS = '"\\/\x00\x01\x08\x09\x0a\x0c\x0d\x1f\x20\x7f\x80\xa0\xe9\u2028\u2029\ufeff\uffff'
EDGE_CHARS += "\U0001f600\U0010ffff@windowed"


def random_float(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.3:
        return rng.choice(EDGE_FLOATS)
    if r < 0.6:  # any double, by its bits
        return struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
    if r < 0.8:  # a short decimal, at any scale
        return float(f"{rng.randint(-99999, 99999)}e{rng.randint(-25, 25)}")
    return rng.uniform(-1, 1) * 10.0 ** rng.randint(-8, 20)


def random_str(rng: random.Random) -> str:
    chars = []
    for _ in range(rng.randint(0, 8)):
        r = rng.random()
        if r < 0.4:
            chars.append(rng.choice("abcxyz 09_-"))
        elif r < 0.7:
            chars.append(rng.choice(EDGE_CHARS))
        elif r < 0.98:
            chars.append(chr(rng.choice([rng.randrange(0x20), rng.randrange(0xD800),
                                         rng.randrange(0xE000, 0x110000)])))  # fmt: skip
        else:
            chars.append(chr(rng.randrange(0xD800, 0xE000)))  # a lone surrogate
    return "".join(chars)


def random_key(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.6:
        return random_str(rng)
    if r < 0.75:
        return rng.choice([*EDGE_INTS[:-3], rng.randint(-1000, 1000)])
    return rng.choice([True, False, None, random_float(rng), Text("t"), Count(2), (1, 2)])


def random_scalar(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.3:
        return random_str(rng)
    if r < 0.5:
        return rng.choice([*EDGE_INTS, rng.randint(-(10**6), 10**6)])
    if r < 0.75:
        return random_float(rng)
    if r < 0.9:
        return rng.choice([None, True, False])
    return rng.choice(
        [
            Text("sub"), Count(7), Ratio(0.5), Ratio(1e20), Level.HIGH, Color.RED,
            b"bytes", bytearray(b"x"), {1, 2}, frozenset(), datetime.date(2024, 1, 2),
            Windowed("k", 0, 10), Windowed(("a", 1), 5, 15, "idle"), object(),
        ]
    )  # fmt: skip


def random_value(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth >= 4 or r < 0.35:
        return random_scalar(rng)
    n = rng.randint(0, 5)
    if r < 0.55:
        return [random_value(rng, depth + 1) for _ in range(n)]
    if r < 0.6:
        return tuple(random_value(rng, depth + 1) for _ in range(n))
    if r < 0.63:
        return rng.choice([Pair(1, "a"), collections.OrderedDict(a=1), Windowed([1], 0, 1)])
    if r < 0.9:  # mostly plain keys: most values stay plain below the top
        return {random_str(rng): random_value(rng, depth + 1) for _ in range(n)}
    return {random_key(rng): random_value(rng, depth + 1) for _ in range(n)}


def random_values(seed: int, count: int) -> list[Any]:
    rng = random.Random(seed)
    return [random_value(rng) for _ in range(count)]


# -- encoding ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_serialize_writes_json_dumps_bytes_or_raises_its_error(seed: int) -> None:
    plain = 0
    for value in random_values(seed, 2500):
        assert same_outcome(outcome(SERDE.serialize, value), outcome(stdlib_serialize, value)), (
            value
        )
        fast = fast_json(value)
        if fast is not None:
            plain += 1
            assert fast == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    assert plain > 500  # (msgspec did write many of them)


@pytest.mark.parametrize("seed", range(2))
def test_serialize_many_writes_json_dumps_bytes_or_raises(seed: int) -> None:
    rng = random.Random(seed)
    values = random_values(seed + 100, 3000)
    columns: list[list[Any]] = [
        [random_str(rng) for _ in range(50)],
        [rng.choice(EDGE_INTS[:-1]) for _ in range(50)],
        [rng.choice([True, None, 3, "x"]) for _ in range(20)],
        [Windowed(random_str(rng), 0, rng.randrange(10**6), "idle") for _ in range(20)],
    ]
    columns += [values[i : i + rng.randint(1, 40)] for i in range(0, len(values), 40)]
    for column in columns:
        want = outcome(stdlib_serialize_many, column)
        assert same_outcome(outcome(SERDE.serialize_many, column), want), column


def test_floats_write_as_their_repr_without_exponent() -> None:
    """The floats msgspec writes: each as its repr, as json.dumps writes it."""
    rng = random.Random(7)
    floats = [random_float(rng) for _ in range(50_000)]
    floats += [math.nextafter(1e-4, 1) * k for k in range(1, 100)] + [
        float(2**k) for k in range(60)
    ]
    written = 0
    for x in floats:
        raw = fast_json(x)
        if raw is not None:
            written += 1
            assert raw == repr(x).encode(), x
        else:  # (exponents, NaN and infinities go to json.dumps)
            assert "e" in repr(x) or not math.isfinite(x), x
    assert written > 10_000


def test_every_character_is_escaped_as_json_dumps_escapes_it() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert SERDE.serialize(text) == json.dumps(text, ensure_ascii=False).encode()
    assert SERDE.serialize([text]) == json.dumps([text], ensure_ascii=False).encode()
    keys = {chr(c): c for c in range(0x3000)}
    want = json.dumps(keys, ensure_ascii=False, separators=(",", ":")).encode()
    assert SERDE.serialize(keys) == want
    with pytest.raises(UnicodeEncodeError):  # (as ever: a lone surrogate is no UTF-8)
        SERDE.serialize("\ud800")
    with pytest.raises(UnicodeEncodeError):
        SERDE.serialize({"k": "\udfff"})


def test_json_dumps_edge_cases() -> None:
    cases = [
        (1e16, b"1e+16"), (1e-7, b"1e-07"), (0.1 + 0.2, b"0.30000000000000004"),
        (1e-5, b"1e-05"), (float("inf"), b"Infinity"), (float("-inf"), b"-Infinity"),
        (2**64, b"18446744073709551616"), ((1, (2,)), b"[1,[2]]"), (Text("s"), b'"s"'),
        (Count(3), b"3"), (Ratio(1e16), b"1e+16"), (Level.HIGH, b"3"),
        ("\u2028\x7f\x1f", '"\u2028\x7f\\u001f"'.encode()), (Pair(1, 2), b"[1,2]"),
    ]  # fmt: skip
    for value, want in cases:
        assert SERDE.serialize(value) == want, value
        assert SERDE.serialize_many([value, value]) == [want, want], value
    assert SERDE.serialize(float("nan")) == b"NaN"
    assert SERDE.serialize({7: 1, 1.5: 2, True: 3, None: 4, 2**70: 5}) == (
        b'{"7":1,"1.5":2,"true":3,"null":4,"1180591620717411303424":5}'
    )
    assert SERDE.serialize({"b": 1, "a": 2}) == b'{"b":1,"a":2}'  # (not sorted)
    w = Windowed("k", 0, 10, "idle")
    assert SERDE.serialize(w) == b'{"@windowed":["k",0,10],"closed":"idle"}'
    assert SERDE.serialize([w]) == b'[{"@windowed":["k",0,10],"closed":"idle"}]'
    for bad in ({1, 2}, b"x", datetime.date(2024, 1, 1), Color.RED, {(1, 2): 3}, [10**4300]):
        with pytest.raises(SerdeError, match="is not JSON-serializable"):
            SERDE.serialize(bad)
    with pytest.raises(SerdeError, match="is not JSON-serializable"):
        SERDE.serialize_many([{"a": 1}, {"b": {1}}])
    with pytest.raises(ValueError, match="Exceeds the limit"):  # (as ever: not a SerdeError)
        SERDE.serialize(10**4300)
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        SERDE.serialize(deep)


# -- decoding ----------------------------------------------------------------------------

SNIPPETS = [
    b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"\\u", b"0", b"1", b"9", b"-", b"+",
    b".", b"e", b"E", b" ", b"\n", b"\t", b"\r", b"\x00", b"\x1f", b"\x7f", b"\xc3\xa9",
    b"\xed\xa0\x80", b"\xc0\xaf", b"\xff", b"\xef\xbb\xbf", b"\xe2\x80\xa8", b"d800", b"dc00",
    b"true", b"null", b"NaN", b"Infinity", b"-Infinity", b"1e400", b"@windowed",
    b'"@windowed"', b"\\u0040", b"\\u0077", b"\\ud83d\\ude00", b"\\ud800", b"9" * 30,
]  # fmt: skip


def random_text(rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.15:  # windowed keys, some with escapes, some malformed
        key = rng.choice(['"@windowed"', '"\\u0040windowed"', '"@wi\\u006edowed"', '"@windowe"'])
        body = rng.choice(['["k",0,10]', '[["a",1],5,15]', "5", "[1]", "null", '"x"'])
        extra = rng.choice(["", ',"closed":"idle"', ',"closed":null', ',"x":1,"y":2'])
        text = f"{{{key}:{body}{extra}}}"
        if rng.random() < 0.5:
            text = f'[{text},{{"v":{text}}}]'
        return text.encode()
    value = random_value(rng)
    try:
        text = json.dumps(
            value,
            ensure_ascii=rng.random() < 0.5,
            separators=rng.choice([(",", ":"), (", ", ": ")]),
            indent=rng.choice([None, None, 0, 2]),
            default=_json_default,
        )
    except (TypeError, ValueError):
        text = json.dumps(random_str(rng), ensure_ascii=rng.random() < 0.5)
    if rng.random() < 0.1:
        text = rng.choice([" ", "\n", "\t", ""]) + text + rng.choice([" ", "\r\n", ""])
    if rng.random() < 0.05:
        return text.encode(
            rng.choice(["utf-16", "utf-16-le", "utf-32", "utf-8-sig"]), "surrogatepass"
        )
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    for _ in range(rng.choice([0, 0, 1, 2, 3])):  # damage
        at = rng.randint(0, len(data))
        r = rng.random()
        if r < 0.4:
            data[at:at] = rng.choice(SNIPPETS)
        elif r < 0.7:
            del data[at : at + rng.randint(1, 3)]
        else:
            data[at : at + 1] = rng.choice(SNIPPETS)
    return bytes(data)


@pytest.mark.parametrize("seed", range(4))
def test_deserialize_gives_json_loads_objects_or_its_error(seed: int) -> None:
    rng = random.Random(1000 + seed)
    ok = 0
    for _ in range(5000):
        data = random_text(rng)
        want = outcome(stdlib_deserialize, data)
        assert same_outcome(outcome(SERDE.deserialize, data), want), data
        ok += want[0] == "ok"
    assert ok > 1500


@pytest.mark.parametrize("seed", range(2))
def test_deserialize_many_gives_json_loads_objects_or_raises(seed: int) -> None:
    rng = random.Random(2000 + seed)
    for _ in range(300):
        n = rng.randint(1, 30)
        if rng.random() < 0.5:  # valid texts only (values written by json.dumps)
            texts = []
            while len(texts) < n:
                data = random_text(rng)
                if outcome(stdlib_deserialize, data)[0] == "ok":
                    texts.append(data)
        else:
            texts = [random_text(rng) for _ in range(n)]
        want = outcome(lambda ds: [stdlib_deserialize(d) for d in ds], texts)
        assert same_outcome(outcome(SERDE.deserialize_many, texts), want), texts


def test_deserialize_edge_cases() -> None:
    nan = SERDE.deserialize(b"[NaN]")[0]
    assert math.isnan(nan)
    assert SERDE.deserialize(b"[Infinity,-Infinity,1e400]") == [math.inf, -math.inf, math.inf]
    assert SERDE.deserialize(b'"\\ud800"') == "\ud800"
    assert SERDE.deserialize('"\ud800"'.encode("utf-8", "surrogatepass")) == "\ud800"
    assert SERDE.deserialize('{"a": 1}'.encode("utf-16")) == {"a": 1}
    assert SERDE.deserialize(b"\xef\xbb\xbf[1]") == [1]
    assert SERDE.deserialize(b'{"a":1,"b":2,"a":3}') == {"a": 3, "b": 2}
    assert list(SERDE.deserialize(b'{"a":1,"b":2,"a":3}')) == ["a", "b"]
    big = b"-" + b"9" * 4300  # (msgspec refuses it, json.loads reads it)
    assert SERDE.deserialize(big) == -int(b"9" * 4300)
    for text in (b'{"\\u0040windowed":["k",0,10]}', b'[{"@windowed":["k",0,10],"closed":"idle"}]'):
        assert same(SERDE.deserialize(text), stdlib_deserialize(text))
    assert SERDE.deserialize(b'{"@windowed":["k",0,10]}') == Windowed("k", 0, 10)
    assert SERDE.deserialize_many([b"1", b'{"@windowed":["k",0,10]}']) == [1, Windowed("k", 0, 10)]
    assert SERDE.deserialize_many([b"1", b"NaN", b"[2]"])[2] == [2]
    windowed = [b'{"@windowed":["k",0,10],"closed":"idle"}', b'{"@windowed":[["a"],5,15]}']
    assert same(SERDE.deserialize_many(windowed), [stdlib_deserialize(d) for d in windowed])
    assert SERDE.deserialize_many(['{"a": 1}', b"2"]) == [{"a": 1}, 2]  # (str: as ever)


@pytest.mark.parametrize(
    "data", [b"{oops", b"\xff", b"", b"[1,]", b'"\x00"', b"1 2", b'"\\ud800\\u0041', b"\xed\xa0"]
)
def test_bad_json_errors_are_json_loads_errors(data: bytes) -> None:
    with pytest.raises(SerdeError, match=r"^invalid JSON \(") as raised:
        SERDE.deserialize(data)
    with pytest.raises(SerdeError) as raised_many:
        SERDE.deserialize_many([b"1", data])
    assert (
        str(raised.value) == str(raised_many.value) == str(outcome(stdlib_deserialize, data)[1][1])
    )


# -- the --output writer ------------------------------------------------------------------


def stdlib_table_lines(table: dict[Any, Any]) -> list[str]:
    """``table_lines`` as it was."""
    if any(type(k) is Windowed for k in table):
        return sorted(stdlib_table_json(result_row(k, v)) + "\n" for k, v in table.items())
    keys = json_texts(list(table), stdlib_table_json)
    values = json_texts(list(table.values()), stdlib_table_json)
    return sorted(f'{{"key": {k}, "value": {v}}}\n' for k, v in zip(keys, values))


@pytest.mark.parametrize("seed", range(2))
def test_table_lines_are_json_dumps_lines(seed: int) -> None:
    rng = random.Random(3000 + seed)
    values = random_values(4000 + seed, 3000)
    for value in values:
        assert same_outcome(outcome(results._table_json, value), outcome(stdlib_table_json, value))
    for i in range(0, len(values), 50):
        chunk = values[i : i + 50]
        keys = [
            rng.choice([random_str(rng), rng.randint(0, 99), Windowed("k", 0, i)]) for _ in chunk
        ]
        table = dict(zip(keys, chunk))
        if rng.random() < 0.5:  # (mostly all of one kind, as tables are)
            table = {k: v for k, v in table.items() if type(k) is str}
        assert same_outcome(outcome(results.table_lines, table), outcome(stdlib_table_lines, table))


# -- Redis stream entries -----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(2))
def test_stream_entries_hold_json_dumps_text(seed: int) -> None:
    """A whole-entry source's value and a sink's number and structure fields: the ASCII
    JSON json.dumps writes (DEL and non-ASCII escaped; anything else as its str)."""
    for value in random_values(5000 + seed, 3000):
        if isinstance(value, (str, bytes)):  # (as they are: not JSON)
            continue
        want = outcome(lambda v: json.dumps(v, separators=(",", ":"), default=str), value)
        assert same_outcome(outcome(streamentries._field, value), want), value
    rng = random.Random(seed)
    spec = RedisStream("s")
    for _ in range(2000):
        fields = {}
        for _ in range(rng.randint(0, 5)):
            name, text = random_str(rng), random_str(rng)
            with contextlib.suppress(UnicodeEncodeError):  # (lone surrogates: not UTF-8)
                fields[name.encode()] = text.encode()
        if rng.random() < 0.1:
            fields[b"bad"] = b"\xff\x7f"
        _, _, raw, _ = streamentries.entry_record(spec, b"1-0", fields)
        doc = {k.decode("utf-8", "backslashreplace"): v.decode("utf-8", "backslashreplace")
               for k, v in fields.items()}  # fmt: skip
        assert raw == json.dumps(doc, separators=(",", ":")).encode(), fields
