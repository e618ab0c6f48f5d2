"""The two corpora every word-count benchmark runs on.

- ``repeated``: copies of examples/data/corpus.txt (real prose, ~5% non-ASCII lines),
  three copies in four with a renamed word per line so the vocabulary grows like real
  text (bench/wordcount.py's ``make_corpus``): few keys, very skewed.
- ``zipf``: 12 words a line drawn from 50,000 distinct words with Zipf (s = 1)
  frequencies, the first word of each line capitalised and one word in 25 carrying a
  non-ASCII letter: many keys, a long tail, the shape of real vocabularies.

    python bench/corpora.py zipf 100 /tmp/zipf.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from wordcount import make_corpus

KINDS = ("repeated", "zipf")
LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))
ACCENTED = np.array(list("éèüößçñåø"))


def make_zipf(
    path: Path, mb: float, distinct: int = 50_000, words_per_line: int = 12, seed: int = 7
) -> None:
    """About ``mb`` MB of lines of ``words_per_line`` words drawn with Zipf frequencies
    from ``distinct`` different words (deterministic for a ``seed``)."""
    rng = np.random.default_rng(seed)
    vocabulary: list[str] = []
    seen: set[str] = set()
    while len(vocabulary) < distinct:
        length = int(rng.integers(2, 11))
        letters = rng.choice(LETTERS, length)
        if rng.random() < 0.04:
            letters[int(rng.integers(0, length))] = rng.choice(ACCENTED)
        word = "".join(letters)
        if word not in seen:
            seen.add(word)
            vocabulary.append(word)
    words = np.array(vocabulary, dtype=object)
    weights = 1.0 / np.arange(1, distinct + 1)
    weights /= weights.sum()
    target = int(mb * 1_000_000)
    size = 0
    with path.open("w", encoding="utf-8") as f:
        while size < target:
            picks = words[rng.choice(distinct, size=(20_000, words_per_line), p=weights)]
            lines = [" ".join(row) for row in picks]
            text = "\n".join(line[0].upper() + line[1:] for line in lines) + "\n"
            f.write(text)
            size += len(text.encode("utf-8"))


def make(kind: str, path: Path, mb: float) -> None:
    """Write a corpus of ``kind`` (one of KINDS) of about ``mb`` MB to ``path``."""
    if kind == "repeated":
        make_corpus(path, mb)
    elif kind == "zipf":
        make_zipf(path, mb)
    else:
        raise ValueError(f"corpus kind must be one of {KINDS}; got {kind!r}")


if __name__ == "__main__":
    make(sys.argv[1], Path(sys.argv[3]), float(sys.argv[2]))
