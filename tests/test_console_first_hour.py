"""What a new user looks for first on the console (issue 18): lag of assigned but
never committed partitions, the Topics and History pages, live/dead producers,
clients per instance, the Transactions page, configs with units, the record
browser's producers and times, and a quiet access log -- through Flask's test
client over one real broker for the module."""

from __future__ import annotations

import logging
import re
from typing import Iterator

import pytest
from confluent_kafka import Consumer, Producer

from exactly.app import Broker
from exactly.app.engine import mirror_reads, read_models, scheduler
from exactly.app.http import create_app
from exactly.app.http.console import configs as ui_configs
from exactly.coordinator.mirror_db import reader_engine
from exactly.storage.clock import FakeClock
from exactly.storage.errors import UnknownTopicOrPartitionError
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with Broker(tmp_path_factory.mktemp("first-hour") / "data", clock=FakeClock(),
                **SMALL_INTERNAL_TOPICS, **FROZEN, **TWO_PHASE_COMMIT) as b:
        yield b


@pytest.fixture(scope="module")
def client(broker: Broker):
    return create_app(broker.engine, test_config={"TESTING": True}).test_client()


@pytest.fixture(scope="module")
def lagging(broker: Broker) -> str:
    """Group ``lagging``: one consumer assigned the 4 partitions of ``wide`` (10
    records each), with one committed offset (5 on partition 0)."""
    broker.create_topic("wide", 4)
    producer = broker.producer()
    for partition in range(4):
        for i in range(10):
            producer.send("wide", b"v%d" % i, partition=partition)
    producer.flush(10)
    consumer = broker.consumer(group_id="lagging", enable_auto_commit=False)
    consumer.subscribe(["wide"])
    consumer.poll(timeout_ms=2000, max_records=1)
    assert len(consumer.assignment()) == 4
    consumer.commit({("wide", 0): 5})
    yield "lagging"
    consumer.close()


# -- lag ------------------------------------------------------------------------------------


def test_assigned_partitions_never_committed_lag_from_the_log_start(broker, client, lagging):
    """Four assigned partitions and one commit: four lags, 5 + 3 × 10."""
    group = broker.engine.call(read_models.group, broker.engine, lagging)
    lags = {(o["topic_name"], o["partition_id"]): o["lag"] for o in group["offsets"]}
    assert lags == {("wide", 0): 5, ("wide", 1): 10, ("wide", 2): 10, ("wide", 3): 10}
    cluster = broker.engine.topics.cluster_id
    listed = client.get(f"/v3/clusters/{cluster}/consumer-groups/{lagging}/lags").get_json()["data"]
    assert sorted((lag["partition_id"], lag["current_offset"], lag["lag"]) for lag in listed) == [
        (0, 5, 5), (1, -1, 10), (2, -1, 10), (3, -1, 10)]
    summary = client.get(f"/v3/clusters/{cluster}/consumer-groups/{lagging}/lag-summary").get_json()
    assert (summary["total_lag"], summary["max_lag"]) == (35, 10)
    page = client.get(f"/groups/{lagging}").get_data(as_text=True)
    assert page.count("data-lag>") == 4 and "from log start" in page
    metrics = client.get("/metrics").get_data(as_text=True)
    assert sum(1 for line in metrics.splitlines() if "lagging" in line and not line.startswith("#")) == 4


# -- quiet by default -----------------------------------------------------------------------


def test_console_polling_writes_no_access_log_line_but_pages_errors_and_writes_do(
        client, lagging, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.INFO, logger="exactly.app.http.access_log"):
        for _ in range(3):
            assert client.get("/fragments/transactions").status_code == 200
        client.get("/transactions")
        client.get("/fragments/topics/nope")
        client.post("/topics/nope/delete")
    lines = [r.getMessage() for r in caplog.records if r.name == "exactly.app.http.access_log"]
    assert [line.split('"')[1] for line in lines] == [
        "GET /transactions", "GET /fragments/topics/nope", "POST /topics/nope/delete"], lines


def test_an_expected_kafka_error_of_a_scheduled_job_is_one_warning_line(caplog: pytest.LogCaptureFixture):
    def fails() -> None:
        raise UnknownTopicOrPartitionError("topic 'gone' was deleted meanwhile")
    with caplog.at_level(logging.WARNING, logger="exactly.app.engine.scheduler"):
        scheduler.run_round(scheduler.ScheduledJob("log-cleaner", fails, 1000, None))
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "UNKNOWN_TOPIC_OR_PARTITION" in record.getMessage()


# -- topics ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transactions(broker: Broker, lagging) -> dict:
    """``billing``: two commits, one abort by its producer, and one left open on ``orders``
    (2 partitions); the mirror has read the finished ones."""
    broker.create_topic("orders", 2)
    billing = broker.producer(transactional_id="billing", transaction_timeout_ms=60_000)
    billing.init_transactions()
    for outcome in ("commit", "commit", "abort", "open"):
        billing.begin_transaction()
        billing.send("orders", b"x", key=b"k", partition=0).get(timeout=10)
        if outcome == "commit":
            billing.commit_transaction()
        elif outcome == "abort":
            billing.abort_transaction()
    broker.mirror.catch_up()
    return {"billing": billing}


@pytest.fixture(scope="module")
def mirrored(broker: Broker, transactions):
    return create_app(broker.engine, test_config={"TESTING": True}, mirror=broker.mirror).test_client()


def _rows(html: str, attribute: str) -> list[str]:
    return re.findall(rf'<tr {attribute}="([^"]+)"', html)


def test_topics_page_searches_sorts_and_counts_read_committed_messages(client, transactions):
    html = client.get("/topics").get_data(as_text=True)
    assert _rows(html, "data-topic") == ["orders", "wide"]  # internal topics on request only
    orders = html[html.index('data-topic="orders"'):html.index('data-topic="wide"')]
    # 4 records, 2 committed, 1 aborted, 1 open; 3 markers: a read_committed consumer gets 2
    assert re.search(r"data-messages>2<", orders) and "billing" in orders and "held back" in orders
    assert _rows(client.get("/topics?sort=messages&order=desc").get_data(as_text=True), "data-topic") == [
        "wide", "orders"]
    assert _rows(client.get("/topics?sort=partitions").get_data(as_text=True), "data-topic") == ["orders", "wide"]
    assert _rows(client.get("/topics?q=WID").get_data(as_text=True), "data-topic") == ["wide"]
    assert "__transaction_state" in _rows(client.get("/topics?internal=1").get_data(as_text=True), "data-topic")
    assert 'href="/topics">topics</a>' in client.get("/topics/orders").get_data(as_text=True)
    assert client.get("/fragments/topics?sort=size").status_code == 200


# -- history --------------------------------------------------------------------------------


def test_history_filters_by_id_outcome_and_cause_and_pages(mirrored, client, broker):
    html = mirrored.get("/history").get_data(as_text=True)
    assert re.findall(r'data-outcome="(\w+)"', html) == ["ABORT", "COMMIT", "COMMIT"]
    assert re.findall(r'data-outcome="(\w+)"', mirrored.get("/history?outcome=COMMIT").get_data(as_text=True)) == [
        "COMMIT", "COMMIT"]
    aborted = mirrored.get("/history?cause=client&txn=bill").get_data(as_text=True)
    assert re.findall(r'data-abort-cause="([\w-]+)"', aborted) == ["client"]
    assert "No finished transactions match" in mirrored.get("/history?txn=nobody").get_data(as_text=True)
    db = reader_engine(broker.mirror.path)
    rows, total = mirror_reads.finished_transactions(db, "billing", limit=2, offset=2)
    assert ([r["outcome"] for r in rows], total) == (["COMMIT"], 3)
    db.dispose()
    assert 'href="/history?txn=billing"' in mirrored.get("/transactions/billing").get_data(as_text=True)
    assert "History needs the SQLite mirror" in client.get("/history").get_data(as_text=True)


# -- transactions ---------------------------------------------------------------------------


def test_transactions_page_searches_counts_outcomes_and_says_the_state_now(mirrored, broker):
    broker.engine.call(broker.engine.transactions.init_producer_id, "prepared-2pc", 60_000, enable_2pc=True)
    html = mirrored.get("/transactions").get_data(as_text=True)
    billing = html[html.index('data-txn="billing"'):html.index("</tr>", html.index('data-txn="billing"'))]
    assert 'data-activity="open"' in billing and "Ongoing" in billing
    assert re.search(r'data-counts[^>]*><a href="/history\?txn=billing"><span class="green">2</span> · <span class="red">1<', billing)
    two_phase = html[html.index('data-txn="prepared-2pc"'):]
    assert "never times out (two-phase)" in two_phase[:two_phase.index("</tr>")]
    assert _rows(mirrored.get("/transactions?q=BILL").get_data(as_text=True), "data-txn") == ["billing"]
    assert "contains “nobody”" in mirrored.get("/transactions?q=nobody").get_data(as_text=True)
    assert '<td data-label="Partitions"><div class="tps">' in html
    assert 'class="tps"><a' not in html.replace('<div class="tps"><a', "")  # the flex box inside the cell, never the td


def test_an_idle_id_says_idle_now_and_its_last_outcome_apart(broker, mirrored):
    idle = broker.producer(transactional_id="idle-one")
    idle.init_transactions()
    idle.begin_transaction()
    idle.send("orders", b"y", partition=1).get(timeout=10)
    idle.abort_transaction()
    row = mirrored.get("/transactions?q=idle-one").get_data(as_text=True)
    assert 'data-activity="idle"' in row and ">Idle<" in row and "Kafka state CompleteAbort" in row
    assert re.search(r"data-last-outcome[^>]*><span class=\"pill pill-red\">ABORT<", row)
    page = mirrored.get("/transactions/idle-one").get_data(as_text=True)
    assert re.search(r'<time class="mono" datetime="\d{4}-\d\d-\d\dT[^"]+" title="UTC [^"]+">\d{4}-\d\d-\d\d ', page)


# -- configs and the record browser ---------------------------------------------------------


def test_configs_show_units_and_sentinel_names_beside_the_raw_value(client, transactions):
    html = client.get("/topics/orders").get_data(as_text=True)

    def shown(key: str) -> str:
        row = html[html.index(f'data-config="{key}"'):]
        return row[:row.index("</tr>")]
    assert "<span data-meaning>never</span>" in shown("max.compaction.lag.ms") and "9223372036854775807" in shown(
        "max.compaction.lag.ms")
    assert "<span data-meaning>unlimited</span>" in shown("retention.bytes") and ">-1<" in shown("retention.bytes")
    assert "<span data-meaning>7 d 0 h</span>" in shown("retention.ms") and "604800000" in shown("retention.ms")
    assert "<span data-meaning>1.0 GiB</span>" in shown("segment.bytes")
    assert "data-meaning" not in shown("cleanup.policy")
    assert ui_configs.UNITS["log.retention.ms"] == "ms" and "cleanup.policy" not in ui_configs.UNITS


def test_the_record_browser_names_producers_by_transactional_id_and_dates_times(client, transactions):
    html = client.get("/topics/orders/partitions/0/records").get_data(as_text=True)
    assert 'data-producer-txn><a class="mono strong" href="/transactions/billing">billing</a>' in html
    assert re.search(r'<time class="mono" datetime="\d{4}-\d\d-\d\dT[\d:.]+\+00:00" title="UTC [^"]+">'
                     r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>', html)


# -- live or dead, and clients per instance (a real librdkafka producer) --------------------


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("live") / "data") as k:
        yield k


def test_a_transactional_producer_is_live_while_connected_and_one_client_instance(kafka: KafkaBroker):
    console = create_app(kafka.engine, test_config={"TESTING": True}).test_client()
    kafka.engine.call(kafka.engine.topics.create_topic, "events", 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "live-tx",
                         "client.id": "live-app"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("events", b"v")
    producer.flush(10)
    row = console.get("/transactions?q=live-tx").get_data(as_text=True)
    assert 'data-live="live"' in row
    assert 'data-live="live"' in console.get("/topics/events").get_data(as_text=True)  # its producer id too
    clients = console.get("/clients").get_data(as_text=True)
    assert _rows(clients, "data-client") == ["live-app"], clients  # bootstrap + broker connection: one row
    uses = clients[clients.index("data-uses>"):]
    assert 'href="/transactions/live-tx"' in uses[:uses.index("</td>")]
    producer.abort_transaction(10)
    del producer  # librdkafka closes its connections
    eventually(lambda: 'data-live="none"' in console.get("/transactions?q=live-tx").get_data(as_text=True),
               what="the closed producer to show no connection")


def test_a_consumer_instance_shows_the_group_it_is_a_member_of(kafka: KafkaBroker):
    """Issue 35: a group's members keep Kafka's host form ("/127.0.0.1") and the connections
    the bare address, so the Clients page matched neither and never showed a client's groups."""
    console = create_app(kafka.engine, test_config={"TESTING": True}).test_client()
    kafka.engine.call(kafka.engine.topics.create_topic, "orders-in", 1)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "billing", "client.id": "billing-app",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["orders-in"])
        eventually(lambda: consumer.poll(0.2) is None and consumer.assignment(), 30, "the consumer's assignment")

        def billing_row() -> str:
            page = console.get("/clients").get_data(as_text=True)
            start = page.find('data-client="billing-app"')
            return page[start:page.index("</tr>", start)] if start >= 0 else ""
        assert 'href="/groups/billing"' in eventually(billing_row, 10, "the consumer's row on the Clients page")
    finally:
        consumer.close()
