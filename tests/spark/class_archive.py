"""A class-data-sharing archive (AppCDS) of the classes a Spark session loads, for every
JVM the tests start: with it a session starts in 6.8 s instead of 9-14 s and its first
action takes 1.4 s instead of 3.2-3.6 s (a quiet 2-core machine); the suite starts
dozens of them (a session per test worker, a driver per Spark job run as a subprocess).

``make test`` builds it once per environment (``python -m tests.spark.class_archive
PATH``: a session runs with ``-XX:ArchiveClassesAtExit``, about 40 s) and the tests'
``JAVA_TOOL_OPTIONS`` name it (tests/spark/conftest.py). Without it, or with one a JVM
cannot use (another JDK, another class path -- spark-submit's own launcher JVM is one),
the JVM runs as it would without: ``-Xlog:disable`` keeps its CDS warnings out of the
outputs the tests read."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

#: the tests' JVMs live seconds: the client compiler only and the serial collector start
#: faster and spend less CPU on a 2-core machine than Spark's server defaults, and
#: nothing the tests check depends on either
JIT_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: where ``make test`` puts the archive: in the environment, which it belongs to
ARCHIVE = Path(sys.prefix) / "spark-classes.jsa"

#: what the archived session does: start, run a plan through the Python workers, stop,
#: and wait for its JVM, which writes the archive as it exits (after this interpreter's
#: exit it would go on alone, and the build would not know when it is done)
_WORKLOAD = """
from exactly.app.spark.session import spark_session
spark = spark_session("class-archive")
spark.createDataFrame([(1, "a")], "x int, y string").selectExpr("x * 2", "upper(y)").collect()
jvm = spark.sparkContext._gateway.proc
spark.stop()
jvm.stdin.close()  # the JVM exits when its stdin ends (PythonGatewayServer)
jvm.wait(timeout=300)
"""


def java_options(archive: Path = ARCHIVE) -> str:
    """The tests' ``JAVA_TOOL_OPTIONS``: the archive's, when there is one."""
    if not archive.exists():
        return JIT_OPTIONS
    return f"{JIT_OPTIONS} -XX:SharedArchiveFile={archive} -Xlog:disable"


def build(archive: Path) -> None:
    """Run a session whose JVM writes the classes it loaded to ``archive`` as it exits."""
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    env = {**os.environ, "JAVA_TOOL_OPTIONS": f"{JIT_OPTIONS} -XX:ArchiveClassesAtExit={partial} -Xlog:disable"}
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", _WORKLOAD], env=env, check=True, timeout=600,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not partial.exists():
        raise RuntimeError("the JVM wrote no class archive")
    os.replace(partial, archive)
    print(f"{archive}: Spark's classes archived in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else ARCHIVE)
