"""A SparkSession set up for Exactly on this machine: the SQLite JDBC driver on the
class path, Python workers that run this interpreter (so they import ``exactly.app.spark``),
loopback networking, and the ``exactly`` data source registered. Any other session has
it too, through Spark's discovery of ``pyspark_exactly`` (docs/spark.md's ``pyspark``
command line); registering here also covers a checkout the workers cannot discover it in.

``spark.jars`` is read only when the JVM starts: a session that already exists keeps
its class path, so this must build the first session of the process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

#: Debian's ``libxerial-sqlite-jdbc-java`` (``make test`` / ``make pipeline`` install it)
SQLITE_JDBC_JAR = Path("/usr/share/java/sqlite-jdbc.jar")
#: where Debian puts the driver's native library; the jar ships none
SQLITE_JNI_DIR = Path("/usr/lib/x86_64-linux-gnu/jni")
#: errors only, from the JVM's first line (Spark's default logs INFO and start-up warnings)
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
#: the folder that holds the ``exactly`` package (the checkout, or site-packages): workers
#: must import ``exactly.app.spark`` even when it is not installed
PROJECT_ROOT = Path(__file__).resolve().parents[3]


def _worker_environment() -> None:
    """Workers are started by the JVM with this process's environment."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(PROJECT_ROOT) not in path:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *path])


def spark_session(app_name: str = "exactly", master: str = "local[2]", **conf: Any):
    """The process's SparkSession, created with Exactly's settings (``conf`` adds or
    overrides Spark settings, e.g. ``{"spark.task.maxFailures": 2}``)."""
    _worker_environment()
    from pyspark.sql import SparkSession

    if not SQLITE_JDBC_JAR.exists():
        raise FileNotFoundError(
            f"{SQLITE_JDBC_JAR} is missing: install Debian's libxerial-sqlite-jdbc-java "
            "(`make test` or `make pipeline` does)")
    jni = f"-Dorg.sqlite.lib.path={SQLITE_JNI_DIR} -Dorg.sqlite.lib.name=libsqlitejdbc.so"
    driver = f"{jni} -Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
    settings: dict[str, Any] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.jars": str(SQLITE_JDBC_JAR),
        "spark.driver.extraJavaOptions": driver,
        "spark.executor.extraJavaOptions": jni,
        **conf,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark) -> None:
    """Register the ``exactly`` data source with ``spark``."""
    from exactly.app.spark.datasource import ExactlyDataSource

    spark.dataSource.register(ExactlyDataSource)
