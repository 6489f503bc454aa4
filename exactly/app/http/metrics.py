"""``/metrics`` in Prometheus' text format (prometheus-client).

Broker metrics are read at scrape time by a custom collector, in one call on the
engine's loop (the only safe place to read partition and coordinator state), so a
scrape sees one consistent moment. Counters and latency histograms are counted by
the engine where the work happens (``exactly/app/engine/counters.py``), whichever face asked
for it: the HTTP API, the embedded client or the Kafka listener.

What to alert on (every name starts ``exactly_``), with Kafka's name for the same
thing where Kafka has one -- docs/operations.md's "Metrics and logs" repeats this list:

* ``partition_last_stable_offset_lag{topic,partition}`` -- Kafka's
  ``kafka.cluster:type=Partition,name=LastStableOffsetLag``: high watermark - LSO,
  what read_committed consumers cannot read yet.
* ``partition_oldest_transaction_age_seconds{topic,partition}`` -- how long the
  oldest transaction open on the partition has been open (its coordinator's start
  time; for a producer no coordinator knows, its last write there); 0: none.
* ``partitions_with_late_transactions`` -- Kafka's
  ``kafka.server:type=ReplicaManager,name=PartitionsWithLateTransactionsCount``:
  partitions whose oldest open transaction's producer last wrote more than
  transaction.max.timeout.ms + 5 minutes ago (Kafka's rule,
  ``ProducerStateManager.has_late_transaction``).
* ``consumer_group_lag{group,topic,partition}`` -- the records a read_committed
  consumer of the group would still receive (``read_models.committed_lags``; Kafka's
  consumers report it as ``records-lag``).
* ``produce_duration_seconds`` -- a batch from append to acknowledgement (durable,
  for acks=all); Kafka's ``RequestMetrics TotalTimeMs request=Produce``.
* ``log_flush_duration_seconds`` -- one fsync round of group commit; Kafka's
  ``kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs``.
* ``transaction_end_duration_seconds{outcome}`` -- EndTxn until its markers and
  COMPLETE are durable; Kafka's ``RequestMetrics TotalTimeMs request=EndTxn``.
* ``fetch_duration_seconds`` -- a client's read of one partition (a long poll's wait
  excluded); Kafka's ``RequestMetrics TotalTimeMs request=Fetch``.
* ``fenced_producers_total{error}`` -- PRODUCER_FENCED / INVALID_PRODUCER_EPOCH
  answered to zombie producers, by the error the broker decided (the Kafka listener
  tells request versions older than PRODUCER_FENCED INVALID_PRODUCER_EPOCH instead);
  Kafka's ``RequestMetrics ErrorsPerSec error=...``.
* ``transactions_timed_out_total`` -- transactions aborted past their
  transaction.timeout.ms (Confluent Server's ``transaction-timeout-count``).
* ``transactions_admin_aborted_total`` -- transactions an operator aborted: the
  console's or the API's Abort, AbortTransaction (KIP-664).
* ``limit_refusals_total{limit}`` -- what a limit refused: CreateTopics /
  CreatePartitions requests over Kafka's 10,000 partitions per request
  (``max.partitions.per.request``) or past ``exactly.max.partitions``, Kafka
  connections over ``max.connections`` or ``max.connections.per.ip``, producer ids
  and open transactions past the per-principal limits.
* ``authentication_failures_total{face,mechanism,principal}`` -- failed logins on every
  face: SASL on the Kafka listeners (wrong password, unknown user, a refused SCRAM
  exchange), HTTP Basic or Bearer, the console's form; ``principal`` is ``unknown`` for a
  user that does not exist. Kafka's ``failed-authentication-total``.
* ``authorization_denials_total{resource_type,operation}`` -- requests the authorizer
  denied, from the Kafka listener or the HTTP API (each logged once a minute at most).
* ``two_phase_transactions_open``, ``two_phase_transaction_oldest_age_seconds`` --
  KIP-939 two-phase transactions (enable2Pc) open now and the age of the oldest: no
  timeout ends them, so an alert on the age is what finds one an external coordinator
  forgot (the operator's abort ends it).
* ``active_transactional_ids{state}`` -- transactional ids with a transaction open
  now (Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence); completed ones are
  not active.

And to understand them: ``transactions_completed_total{outcome}``;
``live_producer_ids{topic,partition}`` (Kafka's ReplicaManager ``ProducerIdCount``,
per partition here); ``partition_high_watermark`` / ``partition_last_stable_offset``
/ ``partition_log_start_offset``; ``produce_requests_total`` and
``produced_records_total`` (Kafka's ``TotalProduceRequestsPerSec``,
``MessagesInPerSec``; retried duplicates excluded); ``fetch_requests_total`` and
``fetched_bytes_total`` (``TotalFetchRequestsPerSec``, ``BytesOutPerSec``: clients'
partition reads only -- the SQLite mirror, the console and coordinator loads are
not clients); ``kafka_request_duration_seconds{api}`` (``RequestMetrics
TotalTimeMs`` per Kafka API, decoded to answered); ``kafka_connections``;
``http_requests_total{endpoint,method,status}``; plus the process and platform
metrics of prometheus-client.

Each app has its own registry: nothing is global, two apps in one process (tests)
never share counters.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Iterator

from flask import Blueprint, Response, current_app, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from exactly.app.engine import read_models
from exactly.app.engine.counters import LATENCY_BUCKETS_S
from exactly.app.http import access

if TYPE_CHECKING:
    from exactly.app.engine import Engine

bp = Blueprint("metrics", __name__)
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def add_histogram(family: HistogramMetricFamily, labels: list[str], counts: list[int], total: float) -> None:
    cumulative = list(itertools.accumulate(counts))
    family.add_metric(labels, [(str(bound), n) for bound, n in zip(LATENCY_BUCKETS_S, cumulative)]
                      + [("+Inf", cumulative[-1])], sum_value=total)


class BrokerCollector(Collector):
    def __init__(self, engine: "Engine") -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        snap = self.engine.call(read_models.metrics, self.engine, timeout=10)
        yield from self._partitions(snap)
        yield from self._transactions(snap)
        yield from self._requests(snap)

    @staticmethod
    def _partitions(snap: dict[str, Any]) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        gauges = [GaugeMetricFamily(name, doc, labels=labels) for name, doc in (
            ("exactly_live_producer_ids", "Producer ids with state on the partition (Kafka: ProducerIdCount)"),
            ("exactly_partition_high_watermark", "High watermark (the durable end of the log)"),
            ("exactly_partition_last_stable_offset", "Last stable offset: read_committed consumers stop here"),
            ("exactly_partition_log_start_offset", "First offset still held"),
            ("exactly_partition_last_stable_offset_lag",
             "High watermark - LSO: what read_committed consumers cannot read yet (Kafka: LastStableOffsetLag)"),
            ("exactly_partition_oldest_transaction_age_seconds",
             "How long the oldest transaction open on the partition has been open (0: none)"))]
        for topic, partition, *values in snap["partitions"]:
            for gauge, value in zip(gauges, values):
                gauge.add_metric([topic, partition], value)
        yield from gauges
        yield GaugeMetricFamily(
            "exactly_partitions_with_late_transactions",
            "Partitions whose oldest open transaction's producer last wrote more than transaction.max.timeout.ms "
            "+ 5 min ago (Kafka: PartitionsWithLateTransactionsCount)", value=snap["late"])
        lag = GaugeMetricFamily("exactly_consumer_group_lag",
                                "Records a read_committed consumer of the group would still receive",
                                labels=["group", "topic", "partition"])
        for group_id, topic, partition, value in snap["group_lags"]:
            lag.add_metric([group_id, topic, partition], value)
        yield lag

    @staticmethod
    def _transactions(snap: dict[str, Any]) -> Iterator[Metric]:
        active = GaugeMetricFamily("exactly_active_transactional_ids",
                                   "Transactional ids with a transaction open now, by state", labels=["state"])
        for state, count in snap["transactional_ids"].items():
            active.add_metric([state], count)
        yield active
        open_two_phase, oldest_two_phase = snap["two_phase"]
        yield GaugeMetricFamily("exactly_two_phase_transactions_open",
                                "Open KIP-939 two-phase transactions: no timeout ends them, an operator's abort does",
                                value=open_two_phase)
        yield GaugeMetricFamily("exactly_two_phase_transaction_oldest_age_seconds",
                                "How long the oldest open two-phase transaction has been open (0: none)",
                                value=oldest_two_phase)
        completed = CounterMetricFamily("exactly_transactions_completed", "Transactions completed since start",
                                        labels=["outcome"])
        for outcome, count in snap["completed"].items():
            completed.add_metric([outcome], count)
        yield completed
        end_txn = HistogramMetricFamily("exactly_transaction_end_duration_seconds",
                                        "EndTxn until its markers and COMPLETE are durable", labels=["outcome"])
        for outcome, (counts, total) in snap["end_txn"].items():
            add_histogram(end_txn, [outcome], counts, total)
        yield end_txn
        fenced = CounterMetricFamily("exactly_fenced_producers",
                                     "PRODUCER_FENCED / INVALID_PRODUCER_EPOCH answered to producers",
                                     labels=["error"])
        for error in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"):
            fenced.add_metric([error], snap["fenced"].get(error, 0))
        yield fenced

    @staticmethod
    def _requests(snap: dict[str, Any]) -> Iterator[Metric]:
        for (name, doc), value in zip((
                ("exactly_produce_requests", "Batches submitted for append (all sources)"),
                ("exactly_produced_records", "Records appended (retried duplicates excluded)"),
                ("exactly_fetch_requests", "Clients' partition reads (all faces; the broker's own reads excluded)"),
                ("exactly_fetched_bytes", "Record-batch bytes returned by clients' fetches"),
                ("exactly_transactions_timed_out", "Transactions aborted because they ran past their timeout"),
                ("exactly_transactions_admin_aborted", "Transactions an operator aborted")), snap["counters"]):
            yield CounterMetricFamily(name, doc, value=value)
        for (name, doc), (counts, total) in zip((
                ("exactly_produce_duration_seconds", "A batch from append to acknowledgement (durable for acks=all)"),
                ("exactly_log_flush_duration_seconds",
                 "One fsync round of group commit (Kafka: LogFlushRateAndTimeMs)"),
                ("exactly_fetch_duration_seconds", "A client's read of one partition")), snap["latency"]):
            histogram = HistogramMetricFamily(name, doc)
            add_histogram(histogram, [], counts, total)
            yield histogram
        latency = HistogramMetricFamily("exactly_kafka_request_duration_seconds",
                                        "Kafka requests by API: time from decoded to answered", labels=["api"])
        for api, (counts, total) in sorted(snap["kafka_requests"].items()):
            add_histogram(latency, [api], counts, total)
        yield latency
        yield GaugeMetricFamily("exactly_kafka_connections", "Kafka clients connected now",
                                value=snap["kafka_connections"])
        refusals = CounterMetricFamily("exactly_limit_refusals", "Requests or connections a limit refused",
                                       labels=["limit"])
        for limit, count in snap["limit_refusals"].items():
            refusals.add_metric([limit], count)
        yield refusals
        failures = CounterMetricFamily("exactly_authentication_failures",
                                       "Failed logins by face (kafka, http, console), mechanism and principal "
                                       "(unknown: no such user)", labels=["face", "mechanism", "principal"])
        for labels, count in sorted(snap["authentication_failures"].items()):
            failures.add_metric(list(labels), count)
        yield failures
        denials = CounterMetricFamily("exactly_authorization_denials", "Requests the authorizer denied",
                                      labels=["resource_type", "operation"])
        for (resource_type, operation), count in sorted(snap["authorization_denials"].items()):
            denials.add_metric([resource_type, operation], count)
        yield denials


@bp.record_once
def _setup(state) -> None:
    registry = CollectorRegistry()
    registry.register(BrokerCollector(state.app.extensions["exactly.engine"]))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    http = Counter("exactly_http_requests", "HTTP requests by route, method and status",
                   ["endpoint", "method", "status"], registry=registry)
    state.app.extensions["exactly.metrics"] = registry

    @state.app.after_request
    def _count(response: Response) -> Response:
        if not request.path.startswith("/static/"):
            rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
            method = request.method if request.method in METHODS else "other"  # clients choose it: bound it
            http.labels(rule, method, str(response.status_code)).inc()
        return response


#: a scrape names every topic, group and principal's failed logins: what a principal may
#: see of the whole broker, Describe on the cluster (a Prometheus scraper logs in as a user
#: granted it, with HTTP Basic, or with the token)
SCRAPE = access.own(access.O.DESCRIBE)


@bp.get("/metrics")
@access.requires(SCRAPE)
def metrics() -> Response:
    return Response(generate_latest(current_app.extensions["exactly.metrics"]), mimetype=CONTENT_TYPE_LATEST)
