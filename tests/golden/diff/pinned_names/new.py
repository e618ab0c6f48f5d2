"""The same filter inserted upstream; the named count keeps its store."""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("wordcount")
    (
        b.source("sentences")
        .flatMap(lambda line: line.lower().split())
        .filter(lambda w: len(w) > 2)
        .keyBy(lambda w: w)
        .count(name="word-count")
        .toRStream()
        .sink("word-counts")
    )
    return b
