"""The settings object changed, and it has no comparable form: the diff can not see the
change, and says so."""

from rstreams import StreamBuilder


class Settings:
    __slots__ = ("lower",)

    def __init__(self, lower: bool) -> None:
        self.lower = lower


SETTINGS = Settings(lower=False)


def build() -> StreamBuilder:
    b = StreamBuilder("wordcount")
    (
        b.source("sentences")
        .flatMap(lambda line: (line.lower() if SETTINGS.lower else line).split())
        .keyBy(lambda w: w)
        .count()
        .toRStream()
        .sink("word-counts")
    )
    return b
