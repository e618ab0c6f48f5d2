"""Serdes: round trips, type rules and clear errors."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rstreams import RStreamsError, Serde, SerdeError, get_serde
from rstreams.serde import (
    INTERNAL_SERDE,
    SERDES,
    FunctionSerde,
    MsgpackSerde,
    StrSerde,
    raw_decoder,
)

msgpack = get_serde("msgpack")
json = get_serde("json")
text = get_serde("str")
raw = get_serde("bytes")


# -- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**63),
        2**64 - 1,
        1.5,
        "",
        "héllo wörld ✓",
        b"\x00\xff",
        [],
        (),
        (1, "a", None),
        [1, (2, (3, [4]))],
        {"word": ("a", 1), "nested": {"x": [1.0, None]}},
        {(1, "k"): "tuple key", 7: "int key", b"b": "bytes key"},
    ],
    ids=repr,
)
def test_msgpack_round_trips_plain_values_and_keeps_tuples(value: Any) -> None:
    back = msgpack.deserialize(msgpack.serialize(value))
    assert back == value
    assert type(back) is type(value)
    if isinstance(value, list) and value:
        assert type(back[1]) is tuple and type(back[1][1]) is tuple


def test_msgpack_keeps_nan() -> None:
    assert math.isnan(msgpack.deserialize(msgpack.serialize(float("nan"))))


def test_msgpack_is_the_internal_serde() -> None:
    assert INTERNAL_SERDE is SERDES["msgpack"]
    assert isinstance(INTERNAL_SERDE, MsgpackSerde)
    # Equal values serialize to equal bytes: keys are looked up and hashed by their bytes.
    assert msgpack.serialize(("a", 1)) == msgpack.serialize(("a", 1))
    assert msgpack.serialize(("a", 1)) != msgpack.serialize(["a", 1])


@pytest.mark.parametrize(
    "value", [None, True, 3, 2.5, "ü", [1, "a"], {"a": {"b": [None, False]}}], ids=repr
)
def test_json_round_trips(value: Any) -> None:
    assert json.deserialize(json.serialize(value)) == value


def test_json_is_compact_utf8_and_turns_tuples_into_lists() -> None:
    assert json.serialize({"n": 1, "w": "é"}) == '{"n":1,"w":"é"}'.encode()
    assert json.deserialize(json.serialize((1, (2, 3)))) == [1, [2, 3]]


@pytest.mark.parametrize("value", ["", "plain", "ünïcödé ✓ 𝄞"])
def test_str_round_trips(value: str) -> None:
    assert text.serialize(value) == value.encode("utf-8")
    assert text.deserialize(text.serialize(value)) == value


def test_str_serialize_passes_bytes_through() -> None:
    assert text.serialize(b"\x01") == b"\x01"


def test_bytes_round_trip() -> None:
    assert raw.serialize(bytearray(b"ab")) == b"ab"
    assert raw.serialize(memoryview(b"cd")) == b"cd"
    assert raw.deserialize(b"\x00") == b"\x00"


def test_deserialize_many() -> None:
    assert text.deserialize_many([b"a", "é".encode()]) == ["a", "é"]
    assert json.deserialize_many([b"1", b'"x"']) == [1, "x"]
    assert raw.deserialize_many([b"a"]) == [b"a"]
    with pytest.raises(SerdeError, match=r"invalid UTF-8 at byte 1"):
        text.deserialize_many([b"ok", b"a\xff"])


# -- errors -----------------------------------------------------------------------------


def test_str_rejects_non_text_and_points_at_other_serdes() -> None:
    with pytest.raises(
        SerdeError, match=r"'str' serde expects a str value; got int 42; use serializer='json'"
    ):
        text.serialize(42)


def test_invalid_utf8_names_the_byte() -> None:
    with pytest.raises(SerdeError, match=r"invalid UTF-8 at byte 3: b'caf\\xe9'"):
        text.deserialize(b"caf\xe9")


def test_bytes_rejects_str() -> None:
    with pytest.raises(SerdeError, match="'bytes' serde expects bytes; got str"):
        raw.serialize("text")


def test_json_errors() -> None:
    with pytest.raises(
        SerdeError, match=r"value of type set is not JSON-serializable .* map it to"
    ):
        json.serialize({1, 2})
    with pytest.raises(SerdeError, match=r"invalid JSON \(.*\): b'\{oops'"):
        json.deserialize(b"{oops")
    with pytest.raises(SerdeError, match="invalid JSON"):
        json.deserialize(b"\xff")


@pytest.mark.parametrize("value", [{1, 2}, object(), 1j, [frozenset()], {"k": {1}}])
def test_msgpack_rejects_what_it_can_not_store(value: Any) -> None:
    with pytest.raises(
        SerdeError, match=r"can not be stored .* hold None/bool/int/float/str/bytes/list/tuple/dict"
    ):
        msgpack.serialize(value)


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, [1, (2**70,)]])
def test_msgpack_says_which_int_is_out_of_range(value: Any) -> None:
    with pytest.raises(SerdeError, match=r"int -?\d+ is outside msgpack's range"):
        msgpack.serialize(value)


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (b"\xc1", "FormatError"),  # a reserved byte; msgpack's exception has no message
        (b"\x92\x01", "incomplete input"),
        (b"\x01\x02", "extra data"),
    ],
)
def test_msgpack_invalid_data_says_why(data: bytes, detail: str) -> None:
    with pytest.raises(SerdeError, match=rf"invalid msgpack data \(.*{detail}.*\): ") as info:
        msgpack.deserialize(data)
    assert "()" not in str(info.value)


def test_serde_errors_are_value_errors() -> None:
    with pytest.raises(ValueError) as info:
        json.deserialize(b"nope")
    assert isinstance(info.value, RStreamsError)


# -- get_serde --------------------------------------------------------------------------


def test_get_serde_by_name_instance_default_and_function() -> None:
    for name in ("str", "bytes", "json", "msgpack"):
        assert get_serde(name).name == name
    assert get_serde(None) is SERDES["str"]
    assert get_serde(None, default="json") is SERDES["json"]
    custom = FunctionSerde(deserialize=bytes.upper)
    assert get_serde(custom) is custom

    de = get_serde(lambda data: data.decode()[::-1])
    assert de.deserialize(b"abc") == "cba"
    with pytest.raises(SerdeError, match="can only deserialize"):
        de.serialize("x")

    ser = get_serde(lambda v: str(v).encode(), role="serializer")
    assert ser.serialize(12) == b"12"
    with pytest.raises(SerdeError, match="can only serialize"):
        ser.deserialize(b"12")


def test_get_serde_errors() -> None:
    with pytest.raises(
        SerdeError,
        match=r"unknown serde 'yaml'; expected one of \['bytes', 'json', 'msgpack', 'str'\]",
    ):
        get_serde("yaml")
    with pytest.raises(SerdeError, match="expected a Serde, a serde name or a function; got int"):
        get_serde(3)  # type: ignore[arg-type]


def test_custom_serde_subclass() -> None:
    class Upper(Serde):
        name = "upper"

        def serialize(self, obj: Any) -> bytes:
            return obj.upper().encode()

        def deserialize(self, data: bytes) -> Any:
            return data.decode().lower()

    s = get_serde(Upper())
    assert s.serialize("ab") == b"AB"
    assert s.deserialize_many([b"AB", b"C"]) == ["ab", "c"]  # the default loop
    assert repr(s) == "Upper()"
    with pytest.raises(NotImplementedError):
        Serde().serialize(1)


# -- the one-value decoder of the driver's path -------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "",
        "wörd",
        1,
        -(2**63),
        2**64 - 1,
        1.5,
        True,
        None,
        b"\x00",
        (1, "a"),
        [1, (2,)],
        {"k": (1,)},
    ],
)
def test_raw_decoder_gives_what_deserialize_gives(value: Any) -> None:
    data = msgpack.serialize(value)
    got = raw_decoder(msgpack)(data)
    assert got == msgpack.deserialize(data) and type(got) is type(msgpack.deserialize(data))
    if isinstance(value, str):
        assert raw_decoder(text)(text.serialize(value)) == value


def test_raw_decoder_raises_on_bad_data_and_is_deserialize_for_other_serdes() -> None:
    with pytest.raises(ValueError):
        raw_decoder(msgpack)(b"\xc1")
    with pytest.raises(UnicodeDecodeError):
        raw_decoder(text)(b"\xff")
    assert raw_decoder(json) == json.deserialize

    class Upper(StrSerde):  # a subclass may decode otherwise: its own deserialize
        def deserialize(self, data: bytes) -> Any:
            return data.decode().upper()

    assert raw_decoder(Upper())(b"a") == "A"
