"""Consumer-group administration (exactly/app/engine/group_admin.py, the group coordinator's
reset, DeleteGroups and topic-deletion cleanup), over a real broker, each checked
again after the broker is reopened: what the coordinator answered must be what
``__consumer_offsets`` says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from exactly.app import Broker
from exactly.app.engine import group_admin, read_models
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.storage.clock import FakeClock
from exactly.storage.errors import GroupIdNotFoundError, InvalidRequestError, NonEmptyGroupError
from tests.conftest import SMALL_INTERNAL_TOPICS, data_batch

T0 = 1_700_000_000_000


@pytest.fixture
def open_broker(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Open (or reopen) the broker on one data directory; everything opened is closed."""
    opened: list[Broker] = []

    def open_() -> Broker:
        if opened:
            opened[-1].close()
        b = Broker(tmp_path / "data", clock=FakeClock(T0), **SMALL_INTERNAL_TOPICS)
        opened.append(b)
        return b

    yield open_
    for b in opened:
        b.close()


def _commit(broker: Broker, group: str, offsets: dict[tuple[str, int], int]) -> None:
    gc = broker.engine.groups.coordinator
    errors = broker.engine.call(gc.commit_offsets, group, {tp: CommittedOffset(o) for tp, o in offsets.items()})
    assert not any(errors.values())


def _committed(broker: Broker, group: str) -> dict[tuple[str, int], int]:
    g = broker.engine.groups.coordinator.describe(group)
    return {tp: c.offset for tp, c in g.committed.items()} if g else {}


def _reset(broker: Broker, group: str, to: str, value: int | None = None, topic: str | None = None) -> list[dict[str, Any]]:
    return broker.engine.call(group_admin.reset_offsets, broker.engine, group, to, value, topic)


@pytest.fixture
def orders(open_broker) -> Broker:
    """``orders``: partition 0 holds offsets 0-9 stamped T0+0 .. T0+9000, partition 1 three records."""
    broker = open_broker()
    broker.create_topic("orders", 2)
    for i in range(10):
        broker.produce("orders", 0, data_batch([b"v%d" % i], timestamp=T0 + 1000 * i))
    broker.produce("orders", 1, data_batch([b"a", b"b", b"c"], timestamp=T0))
    return broker


# -- offset reset --------------------------------------------------------------------------


def test_reset_to_earliest_latest_offset_and_timestamp_as_kafka_consumer_groups(orders, open_broker):
    _commit(orders, "svc", {("orders", 0): 5, ("orders", 1): 1})
    assert _reset(orders, "svc", "earliest") == [
        {"topic_name": "orders", "partition_id": 0, "previous_offset": 5, "offset": 0},
        {"topic_name": "orders", "partition_id": 1, "previous_offset": 1, "offset": 0}]
    _reset(orders, "svc", "latest")
    assert _committed(orders, "svc") == {("orders", 0): 10, ("orders", 1): 3}
    _reset(orders, "svc", "offset", 7)  # clamped into [log start, high watermark] per partition
    assert _committed(orders, "svc") == {("orders", 0): 7, ("orders", 1): 3}
    _reset(orders, "svc", "timestamp", T0 + 4500)  # the first record at or after the time
    assert _committed(orders, "svc") == {("orders", 0): 5, ("orders", 1): 3}  # none on 1: its end
    reopened = open_broker()
    assert _committed(reopened, "svc") == {("orders", 0): 5, ("orders", 1): 3}


def test_reset_of_one_topic_creates_offsets_for_a_new_group(orders):
    result = _reset(orders, "fresh", "offset", 2, topic="orders")
    assert [(r["partition_id"], r["previous_offset"], r["offset"]) for r in result] == [(0, None, 2), (1, None, 2)]
    assert queries_group_state(orders, "fresh") == "Empty"


def test_reset_to_latest_is_the_high_watermark_even_above_an_open_transaction(orders):
    producer = orders.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("orders", b"open", partition=0).get(timeout=10)
    log = orders.engine.partitions.log("orders", 0)
    assert log.last_stable_offset == 10 < log.high_watermark == 11
    _reset(orders, "svc", "latest", topic="orders")
    assert _committed(orders, "svc")[("orders", 0)] == 11
    producer.abort_transaction()


def test_reset_of_a_group_with_members_is_non_empty_group(orders):
    consumer = orders.consumer(group_id="live", auto_offset_reset="earliest")
    consumer.subscribe(["orders"])
    consumer.poll(timeout_ms=2000)
    assert queries_group_state(orders, "live") == "Stable"
    with pytest.raises(NonEmptyGroupError, match="Stable"):
        _reset(orders, "live", "earliest", topic="orders")
    consumer.close()


@pytest.mark.parametrize("to, value, topic, message", [
    ("newest", None, "orders", "reset to one of"),
    ("offset", None, "orders", "needs the offset"),
    ("timestamp", -5, "orders", "milliseconds since the epoch"),
    ("earliest", None, None, "no committed offsets"),
])
def test_bad_reset_requests_are_invalid_request(orders, to, value, topic, message):
    with pytest.raises(InvalidRequestError, match=message):
        _reset(orders, "nobody", to, value, topic)


# -- delete group --------------------------------------------------------------------------


def test_delete_group_removes_it_and_its_offsets_for_good(orders, open_broker):
    _commit(orders, "old", {("orders", 0): 4, ("orders", 1): 2})
    _commit(orders, "kept", {("orders", 0): 1})
    orders.engine.call(orders.engine.groups.coordinator.delete_group, "old")
    assert orders.engine.groups.coordinator.describe("old") is None
    with pytest.raises(GroupIdNotFoundError):
        orders.engine.call(orders.engine.groups.coordinator.delete_group, "old")
    reopened = open_broker()
    assert reopened.engine.groups.coordinator.describe("old") is None
    assert _committed(reopened, "kept") == {("orders", 0): 1}
    _commit(reopened, "old", {("orders", 0): 9})  # the id can be used again, from nothing
    assert _committed(reopened, "old") == {("orders", 0): 9}


def test_delete_group_with_members_is_non_empty_group(orders):
    consumer = orders.consumer(group_id="live", auto_offset_reset="earliest")
    consumer.subscribe(["orders"])
    consumer.poll(timeout_ms=2000)
    with pytest.raises(NonEmptyGroupError):
        orders.engine.call(orders.engine.groups.coordinator.delete_group, "live")
    assert queries_group_state(orders, "live") == "Stable"
    consumer.close()


def test_delete_unknown_group_is_group_id_not_found(orders):
    with pytest.raises(GroupIdNotFoundError):
        orders.engine.call(orders.engine.groups.coordinator.delete_group, "never")


# -- a deleted topic takes its offsets with it ------------------------------------------------


def test_deleting_a_topic_deletes_every_groups_offsets_on_it(orders, open_broker):
    orders.create_topic("other", 1)
    _commit(orders, "svc", {("orders", 0): 4, ("orders", 1): 2, ("other", 0): 0})
    _commit(orders, "audit", {("orders", 0): 1})
    orders.delete_topic("orders")
    assert _committed(orders, "svc") == {("other", 0): 0}
    assert _committed(orders, "audit") == {}
    reopened = open_broker()
    assert _committed(reopened, "svc") == {("other", 0): 0}
    assert _committed(reopened, "audit") == {}
    reopened.create_topic("orders", 2)  # the same name again starts without offsets
    assert _committed(reopened, "svc") == {("other", 0): 0}


def test_pending_transactional_offsets_of_a_deleted_topic_do_not_come_back_on_commit(orders, open_broker):
    orders.create_topic("other", 1)
    producer = orders.producer(transactional_id="eos")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("other", b"out", partition=0).get(timeout=10)
    producer.send_offsets_to_transaction({("orders", 0): 6, ("other", 0): 1}, "svc")
    orders.delete_topic("orders")
    producer.commit_transaction()
    assert _committed(orders, "svc") == {("other", 0): 1}
    reopened = open_broker()  # replayed: the tombstone outranks the pending offset
    assert _committed(reopened, "svc") == {("other", 0): 1}


def queries_group_state(broker: Broker, group: str) -> str:
    return broker.engine.call(read_models.group, broker.engine, group)["state"]


# -- DeleteGroups over the wire -----------------------------------------------------------------


def test_delete_groups_from_confluent_kafkas_admin_client(tmp_path: Path):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from tests.kafka_support import KafkaBroker

    with KafkaBroker(tmp_path / "data") as kafka:
        kafka.broker.create_topic("orders", 1)
        _commit(kafka.broker, "old", {("orders", 0): 0})
        consumer = kafka.broker.consumer(group_id="live")
        consumer.subscribe(["orders"])
        consumer.poll(timeout_ms=2000)
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "broker.address.family": "v4"})
        futures = admin.delete_consumer_groups(["old", "live", "never"], request_timeout=10)
        futures["old"].result(10)
        errors = {}
        for group in ("live", "never"):
            with pytest.raises(KafkaException) as raised:
                futures[group].result(10)
            errors[group] = raised.value.args[0].name()
        assert errors == {"live": "NON_EMPTY_GROUP", "never": "GROUP_ID_NOT_FOUND"}
        assert kafka.engine.groups.coordinator.describe("old") is None
        consumer.close()


def test_a_dry_run_plans_the_reset_and_commits_nothing(orders):
    _commit(orders, "svc", {("orders", 0): 5})
    plan = orders.engine.call(group_admin.reset_offsets, orders.engine, "svc", "earliest", None, None, False)
    assert plan == [{"topic_name": "orders", "partition_id": 0, "previous_offset": 5, "offset": 0}]
    assert _committed(orders, "svc") == {("orders", 0): 5}


def test_the_sqlite_mirror_follows_the_tombstones(orders):
    from sqlalchemy import text

    from exactly.coordinator.mirror_db import reader_engine

    orders.create_topic("other", 1)
    _commit(orders, "old", {("orders", 0): 1})
    _commit(orders, "svc", {("orders", 0): 4, ("other", 0): 0})
    orders.engine.call(orders.engine.groups.coordinator.delete_group, "old")
    orders.delete_topic("orders")
    orders.mirror.catch_up()
    db = reader_engine(orders.mirror.path)
    try:
        with db.connect() as connection:
            offsets = connection.execute(text("SELECT group_id, topic, offset FROM group_offsets")).all()
            groups = connection.execute(text("SELECT group_id FROM groups")).all()
    finally:
        db.dispose()
    assert [tuple(r) for r in offsets] == [("svc", "other", 0)]
    assert "old" not in {r[0] for r in groups}


def test_offset_delete_over_the_wire_spares_topics_the_members_consume(tmp_path: Path):
    from exactly.app.kafka.api import ApiKey
    from exactly.app.spark.kafka_client import KafkaConnection
    from tests.kafka_support import KafkaBroker, raw_connection

    def offset_delete(raw: KafkaConnection, group: str, topics: dict[str, list[int]]):
        return raw.request(ApiKey.OFFSET_DELETE, 0, {"group_id": group, "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in topics.items()]})

    def codes(response) -> dict[tuple[str, int], int]:
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    with KafkaBroker(tmp_path / "data") as kafka:
        broker = kafka.broker
        broker.create_topic("orders", 2)
        broker.create_topic("other", 1)
        raw = raw_connection(kafka.port)
        _commit(broker, "old", {("orders", 0): 3, ("orders", 1): 4})
        assert codes(offset_delete(raw, "old", {"orders": [0]})) == {("orders", 0): 0}
        assert _committed(broker, "old") == {("orders", 1): 4}

        consumer = broker.consumer(group_id="live")
        consumer.subscribe(["orders"])
        consumer.poll(timeout_ms=2000)
        consumer.commit({("orders", 0): 1, ("other", 0): 0})  # a member commits; it subscribes to orders only
        response = offset_delete(raw, "live", {"orders": [0], "other": [0]})
        assert response.error_code == 0
        assert codes(response) == {("orders", 0): 86, ("other", 0): 0}  # GROUP_SUBSCRIBED_TO_TOPIC
        assert _committed(broker, "live") == {("orders", 0): 1}
        assert offset_delete(raw, "never", {"orders": [0]}).error_code == 69  # GROUP_ID_NOT_FOUND
        consumer.close()
        raw.close()
