"""What the Spark compiler produces: a compiled :class:`Stream` (a DataFrame and what is
known about it), and ``translate``, the per-node-type dispatch of its rules.

The rules live in :mod:`.steps` (record-at-a-time steps, sources, merge, sinks),
:mod:`.aggregates` (keyed aggregations) and :mod:`.windows` (windows and joins), each
in a ``RULES`` table; :func:`rstreams.runtime.spark.rules.register_rules` registers them
with ``translate`` (explicitly: importing a module registers nothing), and the
:class:`~.compiler.Compiler`, which refuses to start before that, calls ``translate``
for each node it needs.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from rstreams.dsl import nodes as n
from rstreams.errors import IllegalStateError, UnsupportedOperation
from rstreams.functions import Identity
from rstreams.runtime.spark import encoding as enc
from rstreams.runtime.spark.native import Field
from rstreams.runtime.spark.segments import PyStep
from rstreams.runtime.spark.support import BACKEND

if TYPE_CHECKING:
    from rstreams.runtime.spark.compiler import Compiler


@attrs.frozen
class SourceInfo:
    """A source topic bound to input: index (in the pipeline), topic, paths."""

    index: int
    topic: str
    paths: tuple[str, ...]
    #: A Redis stream instead of files: ``(RedisTarget, RedisStream)``.
    redis: tuple[Any, Any] | None = None


@attrs.frozen
class Stream:
    """A compiled stream: a DataFrame and what the compiler knows about it."""

    df: DataFrame
    key: str
    value: str
    #: The DataFrame carries ``_o`` (or will, once ``number`` rows are numbered).
    ordered: bool = False
    #: Python steps not applied to ``df`` yet (fused into one mapInArrow later).
    pending: tuple[PyStep, ...] = ()
    #: ``df`` rows are the source scan's rows, 1:1 and in order (error locations).
    aligned: bool = False
    source: SourceInfo | None = None
    #: At most one row per key (an aggregation's table).
    unique: bool = False
    after_agg: bool = False
    #: Some Python runs in the lineage (recomputing it is not free).
    python: bool = False
    #: Streaming: number the rows of source ``number`` in the next segment.
    number: int | None = None
    #: The value's str column is never null.
    nonnull: bool = False

    def kinds_after_pending(self) -> tuple[str, str]:
        key, value = self.key, self.value
        for step in self.pending:
            if step.kind in ("map", "flatMap", "decode", "partial"):
                value = enc.ANY
            elif step.kind == "keyBy":
                key = enc.MIXED
            elif step.kind == "identityKey":
                key = enc.MIXED if value == enc.ANY else value
        return key, value


def table_stream(
    df: DataFrame, key: str, value: str, *, ordered: bool, python: bool, nonnull: bool = False
) -> Stream:
    """An aggregation's output: ``df`` with one row per key."""
    return Stream(
        df,
        key,
        value,
        ordered=ordered,
        unique=True,
        after_agg=True,
        python=python,
        nonnull=nonnull,
    )


@attrs.frozen
class Terminal:
    """What the runner has to run for a terminal step."""

    node: n.Node
    stream: Stream


def is_identity(fn: Any) -> bool:
    """``F.identity()`` or a plain ``lambda x: x`` (same bytecode as the reference)."""
    if isinstance(fn, Identity):
        return True
    code = getattr(fn, "__code__", None)
    if not isinstance(fn, types.FunctionType) or code is None:
        return False
    ref = _identity_ref.__code__
    return (
        code.co_code == ref.co_code
        and code.co_argcount == 1
        and code.co_kwonlyargcount == 0
        and not code.co_flags & 0x0C  # *args / **kwargs
        and not fn.__defaults__
    )


def _identity_ref(x: Any) -> Any:  # the reference bytecode for is_identity
    return x


#: A None key in layout ``packed`` (msgpack's nil).
NULL_PACKED = enc._pack(None)


def null_key(kind: str) -> Column:
    """The condition "the key is None" on a flushed stream whose key is in layout
    ``kind`` (columns ``k_*``; see :mod:`.encoding`)."""
    if kind == enc.NONE:
        return F.lit(True)
    if kind == enc.PACKED:
        return F.col("k_m").isNull() | (F.col("k_m") == F.lit(NULL_PACKED))
    nulls = [F.col(c).isNull() for c in enc.columns("k", kind)]
    return functools.reduce(lambda a, b: a & b, nulls)


def field_of(kind: str, prefix: str = "v", nonnull: bool = False) -> Field:
    """The native field over the ``{prefix}_*`` columns of layout ``kind``."""
    suffixes = [c.split("_", 1)[1] for c in enc.columns(prefix, kind)]
    return Field(kind, {s: F.col(f"{prefix}_{s}") for s in suffixes}, nonnull)


@functools.singledispatch
def translate(node: n.Node, comp: Compiler, ordered: bool) -> Stream:
    """The compiled output of ``node`` (its parents compiled through ``comp``), with the
    ordering key ``_o`` if ``ordered``; a node type with no rule fails naming the step."""
    raise UnsupportedOperation(
        f"no translation rule for {type(node).__name__} (step {node.name!r}) on backend {BACKEND!r}"
    )


#: A translation rule: the compiled output of a node of its type (see ``translate``).
Rule = Callable[[Any, "Compiler", bool], Stream]


def check_rules() -> None:
    """Raise :class:`~rstreams.errors.IllegalStateError` unless the translation rules
    are registered with ``translate`` (:func:`rstreams.runtime.spark.rules.register_rules`):
    without them every step would fail as unsupported."""
    if n.SourceNode not in translate.registry:
        raise IllegalStateError(
            "the Spark compiler's translation rules are not registered: call "
            "rstreams.runtime.spark.rules.register_rules() before compiling (run_spark does)"
        )


def last_per_key(df: DataFrame, key: str, value: str, unique: bool) -> DataFrame:
    """The final table: the last value per key by ``_o``, and records per key ``_n``."""
    kc = enc.columns("k", key)
    vc = enc.columns("v", value)
    if unique:
        return df.select(*kc, *vc, F.lit(1).cast("bigint").alias("_n"))
    aggs = [F.count(F.lit(1)).alias("_n")]
    if vc:
        aggs.append(F.max_by(F.struct(*vc), F.col(enc.ORDER)).alias("_v"))
    out = df.groupBy(*kc).agg(*aggs)
    if not kc:  # a global aggregation has a row even for no input
        out = out.where(F.col("_n") > 0)
    return out.select(*kc, *[F.col(f"_v.{c}").alias(c) for c in vc], "_n")
