"""The engine: the one owner of broker state, living on one asyncio event loop.

Partitions, producer state and the transaction and group coordinators are touched
only by code running on the engine's loop, so there are no locks around them. The
Kafka listener runs on the same loop; HTTP worker threads, scheduled jobs and the
embedded client submit work with :meth:`Engine.call` / :meth:`Engine.submit` and
wait for the answer -- coordinator requests are the coordinators' own coroutines,
e.g. ``engine.call(engine._transaction_coordinator.end_txn, ...)``. The loop never
waits on the disk: fsyncs of appends run on the fsync thread through group commit
(``exactly/app/engine/group_commit.py``); snapshots, checkpoints, retention, cleaning, topic
changes and producer-id blocks are planned on the loop, written on a maintenance
thread and installed on the loop (``exactly/app/engine/maintenance.py``). Only opening and
closing the data directory touch the disk from the caller's thread, while the loop
is not running.

The internal topics ``__transaction_state`` and ``__consumer_offsets`` are created
when first needed (as Kafka does), compacted, and read back into the coordinators
when the engine starts; prepared transactions are then rolled forward. With an
authorizer configured, the ACLs of ``__cluster_metadata`` are read back into it the
same way (``exactly/coordinator/cluster_metadata.py``); ACL changes are durable before they apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import logging
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Collection, Iterable, Iterator, Mapping, TypeVar

from exactly.app.config import BrokerConfig
from exactly.app.engine import audit as exactly_once
from exactly.app.engine.coordinator_io import EngineCoordinatorIO
from exactly.app.engine.counters import EngineCounters
from exactly.app.engine.disk_space import DiskSpace, VolumeUsage
from exactly.app.engine.group_commit import GroupCommit
from exactly.app.engine.maintenance import Maintenance, MaintenanceCancelledError
from exactly.app.engine.principals import DenialLog, OpenTransactions, ProducerIdRate, ProducerOwners
from exactly.app.engine.views import GroupView, PartitionOffsets
from exactly.app.engine.worker import Worker
from exactly.app.faults.fault import Faults
from exactly.app.security.acl import AclBinding, AclBindingFilter, AclOperation, ResourceType
from exactly.app.security.acl import SUPPORTED_OPERATIONS
from exactly.app.security.authorizer import Decision, Reason, StandardAuthorizer
from exactly.app.security.credentials import ScramCredentials
from exactly.app.security.principal import USER_TYPE, KafkaPrincipal
from exactly.app.security.scram import ScramMechanism, password_matches
from exactly.coordinator import cluster_metadata, offsets_log, transaction_log
from exactly.coordinator.group_coordinator import FetchedOffset, GroupCoordinator, JoinResult
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.coordinator.internal_topics import INTERNAL_TOPICS
from exactly.coordinator.transaction_coordinator import KeptTransaction, TransactionCoordinator
from exactly.coordinator.transaction_state import AbortCause, TxnTransitMetadata
from exactly.storage.background import Job, Steps
from exactly.storage.clock import Clock, SystemClock
from exactly.storage.errors import (
    ClusterAuthorizationFailedError,
    InvalidProducerEpochError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    LogDirFullError,
    LogOfflineError,
    PolicyViolationError,
    RequestTimedOutError,
    SecurityDisabledError,
    ThrottlingQuotaExceededError,
    TopicAlreadyExistsError,
    TransactionalIdAuthorizationFailedError,
)
from exactly.storage.isolation_level import IsolationLevel
from exactly.storage.log_cleaner import CleaningAbortedError
from exactly.storage.log_manager import LogManager, TopicInfo
from exactly.storage.partition_log import AppendResult, PartitionLog, ReadResult
from exactly.storage.producer_state import ProducerStateEntry, next_sequence
from exactly.storage.record_batch import (
    MAX_PRODUCER_EPOCH,
    BatchHeader,
    Record,
    SimpleRecord,
    decode_batch,
    encode_batch,
    read_header,
)

#: the partitions one CreateTopics request may create, or one CreatePartitions add
#: (Kafka's MAX_PARTITIONS_PER_BATCH, ReplicationControlManager): more is POLICY_VIOLATION
MAX_PARTITIONS_PER_REQUEST = 10_000
#: how often the group coordinator checks session and rebalance timeouts
GROUP_TICK_S = 0.1

log = logging.getLogger(__name__)
T = TypeVar("T")
#: a topic's config changes computed from its current configs (``Engine.alter_topic_config``)
TopicConfigChanges = Callable[[], Awaitable[Mapping[str, Any | None]]]

READ_UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED.label
READ_COMMITTED = IsolationLevel.READ_COMMITTED.label
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True, slots=True)
class HangingAbort:
    """What :meth:`Engine.abort_hanging_transaction` did."""

    #: the transactional id whose transaction the coordinator aborted; None: an
    #: ABORT marker was written on the partition alone
    transactional_id: str | None
    #: the producer's epoch now; older ones are fenced
    producer_epoch: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class LogDeleteRecordsResult:
    """What :meth:`Engine.delete_records` did on one partition: its log start offset
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


class Engine:
    """Broker state and the loop that owns it."""

    def __init__(self, data_dir: Path | str, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self._logs = LogManager(data_dir, config.log, self.clock)  # recovers before anything runs
        #: whether writes are refused for lack of space (one log line each way)
        self.disk = DiskSpace(self._logs.data_dir)
        self._loop = asyncio.new_event_loop()
        self._fsync = Worker(self._loop, "exactly-fsync")
        #: snapshots, checkpoints, retention, cleaning, topic changes, producer-id blocks
        self.maintenance = Maintenance(self._loop, self.disk)
        self._logs.background = self.maintenance.start  # the snapshot of a roll
        #: one topic creation or deletion at a time
        self._topic_changes = asyncio.Lock()
        self._commits: dict[tuple[str, int], GroupCommit] = {}
        #: partition (None: any partition) -> futures waiting for its high watermark to move
        self._data_waiters: dict[tuple[str, int] | None, list[asyncio.Future[None]]] = {}
        self.counters = EngineCounters()
        #: open Kafka connections (``exactly/app/kafka/`` adds and removes them; read models list them)
        self.kafka_connections: set[Any] = set()
        #: the faults installed on purpose (``exactly/app/faults/``): the listener checks it, every face changes it
        self.faults = Faults()
        #: ``(host, port)`` clients are told to connect to, once a Kafka listener serves
        #: (``exactly/app/kafka/server.py``); None without one (an embedded Broker)
        self.kafka_address: tuple[str, int] | None = None
        io = EngineCoordinatorIO(self)
        max_seen_coordinator_epoch = max(
            (entry.coordinator_epoch for log_ in self._logs for entry in log_.producer_state), default=-1)
        self._transaction_coordinator = TransactionCoordinator(Path(data_dir), config, io, self.clock,
                                                              self.counters, max_seen_coordinator_epoch)
        self._group_coordinator = GroupCoordinator(config, io, self.clock)
        #: the ACLs and Kafka's rules over them; None: no authorizer (authorizer.class.name)
        self._authorizer = config.authorizer()
        #: one ACL change at a time, so a binding is never written twice
        self._acl_changes = asyncio.Lock()
        #: the users' SCRAM credentials (SASL logins, HTTP Basic), whether or not ACLs are on
        self.scram_credentials = ScramCredentials()
        #: per principal (exactly/app/engine/principals.py): denials, producer ids, abuse limits
        self._denials = DenialLog()
        self._producer_owners = ProducerOwners()
        self._producer_id_rate = ProducerIdRate(config.exactly_producer_id_rate_per_principal)
        self._open_transactions = OpenTransactions(config.exactly_max_open_transactions_per_principal,
                                                   self._transaction_open)
        self._load_coordinators()
        self._thread = threading.Thread(target=self._run_loop, name="exactly-engine", daemon=True)
        self._closed = False
        self._closed_clean = False
        #: set by :meth:`kill`, at the instant the loop stops working
        self._killed = False
        self._thread.start()
        self._loop.call_soon_threadsafe(self._started)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    # -- coordinators ---------------------------------------------------------------------

    def _load_coordinators(self) -> None:
        """Materialise both coordinators from their logs (before the loop runs). Producer
        ids are allocated from the ``producer-id-block`` file and the transaction log;
        only when that file is lost do the partitions' producer ids witness the ids
        idempotent producers were given (``exactly/coordinator/producer_id_manager.py``)."""
        producer_ids = self._transaction_coordinator.producer_ids
        if not producer_ids.from_file:
            producer_ids.raise_floor(1 + max(
                (pid for log_ in self._logs for pid in log_.producer_state.producers), default=-1))
        for (topic, partition), log_ in sorted(self._logs.logs.items()):
            if topic == transaction_log.TOPIC:
                self._transaction_coordinator.load_records(partition, (
                    (record.offset, record.key, record.value, record.headers)
                    for _, batch in log_.batches() for record in _data_records(batch)))
            elif topic == offsets_log.TOPIC:
                for _, batch in log_.batches():
                    self._group_coordinator.load_batch(partition, batch)
            elif topic == cluster_metadata.TOPIC:
                image = cluster_metadata.replay(
                    (r.key, r.value) for _, batch in log_.batches() for r in _data_records(batch))
                for record in image.scram_credentials.values():
                    self.scram_credentials.put(record)
                for acl_id, record in image.acls.items() if self._authorizer is not None else ():
                    self._authorizer.add_acl(acl_id, AclBinding.from_record(record))

    def _started(self) -> None:
        self._transaction_coordinator.resume()
        self._tick_groups()

    def _tick_groups(self) -> None:
        if not self._closed:
            self._group_coordinator.tick()
            self._loop.call_later(GROUP_TICK_S, self._tick_groups)

    async def ensure_internal_topic(self, name: str) -> None:
        """Create ``__transaction_state`` / ``__consumer_offsets`` / ``__cluster_metadata``
        (one partition) on first use, compacted."""
        if name in self._logs.topics:
            return
        config = self.config
        partitions, segment_bytes = {
            transaction_log.TOPIC: (config.transaction_state_log_num_partitions,
                                    config.transaction_state_log_segment_bytes),
            offsets_log.TOPIC: (config.offsets_topic_num_partitions, config.offsets_topic_segment_bytes),
            cluster_metadata.TOPIC: (1, config.log.segment_bytes),
        }[name]
        try:
            await self._create_topic(name, partitions, {"cleanup.policy": "compact", "segment.bytes": segment_bytes},
                                     internal=True)
        except TopicAlreadyExistsError:
            pass  # another request created it while this one waited

    async def append_internal(self, topic: str, partition: int, batch: bytes) -> AppendResult:
        """Append a coordinator's batch to an internal topic and wait until durable."""
        log_ = self._logs.log(topic, partition)
        result = self._append(log_, len(batch), log_.append_data, batch)
        return await asyncio.wrap_future(self._commit(log_).when_durable(result.last_offset, result))

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

    def audit(self, group_id: str, input_topic: str, output_topic: str,
              records_per_input: int | None = None) -> exactly_once.AuditView:
        """The exactly-once audit of a consume-transform-produce group (``exactly/app/engine/audit.py``).
        Call it from any thread but the loop's: it reads the logs' files on the caller's thread."""
        return exactly_once.audit(self, group_id, input_topic, output_topic, records_per_input)

    # -- submitting work from other threads --------------------------------------------

    def call(self, fn: Callable[..., Awaitable[T]] | Callable[..., T], *args: Any,
             timeout: float | None = 60, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` on the loop and wait for its result: a coroutine
        function is awaited there, a plain function called there.

        Past ``timeout`` seconds the work is cancelled -- a coroutine at its next
        await, a plain function if it has not started (once started it runs to its
        end) -- so the loop does no work for a caller that gave up, and the caller
        gets REQUEST_TIMED_OUT."""
        if self._closed:
            raise KafkaStorageError("the broker is closed")
        if inspect.iscoroutinefunction(fn):
            future = asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), self._loop)
        else:
            future = self.submit(functools.partial(fn, *args, **kwargs))
        try:
            return future.result(timeout)
        except TimeoutError:
            if not future.cancel() and future.done():  # it finished as the wait ended
                return future.result()
            raise RequestTimedOutError(f"{getattr(fn, '__qualname__', fn)} did not finish on the broker's "
                                       f"loop within {timeout} s and was cancelled") from None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run the plain function ``fn(*args)`` on the loop; the returned future gets
        its result -- or, when ``fn`` returns a future, that future's outcome.

        The hot path (produce from the embedded client): no Task, no coroutine, one
        wake-up of the loop; the caller blocks on the future, not on the loop.
        """
        if self._closed:
            raise KafkaStorageError("the broker is closed")
        outer: Future = Future()

        def run() -> None:
            if not outer.set_running_or_notify_cancel():  # its caller gave up before it started
                return
            if self._killed:  # queued before the kill: a killed broker does no more work
                outer.set_exception(KafkaStorageError("the broker was killed"))
                return
            try:
                result = fn(*args)
            except BaseException as e:  # delivered to the caller, never lost
                outer.set_exception(e)
                return
            if isinstance(result, Future):
                result.add_done_callback(lambda inner: _copy_outcome(inner, outer))
            else:
                outer.set_result(result)

        self._loop.call_soon_threadsafe(run)
        return outer

    # -- partitions ---------------------------------------------------------------------

    def _commit(self, log_: PartitionLog) -> GroupCommit:
        key = (log_.topic, log_.partition)
        commit = self._commits.get(key)
        if commit is None:
            commit = self._commits[key] = GroupCommit(log_, self._loop, self._fsync, self.counters.fsync_latency,
                                                      lambda: self._on_durable(key))
        return commit

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
        count = partitions if partitions is not None else self.config.num_partitions
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
        if not self.config.exactly_replication_factor_ignore:
            raise InvalidReplicationFactorError(f"replication factor {replication_factor} is more than the 1 "
                                                "broker there is (exactly.replication.factor.ignore=true accepts it)")
        return (f"replication factor {replication_factor} requested: created with the 1 replica this broker has "
                "(exactly.replication.factor.ignore=true)")

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
            return await self.maintenance.run(steps)

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
            return await self.maintenance.run(steps)

    def check_partitions_per_request(self, partitions: Any) -> None:
        """POLICY_VIOLATION, with Kafka's message, when one request would create more
        than :data:`MAX_PARTITIONS_PER_REQUEST` partitions (a count that is no int is
        left to the validation that follows)."""
        if isinstance(partitions, int) and partitions > MAX_PARTITIONS_PER_REQUEST:
            self.counters.limit_refused("max.partitions.per.request")
            raise PolicyViolationError(f"Excessively large number of partitions per request: {partitions} "
                                       f"requested, at most {MAX_PARTITIONS_PER_REQUEST}.")

    def _check_partitions_held(self, new: int) -> None:
        """POLICY_VIOLATION when ``new`` more partitions would take this broker past
        exactly.max.partitions (each partition holds open files and a directory); the
        internal topics' partitions do not count, as they are not refused."""
        held = sum(1 for topic, _ in self._logs.logs if topic not in INTERNAL_TOPICS)
        limit = self.config.exactly_max_partitions
        if held + new > limit:
            self.counters.limit_refused("exactly.max.partitions")
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
            return await self.maintenance.run(steps)

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
            for log_ in logs:
                commit = self._commits.pop((name, log_.partition), None)
                if commit is not None:
                    await commit.drain()
                    commit.close()
            await self.maintenance.quiesce(logs)
            await self.maintenance.run(self._logs.delete_topic(logs))
            await self._group_coordinator.delete_topic_offsets(name)

    def start_produce(self, topic: str, partition: int, batch: bytes, acks: int = -1,
                      transactional_id: str | None = None, principal: KafkaPrincipal | None = None) -> Future:
        """Append one producer batch (on the loop); the future resolves to its
        AppendResult -- with acks=-1 once it is fsynced. A transactional batch must
        belong to its producer's Ongoing transaction on this partition (KIP-890,
        ``TransactionCoordinator.verify_transaction``); ``transactional_id``, which a
        Kafka Produce request carries, must then be that producer id's. An idempotent
        batch must carry a producer id this broker handed out, and not a transactional
        id's (``verify_idempotent``): every face -- Kafka's Produce, the HTTP records
        endpoint, the embedded API -- comes through here. With the authorizer on, the
        batch's producer id must be ``principal``'s (:meth:`check_producer_owner`)."""
        started = time.perf_counter()
        self.counters.produce_requests += 1
        if acks not in (-1, 0, 1):
            raise InvalidRequiredAcksError(f"acks must be -1, 0 or 1, got {acks!r}")
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"clients may not produce to the internal topic {topic}")
        log_ = self._logs.log(topic, partition)
        header = read_header(batch)
        self._verify_producer(header, topic, partition, transactional_id)
        if principal is not None and header.producer_id >= 0:
            self.check_producer_owner(header.producer_id, principal, header.is_transactional)
        commit = self._commit(log_)
        try:
            result = self._append(log_, len(batch), log_.append_data, batch)
        except InvalidProducerEpochError as e:  # the partition has seen a newer epoch: a zombie
            self.counters.producer_fenced(e.name)
            raise
        if not result.duplicate:
            self.counters.produced_records += header.record_count
        latency = self.counters.produce_latency
        if acks == -1:
            durable = commit.when_durable(result.last_offset, result)
            # the callback runs on the loop, which makes the append durable (or now, if it is)
            durable.add_done_callback(lambda _: latency.observe(time.perf_counter() - started))
            return durable
        if not result.duplicate:
            commit.appended()
        latency.observe(time.perf_counter() - started)
        return _done(result)

    def _append(self, log_: PartitionLog, size: int, append: Callable[..., AppendResult],
                *args: Any) -> AppendResult:
        """``append(*args)`` -- a batch of ``size`` bytes, or a marker (0: tiny) on ``log_`` -- with
        the disk watched: a write refused for lack of space is reported to
        :attr:`disk` (which says so once), a log that goes offline says so once, and a
        write that succeeds may end the full-disk state."""
        was_offline = log_.offline is not None
        try:
            result = append(*args)
        except LogDirFullError as e:
            self.disk.refused(e, size)
            raise
        except LogOfflineError as e:
            if not was_offline:
                log.error("%s-%d is offline: %s; its writes are refused with KAFKA_STORAGE_ERROR (56) "
                          "until the broker restarts and reloads it from disk", log_.topic, log_.partition, e)
            raise
        self.disk.wrote()
        return result

    def _verify_producer(self, header: BatchHeader, topic: str, partition: int,
                         transactional_id: str | None) -> None:
        """The transaction coordinator's checks of a producer batch. A control batch
        is not one: the log refuses it (INVALID_RECORD), clients never write markers."""
        tc = self._transaction_coordinator
        if header.is_control:
            return
        if header.is_transactional:
            tc.verify_transaction(header.producer_id, header.producer_epoch, topic, partition, transactional_id)
        elif header.producer_id >= 0:
            tc.verify_idempotent(header.producer_id)

    async def abort_hanging_transaction(self, topic: str, partition: int, producer_id: int,
                                        actor: str = "an operator") -> HangingAbort:
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
        or its log line (the second).
        """
        log_ = self._logs.log(topic, partition)
        tc = self._transaction_coordinator
        _open_transaction(log_, producer_id)
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
        self.counters.transaction_admin_aborted()
        return HangingAbort(None, epoch, log_.last_stable_offset)

    def next_sequence(self, topic: str, partition: int, producer_id: int, producer_epoch: int) -> int:
        """The base sequence a well-behaved producer sends next on this partition (0 for
        a producer or epoch the partition does not know). Only meaningful on the loop, in
        the same callback as the append that uses it: nothing else may append between."""
        entry = self._logs.log(topic, partition).producer_state.producers.get(producer_id)
        if entry is None or entry.producer_epoch != producer_epoch:
            return 0
        return next_sequence(entry.last_seq)

    def partition_count(self, topic: str) -> int:
        return self._logs.topic(topic).partitions

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        """Partitions per existing topic (unknown topics are left out)."""
        return {t: self._logs.topics[t].partitions for t in topics if t in self._logs.topics}

    async def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1,
                      transactional_id: str | None = None) -> AppendResult:
        return await asyncio.wrap_future(self.start_produce(topic, partition, batch, acks, transactional_id))

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
            self._group_coordinator.on_marker(partition, producer_id, commit)
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

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              isolation_level: str | int = READ_UNCOMMITTED) -> ReadResult:
        """A client's read of one partition (the Kafka Fetch, the HTTP records GET, the
        embedded consumer): :meth:`read`, counted and timed for ``/metrics``."""
        started = time.perf_counter()
        self.counters.fetch_requests += 1
        result = self.read(topic, partition, offset, max_bytes, isolation_level)
        self.counters.fetched_bytes += len(result.records)
        self.counters.fetch_latency.observe(time.perf_counter() - started)
        return result

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
        """Kafka's ListOffsets: -1 latest (the LSO when read_committed), -2 earliest,
        otherwise the first offset with a timestamp >= ``timestamp`` (-1 if none)."""
        committed = isolation_is_committed(isolation_level)
        log_ = self._logs.log(topic, partition)
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(log_.last_stable_offset if committed else log_.high_watermark, -1)
        if timestamp == EARLIEST_TIMESTAMP:
            return OffsetAndTimestamp(log_.log_start_offset, -1)
        if timestamp < 0:
            raise InvalidRequestError(f"unsupported ListOffsets timestamp {timestamp}")
        found = log_.offset_for_timestamp(timestamp, read_committed=committed)
        return OffsetAndTimestamp(*found) if found else OffsetAndTimestamp(-1, -1)

    # -- the faces' interface ---------------------------------------------------------------
    #
    # The Kafka listener, the HTTP API, the embedded clients and the CLI reach broker
    # state only through these named operations (and produce / fetch / list_offsets
    # above), and get frozen values back. The async ones run on the loop: awaited there
    # by the Kafka handlers, ``engine.call(engine.end_txn, ...)`` from other threads.

    @property
    def cluster_id(self) -> str:
        return self._logs.cluster_id

    @property
    def node_id(self) -> int:
        return self._logs.node_id

    def topic_names(self) -> list[str]:
        """Every topic, internal ones included, sorted."""
        return sorted(self._logs.topics)

    def topic_info(self, name: str) -> TopicInfo | None:
        """A copy of the topic, or None if it does not exist."""
        info = self._logs.topics.get(name)
        return _copied(info) if info is not None else None

    def describe_topic(self, name: str) -> TopicInfo:
        """A copy of the topic; UNKNOWN_TOPIC_OR_PARTITION if it does not exist."""
        return _copied(self._logs.topic(name))

    def has_partition(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._logs.logs

    def partition_offsets(self, topic: str, partition: int) -> PartitionOffsets:
        """Log start, high watermark and LSO; UNKNOWN_TOPIC_OR_PARTITION if it does not exist."""
        log_ = self._logs.log(topic, partition)
        return PartitionOffsets(log_.log_start_offset, log_.high_watermark, log_.last_stable_offset)

    def schedule(self, fn: Callable[..., Awaitable[T]], *args: Any) -> Future:
        """Start the coroutine ``fn(*args)`` on the loop and return its future at once
        (:meth:`call` waits for it): for a caller that waits in slices of its own."""
        if self._closed:
            raise KafkaStorageError("the broker is closed")
        return asyncio.run_coroutine_threadsafe(fn(*args), self._loop)

    # transactions (exactly/coordinator/transaction_coordinator.py says what each answers)

    async def init_producer_id(self, transactional_id: str | None, transaction_timeout_ms: int,
                               producer_id: int = -1, producer_epoch: int = -1,
                               enable_2pc: bool = False, principal: KafkaPrincipal | None = None
                               ) -> tuple[int, int]:
        """A producer id and epoch (the coordinator's); for a ``principal`` (a Kafka
        client's) within its producer-id rate, and then its own (:meth:`check_producer_owner`)."""
        if principal is not None:
            self.check_producer_id_rate(principal)
        handed_out = await self._transaction_coordinator.init_producer_id(
            transactional_id, transaction_timeout_ms, producer_id, producer_epoch, enable_2pc)
        if principal is not None and self._authorizer is not None:
            self._producer_owners.bind(handed_out[0], str(principal))
        return handed_out

    async def keep_prepared_transaction(self, transactional_id: str, principal: KafkaPrincipal | None = None
                                        ) -> KeptTransaction | None:
        """KIP-939 keepPreparedTxn; the producer id it hands out becomes ``principal``'s, as
        after any InitProducerId: whoever takes over the prepared transaction completes it
        and writes the next ones (:meth:`check_producer_owner`)."""
        kept = await self._transaction_coordinator.keep_prepared_transaction(transactional_id)
        if kept is not None and principal is not None and self._authorizer is not None:
            self._producer_owners.bind(kept.producer_id, str(principal))
        return kept

    async def add_partitions_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                    partitions: Iterable[tuple[str, int]], principal: KafkaPrincipal | None = None
                                    ) -> dict[tuple[str, int], KafkaError | None]:
        with self._admitted(principal, transactional_id):
            return await self._transaction_coordinator.add_partitions(transactional_id, producer_id,
                                                                      producer_epoch, partitions)

    async def add_offsets_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 group_id: str, principal: KafkaPrincipal | None = None) -> tuple[str, int]:
        with self._admitted(principal, transactional_id):
            return await self._transaction_coordinator.add_offsets(transactional_id, producer_id,
                                                                   producer_epoch, group_id)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        await self._transaction_coordinator.end_txn(transactional_id, producer_id, producer_epoch, commit)

    async def txn_offset_commit(self, transactional_id: str, group_id: str, producer_id: int,
                                producer_epoch: int, offsets: dict[tuple[str, int], CommittedOffset],
                                generation: int = -1, member_id: str = "", group_instance_id: str | None = None,
                                principal: KafkaPrincipal | None = None) -> dict[tuple[str, int], KafkaError | None]:
        if principal is not None:
            self.check_producer_owner(producer_id, principal, transactional=True)
        return await self._group_coordinator.txn_commit_offsets(
            transactional_id, group_id, producer_id, producer_epoch, offsets, generation, member_id,
            group_instance_id)

    async def abort_transaction(self, transactional_id: str, actor: str = "an operator") -> None:
        """An operator's abort of a transactional id's transaction."""
        await self._transaction_coordinator.admin_abort(transactional_id, actor)

    async def fence_producer(self, transactional_id: str, actor: str = "an operator") -> tuple[int, int]:
        """Fence the transactional id's producer now, as a new instance would."""
        return await self._transaction_coordinator.fence(transactional_id, actor)

    async def time_out_transaction(self, transactional_id: str, actor: str = "an operator") -> None:
        """Time the transactional id's open transaction out now, as its timeout would."""
        await self._transaction_coordinator.time_out(transactional_id, actor)

    def describe_transaction(self, transactional_id: str) -> TxnTransitMetadata | None:
        return self._transaction_coordinator.describe(transactional_id)

    def list_transactions(self, states: Iterable[str] = ()) -> list[tuple[str, TxnTransitMetadata]]:
        return self._transaction_coordinator.list_transactions(states)

    def transactional_id_of(self, producer_id: int) -> str | None:
        return self._transaction_coordinator.transactional_id_of(producer_id)

    # consumer groups (exactly/coordinator/group_coordinator.py)

    async def join_group(self, group_id: str, member_id: str, protocol_type: str,
                         protocols: list[tuple[str, bytes]], session_timeout_ms: int,
                         rebalance_timeout_ms: int = -1, group_instance_id: str | None = None,
                         client_id: str = "", client_host: str = "",
                         require_known_member_id: bool = False,
                         support_skipping_assignment: bool = False) -> JoinResult:
        return await self._group_coordinator.join_group(group_id, member_id, protocol_type, protocols,
                                                        session_timeout_ms, rebalance_timeout_ms,
                                                        group_instance_id, client_id, client_host,
                                                        require_known_member_id, support_skipping_assignment)

    async def sync_group(self, group_id: str, generation: int, member_id: str,
                         assignments: dict[str, bytes] | None = None, group_instance_id: str | None = None,
                         protocol_type: str | None = None, protocol_name: str | None = None) -> bytes:
        return await self._group_coordinator.sync_group(group_id, generation, member_id, assignments,
                                                        group_instance_id, protocol_type, protocol_name)

    async def heartbeat(self, group_id: str, generation: int, member_id: str,
                        group_instance_id: str | None = None) -> None:
        await self._group_coordinator.heartbeat(group_id, generation, member_id, group_instance_id)

    async def leave_group(self, group_id: str, member_id: str, group_instance_id: str | None = None) -> None:
        await self._group_coordinator.leave_group(group_id, member_id, group_instance_id)

    async def commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset],
                             generation: int = -1, member_id: str = "", group_instance_id: str | None = None
                             ) -> dict[tuple[str, int], KafkaError | None]:
        return await self._group_coordinator.commit_offsets(group_id, offsets, generation, member_id,
                                                            group_instance_id)

    async def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None,
                            require_stable: bool = False) -> dict[tuple[str, int], FetchedOffset]:
        return await self._group_coordinator.fetch_offsets(group_id, partitions, require_stable)

    async def delete_group(self, group_id: str) -> None:
        await self._group_coordinator.delete_group(group_id)

    async def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]
                             ) -> dict[tuple[str, int], KafkaError | None]:
        return await self._group_coordinator.delete_offsets(group_id, partitions)

    def describe_group(self, group_id: str) -> GroupView | None:
        group = self._group_coordinator.describe(group_id)
        return GroupView.of(group) if group is not None else None

    def list_groups(self) -> list[GroupView]:
        """Every group the coordinator holds (Dead ones included), by group id."""
        return [GroupView.of(g) for _, g in sorted(self._group_coordinator.groups.items())]

    # -- ACLs (exactly/app/security/; durable in __cluster_metadata, exactly/coordinator/cluster_metadata.py) -------

    @property
    def authorizer_enabled(self) -> bool:
        return self._authorizer is not None

    def authorize(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str, surface: str = "kafka", audit: bool = True) -> bool:
        """May ``principal`` from ``host`` do ``operation`` on the resource? Always yes
        with no authorizer configured (``exactly/app/security/authorizer.py`` has the rules). A
        denial is counted and logged (rate-limited) with the ``surface`` that asked
        (``kafka``, ``http``), unless ``audit`` is false: a check that only filters what
        is listed (Metadata of all topics, ListGroups), as Kafka's ``logIfDenied=false``."""
        if self._authorizer is None or self._authorizer.authorize(principal, host, operation, resource_type, name):
            return True
        if audit:
            self.authorization_denied(principal, host, operation, resource_type, name, surface)
        return False

    def authorize_any(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """May the principal do ``operation`` on at least one resource of the type (Kafka's
        ``authorizeByResourceType``: an idempotent producer's Write on any topic)? Not audited."""
        return self._authorizer is None or self._authorizer.authorize_by_resource_type(
            principal, host, operation, resource_type)

    def authorization_denied(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                             resource_type: ResourceType, name: str, surface: str = "kafka") -> None:
        """Count a denial (``exactly_authorization_denials_total``) and log it once."""
        self.counters.authorization_denied(resource_type.name, operation.name)
        self._denials.denied(surface, str(principal), host, operation.name, resource_type.name, name)

    def check_producer_owner(self, producer_id: int, principal: KafkaPrincipal, transactional: bool) -> None:
        """With the authorizer on, refuse a producer id that InitProducerId handed to
        another principal (``exactly/app/engine/principals.py``: in memory; after a restart the
        first principal to use an id owns it). The errors are the ones clients treat as
        fatal authorization failures, never retried: TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        for a transactional producer's id (what it gets for a transactional id it may not
        write), CLUSTER_AUTHORIZATION_FAILED for an idempotent one's (what Kafka answers
        an idempotent producer without IdempotentWrite) -- not INVALID_PRODUCER_ID_MAPPING,
        on which clients re-initialize and retry."""
        if self._authorizer is None or self._producer_owners.claim(producer_id, str(principal)):
            return
        self.authorization_denied(principal, "*", AclOperation.WRITE, ResourceType.CLUSTER,
                                  f"producer id {producer_id}")
        if transactional:
            raise TransactionalIdAuthorizationFailedError(f"producer id {producer_id} belongs to another principal")
        raise ClusterAuthorizationFailedError(f"producer id {producer_id} belongs to another principal")

    def check_producer_id_rate(self, principal: KafkaPrincipal) -> None:
        """:raise ThrottlingQuotaExceededError: past ``exactly.producer.id.rate.per.principal``."""
        throttle_ms = self._producer_id_rate.throttle_ms(str(principal))
        if throttle_ms:
            self.counters.limit_refused("exactly.producer.id.rate.per.principal")
            raise ThrottlingQuotaExceededError(
                f"{principal} is past exactly.producer.id.rate.per.principal "
                f"({self._producer_id_rate.rate}/s); retry in {throttle_ms} ms", throttle_ms)

    @contextlib.contextmanager
    def _admitted(self, principal: KafkaPrincipal | None, transactional_id: str) -> Iterator[None]:
        """A Kafka client's request that opens a transaction, counted as open while it runs
        (:class:`OpenTransactions`). Past ``exactly.max.open.transactions.per.principal`` it
        is refused with THROTTLING_QUOTA_EXCEEDED: retriable, so a Java producer retries
        until one of the principal's transactions ends (a timeout aborts it at the latest),
        librdkafka makes it an abortable error; the cap is a quota on a principal, not a
        policy on the request, hence not POLICY_VIOLATION."""
        if principal is None:
            yield
            return
        if not self._open_transactions.admit(str(principal), transactional_id):
            self.counters.limit_refused("exactly.max.open.transactions.per.principal")
            raise ThrottlingQuotaExceededError(
                f"{principal} has {self._open_transactions.cap} transactions open "
                "(exactly.max.open.transactions.per.principal); end one first")
        try:
            yield
        finally:
            self._open_transactions.settle(transactional_id)

    def _transaction_open(self, transactional_id: str) -> bool:
        meta = self._transaction_coordinator.describe(transactional_id)
        return meta is not None and meta.state.is_open

    def authorized_operations(self, principal: KafkaPrincipal | str, host: str, resource_type: ResourceType,
                              name: str) -> frozenset[AclOperation]:
        """What the principal may do on the resource, of what its type supports (for
        Metadata's and DescribeGroups' ``authorized_operations``): everything it supports
        with no authorizer configured, as Kafka's ``AuthHelper.authorizedOperations``."""
        if self._authorizer is None:
            return SUPPORTED_OPERATIONS.get(resource_type, frozenset())
        return self._authorizer.authorized_operations(principal, host, resource_type, name)

    def explain(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> Decision:
        """:meth:`authorize`'s answer and what decided it (the console's "who may do what")."""
        if self._authorizer is None:
            return Decision(True, Reason.NO_AUTHORIZER)
        return self._authorizer.explain(principal, host, operation, resource_type, name)

    def _acls(self) -> StandardAuthorizer:
        if self._authorizer is None:
            raise SecurityDisabledError("no authorizer is configured (authorizer.class.name)")
        return self._authorizer

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches. :raise SecurityDisabledError: no authorizer.
        :raise InvalidRequestError: an UNKNOWN value in the filter."""
        acl_filter.validate()
        return [binding for _, binding in self._acls().acls(acl_filter)]

    async def create_acls(self, bindings: list[AclBinding]) -> list[KafkaError | None]:
        """Make each binding durable, then effective; per binding its error or None. An
        ACL that exists already succeeds without a new record (as in Kafka).
        :raise SecurityDisabledError: no authorizer."""
        authorizer = self._acls()
        results: list[KafkaError | None] = []
        new: dict[AclBinding, bytes] = {}
        async with self._acl_changes:
            for binding in bindings:
                results.append(_refusal(binding))
                if results[-1] is None and authorizer.id_of(binding) is None:
                    new.setdefault(binding, uuid.uuid4().bytes)
            try:
                await self._write_cluster_metadata([(cluster_metadata.encode_key(acl_id), cluster_metadata.encode_value(
                    binding.to_record(acl_id))) for binding, acl_id in new.items()])
            except KafkaError as e:
                return [r if r is not None else e for r in results]
            for binding, acl_id in new.items():
                authorizer.add_acl(acl_id, binding)
        return results

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding] | KafkaError]:
        """Remove what each filter matches (durably first); per filter the ACLs it
        removed (an ACL two filters match counts for the first) or its error.
        :raise SecurityDisabledError: no authorizer."""
        authorizer = self._acls()
        results: list[list[AclBinding] | KafkaError] = []
        doomed: dict[bytes, AclBinding] = {}
        async with self._acl_changes:
            for acl_filter in filters:
                refused = _refusal(acl_filter)
                if refused is not None:
                    results.append(refused)
                    continue
                matched = [(i, b) for i, b in authorizer.acls(acl_filter) if i not in doomed]
                doomed.update(matched)
                results.append([b for _, b in matched])
            try:
                await self._write_cluster_metadata([(cluster_metadata.encode_key(acl_id), None) for acl_id in doomed])
            except KafkaError as e:
                return [e if isinstance(r, list) else r for r in results]
            for acl_id in doomed:
                authorizer.remove_acl(acl_id)
        return results

    async def _write_cluster_metadata(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append ACL or credential records to ``__cluster_metadata`` in one batch, durably."""
        if not records:
            return
        await self.ensure_internal_topic(cluster_metadata.TOPIC)
        now = self.clock.now_ms()
        batch = encode_batch([SimpleRecord(value, key=key, timestamp=now) for key, value in records])
        await self.append_internal(cluster_metadata.TOPIC, 0, batch)

    # -- users: SCRAM credentials (exactly/app/security/scram.py; durable in __cluster_metadata) --------

    async def alter_scram_credentials(self, deletions: list[tuple[str, ScramMechanism]],
                                      upsertions: list[cluster_metadata.ScramCredentialRecord]) -> None:
        """Remove and set credentials, durably first, then for logins (one batch; the
        caller has checked each). :raise KafkaError: the write failed; nothing changed."""
        await self._write_cluster_metadata(
            [(cluster_metadata.encode_scram_key(user, mechanism), None) for user, mechanism in deletions]
            + [(cluster_metadata.encode_scram_key(r.name, r.mechanism), cluster_metadata.encode_scram_value(r))
               for r in upsertions])
        for user, mechanism in deletions:
            self.scram_credentials.remove(user, mechanism)
        for record in upsertions:
            self.scram_credentials.put(record)

    async def check_password(self, user: str, password: str) -> KafkaPrincipal | None:
        """``User:<user>`` when ``password`` is the user's (against any of its SCRAM
        credentials), else None. PBKDF2 runs on a worker thread, not the loop."""
        for credential in self.scram_credentials.of_user(user):
            if await asyncio.to_thread(password_matches, credential, password):
                return KafkaPrincipal(USER_TYPE, user)
        return None

    def authenticate_password(self, user: str, password: str) -> KafkaPrincipal | None:
        """:meth:`check_password` for a thread other than the loop's (HTTP Basic); blocks."""
        return self.call(self.check_password, user, password)

    # records and the log directory (DeleteRecords, DescribeLogDirs)

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
            await self.checkpoint()
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
        total, usable = await self.maintenance.run(_one(VolumeUsage(self._logs.data_dir)))
        return LogDirInfo(str(self._logs.data_dir.absolute()), total, usable, sizes)

    # -- periodic work (scheduled jobs call these) -----------------------------------------
    #
    # Each is planned here on the loop and does its file I/O on a maintenance thread
    # (exactly/app/engine/maintenance.py); the loop serves requests meanwhile.

    async def take_snapshots(self) -> int:
        """Snapshot producer state on every partition whose log end has no snapshot."""
        due = [log_.take_snapshot() for log_ in self._logs
               if log_.log_end_offset not in log_.snapshot_offsets()]
        await asyncio.gather(*(self.maintenance.run(steps) for steps in due))
        return len(due)

    async def apply_retention(self) -> int:
        """Delete segments past retention everywhere; returns how many went."""
        now = self.clock.now_ms()
        deleted = 0
        for log_ in self._logs:
            try:
                deleted += await self.maintenance.on_partition(log_, log_.delete_old_segments, now)
            except MaintenanceCancelledError:
                continue  # its topic is being deleted, or the broker is closing
        if deleted:
            await self.checkpoint()
        return deleted

    async def compact_logs(self) -> int:
        """One log-cleaner round on every compacted partition; returns how many segments
        were rewritten. A partition that cannot be cleaned (a damaged batch, an I/O
        error) is logged and skipped, as Kafka's cleaner skips an uncleanable
        partition; the others are still cleaned."""
        now = self.clock.now_ms()
        rewritten = 0
        moved = False
        for log_ in self._logs:
            if not log_.config.compact:
                continue
            before = log_.cleaner_state.checkpoint
            try:
                rewritten += (await self.maintenance.on_partition(log_, log_.clean, now)).segments_rewritten
            except (MaintenanceCancelledError, CleaningAbortedError):
                continue  # its topic is being deleted, or the broker is closing
            except LogDirFullError:
                continue  # the disk watch has said so once; the next round tries again
            except (KafkaError, OSError):
                log.exception("cleaning %s-%d failed", log_.topic, log_.partition)
            moved = moved or log_.cleaner_state.checkpoint != before
        if moved:
            await self.checkpoint()
        return rewritten

    def expire_producer_ids(self) -> int:
        """Forget producers idle for producer.id.expiration.ms on every partition."""
        now = self.clock.now_ms()
        return sum(len(log_.producer_state.remove_expired(now, self.config.producer_id_expiration_ms))
                   for log_ in self._logs)

    async def abort_timed_out_transactions(self) -> list[str]:
        return await self._transaction_coordinator.abort_timed_out_transactions()

    async def expire_transactional_ids(self) -> list[str]:
        return await self._transaction_coordinator.expire_transactional_ids()

    async def checkpoint(self) -> None:
        """Write the recovery-point, log-start-offset and cleaner checkpoints."""
        await self.maintenance.run(self._logs.checkpoint())

    async def persist(self, job: Job) -> None:
        """Run a short file write (``job.run()``) on the metadata thread; return once done."""
        await self.maintenance.run(_one(job))

    # -- lifecycle ------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        await self._transaction_coordinator.wait_for_completions()
        await self.maintenance.close()
        for commit in self._commits.values():
            await commit.drain()
            commit.close()

    def close(self) -> bool:
        """Finish in-flight fsyncs and maintenance, then -- with the loop stopped, on
        the calling thread -- snapshot and flush every log and release the directory.
        The directory is released whatever fails (a full disk, an offline log); returns
        whether the close was clean (if not, the next start recovers the logs)."""
        if self._closed:
            return self._closed_clean
        clean = False
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
            clean = True
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self.maintenance.stop()
            self._fsync.stop()
            self._closed_clean = self._logs.close(clean=clean)
            self._loop.close()
        return self._closed_clean

    def kill(self) -> None:
        """Stop as SIGKILL would leave the data directory (an unclean restart in place,
        ``exactly/app/server.py``). At one instant on the loop every Kafka connection is reset
        and every task cancelled; from then on no task takes another step of work. None
        of what :meth:`close` does is done: no transaction is completed, no final fsync
        (what was written is in the page cache, which a kill does not empty either), no
        producer snapshot, no checkpoint, no clean-shutdown marker -- so the next open
        recovers each log from its recovery point and rolls prepared transactions
        forward. Afterwards the loop runs only to deliver the cancellations, and the
        descriptors and the directory lock are released, as the kernel releases them
        (an index entry still buffered is written out then, where a kill would lose it:
        the indexes are sparse and derived, so that only shortens a later scan)."""
        if self._closed:
            return
        self._loop.call_soon_threadsafe(self._kill_now)
        self._thread.join()
        for _ in range(_KILL_DRAIN_ROUNDS):  # each round: cancel, then one pass of the loop
            pending = [task for task in asyncio.all_tasks(self._loop) if not task.done()]
            for task in pending:
                task.cancel()
            self._loop.call_soon(self._loop.stop)
            self._loop.run_forever()
            if not pending:
                break
        self.maintenance.stop()
        self._fsync.stop()
        self._logs.close(clean=False)
        self._loop.close()

    def _kill_now(self) -> None:
        """On the loop: the instant of the kill (see :meth:`kill`)."""
        self._closed = self._killed = True
        for connection in list(self.kafka_connections):
            connection.reset()
        for commit in self._commits.values():
            commit.close()
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.stop()


#: passes of the killed loop that deliver cancellations (a cancelled task's cleanup may
#: cancel another; a few passes settle them all)
_KILL_DRAIN_ROUNDS = 20


def _refusal(acl: AclBinding | AclBindingFilter) -> KafkaError | None:
    """Why an ACL or filter is refused (INVALID_REQUEST), None when it is not."""
    try:
        acl.validate()
    except KafkaError as e:
        return e
    return None


def _copied(info: TopicInfo) -> TopicInfo:
    """``info`` with its own overrides: a face cannot change the log manager's."""
    return dataclasses.replace(info, overrides=dict(info.overrides))


def _done(result: Any) -> Future:
    future: Future = Future()
    future.set_result(result)
    return future


def _copy_outcome(source: Future, target: Future) -> None:
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())


def _open_transaction(log_: PartitionLog, producer_id: int) -> ProducerStateEntry:
    """The producer's state on ``log_``; INVALID_TXN_STATE unless it has a transaction open there."""
    entry = log_.producer_state.producers.get(producer_id)
    if entry is None or entry.current_txn_first_offset is None:
        raise InvalidTxnStateError(
            f"producer {producer_id} has no open transaction on {log_.topic}-{log_.partition}")
    return entry


def _one(job: Job) -> Steps[Any]:
    """Steps of a single job."""
    return (yield job)


def _data_records(batch: bytes) -> tuple[Record, ...]:
    """The records of a data batch (control batches have none a coordinator loads)."""
    decoded = decode_batch(batch)
    return () if decoded.header.is_control else decoded.records
