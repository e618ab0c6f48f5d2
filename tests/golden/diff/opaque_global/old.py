"""Word count whose tokenizer reads a settings object with no comparable form (a
``ConfigParser``: a library's object, its state is its implementation's)."""

import configparser

from rstreams import StreamBuilder

CONFIG = configparser.ConfigParser()
CONFIG.read_string("[words]\nlower = yes\n")


def build() -> StreamBuilder:
    b = StreamBuilder("wordcount")
    (
        b.source("sentences")
        .flatMap(
            lambda line: (line.lower() if CONFIG.getboolean("words", "lower") else line).split()
        )
        .keyBy(lambda w: w)
        .count()
        .toRStream()
        .sink("word-counts")
    )
    return b
