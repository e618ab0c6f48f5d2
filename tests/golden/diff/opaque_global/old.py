"""Word count whose tokenizer reads a settings object without a comparable form
(``__slots__``, repr its address)."""

from rstreams import StreamBuilder


class Settings:
    __slots__ = ("lower",)

    def __init__(self, lower: bool) -> None:
        self.lower = lower


SETTINGS = Settings(lower=True)


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
