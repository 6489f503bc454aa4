"""Records of ``__transaction_state``, the transaction log (docs/formats.md §13).

Key and value are the seed's "Producer TransactionalId mapping message", in the
layout of Kafka's ``TransactionLogKey``/``TransactionLogValue`` version 0, each
prefixed by its int16 version::

    Key   => Version(0) TransactionalId(string)
    Value => Version(0) ProducerId(int64) ProducerEpoch(int16) TxnTimeoutMs(int32)
             TxnStatus(int8) TxnPartitions([Topic(string) [Partition(int32)]])
             TxnLastUpdateTimestampMs(int64) TxnStartTimestampMs(int64)

``TxnStatus`` is :class:`~exactly.coordinator.transaction_state.TransactionState` ``.id``.

Version 1 is Kafka's flexible version of the same value (KIP-482; KIP-890 part 2
added its tagged fields, KIP-939 uses them): the fields above in compact form, then
tagged fields a reader that does not know them skips::

    Value v1 => ... as v0, compact ... _tagged_fields
      tag 0 PreviousProducerId(int64, default -1)   the producer id before the last rotation
                                                    (epoch exhausted): a retried EndTxn or
                                                    InitProducerId of it is recognised
      tag 1 NextProducerId(int64, default -1)       KIP-939: the producer id keepPreparedTxn
      tag 3 NextProducerEpoch(int16, default -1)    gave the recovering client, and its epoch;
                                                    transaction version 2: the id the client
                                                    moves to at completion (epoch -1)
      tag 2 ClientTransactionVersion(int16, default 0)  the transaction version of the
                                                    client's last request (2: KIP-890 part 2)

A kept two-phase transaction (InitProducerId with keepPreparedTxn) keeps the
producer id and epoch its data was written with in ProducerId/ProducerEpoch, as
Kafka does, so a reader that ignores the tags still completes it with the right
markers. Tags 0-2 are Kafka's ``TransactionLogValue.json``; NextProducerEpoch is the
field Kafka's KIP-939 implementation (apache/kafka PR 21735) adds, at the next free
tag, 3. Everything else is written as version 0, byte for byte what it was: a value
is version 1 only when it has a tagged field to carry.
Why a transaction was aborted is not in Kafka's value: a PrepareAbort or
CompleteAbort record carries it as two record headers, ``exactly.abort.cause`` (an
:class:`~exactly.coordinator.transaction_state.AbortCause` value) and
``exactly.abort.actor`` (UTF-8 text), which Kafka's own loader ignores. So the
reason is in the log itself and everything derived from it (the coordinator after a
restart, the SQLite mirror after a rebuild) has it; compaction keeps it as long as it
keeps the record.
A null value is a tombstone: the transactional id expired. The partition of a
transactional id is Kafka's: ``Utils.abs(javaHashCode(id)) % transaction.state.log.num.partitions``,
so a Kafka client's FindCoordinator and our logs agree on placement.
"""

from __future__ import annotations

from dataclasses import dataclass

from exactly.coordinator.schema import (
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    Array,
    Schema,
    SchemaError,
    TaggedField,
    decode_versioned,
    flexible,
    versioned,
)
from exactly.coordinator.transaction_state import (
    AbortCause,
    AbortReason,
    TransactionState,
    TxnTransitMetadata,
)
from exactly.storage.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ControlType

TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
#: the flexible version, written when a tagged field is set
VALUE_VERSION_TAGGED = 1

ABORT_CAUSE_HEADER = "exactly.abort.cause"
ABORT_ACTOR_HEADER = "exactly.abort.actor"
Headers = tuple[tuple[str, bytes | None], ...]

KEY_V0 = Schema(("transactional_id", STRING))
VALUE_V0 = Schema(
    ("producer_id", INT64),
    ("producer_epoch", INT16),
    ("transaction_timeout_ms", INT32),
    ("transaction_status", INT8),
    ("transaction_partitions", Array(Schema(("topic", STRING), ("partition_ids", Array(INT32))))),
    ("transaction_last_update_timestamp_ms", INT64),
    ("transaction_start_timestamp_ms", INT64),
)
VALUE_V1 = flexible(VALUE_V0, tagged=(
    TaggedField(0, "previous_producer_id", INT64, NO_PRODUCER_ID),
    TaggedField(1, "next_producer_id", INT64, NO_PRODUCER_ID),
    TaggedField(2, "client_transaction_version", INT16, 0),
    TaggedField(3, "next_producer_epoch", INT16, NO_PRODUCER_EPOCH),
))
VALUES = {VALUE_VERSION: VALUE_V0, VALUE_VERSION_TAGGED: VALUE_V1}


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, int32 overflow)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % numPartitions`` for coordinator placement.

    ``Utils.abs`` is the absolute value with ``Integer.MIN_VALUE`` mapped to 0 -- not the
    sign-bit mask (``Utils.toPositive``) the record partitioner uses."""
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % num_partitions


@dataclass(frozen=True)
class TxnLogRecord:
    """One decoded record: a transit, or a tombstone when ``transit`` is None."""

    transactional_id: str
    transit: TxnTransitMetadata | None


def encode_key(transactional_id: str) -> bytes:
    return INT16.fmt.pack(KEY_VERSION) + KEY_V0.encode({"transactional_id": transactional_id})


def encode_value(transit: TxnTransitMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(transit.partitions):
        by_topic.setdefault(topic, []).append(partition)
    fields = {
        "producer_id": transit.producer_id,
        "producer_epoch": transit.producer_epoch,
        "transaction_timeout_ms": transit.txn_timeout_ms,
        "transaction_status": transit.state.id,
        "transaction_partitions": [{"topic": t, "partition_ids": p} for t, p in by_topic.items()],
        "transaction_last_update_timestamp_ms": transit.txn_last_update_timestamp,
        "transaction_start_timestamp_ms": transit.txn_start_timestamp,
        "previous_producer_id": transit.last_producer_id,
        "next_producer_id": transit.next_producer_id,
        "next_producer_epoch": transit.next_producer_epoch,
        "client_transaction_version": transit.client_transaction_version,
    }
    tagged = any(fields.get(f.name, f.default) != f.default for f in VALUE_V1.tagged or ())
    version = VALUE_VERSION_TAGGED if tagged else VALUE_VERSION
    return INT16.fmt.pack(version) + VALUES[version].encode(fields)


def encode_headers(transit: TxnTransitMetadata) -> Headers:
    """The record headers of ``transit``: its abort reason, if it has one."""
    reason = transit.abort_reason
    if reason is None:
        return ()
    return ((ABORT_CAUSE_HEADER, reason.cause.value.encode()), (ABORT_ACTOR_HEADER, reason.actor.encode()))


def _abort_reason(headers: Headers) -> AbortReason | None:
    found = dict(headers)
    cause, actor = found.get(ABORT_CAUSE_HEADER), found.get(ABORT_ACTOR_HEADER)
    if cause is None:
        return None
    try:
        return AbortReason(AbortCause(cause.decode()), (actor or b"").decode())
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaError(f"abort reason header: {e}") from None


def decode(key: bytes | None, value: bytes | None, headers: Headers = ()) -> TxnLogRecord:
    """Decode one record (with its headers); raises SchemaError for anything we do
    not understand."""
    transactional_id = decode_versioned(key, KEY_VERSION, KEY_V0, "transaction log key")["transactional_id"]
    if value is None:
        return TxnLogRecord(transactional_id, None)
    version = versioned(value)[0]
    if version not in VALUES:
        raise SchemaError(f"unsupported transaction log value version {version}")
    v = decode_versioned(value, version, VALUES[version], "transaction log value")
    try:
        state = TransactionState.from_id(v["transaction_status"])
    except ValueError as e:
        raise SchemaError(str(e)) from None
    partitions = frozenset((tp["topic"], p) for tp in v["transaction_partitions"] or ()
                           for p in tp["partition_ids"] or ())
    return TxnLogRecord(transactional_id, TxnTransitMetadata(
        producer_id=v["producer_id"], last_producer_id=v.get("previous_producer_id", NO_PRODUCER_ID),
        producer_epoch=v["producer_epoch"],
        last_producer_epoch=NO_PRODUCER_EPOCH, txn_timeout_ms=v["transaction_timeout_ms"],
        state=state, partitions=partitions,
        txn_start_timestamp=v["transaction_start_timestamp_ms"],
        txn_last_update_timestamp=v["transaction_last_update_timestamp_ms"],
        abort_reason=_abort_reason(headers) if state.outcome is ControlType.ABORT else None,
        next_producer_id=v.get("next_producer_id", NO_PRODUCER_ID),
        next_producer_epoch=v.get("next_producer_epoch", NO_PRODUCER_EPOCH),
        client_transaction_version=v.get("client_transaction_version", 0)))
