"""What the Spark jobs ask a broker through confluent-kafka's ``AdminClient``:
creating topics, a topic's partition count, and a group's committed offset with its
metadata (the sink's decisions). Only two-phase commit is sent raw
(``exactly/app/spark/kafka_client.py``).

A broker's error raises the ``exactly/storage/errors.py`` class of its Kafka code, as the raw
client's do, so callers retry both alike (:func:`exactly.app.spark.kafka_client.retrying`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.app.spark.kafka_client import retrying
from exactly.storage.errors import TopicAlreadyExistsError, error_for_code

T = TypeVar("T")


class KafkaAdmin:
    """confluent-kafka's AdminClient of ``bootstrap``, answering with Kafka's errors."""

    def __init__(self, bootstrap: str, timeout: float = 30.0) -> None:
        # librdkafka's Metadata would otherwise create a topic it asks about
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False})
        self.timeout = timeout
        #: topics known to exist (callers that create topics on demand remember them here)
        self.known_topics: set[str] = set()

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str] | None = None) -> None:
        """CreateTopics; a topic that exists already is fine."""
        future = self.admin.create_topics([NewTopic(name, partitions, -1, config=dict(configs or {}))],
                                          request_timeout=self.timeout)[name]
        try:
            _kafka(lambda: future.result(self.timeout))
        except TopicAlreadyExistsError:
            pass

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (raising its error, e.g. UNKNOWN_TOPIC_OR_PART)."""
        found = _kafka(lambda: self.admin.list_topics(topic, timeout=self.timeout)).topics[topic]
        if found.error is not None:
            raise error_for_code(found.error.code())(f"topic {topic!r}: {found.error.str()}")
        return len(found.partitions)

    def commit_offset(self, group: str, topic: str, partition: int, offset: int, metadata: str) -> None:
        """A simple (memberless) OffsetCommit of one partition."""
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, partition, offset, metadata=metadata)])
        retrying(lambda: self._partition(self.admin.alter_consumer_group_offsets(
            [request], request_timeout=self.timeout)[group]), self.timeout)

    def fetch_offset(self, group: str, topic: str, partition: int) -> tuple[int, str] | None:
        """``(offset, metadata)`` committed by ``group`` for a partition, None if none."""
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, partition)])
        found = retrying(lambda: self._partition(self.admin.list_consumer_group_offsets(
            [request], require_stable=True, request_timeout=self.timeout)[group]), self.timeout)
        return None if found.offset < 0 else (found.offset, found.metadata or "")

    def _partition(self, future: Any) -> TopicPartition:
        """The one partition of a group offsets answer, raising its error."""
        found = _kafka(lambda: future.result(self.timeout)).topic_partitions[0]
        if found.error is not None:
            raise error_for_code(found.error.code())(f"{found.topic}-{found.partition}: {found.error.str()}")
        return found


def _kafka(call: Callable[[], T]) -> T:
    """``call()``, a broker's error raised as its ``exactly/storage/errors.py`` class (a client-side
    one, negative in librdkafka, as confluent-kafka raised it)."""
    try:
        return call()
    except KafkaException as e:
        error = e.args[0]
        if error.code() <= 0:
            raise
        raise error_for_code(error.code())(error.str()) from e


_admins: dict[str, KafkaAdmin] = {}


def admin_for(bootstrap: str) -> KafkaAdmin:
    """This process's admin client of ``bootstrap`` (reused across a job's commits)."""
    if bootstrap not in _admins:
        _admins[bootstrap] = KafkaAdmin(bootstrap)
    return _admins[bootstrap]


def forget(bootstrap: str) -> None:
    """Drop this process's admin client of ``bootstrap`` (a broker gone for good: a test's):
    confluent-kafka destroys a client with its last reference, and a kept one would
    reconnect to the closed address for the rest of the process."""
    _admins.pop(bootstrap, None)
