"""A second sink after the count, as a new branch: nothing upstream moves."""

from rstreams import StreamBuilder


def build() -> StreamBuilder:
    b = StreamBuilder("wordcount")
    counts = (
        b.source("sentences").flatMap(lambda line: line.lower().split()).keyBy(lambda w: w).count()
    )
    counts.sink("word-counts")
    counts.toRStream().filter(lambda n: n >= 100).sink("frequent-words")
    return b
