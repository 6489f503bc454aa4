"""Produce: one record batch per partition, appended verbatim.

Every partition's batch is handed to the engine before the handler first waits, so
the batches of a connection's pipelined requests are appended in request order
(an idempotent producer's sequences depend on it) and share group commits. The
engine checks sequences and epochs (a retried batch is answered with its original
offset), the transaction coordinator that a transactional batch belongs to an
ongoing transaction on that partition. ``acks=-1`` answers once the batch is
fsynced, ``acks=1`` once it is appended, ``acks=0`` not at all -- and, as in Kafka,
an ``acks=0`` request that failed closes the connection, the only way the client
can learn of it.

v10 (KIP-951): a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
says who leads it now (``CurrentLeader``, with its endpoint in ``NodeEndpoints``),
so the client need not ask Metadata before it retries.

v11 (KIP-890): the client knows TRANSACTION_ABORTABLE, the verification's answer to a
transactional batch whose partition is not in its producer's Ongoing transaction;
older versions get INVALID_TXN_STATE, and below v12 a transaction that is completing
(CONCURRENT_TRANSACTIONS) is NOT_ENOUGH_REPLICAS, retriable without a metadata
refresh -- Kafka's ReplicaManager's translations for clients that predate them.

v13 (KIP-516) names topics by id; an id no topic has is UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from exactly.app.kafka import authorization
from exactly.app.kafka.api import (
    CLOSE,
    ApiKey,
    RequestContext,
    abortable_code,
    current_leader,
    error_code,
    node_endpoints,
    serves,
)
from exactly.app.kafka.authorization import T, X
from exactly.app.kafka.codec import millis
from exactly.coordinator import features
from exactly.storage import topic_id
from exactly.storage.errors import (
    ConcurrentTransactionsError,
    InvalidRecordError,
    KafkaError,
    NotEnoughReplicasError,
    RequestTimedOutError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicIdError,
)
from exactly.storage.partition_log import AppendResult
from exactly.storage.record_batch import read_header

log = logging.getLogger(__name__)


#: the first Produce version that knows TRANSACTION_ABORTABLE (KIP-890)
ABORTABLE_SINCE = 11
#: the first that may add its partition to the transaction (KIP-890 part 2)
IMPLICIT_ADD_SINCE = 12
#: the first that names topics by id (KIP-516)
BY_ID_SINCE = 13


@dataclass(frozen=True)
class _Topic:
    """A topic of the request: its name (None for an id no topic has) and, from v13
    (KIP-516), the id it was named by -- what its response names."""

    name: str | None
    id: uuid.UUID = topic_id.ZERO

    def __str__(self) -> str:
        return self.name if self.name is not None else topic_id.to_string(self.id)


@serves(ApiKey.PRODUCE, 3, 13)
async def produce(ctx: RequestContext, request: Any) -> Any:
    """v12 is KIP-890 part 2's: with ``transaction.version`` 2 finalized, a transactional
    batch adds its partition to the transaction itself (``Partitions.start_produce``)."""
    engine = ctx.engine
    add_to_transaction = ctx.version >= IMPLICIT_ADD_SINCE and features.implicit_add(
        engine.features.transaction_version)
    partitions = [(topic, data.index, data.records) for topic, data in _partitions(ctx, request.topic_data)]
    refused = _refusal(ctx, request.transactional_id, partitions)
    if refused is not None:
        return _response([(topic, partition, refused) for topic, partition, _ in partitions], ctx)
    writable = {topic: authorization.allowed(ctx, ApiKey.PRODUCE, T, topic.name)
                for topic, _, _ in partitions if topic.name is not None}
    started: list[tuple[_Topic, int, Any]] = []
    for topic, partition, records in partitions:
        try:
            if topic.name is None:
                raise UnknownTopicIdError(f"no topic has the id {topic}")
            if not writable[topic]:
                raise authorization.denial(T, topic.name)
            if not records:
                raise InvalidRecordError("a produce request must carry one record batch per partition")
            outcome: Any = asyncio.wrap_future(engine.partitions.start_produce(
                topic.name, partition, bytes(records), request.acks, request.transactional_id, ctx.principal,
                add_to_transaction))
        except KafkaError as e:
            outcome = e
        started.append((topic, partition, outcome))
    if request.acks == 0:
        return _no_response(ctx, started)
    pending = [outcome for _, _, outcome in started if isinstance(outcome, asyncio.Future)]
    timeout_ms = millis(request.timeout)
    if pending:
        _, late = await asyncio.wait(pending, timeout=timeout_ms / 1000 if timeout_ms > 0 else None)
        for future in late:
            future.cancel()
    return _response([(topic, partition, _result(outcome, timeout_ms)) for topic, partition, outcome in started],
                     ctx)


def _partitions(ctx: RequestContext, topic_data: Any) -> list[tuple[_Topic, Any]]:
    """Each partition's data with its topic; v13 names topics by id, which are looked up
    here (Kafka's ``handleProduceRequest``: an id no topic has is UNKNOWN_TOPIC_ID)."""
    if ctx.version < BY_ID_SINCE:
        return [(_Topic(topic.name), data) for topic in topic_data for data in topic.partition_data]
    ids = [topic.topic_id or topic_id.ZERO for topic in topic_data]  # kio reads the zero id as None
    named = ctx.engine.topics.names_by_id(ids)
    return [(_Topic(named.get(id_), id_), data) for topic, id_ in zip(topic_data, ids) for data in topic.partition_data]


def _refusal(ctx: RequestContext, transactional_id: str | None, partitions: list) -> KafkaError | None:
    """The error of the whole request, as Kafka's: transactional batches without a
    transactional id, or one the principal may not Write (the seeds' "endless
    transaction attack": a producer writing transactional data it could never end
    would hold every read_committed consumer behind the LSO)."""
    if transactional_id is None:
        if any(_is_transactional(records) for _, _, records in partitions):
            return TransactionalIdAuthorizationFailedError("transactional batches need the request's transactional id")
        return None
    if not authorization.allowed(ctx, ApiKey.PRODUCE, X, transactional_id):
        return authorization.denial(X, transactional_id)
    return None


def _is_transactional(records: bytes | None) -> bool:
    if not records:
        return False
    try:
        return read_header(records).is_transactional
    except KafkaError:
        return False  # the append reports what is wrong with it


def _result(outcome: Any, timeout_ms: int) -> AppendResult | BaseException:
    if not isinstance(outcome, asyncio.Future):
        return outcome
    if outcome.cancelled():
        return RequestTimedOutError(f"not durable within the request's timeout of {timeout_ms} ms")
    return outcome.exception() or outcome.result()


def _no_response(ctx: RequestContext, started: list[tuple[_Topic, int, Any]]) -> Any:
    failed = [(topic, partition, outcome) for topic, partition, outcome in started
              if isinstance(outcome, KafkaError)]
    if not failed:
        return None
    topic, partition, error = failed[0]
    log.warning("kafka: closing %s: its acks=0 produce to %s-%d failed: %s: %s",
                ctx.connection, topic, partition, error.name, error)
    return CLOSE


def _error(result: BaseException, version: int) -> tuple[int, str]:
    """The code and message a Produce of ``version`` answers ``result`` with: KIP-890's
    verification errors as Kafka's ReplicaManager translates them for clients that
    predate them (see the module's docstring)."""
    code = abortable_code(error_code(result), version, ABORTABLE_SINCE)
    if code == ConcurrentTransactionsError.code and version < IMPLICIT_ADD_SINCE:
        return NotEnoughReplicasError.code, ("Unable to verify the partition has been added to the transaction. "
                                             f"Underlying error: CONCURRENT_TRANSACTIONS ({result})")
    return code, str(result)


def _response(results: list[tuple[_Topic, int, AppendResult | BaseException]], ctx: RequestContext) -> dict:
    by_topic: dict[_Topic, list[dict]] = {}
    for topic, partition, result in results:
        entry: dict[str, Any]
        if isinstance(result, AppendResult):
            entry = {"index": partition, "error_code": 0, "base_offset": result.base_offset,
                     "log_append_time": result.log_append_time if result.log_append_time >= 0 else None,
                     "log_start_offset": ctx.engine.partitions.partition_offsets(
                         str(topic), partition).log_start_offset}
        else:
            code, message = _error(result, ctx.version)
            entry = {"index": partition, "error_code": code, "base_offset": -1,
                     "log_append_time": None, "error_message": message,
                     "log_start_offset": getattr(result, "log_start_offset", -1),
                     "current_leader": current_leader(ctx, code),
                     "record_errors": [{"batch_index": index, "batch_index_error_message": text}
                                       for index, text in getattr(result, "record_errors", ())]}
        by_topic.setdefault(topic, []).append(entry)
    return {"responses": [{"name": topic.name or "", "topic_id": topic.id, "partition_responses": entries}
                          for topic, entries in by_topic.items()],
            "node_endpoints": node_endpoints(ctx, (e for entries in by_topic.values() for e in entries))}
