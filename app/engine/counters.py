"""Request counters of the engine, for ``/metrics``.

Incremented only on the engine's loop (``Engine.start_produce`` and ``Engine.fetch``,
which every source goes through: the HTTP API, the embedded client, the Kafka
listener; the listener also times every Kafka request by API), so there is one
writer and no lock; a scrape reads them on the loop too.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

#: upper bounds (seconds) of the Kafka request latency buckets; a last bucket takes the rest
KAFKA_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                           10.0, 30.0)


@dataclass
class LatencyHistogram:
    """How long the requests of one Kafka API took: a count per bucket of
    :data:`KAFKA_LATENCY_BUCKETS_S` (not cumulative) and the total."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(KAFKA_LATENCY_BUCKETS_S) + 1))
    total_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(KAFKA_LATENCY_BUCKETS_S, seconds)] += 1
        self.total_s += seconds


@dataclass
class EngineCounters:
    #: batches handed to ``start_produce`` (accepted, duplicate or refused)
    produce_requests: int = 0
    #: records appended (a retried batch answered as a duplicate adds none)
    produced_records: int = 0
    #: ``fetch`` calls, in either isolation level
    fetch_requests: int = 0
    #: bytes of record batches returned by fetches
    fetched_bytes: int = 0
    #: Kafka API name (``produce``, ``fetch``, ...) -> latency of its requests
    kafka_requests: dict[str, LatencyHistogram] = field(default_factory=dict)

    def observe_kafka_request(self, api: str, seconds: float) -> None:
        histogram = self.kafka_requests.get(api)
        if histogram is None:
            histogram = self.kafka_requests[api] = LatencyHistogram()
        histogram.observe(seconds)
