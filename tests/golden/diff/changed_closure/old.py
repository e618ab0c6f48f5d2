"""Word count, as deployed: the minimum word length is closed over."""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    shortest = 1
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
