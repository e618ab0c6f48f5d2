"""``Topology.diff`` of pipeline pairs (tests/golden/diff/<case>/old.py and new.py),
loaded the way ``rstreams run`` loads them, byte for byte against
tests/golden/expected/diff/<case>.txt; and ``rstreams diff``'s exit code for each.

Regenerate after an intended change with ``RSTREAMS_UPDATE_GOLDEN=1`` (see
test_golden.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_golden import EXPECTED, check_golden

from rstreams.cli import main
from rstreams.loader import load_topology

CASES = Path(__file__).parent / "diff"
#: case -> does the change lose or misread state?
LOSES = {
    "insert_filter": True,  # the count's generated name moves: its store is orphaned
    "window_size": True,  # same store name, other window bounds
    "queue_count": True,  # same store name, keys on other queues
    "join_moved": True,  # the join's store is orphaned; the sink's serde changes
    "pinned_names": False,  # the same insert, with the count named
    "add_sink": False,  # a new branch after the count
    "changed_function": False,  # the flatMap's code changed; names stay
    "changed_global": False,  # only the regex the flatMap reads changed
    "changed_closure": False,  # only a value the flatMap closes over changed
    "opaque_global": False,  # a global with no comparable form: said, not compared
}
#: case -> does a kept store or sink topic hold what the old version computed (the change
#: applies to new input only)?
STALE = {
    "insert_filter": True,  # the sink topic keeps the old counts
    "window_size": True,  # the sink topic keeps the old windows' counts
    "queue_count": False,  # the same sums, on other queues
    "join_moved": False,  # the sink topic's serde changed: misread, not stale
    "pinned_names": True,  # the count goes on from counts of unfiltered words
    "add_sink": False,
    "changed_function": True,  # the count goes on from counts of lowercased words
    "changed_global": True,  # the count goes on from counts of the old tokenizer's words
    "changed_closure": True,
    "opaque_global": False,  # (it can not tell: "Not compared" says so)
}


def _pair(case: str) -> tuple[str, str]:
    return str(CASES / case / "old.py"), str(CASES / case / "new.py")


def test_every_case_directory_is_listed() -> None:
    assert sorted(p.name for p in CASES.iterdir() if p.is_dir() and p.name[0] != "_") == sorted(
        LOSES
    )
    assert sorted(STALE) == sorted(LOSES)


@pytest.mark.parametrize("case", sorted(LOSES))
def test_diff_matches_golden(case: str) -> None:
    old, new = (load_topology(p) for p in _pair(case))
    d = old.diff(new)
    check_golden(d.describe(), EXPECTED / "diff" / f"{case}.txt")
    assert d.loses_state is LOSES[case]
    assert d.stale is STALE[case]
    assert ("New input only:" in d.describe()) is STALE[case]


@pytest.mark.parametrize("case", sorted(LOSES))
def test_cli_exit_code_says_whether_state_is_lost(
    case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diff", *_pair(case)]) == (1 if LOSES[case] else 0)
    out = capsys.readouterr().out
    assert out == (EXPECTED / "diff" / f"{case}.txt").read_text(encoding="utf-8")
    assert main(["diff", "-q", *_pair(case)]) == (1 if LOSES[case] else 0)
    assert capsys.readouterr().out == ""
    assert main(["diff", "--json", *_pair(case)]) == (1 if LOSES[case] else 0)
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == 2
    assert doc["loses_state"] is LOSES[case]
    assert doc["stale"] is STALE[case]


def test_a_pipeline_against_itself_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    old, _ = _pair("insert_filter")
    assert main(["diff", old, old]) == 0
    out = capsys.readouterr().out
    assert "State: nothing lost (1 store(s) kept)" in out
    assert "renamed" not in out and "added" not in out


def test_a_file_that_does_not_load_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, _ = _pair("insert_filter")
    broken = tmp_path / "broken.py"
    broken.write_text("def build():\n    raise RuntimeError('no')\n")
    assert main(["diff", old, str(broken)]) == 2
    assert "broken.py" in capsys.readouterr().err
    assert main(["diff", old, str(tmp_path / "missing.py")]) == 2


def test_help_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["diff", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "rstreams diff wordcount.py wordcount_v2.py" in out
    assert "exit codes: 0 no state lost, 1 some state would be lost or misread" in out
