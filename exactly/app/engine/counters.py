"""The engine's counters and latency histograms, for ``/metrics``.

Written only on the engine's loop, where the work they measure happens -- whichever
face asked for it (the HTTP API, the embedded client, the Kafka listener):

* ``Partitions.start_produce`` (produce: from the call to the acknowledgement, i.e. the
  fsync for acks=all), ``Partitions.fetch`` (a client's read of one partition; the
  broker's own reads -- the SQLite mirror and the console through ``Partitions.read``,
  coordinator loads from the logs -- are not counted);
* group commit (``exactly/app/engine/group_commit.py``): how long each fsync round took;
* the transaction coordinator, through :class:`TransactionObserver`'s methods
  (EndTxn to durable markers, fenced producers, timed-out and admin-aborted
  transactions);
* the Kafka listener: every Kafka request by API, the connections it refused, and
  failed SASL logins by mechanism;
* every limit, by name, each time it refused something (:data:`LIMITS`);
* ``Access.authorize``: every denial, by resource type and operation.

One writer, so no lock; a scrape reads them on the loop too.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

#: upper bounds (seconds) of every latency histogram's buckets; a last bucket takes the rest
LATENCY_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                     5.0, 10.0, 30.0)

#: the limits whose refusals are counted: Kafka's per-request partition limit (its
#: MAX_PARTITIONS_PER_BATCH), and the configs of the others
LIMITS = ("max.partitions.per.request", "exactly.max.partitions", "max.connections", "max.connections.per.ip",
          "exactly.producer.id.rate.per.principal", "exactly.max.open.transactions.per.principal")


@dataclass
class LatencyHistogram:
    """How long something took, many times: a count per bucket of
    :data:`LATENCY_BUCKETS_S` (not cumulative) and the total."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    total_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.total_s += seconds


@dataclass
class EngineCounters:
    """Implements ``exactly.coordinator.transaction_coordinator.TransactionObserver``."""

    #: batches handed to ``start_produce`` (accepted, duplicate or refused)
    produce_requests: int = 0
    #: records appended (a retried batch answered as a duplicate adds none)
    produced_records: int = 0
    #: clients' ``fetch`` calls (one per partition read), in either isolation level
    fetch_requests: int = 0
    #: bytes of record batches returned by fetches
    fetched_bytes: int = 0
    #: a batch appended until acknowledged (durable for acks=all)
    produce_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    #: one fsync round of a partition (group commit), on the fsync thread
    fsync_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    #: a client's read of one partition
    fetch_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    #: EndTxn until its markers and COMPLETE are durable, by outcome (``commit``, ``abort``)
    end_txn_latency: dict[str, LatencyHistogram] = field(
        default_factory=lambda: {"commit": LatencyHistogram(), "abort": LatencyHistogram()})
    #: PRODUCER_FENCED / INVALID_PRODUCER_EPOCH answered to a producer, by error name
    fenced_producers: dict[str, int] = field(default_factory=dict)
    #: transactions the coordinator aborted because they ran past their timeout
    timed_out_transactions: int = 0
    #: transactions an operator aborted (the console's or the API's Abort, Kafka's AbortTransaction)
    admin_aborted_transactions: int = 0
    #: Kafka API name (``produce``, ``fetch``, ...) -> latency of its requests
    kafka_requests: dict[str, LatencyHistogram] = field(default_factory=dict)
    #: limit name (:data:`LIMITS`) -> what it refused: requests, or connections
    limit_refusals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LIMITS, 0))
    #: (face, mechanism, principal or "unknown") -> logins that failed (wrong password, unknown user, bad exchange)
    authentication_failures: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: (resource type, operation) -> requests the authorizer denied, from any face
    authorization_denials: dict[tuple[str, str], int] = field(default_factory=dict)

    def limit_refused(self, limit: str) -> None:
        self.limit_refusals[limit] += 1

    def authentication_failed(self, face: str, mechanism: str, principal: str) -> None:
        key = (face, mechanism, principal)
        self.authentication_failures[key] = self.authentication_failures.get(key, 0) + 1

    def authorization_denied(self, resource_type: str, operation: str) -> None:
        key = (resource_type, operation)
        self.authorization_denials[key] = self.authorization_denials.get(key, 0) + 1

    def observe_kafka_request(self, api: str, seconds: float) -> None:
        histogram = self.kafka_requests.get(api)
        if histogram is None:
            histogram = self.kafka_requests[api] = LatencyHistogram()
        histogram.observe(seconds)

    # -- TransactionObserver ----------------------------------------------------------------

    def transaction_ended(self, commit: bool, seconds: float) -> None:
        self.end_txn_latency["commit" if commit else "abort"].observe(seconds)

    def producer_fenced(self, error_name: str) -> None:
        self.fenced_producers[error_name] = self.fenced_producers.get(error_name, 0) + 1

    def transaction_timed_out(self) -> None:
        self.timed_out_transactions += 1

    def transaction_admin_aborted(self) -> None:
        self.admin_aborted_transactions += 1
