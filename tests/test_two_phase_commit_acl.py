"""KIP-939's guard: the endless-transaction attack through two-phase commit.

A two-phase transaction never times out, so whoever may open one may hold a shared
topic's LSO for ever. Kafka guards it twice: ``transaction.two.phase.commit.enable``
is false by default, and InitProducerId with enable2Pc (which keepPreparedTxn needs)
asks TwoPhaseCommit on the transactional id besides Write, answering
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) without it. A granted one shows its age
in ``/metrics`` and on the console, and the operator's abort ends it.

One broker (authorizer on, two-phase commit on, the test's Kafka connections
``User:ANONYMOUS``; the HTTP face's token ``User:admin``, a super user)."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Iterator

import pytest

from exactly.app.http import HttpSettings, create_app
from exactly.app.kafka.api import ApiKey
from exactly.app.security import acl as model
from exactly.app.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.app.spark.kafka_client import KafkaConnection
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker, raw_connection
from tests.test_two_phase_commit import add_partition, init, lso, produce

pytestmark = pytest.mark.timeout(60)

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin"}
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
O, X = AclOperation, ResourceType.TRANSACTIONAL_ID


def grant(kafka: KafkaBroker, resource_type: ResourceType, name: str, operation: AclOperation,
          pattern: PatternType = PatternType.LITERAL) -> None:
    binding = model.AclBinding(model.ResourcePattern(resource_type, name, pattern),
                               model.AccessControlEntry("User:ANONYMOUS", "*", operation, AclPermissionType.ALLOW))
    assert kafka.engine.call(kafka.engine.access.create_acls, [binding]) == [None]


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **STANDARD, **TWO_PHASE_COMMIT) as k:
        k.broker.create_topic("shared", 1)
        grant(k, ResourceType.TOPIC, "shared", O.WRITE)
        grant(k, X, "mine", O.WRITE)
        yield k


@pytest.fixture
def raw(kafka: KafkaBroker) -> Iterator[KafkaConnection]:
    with closing(raw_connection(kafka.port)) as client:
        yield client


def test_write_on_the_transactional_id_is_not_enough_for_two_phase_commit(
        kafka: KafkaBroker, raw: KafkaConnection) -> None:
    """The attack of issue 29: Write on its own transactional id and on a shared topic."""
    assert init(raw, "mine").error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert init(raw, "mine", keep=True).error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert kafka.engine.counters.authorization_denials[("TRANSACTIONAL_ID", "TWO_PHASE_COMMIT")] == 2
    assert init(raw, "mine", enable_2pc=False).error_code == 0, "an ordinary transactional producer still may"
    grant(kafka, X, "other", O.TWO_PHASE_COMMIT)
    assert init(raw, "other").error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "and Write is still needed"
    assert lso(kafka, "shared") == 0


def test_a_granted_two_phase_transaction_shows_its_age_and_the_operators_abort_ends_it(
        kafka: KafkaBroker, raw: KafkaConnection) -> None:
    grant(kafka, X, "mi", O.TWO_PHASE_COMMIT, PatternType.PREFIXED)
    producer = init(raw, "mine")
    assert producer.error_code == 0
    held = (producer.producer_id, producer.producer_epoch)
    assert add_partition(raw, "mine", "shared", held) == 0
    assert produce(raw, "mine", "shared", held, 0, [b"held"]) == 0
    assert lso(kafka, "shared") == 0  # read_committed consumers of "shared" wait

    api = create_app(kafka.engine, HttpSettings(token="s3cret"), test_config={"TESTING": True}).test_client()
    admin = {"Authorization": "Bearer s3cret"}
    metrics = api.get("/metrics", headers=admin).get_data(as_text=True)
    assert "exactly_two_phase_transactions_open 1.0" in metrics
    assert "exactly_two_phase_transaction_oldest_age_seconds " in metrics
    assert api.post("/login", data={"user": "admin", "password": "s3cret"}).status_code == 302
    page = api.get("/transactions").get_data(as_text=True)
    row = page[page.index('data-txn="mine"'):]
    row = row[:row.index("</tr>")]
    assert "two-phase" in row and "never times out" in row and "open for" in row

    cluster = kafka.engine.topics.cluster_id
    aborted = api.post(f"/v3/clusters/{cluster}/transactions/mine/admin-abort", headers=admin)
    assert aborted.status_code == 200, aborted.json
    assert lso(kafka, "shared") == 2  # the record and the ABORT marker: nothing held
    metrics = api.get("/metrics", headers=admin).get_data(as_text=True)
    assert "exactly_two_phase_transactions_open 0.0" in metrics


def test_two_phase_commit_is_off_by_default_even_with_every_acl(tmp_path: Path) -> None:
    with KafkaBroker(tmp_path / "data", **STANDARD) as kafka, closing(raw_connection(kafka.port)) as raw:
        grant(kafka, X, "*", O.ALL)
        assert init(raw, "mine").error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert init(raw, "mine", enable_2pc=False).error_code == 0
