"""Java options for every JVM the tests start: SparkSessions, the spark-submit of
``rstreams run --backend spark``, a standalone cluster's daemons and its executors.

The JIT's first tier only, and the serial collector: a test's JVM lives seconds to a
minute on small data, so the optimizing compiler's threads and the parallel collector
cost more CPU than they win back (a 300-line ``rstreams run --backend spark``: 34 CPU-s
-> 21). What Spark runs is the same; only how the JVM compiles and collects differs.
"""

from __future__ import annotations

JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: Environment that gives JAVA_OPTIONS to the JVMs Spark's launcher starts: every
#: driver (spark-submit reads SPARK_SUBMIT_OPTS; PySpark's own session starts one too)
#: and a standalone master or worker (SPARK_DAEMON_JAVA_OPTS).
SPARK_JAVA_ENV = {"SPARK_SUBMIT_OPTS": JAVA_OPTIONS, "SPARK_DAEMON_JAVA_OPTS": JAVA_OPTIONS}

#: spark-defaults.conf lines for executors (a worker starts them with the app's options).
SPARK_DEFAULTS = f"spark.executor.extraJavaOptions {JAVA_OPTIONS}\n"
