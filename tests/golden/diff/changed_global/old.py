"""Word count, as deployed: the tokenizer is a module global."""

import re

from rstreams import StreamBuilder

WORD = re.compile(r"\w+")


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
