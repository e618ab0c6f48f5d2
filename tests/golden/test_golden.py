"""describe() and to_dot() of the examples, byte for byte against tests/golden/expected/.

After an intended change of the output, regenerate with

    RSTREAMS_UPDATE_GOLDEN=1 python -m pytest tests/golden

which rewrites the files and fails each test it rewrote (so a run with the variable set
never passes by accident); review the diff, then run again without it.
"""

from __future__ import annotations

import html
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rstreams import ConfigError, Topology

EXPECTED = Path(__file__).parent / "expected"
UPDATE = os.environ.get("RSTREAMS_UPDATE_GOLDEN") == "1"
EXAMPLES = [
    "wordcount",
    "branching",
    "stats",
    # Windowed steps: describe and to_dot show their windows with units.
    "windowed_wordcount",
    "sessions",
    "order_payment_join",
]

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz 'dot' not installed")


def check_golden(actual: str, path: Path) -> None:
    data = actual.encode("utf-8")
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        old = path.read_bytes() if path.exists() else None
        path.write_bytes(data)
        pytest.fail(
            f"RSTREAMS_UPDATE_GOLDEN=1: {'rewrote' if old != data else 'checked (unchanged)'} "
            f"{path}; review it and re-run without RSTREAMS_UPDATE_GOLDEN"
        )
    if not path.exists():
        pytest.fail(f"missing golden file {path}; create it with RSTREAMS_UPDATE_GOLDEN=1")
    expected = path.read_bytes()
    if data != expected:
        # Compare as text for a readable diff in pytest's output.
        assert actual == expected.decode("utf-8"), f"output differs from {path}"
        raise AssertionError(f"output differs from {path} in bytes only")


@pytest.mark.parametrize("example", EXAMPLES)
def test_describe_matches_golden(example: str, example_topology: Callable[[str], Topology]) -> None:
    check_golden(example_topology(example).describe(), EXPECTED / f"{example}.txt")


@pytest.mark.parametrize("example", EXAMPLES)
def test_dot_matches_golden(example: str, example_topology: Callable[[str], Topology]) -> None:
    check_golden(example_topology(example).to_dot(), EXPECTED / f"{example}.dot")


@pytest.mark.parametrize("example", EXAMPLES)
def test_output_is_the_same_on_every_build(
    example: str, example_topology: Callable[[str], Topology]
) -> None:
    # Golden files are only useful if nothing (ids, dict order, counters) varies by run.
    first, second = example_topology(example), example_topology(example)
    assert first.describe() == second.describe()
    assert first.to_dot() == second.to_dot()


def test_render_dot_writes_the_dot_source(
    tmp_path: Path, example_topology: Callable[[str], Topology]
) -> None:
    t = example_topology("wordcount")
    out = t.render(tmp_path / "sub" / "wc.dot")
    assert out == tmp_path / "sub" / "wc.dot"
    assert out.read_text(encoding="utf-8") == t.to_dot()
    assert [p.name for p in out.parent.iterdir()] == ["wc.dot"]  # no temp file left


@needs_dot
@pytest.mark.parametrize("example", EXAMPLES)
def test_render_svg(
    example: str, tmp_path: Path, example_topology: Callable[[str], Topology]
) -> None:
    t = example_topology(example)
    out = t.render(tmp_path / f"{example}.svg")
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<?xml") or "<svg" in text
    assert "<svg" in text and text.rstrip().endswith("</svg>")
    # Every processor and topic made it into the picture (graphviz writes "-" as &#45;).
    plain = html.unescape(text)
    for name in [*t.factories, *t.topics]:
        assert f">{name}</text>" in plain, name
    assert t._repr_svg_().count("<svg") == 1


@needs_dot
def test_render_png(tmp_path: Path, example_topology: Callable[[str], Topology]) -> None:
    out = example_topology("branching").render(tmp_path / "branching.png")
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 1000


@needs_dot
def test_render_format_argument_overrides_the_extension(
    tmp_path: Path, example_topology: Callable[[str], Topology]
) -> None:
    out = example_topology("stats").render(tmp_path / "picture", format="PNG")
    assert out.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("name", ["wc.txt", "wc.jpeg", "wc"])
def test_render_unknown_extension_raises_config_error(
    name: str, tmp_path: Path, example_topology: Callable[[str], Topology]
) -> None:
    with pytest.raises(ConfigError, match=r"can not render a topology as .*use one of: \.svg"):
        example_topology("wordcount").render(tmp_path / name)
    assert not (tmp_path / name).exists()
