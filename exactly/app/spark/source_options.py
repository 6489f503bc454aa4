"""The ``exactly`` source's options: Spark's Kafka connector's names and meanings,
parsed once on the driver into a picklable ``SourceOptions``.

Option names are case-insensitive (Spark hands data sources a case-insensitive map);
misuse fails with Spark's wording, naming the option: exactly one of ``subscribe``,
``subscribePattern``, ``assign``; offsets as Spark's JSON
``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}`` (-2 earliest, -1 latest).

One difference from Spark: ``kafka.isolation.level`` is ``read_committed`` unless set
(Spark's consumer defaults to ``read_uncommitted``): aborted and still-open
transactional data is never read, and "latest" means the last stable offset (LSO).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from exactly.storage.isolation_level import LABELS, IsolationLevel

#: Spark's special offsets in JSON offsets
EARLIEST, LATEST = -2, -1

TopicPartition = tuple[str, int]

STRATEGY_OPTIONS = ("subscribe", "subscribePattern", "assign")
#: Spark Kafka options this source refuses rather than silently ignores
UNSUPPORTED = ("minOffsetsPerTrigger", "maxTriggerDelay", "maxBytesPerTrigger")
#: batch-only options, refused by a stream as Spark does
ENDING_OPTIONS = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
#: consumer settings Spark's connector refuses, with its reason
FORBIDDEN_KAFKA = {
    "auto.offset.reset": "Instead set the source option 'startingOffsets' to 'earliest' or 'latest' "
                         "to specify where to start",
    "enable.auto.commit": "The source does not commit any offsets",
    "key.deserializer": "Keys are always read as bytes; use DataFrame operations to deserialize them",
    "value.deserializer": "Values are always read as bytes; use DataFrame operations to deserialize them",
}
JSON_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'


@dataclass(frozen=True)
class Earliest:
    """``"earliest"``: the log start offset of every partition."""


@dataclass(frozen=True)
class Latest:
    """``"latest"``: the LSO (read_committed) or high watermark of every partition."""


@dataclass(frozen=True)
class SpecificOffsets:
    """Offsets per partition (``EARLIEST`` / ``LATEST`` allowed); must name every
    partition the subscription has, as Spark requires."""

    offsets: dict[TopicPartition, int]


@dataclass(frozen=True)
class Timestamps:
    """The first offset with a timestamp at or after the partition's timestamp;
    ``everywhere`` applies to every partition (``startingTimestamp``)."""

    by_partition: dict[TopicPartition, int] = field(default_factory=dict)
    everywhere: int | None = None
    #: when no record is that recent: fail ("error", Spark's default) or take "latest"
    missing: str = "error"
    #: the option that gave the timestamps, for errors
    option: str = "startingTimestamp"

    def timestamp(self, tp: TopicPartition) -> int:
        """The partition's timestamp (``by_partition`` must name it unless ``everywhere`` is set)."""
        return self.everywhere if self.everywhere is not None else self.by_partition[tp]


OffsetLimit = Union[Earliest, Latest, SpecificOffsets, Timestamps]


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: ``kind`` is one of ``STRATEGY_OPTIONS``."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":  # Java's Pattern.matcher(topic).matches()
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.partitions)


@dataclass(frozen=True)
class SourceOptions:
    """One read's parsed options (picklable: Spark sends them to the tasks)."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetLimit
    ending: OffsetLimit
    read_committed: bool
    include_headers: bool
    #: the other ``kafka.*`` options, prefix removed: passed to every consumer
    consumer_config: dict[str, str]
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    #: how long a partition read may wait for its next record (Spark's kafkaConsumer.pollTimeoutMs)
    poll_timeout_ms: int

    def client_config(self) -> dict[str, Any]:
        """The settings every client of this source starts from."""
        return {**self.consumer_config, "bootstrap.servers": self.bootstrap_servers}


def parse_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """``SourceOptions`` from Spark's options, or ``ValueError`` naming the misused one.
    Batch and streaming differ as in Spark: streaming starts at "latest" by default and
    has no ending offsets; batch cannot start at "latest" nor end at "earliest"."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    kafka = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    for name in UNSUPPORTED:
        if name.lower() in opts:
            raise ValueError(f"Option '{name}' is not supported by the exactly source")
    for name, reason in FORBIDDEN_KAFKA.items():
        if name in kafka:
            raise ValueError(f"Kafka option '{name}' is not supported. {reason}.")
    servers = kafka.pop("bootstrap.servers", "").strip()
    if not servers:
        raise ValueError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")
    isolation = kafka.pop("isolation.level", "read_committed")
    if isolation not in LABELS:
        raise ValueError(f"Invalid value '{isolation}' for option 'kafka.isolation.level': "
                         f"expected one of {', '.join(reversed(LABELS))}")
    if streaming:
        for name in ENDING_OPTIONS:
            if name.lower() in opts:
                raise ValueError(f"Option '{name}' is not valid in streaming queries")
    starting = _offset_limit(opts, "starting", Latest() if streaming else Earliest())
    ending = Latest() if streaming else _offset_limit(opts, "ending", Latest())
    if not streaming:
        _check_batch_limits(starting, ending)
    return SourceOptions(
        bootstrap_servers=servers,
        subscription=_subscription(opts),
        starting=starting,
        ending=ending,
        read_committed=isolation == IsolationLevel.READ_COMMITTED.label,
        include_headers=_boolean(opts, "includeHeaders", False),
        consumer_config=kafka,
        max_offsets_per_trigger=_positive(opts, "maxOffsetsPerTrigger"),
        min_partitions=_positive(opts, "minPartitions"),
        max_records_per_partition=_positive(opts, "maxRecordsPerPartition"),
        fail_on_data_loss=_boolean(opts, "failOnDataLoss", True),
        poll_timeout_ms=_positive(opts, "kafkaConsumer.pollTimeoutMs") or 120_000,
    )


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [name for name in STRATEGY_OPTIONS if name.lower() in opts]
    if not given:
        raise ValueError("One of the following options must be specified for Kafka source: "
                         f"{', '.join(STRATEGY_OPTIONS)}. See the docs for more details.")
    if len(given) > 1:
        raise ValueError("Only one of the following options can be specified for Kafka source: "
                         f"{', '.join(STRATEGY_OPTIONS)}. See the docs for more details.")
    kind = given[0]
    value = opts[kind.lower()]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ValueError(f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
        return Subscription(kind, topics=topics)
    if kind == "subscribePattern":
        if not value.strip():
            raise ValueError("Pattern to subscribe is empty as specified value for option "
                             f"'subscribePattern' is '{value}'")
        try:
            re.compile(value.strip())
        except re.error as e:
            raise ValueError(f"Invalid value '{value}' for option 'subscribePattern': {e}") from None
        return Subscription(kind, pattern=value.strip())
    if not value.strip().startswith("{"):
        raise ValueError(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
    return Subscription(kind, partitions=_assigned_partitions(value))


def _assigned_partitions(value: str) -> tuple[TopicPartition, ...]:
    """``{"topicA":[0,1],"topicB":[2,4]}`` as sorted (topic, partition) pairs."""
    parsed = _json(value, "assign", '{"topicA":[0,1],"topicB":[2,4]}')
    if not all(isinstance(ps, list) and all(_is_int(p) for p in ps) for ps in parsed.values()):
        raise ValueError(f"Invalid value '{value}' for option 'assign': expected e.g. "
                         '{"topicA":[0,1],"topicB":[2,4]}')
    pairs = sorted({(topic, p) for topic, ps in parsed.items() for p in ps})
    if not pairs:
        raise ValueError(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
    return tuple(pairs)


def _offset_limit(opts: dict[str, str], side: str, default: OffsetLimit) -> OffsetLimit:
    """Spark's precedence: ``<side>Timestamp``, then ``<side>OffsetsByTimestamp``,
    then ``<side>Offsets``, then ``default``."""
    missing = "latest"  # Spark's rule for ending offsets
    if side == "starting":
        missing = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if missing not in ("error", "latest"):
            raise ValueError(f"Invalid value '{missing}' for option 'startingOffsetsByTimestampStrategy': "
                             "expected error or latest")
    if f"{side}timestamp" in opts:
        name = f"{side}Timestamp"
        return Timestamps(everywhere=_timestamp(opts[name.lower()], name), missing=missing, option=name)
    if f"{side}offsetsbytimestamp" in opts:
        name = f"{side}OffsetsByTimestamp"
        by_partition = _partition_numbers(opts[f"{side}offsetsbytimestamp"], name)
        for tp, ts in by_partition.items():
            if ts < 0:
                raise ValueError(f"Invalid timestamp {ts} for {tp[0]}-{tp[1]} in option '{name}'")
        return Timestamps(by_partition=by_partition, missing=missing, option=name)
    value = opts.get(f"{side}offsets")
    if value is None:
        return default
    name = f"{side}Offsets"
    if value.strip().lower() == "earliest":
        return Earliest()
    if value.strip().lower() == "latest":
        return Latest()
    offsets = _partition_numbers(value, name)
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise ValueError(f"Invalid offset {offset} for {tp[0]}-{tp[1]} in option '{name}': "
                             "use -2 for earliest, -1 for latest or an offset >= 0")
    return SpecificOffsets(offsets)


def _check_batch_limits(starting: OffsetLimit, ending: OffsetLimit) -> None:
    if isinstance(starting, Latest):
        raise ValueError("starting offset can't be latest for batch queries on Kafka")
    if isinstance(ending, Earliest):
        raise ValueError("ending offset can't be earliest for batch queries on Kafka")
    for limit, banned, side in ((starting, LATEST, "startingOffsets"), (ending, EARLIEST, "ending offset")):
        if isinstance(limit, SpecificOffsets):
            for (topic, partition), offset in limit.offsets.items():
                if offset == banned:
                    word = "latest" if banned == LATEST else "earliest"
                    raise ValueError(f"{side} for {topic}-{partition} can't be {word} for batch queries on Kafka")


def _partition_numbers(value: str, name: str) -> dict[TopicPartition, int]:
    """Spark's ``{"topicA":{"0":23,"1":-1}}`` as ``{(topic, partition): number}``."""
    parsed = _json(value, name, JSON_EXAMPLE)
    result = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"Invalid value '{value}' for option '{name}': expected e.g. {JSON_EXAMPLE}")
        for partition, number in partitions.items():
            if not (partition.lstrip("-").isdigit() and _is_int(number)):
                raise ValueError(f"Invalid value '{value}' for option '{name}': expected e.g. {JSON_EXAMPLE}")
            result[(topic, int(partition))] = number
    return result


def _json(value: str, name: str, example: str) -> dict:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ValueError(f"Invalid value '{value}' for option '{name}': expected e.g. {example}")
    return parsed


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _timestamp(value: str, name: str) -> int:
    if not value.strip().isdigit():
        raise ValueError(f"Invalid value '{value}' for option '{name}': expected epoch milliseconds")
    return int(value)


def _positive(opts: dict[str, str], name: str) -> int | None:
    value = opts.get(name.lower())
    if value is None:
        return None
    if not value.strip().isdigit() or int(value) <= 0:
        raise ValueError(f"Invalid value '{value}' for option '{name}': must be a positive integer")
    return int(value)


def _boolean(opts: dict[str, str], name: str, default: bool) -> bool:
    value = opts.get(name.lower())
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"Invalid value '{value}' for option '{name}': expected true or false")
    return value.strip().lower() == "true"
