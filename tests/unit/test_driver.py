"""TopologyTestDriver end to end: the examples over the real corpus, every operator."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from rstreams import ConfigError, SerdeError, SessionWindow, StreamBuilder, Topology, Windowed
from rstreams.testing import OutputRecord, TopologyTestDriver

WORD = re.compile(r"\w+")
WC_STORE = "wordcount-sentences-count-3-store"


def expected_word_counts(lines: list[str]) -> Counter[str]:
    return Counter(w for line in lines for w in re.findall(r"\w+", line.lower()))


def run_wordcount(
    topology: Topology, lines: list[str], queues: dict[str, int] | None = None
) -> tuple[list[OutputRecord], dict[Any, Any], list[OutputRecord]]:
    with TopologyTestDriver(topology, queues=queues) as driver:
        driver.pipe_all("sentences", lines)
        return driver.read("word-counts"), driver.state(WC_STORE), driver.read("sentences")


@pytest.fixture(scope="module")
def wordcount_run(example_topology, corpus_lines):
    return run_wordcount(example_topology("wordcount"), corpus_lines)


# -- word count over the corpus ---------------------------------------------------------


def test_word_count_final_table_equals_counter(wordcount_run, corpus_lines) -> None:
    out, _, _ = wordcount_run
    expected = expected_word_counts(corpus_lines)
    assert len(expected) > 1000  # the corpus is real prose, not a toy
    table = {r.key: r.value for r in out}
    assert table == expected


def test_word_count_state_equals_counter(wordcount_run, corpus_lines) -> None:
    _, state, _ = wordcount_run
    assert state == expected_word_counts(corpus_lines)


def test_word_count_emits_every_update(wordcount_run, corpus_lines) -> None:
    out, _, _ = wordcount_run
    expected = expected_word_counts(corpus_lines)
    assert len(out) == sum(expected.values())
    # Updates per key count up 1, 2, 3, ... with no gap or repeat.
    seen: Counter[str] = Counter()
    for r in out:
        seen[r.key] += 1
        assert r.value == seen[r.key]


def test_word_count_over_four_source_queues_gives_the_same_results(
    example_topology, corpus_lines, wordcount_run
) -> None:
    out, state, piped = run_wordcount(
        example_topology("wordcount"), corpus_lines, queues={"sentences": 4}
    )
    assert {r.queue for r in piped} == {0, 1, 2, 3}  # the input really was spread
    expected = expected_word_counts(corpus_lines)
    assert {r.key: r.value for r in out} == expected
    assert state == expected
    assert len(out) == sum(expected.values())
    single_queue_out, _, _ = wordcount_run
    assert sorted((r.key, r.value) for r in out) == sorted(
        (r.key, r.value) for r in single_queue_out
    )


def test_word_count_order_and_timestamps(example_topology) -> None:
    with TopologyTestDriver(example_topology("wordcount")) as driver:
        driver.pipe("sentences", "hello world hello", timestamp=5)
        out = driver.read("word-counts")
        assert [(r.key, r.value, r.timestamp) for r in out] == [
            ("hello", 1, 5),
            ("world", 1, 5),
            ("hello", 2, 5),
        ]
        assert driver.read("word-counts") == []  # read() only returns what is new
        driver.pipe("sentences", "World", timestamp=9)
        assert [(r.key, r.value, r.timestamp) for r in driver.read("word-counts")] == [
            ("world", 2, 9)
        ]
        assert driver.state(WC_STORE) == {"hello": 2, "world": 2}


# -- the other examples -----------------------------------------------------------------


def test_branching_example(example_topology, corpus_lines) -> None:
    with TopologyTestDriver(example_topology("branching")) as driver:
        driver.pipe_all("lines", corpus_lines)
        words = driver.read_table("word-counts")
        chars = driver.read_table("chars-by-initial")
        word_state = driver.state("branching-word-count-store")
        char_state = driver.state("branching-chars-by-initial-store")

    expected_chars: dict[str, int] = defaultdict(int)
    for line in corpus_lines:
        if line:
            expected_chars[line[0].lower()] += len(line)
    assert words == word_state == expected_word_counts(corpus_lines)
    assert chars == char_state == expected_chars
    assert sum(chars.values()) == sum(len(line) for line in corpus_lines)


def test_stats_example(example_topology, corpus_lines) -> None:
    with TopologyTestDriver(example_topology("stats")) as driver:
        driver.pipe_all("lines", corpus_lines)
        got = {op: driver.read_table(f"len-{op}") for op in ("sum", "min", "max")}
        states = {op: driver.state(f"stats-len-{op}-store") for op in ("sum", "min", "max")}

    lengths: dict[str, list[int]] = defaultdict(list)
    for line in corpus_lines:
        for w in re.findall(r"[a-z]+", line.lower()):
            lengths[w[0]].append(len(w))
    assert got["sum"] == states["sum"] == {k: sum(v) for k, v in lengths.items()}
    assert got["min"] == states["min"] == {k: min(v) for k, v in lengths.items()}
    assert got["max"] == states["max"] == {k: max(v) for k, v in lengths.items()}


# -- operators --------------------------------------------------------------------------


def test_reduce() -> None:
    b = StreamBuilder("r")
    b.source("in").keyBy(lambda w: w[0]).reduce(lambda acc, w: f"{acc}+{w}").sink("out")
    with TopologyTestDriver(b.build()) as driver:
        for w in ["apple", "banana", "avocado", "blueberry", "apricot"]:
            driver.pipe("in", w)
        assert [(r.key, r.value) for r in driver.read("out")] == [
            ("a", "apple"),
            ("b", "banana"),
            ("a", "apple+avocado"),
            ("b", "banana+blueberry"),
            ("a", "apple+avocado+apricot"),
        ]
        assert driver.state("r-in-reduce-2-store") == {
            "a": "apple+avocado+apricot",
            "b": "banana+blueberry",
        }


def test_aggregate_keeps_tuple_state_and_sinks_json() -> None:
    b = StreamBuilder("agg")
    (
        b.source("in", "json")
        .keyBy(lambda r: r["user"])
        .aggregate(lambda: (0, 0), lambda acc, r: (acc[0] + 1, acc[1] + r["amount"]), name="tot")
        .sink("out")
    )
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe("in", {"user": "ann", "amount": 5})
        driver.pipe("in", {"user": "bob", "amount": 1})
        driver.pipe("in", {"user": "ann", "amount": 7})
        # JSON has no tuple: the sink writes lists; the store (msgpack) keeps tuples.
        assert [(r.key, r.value) for r in driver.read("out")] == [
            ("ann", [1, 5]),
            ("bob", [1, 1]),
            ("ann", [2, 12]),
        ]
        assert driver.state("agg-tot-store") == {"ann": (2, 12), "bob": (1, 1)}


def test_aggregate_initializer_is_called_per_new_key() -> None:
    calls = []

    def init() -> list[str]:
        calls.append(1)
        return []

    b = StreamBuilder("agg")
    b.source("in").keyBy(len).aggregate(init, lambda acc, v: [*acc, v]).sink("out")
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe_all("in", ["ab", "cd", "xyz", "ef"])
        assert driver.read_values("out") == [["ab"], ["ab", "cd"], ["xyz"], ["ab", "cd", "ef"]]
    assert len(calls) == 2


def test_sum_min_max_without_a_function_use_the_value() -> None:
    b = StreamBuilder("nums")
    keyed = b.source("in", "json").keyBy(lambda v: "even" if v % 2 == 0 else "odd")
    keyed.sum(name="s").sink("sum")
    keyed.min(name="lo").sink("min")
    keyed.max(name="hi").sink("max")
    values = [5, 2, 9, 4, 1, 8]
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe_all("in", values)
        assert driver.read_table("sum") == {"odd": 15, "even": 14}
        assert driver.read_table("min") == {"odd": 1, "even": 2}
        assert driver.read_table("max") == {"odd": 9, "even": 8}


def test_map_filter_peek_foreach() -> None:
    peeked: list[str] = []
    seen: list[int] = []
    b = StreamBuilder("ops")
    upper = b.source("in").map(str.upper).peek(peeked.append)
    upper.filter(lambda v: v.startswith("A")).sink("a-words", "str")
    upper.map(len).foreach(seen.append)
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe_all("in", ["apple", "kiwi", "avocado"])
        assert driver.read_values("a-words") == ["APPLE", "AVOCADO"]
    assert peeked == ["APPLE", "KIWI", "AVOCADO"]
    assert seen == [5, 4, 7]


def test_flat_map_to_nothing_emits_nothing() -> None:
    b = StreamBuilder("fm")
    b.source("in").flatMap(str.split).sink("out")
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe_all("in", ["", "   ", "a b"])
        assert driver.read_values("out") == ["a", "b"]


def test_select_timestamp_sets_record_timestamps() -> None:
    b = StreamBuilder("ts")
    (
        b.source("in", "json")
        .selectTimestamp(lambda e: e["at"])
        .keyBy(lambda e: e["k"])
        .count()
        .sink("out")
    )
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe("in", {"k": "x", "at": 1_700_000_000_000}, timestamp=1)
        driver.pipe("in", {"k": "x", "at": 1_700_000_000_500.9}, timestamp=2)
        out = driver.read("out")
    assert [(r.key, r.value, r.timestamp) for r in out] == [
        ("x", 1, 1_700_000_000_000),
        ("x", 2, 1_700_000_000_500),  # floats are truncated to int milliseconds
    ]


def test_default_timestamp_is_the_driver_clock() -> None:
    b = StreamBuilder("clock")
    b.source("in").sink("out", "str")
    with TopologyTestDriver(b.build(), start_time=1000) as driver:
        driver.pipe("in", "a")
        driver.advance_time(250)
        driver.pipe("in", "b")
        driver.pipe("in", "c", timestamp=7)
        assert [(r.value, r.timestamp) for r in driver.read("out")] == [
            ("a", 1000),
            ("b", 1250),
            ("c", 7),
        ]
        with pytest.raises(ConfigError, match="advance_time\\(\\) needs ms >= 0"):
            driver.advance_time(-1)


def test_print_writes_key_and_value(capsys: pytest.CaptureFixture[str]) -> None:
    b = StreamBuilder("p")
    src = b.source("in")
    src.print("raw")
    src.keyBy(len).count().toRStream().print()
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe_all("in", ["ab", "cd"])
    assert capsys.readouterr().out.splitlines() == ["[raw] ab", "2: 1", "[raw] cd", "2: 2"]


def test_keys_piped_with_key_are_grouped(capsys: pytest.CaptureFixture[str]) -> None:
    b = StreamBuilder("keys")
    src = b.source("in")
    src.groupByKey().count().sink("counts")
    src.print()
    with TopologyTestDriver(b.build(), queues={"in": 3}) as driver:
        for key, value in [("u1", "a"), ("u2", "b"), ("u1", "c"), ("u3", "d"), ("u1", "e")]:
            driver.pipe("in", value, key=key)
        piped = driver.read("in")
        out = driver.read("counts")
        state = driver.state("keys-in-count-1-store")
    # One key, one queue: without a shuffle, the count is right only if that holds.
    queue_of: dict[str, set[int]] = defaultdict(set)
    for r in piped:
        queue_of[r.key].add(r.queue)
    assert all(len(qs) == 1 for qs in queue_of.values())
    assert [(r.key, r.value) for r in out] == [
        ("u1", 1),
        ("u2", 1),
        ("u1", 2),
        ("u3", 1),
        ("u1", 3),
    ]
    assert state == {"u1": 3, "u2": 1, "u3": 1}
    assert capsys.readouterr().out.splitlines() == ["u1: a", "u2: b", "u1: c", "u3: d", "u1: e"]


def test_none_keys_from_key_by_are_skipped_whatever_the_queue_count() -> None:
    # Null keys never aggregate (as in Kafka Streams): none reaches any of the 8 queues'
    # stores, and each is counted.
    b = StreamBuilder("nulls")
    b.source("in").keyBy(lambda v: None if v == "-" else v).count().sink("out")
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe_all("in", ["-", "x", "-", "-", "x", "-"])
        assert [(r.key, r.value) for r in driver.read("out")] == [("x", 1), ("x", 2)]
        assert driver.state("nulls-in-count-2-store") == {"x": 2}
        assert driver.metrics["null_keys"] == 4


def test_json_source_and_sink_with_serializers() -> None:
    b = StreamBuilder("clicks")
    clicks = b.source("clicks", deserializer="json")
    clicks.filter(lambda c: c["ok"]).map(lambda c: c["page"]).sink("pages", "str")
    clicks.keyBy(lambda c: c["page"]).count().sink("per-page", key_serializer="str")
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe("clicks", {"page": "/", "ok": True})
        driver.pipe("clicks", {"page": "/a", "ok": False})
        driver.pipe("clicks", {"page": "/", "ok": True})
        assert driver.read_values("pages") == ["/", "/"]
        assert driver.read_table("per-page") == {"/": 2, "/a": 1}


def test_function_deserializer() -> None:
    b = StreamBuilder("fn")
    b.source("in", deserializer=lambda data: data.decode("ascii")[::-1]).sink("out", "str")
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe("in", b"olleh")
        assert driver.read_values("out") == ["hello"]


def test_merge_feeding_an_aggregation() -> None:
    b = StreamBuilder("mg")
    b.source("a").merge(b.source("b")).groupByKey().count(name="c").sink("out")
    with TopologyTestDriver(b.build(), queues={"a": 2, "b": 3}) as driver:
        for topic, key in [("a", "k"), ("b", "k"), ("b", "j"), ("a", "k")]:
            driver.pipe(topic, "v", key=key)
        assert [(r.key, r.value) for r in driver.read("out")] == [
            ("k", 1),
            ("k", 2),
            ("j", 1),
            ("k", 3),
        ]


# -- driver API errors ------------------------------------------------------------------


def simple() -> Topology:
    b = StreamBuilder("s")
    b.source("in").keyBy(len).count().sink("out")
    return b.build()


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda d: d.pipe("out", "x"), "topic 'out' is not a source of topology 's'"),
        (lambda d: d.pipe("nope", "x"), "topic 'nope' is not a source"),
        (lambda d: d.read("nope"), "topic 'nope' is not part of topology 's'"),
        (lambda d: d.state("nope"), "no state store 'nope' in topology 's'; its stores are"),
        (lambda d: d.pipe("in", 42), "can not write value 42 to topic 'in'"),
    ],
    ids=["pipe-to-sink", "pipe-unknown", "read-unknown", "state-unknown", "pipe-unencodable"],
)
def test_driver_misuse_is_reported(
    action: Callable[[TopologyTestDriver], object], message: str
) -> None:
    with (
        TopologyTestDriver(simple()) as driver,
        pytest.raises((ConfigError, SerdeError), match=message),
    ):
        action(driver)


def test_driver_needs_a_topology() -> None:
    b = StreamBuilder("s")
    b.source("in").sink("out")
    with pytest.raises(ConfigError, match=r"needs a Topology .*got StreamBuilder"):
        TopologyTestDriver(b)  # type: ignore[arg-type]


def test_driver_rejects_unknown_error_policy() -> None:
    with pytest.raises(ConfigError, match="on_error must be one of fail, skip, dead-letter"):
        TopologyTestDriver(simple(), on_error="ignore")


def test_driver_queue_count_must_match_the_declared_one() -> None:
    b = StreamBuilder("q")
    b.source("in", queues=2).sink("out")
    with pytest.raises(ConfigError, match="'in' has 3 queues but the topology declares 2"):
        TopologyTestDriver(b.build(), queues={"in": 3})


# -- end of input ------------------------------------------------------------------------


def sessions_and_left_join() -> Topology:
    """Clicks counted per 30-minute session (emit on close) and orders left-joined with
    payments within 5 minutes: both give their last results only when time moves on."""
    from rstreams import JoinWindow, SessionWindow

    b = StreamBuilder("eoi")
    (
        b.source("clicks", deserializer="json")
        .selectTimestamp(lambda c: c["ts"])
        .keyBy(lambda c: c["user"])
        .window(SessionWindow(30 * 60_000), emit="close")
        .count(name="sessions")
        .sink("session-clicks")
    )
    orders = b.source("orders", deserializer="json").selectTimestamp(lambda o: o["ts"])
    payments = b.source("payments", deserializer="json").selectTimestamp(lambda p: p["ts"])
    (
        orders.leftJoin(payments)
        .where(lambda o: o["order"])
        .equalTo(lambda p: p["order"])
        .window(JoinWindow(0, 5 * 60_000))
        .apply(lambda o, p: None if p is None else p["paid"], name="paid")
        .sink("order-payments")
    )
    return b.build()


def pipe_sessions_and_orders(driver: TopologyTestDriver) -> None:
    minute = 60_000
    for user, t in [("ann", 0), ("bob", 1), ("ann", 10), ("ann", 50), ("bob", 55), ("ann", 60)]:
        driver.pipe("clicks", {"user": user, "ts": t * minute})
    # In event order, as one partition would hold them: order 2 is never paid.
    driver.pipe("orders", {"order": 1, "ts": 0})
    driver.pipe("orders", {"order": 2, "ts": minute})
    driver.pipe("payments", {"order": 1, "paid": 30, "ts": 2 * minute})
    driver.pipe("orders", {"order": 3, "ts": 3 * minute})


def test_end_of_input_closes_the_last_sessions_and_emits_unmatched_left_records() -> None:
    minute = 60_000
    with TopologyTestDriver(sessions_and_left_join()) as driver:
        pipe_sessions_and_orders(driver)
        # Stream time is the last click's (60 min): only the sessions whose gap has
        # passed are out, and no order is old enough to be known unpaid.
        early_sessions = driver.read_table("session-clicks")
        early_orders = driver.read_table("order-payments")
        driver.end_of_input()
        last_sessions = driver.read("session-clicks")
        # (read(), not read_table(): the joiner's None for an unpaid order is a value a
        # table leaves out, as --output does.)
        last_orders = {r.key: r.value for r in driver.read("order-payments")}

    assert early_sessions == {
        Windowed("ann", 0, 10 * minute): 2,
        Windowed("bob", minute, minute): 1,
    }
    assert early_orders == {1: 30}
    # What a test that stops before end_of_input() misses:
    assert {(r.key, r.value, r.key.closed) for r in last_sessions} == {
        (Windowed("ann", 50 * minute, 60 * minute), 2, "end-of-input"),
        (Windowed("bob", 55 * minute, 55 * minute), 1, "end-of-input"),
    }
    assert last_orders == {2: None, 3: None}


def test_stream_time_is_one_partitions_whatever_the_queues_after_the_shuffle() -> None:
    # Each task of a windowed step sees only its own queue's records; the driver gives
    # them all the step's time after each record, so a session of a quiet key closes
    # when later records of other keys pass it, and a record of a quiet key behind
    # that time is late, as with one queue (docs/windows.md, event time).
    def sessions(queues: int) -> tuple[list[tuple[str, int, int]], list[str]]:
        b = StreamBuilder("clicks")
        counts = (
            b.source("clicks")
            .keyBy(lambda user: user)
            .window(SessionWindow(gap=10), emit="close")
            .count(name="sessions", queues=queues)
        )
        counts.toRStream().sink("out")
        counts.late().sink("late")
        clicks = [("ann", 0), ("bob", 1), ("cat", 2), ("ann", 5), ("dan", 40), ("bob", 3)]
        with TopologyTestDriver(b.build()) as driver:
            for user, ts in clicks:
                driver.pipe("clicks", user, timestamp=ts)
            out = sorted((r.key.key, r.key.start, r.value) for r in driver.read("out"))
            return out, driver.read_values("late")

    assert sessions(1) == ([("ann", 0, 2), ("bob", 1, 1), ("cat", 2, 1)], ["bob"])
    assert sessions(4) == sessions(1)


def test_read_of_a_topic_of_several_queues_keeps_the_order_written() -> None:
    # The sink has 3 queues: records go to them by key, and read gives them back in the
    # order written with each one's queue and offset (read takes each queue once).
    b = StreamBuilder("spread")
    b.source("in").keyBy(lambda v: v[0]).sink("out", queues=3)
    values = ["a1", "b1", "c1", "a2", "d1", "b2", "a3"]
    with TopologyTestDriver(b.build()) as driver:
        driver.pipe_all("in", values[:4])
        first = driver.read("out")
        driver.pipe_all("in", values[4:])
        second = driver.read("out")
        assert driver.read("out") == []
    out = first + second
    assert [r.value for r in out] == values
    assert len({r.queue for r in out}) > 1
    for q in {r.queue for r in out}:
        assert [r.offset for r in out if r.queue == q] == list(
            range(sum(r.queue == q for r in out))
        )
    assert out[0] == OutputRecord("a", "a1", 0, (), "out", out[0].queue, 0)
    assert out[0] != ("a", "a1", 0, (), "out", out[0].queue, 0)  # only an OutputRecord
    assert {out[0], out[0]} == {out[0]}
