"""Kafka's default partitioner, shared by every face that picks a partition for a
record: the embedded producer, the HTTP API and the Spark sink.

A record with a key goes to ``toPositive(murmur2(key)) % partitions`` (Kafka's
``Utils.murmur2`` and ``BuiltInPartitioner.partitionForKey``), so a key lands where
Kafka's own clients would put it. A record without one goes to the producer's sticky
partition (KIP-480/KIP-794): one partition until ``batch_size`` bytes went to it,
then the next.
"""

from __future__ import annotations

import random
from typing import Callable

from exactly.storage.errors import UnknownTopicOrPartitionError


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the default partitioner's hash), as a signed int32."""
    length = len(data)
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's ``BuiltInPartitioner.partitionForKey``: ``toPositive(murmur2(key)) % partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class BuiltInPartitioner:
    """One producer's partitioner: keys by murmur2, keyless records sticky; it caches
    each topic's partition count (asked again for a partition beyond it, or after
    :meth:`forget`). Not thread-safe: the producer calls it under its lock or from one
    thread at a time."""

    def __init__(self, batch_size: int, partition_count: Callable[[str], int]) -> None:
        self.batch_size = batch_size
        self._partition_count = partition_count
        self._counts: dict[str, int] = {}
        self._sticky: dict[str, list[int]] = {}  # topic -> [partition, bytes sent to it]

    def partition(self, topic: str, key: bytes | None, size: int, partition: int | None) -> int:
        """The record's partition: the one asked for (checked), the key's, or the sticky one."""
        count = self._counts.get(topic)
        if count is None or (partition is not None and partition >= count):
            count = self._counts[topic] = self._partition_count(topic)
        if partition is not None:
            if not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition} "
                                                   f"(it has {count})")
            return partition
        if key is not None:
            return partition_for_key(key, count)
        return self._sticky_partition(topic, count, size)

    def forget(self, topic: str) -> None:
        """The broker said the topic or partition is unknown: ask for its count again."""
        self._counts.pop(topic, None)

    def _sticky_partition(self, topic: str, count: int, size: int) -> int:
        """Kafka's built-in partitioner for records without a key: stay on one partition
        until ``batch_size`` bytes went to it, then move to the next."""
        sticky = self._sticky.get(topic)
        if sticky is None:
            sticky = self._sticky[topic] = [random.randrange(count), 0]
        elif sticky[1] >= self.batch_size or sticky[0] >= count:
            sticky[0], sticky[1] = (sticky[0] + 1) % count, 0
        sticky[1] += size
        return sticky[0]
