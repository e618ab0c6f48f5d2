"""Word count with a filter inserted upstream of the count: every step after it moves
one place down its chain, so the count's generated name, and its store's, change."""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("wordcount")
    (
        b.source("sentences")
        .flatMap(lambda line: line.lower().split())
        .filter(lambda w: len(w) > 2)
        .keyBy(lambda w: w)
        .count()
        .toRStream()
        .sink("word-counts")
    )
    return b
