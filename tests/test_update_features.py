"""UpdateFeatures (``kafka-features upgrade|downgrade --feature transaction.version=N``)
on one node: what Kafka's controller refuses (INVALID_UPDATE_VERSION, the request as a
whole), the level and ApiVersions' epoch moving with a change, clients following it --
a Produce v12 is only verified at level 1 -- and the level outliving a SIGKILL, in
``__cluster_metadata``, whatever the ``transaction.version`` config says afterwards.

Kafka's own tool against Exactly and Apache Kafka: tests/kafka/test_update_features.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from exactly.app.kafka.wire import ApiKey
from exactly.coordinator import features
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka_support import SOFTWARE, KafkaBroker, raw_connection

pytestmark = pytest.mark.timeout(120)

T = "features"
CLUSTER_AUTHORIZATION_FAILED, INVALID_UPDATE_VERSION, TRANSACTION_ABORTABLE = 31, 95, 120
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = features.UPGRADE, features.SAFE_DOWNGRADE, features.UNSAFE_DOWNGRADE


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data") as k:
        yield k


def update(port: int, *changes: tuple[str, int, int], version: int = 1, validate_only: bool = False) -> Any:
    conn = raw_connection(port)
    try:
        if version == 0:
            wanted = [{"feature": name, "max_version_level": level, "allow_downgrade": kind != UPGRADE}
                      for name, level, kind in changes]
        else:
            wanted = [{"feature": name, "max_version_level": level, "upgrade_type": kind}
                      for name, level, kind in changes]
        return conn.request(ApiKey.UPDATE_FEATURES, version, {"timeout": 30_000, "feature_updates": wanted,
                                                              "validate_only": validate_only})
    finally:
        conn.sock.close()


def finalized(port: int) -> tuple[dict[str, int], int]:
    """The finalized levels and their epoch, as ApiVersions v4 reports them."""
    conn = raw_connection(port)
    try:
        answer = conn.request(ApiKey.API_VERSIONS, 4, SOFTWARE)
    finally:
        conn.sock.close()
    return {f.name: f.max_version_level for f in answer.finalized_features}, answer.finalized_features_epoch


def tv(port: int) -> int:
    return finalized(port)[0].get(features.TRANSACTION_VERSION, 0)


def test_kafka_features_downgrade_and_upgrade_change_the_level_and_its_epoch(kafka: KafkaBroker) -> None:
    before, epoch = finalized(kafka.port)
    assert before[features.TRANSACTION_VERSION] == 2
    done = update(kafka.port, (features.TRANSACTION_VERSION, 1, SAFE_DOWNGRADE))
    assert (done.error_code, [(r.feature, r.error_code) for r in done.results]) == (
        0, [(features.TRANSACTION_VERSION, 0)])
    after, moved = finalized(kafka.port)
    assert after == {**before, features.TRANSACTION_VERSION: 1} and moved > epoch
    assert update(kafka.port, (features.TRANSACTION_VERSION, 0, UNSAFE_DOWNGRADE), version=2).error_code == 0
    levels, _ = finalized(kafka.port)
    assert features.TRANSACTION_VERSION not in levels, "level 0 is not finalized: left out, as Kafka leaves it"
    v2 = update(kafka.port, (features.TRANSACTION_VERSION, 2, UPGRADE), version=2)
    assert (v2.error_code, getattr(v2, "results", ())) == (0, ())  # v2 lists no features
    assert tv(kafka.port) == 2


@pytest.mark.parametrize("changes,why", [
    ([(features.TRANSACTION_VERSION, 1, UPGRADE)], "Can't downgrade the version of this feature without"),
    ([(features.TRANSACTION_VERSION, 3, UPGRADE)], "only supports versions [0-2]"),
    ([(features.TRANSACTION_VERSION, -1, SAFE_DOWNGRADE)], "cannot be less than 0"),
    ([(features.TRANSACTION_VERSION, 1, 7)], "does not support the given upgrade type"),
    ([(features.GROUP_VERSION, 0, SAFE_DOWNGRADE)], "serves group.version 1 only"),
    ([(features.TRANSACTION_VERSION, 1, SAFE_DOWNGRADE), ("share.version", 1, UPGRADE)],
     "share.version. Local controller does not support this feature"),
])
def test_a_refused_update_changes_nothing(kafka: KafkaBroker, changes: list, why: str) -> None:
    """Kafka's controller: the first refusal fails every update of the request."""
    before = finalized(kafka.port)
    for version in (0, 1, 2):
        if version == 0 and any(kind not in (UPGRADE, SAFE_DOWNGRADE) for _, _, kind in changes):
            continue
        answer = update(kafka.port, *changes, version=version)
        assert answer.error_code == INVALID_UPDATE_VERSION and why in answer.error_message, answer
        assert getattr(answer, "results", ()) == ()
    assert finalized(kafka.port) == before


def test_validate_only_and_an_unknown_feature_at_level_0(kafka: KafkaBroker) -> None:
    before = finalized(kafka.port)
    checked = update(kafka.port, (features.TRANSACTION_VERSION, 1, SAFE_DOWNGRADE), validate_only=True)
    assert checked.error_code == 0 and finalized(kafka.port) == before
    # Kafka's controller lets any feature be set to 0, "not finalized"
    assert update(kafka.port, ("share.version", 0, SAFE_DOWNGRADE)).error_code == 0
    assert finalized(kafka.port)[0] == before[0]


def test_update_features_needs_alter_on_the_cluster(tmp_path: Path) -> None:
    standard = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    with KafkaBroker(tmp_path / "data", **standard) as kafka:
        refused = update(kafka.port, (features.TRANSACTION_VERSION, 1, SAFE_DOWNGRADE))
        assert refused.error_code == CLUSTER_AUTHORIZATION_FAILED
        assert tv(kafka.port) == 2


def _produce_v12(port: int, txn_id: str) -> int:
    """A Kafka 4 client's first transactional batch, with no AddPartitionsToTxn before it."""
    conn = raw_connection(port)
    try:
        init = conn.request(ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": txn_id, "transaction_timeout": 60_000})
        batch = encode_batch([SimpleRecord(b"v")], producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                             base_sequence=0, transactional=True)
        answer = conn.request(ApiKey.PRODUCE, 12, {"transactional_id": txn_id, "acks": -1, "timeout": 10_000,
                                                   "topic_data": [{"name": T, "partition_data": [
                                                       {"index": 0, "records": batch}]}]})
        return answer.responses[0].partition_responses[0].error_code
    finally:
        conn.sock.close()


def test_the_level_outlives_a_sigkill_and_clients_follow_it(tmp_path: Path) -> None:
    """Answered means durable: the FeatureLevelRecord is fsynced in ``__cluster_metadata``
    before UpdateFeatures answers, so after a SIGKILL the broker starts at the level set
    (the config's 2 only starts a broker whose level was never changed), and a Produce
    v12 is only verified there -- TRANSACTION_ABORTABLE -- until it is upgraded again."""
    from tests.test_kafka_crash import ServedBroker

    broker = ServedBroker(tmp_path / "data")  # transaction.version: its default, 2
    try:
        conn = raw_connection(broker.port)
        conn.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": T, "num_partitions": 1, "replication_factor": 1}],
                                               "timeout": 10_000})
        conn.sock.close()
        assert update(broker.port, (features.TRANSACTION_VERSION, 1, SAFE_DOWNGRADE)).error_code == 0
        _, epoch = finalized(broker.port)
        broker.kill()
        broker.start()
        levels, restarted = finalized(broker.port)
        assert levels[features.TRANSACTION_VERSION] == 1 and restarted > epoch
        assert _produce_v12(broker.port, "verified-only") == TRANSACTION_ABORTABLE
        assert update(broker.port, (features.TRANSACTION_VERSION, 2, UPGRADE)).error_code == 0
        assert _produce_v12(broker.port, "implicit-add") == 0
    finally:
        broker.kill()


def test_the_embedded_producer_follows_a_downgrade(tmp_path: Path) -> None:
    """A producer started after ``transaction.version`` was set to 1 keeps its epoch
    across transactions (no EndTxn v5 bump); the level is the broker's, not the config's."""
    from exactly.app import Broker

    with Broker(tmp_path / "data") as b:
        b.create_topic(T, partitions=1)
        b.engine.call(b.engine.features.update, [(features.TRANSACTION_VERSION, 1, SAFE_DOWNGRADE)])
        assert b.engine.config.transaction_version == 2 and b.engine.features.transaction_version == 1
        p = b.producer(transactional_id="embedded")
        try:
            p.init_transactions()
            epoch = p.producer_epoch
            for value in (b"a", b"b"):
                p.begin_transaction()
                p.send(T, value, partition=0)
                p.commit_transaction()
            assert p.producer_epoch == epoch
        finally:
            p.close()
