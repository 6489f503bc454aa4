"""The data directory: which partitions exist, and the files that span them (docs/formats.md §1).

Layout (Kafka's names where Kafka has the file)::

    data/
      .lock                               held (flock) by the one process that owns the directory
      meta.properties                     cluster.id, node.id, version
      .kafka_cleanshutdown                present only between a clean shutdown and the next start
      recovery-point-offset-checkpoint    per partition: offsets below are known flushed
      log-start-offset-checkpoint         per partition: the first offset still held
      cleaner-offset-checkpoint           per compacted partition: offsets below are cleaned
      topics.json                         topic registry: partitions, config overrides, topic id
      <topic>-<partition>/                one PartitionLog each (storage/partition_log.py)

Kafka keeps its topic registry in the metadata quorum; a single node keeps it in
``topics.json``, written atomically. ``.kafka_cleanshutdown`` is removed at start, so
a crash leaves no marker and the next start recovers from the recovery points.
"""

from __future__ import annotations

import base64
import fcntl
import json
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from storage import filenames
from storage.checkpoint import CorruptCheckpointError, read_checkpoint, write_checkpoint
from storage.clock import Clock
from storage.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from storage.log_config import LogConfig
from storage.partition_log import PartitionLog
from storage.atomic_file import fsync_dir, write_atomically

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class DataDirectoryLockedError(KafkaStorageError):
    """Another process owns this data directory."""


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    topic_id: str
    overrides: dict[str, Any]
    internal: bool = False


def validate_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    if not isinstance(name, str) or not _LEGAL_TOPIC.match(name) or name in (".", ".."):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: use 1 to 249 of a-z A-Z 0-9 . _ -")


class LogManager:
    """Owns every PartitionLog of one data directory (not thread-safe; one owner)."""

    def __init__(self, data_dir: Path | str, defaults: LogConfig, clock: Clock) -> None:
        self.data_dir = Path(data_dir)
        self.defaults = defaults
        self.clock = clock
        self._lock_fd = self._lock()
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        try:
            self._open()
        except BaseException:
            for log_ in self.logs.values():
                log_.close(clean=False)
            os.close(self._lock_fd)  # a failed open must not keep the directory
            raise

    def _open(self) -> None:
        self.cluster_id, self.node_id = self._meta_properties()
        clean_marker = self.data_dir / filenames.CLEAN_SHUTDOWN_FILE
        self.clean_start = clean_marker.exists()
        self.topics: dict[str, TopicInfo] = self._read_topics()
        recovery_points = self._read_offsets(filenames.RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_offsets(filenames.LOG_START_OFFSET_CHECKPOINT)
        cleaned_to = self._read_offsets(filenames.CLEANER_OFFSET_CHECKPOINT) or {}
        clean = self.clean_start and recovery_points is not None
        for info in self.topics.values():
            for partition in range(info.partitions):
                key = (info.name, partition)
                self.logs[key] = self._open_log(info, partition, (recovery_points or {}).get(key, 0),
                                                (start_offsets or {}).get(key, 0), clean,
                                                cleaned_to.get(key, 0))
        clean_marker.unlink(missing_ok=True)
        fsync_dir(self.data_dir)
        self.checkpoint()

    # -- the directory ------------------------------------------------------------------

    def _lock(self) -> int:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.data_dir / filenames.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise KafkaStorageError(f"cannot use data directory {self.data_dir}: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirectoryLockedError(
                f"data directory {self.data_dir} is in use by another process") from None
        return fd

    def _meta_properties(self) -> tuple[str, int]:
        path = self.data_dir / filenames.META_PROPERTIES
        props: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if "=" in line and not line.startswith("#"):
                    key, _, value = line.partition("=")
                    props[key.strip()] = value.strip()
        if "cluster.id" not in props:
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            props = {"version": "1", "cluster.id": cluster_id, "node.id": "1"}
            write_atomically(path, "".join(f"{k}={v}\n" for k, v in props.items()).encode())
        return props["cluster.id"], int(props.get("node.id", "1"))

    def _read_offsets(self, name: str) -> dict[tuple[str, int], int] | None:
        """A checkpoint's offsets; None if it is corrupt. Losing one costs time, not
        data: with no recovery points every segment is re-validated (as Kafka does)."""
        try:
            return read_checkpoint(self.data_dir / name)
        except CorruptCheckpointError as e:
            log.warning("ignoring corrupt checkpoint: %s", e)
            return None

    def _read_topics(self) -> dict[str, TopicInfo]:
        path = self.data_dir / filenames.TOPICS_FILE
        if not path.exists():
            return {}
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise KafkaStorageError(f"cannot read the topic registry {path}: {e}") from e
        return {name: TopicInfo(name=name, partitions=t["partitions"], topic_id=t["topic_id"],
                                overrides=t.get("config", {}), internal=t.get("internal", False))
                for name, t in raw.items()}

    def _write_topics(self) -> None:
        raw = {t.name: {"partitions": t.partitions, "topic_id": t.topic_id, "config": t.overrides,
                        "internal": t.internal} for t in self.topics.values()}
        write_atomically(self.data_dir / filenames.TOPICS_FILE, json.dumps(raw, indent=2, sort_keys=True).encode())

    def _open_log(self, info: TopicInfo, partition: int, recovery_point: int,
                  log_start_offset: int, clean: bool, cleaner_checkpoint: int = 0) -> PartitionLog:
        return PartitionLog(self.data_dir / filenames.partition_dir_name(info.name, partition),
                            info.name, partition, self.topic_config(info.name), self.clock,
                            recovery_point=recovery_point, log_start_offset=log_start_offset,
                            clean_shutdown=clean, cleaner_checkpoint=cleaner_checkpoint)

    # -- topics ----------------------------------------------------------------------------

    def topic_config(self, topic: str) -> LogConfig:
        return LogConfig.from_kafka(self.topic(topic).overrides, base=self.defaults)

    def topic(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return info

    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None = None,
                     internal: bool = False) -> TopicInfo:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions!r}")
        overrides = {k: str(v) for k, v in (config or {}).items()}
        LogConfig.from_kafka(overrides, base=self.defaults)  # raises INVALID_CONFIG
        info = TopicInfo(name, partitions, str(uuid.uuid4()), overrides, internal)
        self.topics[name] = info
        self._write_topics()
        for partition in range(partitions):
            self.logs[(name, partition)] = self._open_log(info, partition, 0, 0, clean=True)
        return info

    def delete_topic(self, name: str) -> None:
        info = self.topic(name)
        del self.topics[name]
        self._write_topics()
        for partition in range(info.partitions):
            log = self.logs.pop((name, partition))
            log.close(clean=False)
            shutil.rmtree(log.directory, ignore_errors=True)
        self.checkpoint()

    def log(self, topic: str, partition: int) -> PartitionLog:
        log = self.logs.get((topic, partition))
        if log is None:
            if topic in self.topics:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has no partition {partition} "
                    f"(it has {self.topics[topic].partitions})")
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        return log

    def __iter__(self) -> Iterator[PartitionLog]:
        return iter(list(self.logs.values()))

    # -- periodic work ---------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Persist every partition's recovery point and log start offset, and the
        cleaner checkpoint of every compacted one."""
        write_checkpoint(self.data_dir / filenames.RECOVERY_POINT_CHECKPOINT,
                         {key: log.recovery_point for key, log in self.logs.items()})
        write_checkpoint(self.data_dir / filenames.LOG_START_OFFSET_CHECKPOINT,
                         {key: log.log_start_offset for key, log in self.logs.items()})
        self._write_cleaner_checkpoint()

    def _write_cleaner_checkpoint(self) -> None:
        write_checkpoint(self.data_dir / filenames.CLEANER_OFFSET_CHECKPOINT,
                         {key: log.cleaner_state.checkpoint for key, log in self.logs.items()
                          if log.config.compact})

    def compact(self) -> int:
        """One log-cleaner round on every compacted partition (``storage/log_cleaner.py``);
        returns how many segments were rewritten. A partition that cannot be cleaned
        (a damaged batch, an I/O error) is logged and skipped, as Kafka's cleaner
        skips an uncleanable partition; the others are still cleaned."""
        now = self.clock.now_ms()
        rewritten = 0
        moved = False
        for log_ in self:
            if not log_.config.compact:
                continue
            before = log_.cleaner_state.checkpoint
            try:
                rewritten += log_.clean(now).segments_rewritten
            except (KafkaError, OSError):
                log.exception("cleaning %s-%d failed", log_.topic, log_.partition)
            moved = moved or log_.cleaner_state.checkpoint != before
        if moved:
            self._write_cleaner_checkpoint()
        return rewritten

    def apply_retention(self) -> int:
        """Delete segments past retention everywhere; returns how many went."""
        now = self.clock.now_ms()
        deleted = 0
        for log in self:
            doomed = log.deletable_segments(now)
            if doomed:
                log.delete_segments(doomed)
                deleted += len(doomed)
        if deleted:
            self.checkpoint()
        return deleted

    def close(self, clean: bool = True) -> None:
        """Close every log; after a clean close the next start skips recovery."""
        for log in self:
            log.close(clean=clean)
        if clean:
            self.checkpoint()
            marker = self.data_dir / filenames.CLEAN_SHUTDOWN_FILE
            marker.touch()
            fsync_dir(self.data_dir)
        os.close(self._lock_fd)
