"""What a new user looks for first on the console (issue 18): lag of assigned but
never committed partitions, the Topics and History pages, live/dead producers,
clients per instance, the Transactions page, configs with units, the record
browser's producers and times, and a quiet access log -- through Flask's test
client over one real broker for the module."""

from __future__ import annotations

import logging
from typing import Iterator

import pytest

from app import Broker
from app.engine import read_models, scheduler
from app.http import create_app
from storage.clock import FakeClock
from storage.errors import UnknownTopicOrPartitionError
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with Broker(tmp_path_factory.mktemp("first-hour") / "data", clock=FakeClock(),
                **SMALL_INTERNAL_TOPICS, **FROZEN) as b:
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
    cluster = broker.engine.cluster_id
    listed = client.get(f"/v3/clusters/{cluster}/consumer-groups/{lagging}/lags").get_json()["data"]
    assert sorted((lag["partition_id"], lag["current_offset"], lag["lag"]) for lag in listed) == [
        (0, 5, 5), (1, None, 10), (2, None, 10), (3, None, 10)]
    summary = client.get(f"/v3/clusters/{cluster}/consumer-groups/{lagging}/lag-summary").get_json()
    assert (summary["total_lag"], summary["max_lag"]) == (35, 10)
    page = client.get(f"/groups/{lagging}").get_data(as_text=True)
    assert page.count("data-lag>") == 4 and "from log start" in page
    metrics = client.get("/metrics").get_data(as_text=True)
    assert sum(1 for line in metrics.splitlines() if "lagging" in line and not line.startswith("#")) == 4


# -- quiet by default -----------------------------------------------------------------------


def test_console_polling_writes_no_access_log_line_but_pages_errors_and_writes_do(
        client, lagging, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.INFO, logger="app.http.access_log"):
        for _ in range(3):
            assert client.get("/fragments/transactions").status_code == 200
        client.get("/transactions")
        client.get("/fragments/topics/nope")
        client.post("/topics/nope/delete")
    lines = [r.getMessage() for r in caplog.records if r.name == "app.http.access_log"]
    assert [line.split('"')[1] for line in lines] == [
        "GET /transactions", "GET /fragments/topics/nope", "POST /topics/nope/delete"], lines


def test_an_expected_kafka_error_of_a_scheduled_job_is_one_warning_line(caplog: pytest.LogCaptureFixture):
    def fails() -> None:
        raise UnknownTopicOrPartitionError("topic 'gone' was deleted meanwhile")
    with caplog.at_level(logging.WARNING, logger="app.engine.scheduler"):
        scheduler.run_round(scheduler.ScheduledJob("log-cleaner", fails, 1000, None))
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "UNKNOWN_TOPIC_OR_PARTITION" in record.getMessage()
