"""Java options for every JVM the tests start: SparkSessions, the spark-submit of
``rstreams run --backend spark``, a standalone cluster's daemons and its executors.

A test's JVM lives seconds to a minute on small data, so what costs is starting up:
the optimizing compiler's threads and the parallel collector cost more CPU than they
win back, so the JIT's first tier only and the serial collector (a 300-line
``rstreams run --backend spark``: 34 CPU-s -> 21); and the classes of Spark's jars are
not verified as they load (a small session: 21.3 and 17.9 CPU-s -> 19.3 and 15.5).
What Spark runs is the same; only how the JVM compiles, collects and loads differs.
"""

from __future__ import annotations

JAVA_OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    " -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"
)

#: Environment that gives JAVA_OPTIONS to the JVMs Spark's launcher starts: every
#: driver (spark-submit reads SPARK_SUBMIT_OPTS; PySpark's own session starts one too)
#: and a standalone master or worker (SPARK_DAEMON_JAVA_OPTS).
SPARK_JAVA_ENV = {"SPARK_SUBMIT_OPTS": JAVA_OPTIONS, "SPARK_DAEMON_JAVA_OPTS": JAVA_OPTIONS}

#: spark-defaults.conf lines for executors (a worker starts them with the app's options).
SPARK_DEFAULTS = f"spark.executor.extraJavaOptions {JAVA_OPTIONS}\n"
