"""The producer's sender (Kafka's ``Sender``): one thread per producer that sends the
batches the accumulator says are ready, completes the ones the engine answered,
retries or fails them, expires late ones, adds partitions to the transaction and
bumps an idempotent producer's epoch (KIP-360). See :mod:`exactly.app.client.producer` for
the delivery guarantees this implements.

The sender shares the producer's lock, which guards the accumulator and the
transaction manager; it never holds it while it waits for the engine. The engine's
loop only hands answers over (:meth:`Sender.answered`); callbacks run on the sender
thread, outside the lock.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from exactly.app.client.partitioner import BuiltInPartitioner
from exactly.app.client.record_accumulator import PartitionQueue, ProducerBatch, RecordAccumulator, TopicPartition
from exactly.app.client.transaction_manager import FATAL_ERRORS, State, TransactionManager
from exactly.app.client.types import TransactionAbortedError
from exactly.storage.compression import Compression
from exactly.storage.errors import (
    KafkaError,
    KafkaStorageError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    UnknownProducerIdError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from exactly.app.engine import Engine

log = logging.getLogger(__name__)

#: backoff between coordinator retries (Kafka retries CONCURRENT_TRANSACTIONS this fast)
COORDINATOR_BACKOFF_S = 0.02
#: a sender thread with nothing to do for this long ends; the next send starts another
SENDER_IDLE_S = 1.0
#: the broker refused the batch for its sequence: it was not appended
SEQUENCE_ERRORS = (OutOfOrderSequenceNumberError, UnknownProducerIdError)
_STOP = object()

#: a batch to complete outside the lock: (batch, base offset, log append time, error)
Outcome = tuple[ProducerBatch, int, int, "BaseException | None"]


@dataclass(frozen=True)
class SenderConfig:
    """The producer settings the sender acts on."""

    acks: int
    compression: Compression
    delivery_timeout_s: float
    retry_backoff_s: float


def complete(outcomes: list[Outcome]) -> None:
    """Settle futures and run callbacks, outside the lock."""
    for batch, base_offset, log_append_time, error in outcomes:
        batch.complete(base_offset, log_append_time, error)


class Sender:
    """Kafka's Sender for one producer: its thread starts on demand and ends when idle."""

    def __init__(self, engine: "Engine", config: SenderConfig, accumulator: RecordAccumulator,
                 txn: TransactionManager, partitioner: BuiltInPartitioner, lock: threading.Lock,
                 changed: threading.Condition) -> None:
        self.engine = engine
        self.config = config
        self.acc = accumulator
        self.txn = txn
        self.partitioner = partitioner
        self._lock = lock
        self._changed = changed
        self._wakeups: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._wake_at = float("inf")

    # -- waking and stopping ------------------------------------------------------------------

    def wake(self) -> None:
        self._wakeups.put(None)

    def complete_later(self, outcomes: list[Outcome]) -> None:
        """Hand outcomes found under the lock to the sender thread to complete."""
        if outcomes:
            self._wakeups.put(outcomes)

    def in_sender_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def needed(self, partition_queue: PartitionQueue) -> bool:
        """A batch was created (under the lock): start the thread if it is not running; True
        if it must wake up earlier than it planned to (for the new batch's linger)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="exactly-producer-sender", daemon=True)
            self._thread.start()
            return False  # it plans its first wake-up itself
        batch = partition_queue.open_batch()
        return batch is not None and batch.created + self.acc.linger_s < self._wake_at

    def stop(self) -> None:
        """End the thread (it completes nothing more); joins it unless called from it."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._wakeups.put(_STOP)
            if thread is not threading.current_thread():
                thread.join()

    def wait_until_quiet(self) -> None:
        """Wait until no batch is in flight and no partition is being added (each batch
        in flight is answered or expires by its delivery deadline)."""
        self.wake()
        with self._lock:
            while self.acc.in_flight or self.txn.adding:
                self._changed.wait(self.config.delivery_timeout_s)

    # -- sending (under the lock) ------------------------------------------------------------

    def drain_all(self, now: float) -> list[Outcome]:
        failed: list[Outcome] = []
        for tp, partition_queue in self.acc.queues.items():
            failed += self.drain(tp, partition_queue, now)
        return failed

    def drain(self, tp: TopicPartition, partition_queue: PartitionQueue, now: float) -> list[Outcome]:
        """Send the partition's ready batches, if it may send; submitted in sequence
        order under the lock, so the engine gets them in that order."""
        if not partition_queue.batches or not self.txn.may_send(tp):
            return []
        failed: list[Outcome] = []
        for batch in self.acc.drain(partition_queue, now, self.acc.flush_in_progress):
            if self.txn.idempotent:
                partition_queue.assign_sequence(batch, self.txn.producer_id, self.txn.producer_epoch)
            data = batch.encode(self.txn.transactional, self.config.compression)
            try:
                future = self.engine.submit(self.engine.partitions.start_produce, batch.topic, batch.partition,
                                            data, self.config.acks, None, None, self.txn.implicit_adds)
            except (KafkaError, RuntimeError) as e:  # the engine (or its loop) is closed: nothing will go
                error = e if isinstance(e, KafkaError) else KafkaStorageError(f"the broker is closed: {e}")
                self.acc.landed(partition_queue, batch)
                self.acc.done(batch)
                self.txn.set_fatal(error)
                failed.append((batch, -1, -1, error))
                continue
            future.add_done_callback(functools.partial(self.answered, batch))
        return failed

    def answered(self, batch: ProducerBatch, future: Future) -> None:
        """On the engine's loop: hand the answer to the sender thread, nothing more."""
        self._wakeups.put((batch, future))

    def abort_undrained(self, error: BaseException) -> list[Outcome]:
        """Fail every batch not in flight (the transaction is failing or aborting)."""
        outcomes: list[Outcome] = []
        for partition_queue, batch in self.acc.abort_undrained():
            self.acc.done(batch)
            if batch.producer_id >= 0:  # it went out before and came back: sequence unknown
                partition_queue.sequence_unknown = True
                self.txn.bump_required = True
            outcomes.append((batch, -1, -1, error))
        return outcomes

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        """Complete answered batches, expire late ones, add partitions to the transaction,
        bump the epoch, and send what becomes ready."""
        while True:
            with self._lock:  # send what is ready, then sleep until the next batch will be
                now = time.monotonic()
                failed = self.drain_all(now)
                timer = self.acc.next_timer(now, self.acc.flush_in_progress)
                self._wake_at = timer if timer is not None else float("inf")
            complete(failed)
            wait = SENDER_IDLE_S if timer is None else max(0.0, timer - now)
            items = []
            try:
                items.append(self._wakeups.get(timeout=wait))
                while True:
                    items.append(self._wakeups.get_nowait())
            except queue.Empty:
                pass
            if _STOP in items:
                return
            if not items and timer is None and self._stop_when_idle():
                return
            try:
                self._round(items)
            except Exception:  # a bug must not stop every later delivery: batches still expire
                log.exception("a round of the producer's sender failed")

    def _stop_when_idle(self) -> bool:
        with self._lock:
            if self.acc.incomplete or not self._wakeups.empty():
                return False
            if self.in_sender_thread():
                self._thread = None
            return True

    def _round(self, items: list[Any]) -> None:
        """Everything but sending (the loop sends next, under the same lock as its timer)."""
        outcomes: list[Outcome] = []
        with self._lock:
            now = time.monotonic()
            for item in items:
                if isinstance(item, tuple):  # (batch, engine future): the engine answered
                    batch, future = item
                    outcomes += self._landed(batch, future, now)
                elif item is not None:  # outcomes found under the lock by a sending thread
                    outcomes += item
            outcomes += self._expire(now)
            if self.txn.state in (State.ABORTABLE_ERROR, State.ABORTING_TRANSACTION, State.FATAL_ERROR):
                outcomes += self.abort_undrained(self.txn.error or TransactionAbortedError())
            self._changed.notify_all()
        complete(outcomes)
        self._add_partitions()
        self._bump_idempotent_epoch()

    def _landed(self, batch: ProducerBatch, future: Future, now: float) -> list[Outcome]:
        """The engine answered a batch: done, sent again, or failed (under the lock)."""
        partition_queue = self.acc.queue(batch.tp)
        if not self.acc.landed(partition_queue, batch):
            return []  # it expired while in flight; its future failed then
        error = future.exception()
        if error is None:
            result = future.result()
            self.acc.done(batch)
            return [(batch, result.base_offset, result.log_append_time, None)]
        if self._send_again(partition_queue, batch, error, now):
            return []
        if isinstance(error, UnknownTopicOrPartitionError):
            self.partitioner.forget(batch.topic)
        return [self._failed(partition_queue, batch, error)]

    def _send_again(self, partition_queue: PartitionQueue, batch: ProducerBatch, error: BaseException,
                    now: float) -> bool:
        """Put the batch back in its queue if it can still be delivered without a duplicate."""
        if not self.txn.may_retry():
            return False
        if isinstance(error, SEQUENCE_ERRORS):
            # refused, so not appended: either a batch before it is being sent again or
            # failed, or (idempotent only) the partition lost track of us (KIP-360: bump)
            if not (partition_queue.sequence_unknown or self.acc.has_earlier(partition_queue, batch)):
                if self.txn.transactional:
                    return False
                self.txn.bump_required = True
            self.acc.reenqueue(partition_queue, batch, now)
            return True
        if isinstance(error, KafkaError) and error.retriable and now < batch.deadline:
            batch.last_error = error
            self.acc.reenqueue(partition_queue, batch, now + self.config.retry_backoff_s)
            return True
        return False

    def _failed(self, partition_queue: PartitionQueue, batch: ProducerBatch,
                error: BaseException) -> Outcome:
        """A batch that will not be delivered (under the lock): if it went out, where the
        partition's sequence stands is unknown (KIP-360)."""
        self.acc.done(batch)
        if self.txn.idempotent and batch.producer_id >= 0:
            partition_queue.sequence_unknown = True
            self.txn.bump_required = True
        if isinstance(error, KafkaError):
            error = self.txn.fail(error)
        return batch, -1, -1, error

    def _expire(self, now: float) -> list[Outcome]:
        return [self._failed(partition_queue, batch, self._expiry_error(batch, now))
                for partition_queue, batch, _ in self.acc.expire(now)]

    def _expiry_error(self, batch: ProducerBatch, now: float) -> KafkaError:
        """REQUEST_TIMED_OUT -- or, for a batch the broker kept refusing with a retriable
        error, that error (KAFKA_STORAGE_ERROR while the disk is full): it is why the
        batch is late, and what the caller can act on, as Kafka's Sender fails a batch
        whose delivery timeout ran out on a retriable answer with the broker's error."""
        message = (f"expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
                   f"{now - batch.created:.3f} s have passed since the batch was created "
                   f"(delivery_timeout_ms={self.config.delivery_timeout_s * 1000:.0f})")
        if batch.last_error is None:
            return RequestTimedOutError(message)
        return type(batch.last_error)(f"{message}; the broker last answered {batch.last_error.name}: "
                                      f"{batch.last_error}")

    # -- requests to the coordinator ------------------------------------------------------------

    def _add_partitions(self) -> None:
        """AddPartitionsToTxn for every partition a send of this transaction went to."""
        with self._lock:
            partitions = self.txn.start_adding()
        if partitions is None:
            return
        error: KafkaError | None = None
        try:
            errors = self.call_coordinator(self.engine.transactions.add_partitions_to_txn,
                                           self.txn.transactional_id, self.txn.producer_id,
                                           self.txn.producer_epoch, partitions)
            error = next((e for e in errors.values() if e is not None), None)
        except KafkaError as e:
            error = e
        with self._lock:
            self.txn.added(partitions, error)
            self._changed.notify_all()

    def _bump_idempotent_epoch(self) -> None:
        """KIP-360 for an idempotent producer: once nothing is in flight, the next epoch
        (or a new producer id once the epoch is Short.MAX_VALUE) and every sequence from 0."""
        with self._lock:
            if self.txn.transactional or not self.txn.bump_required or self.acc.in_flight:
                return
            if self.txn.bump_idempotent_epoch():
                self.acc.reset_sequences()
                return
        try:
            producer_id, epoch = self.call_coordinator(self.engine.transactions.init_producer_id,
                                                       None, -1)
        except KafkaError as e:
            with self._lock:
                self.txn.set_fatal(e)
            return
        with self._lock:
            self.reset_producer(producer_id, epoch)

    def reset_producer(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch (under the lock): every sequence starts again at 0."""
        self.txn.set_producer_id_and_epoch(producer_id, producer_epoch)
        self.acc.reset_sequences()

    def call_coordinator(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a coordinator coroutine, retrying retriable errors until the delivery
        timeout; a fatal error makes the producer fatal (and is raised as ProducerFenced
        when it is a stale epoch)."""
        deadline = time.monotonic() + self.config.delivery_timeout_s
        while True:
            try:
                return self.engine.call(fn, *args, timeout=self.config.delivery_timeout_s)
            except KafkaError as e:
                if e.retriable and time.monotonic() + COORDINATOR_BACKOFF_S < deadline:
                    time.sleep(COORDINATOR_BACKOFF_S)  # Kafka's retry.backoff.ms, against a broker that said "retry"
                    continue
                if isinstance(e, FATAL_ERRORS):
                    with self._lock:
                        fenced = self.txn.set_fatal(e)
                    raise fenced from e
                raise
