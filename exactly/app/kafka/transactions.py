"""Transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and
TxnOffsetCommit go to the coordinators; ListTransactions, DescribeTransactions and
DescribeProducers show their state (the operator APIs of KIP-664).

The coordinators decide everything (``exactly/coordinator/transaction_coordinator.py``
lists every answer); here only the version rule of the wire is applied: a fenced
producer hears PRODUCER_FENCED only from request versions that know that error
(InitProducerId v4+, AddPartitionsToTxn / AddOffsetsToTxn / EndTxn v2+), and
INVALID_PRODUCER_EPOCH from older ones -- librdkafka sends AddPartitionsToTxn and
AddOffsetsToTxn at v0, aiokafka everything at v0.

Transaction version 2 (KIP-890 part 2) is chosen per request, as Kafka chooses it: EndTxn
v5 bumps the epoch and answers it (whatever the finalized ``transaction.version``);
TxnOffsetCommit v5 adds the group's partition itself when ``transaction.version`` 2 is
finalized (``exactly/coordinator/features.py``), as Produce v12 adds its partition.

WriteTxnMarkers from a client is Kafka's partition-level abort (KIP-664's
``Admin.abortTransaction``): the open transaction is ended through
``Partitions.abort_hanging_transaction``; a COMMIT marker is refused.
"""

from __future__ import annotations

import re
from typing import Any

from exactly.app.engine import read_models
from exactly.app.kafka import authorization
from exactly.app.kafka.api import ApiKey, RequestContext, abortable_code, error_code, fenced_code, serves
from exactly.app.kafka.authorization import C, G, T, X
from exactly.app.kafka.codec import millis
from exactly.app.kafka.offsets import by_topic, commit_results, refused_offsets, requested_offsets
from exactly.app.security.acl import CLUSTER_NAME, AclOperation
from exactly.coordinator import features
from exactly.coordinator.transaction_state import TransactionState
from exactly.storage.errors import (
    ClusterAuthorizationFailedError,
    InvalidProducerEpochError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    KafkaError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)


@serves(ApiKey.INIT_PRODUCER_ID, 0, 6)
async def init_producer_id(ctx: RequestContext, request: Any) -> dict:
    """A producer id and epoch; v3+ may name the current ones to have the epoch bumped
    (KIP-360), which is how a producer recovers from an abortable idempotence error;
    v6 carries KIP-939's two-phase commit: enable2Pc, and keepPreparedTxn, which keeps
    an Ongoing prepared transaction, fences its writer with a bumped epoch, and
    answers that epoch and (OngoingTxn*) the pair the transaction was written with."""
    coordinator = ctx.engine.transactions
    enable_2pc = getattr(request, "enable2_pc", False)
    try:
        _authorize_init(ctx, request.transactional_id, enable_2pc)
        kept = None
        if getattr(request, "keep_prepared_txn", False):
            if not enable_2pc:
                raise InvalidRequestError("keepPreparedTxn needs enable2Pc")
            kept = await coordinator.keep_prepared_transaction(request.transactional_id, ctx.principal)
        if kept is not None:
            return {"error_code": 0, "producer_id": kept.producer_id, "producer_epoch": kept.producer_epoch,
                    "ongoing_txn_producer_id": kept.ongoing_producer_id,
                    "ongoing_txn_producer_epoch": kept.ongoing_producer_epoch}
        producer_id, epoch = await coordinator.init_producer_id(
            request.transactional_id, millis(request.transaction_timeout),
            getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1), enable_2pc,
            ctx.principal)
    except KafkaError as e:
        return {"error_code": fenced_code(e, ctx.version, 4), "producer_id": -1, "producer_epoch": -1,
                "throttle_time": getattr(e, "throttle_time_ms", 0)}
    return {"error_code": 0, "producer_id": producer_id, "producer_epoch": epoch,
            "ongoing_txn_producer_id": -1, "ongoing_txn_producer_epoch": -1}


def _authorize_init(ctx: RequestContext, transactional_id: str | None, enable_2pc: bool) -> None:
    """Write on the transactional id, and with enable2Pc (which keepPreparedTxn needs)
    TwoPhaseCommit on it too: a two-phase transaction never times out, so only a principal
    an operator trusts with holding LSOs may open one (KIP-939, Kafka's
    ``handleInitProducerIdRequest``: TRANSACTIONAL_ID_AUTHORIZATION_FAILED either way).
    An idempotent producer's (none): IdempotentWrite on the cluster or Write on any topic
    (Kafka 3's rule, KIP-679), else CLUSTER_AUTHORIZATION_FAILED."""
    if transactional_id is not None:
        authorization.check(ctx, ApiKey.INIT_PRODUCER_ID, X, transactional_id, AclOperation.WRITE)
        if enable_2pc:
            authorization.check(ctx, ApiKey.INIT_PRODUCER_ID, X, transactional_id, AclOperation.TWO_PHASE_COMMIT)
    elif not (authorization.allowed(ctx, ApiKey.INIT_PRODUCER_ID, C, CLUSTER_NAME, audit=False)
              or authorization.allowed_on_any(ctx, ApiKey.INIT_PRODUCER_ID, T, AclOperation.WRITE)):
        raise authorization.refused(ctx, ApiKey.INIT_PRODUCER_ID, C, CLUSTER_NAME)


#: the first AddPartitionsToTxn version of the brokers' batched form (KIP-890 part 1)
BROKER_FORM_SINCE = 4


@serves(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def add_partitions_to_txn(ctx: RequestContext, request: Any) -> dict:
    """Write on the transactional id (else its error for every partition) and on each
    topic: one denied is TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED,
    nothing added, as in Kafka. v4+ is the brokers' form: see :func:`_for_brokers`."""
    if ctx.version >= BROKER_FORM_SINCE:
        return await _for_brokers(ctx, request)
    txn_id = request.v3_and_below_transactional_id
    wanted = [(topic.name, p) for topic in request.v3_and_below_topics for p in topic.partitions]
    try:
        authorization.check(ctx, ApiKey.ADD_PARTITIONS_TO_TXN, X, txn_id)
        writable = {t: authorization.allowed(ctx, ApiKey.ADD_PARTITIONS_TO_TXN, T, t) for t, _ in wanted}
        if not all(writable.values()):
            errors: dict = {(t, p): authorization.denial(T, t) if not writable[t] else OperationNotAttemptedError(
                "another partition of the request was refused") for t, p in wanted}
        else:
            errors = await ctx.engine.transactions.add_partitions_to_txn(
                txn_id, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, wanted,
                ctx.principal)
    except KafkaError as e:
        errors = {tp: e for tp in wanted}
    entries = [(topic, {"partition_index": p, "partition_error_code": fenced_code(errors[(topic, p)], ctx.version, 2)})
               for topic, p in wanted]
    return {"results_by_topic_v3_and_below": by_topic(entries, partitions_key="results_by_partition")}


async def _for_brokers(ctx: RequestContext, request: Any) -> dict:
    """AddPartitionsToTxn v4+ (KIP-890 part 1), which Kafka's brokers send the
    transaction coordinator -- several transactions at once, each ``VerifyOnly`` (is each
    partition in the Ongoing transaction? TRANSACTION_ABORTABLE if not, at v4 too) or an
    add as transaction version 2 makes it.
    Answered as Kafka's ``handleAddPartitionsToTxnRequest`` answers it: ClusterAction on
    the cluster, else CLUSTER_AUTHORIZATION_FAILED for the whole request; no topic
    authorization (the asker is a broker); a fenced epoch is PRODUCER_FENCED."""
    if not authorization.allowed(ctx, ApiKey.ADD_PARTITIONS_TO_TXN, C, CLUSTER_NAME):
        return {"error_code": ClusterAuthorizationFailedError.code, "results_by_transaction": []}
    results = []
    for txn in request.transactions:
        wanted = [(topic.name, p) for topic in txn.topics for p in topic.partitions]
        try:
            errors = await ctx.engine.transactions.add_partitions_for_broker(
                txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted, txn.verify_only, ctx.principal)
        except KafkaError as e:
            errors = {tp: e for tp in wanted}
        entries = [(topic, {"partition_index": p, "partition_error_code": _broker_code(errors[topic, p])})
                   for topic, p in wanted]
        results.append({"transactional_id": txn.transactional_id,
                        "topic_results": by_topic(entries, partitions_key="results_by_partition")})
    return {"error_code": 0, "results_by_transaction": results}


def _broker_code(error: KafkaError | None) -> int:
    """The coordinator's own answer to a broker, at v4 as at v5 (the broker translates
    for its Produce's client): the epoch check is PRODUCER_FENCED, a partition not in
    the transaction TRANSACTION_ABORTABLE."""
    code = error_code(error)
    return ProducerFencedError.code if code == InvalidProducerEpochError.code else code


@serves(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx: RequestContext, request: Any) -> dict:
    """v4 (KIP-890) only says the client knows TRANSACTION_ABORTABLE, which Kafka's
    coordinator never answers AddOffsetsToTxn: the same answers as v3."""
    try:
        authorization.check(ctx, ApiKey.ADD_OFFSETS_TO_TXN, X, request.transactional_id)
        authorization.check(ctx, ApiKey.ADD_OFFSETS_TO_TXN, G, request.group_id)
        await ctx.engine.transactions.add_offsets_to_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id,
            ctx.principal)
    except KafkaError as e:
        return {"error_code": abortable_code(fenced_code(e, ctx.version, 2), ctx.version, 4)}
    return {"error_code": 0}


@serves(ApiKey.END_TXN, 0, 5)
async def end_txn(ctx: RequestContext, request: Any) -> dict:
    """Returns once the markers are durable: read_committed consumers see the outcome.
    v5 is transaction version 2 (KIP-890 part 2; Kafka's ``transactionVersionForEndTxn``,
    whatever the finalized level): the epoch is bumped, and the producer id and epoch to
    go on with are answered."""
    try:
        authorization.check(ctx, ApiKey.END_TXN, X, request.transactional_id)
        producer_id, producer_epoch = await ctx.engine.transactions.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
            features.TRANSACTION_VERSION_2 if ctx.version >= 5 else 0)
    except KafkaError as e:
        return {"error_code": fenced_code(e, ctx.version, 2), "producer_id": -1, "producer_epoch": -1}
    return {"error_code": 0, "producer_id": producer_id, "producer_epoch": producer_epoch}


@serves(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def txn_offset_commit(ctx: RequestContext, request: Any) -> dict:
    """Offsets pending until the transaction's marker; v3 carries the group generation
    and member so a zombie from an older generation is fenced (KIP-447); v5 (with
    ``transaction.version`` 2 finalized) adds the group to the transaction itself, the
    AddOffsetsToTxn a KIP-890 part 2 client no longer sends. Write on the
    transactional id and Read on the group, else that error for every partition; Read
    on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions."""
    try:
        authorization.check(ctx, ApiKey.TXN_OFFSET_COMMIT, X, request.transactional_id)
        authorization.check(ctx, ApiKey.TXN_OFFSET_COMMIT, G, request.group_id)
    except KafkaError as e:
        return {"topics": refused_offsets(request.topics, e)}
    offsets, unknown = requested_offsets(ctx, ApiKey.TXN_OFFSET_COMMIT, request.topics)
    try:
        errors: dict | BaseException = await ctx.engine.transactions.txn_offset_commit(
            request.transactional_id, request.group_id, request.producer_id, request.producer_epoch, offsets,
            getattr(request, "generation_id", -1), getattr(request, "member_id", ""),
            getattr(request, "group_instance_id", None), ctx.principal,
            ctx.version >= 5 and features.implicit_add(ctx.engine.features.transaction_version)) if offsets else {}
    except KafkaError as e:
        errors = e
    # TxnOffsetCommit never answers PRODUCER_FENCED at the versions served; TRANSACTION_ABORTABLE
    # (the group's partition not in the transaction) from v4 (KIP-890), INVALID_TXN_STATE before
    return {"topics": commit_results(offsets, errors, unknown,
                                     code=lambda e: abortable_code(fenced_code(e, ctx.version, None), ctx.version, 4))}


@serves(ApiKey.WRITE_TXN_MARKERS, 1, 2)
async def write_txn_markers(ctx: RequestContext, request: Any) -> dict:
    """What a client sends it for: Kafka's ``Admin.abortTransaction`` (KIP-664,
    ``kafka-transactions.sh abort``), an ABORT marker for a producer's open transaction
    on a partition, from a principal with ClusterAction. Here the marker is not written
    as sent: ``Partitions.abort_hanging_transaction`` ends that transaction (through its
    coordinator when a transactional id owns it, aborting it everywhere) and fences
    the producer -- once the marker's epoch passes Kafka's check against the
    producer's, which v2's transaction version (KIP-1228) makes strict for version 2.
    COMMIT markers are the coordinator's alone: INVALID_REQUEST."""
    allowed = authorization.allowed(ctx, ApiKey.WRITE_TXN_MARKERS, C, CLUSTER_NAME)
    actor = f"WriteTxnMarkers from {ctx.principal} at {ctx.connection.host}"
    answered = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for partition in topic.partition_indexes:
                try:
                    if not allowed:
                        raise ClusterAuthorizationFailedError("WriteTxnMarkers needs ClusterAction on the cluster")
                    if marker.transaction_result:
                        raise InvalidRequestError("a client may write ABORT markers only (Admin.abortTransaction): "
                                                  "COMMIT markers are the transaction coordinator's")
                    await ctx.engine.partitions.abort_hanging_transaction(
                        topic.name, partition, marker.producer_id, actor, marker.producer_epoch,
                        getattr(marker, "transaction_version", 0))
                    error = None
                except KafkaError as e:
                    error = e
                partitions.append({"partition_index": partition, "error_code": error_code(error)})
            topics.append({"name": topic.name, "partitions": partitions})
        answered.append({"producer_id": marker.producer_id, "topics": topics})
    return {"markers": answered}


@serves(ApiKey.LIST_TRANSACTIONS, 0, 2)
async def list_transactions(ctx: RequestContext, request: Any) -> dict:
    """Filters combine with AND: states, producer ids, running longer than (v1), and
    a transactional id pattern (v2, KIP-1152: a regular expression the whole id must
    match, as Java's ``Matcher.matches``)."""
    coordinator = ctx.engine.transactions
    known = {state.display.lower() for state in TransactionState}
    states = [s for s in request.state_filters if s.lower() in known]
    producer_ids = set(request.producer_id_filters)
    min_duration = getattr(request, "duration_filter", -1)
    try:
        pattern = re.compile(request.transactional_id_pattern) if getattr(
            request, "transactional_id_pattern", None) else None
    except re.error:
        return {"error_code": InvalidRegularExpressionError.code, "unknown_state_filters": [],
                "transaction_states": []}
    now = ctx.engine.clock.now_ms()
    found = [{"transactional_id": txn_id, "producer_id": meta.producer_id, "transaction_state": meta.state.display}
             for txn_id, meta in coordinator.list_transactions(states)
             if authorization.allowed(ctx, ApiKey.LIST_TRANSACTIONS, X, txn_id, audit=False)
             and (not producer_ids or meta.producer_id in producer_ids)
             and (pattern is None or pattern.fullmatch(txn_id))
             and (min_duration < 0 or (meta.txn_start_timestamp >= 0
                                       and now - meta.txn_start_timestamp >= min_duration))]
    unknown = [s for s in request.state_filters if s.lower() not in known]
    if request.state_filters and not states:
        found = []
    return {"error_code": 0, "unknown_state_filters": unknown, "transaction_states": found}


@serves(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx: RequestContext, request: Any) -> dict:
    """Each id's transaction; an id refused or not found gets only its error, the other
    fields their schema defaults (producer id and epoch 0), as Kafka answers it. Its
    partitions are only those on topics the principal may Describe (Kafka's KafkaApis
    filters them so): a transaction must not name a topic its reader may not see."""
    coordinator = ctx.engine.transactions
    described = []
    for txn_id in request.transactional_ids:
        if not authorization.allowed(ctx, ApiKey.DESCRIBE_TRANSACTIONS, X, txn_id):
            described.append({"error_code": authorization.denial(X, txn_id).code, "transactional_id": txn_id})
            continue
        meta = coordinator.describe_transaction(txn_id)
        if meta is None:
            described.append({"error_code": TransactionalIdNotFoundError.code, "transactional_id": txn_id})
            continue
        shown = {topic for topic in {topic for topic, _ in meta.partitions}
                 if authorization.allowed(ctx, ApiKey.DESCRIBE_TRANSACTIONS, T, topic)}
        described.append({
            "error_code": 0, "transactional_id": txn_id, "transaction_state": meta.state.display,
            "transaction_timeout": meta.txn_timeout_ms, "transaction_start_time": meta.txn_start_timestamp,
            "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
            "topics": by_topic([(topic, p) for topic, p in sorted(meta.partitions) if topic in shown],
                               topic_key="topic")})
    return {"transaction_states": described}


@serves(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx: RequestContext, request: Any) -> dict:
    """The producer state of each partition: who is writing, and who holds the LSO --
    another principal's idempotent producers only to a principal with Describe on the
    cluster (``Access.may_see_producer``)."""
    access, host = ctx.engine.access, ctx.connection.host
    entries = []
    for topic in request.topics:
        for partition in topic.partition_indexes:
            try:
                authorization.check(ctx, ApiKey.DESCRIBE_PRODUCERS, T, topic.name)
                producers = await read_models.producers(ctx.engine, topic.name, partition)
            except KafkaError as e:
                entries.append((topic.name, {"partition_index": partition, "error_code": error_code(e),
                                             "error_message": str(e)}))
                continue
            entries.append((topic.name, {"partition_index": partition, "error_code": 0, "active_producers": [
                {"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"],
                 "last_sequence": p["last_sequence"], "last_timestamp": p["last_timestamp"],
                 "coordinator_epoch": p["coordinator_epoch"],
                 "current_txn_start_offset": p["current_transaction_start_offset"]} for p in producers
                if access.may_see_producer(ctx.principal, host, p["producer_id"], p["transactional_id"])]}))
    return {"topics": by_topic(entries)}
