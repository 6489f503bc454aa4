"""A producer id is its principal's across a restart (issue 29, item 2), and
DescribeProducers does not hand another principal's idempotent producer to a writer.

Before: the binding lived in memory, so right after a restart a user with Write on a
topic could send one batch under each id 0..19, own them all, and leave the owner's
idempotent producer failing every delivery with CLUSTER_AUTHORIZATION_FAILED. Now the
binding is written to ``__cluster_metadata`` before InitProducerId answers.

Two principals need SASL on the wire; the producer-id rule is engine-level (as in
tests/test_authorization.py), DescribeProducers is asked on the wire as
``User:ANONYMOUS``."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from exactly.app.kafka.api import ApiKey
from exactly.app.security import acl as model
from exactly.app.security.acl import CLUSTER_NAME, AclOperation, AclPermissionType, ResourceType
from exactly.app.security.principal import KafkaPrincipal
from exactly.storage.errors import ClusterAuthorizationFailedError
from tests.conftest import data_batch
from tests.kafka_support import KafkaBroker, raw_connection

pytestmark = pytest.mark.timeout(60)

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
ALICE, MALLORY = KafkaPrincipal.parse("User:alice"), KafkaPrincipal.parse("User:mallory")


def produce(kafka: KafkaBroker, principal: KafkaPrincipal, producer_id: int, epoch: int, sequence: int) -> None:
    """One idempotent batch to ``shared``-0 as ``principal``, acknowledged."""
    batch = data_batch([b"v%d" % sequence], producer_id=producer_id, epoch=epoch, sequence=sequence)
    kafka.engine.call(kafka.engine.partitions.start_produce, "shared", 0, batch, -1, None, principal)


def test_another_principal_cannot_take_over_producer_ids_after_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with KafkaBroker(data, **STANDARD) as kafka:
        kafka.broker.create_topic("shared", 1)
        pid, epoch = kafka.engine.call(kafka.engine.transactions.init_producer_id, None, 60_000, principal=ALICE)
        produce(kafka, ALICE, pid, epoch, 0)
    with KafkaBroker(data, **STANDARD) as kafka:
        refused = []
        for producer_id in range(20):  # the attack: one batch under each id, right after the restart
            try:
                produce(kafka, MALLORY, producer_id, 0, 0 if producer_id != pid else 1)
            except ClusterAuthorizationFailedError:
                refused.append(producer_id)
        # alice's id stays hers; the others were never handed out (the rest of the block
        # the restart skipped: never handed out again either), so nobody loses them
        assert refused == [pid]
        for sequence in range(1, 11):  # alice's producer, alive across the restart, goes on
            produce(kafka, ALICE, pid, epoch, sequence)
        assert kafka.engine.partitions.partition_offsets("shared", 0).high_watermark == 1 + 19 + 10


def test_describe_producers_hides_another_principals_idempotent_producer(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "data", **STANDARD) as kafka, closing(raw_connection(kafka.port)) as raw:
        kafka.broker.create_topic("shared", 1)
        grants = [model.AclBinding(model.ResourcePattern(ResourceType.TOPIC, "shared"), model.AccessControlEntry(
            "User:ANONYMOUS", "*", op, AclPermissionType.ALLOW)) for op in (AclOperation.READ, AclOperation.WRITE)]
        kafka.engine.call(kafka.engine.access.create_acls, grants)
        alices, epoch = kafka.engine.call(kafka.engine.transactions.init_producer_id, None, 60_000, principal=ALICE)
        produce(kafka, ALICE, alices, epoch, 0)
        mine = raw.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60_000,
                                                        "producer_id": -1, "producer_epoch": -1})
        assert mine.error_code == 0
        produce(kafka, KafkaPrincipal.parse("User:ANONYMOUS"), mine.producer_id, mine.producer_epoch, 0)

        def described() -> set[int]:
            answer = raw.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "shared", "partition_indexes": [0]}]})
            partition = answer.topics[0].partitions[0]
            assert partition.error_code == 0
            return {p.producer_id for p in partition.active_producers}

        assert described() == {mine.producer_id}, "Read on the topic: its own producer only"
        kafka.engine.call(kafka.engine.access.create_acls, [model.AclBinding(
            model.ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME),
            model.AccessControlEntry("User:ANONYMOUS", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW))])
        assert described() == {mine.producer_id, alices}, "an operator (Describe on the cluster) sees every one"
