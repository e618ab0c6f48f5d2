"""Word count, as deployed."""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("wordcount")
    counts = (
        b.source("sentences").flatMap(lambda line: line.lower().split()).keyBy(lambda w: w).count()
    )
    counts.sink("word-counts")
    return b
