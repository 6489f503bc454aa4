"""Per-topic log configuration, with Kafka's config names and defaults.

A topic's config is the broker defaults overridden by what ``create_topic`` was
given. Values are validated here so that a bad config is an INVALID_CONFIG error
and never a broken log. Durability (our reading of Kafka's flush settings):

* ``acks=all`` (-1) appends are acknowledged only once fsynced, whatever the flush
  settings say; concurrent appends share one fsync (group commit).
* ``acks=0/1`` appends are acknowledged once written; they are fsynced when
  ``flush.messages`` unflushed records have accumulated or the oldest unflushed
  one is ``flush.ms`` old. Our default ``flush.ms`` is 0 -- flush at once (still
  group-committed) -- because the high watermark is the fsynced end of the log:
  consumers never see a record that a crash could take away.

``compression.type`` other than ``producer`` makes the log store every producer
batch in that codec, recompressing the ones that arrive in another (as Kafka does).
Kafka's other topic configs are accepted and validated too, so a topic made for a
Kafka cluster can be made here, but some do nothing on this broker (:data:`NO_EFFECT`
says why for each).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from exactly.storage.compression import Compression
from exactly.storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
#: Kafka's topic-level compression.type values and the codec each stores batches in
#: (``producer``: keep the producer's)
COMPRESSION_TYPES: dict[str, Compression | None] = {
    "uncompressed": Compression.NONE, "zstd": Compression.ZSTD, "lz4": Compression.LZ4,
    "snappy": Compression.SNAPPY, "gzip": Compression.GZIP, "producer": None}
#: topic configs accepted (Kafka's names and defaults, validated) that do nothing on
#: this broker, and why
NO_EFFECT = {
    "min.insync.replicas": "one node: every write is on the only replica",
    "unclean.leader.election.enable": "one node: there is no other leader",
    "leader.replication.throttled.replicas": "one node: no replication",
    "follower.replication.throttled.replicas": "one node: no replication",
    "min.cleanable.dirty.ratio": "the cleaner compacts every round it finds something to clean",
    "max.compaction.lag.ms": "the cleaner compacts every round it finds something to clean",
    "segment.jitter.ms": "segments roll at segment.ms exactly",
    "preallocate": "segment files grow as they are written",
    "message.downconversion.enable": "clients fetch record batches v2 only",
}


@dataclass(frozen=True)
class LogConfig:
    """The settings a partition log obeys. Attribute names are Kafka's keys with
    dots as underscores; use :meth:`from_kafka` / :meth:`to_kafka` for the dotted form."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    flush_messages: int = LONG_MAX
    flush_ms: int = 0
    cleanup_policy: str = "delete"
    message_timestamp_type: str = "CreateTime"
    file_delete_delay_ms: int = 60000
    min_compaction_lag_ms: int = 0
    delete_retention_ms: int = 24 * 3600 * 1000
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    max_compaction_lag_ms: int = LONG_MAX
    segment_jitter_ms: int = 0
    preallocate: bool = False
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_downconversion_enable: bool = True
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""

    @classmethod
    def from_kafka(cls, values: Mapping[str, Any], base: "LogConfig | None" = None) -> "LogConfig":
        """Overlay Kafka-named settings (``{"segment.bytes": "1048576"}``) on ``base``."""
        known = {f.name: f for f in fields(cls)}
        changes: dict[str, Any] = {}
        for key, raw in values.items():
            attr = key.replace(".", "_")
            if attr not in known:
                raise InvalidConfigError(f"Unknown topic config name: {key}")  # Kafka's words
            changes[attr] = coerce(key, raw, known[attr].type)
        config = replace(base or cls(), **changes)
        config.validate()
        return config

    @property
    def timestamp_bounds_ms(self) -> tuple[int, int]:
        """How far before and after the broker's clock a CreateTime record's timestamp
        may be: ``message.timestamp.before.max.ms`` / ``after.max.ms``, each falling back
        to the deprecated ``message.timestamp.difference.max.ms`` while unset (Kafka 3.6+)."""
        def bound(value: int) -> int:
            return value if value != LONG_MAX else self.message_timestamp_difference_max_ms
        return bound(self.message_timestamp_before_max_ms), bound(self.message_timestamp_after_max_ms)

    def to_kafka(self) -> dict[str, Any]:
        return {f.name.replace("_", "."): getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def kafka_text(value: Any) -> str:
        """A config value as Kafka shows it (DescribeConfigs, REST): ``true``, ``0.5``, ``delete``."""
        return str(value).lower() if isinstance(value, bool) else str(value)

    def validate(self) -> None:
        _at_least("segment.bytes", self.segment_bytes, 14)
        _at_least("segment.ms", self.segment_ms, 1)
        _at_least("segment.index.bytes", self.segment_index_bytes, 8)
        _at_least("index.interval.bytes", self.index_interval_bytes, 0)
        _at_least("retention.ms", self.retention_ms, -1)
        _at_least("retention.bytes", self.retention_bytes, -1)
        _at_least("max.message.bytes", self.max_message_bytes, 0)
        _at_least("flush.messages", self.flush_messages, 1)
        _at_least("flush.ms", self.flush_ms, 0)
        _at_least("file.delete.delay.ms", self.file_delete_delay_ms, 0)
        _at_least("min.compaction.lag.ms", self.min_compaction_lag_ms, 0)
        _at_least("delete.retention.ms", self.delete_retention_ms, 0)
        _at_least("max.compaction.lag.ms", self.max_compaction_lag_ms, 1)
        _at_least("segment.jitter.ms", self.segment_jitter_ms, 0)
        _at_least("message.timestamp.difference.max.ms", self.message_timestamp_difference_max_ms, 0)
        _at_least("message.timestamp.before.max.ms", self.message_timestamp_before_max_ms, 0)
        _at_least("message.timestamp.after.max.ms", self.message_timestamp_after_max_ms, 0)
        if self.compression_type not in COMPRESSION_TYPES:
            raise InvalidConfigError(f"compression.type must be one of {', '.join(COMPRESSION_TYPES)}, "
                                     f"got {self.compression_type!r}")
        if self.min_insync_replicas != 1:
            raise InvalidConfigError(f"this broker is one node: min.insync.replicas must be 1, "
                                     f"got {self.min_insync_replicas}")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise InvalidConfigError(
                f"min.cleanable.dirty.ratio must be in [0, 1], got {self.min_cleanable_dirty_ratio}")
        policies = set(self.cleanup_policy.split(","))
        if not policies or not policies <= {"delete", "compact"}:
            raise InvalidConfigError(f"cleanup.policy must be delete and/or compact, got {self.cleanup_policy!r}")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise InvalidConfigError("message.timestamp.type must be CreateTime or LogAppendTime")

    @property
    def compression(self) -> Compression | None:
        """The codec every stored batch is in; None: the producer's."""
        return COMPRESSION_TYPES[self.compression_type]

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Whether old records may be deleted (retention, DeleteRecords)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


def coerce(key: str, raw: Any, kind: Any) -> Any:
    """A config value of the field type ``kind`` (as a dataclass declares it) from what a
    user gave: Kafka's text forms ("true", "60000") or the value itself. One rule for the
    topic configs and the broker's (``exactly/app/config.py``); a wrong kind is
    INVALID_CONFIG naming ``key``. A path is a string."""
    if kind in (bool, "bool"):
        if isinstance(raw, bool) or str(raw).lower() in ("true", "false"):
            return raw if isinstance(raw, bool) else str(raw).lower() == "true"
        raise InvalidConfigError(f"{key} must be true or false, got {raw!r}")
    if kind in (float, "float"):
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{key} must be a number, got {raw!r}") from None
        if isinstance(raw, bool) or value != value:  # NaN
            raise InvalidConfigError(f"{key} must be a number, got {raw!r}")
        return value
    if kind in (int, "int"):
        if isinstance(raw, bool):
            raise InvalidConfigError(f"{key} must be an integer, got {raw!r}")
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{key} must be an integer, got {raw!r}") from None
    if isinstance(raw, os.PathLike):
        return os.fspath(raw)
    if not isinstance(raw, str):
        raise InvalidConfigError(f"{key} must be a string, got {raw!r}")
    return raw


def _at_least(key: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise InvalidConfigError(f"{key} must be >= {minimum}, got {value}")
