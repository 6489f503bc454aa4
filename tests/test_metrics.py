"""``/metrics`` after real workloads: the values an operator alerts on.

Each test drives a real broker (embedded producer, the HTTP API, the scheduled
jobs) and scrapes ``/metrics`` through the Flask app, as Prometheus would: the LSO
lag and the age of the oldest open transaction per partition, late transactions
by Kafka's rule, group lag, latency histograms, fenced producers, timed-out and
admin-aborted transactions, and the fetch counter (clients only).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from exactly.app import Broker
from exactly.app.client.producer import Producer
from exactly.app.engine import read_models
from exactly.app.engine.counters import LATENCY_BUCKETS_S, LatencyHistogram
from exactly.app.engine.scheduler import mirror_round
from exactly.app.http import create_app, metrics
from exactly.storage.clock import FakeClock
from exactly.storage.errors import ProducerFencedError
from exactly.storage.producer_state import LATE_TRANSACTION_BUFFER_MS
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS
from tests.docs import section
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)

T = "orders"
MAX_TIMEOUT_MS = 60_000
Samples = dict[tuple[str, tuple], float]


def labels(**values: object) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in values.items()))


def p(partition: int) -> tuple:
    return labels(topic=T, partition=partition)


class Scraper:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.client = create_app(broker.engine, test_config={"TESTING": True}, mirror=broker.mirror).test_client()

    def __call__(self) -> Samples:
        response = self.client.get("/metrics")
        assert response.status_code == 200
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(response.get_data(True)) for s in family.samples}

    def value(self, name: str, **label_values: object) -> float:
        return self()[(name, labels(**label_values))]


def open_broker(tmp_path: Path, clock: FakeClock, **config: object) -> Broker:
    broker = Broker(tmp_path / "data", clock=clock, **SMALL_INTERNAL_TOPICS,
                    **{"transaction.max.timeout.ms": MAX_TIMEOUT_MS}, **config)
    broker.create_topic(T, partitions=2)
    return broker


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    """Scheduled jobs run; the timeout job every 50 ms (of real time, against the fake clock)."""
    with open_broker(tmp_path, clock, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 50}) as b:
        yield b


@pytest.fixture
def frozen(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    with open_broker(tmp_path, clock, **FROZEN) as b:
        yield b


def open_transaction(broker: Broker, txn_id: str, partition: int, timeout_ms: int = 30_000) -> Producer:
    producer = broker.producer(transactional_id=txn_id, transaction_timeout_ms=timeout_ms, delivery_timeout_ms=2_000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(T, b"held-" + txn_id.encode(), partition=partition).get(timeout=10)
    return producer


def test_a_transactional_workload_shows_latencies_lag_and_fenced_producers(broker: Broker) -> None:
    scrape = Scraper(broker)
    paid = broker.producer(transactional_id="paid")
    paid.init_transactions()
    paid.begin_transaction()
    for value in (b"a", b"b", b"c"):
        paid.send(T, value, partition=0)
    paid.send_offsets_to_transaction({(T, 1): 0}, "billing")
    paid.commit_transaction()
    old = open_transaction(broker, "app", 1)
    new = broker.producer(transactional_id="app")
    new.init_transactions()  # fences ``old``: its transaction is aborted
    with pytest.raises(ProducerFencedError):
        old.commit_transaction()  # EndTxn: PRODUCER_FENCED from the coordinator
    broker.producer().send(T, b"plain", partition=1).get(timeout=10)  # after the aborted record and its marker
    broker.fetch(T, 0, 0, isolation_level="read_committed")

    after = scrape()
    assert after[("exactly_transaction_end_duration_seconds_count", labels(outcome="commit"))] == 1
    assert after[("exactly_transaction_end_duration_seconds_count", labels(outcome="abort"))] == 0
    assert 0 < after[("exactly_transaction_end_duration_seconds_sum", labels(outcome="commit"))] < 30
    assert after[("exactly_produce_duration_seconds_count", ())] >= 2  # a batch per partition at least
    assert after[("exactly_log_flush_duration_seconds_count", ())] >= 1
    assert after[("exactly_fetch_duration_seconds_count", ())] == 1
    assert after[("exactly_fenced_producers_total", labels(error="PRODUCER_FENCED"))] == 1
    assert after[("exactly_fenced_producers_total", labels(error="INVALID_PRODUCER_EPOCH"))] == 0
    # the committed transaction no longer holds anything back; the fenced one was aborted
    assert after[("exactly_partition_last_stable_offset_lag", p(0))] == 0
    assert after[("exactly_partition_last_stable_offset_lag", p(1))] == 0
    assert after[("exactly_partition_oldest_transaction_age_seconds", p(1))] == 0
    assert after[("exactly_active_transactional_ids", labels(state="Ongoing"))] == 0
    assert not [k for k in after if k[0] == "exactly_active_transactional_ids" and "Complete" in k[1][0][1]]
    described = broker.engine.call(read_models.group, broker.engine, "billing")["offsets"]
    expected = {(o["topic_name"], o["partition_id"]): o["lag"] for o in described}
    assert after[("exactly_consumer_group_lag", labels(group="billing", topic=T, partition=1))] == expected[(T, 1)]
    assert expected[(T, 1)] == 1  # the plain record: neither the aborted record nor its marker is lag
    new.close()


def test_a_zombie_s_produce_counts_as_invalid_producer_epoch(broker: Broker) -> None:
    scrape = Scraper(broker)
    old = open_transaction(broker, "app", 0)
    broker.producer(transactional_id="app").init_transactions()
    with pytest.raises(ProducerFencedError):
        old.send(T, b"late", partition=0).get(timeout=10)  # refused by verification (KIP-890)
    assert scrape.value("exactly_fenced_producers_total", error="INVALID_PRODUCER_EPOCH") == 1


def test_an_open_transaction_shows_as_lso_lag_and_age_until_the_timeout_job_aborts_it(
        broker: Broker, clock: FakeClock) -> None:
    scrape = Scraper(broker)
    slow = open_transaction(broker, "slow", 1, timeout_ms=5_000)
    slow.send(T, b"more", partition=1).get(timeout=10)
    clock.advance(3_000)
    held = scrape()
    assert held[("exactly_partition_last_stable_offset_lag", p(1))] == 2  # two records past the LSO
    assert held[("exactly_partition_oldest_transaction_age_seconds", p(1))] == pytest.approx(3.0)
    assert held[("exactly_partition_oldest_transaction_age_seconds", p(0))] == 0
    assert held[("exactly_active_transactional_ids", labels(state="Ongoing"))] == 1
    assert held[("exactly_transactions_timed_out_total", ())] == 0
    clock.advance(2_001)  # past transaction.timeout.ms: the timeout job's next round aborts it
    eventually(lambda: scrape.value("exactly_transactions_completed_total", outcome="abort") == 1, 10,
               "the timeout job's abort to complete")
    after = scrape()
    assert after[("exactly_transactions_timed_out_total", ())] == 1
    assert after[("exactly_partition_last_stable_offset_lag", p(1))] == 0
    assert after[("exactly_partition_oldest_transaction_age_seconds", p(1))] == 0
    assert after[("exactly_transactions_admin_aborted_total", ())] == 0


def test_admin_aborts_are_counted_from_the_api_and_the_partition_level_abort(broker: Broker) -> None:
    scrape = Scraper(broker)
    open_transaction(broker, "stuck", 0)
    stuck_partition = open_transaction(broker, "stuck-too", 1)
    api = f"/v3/clusters/{broker.cluster_id}"
    assert scrape.client.post(f"{api}/transactions/stuck/admin-abort").status_code == 200
    assert scrape.value("exactly_transactions_admin_aborted_total") == 1
    url = f"{api}/topics/{T}/partitions/1/producers/{stuck_partition.producer_id}/abort"
    assert scrape.client.post(url).status_code == 200
    after = scrape()
    assert after[("exactly_transactions_admin_aborted_total", ())] == 2
    assert after[("exactly_transactions_timed_out_total", ())] == 0
    assert after[("exactly_partition_last_stable_offset_lag", p(0))] == 0
    assert after[("exactly_partition_last_stable_offset_lag", p(1))] == 0


def test_a_partition_has_a_late_transaction_by_kafka_s_rule(frozen: Broker, clock: FakeClock) -> None:
    """Late: the oldest open transaction's producer last wrote more than
    transaction.max.timeout.ms + 5 minutes ago (Kafka's PartitionsWithLateTransactionsCount)."""
    scrape = Scraper(frozen)
    open_transaction(frozen, "hung", 0, timeout_ms=MAX_TIMEOUT_MS)
    assert scrape.value("exactly_partitions_with_late_transactions") == 0
    clock.advance(MAX_TIMEOUT_MS + LATE_TRANSACTION_BUFFER_MS)
    assert scrape.value("exactly_partitions_with_late_transactions") == 0  # not yet: Kafka's test is ">"
    clock.advance(1)
    late = scrape()
    assert late[("exactly_partitions_with_late_transactions", ())] == 1
    assert late[("exactly_partition_oldest_transaction_age_seconds", p(0))] == pytest.approx(
        (MAX_TIMEOUT_MS + LATE_TRANSACTION_BUFFER_MS + 1) / 1000)
    frozen.engine.call(frozen.engine.jobs.abort_timed_out_transactions)  # what the job would have done
    after = scrape()
    assert after[("exactly_partitions_with_late_transactions", ())] == 0
    assert after[("exactly_transactions_timed_out_total", ())] == 1


def test_the_fetch_counter_counts_clients_only(tmp_path: Path, clock: FakeClock) -> None:
    with open_broker(tmp_path, clock, **FROZEN) as broker:
        producer = broker.producer(transactional_id="t")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(T, b"v", partition=0)
        producer.commit_transaction()
        scrape = Scraper(broker)
        mirror_round(broker.mirror)  # the SQLite mirror reads every partition
        for page in ("/", f"/topics/{T}/partitions/0", "/groups", "/transactions"):
            assert scrape.client.get(page).status_code in (200, 404), page
        assert scrape.value("exactly_fetch_requests_total") == 0
        broker.fetch(T, 0, 0, isolation_level="read_committed")
        consumer = broker.consumer(group_id="g", isolation_level="read_committed", auto_offset_reset="earliest")
        consumer.assign([(T, 0)])
        eventually(lambda: consumer.poll(timeout_ms=100), what="the record")
        consumer.close()
        fetched = scrape.value("exactly_fetch_requests_total")
        assert fetched >= 2  # the embedded fetch and the consumer's
    with Broker(tmp_path / "data", clock=clock, **SMALL_INTERNAL_TOPICS, **FROZEN) as reopened:
        # loading the coordinators read __transaction_state and __consumer_offsets: no client fetched
        assert Scraper(reopened).value("exactly_fetch_requests_total") == 0


@given(st.lists(st.one_of(st.sampled_from(LATENCY_BUCKETS_S), st.floats(0, 100)), max_size=50))
def test_a_histogram_bucket_counts_the_observations_at_or_below_its_bound(seconds: list[float]) -> None:
    """Prometheus' ``le``: a value equal to a bound is in that bound's bucket."""
    histogram = LatencyHistogram()
    for value in seconds:
        histogram.observe(value)
    family = HistogramMetricFamily("h", "h")
    metrics.add_histogram(family, [], histogram.counts, histogram.total_s)
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name == "h_bucket"}
    for bound in LATENCY_BUCKETS_S:
        assert buckets[str(bound)] == sum(value <= bound for value in seconds)
    assert buckets["+Inf"] == len(seconds)
    assert [s.value for s in family.samples if s.name == "h_sum"] == [pytest.approx(sum(seconds))]


def test_every_metric_the_readme_and_the_module_name_is_served(broker: Broker) -> None:
    """The docs cannot drift from the code: each ``exactly_`` name in docs/operations.md's
    "Metrics and logs" table and in ``exactly/app/http/metrics.py``'s docstring is served."""
    table = section("docs/operations.md", "Metrics and logs")
    documented = {name for row in table.splitlines() if row.startswith("| `")
                  for name in re.findall(r"`([a-z_]+)(?:\{[^}]*\})?`", row.split("|")[1])}
    documented |= set(re.findall(r"``([a-z_]+)(?:\{[^}]*\})?``", metrics.__doc__ or ""))
    documented = {n for n in documented if not n.startswith(("exactly", "app")) and "_" in n}
    text = Scraper(broker).client.get("/metrics").get_data(True)
    families = set(re.findall(r"^# TYPE exactly_(\S+) ", text, re.M))  # served, with or without samples
    missing = sorted(n for n in documented if n not in families and re.sub("_total$", "", n) not in families)
    assert len(documented) >= 15 and not missing, missing
