"""The storage layer driven directly, for tests about storage.

Tests of the log itself -- the LSO, the aborted-transaction index, recovery,
cleaning -- need to write what no client may write through a broker: transactional
batches of any producer id and epoch, and COMMIT/ABORT markers with any producer
and coordinator epoch. A broker refuses both (KIP-890 verification, and markers
come only from its transaction coordinator); the storage layer takes them, as it
takes the coordinator's markers from the engine.

:class:`DurableLogs` is a ``LogManager`` with the few calls such tests make, named
as the broker names them; every append is fsynced before it returns (what
``acks=all`` waits for), so the high watermark and the LSO are what a consumer of
a broker would see. It is single-threaded: no engine, no loop, no coordinator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from exactly.app.config import BrokerConfig
from exactly.app.engine import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_UNCOMMITTED, isolation_is_committed
from exactly.storage.background import run_inline
from exactly.storage.clock import Clock, SystemClock
from exactly.storage.log_manager import LogManager, TopicInfo
from exactly.storage.partition_log import PartitionLog, ReadResult


class DurableLogs:
    """Partitions on ``data_dir`` (recovered on open), written durably, one call at a time."""

    def __init__(self, data_dir: str | Path, *, clock: Clock | None = None, **config: Any) -> None:
        self.logs = LogManager(data_dir, BrokerConfig.from_kafka(config).log, clock or SystemClock())

    def __enter__(self) -> "DurableLogs":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """A clean shutdown: snapshots, checkpoints, the directory lock released."""
        self.logs.close(clean=True)

    def create_topic(self, name: str, partitions: int = 1,
                     config: Mapping[str, Any] | None = None) -> TopicInfo:
        return run_inline(self.logs.create_topic(name, partitions, config))

    def log(self, topic: str, partition: int = 0) -> PartitionLog:
        return self.logs.log(topic, partition)

    def produce(self, topic: str, partition: int, batch: bytes) -> int:
        """Append a producer's batch and fsync it; its base offset (the original one
        for a duplicate)."""
        log = self.log(topic, partition)
        result = log.append_data(batch)
        log.flush()
        return result.base_offset

    def write_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                         coordinator_epoch: int, commit: bool) -> int:
        """Append a COMMIT or ABORT marker and fsync it; its offset."""
        log = self.log(topic, partition)
        result = log.append_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        log.flush()
        return result.base_offset

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              isolation_level: str | int = READ_UNCOMMITTED) -> ReadResult:
        return self.log(topic, partition).read(offset, max_bytes,
                                               read_committed=isolation_is_committed(isolation_level))

    def list_offsets(self, topic: str, partition: int, timestamp: int,
                     isolation_level: str | int = READ_UNCOMMITTED) -> int:
        """-1: latest (the LSO when read_committed); -2: earliest."""
        log = self.log(topic, partition)
        if timestamp == LATEST_TIMESTAMP:
            return log.last_stable_offset if isolation_is_committed(isolation_level) else log.high_watermark
        assert timestamp == EARLIEST_TIMESTAMP, "only latest and earliest"
        return log.log_start_offset
