"""The settings changed, and they have no comparable form: the diff can not see the
change, and says so."""

import configparser

from rstreams import StreamBuilder

CONFIG = configparser.ConfigParser()
CONFIG.read_string("[words]\nlower = no\n")


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
