"""Partitions: the reads and writes of the partition logs (Kafka's ``ReplicaManager``) --
produce, fetch, list offsets, delete records, the log directory, and the markers the
transaction coordinator writes -- with group commit (one fsync for many appends, off the
loop), the disk watch and the waiters of long-polling fetches.

Every face's produce comes through :meth:`Partitions.start_produce`, so the transaction
coordinator's checks (KIP-890's verification, idempotent producer ids) and the producer-id
ownership of the authorizer hold whoever asks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping

from exactly.app.engine.access import Access
from exactly.app.engine.counters import EngineCounters
from exactly.app.engine.disk_space import DiskSpace, VolumeUsage
from exactly.app.engine.group_commit import GroupCommit
from exactly.app.engine.jobs import Jobs, one_job
from exactly.app.engine.loop_bridge import done
from exactly.app.engine.maintenance import Maintenance
from exactly.app.engine.views import PartitionOffsets
from exactly.app.engine.worker import Worker
from exactly.app.security.principal import KafkaPrincipal
from exactly.coordinator import features, offsets_log
from exactly.coordinator.group_coordinator import GroupCoordinator
from exactly.coordinator.internal_topics import INTERNAL_TOPICS
from exactly.coordinator.transaction_coordinator import TransactionCoordinator
from exactly.coordinator.transaction_state import AbortCause
from exactly.storage.errors import (
    InvalidProducerEpochError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaError,
    LogDirFullError,
    LogOfflineError,
)
from exactly.storage.isolation_level import IsolationLevel
from exactly.storage.log_manager import LogManager
from exactly.storage.partition_log import AppendResult, PartitionLog, ReadResult
from exactly.storage.producer_state import ProducerStateEntry, next_sequence
from exactly.storage.record_batch import MAX_PRODUCER_EPOCH, BatchHeader, read_header

log = logging.getLogger(__name__)

READ_UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED.label
READ_COMMITTED = IsolationLevel.READ_COMMITTED.label
#: ListOffsets' special timestamps (Kafka's ``ListOffsetsRequest``): the end, the log start,
#: the record with the largest timestamp (KIP-734), the local log start (KIP-405), the
#: last tiered offset (KIP-1005) and the earliest offset pending upload (KIP-1023)
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


@dataclass(frozen=True, slots=True)
class HangingAbort:
    """What :meth:`Partitions.abort_hanging_transaction` did."""

    #: the transactional id whose transaction the coordinator aborted; None: an
    #: ABORT marker was written on the partition alone
    transactional_id: str | None
    #: the producer's epoch now; older ones are fenced
    producer_epoch: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class LogDeleteRecordsResult:
    """What :meth:`Partitions.delete_records` did on one partition: its log start offset
    now (Kafka's low watermark), or the error that refused the move."""

    low_watermark: int = -1
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A partition as DescribeLogDirs shows it: how many bytes its segments hold
    (its offset lag is 0 and it is no future replica: one node, one directory)."""

    topic: str
    partition: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    """The one log directory (DescribeLogDirs): its path, its volume, its partitions."""

    path: str
    #: the volume's size and what this process may still write there (-1: unknown)
    total_bytes: int
    usable_bytes: int
    partitions: tuple[ReplicaInfo, ...]


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int


def isolation_is_committed(isolation_level: str | int) -> bool:
    """Accept Kafka's wire values (0, 1) and names."""
    return IsolationLevel.parse(isolation_level) is IsolationLevel.READ_COMMITTED


class Partitions:
    """The partition logs' reads and writes, on the engine's loop."""

    def __init__(self, logs: LogManager, loop: asyncio.AbstractEventLoop, fsync: Worker, counters: EngineCounters,
                 disk: DiskSpace, maintenance: Maintenance, jobs: Jobs, access: Access,
                 transaction_coordinator: TransactionCoordinator, group_coordinator: GroupCoordinator) -> None:
        self._logs = logs
        self._loop = loop
        self._fsync = fsync
        self._counters = counters
        self._disk = disk
        self._maintenance = maintenance
        self._jobs = jobs
        self._access = access
        self._transactions = transaction_coordinator
        self._groups = group_coordinator
        self._commits: dict[tuple[str, int], GroupCommit] = {}
        #: (topic, partition, producer id) -> resolved once the producer's last batch there
        #: that adds its partition implicitly (or waits behind one that does) is appended
        self._implicit_adds: dict[tuple[str, int, int], asyncio.Future[None]] = {}
        #: partition (None: any partition) -> futures waiting for its high watermark to move
        self._data_waiters: dict[tuple[str, int] | None, list[asyncio.Future[None]]] = {}

    # -- the engine's own access to the logs (read models, the audit, the mirror's source) ----

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log; UNKNOWN_TOPIC_OR_PARTITION if it does not exist. For the
        engine's own modules on the loop: the faces get frozen values instead."""
        return self._logs.log(topic, partition)

    def get(self, topic_partition: tuple[str, int]) -> PartitionLog | None:
        """The partition's log, or None if it does not exist (the engine's own modules)."""
        return self._logs.logs.get(topic_partition)

    @property
    def clean_start(self) -> bool:
        """The logs opened after a clean shutdown (no partition recovered)."""
        return self._logs.clean_start

    def logs(self) -> Iterator[tuple[tuple[str, int], PartitionLog]]:
        """Every partition's log, by topic and partition (the engine's own modules)."""
        return iter(sorted(self._logs.logs.items()))

    # -- group commit ----------------------------------------------------------------------------

    def _commit(self, log_: PartitionLog) -> GroupCommit:
        key = (log_.topic, log_.partition)
        commit = self._commits.get(key)
        if commit is None:
            commit = self._commits[key] = GroupCommit(log_, self._loop, self._fsync, self._counters.fsync_latency,
                                                      lambda: self._on_durable(key))
        return commit

    async def forget(self, logs: Iterable[PartitionLog]) -> None:
        """Partitions going away (a deleted topic): their in-flight fsyncs finish first."""
        for log_ in logs:
            commit = self._commits.pop((log_.topic, log_.partition), None)
            if commit is not None:
                await commit.drain()
                commit.close()

    async def drain(self) -> None:
        """Finish every in-flight fsync and stop group commit (a clean close)."""
        for commit in self._commits.values():
            await commit.drain()
            commit.close()

    def stop_commits(self) -> None:
        """Stop group commit at once, fsyncing nothing more (a kill)."""
        for commit in self._commits.values():
            commit.close()

    # -- produce ---------------------------------------------------------------------------------

    def start_produce(self, topic: str, partition: int, batch: bytes, acks: int = -1,
                      transactional_id: str | None = None, principal: KafkaPrincipal | None = None,
                      add_to_transaction: bool = False) -> Future[AppendResult]:
        """Append one producer batch (on the loop); the future resolves to its
        AppendResult -- with acks=-1 once it is fsynced. A transactional batch must
        belong to its producer's Ongoing transaction on this partition (KIP-890,
        ``TransactionCoordinator.verify_transaction``); ``transactional_id``, which a
        Kafka Produce request carries, must then be that producer id's. An idempotent
        batch must carry a producer id this broker handed out, and not a transactional
        id's (``verify_idempotent``): every face -- Kafka's Produce, the HTTP records
        endpoint, the embedded API -- comes through here. With the authorizer on, the
        batch's producer id must be ``principal``'s (``Access.check_producer_owner``).

        ``add_to_transaction`` (Produce v12+ under ``transaction.version`` 2, KIP-890
        part 2): a transactional batch whose partition is not in its producer's
        transaction yet adds it first (``TransactionCoordinator.add_partition_implicitly``),
        and the producer's batches behind it to that partition wait, so they are
        appended in the order they came."""
        started = time.perf_counter()
        self._counters.produce_requests += 1
        if acks not in (-1, 0, 1):
            raise InvalidRequiredAcksError(f"acks must be -1, 0 or 1, got {acks!r}")
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"clients may not produce to the internal topic {topic}")
        log_ = self._logs.log(topic, partition)
        header = read_header(batch)
        if add_to_transaction and header.is_transactional and not header.is_control:
            key = (topic, partition, header.producer_id)
            if key in self._implicit_adds or self._transactions.needs_partition(
                    header.producer_id, header.producer_epoch, topic, partition, transactional_id):
                return self._produce_after_add(key, log_, header, batch, acks, transactional_id, principal, started)
        return self._append_produce(log_, header, batch, acks, transactional_id, principal, started)

    def _produce_after_add(self, key: tuple[str, int, int], log_: PartitionLog, header: BatchHeader, batch: bytes,
                           acks: int, transactional_id: str | None, principal: KafkaPrincipal | None,
                           started: float) -> Future[AppendResult]:
        """:meth:`start_produce` of a batch that adds its partition to the transaction
        (or waits behind one that does)."""
        previous = self._implicit_adds.get(key)
        appended = self._implicit_adds[key] = self._loop.create_future()

        async def add_then_append() -> AppendResult:
            try:
                if previous is not None:
                    await asyncio.wait([previous])
                with self._access.admitted(principal, self._transactions.transactional_id_of(header.producer_id)
                                           or transactional_id or ""):
                    await self._transactions.add_partition_implicitly(
                        header.producer_id, header.producer_epoch, log_.topic, log_.partition, transactional_id)
                durable = self._append_produce(log_, header, batch, acks, transactional_id, principal, started)
            finally:
                appended.set_result(None)
                if self._implicit_adds.get(key) is appended:
                    del self._implicit_adds[key]
            return await asyncio.wrap_future(durable)

        return asyncio.run_coroutine_threadsafe(add_then_append(), self._loop)

    def _append_produce(self, log_: PartitionLog, header: BatchHeader, batch: bytes, acks: int,
                        transactional_id: str | None, principal: KafkaPrincipal | None,
                        started: float) -> Future[AppendResult]:
        """The rest of :meth:`start_produce`: checks and the append, in one loop step."""
        topic, partition = log_.topic, log_.partition
        self._verify_producer(header, topic, partition, transactional_id)
        if principal is not None and header.producer_id >= 0:
            self._access.check_producer_owner(header.producer_id, principal, header.is_transactional)
        commit = self._commit(log_)
        try:
            result = self._append(log_, len(batch), log_.append_data, batch)
        except InvalidProducerEpochError as e:  # the partition has seen a newer epoch: a zombie
            self._counters.producer_fenced(e.name)
            raise
        if not result.duplicate:
            self._counters.produced_records += header.record_count
        latency = self._counters.produce_latency
        if acks == -1:
            durable = commit.when_durable(result.last_offset, result)
            # the callback runs on the loop, which makes the append durable (or now, if it is)
            durable.add_done_callback(lambda _: latency.observe(time.perf_counter() - started))
            return durable
        if not result.duplicate:
            commit.appended()
        latency.observe(time.perf_counter() - started)
        return done(result)

    async def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1,
                      transactional_id: str | None = None) -> AppendResult:
        """:meth:`start_produce`, awaited."""
        return await asyncio.wrap_future(self.start_produce(topic, partition, batch, acks, transactional_id))

    def _append(self, log_: PartitionLog, size: int, append: Callable[..., AppendResult],
                *args: Any) -> AppendResult:
        """``append(*args)`` -- a batch of ``size`` bytes, or a marker (0: tiny) on ``log_`` -- with
        the disk watched: a write refused for lack of space is reported to the disk
        watch (which says so once), a log that goes offline says so once, and a write
        that succeeds may end the full-disk state."""
        was_offline = log_.offline is not None
        try:
            result = append(*args)
        except LogDirFullError as e:
            self._disk.refused(e, size)
            raise
        except LogOfflineError as e:
            if not was_offline:
                log.error("%s-%d is offline: %s; its writes are refused with KAFKA_STORAGE_ERROR (56) "
                          "until the broker restarts and reloads it from disk", log_.topic, log_.partition, e)
            raise
        self._disk.wrote()
        return result

    def _verify_producer(self, header: BatchHeader, topic: str, partition: int,
                         transactional_id: str | None) -> None:
        """The transaction coordinator's checks of a producer batch. A control batch
        is not one: the log refuses it (INVALID_RECORD), clients never write markers."""
        if header.is_control:
            return
        if header.is_transactional:
            self._transactions.verify_transaction(header.producer_id, header.producer_epoch, topic, partition,
                                                  transactional_id)
        elif header.producer_id >= 0:
            self._transactions.verify_idempotent(header.producer_id)

    def next_sequence(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> int:
        """The base sequence a well-behaved producer sends next on this partition (0 for
        a producer or epoch the partition does not know). Only meaningful on the loop, in
        the same callback as the append that uses it: nothing else may append between."""
        entry = self._logs.log(topic, partition).producer_state.producers.get(producer_id)
        if entry is None or entry.producer_epoch != producer_epoch:
            return 0
        return next_sequence(entry.last_seq)

    # -- the coordinators' writes ------------------------------------------------------------------

    async def append_internal(self, topic: str, partition: int, batch: bytes) -> AppendResult:
        """Append a coordinator's batch to an internal topic and wait until durable."""
        log_ = self._logs.log(topic, partition)
        result = self._append(log_, len(batch), log_.append_data, batch)
        return await asyncio.wrap_future(self._commit(log_).when_durable(result.last_offset, result))

    async def write_txn_marker(self, topic: str, partition: int, producer_id: int,
                               producer_epoch: int, coordinator_epoch: int, commit: bool) -> AppendResult:
        """Append a COMMIT/ABORT marker (WriteTxnMarkers) and wait until it is durable.
        Internal: markers come from the transaction coordinator (``coordinator_io``)
        and the partition-level abort, never from a client. One on a
        ``__consumer_offsets`` partition is then reported to the group coordinator, so
        the producer's pending transactional offsets become committed (or are dropped)
        exactly when the marker is in the log."""
        log_ = self._logs.log(topic, partition)
        result = self._append(log_, 0, log_.append_end_txn_marker, producer_id, producer_epoch,
                              coordinator_epoch, commit)
        durable = await asyncio.wrap_future(self._commit(log_).when_durable(result.last_offset, result))
        if topic == offsets_log.TOPIC:
            self._groups.on_marker(partition, producer_id, commit)
        return durable

    async def write_fencing_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool) -> int:
        """A marker the partition accepts whatever it has seen of the producer, fencing
        the producer there: at least ``producer_epoch`` and one above the producer's
        epoch on the partition (MAX_PRODUCER_EPOCH at most), at least the coordinator epoch the
        partition last saw. Returns the producer epoch written."""
        entry = self._logs.log(topic, partition).producer_state.producers.get(producer_id)
        if entry is not None:
            producer_epoch = max(producer_epoch, min(entry.producer_epoch + 1, MAX_PRODUCER_EPOCH))
            coordinator_epoch = max(coordinator_epoch, entry.coordinator_epoch)
        await self.write_txn_marker(topic, partition, producer_id, producer_epoch, coordinator_epoch, commit)
        return producer_epoch

    async def abort_hanging_transaction(self, topic: str, partition: int, producer_id: int,
                                        actor: str = "an operator", marker_epoch: int | None = None,
                                        transaction_version: int = 0) -> HangingAbort:
        """Kafka's AbortTransaction (KIP-664), for any producer holding a transaction
        open on one partition, with a fence so that producer cannot carry on:

        * a producer of a transactional id: once a completion in progress is done,
          the coordinator aborts that id's transaction with an epoch bump (the
          partition joins it first if a batch from before verification left it out);
        * a producer no coordinator knows, or one whose transaction's marker this
          partition refuses (a broken invariant, see ``TransactionCoordinator._complete``):
          an ABORT marker at the producer's epoch + 1 on this partition, which then
          refuses that epoch.

        ``actor`` (who asked, from where) goes into the abort's reason (the first case)
        or its log line (the second). ``marker_epoch``: the epoch of a client's ABORT
        marker (WriteTxnMarkers), checked as Kafka's partition checks a marker's epoch
        against the producer's: not older, and with ``transaction_version`` 2 (KIP-1228)
        newer, as a version 2 coordinator's marker carries the bumped epoch; else
        INVALID_PRODUCER_EPOCH and nothing is aborted.
        """
        log_ = self._logs.log(topic, partition)
        tc = self._transactions
        entry = _open_transaction(log_, producer_id)
        if marker_epoch is not None:
            _check_marker_epoch(log_, entry, marker_epoch, transaction_version)
        txn_id = tc.transactional_id_of(producer_id)
        if txn_id is not None and await tc.settle_for_partition_abort(txn_id, (topic, partition)):
            _open_transaction(log_, producer_id)  # a completion may have ended it meanwhile
            epoch = await tc.abort_for_partition(txn_id, (topic, partition), actor)
            return HangingAbort(txn_id, epoch, log_.last_stable_offset)
        _open_transaction(log_, producer_id)
        epoch = await self.write_fencing_marker(topic, partition, producer_id, 0, tc.coordinator_epoch,
                                                commit=False)
        log.info("aborting the transaction of producer %d on %s-%d (%s; an ABORT marker at epoch %d): "
                 "cause=%s actor=%s", producer_id, topic, partition,
                 f"transactional id {txn_id!r}, its marker refused here" if txn_id else "no transactional id",
                 epoch, AbortCause.ADMIN_PARTITION.value, actor)
        self._counters.transaction_admin_aborted()
        return HangingAbort(None, epoch, log_.last_stable_offset)

    # -- reads -------------------------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              isolation_level: str | int = READ_UNCOMMITTED) -> ReadResult:
        """A client's read of one partition (the Kafka Fetch, the HTTP records GET, the
        embedded consumer): :meth:`read`, counted and timed for ``/metrics``."""
        started = time.perf_counter()
        self._counters.fetch_requests += 1
        result = self.read(topic, partition, offset, max_bytes, isolation_level)
        self._counters.fetched_bytes += len(result.records)
        self._counters.fetch_latency.observe(time.perf_counter() - started)
        return result

    def fetch_from(self, topic: str, partition: int, offset: int | None, max_bytes: int = 1 << 20,
                   isolation_level: str | int = READ_UNCOMMITTED) -> tuple[int, ReadResult]:
        """:meth:`fetch` from ``offset``, or from the log start when None (a reader that
        does not know where the log begins: the HTTP API's); returns the offset read from."""
        if offset is None:
            offset = self._logs.log(topic, partition).log_start_offset
        return offset, self.fetch(topic, partition, offset, max_bytes, isolation_level)

    def read(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
             isolation_level: str | int = READ_UNCOMMITTED) -> ReadResult:
        """Whole batches from ``offset``, up to the high watermark (read_uncommitted) or
        the LSO (read_committed, with the aborted transactions in range). The broker's
        own reads -- the SQLite mirror, the console -- use this one: they are no
        client's fetches, so ``/metrics`` does not count them."""
        committed = isolation_is_committed(isolation_level)
        return self._logs.log(topic, partition).read(offset, max_bytes, read_committed=committed)

    def list_offsets(self, topic: str, partition: int, timestamp: int,
                     isolation_level: str | int = READ_UNCOMMITTED) -> OffsetAndTimestamp:
        """Kafka's ListOffsets: -1 latest (the LSO when read_committed), -2 earliest
        (and -4, the local log start: every segment is local), -3 the first record with
        the largest timestamp, -5 and -6 (tiered storage's) -1 as Kafka answers them
        without it; otherwise the first record with a timestamp >= ``timestamp``. Found
        records are the ones a reader at this isolation level may see (-1 if none)."""
        committed = isolation_is_committed(isolation_level)
        log_ = self._logs.log(topic, partition)
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(log_.last_stable_offset if committed else log_.high_watermark, -1)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return OffsetAndTimestamp(log_.log_start_offset, -1)
        if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
            return OffsetAndTimestamp(-1, -1)
        if timestamp == MAX_TIMESTAMP:
            found = log_.offset_of_max_timestamp(read_committed=committed)
        elif timestamp >= 0:
            found = log_.offset_for_timestamp(timestamp, read_committed=committed)
        else:
            raise InvalidRequestError(f"unsupported ListOffsets timestamp {timestamp}")
        return OffsetAndTimestamp(*found) if found else OffsetAndTimestamp(-1, -1)

    def has_partition(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._logs.logs

    def partition_offsets(self, topic: str, partition: int) -> PartitionOffsets:
        """Log start, high watermark and LSO; UNKNOWN_TOPIC_OR_PARTITION if it does not exist."""
        log_ = self._logs.log(topic, partition)
        return PartitionOffsets(log_.log_start_offset, log_.high_watermark, log_.last_stable_offset)

    async def wait_for_data(self, timeout_s: float,
                            partitions: Collection[tuple[str, int]] | None = None) -> None:
        """Return when the high watermark (and with it the LSO) of one of ``partitions``
        -- of any partition when None -- moves, or after ``timeout_s``: consumers and
        long-polling fetches wait here instead of polling in a loop."""
        waiter = self._loop.create_future()
        keys: list[tuple[str, int] | None] = [None] if partitions is None else list(partitions)
        for key in keys:
            self._data_waiters.setdefault(key, []).append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            for key in keys:
                waiters = self._data_waiters.get(key)
                if waiters and waiter in waiters:
                    waiters.remove(waiter)
                    if not waiters:
                        del self._data_waiters[key]

    def _on_durable(self, key: tuple[str, int]) -> None:
        """A partition's high watermark moved: wake who waits for it, or for any."""
        for waiter in self._data_waiters.pop(key, []) + self._data_waiters.pop(None, []):
            if not waiter.done():
                waiter.set_result(None)

    # -- records and the log directory (DeleteRecords, DescribeLogDirs) ---------------------------

    async def delete_records(self, offsets: Mapping[tuple[str, int], int]
                             ) -> dict[tuple[str, int], LogDeleteRecordsResult]:
        """Kafka's DeleteRecords: move each partition's log start offset up to its
        offset (-1: the high watermark; ``PartitionLog.delete_records`` says what is
        refused); returns once the log-start-offset checkpoint holding the moves is
        written, so they survive a restart. The internal topics are
        INVALID_TOPIC_EXCEPTION, as in Kafka; the segments below the new starts go at
        the next retention pass."""
        results: dict[tuple[str, int], LogDeleteRecordsResult] = {}
        for (topic, partition), offset in offsets.items():
            try:
                if topic in INTERNAL_TOPICS:
                    raise InvalidTopicError(f"cannot delete records of the internal topic {topic}")
                log_ = self._logs.log(topic, partition)
                results[topic, partition] = LogDeleteRecordsResult(log_.delete_records(offset))
            except KafkaError as e:
                results[topic, partition] = LogDeleteRecordsResult(error=e)
        if any(r.error is None for r in results.values()):
            await self._jobs.checkpoint()
        return results

    async def describe_log_dir(self, topics: Iterable[tuple[str, Iterable[int]]] | None = None) -> LogDirInfo:
        """The data directory, its volume's total and usable bytes (read off the
        loop) and the size of each partition -- of every one, or of those of
        ``(topic, partitions)`` that exist."""
        if topics is None:
            logs = sorted(self._logs.logs.items())
        else:
            logs = [((t, p), self._logs.logs[t, p]) for t, ps in topics for p in ps if (t, p) in self._logs.logs]
        sizes = tuple(ReplicaInfo(t, p, log_.size_bytes) for (t, p), log_ in logs)
        total, usable = await self._maintenance.run(one_job(VolumeUsage(self._logs.data_dir)))
        return LogDirInfo(str(self._logs.data_dir.absolute()), total, usable, sizes)


def _check_marker_epoch(log_: PartitionLog, entry: ProducerStateEntry, marker_epoch: int,
                        transaction_version: int) -> None:
    """Kafka's ``ProducerAppendInfo.checkProducerEpoch`` for a marker: INVALID_PRODUCER_EPOCH
    for one older than the producer's epoch on the partition, or (transaction version 2)
    not newer."""
    tv2 = transaction_version >= features.TRANSACTION_VERSION_2
    if marker_epoch < entry.producer_epoch or (tv2 and marker_epoch == entry.producer_epoch):
        raise InvalidProducerEpochError(
            f"a transaction version {transaction_version} marker at epoch {marker_epoch} for producer "
            f"{entry.producer_id} on {log_.topic}-{log_.partition}, whose epoch is {entry.producer_epoch}: "
            f"it must be {'newer' if tv2 else 'at least as new'}")


def _open_transaction(log_: PartitionLog, producer_id: int) -> ProducerStateEntry:
    """The producer's state on ``log_``; INVALID_TXN_STATE unless it has a transaction open there."""
    entry = log_.producer_state.producers.get(producer_id)
    if entry is None or entry.current_txn_first_offset is None:
        raise InvalidTxnStateError(
            f"producer {producer_id} has no open transaction on {log_.topic}-{log_.partition}")
    return entry
