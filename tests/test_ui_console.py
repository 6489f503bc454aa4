"""The console's topic, record-browser, produce and group-administration pages
(exactly/app/http/console/topics.py, exactly/app/http/console/groups.py) through Flask's test client over a
real broker; group members with their assignments from a real confluent-kafka
consumer over the Kafka listener."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.app.http import create_app
from exactly.storage.errors import ProducerFencedError
from exactly.storage.record_batch import SimpleRecord, encode_batch
from tests.kafka_support import KafkaBroker
from tests.waiting import eventually

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
T0 = 1_700_000_000_000


@pytest.fixture
def client(broker: Broker):
    return create_app(broker.engine, test_config={"TESTING": True}).test_client()


def _csrf(client, path: str = "/") -> str:
    match = CSRF.search(client.get(path).get_data(as_text=True))
    assert match, f"no CSRF token in the forms of {path}"
    return match.group(1)


def _post(client, path: str, data: dict, page: str = "/"):
    return client.post(path, data={"csrf_token": _csrf(client, page), **data})


def _text(response) -> str:
    return unescape(response.get_data(as_text=True))


def _flash(client) -> str:
    """The flash messages the next page shows."""
    html = _text(client.get("/"))
    return " ".join(re.findall(r'class="flash flash-\w+"[^>]*>([^<]*)<', html))


@pytest.fixture
def orders(broker: Broker) -> Broker:
    broker.create_topic("orders", 2, {"retention.ms": "3600000"})
    for i in range(6):
        broker.produce("orders", 0, encode_batch([SimpleRecord(b'{"n": %d}' % i, key=b"k%d" % i,
                                                               headers=(("trace", b"t%d" % i),),
                                                               timestamp=T0 + 1000 * i)]))
    return broker


# -- topic page -----------------------------------------------------------------------------


def test_the_topic_page_shows_partitions_configs_size_and_producers(client, orders):
    producer = orders.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("orders", b"open", partition=1).get(timeout=10)
    html = _text(client.get("/topics/orders"))
    assert 'data-partition="0"' in html and 'data-partition="1"' in html
    retention = html[html.index('data-config="retention.ms"'):]
    assert "3600000" in retention[:300] and ">set<" in retention[:400]
    segment = html[html.index('data-config="segment.bytes"'):]
    assert "default" in segment[:300]
    assert ">tx<" in html  # the producer holding partition 1, with its transactional id
    on_disk = sum(orders.engine.partitions.log("orders", p).size_bytes for p in (0, 1))
    assert f"data-size>{on_disk} B<" in html
    assert "/topics/orders/partitions/1/records" in html
    assert client.get("/topics/nope").status_code == 404
    producer.abort_transaction()


def test_the_overview_links_each_topic_to_its_page(client, orders):
    assert 'href="/topics/orders"' in _text(client.get("/"))


# -- create and delete -------------------------------------------------------------------------


def test_create_a_topic_from_the_console(client, orders):
    response = _post(client, "/new-topic", {"name": "payments", "partitions": "3",
                                            "configs": "cleanup.policy=compact\nretention.ms=1000"}, "/new-topic")
    assert response.status_code == 303 and response.headers["Location"].endswith("/topics/payments")
    assert orders.engine.topics.topic("payments").partitions == 3
    assert orders.engine.topics.topic("payments").overrides == {"cleanup.policy": "compact", "retention.ms": "1000"}


@pytest.mark.parametrize("form, error", [
    ({"name": "orders", "partitions": "1"}, "TOPIC_ALREADY_EXISTS (36): topic 'orders' already exists"),
    ({"name": "x", "partitions": "0"}, "INVALID_PARTITIONS (37)"),
    ({"name": "x", "partitions": "two"}, "INVALID_PARTITIONS (37)"),
    ({"name": "x", "partitions": "2147483647"}, "POLICY_VIOLATION (44): Excessively large number of partitions"),
    ({"name": "bad name!", "partitions": "1"}, "INVALID_TOPIC_EXCEPTION (17)"),
    ({"name": "x", "configs": "retention.ms=soon"}, "INVALID_CONFIG (40)"),
    ({"name": "x", "configs": "no separator"}, "INVALID_REQUEST (42)"),
])
def test_create_errors_show_the_kafka_error_and_keep_the_form(client, orders, form, error):
    response = _post(client, "/new-topic", form, "/new-topic")
    html = _text(response)
    assert response.status_code == 400 and error in html
    assert f'value="{form["name"]}"' in html
    assert "x" not in orders.engine.topics.topic_names()


def test_delete_a_topic_from_the_console_takes_its_group_offsets(client, orders):
    consumer = orders.consumer(group_id="svc", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([("orders", 0)])
    consumer.poll(timeout_ms=2000)
    consumer.commit()
    consumer.close()
    assert client.post("/topics/orders/delete").status_code == 403  # no CSRF token
    response = _post(client, "/topics/orders/delete", {}, "/topics/orders")
    assert response.status_code == 303 and response.headers["Location"].endswith("/")
    assert "orders" not in orders.engine.topics.topic_names()
    assert "Deleted topic orders" in _flash(client)
    assert orders.engine.groups.coordinator.describe("svc").committed == {}


def test_deleting_an_internal_topic_is_refused_with_its_error(client, orders):
    orders.engine.call(orders.engine.topics.ensure_internal_topic, "__consumer_offsets")
    _post(client, "/topics/__consumer_offsets/delete", {}, "/topics/orders")
    assert "INVALID_TOPIC_EXCEPTION (17)" in _flash(client)
    assert "__consumer_offsets" in orders.engine.topics.topic_names()


# -- produce -----------------------------------------------------------------------------------


def test_produce_a_record_with_key_and_headers(client, orders):
    response = _post(client, "/topics/orders/produce",
                     {"partition": "1", "key": "user-7", "value": '{"total": 12}', "headers": "source: console\ntrace: abc"},
                     "/topics/orders")
    assert response.status_code == 303 and response.headers["Location"].endswith("/topics/orders/partitions/1/records/0")
    record = orders.fetch("orders", 1, 0)
    detail = _text(client.get(response.headers["Location"]))
    assert "Produced to orders-1 at offset 0." in detail
    assert '"total": 12' in detail and "user-7" in detail and "console" in detail
    assert record.high_watermark == 1


@pytest.mark.parametrize("outcome, done, pill", [("commit", "committed", "committed"),
                                                  ("abort", "aborted", "aborted · never delivered")])
def test_produce_inside_a_transaction_then_commit_or_abort(client, orders, outcome, done, pill):
    response = _post(client, "/topics/orders/produce",
                     {"partition": "1", "value": "in a txn", "transactional_id": "console-tx", "outcome": outcome},
                     "/topics/orders")
    assert response.headers["Location"].endswith("/topics/orders/partitions/1/records/0")
    detail = _text(client.get(response.headers["Location"]))
    assert f"Produced to orders-1 at offset 0 in a transaction of console-tx, {done}." in detail
    assert f'<span class="pill pill-{"green" if outcome == "commit" else "red"}">{pill}</span>' in detail
    log = orders.engine.partitions.log("orders", 1)
    assert log.last_stable_offset == log.high_watermark == 2  # the record and its marker


def test_produce_without_partition_uses_the_key_and_errors_are_flashed(client, orders):
    response = _post(client, "/topics/orders/produce", {"partition": "", "key": "k", "value": "v"}, "/topics/orders")
    assert "/topics/orders/partitions/" in response.headers["Location"]
    _post(client, "/topics/orders/produce", {"partition": "9", "value": "v"}, "/topics/orders")
    assert "UNKNOWN_TOPIC_OR_PARTITION (3)" in _flash(client)
    _post(client, "/topics/orders/produce", {"value": "v", "headers": "no colon"}, "/topics/orders")
    assert "INVALID_REQUEST (42)" in _flash(client)


def test_a_console_transaction_fences_the_producer_that_had_the_id(client, orders):
    running = orders.producer(transactional_id="shared")
    running.init_transactions()
    _post(client, "/topics/orders/produce", {"partition": "0", "value": "v", "transactional_id": "shared"},
          "/topics/orders")
    running.begin_transaction()
    with pytest.raises(ProducerFencedError):
        running.send("orders", b"zombie", partition=0).get(timeout=10)


# -- record browser ------------------------------------------------------------------------------


def _rows(html: str) -> list[int]:
    return [int(o) for o in re.findall(r'<tr class="rec-\w+" data-offset="(\d+)"', html)]


def test_browse_page_jump_and_filter(client, orders):
    base = "/topics/orders/partitions/0/records"
    assert _rows(_text(client.get(base))) == [0, 1, 2, 3, 4, 5]
    assert _rows(_text(client.get(base + "?limit=2&offset=2"))) == [2, 3]
    assert _rows(_text(client.get(base + "?limit=2&before=2"))) == [0, 1]
    assert _rows(_text(client.get(base + "?time=" + str(T0 + 3500)))) == [4, 5]  # the first at or after the time
    assert _rows(_text(client.get(base + "?time=2023-11-14T22:13:23"))) == [3, 4, 5]  # T0 + 3 s, as UTC
    assert _rows(_text(client.get(base + "?q=K4"))) == [4]
    html = _text(client.get(base + "?offset=99"))
    assert "OFFSET_OUT_OF_RANGE (1)" in html and _rows(html) == [0, 1, 2, 3, 4, 5]
    html = _text(client.get(base + "?time=2030-01-01T00:00:00"))
    assert "No record at or after that time" in html


def test_browse_shows_headers_and_each_format(client, orders):
    base = "/topics/orders/partitions/0/records"
    html = _text(client.get(base + "?offset=1&limit=1"))
    assert "trace" in html and "t1" in html and 'fmt-json' in html
    html = _text(client.get(base + "?offset=1&limit=1&format=hex"))
    assert "7b 22 6e 22 3a 20 31 7d" in html  # {"n": 1}


def test_the_live_tail_returns_only_newer_records_and_the_next_poller(client, orders):
    base = "/topics/orders/partitions/0/records"
    assert 'id="tail"' in _text(client.get(base))  # the newest page tails
    assert 'id="tail"' not in _text(client.get(base + "?offset=0&limit=2"))  # an older page does not
    tail = _text(client.get("/fragments/topics/orders/partitions/0/records/tail?after=6"))
    assert _rows(tail) == [] and "after=6" in tail
    orders.produce("orders", 0, encode_batch([SimpleRecord(b"new", key=b"k6")]))
    tail = _text(client.get("/fragments/topics/orders/partitions/0/records/tail?after=6"))
    assert _rows(tail) == [6] and "after=7" in tail


def test_the_record_detail_shows_the_batch(client, orders):
    html = _text(client.get("/topics/orders/partitions/0/records/2"))
    batch = html[html.index('id="batch"'):]
    assert "2–2" in batch and "none" in batch and 'data-transactional>no' in batch
    assert "Not transactional: every consumer reads it" in html
    assert client.get("/topics/orders/partitions/0/records/6").status_code == 416


# -- consumer groups -----------------------------------------------------------------------------


def test_reset_an_empty_groups_offsets_from_the_console(client, orders):
    page = "/groups/svc"
    _post(client, "/groups/svc/reset-offsets", {"topic": "orders", "to": "earliest"}, "/topics/orders")
    assert {tp: o.offset for tp, o in orders.engine.groups.coordinator.describe("svc").committed.items()} == {
        ("orders", 0): 0, ("orders", 1): 0}
    assert "orders-0 → 0" in _flash(client)
    _post(client, page + "/reset-offsets", {"to": "timestamp", "value": str(T0 + 2000)}, "/topics/orders")
    assert orders.engine.groups.coordinator.describe("svc").committed[("orders", 0)].offset == 2
    _post(client, page + "/reset-offsets", {"to": "offset", "value": "x"}, "/topics/orders")
    assert "INVALID_REQUEST (42)" in _flash(client)


def test_reset_and_delete_of_a_group_with_members_say_non_empty_group(client, orders):
    consumer = orders.consumer(group_id="live", auto_offset_reset="earliest")
    consumer.subscribe(["orders"])
    consumer.poll(timeout_ms=2000)
    _post(client, "/groups/live/reset-offsets", {"to": "latest", "topic": "orders"}, "/topics/orders")
    assert "NON_EMPTY_GROUP (68)" in _flash(client)
    _post(client, "/groups/live/delete", {}, "/topics/orders")
    assert "NON_EMPTY_GROUP (68)" in _flash(client)
    consumer.close()
    response = _post(client, "/groups/live/delete", {}, "/topics/orders")
    assert response.headers["Location"].endswith("/groups")
    assert orders.engine.groups.coordinator.describe("live") is None


def test_group_members_show_their_assignments_from_a_real_kafka_consumer(tmp_path: Path):
    from confluent_kafka import Consumer

    with KafkaBroker(tmp_path / "data") as kafka:
        kafka.broker.create_topic("work", 3)
        client = create_app(kafka.engine, test_config={"TESTING": True}).test_client()
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "broker.address.family": "v4",
                             "group.id": "workers", "client.id": "worker-1", "auto.offset.reset": "earliest",
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})
        try:
            consumer.subscribe(["work"])

            def assigned() -> bool:
                consumer.poll(0.1)
                return len(consumer.assignment()) == 3

            eventually(assigned, what="the consumer's assignment")
            html = _text(client.get("/groups/workers"))
            cell = html[html.index("data-assignment"):][:1200]
            assert all(f">work<span class=\"tp-sep\">-</span>{p}<" in cell for p in range(3)), cell
            assert "worker-1" in html
        finally:
            consumer.close()


def test_preview_a_reset_as_a_dry_run(client, orders):
    orders.engine.call(orders.engine.groups.coordinator.reset_offsets, "svc", {("orders", 0): 5})
    response = _post(client, "/groups/svc/reset-offsets", {"action": "preview", "to": "earliest"}, "/topics/orders")
    html = _text(response)
    assert response.status_code == 200
    plan = html[html.index('id="reset-plan"'):]
    assert re.search(r"orders.*?0<.*?>5</td>.*?>0</td>", plan, re.S)
    assert '<option value="earliest" selected>' in html  # the form as sent
    assert orders.engine.groups.coordinator.describe("svc").committed[("orders", 0)].offset == 5  # nothing committed
    html = _text(_post(client, "/groups/svc/reset-offsets", {"action": "preview", "to": "offset"}, "/topics/orders"))
    assert "INVALID_REQUEST (42)" in html[html.index('id="reset-plan-error"'):][:200]


def test_the_browser_switches_partition_keeping_the_view(client, orders):
    html = _text(client.get("/topics/orders/partitions/0/records?q=k1&format=hex"))
    chips = html[html.index('id="partition-chips"'):][:600]
    assert 'href="/topics/orders/partitions/1/records?q=k1&format=hex"' in chips


def test_the_read_committed_view_and_its_tail_wait_at_the_lso(client, orders):
    producer = orders.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("orders", b"in-txn", partition=0).get(timeout=10)  # 6, open
    orders.produce("orders", 0, encode_batch([SimpleRecord(b"after")]))  # 7, waits behind the LSO
    base = "/topics/orders/partitions/0/records"
    html = _text(client.get(base + "?isolation=read_committed"))
    assert _rows(html) == [0, 1, 2, 3, 4, 5] and "after=6" in html
    assert _rows(_text(client.get(base))) == [0, 1, 2, 3, 4, 5, 6, 7]  # every record
    tail = "/fragments/topics/orders/partitions/0/records/tail?after=6&isolation=read_committed"
    assert _rows(_text(client.get(tail))) == []
    producer.commit_transaction()  # its marker is 8
    html = _text(client.get(tail))
    assert _rows(html) == [6, 7] and "after=9" in html


def test_a_jump_to_a_time_in_the_read_committed_view_finds_what_such_a_consumer_gets(client, orders):
    producer = orders.producer(transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("orders", b"in-txn", partition=0, timestamp=T0 + 10_000).get(timeout=10)  # 6, open
    base = "/topics/orders/partitions/0/records?time=" + str(T0 + 9000)
    assert _rows(_text(client.get(base))) == [6]
    html = _text(client.get(base + "&isolation=read_committed"))
    assert _rows(html) == [0, 1, 2, 3, 4, 5] and "No record at or after that time" in html
    producer.abort_transaction()


def test_delete_a_topics_offsets_from_the_console(client, orders):
    orders.engine.call(orders.engine.groups.coordinator.reset_offsets, "svc", {("orders", 0): 5, ("orders", 1): 0})
    consumer = orders.consumer(group_id="live", auto_offset_reset="earliest")
    consumer.subscribe(["orders"])
    consumer.poll(timeout_ms=2000)
    consumer.commit({("orders", 0): 1})
    _post(client, "/groups/live/delete-offsets", {"topic": "orders"}, "/topics/orders")
    assert "GROUP_SUBSCRIBED_TO_TOPIC (86)" in _flash(client)
    assert orders.engine.groups.coordinator.describe("live").committed
    consumer.close()
    _post(client, "/groups/svc/delete-offsets", {"topic": "orders"}, "/topics/orders")
    assert "Deleted the offsets of svc on orders (2 partitions)." in _flash(client)
    assert orders.engine.groups.coordinator.describe("svc").committed == {}


def test_the_page_size_is_chosen_and_kept(client, orders):
    for i in range(60):
        orders.produce("orders", 1, encode_batch([SimpleRecord(b"v%d" % i)]))
    base = "/topics/orders/partitions/1/records"
    html = _text(client.get(base))
    assert _rows(html) == list(range(40, 60)) and 'href="/topics/orders/partitions/1/records?limit=50"' in html
    html = _text(client.get(base + "?limit=50"))
    assert _rows(html) == list(range(10, 60)) and "/topics/orders/partitions/1/records?limit=50&before=10" in html
