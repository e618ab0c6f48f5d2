"""The Spark compiler's translation rules are registered by an explicit call
(rstreams.runtime.spark.rules.register_rules), not by importing a module: without it a
Compiler refuses to start, naming the call; with it (once or more) every rule is in
``translate``. Checked in a fresh interpreter, where nothing has registered them yet."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("pyspark", reason="the Spark backend needs pip install 'rstreams[spark]'")

_SCRIPT = r"""
import json
from rstreams import StreamBuilder, TumblingWindow
from rstreams.dsl import nodes as n
from rstreams.errors import IllegalStateError
from rstreams.runtime.spark import runner  # imports every rule module, registers nothing
from rstreams.runtime.spark.compiled import translate
from rstreams.runtime.spark.compiler import Compiler, SourceInfo
from rstreams.runtime.spark.rules import RULES, register_rules

b = StreamBuilder("rules")
left, right = b.source("l"), b.source("r")
left.keyBy(str).window(TumblingWindow(size=10)).count().toRStream().sink("counts")
left.join(right).where(str).equalTo(str).apply(lambda a, c: a).sink("joined")
sources = {t: SourceInfo(i, t, (t + ".txt",)) for i, t in enumerate(("l", "r"))}

def compiler():
    return Compiler(None, b.pipeline, sources, streaming=False, on_error="fail",
                    calibration=lambda: None)

out = {"before": len(translate.registry)}
try:
    compiler()
except IllegalStateError as e:
    out["refused"] = str(e)
register_rules()
out["after"] = len(translate.registry)
register_rules()
out["again"] = len(translate.registry)
out["dispatch"] = all(translate.dispatch(t) is rule for t, rule in RULES.items())
out["types"] = sorted(t.__name__ for t in RULES)
compiler()  # no longer refused
print(json.dumps(out))
"""


def test_the_compiler_refuses_without_registration_and_translates_with_it() -> None:
    import json

    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["before"] == 1  # the fallback alone: importing registered nothing
    assert "register_rules()" in out["refused"]
    assert out["after"] == out["again"] == 1 + len(out["types"])  # idempotent
    assert out["dispatch"]
    # The windowed aggregation and join rules, which used to register on import, too.
    assert {"WindowAggregateNode", "JoinNode", "LateNode", "AggregateNode"} <= set(out["types"])
