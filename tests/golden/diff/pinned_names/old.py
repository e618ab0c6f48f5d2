"""Word count whose count is named: its store is wordcount-word-count-store."""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("wordcount")
    (
        b.source("sentences")
        .flatMap(lambda line: line.lower().split())
        .keyBy(lambda w: w)
        .count(name="word-count")
        .toRStream()
        .sink("word-counts")
    )
    return b
