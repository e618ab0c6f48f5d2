"""Getting a SparkSession that can run rstreams, and giving back what a run started.

Three things go wrong on real machines, and this module is where each is handled:

- **Which Python the executors run.** PySpark starts its Python workers with
  ``SparkContext.pythonExec``, which it takes from the ``PYSPARK_PYTHON`` environment
  variable when the context starts, else ``python3`` from PATH. The conf
  ``spark.pyspark.python`` is only read by ``spark-submit`` when it launches a Python
  driver, so setting it on a builder changes nothing. A session rstreams creates runs
  its workers on :func:`worker_python`: ``spark.pyspark.python`` given to this run, else
  ``PYSPARK_PYTHON``, else this very interpreter (which has rstreams, pyarrow, pandas).
- **Executors that can't import rstreams.** Before a job, :func:`check_executors` runs
  one tiny Python task on an executor; if it fails, the error names the interpreter the
  executor ran, its version and what it could not import, and how to fix it, instead of
  a Java stack trace in the middle of the job.
- **Processes left behind.** A session whose JVM this module launched is stopped with
  its JVM (and so the JVM's Python daemons) by :func:`stop_session`, on every exit path.

An unreachable ``spark://`` (or ``k8s://``) master is reported before Spark starts, in
seconds, naming the URL (Spark itself retries for about a minute and then blames Java).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from rstreams.errors import ConfigError

log = logging.getLogger("rstreams.spark")

#: Stateful streaming operators keep their state in RocksDB, checkpointed as changelogs.
STATE_STORE_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}

DEFAULT_MASTER = "local[*]"
PYTHON_CONF = "spark.pyspark.python"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
LOG4J_CONF = Path(__file__).with_name("log4j2.properties")
#: Seconds to reach a master's port, and for an executor to run the pre-flight check.
CONNECT_TIMEOUT = 5.0
CHECK_TIMEOUT = float(os.environ.get("RSTREAMS_SPARK_CHECK_TIMEOUT", "120"))

# Application ids of the contexts whose executors passed the check (once per context).
_checked: set[str] = set()
# Sessions this module launched a JVM for: id(session) -> the gateway's process.
_launched: dict[int, Any] = {}


def worker_python(conf: dict[str, str] | None = None) -> str:
    """The interpreter the Python workers of a new session run.

    ``spark.pyspark.python`` given to this run (``conf`` or ``--conf``), else the one
    spark-submit was given (it sets ``PYSPARK_PYTHON``), else ``PYSPARK_PYTHON``, else
    ``sys.executable``: the interpreter running rstreams, never ``python3`` from PATH.

    >>> import sys
    >>> worker_python({"spark.pyspark.python": "./environment/bin/python"})
    './environment/bin/python'
    >>> worker_python() in (sys.executable, __import__("os").environ.get("PYSPARK_PYTHON"))
    True
    """
    explicit = (conf or {}).get(PYTHON_CONF)
    if explicit:
        return explicit
    return os.environ.get("PYSPARK_PYTHON") or sys.executable


def get_session(
    master: str | None = None,
    spark: SparkSession | None = None,
    *,
    app_name: str = "rstreams",
    conf: dict[str, str] | None = None,
) -> tuple[SparkSession, bool]:
    """(session, created): ``spark`` if given, else the active session (when no
    ``master`` is asked for, e.g. under ``spark-submit``), else a new one on ``master``
    (``local[*]`` unless spark-submit or ``spark.master`` says otherwise).

    A created session must be given back with :func:`stop_session`.
    """
    if spark is not None:
        return spark, False
    if master is None:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active, False
    submitted = SparkConf().get("spark.master", None)  # (spark-submit's --master)
    effective = master or submitted or DEFAULT_MASTER
    check_master_reachable(effective)
    builder: Any = SparkSession.builder.appName(app_name)
    if master is not None or submitted is None:
        builder = builder.master(effective)
    settings, python = _settings(effective, conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    # Under spark-submit (or a gateway someone else runs) the JVM is not ours to stop.
    launches_jvm = SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ
    if launches_jvm:
        _check_java(effective)
    had_context = SparkContext._active_spark_context is not None
    previous = os.environ.get("PYSPARK_PYTHON")
    # SparkContext reads the workers' interpreter from the environment, once, as it
    # starts; put it there for that moment only.
    os.environ["PYSPARK_PYTHON"] = python
    try:
        session = builder.getOrCreate()
    except Exception as e:
        if launches_jvm:
            _stop_gateway()
        raise ConfigError(_start_failure(effective, e)) from e
    finally:
        if previous is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = previous
    if had_context:
        # getOrCreate handed back a context someone else started: not ours to stop.
        return session, False
    if launches_jvm and SparkContext._gateway is not None:
        _launched[id(session)] = getattr(SparkContext._gateway, "proc", None)
    session.sparkContext.setLogLevel(os.environ.get("RSTREAMS_SPARK_LOG_LEVEL", "ERROR"))
    return session, True


def _settings(master: str, conf: dict[str, str] | None) -> tuple[dict[str, str], str]:
    """The settings of a session rstreams creates on ``master`` (its state store, UTC,
    quiet logs, shuffle partitions for local masters; ``conf`` over them) and the
    workers' Python; a relative Python for a local master is refused."""
    settings = {
        **STATE_STORE_CONF,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        **(conf or {}),
    }
    python = worker_python(conf)
    settings[PYTHON_CONF] = python
    local = master.startswith("local")
    if local and not os.path.isabs(python) and os.sep in python:
        # (on a cluster ./environment/bin/python is where spark.archives unpacks; local
        # workers start in this directory, where no archive is unpacked)
        raise ConfigError(
            f"spark.pyspark.python={python!r} is relative: that works on cluster "
            f"executors (spark.archives unpacks there), not with master {master!r}; "
            "give an absolute path, or leave it unset to run this interpreter"
        )
    if local and "spark.sql.shuffle.partitions" not in settings:
        # Spark's 200 suits clusters; locally each one is a task (and, streaming, a
        # state store per micro-batch, fixed for the checkpoint's life).
        settings["spark.sql.shuffle.partitions"] = str(2 * _local_cores(master))
    if not os.environ.get("RSTREAMS_SPARK_LOG_LEVEL") and JAVA_OPTIONS not in settings:
        # Quiet from the JVM's first line on (setLogLevel only applies once it runs).
        settings[JAVA_OPTIONS] = f"-Dlog4j2.configurationFile=file:{LOG4J_CONF}"
    return settings, python


def _local_cores(master: str) -> int:
    """Cores of a ``local``, ``local[N]``, ``local[*]`` or ``local[N, F]`` master.

    >>> _local_cores("local[3]"), _local_cores("local"), _local_cores("local[2, 4]")
    (3, 1, 2)
    """
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    first = inside.split(",")[0].strip()
    return (os.cpu_count() or 1) if first == "*" else max(1, int(first or 1))


def stop_session(session: SparkSession) -> None:
    """Stop a session :func:`get_session` created, and the JVM it launched for it (with
    the JVM go the Python worker daemons), so that nothing outlives the run."""
    with contextlib.suppress(Exception):  # the JVM may be gone already
        session.stop()
    if id(session) in _launched:
        proc = _launched.pop(id(session))
        _stop_gateway(proc)


def _stop_gateway(proc: Any = None) -> None:
    gateway = SparkContext._gateway
    proc = proc if proc is not None else getattr(gateway, "proc", None)
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is None:
        return
    # The JVM exits when its stdin closes; terminate it if it does not in time.
    with contextlib.suppress(Exception):
        if proc.stdin:
            proc.stdin.close()
    try:
        proc.wait(timeout=15)
    except Exception:
        with contextlib.suppress(Exception):
            proc.terminate()
            proc.wait(timeout=5)
        with contextlib.suppress(Exception):
            proc.kill()
            proc.wait(timeout=5)


def check_master_reachable(master: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Fail in seconds, naming the URL, when no host of a ``spark://`` or ``k8s://``
    master accepts a connection (Spark would retry for a minute, then blame Java).

    >>> check_master_reachable("local[2]")   # nothing to reach
    >>> check_master_reachable("spark://127.0.0.1:1", timeout=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    rstreams.errors.ConfigError: can not reach the Spark master spark://127.0.0.1:1 ...
    """
    endpoints = _master_endpoints(master)
    if not endpoints:
        return
    errors = []
    for host, port in endpoints:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as e:
            errors.append(f"{host}:{port}: {e.strerror or type(e).__name__}")
    raise ConfigError(
        f"can not reach the Spark master {master} ({'; '.join(errors)}); is the master "
        "running and the URL right? Its web UI (port 8080 by default) shows the URL as "
        "'spark://HOST:PORT'. docs/spark.md, 'Moving to a cluster', shows how to start one."
    )


def _master_endpoints(master: str) -> list[tuple[str, int]]:
    if master.startswith("spark://"):
        hosts = master[len("spark://") :].split(",")
        out = []
        for h in hosts:
            host, _, port = h.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"a Spark master URL is spark://HOST:PORT; got {master!r}")
            out.append((host.strip("[]"), int(port)))
        return out
    if master.startswith("k8s://"):
        url = master[len("k8s://") :]
        parts = urlsplit(url if "://" in url else f"https://{url}")
        if parts.hostname:
            return [(parts.hostname, parts.port or (80 if parts.scheme == "http" else 443))]
    return []


def _check_java(master: str) -> None:
    """Fail in one line when the JVM can not start for want of Java (Spark's launcher
    would print "JAVA_HOME is not set" and PySpark a gateway error under it)."""
    if _spark_env_script() is not None:
        return  # (it may set JAVA_HOME for the launcher: let the launcher say)
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise ConfigError(
                f"can not start Spark (master {master!r}): JAVA_HOME is {home!r}, which has "
                "no bin/java; point JAVA_HOME at a Java 17 or later installation, or unset "
                "it to use the java on PATH"
            )
    elif shutil.which("java") is None:
        raise ConfigError(
            f"can not start Spark (master {master!r}): no Java found (no java on PATH and "
            "JAVA_HOME is not set); the Spark backend needs Java 17 or later: install it "
            "(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
        )


def _spark_env_script() -> str | None:
    """The ``spark-env.sh`` Spark's launcher sources before it looks for Java, if any."""
    conf = os.environ.get("SPARK_CONF_DIR")
    if not conf:
        import pyspark

        home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
        conf = os.path.join(home, "conf")
    script = os.path.join(conf, "spark-env.sh")
    return script if os.path.isfile(script) else None


def _start_failure(master: str, e: BaseException) -> str:
    first = _first_line(e)
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return (
            f"could not start Spark (master {master!r}): no Java found; the Spark backend "
            f"needs Java 17 or later on PATH or in JAVA_HOME ({first})"
        )
    return f"could not start Spark (master {master!r}): {first}"


# -- the pre-flight check ------------------------------------------------------------------

# Compiled into a module that no executor can import, so that cloudpickle ships the
# function by value: the check must run where rstreams itself may be missing.
_PROBE_SOURCE = """
def probe(_):
    import json, socket, sys
    out = {"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3],
           "host": socket.gethostname()}
    missing = []
    for name in ("rstreams", "msgpack", "msgspec", "mmh3", "attrs", "pyarrow", "pandas"):
        try:
            module = __import__(name)
        except Exception as e:
            missing.append("%s (%s: %s)" % (name, type(e).__name__, e))
        else:
            if name == "rstreams":
                out["rstreams"] = getattr(module, "__version__", "?")
    out["missing"] = missing
    return [json.dumps(out)]
"""


def _probe() -> Any:
    module = types.ModuleType("_rstreams_executor_probe")
    exec(compile(_PROBE_SOURCE, "<rstreams executor check>", "exec"), module.__dict__)
    return module.__dict__["probe"]


def check_executors(session: SparkSession, timeout: float = CHECK_TIMEOUT) -> None:
    """Run one tiny Python task on an executor and fail, naming the interpreter it ran
    and what it could not import, unless it can import rstreams and its dependencies.

    Done once per SparkContext; a session whose executors can't start Python at all,
    or that gets no executor within ``timeout`` seconds, fails the same way.
    """
    from rstreams._version import __version__

    sc = session.sparkContext
    app = sc.applicationId
    python = getattr(sc, "pythonExec", None) or "python3"
    master = sc.master or "?"
    if app in _checked or (master.startswith("local") and python == sys.executable):
        return  # (local executors running this very interpreter have what it has)
    group = f"rstreams-check-{app}"
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            sc.setJobGroup(group, "rstreams: can the executors import rstreams?", True)
            outcome["rows"] = sc.parallelize([0], 1).mapPartitions(_probe()).collect()
        except BaseException as e:  # reported below, on the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name="rstreams-executor-check", daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(timeout)
    fix = (
        "Install rstreams[spark] into that interpreter on every executor, or point the "
        "executors at one that has it (--conf spark.pyspark.python=PATH, or the "
        "PYSPARK_PYTHON environment variable), or ship a packed environment with "
        "spark.archives (docs/spark.md, 'Moving to a cluster')."
    )
    if thread.is_alive():
        with contextlib.suppress(Exception):
            sc.cancelJobGroup(group)
        thread.join(10)
        raise ConfigError(
            f"no Spark executor ran the rstreams check within {time.monotonic() - started:.0f}"
            f" s (master {master}): is a worker registered with the master, with enough "
            "free cores and memory for this application?"
        )
    if "error" in outcome:
        reason = _python_failure(outcome["error"])
        raise ConfigError(
            f"the Spark executors could not run Python with {python!r} (master {master}): "
            f"{reason}. {fix}"
        )
    info = json.loads(outcome["rows"][0])
    where = f"{info['executable']} (Python {info['version']}) on host {info['host']}"
    if info["missing"]:
        raise ConfigError(
            f"the Spark executors run {where}, which can not import "
            f"{', '.join(info['missing'])}. {fix}"
        )
    if info.get("rstreams") != __version__:
        raise ConfigError(
            f"the Spark executors run rstreams {info.get('rstreams')} from {where}, this "
            f"driver rstreams {__version__}; install the same version on both"
        )
    driver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not info["version"].startswith(driver + "."):
        raise ConfigError(
            f"the Spark executors run {where}, the driver Python {driver}: PySpark needs "
            "the same minor version on both"
        )
    _checked.add(app)


def _python_failure(e: BaseException) -> str:
    """What a failed check says about why Python could not run: the worker's own
    stderr when Spark relays it, else the first line that names a cause."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    at = text.find("Error from python worker:")
    if at >= 0:
        said = []
        for ln in text[at + len("Error from python worker:") :].splitlines():
            ln = ln.strip()
            if ln.startswith(("PYTHONPATH", "Call stack", "at ", "org.", "java.")):
                break
            if ln:
                said.append(ln)
        if said:
            return "the worker said: " + " / ".join(said)[:600]
    for marker in ("Cannot run program", "error=", "terminated with code", "exited"):
        for ln in lines:
            if marker in ln and not ln.startswith("at "):
                return ln[:400]
    for ln in lines:
        if "Exception:" in ln and not ln.rstrip().endswith("Exception:"):
            return ln[:400]
    return lines[0][:400] if lines else type(e).__name__


def configure_state_store(spark: SparkSession) -> None:
    """Use the RocksDB state store with changelog checkpointing (streaming)."""
    for key, value in STATE_STORE_CONF.items():
        try:
            spark.conf.set(key, value)
        except Exception as e:  # a static conf set differently by the user's session
            log.warning("can not set %s on this session: %s", key, _first_line(e))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
