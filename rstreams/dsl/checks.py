"""The DSL's checks of what a step is given: functions (callable with the arguments the
step passes), queue counts, topic names, and sinks that share a topic. Each raises the
error a user sees at build time, naming the method and argument."""

from __future__ import annotations

import inspect
from typing import Any

from rstreams.dsl import nodes as n
from rstreams.dsl.external import RedisStream
from rstreams.errors import InvalidFunctionError, TopologyError
from rstreams.userfn import describe_fn


def check_fn(
    fn: Any,
    method: str,
    param: str = "fn",
    *,
    optional: bool = False,
    called_with: tuple[str, ...] = ("value",),
) -> Any:
    """``fn``, unless it is no function or can not be called as ``fn(*called_with)``
    (the arguments the step passes it, named as its docs name them)."""
    if fn is None and optional:
        return None
    if not callable(fn):
        raise InvalidFunctionError(
            f"{method}() expects a function for {param!r}; got {type(fn).__name__} {fn!r:.60} "
            f"instead"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn  # (a builtin or a class whose signature Python can not tell)
    try:
        signature.bind(*called_with)
    except TypeError:
        takes = f"({', '.join(map(str, signature.parameters.values()))})"
        one = " (the record's value only, not its key)" if called_with == ("value",) else ""
        raise InvalidFunctionError(
            f"{method}() calls its function as {param}({', '.join(called_with)}){one}, "
            f"but {describe_fn(fn)} takes {takes}"
        ) from None
    return fn


def check_same_sink_topic(pipeline: n.Pipeline, topic: str, fields: dict[str, Any]) -> None:
    """Several sinks may write one topic (their records interleave in it), as long as
    they write it alike: one topic has one key and value serde (its readers, the final
    table among them, decode every record with it) and one queue count."""
    for other in pipeline.nodes:
        if not isinstance(other, n.SinkNode) or other.topic != topic:
            continue
        differ = [
            f"{what} {serde_name(getattr(other, field))} there, {serde_name(fields[field])} here"
            for field, what in (("value_serde", "serializer"), ("key_serde", "key_serializer"))
            if serde_name(getattr(other, field)) != serde_name(fields[field])
        ]
        if None not in (other.queues, fields["queues"]) and other.queues != fields["queues"]:
            differ.append(f"queues={other.queues} there, queues={fields['queues']} here")
        if differ:
            raise TopologyError(
                f"topic {topic!r} is written by sink step {other.name!r} with other "
                f"settings ({'; '.join(differ)}): a topic's records are all read with one "
                "serde and queue count; write it the same way, or sink to another topic"
            )


def serde_name(serde: Any) -> str:
    """A serde as a pipeline names it: a built-in by its name, a function by its own,
    another Serde by its class."""
    name = getattr(serde, "name", None)
    if type(serde).__module__ == "rstreams.serde" and isinstance(name, str):
        return repr(name)
    return type(serde).__qualname__


def check_queues(queues: int | None, method: str) -> int | None:
    if queues is not None and (
        not isinstance(queues, int) or isinstance(queues, bool) or queues < 1
    ):
        raise TopologyError(f"{method}(queues=...) must be a positive int; got {queues!r}")
    return queues


def check_topic(topic: str, what: str, external: RedisStream | None) -> None:
    try:
        n.check_name(topic, what)
    except TopologyError as e:
        if external is None or topic != external.stream:
            raise
        raise TopologyError(
            f"{e}; name the job's topic for the stream {external.stream!r} yourself: "
            f"(topic, external=RedisStream(...))"
        ) from None
