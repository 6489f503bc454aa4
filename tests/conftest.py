"""Shared fixtures: a broker on a temporary data directory, and batch builders."""

from __future__ import annotations

import ast
import functools
import gc
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest
from hypothesis import HealthCheck, settings

from exactly.app import Broker
from exactly.storage.clock import FakeClock
from exactly.storage.record_batch import SimpleRecord, encode_batch

#: internal topics of 3 partitions instead of Kafka's 50: the same behaviour, far fewer files
SMALL_INTERNAL_TOPICS = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3}
#: a broker whose scheduled jobs never run: the default of the broker fixtures, so a test
#: drives every job itself (by hand, after moving the FakeClock) and nothing runs beside it
FROZEN = {"exactly.jobs.enable": False}


#: one hypothesis profile for the suite: no per-example deadline (a loaded machine, CI's
#: among them, makes one example slow without making the code wrong) and, in CI, the same
#: examples every run, so a failure there is reproduced by running it again
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", parent=settings.get_profile("suite"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "suite")

#: what a test module imports that takes it out of the fast tier (``make check``): a child
#: process, a JVM, a browser, a network client or a served broker
NOT_FAST = ("subprocess", "socket", "http.client", "urllib.request", "requests", "confluent_kafka", "kafka",
            "aiokafka", "playwright", "pyspark", "exactly.app.testing", "exactly.app.server",
            "exactly.app.spark", "tests.kafka_support", "tests.browser", "tests.spark", "tests.test_cli",
            "tests.docs", "tests.kafka_fuzz",
            # a broker or an engine of its own: integration, with fsyncs and threads
            "exactly.app.broker", "exactly.app.engine.engine", "tests.storage_log", "tests.raw_txn")
#: fixtures that make a test an integration test whatever its module imports
NOT_FAST_FIXTURES = frozenset({"broker", "exactly_broker"})
#: fast-tier modules that run a child anyway, because the tier is where they belong: the type check
FAST_ANYWAY = frozenset({"test_types.py", "test_layering.py"})


@functools.cache
def is_fast(path: Path) -> bool:
    """Whether the test module at ``path`` needs none of :data:`NOT_FAST` (read from its imports)."""
    if path.name in FAST_ANYWAY:
        return True
    if "spark" in path.parts:
        return False
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
                 if isinstance(node, ast.ImportFrom) else [])
        if any(name == heavy or name.startswith(heavy + ".") for name in names for heavy in NOT_FAST):
            return False
    return True


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fast: the fast tier, `make check` (set from the module's imports)")
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
        if (is_fast(Path(item.fspath)) and not item.get_closest_marker("slow")
                and not NOT_FAST_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.fast)
        if not item.get_closest_marker("spread") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("spark-session" if file(item) in spark_files else file(item)))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


#: how long librdkafka may take to end a client's threads once the client is destroyed
CLIENT_GONE_S = 10.0


def librdkafka_clients() -> int:
    """librdkafka clients alive in this process: each has one ``rdk:main`` thread (the
    ``rdk:`` threads are the reliable sign; confluent-kafka's handles are not gc-tracked)."""
    alive = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            alive += (task / "comm").read_text().startswith("rdk:main")
        except OSError:  # the thread ended while we looked
            continue
    return alive


@pytest.fixture(autouse=True)
def no_leaked_kafka_client(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test that leaves a librdkafka client alive: such a client reconnects to
    its closed broker for the rest of the session, every second, on a busy machine (what
    made a descriptor test and a Spark callback flake). Clients of a fixture wider than
    the test are the fixture's to close."""
    before = librdkafka_clients()
    yield
    check_no_client_left(before, request.node.nodeid)


def check_no_client_left(before: int, test: str, timeout_s: float = CLIENT_GONE_S) -> None:
    """Fail ``test`` unless the librdkafka clients are back to ``before`` within ``timeout_s``."""
    if librdkafka_clients() <= before:
        return
    gc.collect()  # a client only the garbage collector still holds is destroyed here
    deadline = time.monotonic() + timeout_s
    while (alive := librdkafka_clients()) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive > before:
        pytest.fail(f"{test} left {alive - before} librdkafka client(s) alive: close every Producer, Consumer "
                    f"and AdminClient it creates (or the fixture that owns it should)", pytrace=False)


@pytest.fixture(autouse=True, scope="session")
def rest_answers_match_their_routes() -> Iterator[None]:
    """Every answer a Flask test client gets from a REST route, in every test, is what
    the route declares: its status and its answer model (tests/http_answers.py)."""
    from flask.testing import FlaskClient

    from tests.http_answers import checked

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FlaskClient, "open", checked(FlaskClient.open))
        yield


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


@pytest.fixture
def open_broker(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Broker]]:
    """Open (or, after closing it, reopen) a broker on the test's one data directory with
    ``config``; whatever is still open at the end is closed."""
    opened: list[Broker] = []

    def open_(**config: Any) -> Broker:
        b = Broker(tmp_path / "data", clock=clock, **{**SMALL_INTERNAL_TOPICS, **config})
        opened.append(b)
        return b

    yield open_
    for b in opened:
        b.close()


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
    return broker.engine.call(broker.engine.transactions.coordinator.init_producer_id, None, -1)[0]


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
