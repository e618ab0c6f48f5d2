"""Only the global the flatMap reads changed (letters only): the lambda's code is the
same, its answer is not."""

import re

from rstreams import StreamBuilder

WORD = re.compile(r"[a-z]+")


def build() -> StreamBuilder:
    b = StreamBuilder("wordcount")
    (
        b.source("sentences")
        .flatMap(lambda line: WORD.findall(line.lower()))
        .keyBy(lambda w: w)
        .count()
        .toRStream()
        .sink("word-counts")
    )
    return b
