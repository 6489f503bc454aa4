"""The data directory: which partitions exist, and the files that span them (docs/formats.md §1).

Layout (Kafka's names where Kafka has the file)::

    data/
      .lock                               held (flock) by the one process that owns the directory; holds its pid
      meta.properties                     cluster.id, node.id, version
      .kafka_cleanshutdown                present only between a clean shutdown and the next start
      recovery-point-offset-checkpoint    per partition: offsets below are known flushed
      log-start-offset-checkpoint         per partition: the first offset still held
      cleaner-offset-checkpoint           per compacted partition: offsets below are cleaned
      topics.json                         topic registry: partitions, config overrides, topic id
      <topic>-<partition>/                one PartitionLog each (exactly/storage/partition_log.py),
        partition.metadata                with its topic's id (exactly/storage/partition_metadata.py)

Kafka keeps its topic registry in the metadata quorum; a single node keeps it in
``topics.json``, written atomically. ``.kafka_cleanshutdown`` is removed at start, so
a crash leaves no marker and the next start recovers from the recovery points.

Opening and closing run on the caller's thread. After that, whatever writes files
comes as steps of jobs (``exactly/storage/background.py``) for the owner to run off its
thread: :meth:`LogManager.checkpoint`, :meth:`LogManager.create_topic` and
:meth:`LogManager.delete_topic` change the in-memory registry on the owner's thread
and yield the jobs that make the change durable.
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from exactly.storage import filenames, partition_metadata, topic_id
from exactly.storage.atomic_file import fsync_dir, write_atomically
from exactly.storage.background import RunSteps, Steps, run_inline
from exactly.storage.checkpoint import CorruptCheckpointError, read_checkpoint, write_checkpoint
from exactly.storage.clock import Clock
from exactly.storage.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    storage_error,
)
from exactly.storage.log_config import LogConfig
from exactly.storage.partition_log import PartitionLog

log = logging.getLogger(__name__)

#: Kafka's longest topic name (``Topic.MAX_NAME_LENGTH``)
MAX_TOPIC_NAME_LENGTH = 249
#: Kafka's legal topic names (``Topic.LEGAL_CHARS``, 1 to MAX_TOPIC_NAME_LENGTH of them)
LEGAL_TOPIC_NAME = f"^[a-zA-Z0-9._-]{{1,{MAX_TOPIC_NAME_LENGTH}}}$"
_LEGAL_TOPIC = re.compile(LEGAL_TOPIC_NAME)


class DataDirectoryLockedError(KafkaStorageError):
    """Another process owns this data directory."""


def _record_holder(fd: int) -> None:
    """Write this process's pid into the lock file, so a process refused the lock can
    say who holds it. Advisory: the flock is the lock, and a full disk must not stop a
    start (the pid is then missing, not wrong: the file is truncated first)."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as e:
        log.warning("could not record the pid in %s: %s", filenames.LOCK_FILE, e.strerror)


def _release(fd: int) -> None:
    """Empty the lock file (its pid is no longer the holder) and drop the lock."""
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass  # the pid stays; only a holder's pid is ever read
    os.close(fd)


def _lock_holder(fd: int) -> str:
    """`` (pid 123: python run.py --data-dir data)``: the holder the lock file names,
    with its command line when ``/proc`` shows it; empty when the file names none."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    if not text.isdigit():
        return ""
    try:
        argv = Path(f"/proc/{text}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return f" (pid {text})"
    return f" (pid {text}: {' '.join(a.decode(errors='replace') for a in argv)})"


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    #: KIP-516's id (``exactly/storage/topic_id.py``): a topic created again gets a new one
    topic_id: uuid.UUID
    overrides: dict[str, Any]
    internal: bool = False


Offsets = dict[tuple[str, int], int]


@dataclass(frozen=True)
class CheckpointWrite:
    """Every partition's recovery point and log start offset, and the cleaner
    checkpoint of every compacted one, as captured on the owner's thread; ``run``
    writes the three checkpoint files (any thread)."""

    data_dir: Path
    recovery_points: Offsets
    log_start_offsets: Offsets
    cleaner_offsets: Offsets

    def run(self) -> None:
        write_checkpoint(self.data_dir / filenames.RECOVERY_POINT_CHECKPOINT, self.recovery_points)
        write_checkpoint(self.data_dir / filenames.LOG_START_OFFSET_CHECKPOINT, self.log_start_offsets)
        write_checkpoint(self.data_dir / filenames.CLEANER_OFFSET_CHECKPOINT, self.cleaner_offsets)


@dataclass(frozen=True)
class TopicsWrite:
    """Replace ``topics.json`` (any thread)."""

    path: Path
    data: bytes

    def run(self) -> None:
        write_atomically(self.path, self.data)


@dataclass(frozen=True)
class TopicCreation:
    """Make a new topic's partition directories -- or, from ``first_partition``, the
    ones a topic grows by (CreatePartitions) -- and sync them, then register it in
    ``topics.json`` (the commit point: a crash before it leaves only empty
    directories the registry does not name). A directory already there is what a
    crash left of a deleted topic of the same name (or of a grow that did not
    commit), and goes first, so its data never comes back. ``run`` (any thread)
    returns the opened logs, for the owner to install.

    All or nothing: a failure part-way (no inode or space left, no file descriptor)
    closes the logs opened so far and removes every directory this creation made,
    leaving ``topics.json`` as it was; an OSError is raised as KAFKA_STORAGE_ERROR."""

    data_dir: Path
    info: TopicInfo
    config: LogConfig
    clock: Clock
    topics: TopicsWrite
    first_partition: int = 0

    def run(self) -> list[PartitionLog]:
        logs: list[PartitionLog] = []
        directories = [self.data_dir / filenames.partition_dir_name(self.info.name, partition)
                       for partition in range(self.first_partition, self.info.partitions)]
        try:
            for partition, directory in enumerate(directories, start=self.first_partition):
                shutil.rmtree(directory, ignore_errors=True)
                logs.append(PartitionLog(directory, self.info.name, partition, self.config, self.clock,
                                         clean_shutdown=True))
                partition_metadata.write(directory, self.info.topic_id)
            fsync_dir(self.data_dir)
            self.topics.run()
        except OSError as e:
            self._undo(logs, directories)
            raise KafkaStorageError(f"cannot create partitions {self.first_partition}..{self.info.partitions - 1} "
                                    f"of topic {self.info.name!r}: {e.strerror or e}; nothing was created") from e
        except BaseException:
            self._undo(logs, directories)
            raise
        return logs

    def _undo(self, logs: list[PartitionLog], directories: list[Path]) -> None:
        """Close ``logs`` and remove ``directories``: the data directory as it was."""
        for log_ in logs:
            log_.close(clean=False)
        DirectoriesRemoval(tuple(directories)).run()
        try:
            fsync_dir(self.data_dir)
        except OSError:
            log.warning("cannot sync %s after undoing the creation of topic %r", self.data_dir, self.info.name)


@dataclass(frozen=True)
class DirectoriesRemoval:
    """Remove the directories of a deleted topic's partitions (any thread)."""

    directories: tuple[Path, ...]

    def run(self) -> None:
        for directory in self.directories:
            shutil.rmtree(directory, ignore_errors=True)


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
        self._background: RunSteps = run_inline
        try:
            self._open()
        except BaseException as e:
            for log_ in self.logs.values():
                log_.close(clean=False)
            _release(self._lock_fd)  # a failed open must not keep the directory
            if isinstance(e, OSError):  # a full disk, say: KAFKA_STORAGE_ERROR, one clear line
                raise storage_error(e, f"cannot open data directory {self.data_dir}") from e
            raise

    def _open(self) -> None:
        self.cluster_id, self.node_id = self._meta_properties()
        clean_marker = self.data_dir / filenames.CLEAN_SHUTDOWN_FILE
        self.clean_start = clean_marker.exists()
        self.topics: dict[str, TopicInfo] = self._read_topics()
        #: every topic's name by its id (KIP-516 requests name topics by id)
        self.names_by_id: dict[uuid.UUID, str] = {info.topic_id: name for name, info in self.topics.items()}
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
        run_inline(self.checkpoint())

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
            holder = _lock_holder(fd)
            os.close(fd)
            raise DataDirectoryLockedError(
                f"data directory {self.data_dir} is in use by another process{holder}: stop that process, "
                "or open another data directory (a running broker is reached through its listeners, "
                "not its files)") from None
        _record_holder(fd)
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
        try:
            return {name: TopicInfo(name=name, partitions=t["partitions"], topic_id=topic_id.parse(t["topic_id"]),
                                    overrides=t.get("config", {}), internal=t.get("internal", False))
                    for name, t in raw.items()}
        except (KeyError, TypeError, ValueError) as e:
            raise KafkaStorageError(f"cannot read the topic registry {path}: {e!r}") from e

    def _topics_write(self, topics: Iterable[TopicInfo]) -> TopicsWrite:
        raw = {t.name: {"partitions": t.partitions, "topic_id": topic_id.to_string(t.topic_id), "config": t.overrides,
                        "internal": t.internal} for t in topics}
        return TopicsWrite(self.data_dir / filenames.TOPICS_FILE, json.dumps(raw, indent=2, sort_keys=True).encode())

    def _open_log(self, info: TopicInfo, partition: int, recovery_point: int,
                  log_start_offset: int, clean: bool, cleaner_checkpoint: int = 0) -> PartitionLog:
        """Open one partition (at start, before the event loop runs); its
        ``partition.metadata`` is written if a directory from before topic ids lacks it,
        and one naming another topic id refuses the start (InconsistentTopicIdError)."""
        directory = self.data_dir / filenames.partition_dir_name(info.name, partition)
        log_ = PartitionLog(directory, info.name, partition, self.topic_config(info.name), self.clock,
                            recovery_point=recovery_point, log_start_offset=log_start_offset,
                            clean_shutdown=clean, cleaner_checkpoint=cleaner_checkpoint)
        try:
            partition_metadata.ensure(directory, info.topic_id)
        except BaseException:
            log_.close(clean=False)
            raise
        return log_

    @property
    def background(self) -> RunSteps:
        """How every log has the snapshot of a roll written (``PartitionLog.background``)."""
        return self._background

    @background.setter
    def background(self, run: RunSteps) -> None:
        self._background = run
        for log_ in self.logs.values():
            log_.background = run

    # -- topics ----------------------------------------------------------------------------

    def topic_config(self, topic: str) -> LogConfig:
        return LogConfig.from_kafka(self.topic(topic).overrides, base=self.defaults)

    def topic(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return info

    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any] | None = None,
                     internal: bool = False) -> Steps[TopicInfo]:
        """Create a topic: validated at once (raising the Kafka error), registered
        once the yielded :class:`TopicCreation` has made it durable. The owner runs
        one topic change at a time."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, got {partitions!r}")
        overrides = {k: str(v) for k, v in (config or {}).items()}
        log_config = LogConfig.from_kafka(overrides, base=self.defaults)  # raises INVALID_CONFIG
        info = TopicInfo(name, partitions, topic_id.new_topic_id(), overrides, internal)
        return self._create_steps(info, log_config)

    def _create_steps(self, info: TopicInfo, config: LogConfig, first_partition: int = 0) -> Steps[TopicInfo]:
        others = [t for t in self.topics.values() if t.name != info.name]
        logs = yield TopicCreation(self.data_dir, info, config, self.clock, self._topics_write([*others, info]),
                                   first_partition)
        self.topics[info.name] = info
        self.names_by_id[info.topic_id] = info.name
        for partition, log_ in enumerate(logs, start=first_partition):
            log_.background = self._background
            self.logs[(info.name, partition)] = log_
        return info

    def add_partitions(self, name: str, count: int) -> Steps[TopicInfo]:
        """CreatePartitions: grow topic ``name`` to ``count`` partitions, validated at
        once (INVALID_PARTITIONS unless it grows), then made durable as a creation of
        the new partitions is. The owner runs one topic change at a time."""
        info = self.topic(name)
        if not isinstance(count, int) or isinstance(count, bool) or count <= info.partitions:
            raise InvalidPartitionsError(f"topic {name!r} has {info.partitions} partitions; "
                                         f"the count can only grow, got {count!r}")
        return self._create_steps(replace(info, partitions=count), self.topic_config(name), info.partitions)

    def alter_topic_config(self, name: str, changes: Mapping[str, Any | None]) -> Steps[TopicInfo]:
        """Set (a value) or reset to the default (None) some of a topic's config
        overrides: validated at once (INVALID_CONFIG changes nothing), then
        ``topics.json`` is rewritten (the commit point) and every partition log obeys
        the new config. The owner runs one topic change at a time."""
        info = self.topic(name)
        # as on Kafka: setting a name it does not know (Kafka 4 removed message.format.version)
        # is INVALID_CONFIG, deleting one is nothing to do
        unknown = sorted(k for k, v in changes.items() if v is not None and k not in self.defaults.to_kafka())
        if unknown:
            raise InvalidConfigError(f"Unknown topic config name: {unknown[0]}")
        overrides = self.altered_overrides(info, changes)
        config = LogConfig.from_kafka(overrides, base=self.defaults)  # raises INVALID_CONFIG
        return self._alter_steps(replace(info, overrides=overrides), config)

    @staticmethod
    def altered_overrides(info: TopicInfo, changes: Mapping[str, Any | None]) -> dict[str, str]:
        """``info``'s overrides with ``changes`` applied (None: back to the default)."""
        overrides = {k: v for k, v in info.overrides.items() if k not in changes}
        overrides.update({k: str(v) for k, v in changes.items() if v is not None})
        return overrides

    def _alter_steps(self, altered: TopicInfo, config: LogConfig) -> Steps[TopicInfo]:
        yield self._topics_write([altered if t.name == altered.name else t for t in self.topics.values()])
        self.topics[altered.name] = altered
        for partition in range(altered.partitions):
            self.logs[(altered.name, partition)].config = config
        return altered

    def detach_topic(self, name: str) -> list[PartitionLog]:
        """Take topic ``name`` out of the registry in memory, so no request finds it
        again; returns its logs for the owner to quiesce and pass to :meth:`delete_topic`."""
        info = self.topic(name)
        del self.topics[name]
        del self.names_by_id[info.topic_id]
        return [self.logs.pop((name, partition)) for partition in range(info.partitions)]

    def delete_topic(self, logs: list[PartitionLog]) -> Steps[None]:
        """Delete a detached topic: close its ``logs`` now, then, as jobs, write
        ``topics.json`` without it (the commit point), remove its directories and
        rewrite the checkpoints."""
        for log_ in logs:
            log_.close(clean=False)
        yield self._topics_write(self.topics.values())
        yield DirectoriesRemoval(tuple(log_.directory for log_ in logs))
        yield from self.checkpoint()

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

    def checkpoint(self) -> Steps[None]:
        """Persist every partition's recovery point and log start offset, and the
        cleaner checkpoint of every compacted one: captured now, written by the
        yielded job."""
        return self._checkpoint_steps(CheckpointWrite(
            self.data_dir,
            {key: log.recovery_point for key, log in self.logs.items()},
            {key: log.log_start_offset for key, log in self.logs.items()},
            {key: log.cleaner_state.checkpoint for key, log in self.logs.items() if log.config.compact}))

    @staticmethod
    def _checkpoint_steps(write: CheckpointWrite) -> Steps[None]:
        yield write

    def close(self, clean: bool = True) -> bool:
        """Close every log and release the directory -- the lock always, whatever fails
        on the way (a full disk, a failed fsync). Only when every log closed cleanly and
        the checkpoints are written does the clean-shutdown marker let the next start
        skip recovery; otherwise it recovers each log from its recovery point. Returns
        whether the close was clean."""
        requested = clean
        try:
            logs_clean = all([log_.close(clean=clean) for log_ in self])
            if clean:
                run_inline(self.checkpoint())
                if logs_clean:
                    (self.data_dir / filenames.CLEAN_SHUTDOWN_FILE).touch()
                    fsync_dir(self.data_dir)
            clean = clean and logs_clean
        except OSError as e:
            log.error("closing %s: %s", self.data_dir, e)
            clean = False
        finally:
            _release(self._lock_fd)
        if requested and not clean:
            log.warning("closed %s uncleanly: the next start recovers its logs from their recovery points",
                        self.data_dir)
        return clean
