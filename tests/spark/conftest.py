"""One SparkSession for the whole test run: starting one costs 5-8 s and its first
Python-worker action 3-6 s more, so every Spark test shares it (under pytest-xdist
every Spark test runs on one worker, tests/conftest.py, so that is still one session)."""

from __future__ import annotations

from typing import Iterator

import pytest


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
