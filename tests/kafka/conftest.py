"""The fixtures of the Kafka-beside-Exactly tests.

``real_kafka``: Apache Kafka (``tests/kafka/real_kafka.py``), one JVM per test process,
started by the first test that asks for it and stopped at the end. Every test here is
in the xdist group ``real-kafka`` and marked ``slow`` (its module's ``pytestmark``), so
under ``make test`` one worker runs them all, among the first, and one JVM serves them;
the Kafka-internal topics are created before the first test, so no test meets a
coordinator still loading.

``kafka_and_exactly``: a :class:`~tests.kafka.differential.Peer`, once for the real
Kafka and once for a fresh Exactly of the test's own (``exactly_broker``): a scenario
written once runs against both. ``brokers``: both at once, for scenarios that compare
the two answers field by field. A failed test shows the end of Kafka's log.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from tests.kafka.differential import FIND_COORDINATOR, Peer, retry
from tests.kafka.real_kafka import JavaPrograms, RealKafka

#: the settings both brokers run with, beyond a single node's: Kafka's authorizer (the
#: ACL APIs answer only with one) with the anonymous principal a super user, so that
#: everything else is allowed as without it; timed-out transactions looked for every
#: half second instead of every 10 s
SHARED_CONFIG = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
                 "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "super.users": "User:ANONYMOUS"}
#: lines of Kafka's log shown under a failed test
LOG_LINES = 120


@pytest.fixture(scope="session")
def real_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealKafka]:
    kafka = RealKafka(tmp_path_factory.mktemp("real-kafka"), SHARED_CONFIG)
    try:
        kafka.start()
        create_internal_topics(kafka)
        yield kafka
    finally:
        kafka.stop()


def create_internal_topics(kafka: RealKafka) -> None:
    """FindCoordinator for a group and a transactional id until both answer: Kafka
    creates ``__consumer_offsets`` and ``__transaction_state`` on the first ask and
    loads them, answering COORDINATOR_NOT_AVAILABLE meanwhile (Exactly has both from
    its start)."""
    peer = Peer("kafka", kafka.bootstrap)
    try:
        for key_type in (0, 1):
            answer = retry(lambda: peer.request(FIND_COORDINATOR, 3, {"key": "warm-up", "key_type": key_type}),
                           timeout=60)
            assert answer["error_code"] == 0, answer
    finally:
        peer.close()


@pytest.fixture(scope="session")
def java_programs(tmp_path_factory: pytest.TempPathFactory) -> JavaPrograms:
    """tests/kafka/*.java, compiled once per test process."""
    return JavaPrograms(tmp_path_factory.mktemp("java-classes"))


@pytest.fixture
def exactly_broker_config() -> dict[str, Any]:
    """Exactly's ``exactly_broker`` runs with :data:`SHARED_CONFIG` too."""
    return dict(SHARED_CONFIG)


@pytest.fixture(params=["kafka", "exactly"])
def kafka_and_exactly(request: pytest.FixtureRequest) -> Iterator[Peer]:
    """The real Kafka, then a fresh Exactly: the test runs once against each."""
    peer = _peer(request, request.param)
    yield peer
    peer.close()


@pytest.fixture
def brokers(request: pytest.FixtureRequest) -> Iterator[tuple[Peer, Peer]]:
    """(the real Kafka, a fresh Exactly), for answers compared field by field."""
    kafka, exactly = _peer(request, "kafka"), _peer(request, "exactly")
    yield kafka, exactly
    kafka.close()
    exactly.close()


def _peer(request: pytest.FixtureRequest, name: str) -> Peer:
    if name == "kafka":
        kafka: RealKafka = request.getfixturevalue("real_kafka")
        return Peer("kafka", kafka.bootstrap)
    server = request.getfixturevalue("exactly_broker")
    return Peer("exactly", server.bootstrap)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    kafka = getattr(item, "funcargs", {}).get("real_kafka")
    if report.failed and isinstance(kafka, RealKafka):
        tail = "\n".join(kafka.log().splitlines()[-LOG_LINES:])
        report.sections.append((f"real Kafka's log ({kafka.log_path}), its end", tail))
