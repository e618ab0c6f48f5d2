"""Only the closed-over minimum length changed."""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    shortest = 3
    b = StreamBuilder("wordcount")
    (
        b.source("sentences")
        .flatMap(lambda line: [w for w in line.split() if len(w) >= shortest])
        .keyBy(lambda w: w)
        .count()
        .toRStream()
        .sink("word-counts")
    )
    return b
