"""Request counters of the engine, for ``/metrics``.

Incremented only on the engine's loop (``Engine.start_produce`` and ``Engine.fetch``,
which every source goes through: the HTTP API, the embedded client, the Kafka
listener), so there is one writer and no lock; a scrape reads them on the loop too.
"""

from __future__ import annotations

from dataclasses import dataclass


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
