"""sum / min / max of word lengths per first letter, over the words of each line.

    rstreams run examples/stats.py --input examples/data/corpus.txt

prints the top rows of the three sink topics.
"""

import re

from rstreams import StreamBuilder

WORD = re.compile(r"[a-z]+")


def build() -> StreamBuilder:
    b = StreamBuilder("stats")
    by_initial = (
        b.source("lines").flatMap(lambda line: WORD.findall(line.lower())).keyBy(lambda w: w[0])
    )
    by_initial.sum(len, name="len-sum").sink("len-sum")
    by_initial.min(len, name="len-min").sink("len-min")
    by_initial.max(len, name="len-max").sink("len-max")
    return b
