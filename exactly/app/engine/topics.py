"""Topics: what Kafka's controller and metadata cache do on one node -- create, grow,
configure and delete topics, and describe them -- with Kafka's limits (partitions per
request, ``exactly.max.partitions``, the replication factor there is).

A topic change is planned on the loop, one at a time, and written off it (its
directories and ``topics.json`` by the maintenance thread); it returns once durable.
The internal topics are created here when first needed, as Kafka does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any, Awaitable, Callable, Mapping

from exactly.app.config import BrokerConfig
from exactly.app.engine.counters import EngineCounters
from exactly.app.engine.maintenance import Maintenance
from exactly.app.engine.partitions import Partitions
from exactly.coordinator import cluster_metadata, offsets_log, transaction_log
from exactly.coordinator.group_coordinator import GroupCoordinator
from exactly.coordinator.internal_topics import INTERNAL_TOPICS
from exactly.storage.errors import (
    InvalidReplicationFactorError,
    InvalidTopicError,
    PolicyViolationError,
    TopicAlreadyExistsError,
)
from exactly.storage.log_config import LogConfig
from exactly.storage.log_manager import LogManager, TopicInfo

#: the partitions one CreateTopics request may create, or one CreatePartitions add
#: (Kafka's MAX_PARTITIONS_PER_BATCH, ReplicationControlManager): more is POLICY_VIOLATION
MAX_PARTITIONS_PER_REQUEST = 10_000

log = logging.getLogger(__name__)
#: a topic's config changes computed from its current configs (``Topics.alter_topic_config``)
TopicConfigChanges = Callable[[], Awaitable[Mapping[str, Any | None]]]


class Topics:
    """The topics of this broker, and every change to them."""

    def __init__(self, logs: LogManager, config: BrokerConfig, counters: EngineCounters, maintenance: Maintenance,
                 partitions: Partitions, group_coordinator: GroupCoordinator) -> None:
        self._logs = logs
        self._config = config
        self._counters = counters
        self._maintenance = maintenance
        self._partitions = partitions
        self._groups = group_coordinator
        #: one topic creation or deletion at a time
        self._topic_changes = asyncio.Lock()

    # -- describing ----------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._logs.cluster_id

    @property
    def node_id(self) -> int:
        return self._logs.node_id

    @property
    def defaults(self) -> LogConfig:
        """The broker's topic defaults (``log.*`` at start-up), for the engine's read models."""
        return self._logs.defaults

    def topic_config(self, name: str) -> LogConfig:
        """The effective config of a topic, for the engine's read models."""
        return self._logs.topic_config(name)

    def topic(self, name: str) -> TopicInfo:
        """The topic itself (UNKNOWN_TOPIC_OR_PARTITION if none), for the engine's own modules on
        the loop; the faces get copies (:meth:`describe_topic`)."""
        return self._logs.topic(name)

    def items(self) -> list[tuple[str, TopicInfo]]:
        """Every topic by name, for the engine's own modules on the loop."""
        return sorted(self._logs.topics.items())

    def topic_names(self) -> list[str]:
        """Every topic, internal ones included, sorted."""
        return sorted(self._logs.topics)

    def topic_info(self, name: str) -> TopicInfo | None:
        """A copy of the topic, or None if it does not exist."""
        info = self._logs.topics.get(name)
        return _copied(info) if info is not None else None

    def names_by_id(self, topic_ids: Any) -> dict[uuid.UUID, str]:
        """The name of each of ``topic_ids`` that is a topic's id now (KIP-516: an id
        of a deleted topic, even one created again since, is none's)."""
        names = self._logs.names_by_id
        return {topic_id: names[topic_id] for topic_id in topic_ids if topic_id in names}

    def describe_topic(self, name: str) -> TopicInfo:
        """A copy of the topic; UNKNOWN_TOPIC_OR_PARTITION if it does not exist."""
        return _copied(self._logs.topic(name))

    def partition_count(self, topic: str) -> int:
        return self._logs.topic(topic).partitions

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        """Partitions per existing topic (unknown topics are left out)."""
        return {t: self._logs.topics[t].partitions for t in topics if t in self._logs.topics}

    # -- changing ------------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int | None = None,
                           config: Mapping[str, Any] | None = None,
                           validate_only: bool = False, replication_factor: int | None = None) -> TopicInfo | None:
        """Create a topic; returns once it is durable (its directories and topics.json
        are written off the loop). ``validate_only``: raise what creating it would
        raise, create nothing, return None (CreateTopics' validate_only). The topic
        has one replica, whatever ``replication_factor`` (None: the default) was
        accepted by :meth:`check_replication_factor`."""
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"{name} is an internal topic; the broker creates it")
        note = self.check_replication_factor(replication_factor)
        count = partitions if partitions is not None else self._config.num_partitions
        self.check_partitions_per_request(count)
        created = await self._create_topic(name, count, config, validate_only=validate_only)
        if note and created:
            log.warning("topic %s: %s", name, note)
        return created

    def check_replication_factor(self, replication_factor: int | None) -> str | None:
        """A requested replication factor on this one node: 1, or -1 / None (the default),
        is the one replica there is. More is INVALID_REPLICATION_FACTOR, as in Kafka,
        unless exactly.replication.factor.ignore is set: then the topic gets its one
        replica and the returned note says so (for the answer and the log)."""
        if replication_factor in (None, -1, 1):
            return None
        if replication_factor < 1:
            raise InvalidReplicationFactorError("Replication factor must be larger than 0, or -1 to use the "
                                                "default value.")
        if not self._config.exactly_replication_factor_ignore:
            raise InvalidReplicationFactorError(f"replication factor {replication_factor} is more than the 1 "
                                                "broker there is (exactly.replication.factor.ignore=true accepts it)")
        return (f"replication factor {replication_factor} requested: created with the 1 replica this broker has "
                "(exactly.replication.factor.ignore=true)")

    async def ensure_internal_topic(self, name: str) -> None:
        """Create ``__transaction_state`` / ``__consumer_offsets`` / ``__cluster_metadata``
        (one partition) on first use, compacted. ``__cluster_metadata`` takes batches as
        large as KRaft's metadata log does (:data:`cluster_metadata.MAX_BATCH_BYTES`: one
        request's ACLs are one batch); one made before that is raised to it."""
        if name in self._logs.topics:
            if name == cluster_metadata.TOPIC and (
                    self._logs.log(name, 0).config.max_message_bytes < cluster_metadata.MAX_BATCH_BYTES):
                async with self._topic_changes:
                    await self._maintenance.run(self._logs.alter_topic_config(
                        name, {"max.message.bytes": cluster_metadata.MAX_BATCH_BYTES}))
            return
        config = self._config
        partitions, topic_config = {
            transaction_log.TOPIC: (config.transaction_state_log_num_partitions,
                                    {"segment.bytes": config.transaction_state_log_segment_bytes}),
            offsets_log.TOPIC: (config.offsets_topic_num_partitions,
                                {"segment.bytes": config.offsets_topic_segment_bytes}),
            cluster_metadata.TOPIC: (1, {"segment.bytes": config.log.segment_bytes,
                                         "max.message.bytes": cluster_metadata.MAX_BATCH_BYTES}),
        }[name]
        try:
            await self._create_topic(name, partitions, {"cleanup.policy": "compact", **topic_config}, internal=True)
        except TopicAlreadyExistsError:
            pass  # another request created it while this one waited

    async def _create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None,
                            internal: bool = False, validate_only: bool = False) -> TopicInfo | None:
        """The internal topics, which the broker needs, are not held to exactly.max.partitions."""
        async with self._topic_changes:
            steps = self._logs.create_topic(name, partitions, config, internal)  # validates, raising
            if not internal:
                self._check_partitions_held(partitions)
            if validate_only:
                steps.close()
                return None
            return await self._maintenance.run(steps)

    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> TopicInfo:
        """CreatePartitions: grow a topic to ``count`` partitions; returns once the new
        partitions and topics.json are durable. ``validate_only``: check, change nothing."""
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"the internal topic {name} keeps its partitions")
        async with self._topic_changes:
            held = self._logs.topic(name).partitions
            steps = self._logs.add_partitions(name, count)  # validates, raising
            self.check_partitions_per_request(count - held)
            self._check_partitions_held(count - held)
            if validate_only:
                steps.close()
                return self._logs.topic(name)
            return await self._maintenance.run(steps)

    def check_partitions_per_request(self, partitions: Any) -> None:
        """POLICY_VIOLATION, with Kafka's message, when one request would create more
        than :data:`MAX_PARTITIONS_PER_REQUEST` partitions (a count that is no int is
        left to the validation that follows)."""
        if isinstance(partitions, int) and partitions > MAX_PARTITIONS_PER_REQUEST:
            self._counters.limit_refused("max.partitions.per.request")
            raise PolicyViolationError(f"Excessively large number of partitions per request: {partitions} "
                                       f"requested, at most {MAX_PARTITIONS_PER_REQUEST}.")

    def _check_partitions_held(self, new: int) -> None:
        """POLICY_VIOLATION when ``new`` more partitions would take this broker past
        exactly.max.partitions (each partition holds open files and a directory); the
        internal topics' partitions do not count, as they are not refused."""
        held = sum(1 for topic, _ in self._logs.logs if topic not in INTERNAL_TOPICS)
        limit = self._config.exactly_max_partitions
        if held + new > limit:
            self._counters.limit_refused("exactly.max.partitions")
            raise PolicyViolationError(f"this broker holds {held} partitions: {new} more would exceed "
                                       f"exactly.max.partitions={limit}")

    async def alter_topic_config(self, name: str, changes: Mapping[str, Any | None] | TopicConfigChanges,
                                 validate_only: bool = False) -> TopicInfo:
        """Set or (None) reset config overrides of a topic; returns once topics.json
        holds them, the logs obeying them from then on. ``validate_only``: raise what
        altering would raise, change nothing. ``changes`` computed from the topic's
        current configs (IncrementalAlterConfigs' APPEND) come as a coroutine function,
        awaited once no other topic change runs, so none slips in between and is lost."""
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"the configs of the internal topic {name} are the broker's")
        async with self._topic_changes:
            if callable(changes):
                changes = await changes()
            steps = self._logs.alter_topic_config(name, changes)  # validates, raising
            if validate_only:
                steps.close()
                return self._logs.topic(name)
            return await self._maintenance.run(steps)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic: at once no request finds it; in-flight fsyncs finish and its
        maintenance is cancelled; returns once topics.json without it is durable and
        its files are gone. Then the consumer groups' offsets on it are deleted (with
        tombstones), as Kafka does: a topic created again under the name starts without
        them."""
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"the internal topic {name} cannot be deleted")
        async with self._topic_changes:
            logs = self._logs.detach_topic(name)
            await self._partitions.forget(logs)
            await self._maintenance.quiesce(logs)
            await self._maintenance.run(self._logs.delete_topic(logs))
            await self._groups.delete_topic_offsets(name)


def _copied(info: TopicInfo) -> TopicInfo:
    """``info`` with its own overrides: a face cannot change the log manager's."""
    return dataclasses.replace(info, overrides=dict(info.overrides))
