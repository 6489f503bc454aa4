"""One SparkSession per test process: starting one costs 5-8 s and its first
Python-worker action 3-6 s more, so every Spark test of a process shares it (under
pytest-xdist, each worker that runs a Spark file starts one, tests/conftest.py).

Every JVM the tests start (these sessions and the jobs run as subprocesses) runs with
the options of tests/spark/class_archive.py (``JAVA_TOOL_OPTIONS``): the client
compiler only, the serial collector, and the archive of Spark's classes that
``make test`` builds."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from tests.spark.class_archive import java_options

os.environ.setdefault("JAVA_TOOL_OPTIONS", java_options())


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from exactly.app.spark.session import spark_session

    session = spark_session("exactly-tests")
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)
