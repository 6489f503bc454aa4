"""The record accumulator: where the embedded producer's records wait to be sent.

As in Kafka's ``RecordAccumulator``, ``send()`` appends each record, encoded at once
(``exactly.storage.record_batch.encode_record``), to the open batch of its partition. A
batch is *ready* when it is full (``batch.size`` bytes, or a record that does not fit
has started the next one), when ``linger.ms`` has passed since it was created, or at
once when the producer flushes, closes or runs out of ``buffer.memory``. Draining
moves a ready batch from the head of its partition's queue to the partition's
in-flight list, which holds at most ``max.in.flight.requests.per.connection``
batches; an idempotent producer fixes the batch's first sequence then, per partition
and in queue order, so the sequences of a partition are contiguous.

A batch that must go again (a retriable error, or a sequence error behind a batch
that failed) returns to the front of its queue in sequence order (Kafka's
``insertInSequenceOrder``) and keeps its producer id, epoch and sequence unless the
epoch is bumped; its partition then sends nothing until every batch in flight is
back, so the broker, which appends a partition's batches in the order they arrive,
sees them in sequence order again.

Each record's future (:class:`FutureRecordMetadata`) shares its batch's
:class:`ProduceRequestResult`: one event per batch, not one per record.

Nothing here locks: the producer holds its lock around every call.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Callable, Sequence

from exactly.app.client.types import RecordMetadata
from exactly.storage.compression import Compression
from exactly.storage.errors import KafkaError
from exactly.storage.record_batch import HEADER_SIZE, MAX_SEQUENCE, NO_SEQUENCE, encode_record, pack_records

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: ``on_delivery(error, metadata)``: error None and the record's metadata, or the error and None
DeliveryCallback = Callable[[BaseException | None, RecordMetadata | None], None]


class ProduceRequestResult:
    """The outcome of one batch, shared by the futures of all its records (Kafka's name)."""

    __slots__ = ("_event", "base_offset", "log_append_time", "error")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None

    def set(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        self.base_offset, self.log_append_time, self.error = base_offset, log_append_time, error
        self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def is_set(self) -> bool:
        return self._event.is_set()


class FutureRecordMetadata:
    """What ``send()`` returns at once: the record's :class:`RecordMetadata` once its
    batch is acknowledged, or the Kafka error that failed it (kafka-python's name and
    ``get``)."""

    __slots__ = ("_result", "_relative_offset", "_timestamp", "_topic", "_partition")

    def __init__(self, result: ProduceRequestResult, relative_offset: int, timestamp: int,
                 topic: str, partition: int) -> None:
        self._result = result
        self._relative_offset = relative_offset
        self._timestamp = timestamp
        self._topic = topic
        self._partition = partition

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Where the record went; raises the error that failed it, or ``TimeoutError``
        if ``timeout`` seconds pass first (the record may still be delivered)."""
        if not self._result.wait(timeout):
            raise TimeoutError(f"the record to {self._topic}-{self._partition} was not "
                               f"acknowledged within {timeout} s")
        error = self._result.error
        if error is not None:
            raise error.with_traceback(None)
        return self._metadata()

    def done(self) -> bool:
        return self._result.is_set()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error that failed the record, None if it was delivered (waits like ``get``)."""
        try:
            self.get(timeout)
        except TimeoutError:
            raise
        except BaseException as e:  # the delivery error is the answer here
            return e
        return None

    def _metadata(self) -> RecordMetadata:
        result = self._result
        timestamp = result.log_append_time if result.log_append_time != -1 else self._timestamp
        return RecordMetadata(self._topic, self._partition, result.base_offset + self._relative_offset,
                              timestamp)


class ProducerBatch:
    """Records bound for one partition, sent and acknowledged together as one v2 batch."""

    __slots__ = ("topic", "partition", "serial", "created", "deadline", "records", "size",
                 "base_timestamp", "max_timestamp", "closed", "result", "callbacks", "producer_id",
                 "producer_epoch", "base_sequence", "retry_at", "last_error", "_encoded")

    def __init__(self, topic: str, partition: int, serial: int, now: float,
                 delivery_timeout_s: float) -> None:
        self.topic = topic
        self.partition = partition
        self.serial = serial  # creation order: records' order, and their sequences' order
        self.created = now
        self.deadline = now + delivery_timeout_s  # delivery.timeout.ms counts from creation
        self.records: list[bytes] = []
        self.size = HEADER_SIZE
        self.base_timestamp = self.max_timestamp = -1
        self.closed = False  # no more records: full, or drained
        self.result = ProduceRequestResult()
        self.callbacks: list[tuple[FutureRecordMetadata, DeliveryCallback]] = []
        self.producer_id = self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE
        self.retry_at = 0.0
        #: the retriable error the broker last answered it with (what its expiry reports)
        self.last_error: KafkaError | None = None
        self._encoded: bytes | None = None

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def tp(self) -> TopicPartition:
        return self.topic, self.partition

    def try_append(self, timestamp: int, key: bytes | None, value: bytes | None,
                   headers: Sequence[tuple[str, bytes | None]], on_delivery: DeliveryCallback | None,
                   batch_size: int) -> FutureRecordMetadata | None:
        """Add one record, or None (and close the batch) if it would pass ``batch_size``;
        the first record always goes in, however large."""
        count = len(self.records)
        if not count:
            self.base_timestamp = self.max_timestamp = timestamp
        record = encode_record(count, timestamp - self.base_timestamp, key, value, headers)
        if count and self.size + len(record) > batch_size:
            self.closed = True
            return None
        self.records.append(record)
        self.size += len(record)
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        if self.size >= batch_size:
            self.closed = True
        future = FutureRecordMetadata(self.result, count, timestamp, self.topic, self.partition)
        if on_delivery is not None:
            self.callbacks.append((future, on_delivery))
        return future

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        if (producer_id, producer_epoch, base_sequence) != (
                self.producer_id, self.producer_epoch, self.base_sequence):
            self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence
            self._encoded = None

    def encode(self, transactional: bool, compression: Compression) -> bytes:
        """The batch as the broker gets it (kept for retries with the same producer state)."""
        if self._encoded is None:
            self._encoded = pack_records(
                self.records, base_timestamp=self.base_timestamp, max_timestamp=self.max_timestamp,
                producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence, transactional=transactional, compression=compression)
        return self._encoded

    def complete(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        """Settle every record's future, then run the delivery callbacks in record order."""
        self.result.set(base_offset, log_append_time, error)
        for future, callback in self.callbacks:
            try:
                if error is None:
                    callback(None, future._metadata())
                else:
                    callback(error, None)
            except Exception:  # one application callback must not stop the others or the sender
                log.exception("on_delivery callback for %s-%s failed", self.topic, self.partition)


class PartitionQueue:
    """One partition's batches: waiting (the last one may be open), in flight, and the
    idempotent producer's sequence state for it (Kafka's deque + ``TxnPartitionEntry``)."""

    __slots__ = ("batches", "in_flight", "next_sequence", "resend", "sequence_unknown")

    def __init__(self) -> None:
        self.batches: deque[ProducerBatch] = deque()
        self.in_flight: list[ProducerBatch] = []
        self.next_sequence = 0
        #: a batch went back to the queue: nothing more goes until every in-flight batch is back
        self.resend = False
        #: a batch with a sequence failed or expired: where the partition's sequence stands is
        #: unknown until the epoch is bumped
        self.sequence_unknown = False

    def open_batch(self) -> ProducerBatch | None:
        batch = self.batches[-1] if self.batches else None
        return batch if batch is not None and not batch.closed else None

    def assign_sequence(self, batch: ProducerBatch, producer_id: int, producer_epoch: int) -> None:
        """Fix the batch's first sequence, unless it has one under this producer id and epoch."""
        if (batch.base_sequence != NO_SEQUENCE and batch.producer_id == producer_id
                and batch.producer_epoch == producer_epoch):
            return
        batch.set_producer_state(producer_id, producer_epoch, self.next_sequence)
        self.next_sequence = (self.next_sequence + batch.record_count) % (MAX_SEQUENCE + 1)

    def reset_sequences(self) -> None:
        """A new epoch (or producer id): every partition starts again at sequence 0."""
        self.next_sequence = 0
        self.resend = False
        self.sequence_unknown = False


class RecordAccumulator:
    """Every partition's queue, and the totals flush, close and ``buffer.memory`` need."""

    def __init__(self, batch_size: int, linger_s: float, delivery_timeout_s: float,
                 max_in_flight: int) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.delivery_timeout_s = delivery_timeout_s
        self.max_in_flight = max_in_flight
        self.queues: dict[TopicPartition, PartitionQueue] = {}
        #: every batch not yet completed, queued or in flight (Kafka's IncompleteBatches)
        self.incomplete: set[ProducerBatch] = set()
        #: bytes held by incomplete batches, against buffer.memory
        self.buffered = 0
        self.in_flight = 0
        #: flushes (and sends waiting for buffer memory) in progress: every batch is ready
        #: meanwhile (Kafka's ``flushesInProgress``)
        self.flushes_in_progress = 0
        self._serial = 0

    @property
    def flush_in_progress(self) -> bool:
        return self.flushes_in_progress > 0

    def reset_sequences(self) -> None:
        """A new producer id or epoch: every partition's sequences start again at 0."""
        for queue in self.queues.values():
            queue.reset_sequences()

    def queue(self, tp: TopicPartition) -> PartitionQueue:
        queue = self.queues.get(tp)
        if queue is None:
            queue = self.queues[tp] = PartitionQueue()
        return queue

    def append(self, tp: TopicPartition, timestamp: int, key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes | None]], on_delivery: DeliveryCallback | None,
               now: float) -> tuple[FutureRecordMetadata, PartitionQueue, bool]:
        """Add a record to the partition's open batch, or to a new one; returns its future,
        the queue, and whether a batch was created."""
        queue = self.queue(tp)
        batch = queue.batches[-1] if queue.batches else None
        if batch is not None and not batch.closed:
            before = batch.size
            future = batch.try_append(timestamp, key, value, headers, on_delivery, self.batch_size)
            if future is not None:
                self.buffered += batch.size - before
                return future, queue, False
        self._serial += 1
        batch = ProducerBatch(tp[0], tp[1], self._serial, now, self.delivery_timeout_s)
        future = batch.try_append(timestamp, key, value, headers, on_delivery, self.batch_size)
        assert future is not None  # the first record always fits
        queue.batches.append(batch)
        self.incomplete.add(batch)
        self.buffered += batch.size
        return future, queue, True

    def is_ready(self, batch: ProducerBatch, now: float, force: bool) -> bool:
        return batch.closed or force or now >= batch.created + self.linger_s

    def drain(self, queue: PartitionQueue, now: float, force: bool) -> list[ProducerBatch]:
        """Move the ready batches at the head of ``queue`` into flight, up to the limit."""
        if queue.resend:
            if queue.in_flight:
                return []
            queue.resend = False
        drained = []
        while queue.batches and len(queue.in_flight) < self.max_in_flight:
            batch = queue.batches[0]
            if batch.retry_at > now or not self.is_ready(batch, now, force):
                break
            batch.closed = True
            queue.in_flight.append(queue.batches.popleft())
            drained.append(batch)
        self.in_flight += len(drained)
        return drained

    def landed(self, queue: PartitionQueue, batch: ProducerBatch) -> bool:
        """Take an answered batch out of flight; False if it had already expired."""
        try:
            queue.in_flight.remove(batch)
        except ValueError:
            return False
        self.in_flight -= 1
        return True

    def reenqueue(self, queue: PartitionQueue, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch that must go again back in its queue, in creation (so sequence)
        order; the partition then waits for everything in flight before sending again."""
        batch.retry_at = retry_at
        position = next((i for i, queued in enumerate(queue.batches) if queued.serial > batch.serial),
                        len(queue.batches))
        queue.batches.insert(position, batch)
        queue.resend = True

    def has_earlier(self, queue: PartitionQueue, batch: ProducerBatch) -> bool:
        """Whether a batch created before ``batch`` is still in flight or waiting to go
        again (so a sequence error of ``batch`` is that batch's doing, not its own)."""
        return any(other.serial < batch.serial for other in (*queue.in_flight, *queue.batches))

    def done(self, batch: ProducerBatch) -> None:
        """The batch is complete: it no longer counts for flush or buffer.memory."""
        self.incomplete.discard(batch)
        self.buffered -= batch.size

    def expire(self, now: float) -> list[tuple[PartitionQueue, ProducerBatch, bool]]:
        """Remove every batch past its delivery deadline; ``(queue, batch, was in flight)``
        for each (the oldest batches are at the front of each list, so only those are read)."""
        expired = []
        for queue in self.queues.values():
            while queue.in_flight and queue.in_flight[0].deadline <= now:
                expired.append((queue, queue.in_flight.pop(0), True))
                self.in_flight -= 1
            while queue.batches and queue.batches[0].deadline <= now:
                expired.append((queue, queue.batches.popleft(), False))
        return expired

    def abort_undrained(self) -> list[tuple[PartitionQueue, ProducerBatch]]:
        """Remove every batch that is not in flight."""
        aborted = [(queue, batch) for queue in self.queues.values() for batch in queue.batches]
        for queue in self.queues.values():
            queue.batches.clear()
        return aborted

    def abort_all(self) -> list[ProducerBatch]:
        """Remove every incomplete batch, in flight or not (a forced close)."""
        batches = list(self.incomplete)
        for queue in self.queues.values():
            queue.batches.clear()
            queue.in_flight.clear()
        self.in_flight = 0
        return batches

    def next_timer(self, now: float, force: bool) -> float | None:
        """When something needs the sender without anything waking it: a batch's linger
        or retry backoff ending, or the first delivery deadline. Called right after a
        drain at the same ``now``: a ready batch still here waits for an answer (the
        in-flight limit) or for the sender's own work (an epoch bump, partitions to add)."""
        times = []
        for queue in self.queues.values():
            if queue.batches:
                head = queue.batches[0]
                if head.retry_at > now:
                    times.append(head.retry_at)
                elif not self.is_ready(head, now, force):
                    times.append(head.created + self.linger_s)
                times.append(head.deadline)
            if queue.in_flight:
                times.append(queue.in_flight[0].deadline)
        return min(times) if times else None
