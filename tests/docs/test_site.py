"""The docs site: MkDocs builds it in strict mode (a broken link or reference fails), its
generated pages follow the code, and a real browser shows the gallery's topology picture.

The site is built once per test session into a temporary directory, with the
project's own mkdocs.yml and hooks. The browser is Debian's headless Chromium, fed the
built pages over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html
import http.server
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rstreams.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytest.importorskip("mkdocs", reason="the docs site needs pip install 'rstreams[docs]'")


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    return out


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM, "Debian's chromium is installed by ./dev test"
    # The flags a root, offline machine needs: no sandbox, no GPU, no network chatter.
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp / 'chromium-profile'}",
    ]  # fmt: skip
    return subprocess.run(
        [CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120, cwd=tmp
    )


def test_cli_reference_lists_every_command(site: Path) -> None:
    page = html.unescape((site / "reference" / "cli" / "index.html").read_text())
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(sub.choices) >= 8, sorted(sub.choices)
    for name, parser in sub.choices.items():
        assert f"rstreams {name}" in page, f"`rstreams {name}` missing from the CLI reference"
        for action in parser._actions:  # every option of the command, as --help shows it
            for option in action.option_strings:
                assert option in page, f"rstreams {name} {option} missing from the CLI reference"


def test_cli_guide_shows_the_generated_synopsis_and_options(site: Path) -> None:
    page = html.unescape((site / "cli" / "index.html").read_text())
    assert "<!-- cli:" not in page and "rstreams run [--input PATH]" in page
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, parser in sub.choices.items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue  # "Every command takes --help"
            for option in action.option_strings:
                assert f"<code>{option}" in page or f", {option}" in page, (name, option)


def test_gallery_has_every_example_with_picture_and_output(site: Path) -> None:
    examples = sorted(p.stem for p in (ROOT / "examples").glob("*.py"))
    index = (site / "gallery" / "index.html").read_text()
    for name in examples:
        assert f'href="{name}/"' in index, name
        page = (site / "gallery" / name / "index.html").read_text()
        assert f'src="../{name}.svg"' in page
        assert (site / "gallery" / f"{name}.svg").read_text().lstrip().startswith("<?xml")
        assert re.search(r"<code>[^<]+</code> \(\d+ rows\)", page), f"{name}: no output table"


def test_api_reference_shows_docstrings_and_their_examples(site: Path) -> None:
    page = (site / "reference" / "api" / "index.html").read_text()
    for name in (
        "rstreams.StreamBuilder", "rstreams.dsl.stream.RStream", "rstreams.dsl.stream.RTable",
        "rstreams.dsl.stream.GroupedStream.count", "rstreams.testing.TopologyTestDriver",
    ):  # fmt: skip
        assert f'id="{name}"' in page, name
    # Doctest examples render as console code, not as text where [...] would be a link.
    assert '<span class="gp">&gt;&gt;&gt; </span>' in page


def images_loaded(tmp: Path, url: str) -> list[str]:
    """The images of the page at ``url`` that Chromium decoded, with a size (as
    docs/assets/images-loaded.js marks them on <body>)."""
    dom = chromium(tmp, "--virtual-time-budget=5000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body, dom.stdout[:2000]
    loaded = re.search(r'data-images-loaded="([^"]*)"', body.group(0))
    assert loaded, f"the page did not run images-loaded.js: {body.group(0)}"
    return loaded.group(1).split()


@pytest.mark.slow
def test_the_gallery_page_shows_its_topology_in_chromium(site: Path, tmp_path: Path) -> None:
    # The check itself can fail: the same page without its picture file shows none.
    broken = tmp_path / "broken-site"
    shutil.copytree(site, broken)
    (broken / "gallery" / "wordcount.svg").unlink()
    with serve(broken) as base:
        assert "../wordcount.svg" not in images_loaded(tmp_path, f"{base}/gallery/wordcount/")

    with serve(site) as base:
        url = f"{base}/gallery/wordcount/"
        assert "../wordcount.svg" in images_loaded(tmp_path, url)
        shot = tmp_path / "gallery.png"
        r = chromium(tmp_path, "--window-size=1280,2400", f"--screenshot={shot}", url)
        assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]

    from PIL import Image

    image = Image.open(shot).convert("L")
    assert image.size == (1280, 2400)
    # The picture's boxes and arrows: a screenshot with the topology has a block of the
    # page below the "Topology" heading full of drawn pixels, not a blank area.
    band = image.crop((250, 350, 1000, 1100))
    dark = sum(band.histogram()[:200])
    assert dark > 2000, f"only {dark} drawn pixels where the topology should be"
