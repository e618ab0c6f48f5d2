# ruff: noqa: RUF001, RUF002 (look-alike characters are what these tests are about)
"""Built-in functions give identical results on the embedded runtime and on Spark, where
they run as native Spark SQL (no Python per record)."""

from __future__ import annotations

import collections
import re
from pathlib import Path
from typing import Any

import pytest

from rstreams import StreamBuilder
from rstreams import functions as F
from rstreams.runtime.spark import run_spark
from rstreams.testing import TopologyTestDriver

pytestmark = pytest.mark.slow

#: Where Python and the JVM (Java regex, ICU case mapping, Unicode versions) differ.
UNICODE_LINES = [
    "İstanbul ISTANBUL ıi İI",  # Turkish dotted/dotless I (İ lowers to i + U+0307)
    "Straße STRASSE ẞ groß",  # ß uppercases to SS; capital sharp s lowers to ß
    "ΟΔΟΣ ΟΔΟΣ. Σ ΑΣ\u0301 σς",  # Greek final sigma, with a combining mark after it
    "cafe\u0301 café naïve n\u0303o",  # combining marks: not \w for Python, \w for (?U)Java
    "١٢٣ ४५६ ৭৮ 𝟘𝟙 ²½ Ⅻ ①",  # digits of other scripts; No/Nl numbers
    "snake_case __init__ a‿b x﹏y",  # underscore vs other connector punctuation
    "emoji 👍🏽 👨\u200d👩\u200d👧 ✨x✨ 🇩🇪",  # ZWJ sequences, skin tones, flags
    "Ꟁꟁ ᲈ\u1c89 \U00010d50z",  # letters newer than the JVM's or Python's Unicode tables
    "ǅungla ﬁne ŉ ΐ",  # titlecase digraph, ligature, special casing expansions
    "\x1c\x1f tab\tsep \u3000wide\u2003 \u00a0nbsp\u00a0 ",  # Python-only whitespace
    "",
    "   ",
    "x",
]


def python_table(fn: Any, lines: list[str]) -> dict[str, Any]:
    # (A None value leaves the table, as --output and Spark's tables leave it out.)
    return {line: v for line in lines if (v := fn(line)) is not None}


def spark_map_table(spark: Any, fn: Any, path: Path) -> dict[str, Any]:
    b = StreamBuilder("builtin")
    b.source("lines").keyBy(F.identity()).toRStream().map(fn).sink("out")
    return run_spark(b.build(), {"lines": str(path)}, spark=spark).tables["out"]


@pytest.fixture(scope="module")
def unicode_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("unicode") / "lines.txt"
    path.write_text("\n".join(UNICODE_LINES) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "fn", [F.lower(), F.upper(), F.strip(), F.strip(" x✨"), F.length()], ids=repr
)
def test_string_builtins_identical(fn: Any, spark: Any, unicode_file: Path) -> None:
    assert spark_map_table(spark, fn, unicode_file) == python_table(fn, UNICODE_LINES)


PATTERNS = [
    r"\w+",
    r"\d+",
    r"\s+",
    r"[^\W\d_]+",
    r"\b\w",
    r"(\w)\w*",
    r".$",
    r"\w+(?=\s|$)",
    r"[\w\-]{2,3}?",
    r"x|✨+",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_findall_identical(pattern: str, spark: Any, unicode_file: Path) -> None:
    b = StreamBuilder("findall")
    b.source("lines").flatMap(F.findall(pattern)).keyBy(F.identity()).count().sink("out")
    got = run_spark(b.build(), {"lines": str(unicode_file)}, spark=spark).tables["out"]
    expected = collections.Counter(m for line in UNICODE_LINES for m in re.findall(pattern, line))
    assert got == dict(expected)


@pytest.mark.fast  # the Spark test of ./dev test --fast (see pyproject.toml's markers)
def test_words_example_identical_on_driver_and_spark(spark: Any, unicode_file: Path) -> None:
    """examples/wordcount_spark.py's steps, on the test driver and on Spark."""
    b = StreamBuilder("wc")
    b.source("lines").map(F.lower()).flatMap(F.words()).keyBy(F.identity()).count().sink("out")
    topology = b.build()
    with TopologyTestDriver(topology) as driver:
        driver.pipe_all("lines", UNICODE_LINES)
        expected = driver.read_table("out")
    got = run_spark(topology, {"lines": str(unicode_file)}, spark=spark).tables["out"]
    assert got == expected
    # Python's \w excludes combining marks (U+0307 after "i", U+0301 after "cafe") and
    # connector punctuation other than "_"; Java's (?U)\w would include them.
    assert got["stanbul"] == got["cafe"] == got["café"] == 1 and "x﹏y" not in got


JSON_LINES = [
    '{"a": "text", "n": 1}',
    '{"a": 12, "b": true}',
    '{"a": -7.25e3}',
    '{"a": 0.1}',
    '{"a": 5.0}',
    '{"a": -0.0}',
    '{"a": 12345678901234567890}',
    '{"a": true}',
    '{"a": false}',
    '{"a": null}',
    '{"b": 1}',
    '  {"a": "trailing text is ignored"} x',
    '{"a": "üñí\\u00e9\\n\\"q\\""}',
    '{"a.b": 1, "a": 1E400}',
]


def test_json_field_identical(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text("\n".join(JSON_LINES) + "\n", encoding="utf-8")
    fn = F.json_field("a")
    expected = python_table(fn, JSON_LINES)
    got = spark_map_table(spark, fn, path)
    assert got == expected
    assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in expected.items()}
    assert spark_map_table(spark, F.json_field("a.b"), path) == python_table(
        F.json_field("a.b"), JSON_LINES
    )


BAD_JSON = ['{"a": 1, "a": 2}', '{"a": NaN}', "[1]", '{"a": [1]}', '{"a": 1', "x", ""]


@pytest.mark.parametrize("line", BAD_JSON)
def test_json_field_rejects_the_same_input(line: str) -> None:
    with pytest.raises(ValueError):
        F.json_field("a")(line)


def test_json_field_skips_the_same_records(spark: Any, tmp_path: Path) -> None:
    lines = ['{"a": "ok"}', *BAD_JSON, '{"a": 2}']
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    b = StreamBuilder("json")
    b.source("lines").map(F.json_field("a")).keyBy(F.identity()).count().sink("out")
    result = run_spark(b.build(), {"lines": str(path)}, spark=spark, on_error="skip")
    assert result.tables["out"] == {"ok": 1, 2: 1}
    assert result.metrics["skipped"] == len(BAD_JSON)


def test_builtins_compile_to_native_spark_sql(spark: Any, tmp_path: Path) -> None:
    """No Python runs per record: the plan has no Python operator."""
    from rstreams.runtime.spark.compiler import Compiler, SourceInfo
    from rstreams.runtime.spark.native import calibrate
    from rstreams.runtime.spark.rules import register_rules

    path = tmp_path / "in.txt"
    path.write_text('{"x": "a b"}\n')
    b = StreamBuilder("native")
    lines = b.source("lines")
    lines.map(F.lower()).flatMap(F.words()).keyBy(F.identity()).count().sink("wc")
    lines.map(F.strip()).filter(F.identity()).map(F.json_field("x")).keyBy(F.upper()).max(
        F.identity()
    ).sink("js")
    lines.keyBy(F.lower()).sum(F.length()).sink("len")
    register_rules()  # (as run_spark does before it compiles)
    comp = Compiler(
        spark,
        b.pipeline,
        {"lines": SourceInfo(0, "lines", (str(path),))},
        streaming=False,
        on_error="fail",
        calibration=calibrate(spark),
    )
    for term in comp.terminals():
        df, _, _ = comp.final_table(term.stream, term.node)
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "Python" not in plan and "MapInArrow" not in plan and "ArrowEval" not in plan, plan


def test_builtins_are_frozen_with_readable_reprs() -> None:
    fn = F.findall(r"\d+")
    with pytest.raises(AttributeError):
        fn.pattern = "x"  # type: ignore[misc]
    assert repr(fn) == "F.findall('\\\\d+')"
    assert [repr(f) for f in (F.lower(), F.strip("x"), F.json_field("a"), F.words())] == [
        "F.lower()",
        "F.strip('x')",
        "F.json_field('a')",
        "F.findall('\\\\w+')",
    ]
    assert F.words() == F.findall(r"\w+") and hash(F.lower()) == hash(F.lower())


TURKISH = """
import sys
from rstreams import StreamBuilder, functions as F
from rstreams.runtime.spark import run_spark
from rstreams.runtime.spark.session import get_session

spark, _ = get_session("local[1]", conf={
    "spark.driver.extraJavaOptions": "-Duser.language=tr -Duser.country=TR",
    "spark.ui.enabled": "false",
})
lines = ["ISTANBUL İi", "ISTANBUL", "ΟΔΟΣ Iı", "x"]
path = sys.argv[1]
open(path, "w", encoding="utf-8").write("\\n".join(lines) + "\\n")
for fn in (F.lower(), F.upper()):
    b = StreamBuilder("tr")
    b.source("in").keyBy(F.identity()).toRStream().map(fn).sink("out")
    got = run_spark(b.build(), {"in": path}, spark=spark).tables["out"]
    assert got == {line: fn(line) for line in lines}, got
print("identical")
"""


def test_turkish_jvm_locale_is_patched(tmp_path: Path) -> None:
    """Spark lower-cases non-ASCII strings with the JVM's locale (I -> ı in Turkish);
    the built-ins still give Python's results. Its own JVM, so a subprocess."""
    import subprocess
    import sys

    script = tmp_path / "tr.py"
    script.write_text(TURKISH, encoding="utf-8")
    r = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "lines.txt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and "identical" in r.stdout, r.stderr[-3000:]
