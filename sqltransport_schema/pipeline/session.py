"""The Spark session: local[*] by default, --master/--conf for a cluster, JDBC jars from Debian's
/usr/share/java (or jars the user names), quiet logs. The only module that imports pyspark, lazily.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING

from .. import errors
from .connect import jdbc_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
# Spark prints "Setting default log level" unless the logger of the class that starts logging
# (the shell's, or spark-submit's for pyspark) is configured with the root's level
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


# What Spark's JVM prints at every start that tells the user nothing: Spark's launcher adds the incubator
# module jdk.incubator.vector to each JVM it starts, and Java warns of incubator modules on stderr (no
# option turns that off). The JVM's stderr passes through a filter that drops these lines and keeps the rest.
# Newer Javas (23+) add sun.misc.Unsafe's deprecation block, which a library of Spark's triggers, the same way.
JVM_NOISE = (
    "WARNING: Using incubator modules:",
    "WARNING: A terminally deprecated method in sun.misc.Unsafe has been called",
    "WARNING: sun.misc.Unsafe::",
    "WARNING: Please consider reporting this to the maintainers of class",
    "WARNING: sun.misc.Unsafe",
)


def _forward(stream: IO[bytes], to: IO[str]) -> None:
    """Copy the JVM's stderr to ours, line by line, leaving out JVM_NOISE."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        if not line.startswith(JVM_NOISE):
            to.write(line)
            to.flush()


def _quiet_context(settings: dict[str, str]) -> None:
    """Start Spark's JVM (spark-submit, as SparkContext would) with these settings and its stderr filtered,
    and the SparkContext on it, which the session builder then takes."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    read, write = os.pipe()  # read from before the start: what a JVM that fails to start says still shows
    forwarder = threading.Thread(target=_forward, args=(os.fdopen(read, "rb"), sys.stderr), name="spark-stderr", daemon=True)
    forwarder.start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write})
    except BaseException:
        os.close(write)
        forwarder.join(5)  # the JVM has exited: its last lines, then the end of the pipe
        raise
    os.close(write)  # the JVM holds its own copy
    SparkContext(conf=conf, gateway=gateway)


class SparkUnavailable(errors.Unavailable):
    """pyspark (or Java) is not there; the message says what to install."""


def require_pyspark() -> ModuleType:
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise SparkUnavailable("the pipeline needs pyspark: pip install -e '.[spark]' (and Java 17 on PATH)") from exc
    return pyspark


def default_jars(extra: list[str] | None = None) -> list[str]:
    """Every JDBC driver jar Debian installed (postgresql, sqlite, jTDS), plus the user's."""
    return jdbc_jars() + [j for j in (extra or []) if j]


def _quiet_conf_dir() -> str:
    folder = Path(tempfile.gettempdir()) / "sqltransport-spark-conf"
    folder.mkdir(exist_ok=True)
    target = folder / "log4j2.properties"
    if not target.is_file() or target.read_text() != QUIET_LOG4J2:
        target.write_text(QUIET_LOG4J2)
    return str(folder)


def get_session(
    master: str | None = None,
    conf: dict | list | None = None,
    jars: list[str] | None = None,
    app_name: str = "sqltransport-schema pipeline",
    driver_memory: str = "2g",
) -> tuple[SparkSession, float]:
    """The active Spark session (as spark-submit made it) or a new one; returns (session, start-up seconds)."""
    require_pyspark()
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, 0.0
    started = time.perf_counter()
    conf_dir = _quiet_conf_dir()
    os.environ.setdefault("SPARK_CONF_DIR", conf_dir)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started us: its --master holds
    settings = {"spark.master": master or "local[*]"} if master or not under_submit else {}
    settings |= {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": driver_memory,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        "spark.jars": ",".join(default_jars(jars)),
        "spark.python.worker.reuse": "true",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{conf_dir}/log4j2.properties",
    }
    items = conf.items() if isinstance(conf, dict) else (c.split("=", 1) for c in (conf or []))
    for key, value in items:
        settings[key.strip()] = value.strip()
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    if not under_submit and SparkContext._active_spark_context is None:
        _quiet_context(settings)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session, time.perf_counter() - started
