"""Records over HTTP: produce (REST Proxy v3), read, list offsets, producer ids.

* ``POST .../topics/<topic>/records`` appends one record and answers once it is
  durable (acks=all). With ``producer_id``, ``producer_epoch`` and ``sequence`` (from
  ``POST .../producer-ids``, the sequence counting 0, 1, 2, ... per partition) the
  batch is an idempotent producer's: a retry of one of the producer's last five
  batches is answered with the original offset and appends nothing, exactly as a
  Kafka broker answers a retried Produce, also after a restart.
* ``GET .../partitions/<p>/records`` reads as a consumer does
  (``storage.read_committed.read_records``): in ``read_committed`` (the default
  here, because that is what exactly-once applications read) only records below the
  last stable offset, without aborted ones; control records are never shown.
* ``GET .../partitions/<p>/offsets`` is ListOffsets: ``latest`` in read_committed is
  the LSO, ``earliest`` the log start, a time the first offset at or after it.
"""

from __future__ import annotations

import asyncio
import random
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flask import Blueprint, jsonify

from app.engine import READ_COMMITTED, READ_UNCOMMITTED
from app.http import codec, current_engine, inputs
from app.http.idempotency import idempotent
from app.http.resources import cluster_id
from app.client.producer import murmur2
from storage.errors import InvalidRequestError
from storage.read_committed import read_records
from storage.record_batch import MAX_SEQUENCE, SimpleRecord, encode_batch

if TYPE_CHECKING:
    from app.engine import Engine

bp = Blueprint("records", __name__)

PARTITION = "/v3/clusters/<cluster_id>/topics/<topic_name>/partitions/<int:partition_id>"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)
#: Kafka's fetch.max.bytes default: the most one read may ask for
MAX_FETCH_BYTES = 52_428_800
DEFAULT_FETCH_BYTES = 1 << 20


# -- produce ----------------------------------------------------------------------------


def parse_record(item: dict[str, Any], now_ms: int, where: str = "") -> tuple[int | None, SimpleRecord]:
    """``(partition_id or None, record)`` of a REST v3 record object; without a
    timestamp the record is stamped ``now_ms`` (the broker's clock)."""
    partition = inputs.integer(item, "partition_id", where=where, required=False, maximum=inputs.INT32_MAX,
                               nullable=True)
    key = codec.decode_data(item.get("key"), f"{where}key")
    value = codec.decode_data(item.get("value"), f"{where}value")
    headers = codec.decode_headers(item.get("headers"), f"{where}headers")
    timestamp = _timestamp(item, where)
    return partition, SimpleRecord(value, key=key, headers=headers,
                                   timestamp=now_ms if timestamp is None else timestamp)


def _timestamp(item: dict[str, Any], where: str) -> int | None:
    """Milliseconds since the epoch, or an ISO 8601 time as REST v3 sends it; None: now."""
    raw = item.get("timestamp")
    if isinstance(raw, str):
        try:
            moment = datetime.fromisoformat(raw)
        except ValueError:
            raise InvalidRequestError(f"{where}timestamp is not an ISO 8601 time: {raw!r:.50}") from None
        if moment.tzinfo is None:
            raise InvalidRequestError(f"{where}timestamp needs a time zone (e.g. Z)")
        raw = round(moment.timestamp() * 1000)
        item = {"timestamp": raw}
    return inputs.integer(item, "timestamp", where=where, required=False, nullable=True)


def choose_partition(engine: "Engine", topic: str, key: bytes | None) -> int:
    """Kafka's default partitioner (on the loop): murmur2 of the key, else any partition."""
    count = engine.logs.topic(topic).partitions
    return (murmur2(key) & 0x7FFFFFFF) % count if key is not None else random.randrange(count)


async def _produce(engine: "Engine", topic: str, partition: int | None, key: bytes | None, batch: bytes):
    if partition is None:
        partition = choose_partition(engine, topic, key)
    result = await asyncio.wrap_future(engine.start_produce(topic, partition, batch))
    return partition, result


@bp.post("/v3/clusters/<cluster_id>/topics/<topic_name>/records")
@idempotent(lambda topic_name: f"topic:{topic_name}")
def produce(topic_name: str):
    body = inputs.json_body()
    engine = current_engine()
    partition, record = parse_record(body, engine.clock.now_ms())
    batch = encode_batch([record], **_producer_fields(body))
    partition, result = engine.call(_produce, engine, topic_name, partition, record.key, batch)
    return jsonify({"error_code": 200, "cluster_id": cluster_id(), "topic_name": topic_name,
                    "partition_id": partition, "offset": result.base_offset,
                    "timestamp": record.timestamp if result.log_append_time < 0 else result.log_append_time,
                    "key": codec.summary(body.get("key"), record.key),
                    "value": codec.summary(body.get("value"), record.value)})


def _producer_fields(body: dict[str, Any]) -> dict[str, int]:
    """encode_batch's producer arguments: all three of producer_id, producer_epoch,
    sequence, or none (a plain, non-idempotent record)."""
    names = ("producer_id", "producer_epoch", "sequence")
    given = [body.get(n) is not None for n in names]
    if not any(given):
        return {}
    if not all(given):
        raise InvalidRequestError("producer_id, producer_epoch and sequence go together: send all three or none")
    return {"producer_id": inputs.integer(body, "producer_id"),
            "producer_epoch": inputs.integer(body, "producer_epoch", maximum=inputs.INT16_MAX),
            "base_sequence": inputs.integer(body, "sequence", maximum=MAX_SEQUENCE)}


@bp.post("/v3/clusters/<cluster_id>/producer-ids")
def init_producer_id():
    """InitProducerId without a transactional id: a fresh producer id (never reused)
    at epoch 0, for idempotent produce."""
    engine = current_engine()
    producer_id, epoch = engine.call(engine.transaction_coordinator.init_producer_id, None, -1)
    return jsonify({"producer_id": producer_id, "producer_epoch": epoch})


# -- read -------------------------------------------------------------------------------


async def _fetch(engine: "Engine", topic: str, partition: int, offset: int | None, max_bytes: int,
                 isolation_level: str):
    if offset is None:
        offset = engine.logs.log(topic, partition).log_start_offset
    return offset, engine.fetch(topic, partition, offset, max_bytes, isolation_level)


@bp.get(PARTITION + "/records")
def read(topic_name: str, partition_id: int):
    offset = inputs.query_integer("offset")
    max_bytes = inputs.query_integer("max_bytes", default=DEFAULT_FETCH_BYTES, minimum=1, maximum=MAX_FETCH_BYTES)
    isolation = inputs.query_choice("isolation_level", ISOLATION_LEVELS, READ_COMMITTED)
    engine = current_engine()
    offset, result = engine.call(_fetch, engine, topic_name, partition_id, offset, max_bytes, isolation)
    consumed = read_records(result.records, offset, isolation == READ_COMMITTED,
                            result.aborted_transactions or ())
    return jsonify({
        "topic_name": topic_name, "partition_id": partition_id, "isolation_level": isolation,
        "high_watermark": result.high_watermark, "last_stable_offset": result.last_stable_offset,
        "log_start_offset": result.log_start_offset, "next_offset": result.next_offset,
        "records": [{"offset": r.offset, "timestamp": r.timestamp, "key": codec.encode_data(r.key),
                     "value": codec.encode_data(r.value), "headers": codec.encode_headers(r.headers),
                     "producer_id": r.producer_id, "is_transactional": r.is_transactional}
                    for r in consumed.records]})


@bp.get(PARTITION + "/offsets")
def list_offsets(topic_name: str, partition_id: int):
    """ListOffsets; ``offset`` and ``timestamp`` are -1 when no record is at or after the time."""
    raw = inputs.query_choice_or_integer("timestamp", ("latest", "earliest"), "latest")
    timestamp = {"latest": -1, "earliest": -2}.get(raw, raw)
    isolation = inputs.query_choice("isolation_level", ISOLATION_LEVELS, READ_COMMITTED)
    engine = current_engine()
    found = engine.call(engine.list_offsets, topic_name, partition_id, timestamp, isolation)
    return jsonify({"topic_name": topic_name, "partition_id": partition_id, "isolation_level": isolation,
                    "offset": found.offset, "timestamp": found.timestamp})
