"""Shared fixtures: a broker on a temporary data directory, and batch builders."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

import pytest

from exactly.app import Broker
from exactly.storage.clock import FakeClock
from exactly.storage.record_batch import SimpleRecord, encode_batch

#: internal topics of 3 partitions instead of Kafka's 50: the same behaviour, far fewer files
SMALL_INTERNAL_TOPICS = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3}
#: a broker whose scheduled jobs never run: the default of the broker fixtures, so a test
#: drives every job itself (by hand, after moving the FakeClock) and nothing runs beside it
FROZEN = {"exactly.jobs.enable": False}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "jobs: the test's broker fixture runs the scheduled jobs (not FROZEN)")
    config.addinivalue_line("markers", "spread: under xdist, send the file's tests to workers one by one")
    if not config.pluginmanager.has_plugin("exactly"):  # an install made before the pytest11 entry point
        from exactly.app.testing import pytest_plugin

        config.pluginmanager.register(pytest_plugin, "exactly")


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns the groups into node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``: ``--dist loadgroup``), one worker runs a whole
    test file, so a module-scoped fixture is built once. The files whose tests share the
    process's SparkSession (the ``spark`` fixture, tests/spark/conftest.py) all go to one
    worker: each session costs a JVM and a Python daemon per kind of data-source call,
    about 15 s of CPU, and the suite is CPU-bound. A file marked ``spread`` (long tests
    that share nothing) is sent test by test, and a test with an ``xdist_group`` of its
    own keeps it. Tests marked ``slow`` (and the rest of their files) go first: the
    workers start on the longest work, instead of one of them ending the run alone with a
    Spark job that started last."""
    def file(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    spark_files = {file(item) for item in items if "spark" in getattr(item, "fixturenames", ())}
    for item in items:
        if not item.get_closest_marker("spread") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("spark-session" if file(item) in spark_files else file(item)))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def jobs_config(request: pytest.FixtureRequest) -> dict[str, bool]:
    """FROZEN unless the test is marked ``jobs``: for broker fixtures."""
    return {} if request.node.get_closest_marker("jobs") else FROZEN


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock, request: pytest.FixtureRequest) -> Iterator[Broker]:
    with Broker(tmp_path / "data", clock=clock, **SMALL_INTERNAL_TOPICS, **jobs_config(request)) as b:
        yield b


def data_batch(values: Sequence[bytes], producer_id: int = -1, epoch: int = -1, sequence: int = -1,
               transactional: bool = False, timestamp: int | None = None) -> bytes:
    """A producer's batch of ``values`` (keys k0, k1, ...)."""
    records = [SimpleRecord(v, key=b"k%d" % i, timestamp=timestamp) for i, v in enumerate(values)]
    return encode_batch(records, producer_id=producer_id, producer_epoch=epoch,
                        base_sequence=sequence, transactional=transactional)


def producer_id(broker: Broker) -> int:
    """A producer id the broker hands out (InitProducerId without a transactional id):
    a batch written through a broker must carry one (tests of the storage layer write
    any id there, tests/storage_log.py)."""
    return broker.engine.call(broker.engine._transaction_coordinator.init_producer_id, None, -1)[0]


class LineTail:
    """The complete lines a child process has appended to ``path`` since the last
    poll (a half-written last line waits for the next poll): how crash tests follow
    a child they are about to kill."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._consumed = 0

    def poll(self) -> list[str]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self._consumed)
            data = f.read()
        complete = data[:data.rfind(b"\n") + 1]
        self._consumed += len(complete)
        return complete.decode().splitlines()
