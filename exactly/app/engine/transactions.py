"""Transactions: the transaction coordinator as the faces see it
(``exactly/coordinator/transaction_coordinator.py`` says what each request answers).

The coordinator's own operations are offered as they are; the ones a principal asks for
first pass what ``Access`` holds for it -- its rate of new producer ids, its cap on open
transactions, the producer ids handed to it. A client that keeps no state between its
calls (the HTTP API's transactional producer, one call per step) gets the steps of
Kafka's producer API in one operation each: :meth:`Transactions.produce_in_transaction`,
:meth:`Transactions.send_offsets_to_transaction`, :meth:`Transactions.end_transaction`.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Iterable, Mapping, Sequence

from exactly.app.engine.access import Access
from exactly.app.engine.partitions import Partitions
from exactly.app.security.principal import KafkaPrincipal
from exactly.coordinator import offsets_log
from exactly.coordinator.group_coordinator import GroupCoordinator
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.coordinator.internal_topics import INTERNAL_TOPICS
from exactly.coordinator.transaction_coordinator import KeptTransaction, TransactionCoordinator
from exactly.coordinator.transaction_state import TransactionState
from exactly.storage.errors import (
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaError,
    OperationNotAttemptedError,
    UnknownTopicOrPartitionError,
)
from exactly.storage.partition_log import AppendResult
from exactly.storage.record_batch import SimpleRecord, encode_batch


class Transactions:
    """The transaction coordinator's requests, with each principal's limits."""

    def __init__(self, coordinator: TransactionCoordinator, groups: GroupCoordinator, access: Access,
                 partitions: Partitions) -> None:
        #: the coordinator itself, for the engine's own read models
        self.coordinator = coordinator
        self._groups = groups
        self._access = access
        self._partitions = partitions
        # the coordinator's operations that need nothing of the asker, as they are
        self.end_txn = coordinator.end_txn
        self.abort_transaction = coordinator.admin_abort
        self.fence_producer = coordinator.fence
        self.time_out_transaction = coordinator.time_out
        self.describe_transaction = coordinator.describe
        self.list_transactions = coordinator.list_transactions
        self.transactional_id_of = coordinator.transactional_id_of

    def is_open(self, transactional_id: str) -> bool:
        """Whether the id has a transaction in progress (Ongoing or completing)."""
        meta = self.coordinator.describe(transactional_id)
        return meta is not None and meta.state.is_open

    async def init_producer_id(self, transactional_id: str | None, transaction_timeout_ms: int,
                               producer_id: int = -1, producer_epoch: int = -1,
                               enable_2pc: bool = False, principal: KafkaPrincipal | None = None
                               ) -> tuple[int, int]:
        """A producer id and epoch; for a ``principal`` (a Kafka client's) within its
        producer-id rate, and then its own (``Access.check_producer_owner``)."""
        if principal is not None:
            self._access.check_producer_id_rate(principal)
        handed_out = await self.coordinator.init_producer_id(
            transactional_id, transaction_timeout_ms, producer_id, producer_epoch, enable_2pc)
        await self._access.bind_producer(handed_out[0], principal)
        return handed_out

    async def keep_prepared_transaction(self, transactional_id: str, principal: KafkaPrincipal | None = None
                                        ) -> KeptTransaction | None:
        """KIP-939 keepPreparedTxn; the producer id it hands out becomes ``principal``'s, as
        after any InitProducerId: whoever takes over the prepared transaction completes it
        and writes the next ones."""
        kept = await self.coordinator.keep_prepared_transaction(transactional_id)
        if kept is not None:
            await self._access.bind_producer(kept.producer_id, principal)
        return kept

    async def add_partitions_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                    partitions: Iterable[tuple[str, int]], principal: KafkaPrincipal | None = None
                                    ) -> dict[tuple[str, int], KafkaError | None]:
        with self._access.admitted(principal, transactional_id):
            return await self.coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions)

    async def add_partitions_for_broker(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                        partitions: Iterable[tuple[str, int]], verify_only: bool,
                                        principal: KafkaPrincipal | None = None
                                        ) -> dict[tuple[str, int], KafkaError | None]:
        """AddPartitionsToTxn v4+, the brokers' form (KIP-890): ``verify_only`` answers
        whether each partition is in the producer's Ongoing transaction (Kafka's
        ``handleVerifyPartitionsInTransaction``: TRANSACTION_ABORTABLE if not), else the
        partitions are added as transaction version 2 adds them. Partitions that do not
        exist: UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED."""
        wanted = list(dict.fromkeys(partitions))
        if not all(self._partitions.has_partition(*tp) for tp in wanted):
            return {tp: OperationNotAttemptedError("another partition of the transaction does not exist")
                    if self._partitions.has_partition(*tp) else
                    UnknownTopicOrPartitionError(f"{tp[0]}-{tp[1]} does not exist") for tp in wanted}
        if verify_only:
            errors: dict[tuple[str, int], KafkaError | None] = {}
            for topic, partition in wanted:
                try:
                    self.coordinator.verify_transaction(producer_id, producer_epoch, topic, partition,
                                                        transactional_id)
                    errors[topic, partition] = None
                except KafkaError as e:
                    errors[topic, partition] = e
            return errors
        with self._access.admitted(principal, transactional_id):
            await self.coordinator.add_partitions_implicitly(producer_id, producer_epoch, wanted, transactional_id)
        return {tp: None for tp in wanted}

    async def add_offsets_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 group_id: str, principal: KafkaPrincipal | None = None) -> tuple[str, int]:
        with self._access.admitted(principal, transactional_id):
            return await self.coordinator.add_offsets(transactional_id, producer_id, producer_epoch, group_id)

    async def txn_offset_commit(self, transactional_id: str, group_id: str, producer_id: int,
                                producer_epoch: int, offsets: dict[tuple[str, int], CommittedOffset],
                                generation: int = -1, member_id: str = "", group_instance_id: str | None = None,
                                principal: KafkaPrincipal | None = None, add_to_transaction: bool = False
                                ) -> dict[tuple[str, int], KafkaError | None]:
        """TxnOffsetCommit: the group coordinator keeps the offsets pending until the
        marker. ``add_to_transaction`` (v5, transaction version 2): the group's
        ``__consumer_offsets`` partition joins the transaction first, as AddOffsetsToTxn
        would have added it."""
        if principal is not None:
            self._access.check_producer_owner(producer_id, principal, transactional=True)
        if add_to_transaction:
            with self._access.admitted(principal, transactional_id):
                await self.coordinator.add_partition_implicitly(
                    producer_id, producer_epoch, offsets_log.TOPIC, self._groups.partition_of(group_id),
                    transactional_id)
        return await self._groups.txn_commit_offsets(
            transactional_id, group_id, producer_id, producer_epoch, offsets, generation, member_id,
            group_instance_id)

    # -- the producer API's steps, for a client that keeps no state between calls --------------

    async def produce_in_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                     records: Sequence[tuple[str, int, SimpleRecord]]) -> list[tuple[str, int, int]]:
        """Add the records' partitions to the transaction, then append each record as the
        producer's next sequence on its partition: started in one go, in order, so the
        sequences are consecutive and one group commit makes them durable. Returns each
        record's (topic, partition, offset)."""
        for topic, _, _ in records:
            if topic in INTERNAL_TOPICS:
                raise InvalidTopicError(f"clients may not produce to the internal topic {topic}")
        raise_first(await self.add_partitions_to_txn(transactional_id, producer_id, producer_epoch,
                                                     {(t, p) for t, p, _ in records}))
        futures = [self._start_append(t, p, r, producer_id, producer_epoch) for t, p, r in records]
        results: list[AppendResult] = [await asyncio.wrap_future(f) for f in futures]
        return [(t, p, result.base_offset) for (t, p, _), result in zip(records, results)]

    def _start_append(self, topic: str, partition: int, record: SimpleRecord, producer_id: int,
                      producer_epoch: int) -> "Future[AppendResult]":
        """The producer's next sequence and the append, with nothing between."""
        sequence = self._partitions.next_sequence(topic, partition, producer_id, producer_epoch)
        batch = encode_batch([record], producer_id=producer_id, producer_epoch=producer_epoch,
                             base_sequence=sequence, transactional=True)
        return self._partitions.start_produce(topic, partition, batch)

    async def send_offsets_to_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                          group_id: str, offsets: Mapping[tuple[str, int], CommittedOffset],
                                          generation: int = -1, member_id: str = "",
                                          group_instance_id: str | None = None) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit of ``offsets`` (partitions that exist)."""
        for topic, partition in offsets:
            if not self._partitions.has_partition(topic, partition):
                raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        await self.add_offsets_to_txn(transactional_id, producer_id, producer_epoch, group_id)
        raise_first(await self.txn_offset_commit(transactional_id, group_id, producer_id, producer_epoch,
                                                 dict(offsets), generation, member_id, group_instance_id))

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool) -> None:
        """EndTxn; a transaction nothing was added to (Empty, this producer's id and epoch)
        has nothing to end, as a Kafka client then sends no EndTxn at all."""
        try:
            await self.end_txn(transactional_id, producer_id, producer_epoch, commit)
        except InvalidTxnStateError:
            meta = self.coordinator.describe(transactional_id)
            if not (meta and meta.state is TransactionState.EMPTY and
                    (meta.producer_id, meta.producer_epoch) == (producer_id, producer_epoch)):
                raise


def raise_first(errors: Mapping[tuple[str, int], KafkaError | None]) -> None:
    """Raise the error that explains a per-partition answer (not OPERATION_NOT_ATTEMPTED)."""
    found = [e for e in errors.values() if e is not None]
    if found:
        raise next((e for e in found if not isinstance(e, OperationNotAttemptedError)), found[0])
