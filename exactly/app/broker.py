"""``Broker``: the embedded, synchronous face of the engine, and its lifecycle.

Tests, the CLI and later the embedded producer/consumer use it::

    from exactly import Broker
    with Broker("data", **{"segment.bytes": 1 << 20}) as broker:
        broker.create_topic("t", partitions=3)
        base_offset = broker.produce("t", 0, batch_bytes, acks=-1)
        r = broker.fetch("t", 0, 0, isolation_level="read_committed")

An open Broker is a whole broker without listeners: opening it recovers every
partition, creates or migrates the SQLite mirror ``<data-dir>/exactly.db`` and starts
the scheduled jobs (``exactly/app/engine/scheduler.py``: transaction timeouts, expirations,
snapshots, retention, cleaning, checkpoints, the mirror's rounds); closing it stops
them and shuts down cleanly. ``exactly serve`` is a Broker plus its listeners, which
reach it through ``broker.engine`` (and the console reads ``broker.mirror``).
``exactly.jobs.enable=false`` turns the jobs off, for tests that drive them by hand.

Every method raises the Kafka error (``exactly.storage.errors``) the wire would carry.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from exactly.app.client.consumer import Consumer
from exactly.app.client.producer import Producer
from exactly.app.config import BrokerConfig
from exactly.app.engine import READ_UNCOMMITTED, Engine
from exactly.app.engine.disk_space import is_disk_full
from exactly.app.engine.mirror_source import EngineMirrorSource
from exactly.app.engine.scheduler import mirror_round, start_scheduler
from exactly.app.faults import Faults
from exactly.coordinator.mirror import Mirror
from exactly.coordinator.mirror_db import UPGRADE_ERRORS, db_path
from exactly.storage.clock import Clock
from exactly.storage.errors import KafkaStorageError
from exactly.storage.log_manager import TopicInfo
from exactly.storage.partition_log import ReadResult

log = logging.getLogger(__name__)

#: how long a call waits for the engine before giving up (an fsync stuck this long is a dead disk)
_TIMEOUT_S = 60


class Broker:
    """A broker on ``data_dir``: the engine, the SQLite mirror and the scheduled jobs."""

    def __init__(self, data_dir: str | Path = "data", *, clock: Clock | None = None,
                 **config: Any) -> None:
        self.data_dir = Path(data_dir)
        self.config = BrokerConfig.from_kafka(config)
        self.engine = Engine(self.data_dir, self.config, clock)
        try:
            self.mirror = _open_mirror(self.data_dir, self.engine)
        except BaseException:
            self.engine.close()
            raise
        self._scheduler = start_scheduler(self.engine, self.mirror) if self.config.exactly_jobs_enable else None
        self._closed = False

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> bool:
        """Stop the jobs (a running round finishes), bring the mirror up to date, then
        shut the engine down cleanly: fsync, snapshot producer state, write checkpoints.
        Idempotent. Returns whether the engine closed cleanly (``Engine.close``)."""
        if self._closed:
            return self.engine.close()
        self._closed = True
        try:
            if self._scheduler is not None:
                self._scheduler.shutdown(wait=True)
                try:
                    mirror_round(self.mirror)
                except Exception as e:  # derived data: the next open catches up from the logs
                    if is_disk_full(e):
                        log.warning("the SQLite mirror's last round found the disk full; the next start "
                                    "catches up")
                    else:
                        log.exception("the SQLite mirror's last round failed")
            self.mirror.close()
        finally:
            clean = self.engine.close()
        return clean

    def kill(self) -> None:
        """Stop as a SIGKILL would leave the data directory (:meth:`Engine.kill
        <exactly.app.engine.engine.Engine.kill>`), for an unclean restart in place
        (``exactly/app/server.py``): the jobs stop (the kill's instant comes after a round in
        progress, so none fails half-way), the engine is killed, and the mirror's
        connections are dropped with nothing more written -- no last round."""
        if self._closed:
            return
        self._closed = True
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True)
        try:
            self.engine.kill()
        finally:
            self.mirror.close()

    @property
    def faults(self) -> Faults:
        """The faults installed on this broker (``exactly/app/faults/``): ``add(api=..., error=...)``
        returns a handle with ``.fired`` and ``.remove()``; ``event("pause", 500)``;
        ``list()``, ``remove(id)``, ``clear()``. Its Kafka listeners apply them."""
        return self.engine.faults

    @property
    def cluster_id(self) -> str:
        return self.engine.topics.cluster_id

    def create_topic(self, name: str, partitions: int | None = None, config: Mapping[str, Any] | None = None,
                     validate_only: bool = False) -> TopicInfo | None:
        """Create a topic, raising Kafka's error (POLICY_VIOLATION past the partition
        limits); ``validate_only``: raise what creating would raise, create nothing,
        return None."""
        return self.engine.call(self.engine.topics.create_topic, name, partitions, config, validate_only=validate_only)

    def delete_topic(self, name: str) -> None:
        self.engine.call(self.engine.topics.delete_topic, name)

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1,
                transactional_id: str | None = None) -> int:
        """Append one raw v2 record batch; returns its base offset (the original
        one when the batch is a retry of one already appended). A transactional
        batch needs its producer's Ongoing transaction on this partition (the
        producer id and epoch of InitProducerId, the partition added with
        AddPartitionsToTxn); ``transactional_id``, as a Produce request carries
        it, must then own the producer id."""
        return self.engine.submit(self.engine.partitions.start_produce, topic, partition, batch, acks,
                                  transactional_id).result(_TIMEOUT_S).base_offset

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              isolation_level: str | int = READ_UNCOMMITTED) -> ReadResult:
        return self.engine.call(self.engine.partitions.fetch, topic, partition, offset, max_bytes, isolation_level)

    def list_offsets(self, topic: str, partition: int, timestamp: int,
                     isolation_level: str | int = READ_UNCOMMITTED) -> int:
        """-1: latest (the LSO when read_committed); -2: earliest; else the first
        offset whose timestamp is >= ``timestamp`` (-1 if there is none)."""
        return self.engine.call(self.engine.partitions.list_offsets, topic, partition, timestamp,
                                isolation_level).offset

    def producer(self, **config: Any) -> Producer:
        """An embedded producer whose ``send`` returns a future and batches as Kafka's
        does (``exactly/app/client/producer.py``). Config, Kafka's names and defaults:
        ``transactional_id``, ``transaction_timeout_ms`` (60000), ``enable_idempotence``
        (True), ``acks`` (-1), ``batch_size`` (16384), ``linger_ms`` (5),
        ``max_in_flight_requests_per_connection`` (5), ``delivery_timeout_ms`` (120000),
        ``compression_type`` ("none"), ``buffer_memory`` (32 MiB), ``max_block_ms``
        (60000), ``retry_backoff_ms`` (100)."""
        return Producer(self.engine, **config)

    def consumer(self, **config: Any) -> Consumer:
        """An embedded consumer: ``group_id``, ``isolation_level``, ``enable_auto_commit``,
        ``auto_offset_reset``, ``session_timeout_ms``, ``max_poll_records``, ..."""
        return Consumer(self.engine, **config)


def _open_mirror(data_dir: Path, engine: Engine) -> Mirror:
    """The mirror of ``data_dir``, its database created or migrated."""
    path = db_path(data_dir)
    try:
        return Mirror(path, EngineMirrorSource(engine), clock=engine.clock)
    except UPGRADE_ERRORS as e:
        raise KafkaStorageError(f"cannot open the SQLite mirror {path}: {e}") from e
