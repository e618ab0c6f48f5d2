"""One source feeding two chains and two sinks: word counts and line lengths by first letter.

    rstreams run examples/branching.py --input examples/data/corpus.txt

prints the top rows of both sink topics (--output writes a file only for a pipeline
with a single sink).
"""

import re

from rstreams import StreamBuilder

WORD = re.compile(r"\w+")


def build() -> StreamBuilder:
    b = StreamBuilder("branching")
    lines = b.source("lines")
    # Branch 1: word counts.
    (
        lines.flatMap(lambda line: WORD.findall(line.lower()))
        .keyBy(lambda w: w)
        .count(name="word-count")
        .sink("word-counts")
    )
    # Branch 2: total characters of lines, by their first character.
    (
        lines.filter(lambda line: len(line) > 0)
        .keyBy(lambda line: line[0].lower())
        .sum(len, name="chars-by-initial")
        .sink("chars-by-initial")
    )
    return b
