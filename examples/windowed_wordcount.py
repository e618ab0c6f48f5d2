"""Word count per 1-minute tumbling window of event time.

Each input line is ``<epoch ms>\\t<text>``; the timestamp is the record's event time.

    rstreams run examples/windowed_wordcount.py --input examples/data/timed_sentences.txt
"""

import re
from datetime import timedelta

from rstreams import StreamBuilder, TumblingWindow

WORD = re.compile(r"\w+")


def build() -> StreamBuilder:
    b = StreamBuilder("windowed-wordcount")
    (
        b.source("timed-sentences")
        .selectTimestamp(lambda line: int(line.split("\t", 1)[0]))
        .flatMap(lambda line: WORD.findall(line.split("\t", 1)[1].lower()))
        .keyBy(lambda w: w)
        .window(TumblingWindow(timedelta(minutes=1), grace=timedelta(minutes=5)))
        .count(name="per-minute")
        .sink("word-counts-per-minute")
    )
    return b
