"""One SparkSession per test process: starting one costs 5-8 s and its first
Python-worker action 3-6 s more, so every Spark test of a process shares it (under
pytest-xdist, each worker that runs a Spark file starts one, tests/conftest.py).

Every JVM the tests start (these sessions and the jobs run as subprocesses) runs with
the client compiler only and the serial collector (``JAVA_TOOL_OPTIONS``): a test's
JVM lives seconds, and those start faster and spend less CPU on a 2-core machine than
Spark's server defaults; nothing the tests check depends on the JIT or the collector."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from app.spark.session import spark_session

    session = spark_session("exactly-tests")
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)
