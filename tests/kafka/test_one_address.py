""""Moving to a Kafka cluster is changing one address" (README.md), on a real Kafka: the
README's consume-transform-produce example runs as written against Apache Kafka and
prints what the README shows, and so does docs/testing.md's application (``process``
in examples/test_exactly_once_app.py). docs/python.md's examples are the embedded
broker's, with no address to change. The Spark sink's exactly-once write needs KIP-939's
two-phase commit, which Kafka 4.4.0 does not serve (pinned below)."""

from __future__ import annotations

import threading
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.docs import blocks, run_readme_example, section
from tests.kafka.differential import Peer, unique
from tests.kafka.test_transactions import wait_for
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker, read_to_end

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(180)]


def test_the_readmes_example_runs_unchanged_on_kafka(real_kafka) -> None:
    (expected,) = blocks(section("README.md", "What it is for"), "text")
    assert run_readme_example(real_kafka.bootstrap) == expected


def test_the_testing_guides_application_processes_exactly_once_on_kafka(
        real_kafka, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/test_exactly_once_app.py's ``process``, unchanged but for its topic,
    group and transactional id (the README's example above uses the same names on
    this Kafka): every order paid once."""
    import examples.test_exactly_once_app as app

    names = unique("app")
    for constant in ("INPUT", "OUTPUT", "GROUP", "TRANSACTIONAL_ID"):
        monkeypatch.setattr(app, constant, f"{names}-{constant.lower()}")
    bootstrap = real_kafka.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(app.INPUT, 1), NewTopic(app.OUTPUT, 1)]).values():
        future.result(30)
    feeder = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in range(app.ORDERS):
        feeder.produce(app.INPUT, key=b"%d" % n, value=b"order %d" % n)
    assert feeder.flush(30) == 0
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(app.process, bootstrap, stop)
        try:
            reader = {"bootstrap.servers": bootstrap, "group.id": names, "isolation.level": "read_committed"}
            wait_for(lambda: running.done() or len(read_to_end(reader, app.OUTPUT, 1)) >= app.ORDERS,
                     "every order paid", timeout=90)
        finally:
            stop.set()
        running.result(timeout=60)
    paid = read_to_end({"bootstrap.servers": bootstrap, "group.id": names, "isolation.level": "read_committed"},
                       app.OUTPUT, 1)
    assert sorted(paid) == sorted(b"paid order %d" % n for n in range(app.ORDERS))


def test_the_spark_sinks_two_phase_commit_is_not_served_by_kafka_4_4(
        brokers: tuple[Peer, Peer], exactly_broker_config: dict, tmp_path: Path) -> None:
    """The exactly-once Spark sink prepares each task's transaction with KIP-939's
    InitProducerId v6 (``enable2Pc``) and completes it from the driver with
    ``keepPreparedTxn``. Kafka 4.4.0 serves InitProducerId up to v5 and closes the
    connection at v6; with ``unstable.api.versions.enable=true`` and
    ``transaction.two.phase.commit.enable=true`` it takes ``enable2Pc`` but answers
    ``keepPreparedTxn`` UNSUPPORTED_VERSION, so the sink cannot commit on it yet. Exactly
    serves both once ``transaction.two.phase.commit.enable`` is on (off by default, as in
    Kafka: its shared broker here refuses ``enable2Pc``)."""
    from exactly.app.spark.kafka_client import KafkaClient
    from exactly.storage.errors import TransactionalIdAuthorizationFailedError

    kafka, exactly = brokers
    with KafkaClient(exactly.bootstrap) as client, pytest.raises(TransactionalIdAuthorizationFailedError):
        client.init_producer_id(unique("2pc"))
    with KafkaBroker(tmp_path / "data", **exactly_broker_config, **TWO_PHASE_COMMIT) as enabled, \
            KafkaClient(enabled.bootstrap) as client:
        assert client.init_producer_id(unique("2pc")).producer_epoch == 0
    with KafkaClient(kafka.bootstrap, timeout=2) as client, pytest.raises(ConnectionError):
        client.init_producer_id(unique("2pc"))
