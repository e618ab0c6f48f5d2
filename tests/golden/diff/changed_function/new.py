"""The flatMap's body changed (words keep their case): every step keeps its name and the
count its store, but the counts stored so far were made from lowercased words."""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("wordcount")
    (
        b.source("sentences")
        .flatMap(lambda line: line.split())
        .keyBy(lambda w: w)
        .count()
        .toRStream()
        .sink("word-counts")
    )
    return b
