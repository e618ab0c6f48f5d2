"""Under pytest-xdist with ``--dist loadgroup`` (what ``./dev test`` runs), every Spark
test runs in one worker process: one SparkSession and one standalone cluster per test
run, not one per worker (two JVMs, or two clusters, on a 2-core machine).

The scheduler sends the tests whose ids end in the same ``@group`` to one worker; the
worker appends ``@spark`` to a test's id when it has the ``xdist_group("spark")`` mark of
tests/conftest.py at the time xdist's own collection hook reads the marks.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def test_every_spark_test_is_in_the_spark_group(request: pytest.FixtureRequest) -> None:
    config = request.config
    if not hasattr(config, "workerinput") or not config.getvalue("loadgroup"):
        pytest.skip("only under pytest-xdist with --dist loadgroup")
    spark_dir = Path(__file__).parent
    spark_ids = [
        item.nodeid for item in request.session.items if spark_dir in Path(item.path).parents
    ]
    assert request.node.nodeid in spark_ids
    assert [i for i in spark_ids if not i.endswith("@spark")] == []
