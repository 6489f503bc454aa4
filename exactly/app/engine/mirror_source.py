"""The SQLite mirror's view of the engine (``exactly.coordinator.mirror.MirrorSource``).

Every method runs a short coroutine on the engine's loop through ``Engine.call``
-- the only safe way to read partition state -- and returns plain values, so the
mirror's thread does its SQLite work without ever holding up the loop.
"""

from __future__ import annotations

from exactly.app.engine import Engine
from exactly.app.security.acl import AclBinding
from exactly.app.security.scram import ScramMechanism
from exactly.coordinator.cluster_metadata import AclRecord
from exactly.coordinator.mirror import PartitionStats, ProducerStats
from exactly.storage import topic_id
from exactly.storage.partition_log import ReadResult


class EngineMirrorSource:
    """``MirrorSource`` over an :class:`~exactly.app.engine.Engine`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def partitions_of(self, topic: str) -> int | None:
        async def count() -> int | None:
            info = self.engine.topics.topic_info(topic)
            return None if info is None else info.partitions
        return self.engine.call(count)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> ReadResult:
        return self.engine.call(self.engine.partitions.read, topic, partition, offset, max_bytes)

    def log_start_offset(self, topic: str, partition: int) -> int:
        async def start() -> int:
            return self.engine.partitions.log(topic, partition).log_start_offset
        return self.engine.call(start)

    def partition_stats(self) -> list[PartitionStats]:
        async def stats() -> list[PartitionStats]:
            ids = {name: topic_id.to_string(info.topic_id) for name, info in self.engine.topics.items()}
            return [PartitionStats(topic=log.topic, partition=log.partition, topic_id=ids[log.topic],
                                   high_watermark=log.high_watermark,
                                   last_stable_offset=log.last_stable_offset,
                                   log_start_offset=log.log_start_offset,
                                   log_end_offset=log.log_end_offset)
                    for _, log in self.engine.partitions.logs()]
        return self.engine.call(stats)

    def producer_stats(self) -> list[ProducerStats]:
        async def stats() -> list[ProducerStats]:
            return [ProducerStats(topic=log.topic, partition=log.partition,
                                  producer_id=entry.producer_id, producer_epoch=entry.producer_epoch,
                                  coordinator_epoch=entry.coordinator_epoch,
                                  last_sequence=entry.last_seq, last_offset=entry.last_data_offset,
                                  last_timestamp_ms=entry.last_timestamp,
                                  txn_first_offset=entry.current_txn_first_offset)
                    for _, log in self.engine.partitions.logs() for entry in log.producer_state]
        return self.engine.call(stats)

    def scram_mechanism_name(self, mechanism: int) -> str:
        return ScramMechanism(mechanism).mechanism_name

    def acl_names(self, record: AclRecord) -> dict[str, str]:
        binding = AclBinding.from_record(record)
        return {"resource_type": binding.pattern.resource_type.name,
                "pattern_type": binding.pattern.pattern_type.name,
                "operation": binding.entry.operation.name,
                "permission_type": binding.entry.permission_type.name}
