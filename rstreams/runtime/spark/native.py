"""Built-in functions (:mod:`rstreams.functions`) as native Spark SQL expressions.

One translation per built-in class (``functools.singledispatch``); a built-in, or a
form of one, that has no exact native equivalent translates to None and the compiler
runs its Python implementation instead (same results, just not native).

Exactness. Python and the JVM disagree in a few places, and each is handled here:

- Regular expressions: patterns are parsed with Python's own parser and re-emitted for
  ``java.util.regex``. ``\\w``, ``\\d``, ``\\b`` follow Python's Unicode definitions
  (Java's are ASCII-only, and ``(?U)\\w`` also matches combining marks, ZWJ and
  connector punctuation, which Python's does not). ``\\s`` becomes Python's exact
  whitespace set (which includes ``\\x1c``-``\\x1f``), ``.`` and ``$`` get Python's
  line semantics (``(?d)``), ``\\Z`` becomes ``\\z``, literals are emitted as
  ``\\x{...}`` so Java class syntax (``[``, ``&&``) can not change their meaning.
  IGNORECASE/LOCALE patterns and conditional groups stay in Python.
- Unicode versions: Python's ``unicodedata`` and the JVM's (and ICU's, which Spark uses
  for ``lower``/``upper``) are different Unicode versions. :func:`calibrate` asks the
  running Spark, once per JVM (and caches it on disk), which characters it classifies
  or case-maps differently from this Python, and the translations patch exactly those:
  extra/removed characters in the word and digit classes, and a guarded
  placeholder-translate around ``lower``/``upper`` for characters whose case mapping
  differs.
- ``str.strip()`` strips Python's whitespace set, given to ``btrim`` explicitly (Spark's
  ``trim`` strips only spaces).
- JSON: :class:`~rstreams.functions.JsonField` is specified so that Spark's
  ``parse_json``/``variant_get`` and Python agree (see its docstring).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from rstreams import functions as B
from rstreams.runtime.spark import encoding as enc

try:  # Python >= 3.11
    import re._constants as _c
    import re._parser as _parser
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c
    import sre_parse as _parser

log = logging.getLogger("rstreams.spark")

_CALIBRATION_VERSION = 3
#: Case mapping is tested after this character: it is non-ASCII (Spark maps pure-ASCII
#: strings on a fast path that ignores the JVM's locale, other strings with the
#: locale's rules) and neither cased nor case-ignorable (no final-sigma context).
_CONTEXT = "\u00d7"
_SKIP = {0xFEFF}  # Spark's UTF-32 decoder eats a leading BOM: not testable this way


# -- calibration --------------------------------------------------------------------------


@attrs.frozen
class Calibration:
    """What this Spark classifies or case-maps differently from this Python."""

    word_extra: tuple[int, ...] = ()  # Python \w, not Java [\p{L}\p{N}_]
    word_removed: tuple[int, ...] = ()  # Java [\p{L}\p{N}_], not Python \w
    digit_extra: tuple[int, ...] = ()
    digit_removed: tuple[int, ...] = ()
    lower_fix: tuple[tuple[int, str], ...] = ()  # code point -> Python's lower()
    upper_fix: tuple[tuple[int, str], ...] = ()
    #: Extra characters the JVM does not know at all (\p{Cn} there): testing \p{Cn}
    #: first keeps the patch off the hot path of characters Java does know.
    unassigned: tuple[int, ...] = ()

    @functools.cached_property
    def word(self) -> str:
        return _class_body(r"\p{L}\p{N}_", self.word_extra, self.word_removed, self.unassigned)

    @functools.cached_property
    def digit(self) -> str:
        return _class_body(r"\p{Nd}", self.digit_extra, self.digit_removed, self.unassigned)


def _ranges(cps: tuple[int, ...] | list[int]) -> str:
    out: list[str] = []
    cps = sorted(cps)
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        out.append(_lit(cps[i]) if i == j else f"{_lit(cps[i])}-{_lit(cps[j])}")
        i = j + 1
    return "".join(out)


def _class_body(
    base: str, extra: tuple[int, ...], removed: tuple[int, ...], unassigned: tuple[int, ...]
) -> str:
    """A Java class body (no brackets) equal to Python's class."""
    unknown = set(unassigned)
    cn = [c for c in extra if c in unknown]
    known = [c for c in extra if c not in unknown]
    body = base
    if cn:
        body += f"[\\p{{Cn}}&&[{_ranges(cn)}]]"
    if known:
        body += f"[{_ranges(known)}]"
    if removed:
        body = f"[{body}]&&[^{_ranges(removed)}]"
    return body


_PY_WORD = re.compile(r"\w")
_PY_DIGIT = re.compile(r"\d")


def _cache_file(key: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "rstreams" / f"spark-unicode-{key}.json"


_calibrations: dict[str, Calibration] = {}


def calibrate(spark: SparkSession, *, case: bool = True) -> Calibration:
    """Compare this Spark's regex classes and case mapping with Python's, for every
    code point (one Spark job, then cached in memory and under ~/.cache/rstreams).

    With ``case=False`` the case-mapping differences are left unpatched."""
    cal = _calibrate(spark)
    return cal if case else attrs.evolve(cal, lower_fix=(), upper_fix=())


def _calibrate(spark: SparkSession) -> Calibration:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    java = jvm.java.lang.System.getProperty("java.version")
    locale = jvm.java.util.Locale.getDefault().toString()
    try:
        icu = spark.conf.get("spark.sql.icu.caseMappings.enabled")
    except Exception:  # an older Spark without the setting
        icu = "none"
    key = "-".join(
        [
            str(_CALIBRATION_VERSION),
            spark.version,
            str(java),
            f"locale={locale}",
            f"icu={icu}",
            unicodedata.unidata_version,
        ]
    )
    if key in _calibrations:
        return _calibrations[key]
    path = _cache_file(key)
    try:
        data = json.loads(path.read_text())
        cal = Calibration(
            tuple(data["word_extra"]),
            tuple(data["word_removed"]),
            tuple(data["digit_extra"]),
            tuple(data["digit_removed"]),
            tuple((int(c), s) for c, s in data["lower_fix"]),
            tuple((int(c), s) for c, s in data["upper_fix"]),
            tuple(data.get("unassigned", ())),
        )
    except (OSError, ValueError, KeyError, TypeError):
        cal = _measure(spark)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(attrs.asdict(cal)))
            tmp.replace(path)
        except OSError as e:  # a read-only home is fine: measure again next time
            log.debug("can not cache the Unicode calibration: %s", e)
    _calibrations[key] = cal
    return cal


def _measure(spark: SparkSession) -> Calibration:
    java_w, java_d, spark_lower, spark_upper = _spark_view(spark)
    w_extra: list[int] = []
    w_removed: list[int] = []
    d_extra: list[int] = []
    d_removed: list[int] = []
    lower_fix: list[tuple[int, str]] = []
    upper_fix: list[tuple[int, str]] = []
    # Python's answer for every code point, against Spark's.
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or cp in _SKIP:
            continue
        ch = chr(cp)
        py_w = _PY_WORD.match(ch) is not None
        if py_w != (cp in java_w):
            (w_extra if py_w else w_removed).append(cp)
        py_d = _PY_DIGIT.match(ch) is not None
        if py_d != (cp in java_d):
            (d_extra if py_d else d_removed).append(cp)
        in_ctx = _CONTEXT + ch
        py_lower, py_upper = in_ctx.lower(), in_ctx.upper()
        if py_lower != spark_lower.get(cp, in_ctx):
            lower_fix.append((cp, py_lower[1:]))
        if py_upper != spark_upper.get(cp, in_ctx):
            upper_fix.append((cp, py_upper[1:]))
    cal = Calibration(
        tuple(w_extra),
        tuple(w_removed),
        tuple(d_extra),
        tuple(d_removed),
        tuple(lower_fix),
        tuple(upper_fix),
        _unassigned(spark, sorted(set(w_extra) | set(d_extra))),
    )
    log.info(
        "Unicode calibration: %d word, %d digit, %d lower, %d upper differences",
        len(w_extra) + len(w_removed),
        len(d_extra) + len(d_removed),
        len(lower_fix),
        len(upper_fix),
    )
    return cal


def _spark_view(spark: SparkSession) -> tuple[set[int], set[int], dict[int, str], dict[int, str]]:
    """Spark's answer for every code point, in one job: the word characters and the
    digits of its (Java) regexes, and what its lower() and upper() make of the code point
    after ``_CONTEXT`` where that changes it."""
    c = F.col("c")
    ctx = F.concat(F.lit(_CONTEXT), c)
    cps = (
        spark.range(0, 0x110000, numPartitions=4)
        .where(~F.col("id").between(0xD800, 0xDFFF))
        .select(
            "id",
            F.decode(F.unhex(F.lpad(F.hex("id"), 8, "0")), "UTF-32").alias("c"),
        )
    )
    row = cps.agg(
        F.collect_list(F.when(c.rlike(r"^[\p{L}\p{N}_]$"), F.col("id"))).alias("w"),
        F.collect_list(F.when(c.rlike(r"^\p{Nd}$"), F.col("id"))).alias("d"),
        F.collect_list(F.when(F.lower(ctx) != ctx, F.struct("id", F.lower(ctx)))).alias("lo"),
        F.collect_list(F.when(F.upper(ctx) != ctx, F.struct("id", F.upper(ctx)))).alias("up"),
    ).collect()[0]
    return (
        set(row["w"]),
        set(row["d"]),
        {r[0]: r[1] for r in row["lo"]},
        {r[0]: r[1] for r in row["up"]},
    )


def _unassigned(spark: SparkSession, extras: list[int]) -> tuple[int, ...]:
    """Which of ``extras`` (code points Python counts as word characters or digits and
    Spark does not) Spark's Unicode tables do not assign at all."""
    if not extras:
        return ()
    chars = spark.createDataFrame([(cp, chr(cp)) for cp in extras], "id long, c string")
    found = chars.where(F.col("c").rlike(r"^\p{Cn}$")).select("id").collect()
    return tuple(sorted(r[0] for r in found))


# -- regular expressions ------------------------------------------------------------------


def _lit(cp: int) -> str:
    return f"\\x{{{cp:x}}}"


_SPACE_BODY = _ranges([ord(c) for c in B.PY_WHITESPACE])
_ASCII_CLASSES = {"word": "a-zA-Z0-9_", "digit": "0-9", "space": r"\x{9}-\x{d}\x{20}"}


class _Decline(Exception):
    """The pattern has no exact Java equivalent; keep it in Python."""


def java_regex(pattern: str, flags: int, cal: Calibration) -> tuple[str, int] | None:
    """(Java pattern, group index for ``regexp_extract_all``) equivalent to
    ``re.findall(pattern, s, flags)``, or None when there is none."""
    try:
        parsed = _parser.parse(pattern, flags)
    except re.error:
        return None
    all_flags = parsed.state.flags
    if all_flags & (re.IGNORECASE | re.LOCALE):
        return None
    groups = parsed.state.groups - 1
    if groups > 1:
        return None  # findall returns tuples
    classes = (
        dict(_ASCII_CLASSES)
        if all_flags & re.ASCII
        else {"word": cal.word, "digit": cal.digit, "space": _SPACE_BODY}
    )
    emitter = _Emitter(classes)
    try:
        body = emitter.seq(list(parsed))
    except _Decline:
        return None
    prefix = (
        "(?d" + ("m" if all_flags & re.MULTILINE else "") + ("s" if all_flags & re.DOTALL else "")
    )
    return f"{prefix}){body}", groups


class _Emitter:
    def __init__(self, classes: dict[str, str]) -> None:
        self.classes = classes
        self.behind = 0  # depth of lookbehind assertions around the current item

    def wrap(self, klass: str) -> str:
        """A class (``[...]``) as emitted here. Java steps back one UTF-16 unit in a
        lookbehind unless the pattern's text holds a supplementary character, so inside
        one a class carries U+10FFFF (a noncharacter) and excludes it again."""
        if not self.behind:
            return klass
        return f"[{klass}{chr(0x10FFFF)}&&[^\\x{{10ffff}}]]"

    def category(self, cat: Any, in_class: bool) -> str:
        name = str(cat).lower()
        negate = "not_" in name
        for kind in ("word", "digit", "space"):
            if kind in name:
                body = self.classes[kind]
                klass = f"[^{body}]" if negate else f"[{body}]"
                return klass if in_class else self.wrap(klass)
        raise _Decline(name)

    def seq(self, items: list[tuple[Any, Any]]) -> str:
        return "".join(self.item(op, av) for op, av in items)

    def atom(self, items: Any) -> str:
        text = self.seq(list(items))
        return f"(?:{text})"

    def item(self, op: Any, av: Any) -> str:
        if op is _c.LITERAL:
            return chr(av) if self.behind and av > 0xFFFF else _lit(av)
        if op is _c.NOT_LITERAL:
            return self.wrap(f"[^{_lit(av)}]")
        if op is _c.ANY:
            return self.wrap("[^\\x{a}]") if self.behind else "."
        if op is _c.IN:
            return self.wrap(self.klass(av))
        if op is _c.BRANCH:
            return "(?:" + "|".join(self.seq(list(alt)) for alt in av[1]) + ")"
        if op is _c.SUBPATTERN:
            group, add, dele, sub = av
            if add or dele:
                raise _Decline("inline flags")
            inner = self.seq(list(sub))
            return f"({inner})" if group is not None else f"(?:{inner})"
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) or op is getattr(_c, "POSSESSIVE_REPEAT", None):
            lo, hi, sub = av
            if hi is _c.MAXREPEAT:
                q = {0: "*", 1: "+"}.get(lo, f"{{{lo},}}")
            elif (lo, hi) == (0, 1):
                q = "?"
            else:
                q = f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
            q += "?" if op is _c.MIN_REPEAT else "+" if op is not _c.MAX_REPEAT else ""
            return self.atom(sub) + q
        if op is _c.AT:
            return self.at(av)
        if op in (_c.ASSERT, _c.ASSERT_NOT):
            direction, sub = av
            if direction == 1:
                return f"(?{'=' if op is _c.ASSERT else '!'}{self.seq(list(sub))})"
            self.behind += 1
            try:
                inner = self.seq(list(sub))
            finally:
                self.behind -= 1
            return f"(?{'<=' if op is _c.ASSERT else '<!'}{inner})"
        if op is getattr(_c, "ATOMIC_GROUP", None):
            return f"(?>{self.seq(list(av))})"
        if op is _c.GROUPREF:
            return f"(?:\\{av})"
        if op is _c.CATEGORY:
            return self.category(av, in_class=False)
        raise _Decline(str(op))

    def at(self, code: Any) -> str:
        if code in (_c.AT_BEGINNING, _c.AT_BEGINNING_LINE):
            return "^"
        if code in (_c.AT_END, _c.AT_END_LINE):
            return "$"
        if code is _c.AT_BEGINNING_STRING:
            return r"\A"
        if code is _c.AT_END_STRING:
            return r"\z"
        w = f"[{self.classes['word']}]"
        self.behind += 1
        wb = self.wrap(w)
        self.behind -= 1
        if code in (_c.AT_BOUNDARY, getattr(_c, "AT_UNI_BOUNDARY", None)):
            return f"(?:(?<={wb})(?!{w})|(?<!{wb})(?={w}))"
        if code in (_c.AT_NON_BOUNDARY, getattr(_c, "AT_UNI_NON_BOUNDARY", None)):
            return f"(?:(?<={wb})(?={w})|(?<!{wb})(?!{w}))"
        raise _Decline(str(code))

    def klass(self, items: list[tuple[Any, Any]]) -> str:
        negate = False
        parts: list[str] = []
        for op, av in items:
            if op is _c.NEGATE:
                negate = True
            elif op is _c.LITERAL:
                parts.append(_lit(av))
            elif op is _c.RANGE:
                parts.append(f"{_lit(av[0])}-{_lit(av[1])}")
            elif op is _c.CATEGORY:
                parts.append(self.category(av, in_class=True))
            else:
                raise _Decline(str(op))
        if not parts:
            raise _Decline("empty class")
        return ("[^" if negate else "[") + "".join(parts) + "]"


# -- translations -------------------------------------------------------------------------


@attrs.frozen
class Field:
    """The input value of a step: its layout and its columns."""

    kind: str
    cols: dict[str, Column]  # suffix -> column
    #: The str column is never null (text read from files, or a native str result).
    nonnull: bool = False

    @property
    def text(self) -> Column | None:
        return self.cols.get("s")


@attrs.frozen
class Native:
    """A native step result: the new field and the rows it fails on.

    ``error`` is a boolean Column (None: never fails) and ``message`` the
    ``"TypeError: ..."`` text for those rows.
    """

    kind: str
    cols: dict[str, Column]
    error: Column | None = None
    message: Column | None = None
    #: A ``b`` column holds only msgpack booleans (so truthiness is native).
    bool_binary: bool = False


def type_name(field: Field) -> Column:
    """The Python type name of the value, for error messages."""
    cases = {"s": "str", "l": "int", "d": "float", "b": "object", "m": "object"}
    expr = None
    for suffix, name in cases.items():
        col = field.cols.get(suffix)
        if col is None:
            continue
        expr = (F.when if expr is None else expr.when)(col.isNotNull(), F.lit(name))
    return F.lit("NoneType") if expr is None else expr.otherwise(F.lit("NoneType"))


def _str_input(field: Field, what: str) -> tuple[Column, Column | None, Column] | None:
    """(text column, error condition or None, message) for a built-in taking a str."""
    if field.kind not in (enc.STR, enc.ANY) or field.text is None:
        return None
    s = field.text
    msg = F.concat(F.lit(f"TypeError: {what} expects a str; got "), type_name(field))
    if field.kind == enc.STR and field.nonnull:
        return s, None, msg
    return s, s.isNull(), msg


def _placeholder_chars(n: int) -> list[str]:
    """Noncharacters (never assigned, case-stable) used to shield a character from
    Spark's case mapping: U+FDD0..U+FDEF, then U+xFFFE/U+xFFFF of planes 1-16."""
    out = [chr(c) for c in range(0xFDD0, 0xFDF0)]
    for plane in range(1, 17):
        out += [chr(plane * 0x10000 + 0xFFFE), chr(plane * 0x10000 + 0xFFFF)]
    if n > len(out):
        raise _Decline("too many case-mapping differences to patch")
    return out[:n]


def _case_map(
    s: Column, spark_fn: Callable[[Column], Column], fix: tuple[tuple[int, str], ...]
) -> Column:
    """``spark_fn(s)`` with Python's mapping for the characters listed in ``fix``."""
    if not fix:
        return spark_fn(s)
    chars = "".join(chr(cp) for cp, _ in fix)
    holders = _placeholder_chars(len(fix))
    shielded = F.translate(s, chars, "".join(holders))
    mapped = spark_fn(shielded)
    singles = [(h, py) for h, (_, py) in zip(holders, fix) if len(py) == 1]
    if singles:
        mapped = F.translate(mapped, "".join(h for h, _ in singles), "".join(p for _, p in singles))
    for h, (_, py) in zip(holders, fix):
        if len(py) != 1:
            mapped = F.replace(mapped, F.lit(h), F.lit(py))
    # Cheap first: most lines are ASCII (bytes == chars), and in the others Java tests
    # one range per character before the exact list.
    cps = [cp for cp, _ in fix]
    klass = f"[{_lit(min(cps))}-{_lit(0x10FFFF)}&&[{_ranges(cps)}]]"
    guard = (F.octet_length(s) != F.char_length(s)) & s.rlike(klass)
    return F.when(guard, mapped).otherwise(spark_fn(s))


@functools.singledispatch
def translate_map(fn: Any, field: Field, cal: Calibration) -> Native | None:
    """Native form of ``fn(value)`` for map/keyBy/filter/partials, or None."""
    return None


@translate_map.register
def _identity(fn: B.Identity, field: Field, cal: Calibration) -> Native | None:
    return Native(field.kind, dict(field.cols))


@translate_map.register
def _lower(fn: B.Lower, field: Field, cal: Calibration) -> Native | None:
    got = _str_input(field, "F.lower()")
    if got is None:
        return None
    s, err, msg = got
    try:
        out = _case_map(s, F.lower, cal.lower_fix)
    except _Decline:
        return None
    return Native(enc.STR, {"s": out}, err, msg)


@translate_map.register
def _upper(fn: B.Upper, field: Field, cal: Calibration) -> Native | None:
    got = _str_input(field, "F.upper()")
    if got is None:
        return None
    s, err, msg = got
    try:
        out = _case_map(s, F.upper, cal.upper_fix)
    except _Decline:
        return None
    return Native(enc.STR, {"s": out}, err, msg)


@translate_map.register
def _strip(fn: B.Strip, field: Field, cal: Calibration) -> Native | None:
    got = _str_input(field, "F.strip()")
    if got is None:
        return None
    s, err, msg = got
    chars = B.PY_WHITESPACE if fn.chars is None else fn.chars
    out = F.btrim(s, F.lit(chars)) if chars else s
    return Native(enc.STR, {"s": out}, err, msg)


@translate_map.register
def _length(fn: B.Length, field: Field, cal: Calibration) -> Native | None:
    got = _str_input(field, "F.length()")
    if got is None:
        return None
    s, err, msg = got
    return Native(enc.LONG, {"l": F.char_length(s).cast("bigint")}, err, msg)


_INT_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")


@translate_map.register
def _json_field(fn: B.JsonField, field: Field, cal: Calibration) -> Native | None:
    got = _str_input(field, repr(fn))
    if got is None or any(ch in fn.name for ch in "\"'\\[]"):
        return None
    s, not_str, type_msg = got
    v = F.try_parse_json(s)
    top = F.schema_of_variant(v)
    f = F.try_variant_get(v, f'$["{fn.name}"]', "variant")
    t = F.schema_of_variant(f)
    number = (t == "DOUBLE") | (t == "FLOAT") | t.startswith("DECIMAL")
    nested = t.startswith("OBJECT") | t.startswith("ARRAY")
    invalid = v.isNull()
    not_object = ~top.startswith("OBJECT")
    error = invalid | not_object | nested
    preview = F.substring(s, 1, 60)
    if not_str is not None:
        error = not_str | error
    no = F.lit(False)
    message = (
        F.when(not_str if not_str is not None else no, type_msg)
        .when(invalid, F.concat(F.lit(f"ValueError: {fn!r}: invalid JSON: "), preview))
        .when(
            not_object,
            F.concat(F.lit(f"ValueError: {fn!r} expects a JSON object; got "), preview),
        )
        .otherwise(
            F.lit(
                f"ValueError: {fn!r}: the field holds a JSON object or array; json_field "
                "returns strings, numbers, booleans and null only"
            )
        )
    )
    cols = {
        "s": F.when(t == "STRING", F.try_variant_get(f, "$", "string")),
        "l": F.when(t.isin(*_INT_TYPES), F.try_variant_get(f, "$", "bigint")),
        "d": F.when(number, F.try_variant_get(f, "$", "double") + F.lit(0.0)),
        "b": F.when(
            t == "BOOLEAN",
            F.when(F.try_variant_get(f, "$", "boolean"), F.lit(b"\xc3")).otherwise(F.lit(b"\xc2")),
        ),
    }
    return Native(enc.ANY, cols, error, message, bool_binary=True)


@functools.singledispatch
def translate_flat(fn: Any, field: Field, cal: Calibration) -> Native | None:
    """Native form of ``fn(value)`` returning a list (for flatMap), or None.

    The result has kind ``"array"`` and one column ``a``: an array of strings.
    """
    return None


@translate_flat.register
def _findall(fn: B.Findall, field: Field, cal: Calibration) -> Native | None:
    got = _str_input(field, repr(fn))
    if got is None:
        return None
    java = java_regex(fn.pattern, fn.flags, cal)
    if java is None:
        return None
    pattern, group = java
    s, err, msg = got
    return Native("array", {"a": F.regexp_extract_all(s, F.lit(pattern), F.lit(group))}, err, msg)


def truthy(native: Native) -> Column | None:
    """Python's ``bool(value)`` of a native result, for filter (None: not native)."""
    c = native.cols
    if native.kind == enc.STR:
        return F.coalesce(c["s"] != F.lit(""), F.lit(False))
    if native.kind == enc.LONG:
        return F.coalesce(c["l"] != F.lit(0), F.lit(False))
    if native.kind == enc.ANY and native.bool_binary:
        return F.coalesce(
            c["s"] != F.lit(""),
            c["l"] != F.lit(0),
            c["d"] != F.lit(0.0),
            c["b"] == F.lit(b"\xc3"),
            F.lit(False),
        )
    return None
