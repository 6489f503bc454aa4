"""Transactions over HTTP, and the operator's view of them.

A client drives a transaction like a Kafka transactional producer, one call per
step, each carrying the ``producer_id`` and ``producer_epoch`` that ``init`` gave it::

    POST .../transactions/<id>/init      InitProducerId: fences older instances
    POST .../transactions/<id>/records   AddPartitionsToTxn as needed, then one
                                         transactional batch per record
    POST .../transactions/<id>/offsets   AddOffsetsToTxn + TxnOffsetCommit (KIP-447:
                                         the group's generation fences zombies)
    POST .../transactions/<id>/commit    EndTxn(commit): returns once every marker
    POST .../transactions/<id>/abort     EndTxn(abort)    is durable

There is no ``begin``: the first ``records`` or ``offsets`` call opens the
transaction, as the first send does in a Kafka client. A call with an older epoch
than the current one is PRODUCER_FENCED (409), so an instance that was replaced
(a newer ``init``) or timed out cannot write. The broker keeps the producer's
sequence per partition itself: each record's sequence is computed on the engine's
loop in the same step as its append, so concurrent calls never collide. Retrying a
``records`` call would append the records again (new sequences); send an
``Idempotency-Key`` to make retries safe (``exactly/app/http/api/idempotency.py``). Committing
a transaction that has nothing in it is a no-op, as a Kafka client does it.

A ``records`` call's key survives a crash because it is written with the records:
each record the call appends carries the header :data:`KEY_HEADER`, whose value is
``{"key", "fingerprint", "index", "count"}`` (the key, the request's fingerprint, the
record's place in the request and the number of records in it), durable in the same
fsync as the record itself. When the app is made, the records of every open
transaction are read back (from the first offset the partition's producer state keeps
for it) and each key's first answer is rebuilt into the ``Idempotency-Key`` cache, so
a retry after a restart appends nothing and gets the first answer, and one with
another body is still 422. A key whose records did not all reach the log (the broker
died between two partitions' appends, before answering) answers
TRANSACTION_ABORTABLE: abort and run the transaction again. Keys of finished
transactions are not rebuilt -- the client already had its answer to commit. The
header is visible to consumers, which may read it as "this record came from that
HTTP request"; a client may not send it itself.

Inspection: ``GET .../transactions`` (ListTransactions), ``GET .../transactions/<id>``
(DescribeTransactions, plus finished transactions from the SQLite mirror when there
is one), ``POST .../transactions/<id>/admin-abort`` (the coordinator aborts the open
transaction and fences its producer), and
``POST .../topics/<t>/partitions/<p>/producers/<producer_id>/abort`` for any
producer holding a partition's LSO (Kafka's AbortTransaction, KIP-664): the
coordinator aborts its transactional id's transaction, or -- for a producer no
coordinator knows -- an ABORT marker one epoch up ends it on that partition;
either way the producer is fenced (``Partitions.abort_hanging_transaction``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Flask, Response, jsonify, request
from flask.blueprints import BlueprintSetupState

from exactly.app.engine import mirror_reads, read_models
from exactly.app.http import access, current_engine, errors, mirror_db
from exactly.app.http.access import GROUP, TOPIC, TXN, kafka, listed
from exactly.app.http.api import idempotency, models
from exactly.app.http.api.idempotency import idempotent
from exactly.app.http.api.records import choose_partition, parse_record
from exactly.app.http.api.resources import cluster_id, crn, listing, resource
from exactly.app.http.api.route import (CLUSTER_PATH, ON_TXN, PARTITION_PATH, TRANSACTION_PATH, TXN_ERRORS,
                                        Route, declare)
from exactly.app.http.api.validation import body, query
from exactly.app.kafka.wire import ApiKey
from exactly.app.security.principal import ANONYMOUS
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.storage.errors import (
    InvalidRequestError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
)
from exactly.storage.record_batch import Record, SimpleRecord

if TYPE_CHECKING:
    from exactly.app.engine import Engine

log = logging.getLogger(__name__)
bp = Blueprint("transactions", __name__)

#: the record header in which a ``records`` call keeps its ``Idempotency-Key`` (see above)
KEY_HEADER = "exactly.idempotency-key"


def _scope(transactional_id: str) -> idempotency.Scope:
    return idempotency.Scope(transactional_id=transactional_id)


# -- the transactional client --------------------------------------------------------


@declare(bp, Route("post", TRANSACTION_PATH + "/init", "Init transactions", "Transactions", 200,
                   models.ProducerIdentity, TXN_ERRORS, body=models.InitTransaction, body_required=False,
                   idempotent=True,
                   description="InitProducerId: a producer id and a new epoch; fences older instances and aborts "
                               "their open transaction.",
                   needs=kafka(ApiKey.INIT_PRODUCER_ID, ON_TXN)))
@idempotent(_scope)
def init(transactional_id: str):
    timeout = body(models.InitTransaction, required=False).transaction_timeout_ms
    engine = current_engine()
    producer_id, epoch = engine.call(engine.transactions.init_producer_id, transactional_id, timeout)
    return jsonify({"transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": epoch})


def _placed(engine: "Engine", records: list[tuple[str, int | None, SimpleRecord]]
            ) -> list[tuple[str, int, SimpleRecord]]:
    """Each record with its partition: the one asked for, else Kafka's default partitioner's."""
    counts = engine.call(engine.topics.partition_counts, sorted({t for t, p, _ in records if p is None}))
    for topic, partition, _ in records:
        if partition is None and topic not in counts:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    return [(topic, choose_partition(counts[topic], record.key) if partition is None else partition, record)
            for topic, partition, record in records]


@declare(bp, Route("post", TRANSACTION_PATH + "/records", "Send records in transaction", "Transactions", 200,
                   models.AppendedRecords, TXN_ERRORS, body=models.TransactionRecords, idempotent=True,
                   needs=kafka(ApiKey.ADD_PARTITIONS_TO_TXN, ON_TXN, access.body(TOPIC))))
@idempotent(_scope)
def produce(transactional_id: str):
    sent = body(models.TransactionRecords)
    producer_id, epoch = sent.producer_id, sent.producer_epoch
    engine = current_engine()
    now = engine.clock.now_ms()
    records = []
    for i, item in enumerate(sent.records):
        partition, record = parse_record(item, now, f"records[{i}].")
        if any(name == KEY_HEADER for name, _ in record.headers):
            raise InvalidRequestError(f"records[{i}].headers: {KEY_HEADER} is the broker's own header")
        records.append((item.topic_name, partition, record))
    access.require(TOPIC, (topic for topic, _, _ in records))
    call = idempotency.current_call()
    if call is not None:
        records = _marked(records, *call)
    appended = engine.call(engine.transactions.produce_in_transaction, transactional_id, producer_id, epoch,
                           _placed(engine, records))
    return _records_answer(appended)


def _records_answer(appended: list[tuple[str, int, int]]) -> Response:
    return jsonify({"records": [{"topic_name": t, "partition_id": p, "offset": o} for t, p, o in appended]})


# -- Idempotency-Key across restarts (see the module docstring) -------------------------


def _marked(records: list[tuple[str, int | None, SimpleRecord]], key: str, fingerprint: str,
            principal: str) -> list[tuple[str, int | None, SimpleRecord]]:
    """``records``, each with the :data:`KEY_HEADER` of this call."""
    def mark(index: int) -> bytes:
        return json.dumps({"key": key, "fingerprint": fingerprint, "index": index, "count": len(records),
                           "principal": principal}, separators=(",", ":")).encode()

    return [(topic, partition, replace(record, headers=(*record.headers, (KEY_HEADER, mark(i)))))
            for i, (topic, partition, record) in enumerate(records)]


@dataclass
class _KeyedCall:
    """What the log holds of one keyed ``records`` call."""

    fingerprint: str
    count: int
    #: request index -> (topic, partition, offset) of each record found
    placed: dict[int, tuple[str, int, int]] = field(default_factory=dict)


def _mark_of(record: Record) -> dict[str, Any] | None:
    """The :data:`KEY_HEADER` of a record, or None (also when it is not ours: a Kafka
    client may send any header, and start-up must not fail on it)."""
    raw = next((value for name, value in reversed(record.headers) if name == KEY_HEADER), None)
    try:
        mark = json.loads(raw) if raw else None
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return None
    shape = {"key": str, "fingerprint": str, "index": int, "count": int}
    if not isinstance(mark, dict) or not all(isinstance(mark.get(k), t) for k, t in shape.items()):
        return None
    return mark if 0 <= mark["index"] < mark["count"] else None


def _keyed_calls(engine: "Engine") -> dict[tuple[str, str, str], _KeyedCall]:
    """The keyed ``records`` calls in the open transactions, by (transactional id,
    principal, key), read from each open transaction's first offset. A mark without a
    principal (written before keys were per principal) is ANONYMOUS's."""
    calls: dict[tuple[str, str, str], _KeyedCall] = {}
    for txn_id, topic, partition, record in engine.call(read_models.open_transaction_records, engine):
        mark = _mark_of(record)
        if mark is not None:
            principal = mark.get("principal")
            ident = (txn_id, principal if isinstance(principal, str) else str(ANONYMOUS), mark["key"])
            call = calls.setdefault(ident, _KeyedCall(mark["fingerprint"], mark["count"]))
            call.placed[mark["index"]] = (topic, partition, record.offset)
    return calls


def _first_answer(call: _KeyedCall) -> Response:
    if len(call.placed) == call.count:
        return _records_answer([call.placed[i] for i in range(call.count)])
    return errors.kafka_error_response(TransactionAbortableError(
        f"only {len(call.placed)} of the {call.count} records of this call reached the log before the broker "
        f"stopped; abort the transaction and run it again"))


@bp.record_once
def _remember_keyed_calls(state: BlueprintSetupState) -> None:
    """When the app is made: the first answers of the keyed ``records`` calls of the
    open transactions go back into the ``Idempotency-Key`` cache."""
    app = state.app
    assert isinstance(app, Flask), "the blueprint is registered on the Flask app create_app makes"
    engine: "Engine" = app.extensions["exactly.engine"]
    cache = idempotency.cache(app)
    with app.app_context():
        for (txn_id, principal, key), call in _keyed_calls(engine).items():
            cache.remember(principal, _scope(txn_id), key, call.fingerprint, _first_answer(call))


@declare(bp, Route("post", TRANSACTION_PATH + "/offsets", "Send offsets to transaction", "Transactions", 200,
                   models.SentOffsets, TXN_ERRORS, body=models.TransactionOffsets, idempotent=True,
                   needs=kafka(ApiKey.TXN_OFFSET_COMMIT, ON_TXN, access.body(GROUP), access.body(TOPIC))))
@idempotent(_scope)
def send_offsets(transactional_id: str):
    sent = body(models.TransactionOffsets)
    producer_id, epoch = sent.producer_id, sent.producer_epoch
    engine = current_engine()
    now = engine.clock.now_ms()
    offsets = {}
    for item in sent.offsets:
        offsets[item.topic_name, item.partition_id] = CommittedOffset(item.offset, item.metadata or "", -1, now)
    access.require(GROUP, (sent.group_id,))
    access.require(TOPIC, (topic for topic, _ in offsets))
    engine.call(engine.transactions.send_offsets_to_transaction, transactional_id, producer_id, epoch,
                sent.group_id, offsets, -1 if sent.generation_id is None else sent.generation_id,
                sent.member_id or "", sent.group_instance_id)
    return jsonify({"transactional_id": transactional_id, "group_id": sent.group_id,
                    "offsets": [{"topic_name": t, "partition_id": p, "offset": o.offset, "metadata": o.metadata}
                                for (t, p), o in offsets.items()]})


def _end_view(transactional_id: str, commit: bool):
    sent = body(models.ProducerFields)
    producer_id, epoch = sent.producer_id, sent.producer_epoch
    engine = current_engine()
    engine.call(engine.transactions.end_transaction, transactional_id, producer_id, epoch, commit)
    return jsonify(transaction_resource(engine.call(read_models.transaction, engine, transactional_id)))


END_TXN = kafka(ApiKey.END_TXN, ON_TXN)


@declare(bp, Route("post", TRANSACTION_PATH + "/commit", "Commit transaction", "Transactions", 200, models.Transaction,
                   TXN_ERRORS, body=models.ProducerFields, idempotent=True, needs=END_TXN))
@idempotent(_scope)
def commit(transactional_id: str):
    return _end_view(transactional_id, commit=True)


@declare(bp, Route("post", TRANSACTION_PATH + "/abort", "Abort transaction", "Transactions", 200, models.Transaction,
                   TXN_ERRORS, body=models.ProducerFields, idempotent=True, needs=END_TXN))
@idempotent(_scope)
def abort(transactional_id: str):
    return _end_view(transactional_id, commit=False)


# -- inspection and the operator's abort ------------------------------------------------


def transaction_resource(txn: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A transactional id's state (DescribeTransactions) with REST v3's ``kind`` and ``metadata``."""
    txn_id = txn["transactional_id"]
    return resource("KafkaTransaction", ("transactions", txn_id), crn(("transactional-id", txn_id)),
                    cluster_id=cluster_id(), **txn, **extra)



@declare(bp, Route("get", CLUSTER_PATH + "/transactions", "List transactions", "Transactions", 200,
                   models.listing(models.Transaction), query=models.TransactionsQuery,
                   needs=kafka(ApiKey.LIST_TRANSACTIONS, listed(TXN))))
def list_transactions():
    """ListTransactions; ``?state=Ongoing&state=PrepareCommit`` filters (Kafka's state names)."""
    states = query(models.TransactionsQuery).state
    engine = current_engine()
    found = engine.call(read_models.transactions, engine, states)
    shown = access.visible(TXN, (t["transactional_id"] for t in found))
    return jsonify(listing("KafkaTransactionList", ("transactions",),
                           [transaction_resource(t) for t in found if t["transactional_id"] in shown]))


@declare(bp, Route("get", TRANSACTION_PATH, "Get transaction", "Transactions", 200, models.TransactionDetail,
                   query=models.TransactionQuery,
                   needs=kafka(ApiKey.DESCRIBE_TRANSACTIONS, ON_TXN, listed(TOPIC))))
def describe(transactional_id: str):
    """The transaction's state, and ``history``: its finished transactions, newest
    first, from the SQLite mirror (null when the broker runs without one); partitions
    only on topics the principal may Describe, as DescribeTransactions answers."""
    limit = query(models.TransactionQuery).history_limit
    engine = current_engine()
    txn, = access.visible_partitions([engine.call(read_models.transaction, engine, transactional_id)])
    history = _history(transactional_id, limit)
    return jsonify(transaction_resource(txn, history=None if history is None else access.visible_partitions(history)))


def _history(txn_id: str, limit: int) -> list[dict[str, Any]] | None:
    db = mirror_db()
    if db is None:
        return None
    try:
        return mirror_reads.transaction_history(db, txn_id, limit)
    except Exception as error:  # a broken mirror must not break the live answer
        errors.log_mirror_error(log, error, f"reading the history of {txn_id!r} from the SQLite mirror failed")
        return None


def api_actor() -> str:
    """Who an admin abort through the API is, for its recorded reason."""
    return f"the HTTP API, from {request.remote_addr}"


#: an operator's abort writes transaction markers: what kafka-transactions.sh abort (WriteTxnMarkers) needs
WRITE_TXN_MARKERS = kafka(ApiKey.WRITE_TXN_MARKERS)


@declare(bp, Route("post", TRANSACTION_PATH + "/admin-abort", "Admin abort transaction", "Transactions", 200,
                   models.Transaction, TXN_ERRORS, needs=WRITE_TXN_MARKERS,
                   description="The coordinator aborts the open transaction and fences its producer."))
def admin_abort(transactional_id: str):
    """Abort the open transaction of ``transactional_id`` and fence its producer (the
    epoch is bumped), so a transaction holding the LSO back ends now."""
    engine = current_engine()
    engine.call(engine.transactions.abort_transaction, transactional_id, api_actor())
    return jsonify(transaction_resource(engine.call(read_models.transaction, engine, transactional_id)))


@declare(bp, Route(
    "post", PARTITION_PATH + "/producers/{producer_id}/abort", "Abort hanging transaction", "Transactions", 200,
    models.AbortedHanging, TXN_ERRORS, needs=WRITE_TXN_MARKERS,
    description="Ends the open transaction of any producer holding this partition's LSO and fences the producer "
                "(Kafka's AbortTransaction, KIP-664): the coordinator aborts its transactional id's transaction with "
                "an epoch bump, or, for a producer no coordinator knows, an ABORT marker one epoch up is written on "
                "this partition."))
def abort_hanging(topic_name: str, partition_id: int, producer_id: int):
    """End the open transaction of any producer on one partition and fence the
    producer, so the partition's LSO moves."""
    engine = current_engine()
    result = engine.call(engine.partitions.abort_hanging_transaction, topic_name, partition_id, producer_id, api_actor())
    return jsonify({"topic_name": topic_name, "partition_id": partition_id, "producer_id": producer_id,
                    "transactional_id": result.transactional_id, "producer_epoch": result.producer_epoch,
                    "last_stable_offset": result.last_stable_offset})
