"""Without the ``redis`` extra, every command that needs it says what to install, in one
line with exit 2, never a traceback (``sys.modules['redis'] = None`` hides the client)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
URL = "redis://127.0.0.1:1/0"  # (never reached: the refusal comes first)
RUN = ["run", str(ROOT / "examples" / "wordcount.py"), "--input",
       str(ROOT / "examples" / "data" / "corpus.txt")]  # fmt: skip
COMMANDS = {
    "run": [*RUN, "--broker", URL],
    "run --workers 2": [*RUN, "--workers", "2", "--broker", URL],
    "topics list": ["topics", "list", "--broker", URL],
    "consume": ["consume", "word-counts", "--from-beginning", "--broker", URL],
    "offsets": ["offsets", "wordcount", "--broker", URL],
    "state list": ["state", "list", "--broker", URL],
    "group describe": ["group", "describe", "--broker", URL],
    "top": ["top", "wordcount", "--broker", URL],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_on_redis_without_the_client_says_what_to_install(name, tmp_path) -> None:
    code = (
        "import sys; sys.modules['redis'] = None\n"
        "from rstreams.cli import main\nsys.exit(main(sys.argv[1:]))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, *COMMANDS[name]], capture_output=True, text=True,
        timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "pip install 'rstreams[redis]'" in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
