"""Runs of built-in steps evaluated over a whole batch at once.

``map(F.lower()).flatMap(F.words())`` over a batch of ``str`` values is, record by
record, ``[w for v in values for w in re.findall(r"\\w+", v.lower())]``. Built-ins are
known expressions, so the run can be a C loop and one regex call over the batch::

    re.findall(r"\\w+", "\\n".join(map(str.lower, values)))

That is provably the same list of words, in the same order, when:

- every value is exactly ``str`` (anything else, a ``str`` subclass included, goes the
  step by step way, where a failing value follows the ``on_error`` policy);
- the map steps are ``F.lower()``, ``F.upper()``, ``F.strip()`` (whitespace) or
  ``F.identity()``: ``str`` methods that never fail on a ``str``, applied to each value
  as the steps would (not to the joined text: a case mapping's context, the Greek final
  sigma's, must not reach over into the next value);
- the flatMap is ``F.findall`` of a pattern in :data:`JOINABLE` with no flags: its
  matches never hold ``"\\n"`` and do not look at what is around them (no anchors,
  lookarounds, ``\\b`` or groups), so no match spans two values, and a value's
  matches are the same alone or between others (a value holding ``"\\n"`` included).

Which record each word comes from (the flatMap's per-record counts) is only needed for
the rows' offsets when no key and no varying timestamp must be repeated per word, and
offsets are only read to name a failing record or the last source offset: both are
worked out per record when asked for (:class:`_FusedOffsets`); headers (an input
chunk's mark on its last record) are spread from the last records back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import compress
from typing import Any

from rstreams.functions import Findall, Identity, Lower, Strip, Upper
from rstreams.runtime.engine.operators.batch import Batch, _Expanded

#: Patterns of ``F.findall`` (``F.words()``'s is the first) whose findall over values
#: joined by ``"\\n"`` is the concatenation of findall over each value.
JOINABLE = frozenset({r"\w+", r"\d+", r"\S+"})

_SEP = "\n"


def _str_method(fn: Any) -> Callable[[str], str] | None:
    """The ``str`` method a map built-in applies to a ``str`` (None: not fusable)."""
    if isinstance(fn, Lower):
        return str.lower
    if isinstance(fn, Upper):
        return str.upper
    if isinstance(fn, Strip) and fn.chars is None:
        return str.strip
    if isinstance(fn, Identity):
        return _same
    return None


def _same(v: str) -> str:
    return v


def _all_str(values: list[Any]) -> bool:
    return set(map(type, values)) <= {str}


class _FusedOffsets(_Expanded):
    """Offsets of a fused run's output: the per-record counts are found (one findall per
    record) only when the offsets or the last source offset are asked for."""

    __slots__ = ("_one", "_regex", "_values")

    def __init__(
        self, parent: list[int], values: list[str], one: Callable[[str], str], regex: Any
    ) -> None:
        super().__init__(parent, [])
        self._values, self._one, self._regex = values, one, regex

    def build(self) -> list[int]:
        findall, one = self._regex.findall, self._one
        self.counts = [len(findall(one(v))) for v in self._values]
        return super().build()

    def last(self) -> int:
        search, one, values = self._regex.search, self._one, self._values
        for i in range(len(values) - 1, -1, -1):  # usually the last record has a word
            if search(one(values[i])) is not None:
                return self.parent[i]
        raise IndexError("an empty batch has no last offset")


class FusedRun:
    """``map`` built-ins (none or more) then a ``flatMap(F.findall(...))`` of joinable
    pattern, run as one call per batch of ``str``; ``steps`` are their processors."""

    def __init__(self, steps: list[Any], methods: list[Callable[[str], str]], regex: Any):
        self.steps = steps
        self.methods = methods
        # Applied to each value before joining: C loops (identity has nothing to do).
        self.applied = [m for m in methods if m is not _same]
        self.regex = regex

    def one(self, value: str) -> str:
        """The map steps on one value."""
        for m in self.methods:
            value = m(value)
        return value

    def __call__(self, batch: Batch) -> bool:
        """Process ``batch`` through the whole run and forward its output from the last
        step; False (nothing done) if a value is not exactly ``str``."""
        values = batch.values
        if not values or not _all_str(values):
            return False
        mapped: Iterable[str] = values
        for m in self.applied:
            mapped = map(m, mapped)
        words = self.regex.findall(_SEP.join(mapped))
        n_in, n = len(values), len(words)
        steps = self.steps
        for s in steps[:-1]:  # the live statistics of the steps skipped over
            s.records_out += n_in
        for s in steps[1:]:
            s.records_in += n_in
        ts, keys, headers = batch.timestamps, batch.keys, batch.headers
        uniform = keys.count(None) == n_in and ts.count(ts[0]) == n_in and type(ts[0]) is int
        if uniform and headers is not None:
            # Rows with headers (usually the last of an input chunk): their words get them.
            marked = list(compress(range(n_in), headers))
            uniform = headers.count(()) + len(marked) == n_in
            headers = self._spread(headers, marked, values, n)
        if uniform:
            offsets = _FusedOffsets(batch.offsets, values, self.one, self.regex)
            out = Batch(batch.topic, batch.queue, [None] * n, words, [ts[0]] * n, offsets,
                        headers, max_ts=ts[0])  # fmt: skip
            steps[-1].forward(out)
            return True
        findall, one = self.regex.findall, self.one
        out = batch.expand([len(findall(one(v))) for v in values], words)
        steps[-1].forward(out)
        return True

    def _spread(
        self, headers: list[Any], marked: list[int], values: list[str], n: int
    ) -> list[Any]:
        """The headers of the ``n`` output rows: ``()`` but for the words of the rows
        ``marked`` (those with headers; only the rows from the first of them on are
        looked at again)."""
        if not marked:
            return [()] * n
        findall, one = self.regex.findall, self.one
        first = marked[0]
        counts = [len(findall(one(v))) for v in values[first:]]
        out: list[Any] = [()] * n
        start = n - sum(counts)
        for i, count in enumerate(counts, first):
            if headers[i]:
                out[start : start + count] = [headers[i]] * count
            start += count
        return out


def fused_run(first: Any) -> FusedRun | None:
    """The fused run of built-ins that starts at processor ``first`` (a map or flatMap
    step), if there is one: each step but the last has that next step as its only
    child. None if the steps from ``first`` do not make one."""
    steps: list[Any] = []
    methods: list[Callable[[str], str]] = []
    p = first
    while p.kind == "map":
        method = _str_method(p.fn)
        if method is None or len(p.children) != 1:
            return None
        steps.append(p)
        methods.append(method)
        p = p.children[0]
    fn = getattr(p, "fn", None)
    if p.kind != "flatMap" or not isinstance(fn, Findall):
        return None
    if fn.pattern not in JOINABLE or fn.flags:
        return None
    return FusedRun([*steps, p], methods, fn.regex)
