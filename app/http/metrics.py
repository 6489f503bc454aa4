"""``/metrics`` in Prometheus' text format (prometheus-client).

Broker metrics are read at scrape time by a custom collector, in one call on the
engine's loop (the only safe place to read partition and coordinator state), so a
scrape sees one consistent moment:

* ``exactly_live_producer_ids{topic,partition}`` -- producer ids with state on the
  partition (the seed's "live producer ids");
* ``exactly_partition_high_watermark`` / ``_last_stable_offset`` /
  ``_log_start_offset`` ``{topic,partition}`` -- a gap between the first two is a
  transaction holding read_committed consumers back;
* ``exactly_active_transactional_ids{state}`` -- transactional ids by state;
* ``exactly_transactions_completed_total{outcome}`` -- commits and aborts since start;
* ``exactly_produce_requests_total``, ``exactly_produced_records_total``,
  ``exactly_fetch_requests_total``, ``exactly_fetched_bytes_total`` -- counted by the
  engine (``app/engine/counters.py``) for every source: HTTP, the embedded client, Kafka;
* ``exactly_kafka_request_duration_seconds{api}`` -- a histogram per Kafka API of how
  long its requests took from decoded to answered (its ``_count`` is the request count);
  ``exactly_kafka_connections`` -- Kafka clients connected now;
* ``exactly_http_requests_total{endpoint,method,status}`` -- HTTP calls by route;
* the process and platform metrics of prometheus-client.

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

from app.engine.counters import KAFKA_LATENCY_BUCKETS_S
from coordinator.transaction_state import TransactionState

if TYPE_CHECKING:
    from app.engine import Engine

bp = Blueprint("metrics", __name__)
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


async def _snapshot(engine: "Engine") -> dict[str, Any]:
    """Everything a scrape reports, read on the engine's loop."""
    by_state = {state.display: 0 for state in TransactionState}
    for _, meta in engine.transaction_coordinator.list_transactions():
        by_state[meta.state.display] += 1
    counters = engine.counters
    return {
        "partitions": [(log.topic, str(log.partition), len(log.producer_state.producers), log.high_watermark,
                        log.last_stable_offset, log.log_start_offset) for log in engine.logs],
        "transactional_ids": by_state,
        "completed": dict(engine.transaction_coordinator.completed),
        "counters": (counters.produce_requests, counters.produced_records, counters.fetch_requests,
                     counters.fetched_bytes),
        "kafka_requests": {api: (list(h.counts), h.total_s) for api, h in counters.kafka_requests.items()},
        "kafka_connections": len(engine.kafka_connections),
    }


class BrokerCollector(Collector):
    def __init__(self, engine: "Engine") -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        snap = self.engine.call(_snapshot, self.engine, timeout=10)
        labels = ["topic", "partition"]
        gauges = [GaugeMetricFamily(name, doc, labels=labels) for name, doc in (
            ("exactly_live_producer_ids", "Producer ids with state on the partition"),
            ("exactly_partition_high_watermark", "High watermark (the durable end of the log)"),
            ("exactly_partition_last_stable_offset", "Last stable offset: read_committed consumers stop here"),
            ("exactly_partition_log_start_offset", "First offset still held"))]
        for topic, partition, *values in snap["partitions"]:
            for gauge, value in zip(gauges, values):
                gauge.add_metric([topic, partition], value)
        yield from gauges
        active = GaugeMetricFamily("exactly_active_transactional_ids", "Transactional ids by state",
                                   labels=["state"])
        for state, count in snap["transactional_ids"].items():
            active.add_metric([state], count)
        yield active
        completed = CounterMetricFamily("exactly_transactions_completed", "Transactions completed since start",
                                        labels=["outcome"])
        for outcome, count in snap["completed"].items():
            completed.add_metric([outcome], count)
        yield completed
        for (name, doc), value in zip((
                ("exactly_produce_requests", "Batches submitted for append (all sources)"),
                ("exactly_produced_records", "Records appended (retried duplicates excluded)"),
                ("exactly_fetch_requests", "Fetches (all sources)"),
                ("exactly_fetched_bytes", "Record-batch bytes returned by fetches")), snap["counters"]):
            yield CounterMetricFamily(name, doc, value=value)
        latency = HistogramMetricFamily("exactly_kafka_request_duration_seconds",
                                        "Kafka requests by API: time from decoded to answered", labels=["api"])
        for api, (counts, total) in sorted(snap["kafka_requests"].items()):
            cumulative = list(itertools.accumulate(counts))
            latency.add_metric([api], [(str(bound), n) for bound, n in zip(KAFKA_LATENCY_BUCKETS_S, cumulative)]
                               + [("+Inf", cumulative[-1])], sum_value=total)
        yield latency
        yield GaugeMetricFamily("exactly_kafka_connections", "Kafka clients connected now",
                                value=snap["kafka_connections"])


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


@bp.get("/metrics")
def metrics() -> Response:
    return Response(generate_latest(current_app.extensions["exactly.metrics"]), mimetype=CONTENT_TYPE_LATEST)
