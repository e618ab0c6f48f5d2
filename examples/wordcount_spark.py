"""Word count with built-in functions: native Spark SQL on Spark, plain Python elsewhere.

    rstreams run examples/wordcount_spark.py --backend spark --input corpus.txt
    rstreams run examples/wordcount_spark.py --input corpus.txt          # embedded

``F.lower()`` and ``F.words()`` compile to Spark's ``lower`` and ``regexp_extract_all``
(with Python's Unicode definition of a word character), ``keyBy(F.identity())`` +
``count()`` to a ``groupBy().count()``: no Python runs per record on Spark, and the
counts equal examples/wordcount.py's on every backend.
"""

from rstreams import StreamBuilder
from rstreams import functions as F


def build() -> StreamBuilder:
    b = StreamBuilder("wordcount")
    (
        b.source("sentences")
        .map(F.lower())
        .flatMap(F.words())
        .keyBy(F.identity())
        .count()
        .toRStream()
        .sink("word-counts")
    )
    return b
