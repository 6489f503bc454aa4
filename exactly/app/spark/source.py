"""Reading topics from Spark: ``TopicReader`` (batch) and ``TopicStreamReader``
(micro-batch, with ``availableNow``), over the Kafka protocol at
``kafka.bootstrap.servers``, with Spark's Kafka connector's options
(``exactly/app/spark/source_options.py``).

Read committed by default (unlike Spark's connector, whose consumer reads
uncommitted): every range is planned up to the last stable offset (LSO), which
ListOffsets answers under read_committed, and read by a read_committed consumer
(``exactly/app/spark/partition_reader.py``), so aborted data and still-open transactions are
never returned. Below the LSO every transaction is decided, so a retried task or a
replayed micro-batch reads exactly the same records. ``kafka.isolation.level``
``read_uncommitted`` plans to the high watermark instead.

Planning runs in Spark's driver-side Python workers, reading in executor tasks: one
Spark partition per topic partition, or several offset ranges of one
(``minPartitions``, ``maxRecordsPerPartition``, split as Spark splits them). The
stream reader lives in one driver-side worker for a whole query run and keeps its
admin client until ``stop()``. Its offsets are Spark's Kafka source offsets,
``{"topic": {"partition": next offset}}``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow)

from exactly.app.spark.partition_reader import OffsetRange, arrow_schema, consumer_config, read_range
from exactly.app.spark.source_options import (
    EARLIEST, LATEST, Earliest, Latest, OffsetLimit, SourceOptions, SpecificOffsets, Timestamps,
    TopicPartition, parse_options)
from exactly.coordinator.internal_topics import INTERNAL_TOPICS

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

#: seconds an admin request (metadata, ListOffsets) may take
ADMIN_TIMEOUT = 30

Offsets = dict[TopicPartition, int]


class Cluster:
    """The driver's questions to the cluster: which partitions a subscription has, and
    their offsets (earliest, latest = LSO or high watermark, by timestamp)."""

    def __init__(self, options: SourceOptions) -> None:
        from confluent_kafka.admin import AdminClient

        self.options = options
        self._admin: AdminClient | None = AdminClient(options.client_config())

    def partitions(self) -> list[TopicPartition]:
        """The subscription's partitions now, sorted."""
        metadata = self._client.list_topics(timeout=ADMIN_TIMEOUT)
        existing = {(name, p) for name, topic in metadata.topics.items() if topic.error is None
                    for p in topic.partitions}
        subscription = self.options.subscription
        if subscription.kind == "assign":
            missing = [tp for tp in subscription.partitions if tp not in existing]
            if missing:
                raise ValueError("UNKNOWN_TOPIC_OR_PARTITION (3): partitions in option 'assign' do not "
                                 f"exist: {', '.join(f'{t}-{p}' for t, p in missing)}")
            return list(subscription.partitions)
        return sorted(tp for tp in existing
                      if tp[0] not in INTERNAL_TOPICS and subscription.matches(tp[0]))

    def earliest(self, tps: list[TopicPartition]) -> Offsets:
        from confluent_kafka.admin import OffsetSpec
        return self._list_offsets({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps: list[TopicPartition]) -> Offsets:
        """The LSO under read_committed, else the high watermark."""
        from confluent_kafka.admin import OffsetSpec
        return self._list_offsets({tp: OffsetSpec.latest() for tp in tps})

    def resolve(self, limit: OffsetLimit, option: str, earliest: Offsets, latest: Offsets) -> Offsets:
        """``limit`` as an offset for each partition of ``earliest`` and ``latest`` (one
        snapshot of the bounds, so that a range's start and end agree); ``option``
        names it in errors."""
        if isinstance(limit, Earliest):
            return dict(earliest)
        if isinstance(limit, Latest):
            return dict(latest)
        if isinstance(limit, SpecificOffsets):
            wanted = limit.offsets
            _check_covers(wanted, list(latest), option)
            special = {EARLIEST: earliest, LATEST: latest}
            return {tp: special[wanted[tp]][tp] if wanted[tp] in special else wanted[tp] for tp in latest}
        return self._by_timestamp(limit, latest)

    def close(self) -> None:
        self._admin = None

    @property
    def _client(self) -> AdminClient:
        if self._admin is None:
            raise RuntimeError("the source's admin client is closed")
        return self._admin

    def _by_timestamp(self, limit: Timestamps, latest: Offsets) -> Offsets:
        from confluent_kafka.admin import OffsetSpec

        tps, option = list(latest), limit.option
        if limit.everywhere is None:
            _check_covers(limit.by_partition, tps, option)
        found = self._list_offsets({tp: OffsetSpec.for_timestamp(limit.timestamp(tp)) for tp in tps})
        missing = [tp for tp in tps if found[tp] < 0]
        if missing and limit.missing == "error":
            raise ValueError(f"No offset matched the timestamp in option '{option}' for "
                             f"{', '.join(f'{t}-{p}' for t, p in missing)}: no record is that recent "
                             "(startingOffsetsByTimestampStrategy=latest starts them at latest)")
        return {tp: latest[tp] if found[tp] < 0 else min(found[tp], latest[tp]) for tp in tps}

    def _list_offsets(self, specs: dict) -> Offsets:
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition as Tp

        if not specs:
            return {}
        isolation = (IsolationLevel.READ_COMMITTED if self.options.read_committed
                     else IsolationLevel.READ_UNCOMMITTED)
        futures = self._client.list_offsets({Tp(t, p): spec for (t, p), spec in specs.items()},
                                           isolation_level=isolation, request_timeout=ADMIN_TIMEOUT)
        result = {}
        for tp, future in futures.items():
            try:
                result[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException as e:
                raise RuntimeError(f"ListOffsets for {tp.topic}-{tp.partition} failed: {e.args[0]}") from None
        return result


class TopicReader(DataSourceReader):
    """``spark.read.format("exactly")``: the records between the starting and ending
    offsets, planned once per DataFrame (ending "latest" is the LSO at planning)."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.options = parse_options(options, streaming=False)
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        cluster = Cluster(self.options)
        try:
            tps = cluster.partitions()
            earliest, latest = cluster.earliest(tps), cluster.latest(tps)
            starts = cluster.resolve(self.options.starting, "startingOffsets", earliest, latest)
            ends = cluster.resolve(self.options.ending, "endingOffsets", earliest, latest)
        finally:
            cluster.close()
        ranges = [OffsetRange(t, p, start, end) for (t, p), (start, end)
                  in checked_bounds(starts, ends, earliest, latest, self.options).items()]
        return input_partitions(ranges, self.options)

    def read(self, partition: InputPartition) -> Iterator:
        return read_partition(partition, self.options, self.schema)


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("exactly")``: micro-batches between offsets that never
    pass the LSO; partitions that appear later (``subscribePattern``, new partitions)
    are read from their earliest offset, as Spark does."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.options = parse_options(options, streaming=True)
        self.schema = schema
        self._cluster: Cluster | None = None
        self._initial: dict | None = None
        #: availableNow's target: the latest offsets when the run was prepared
        self._target: Offsets | None = None

    def __getstate__(self) -> dict:
        """Tasks get the options and schema, never the driver's admin client."""
        return {**self.__dict__, "_cluster": None}

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster(self.options)
        return self._cluster

    def initialOffset(self) -> dict:
        # Spark asks twice when a query starts: both answers must be the same
        if self._initial is None:
            tps = self.cluster.partitions()
            self._initial = to_json(self.cluster.resolve(self.options.starting, "startingOffsets",
                                                         self.cluster.earliest(tps), self.cluster.latest(tps)))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.cluster.latest(self.cluster.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json(start)
        available = self._target if self._target is not None else self.cluster.latest(self.cluster.partitions())
        new = [tp for tp in available if tp not in begin]
        begin.update(self.cluster.earliest(new))
        until = {**begin, **{tp: max(offset, begin[tp]) for tp, offset in available.items()}}
        if isinstance(limit, ReadMaxRows):
            until = rate_limit(limit.max_rows, begin, until)
        return to_json(until)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = from_json(start), from_json(end)
        begin.update(self.cluster.earliest([tp for tp in until if tp not in begin]))
        ranges = [OffsetRange(t, p, begin[(t, p)], offset) for (t, p), offset in sorted(until.items())]
        return input_partitions(ranges, self.options)

    def read(self, partition: InputPartition) -> Iterator:
        return read_partition(partition, self.options, self.schema)

    def commit(self, end: dict) -> None:
        """Nothing to do: the source keeps no state of its own; Spark's checkpoint
        holds the offsets."""

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def read_partition(partition: InputPartition, options: SourceOptions, schema: Any) -> Iterator:
    """A Spark task's records: its offset range (Spark sends ``None`` when a batch
    plan had no ranges)."""
    if partition.value is None:
        return iter(())
    config = consumer_config(options.client_config(), options.read_committed, options.fail_on_data_loss)
    return read_range(partition.value, config, arrow_schema(schema), options.poll_timeout_ms)


def checked_bounds(starts: Offsets, ends: Offsets, earliest: Offsets, latest: Offsets,
                   options: SourceOptions) -> dict[TopicPartition, tuple[int, int]]:
    """``(start, end)`` per partition of a batch read, refusing ranges that cannot be
    read: past the LSO (whose records are undecided), reversed, or below the log start
    offset (deleted by retention: an error under failOnDataLoss, else skipped)."""
    bounds = {}
    for tp in starts:
        start, end, name = starts[tp], ends[tp], f"{tp[0]}-{tp[1]}"
        if end > latest[tp]:
            kind = "last stable offset" if options.read_committed else "high watermark"
            raise ValueError(f"endingOffsets for {name} is {end}, past its {kind} {latest[tp]}")
        if start < earliest[tp]:
            if options.fail_on_data_loss:
                raise ValueError(
                    f"startingOffsets for {name} is {start} but its log starts at {earliest[tp]}: "
                    "some data may have been lost because it is not available in Kafka any more. "
                    "Set the option 'failOnDataLoss' to 'false' to read what is left.")
            start = earliest[tp]
        if start > end:
            raise ValueError(f"startingOffsets for {name} is {start}, after its ending offset {end}")
        bounds[tp] = (start, end)
    return bounds


def input_partitions(ranges: list[OffsetRange], options: SourceOptions) -> list[InputPartition]:
    """Spark's planning (KafkaOffsetRangeCalculator): empty ranges dropped, ranges over
    ``maxRecordsPerPartition`` cut into equal parts, then while there are fewer than
    ``minPartitions``, each range cut into parts by its share of all records."""
    ranges = [r for r in ranges if r.size > 0]
    if options.max_records_per_partition:
        ranges = [part for r in ranges
                  for part in divide(r, math.ceil(r.size / options.max_records_per_partition))]
    wanted = options.min_partitions
    if wanted and wanted > len(ranges):
        total = sum(r.size for r in ranges)
        # Java's Math.round (half up), not Python's round (half to even)
        ranges = [part for r in ranges for part in divide(r, max(math.floor(r.size / total * wanted + 0.5), 1))]
    return [InputPartition(r) for r in ranges]


def divide(rng: OffsetRange, parts: int) -> list[OffsetRange]:
    """``rng`` in ``parts`` consecutive ranges whose sizes differ by at most one."""
    result, start, remaining = [], rng.start, rng.size
    for part in range(parts):
        size = remaining // (parts - part)
        remaining -= size
        result.append(OffsetRange(rng.topic, rng.partition, start, start + size))
        start += size
    return result


def rate_limit(limit: int, begin: Offsets, until: Offsets) -> Offsets:
    """At most about ``limit`` offsets in all, shared by the partitions in proportion
    to what each has to read; none is starved (Spark's ``rateLimit``)."""
    sizes = {tp: end - begin[tp] for tp, end in until.items() if end > begin[tp]}
    total = sum(sizes.values())
    if total < 1:
        return until
    limited = dict(until)
    for tp, size in sizes.items():
        share = limit * size / total
        limited[tp] = min(until[tp], begin[tp] + (math.ceil(share) if share < 1 else math.floor(share)))
    return limited


def to_json(offsets: Offsets) -> dict:
    """Spark's Kafka source offset: ``{"topic": {"partition": offset}}``."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def from_json(offsets: dict) -> Offsets:
    return {(topic, int(p)): offset for topic, partitions in offsets.items() for p, offset in partitions.items()}


def _check_covers(given: Mapping[TopicPartition, int], tps: list[TopicPartition], option: str) -> None:
    """Spark's rule: specific offsets name exactly the subscription's partitions."""
    if set(given) != set(tps):
        raise ValueError(
            f"If {option} contains specific offsets, you must specify all TopicPartitions. "
            "Use -1 for latest, -2 for earliest. "
            f"Specified: {sorted(given)} Assigned: {sorted(tps)}")
