"""Records over HTTP: produce (REST Proxy v3), read, list offsets, producer ids.

* ``POST .../topics/<topic>/records`` appends one record and answers once it is
  durable (acks=all); several records concatenated in one body (the proxy's
  streaming produce) are appended in order and answered by one delivery report each,
  streamed as each becomes durable. ``POST .../records:batch`` is the proxy's batch
  produce (entries with ids, 207 with successes and failures). With
  ``producer_id``, ``producer_epoch`` and ``sequence`` (from ``POST .../producer-ids``,
  the sequence counting 0, 1, 2, ... per partition) the batch is an idempotent
  producer's: a retry of one of the producer's last five batches is answered with
  the original offset and appends nothing, exactly as a Kafka broker answers a
  retried Produce, also after a restart.
* ``GET .../partitions/<p>/records`` reads as a consumer does
  (``exactly.storage.read_committed.read_records``): in ``read_committed`` (the default
  here, because that is what exactly-once applications read) only records below the
  last stable offset, without aborted ones; control records are never shown.
* ``GET .../partitions/<p>/offsets`` is ListOffsets: ``latest`` in read_committed is
  the LSO, ``earliest`` the log start, a time the first offset at or after it;
  ``GET .../partitions/<p>/offset`` is the proxy's earliest-and-latest resource.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, TypedDict

from flask import Blueprint, Response, jsonify, stream_with_context

from exactly.app.client.partitioner import partition_for_key
from exactly.app.engine import READ_COMMITTED
from exactly.app.http import current_engine, errors
from exactly.app.http.access import TOPIC, anywhere, kafka
from exactly.app.http.api import codec, models
from exactly.app.http.api.idempotency import Scope, idempotent
from exactly.app.http.api.resources import cluster_id, crn, resource
from exactly.app.http.api.route import (CHANGES, CLUSTER_PATH, ON_TOPIC, PARTITION_PATH, TOPIC_PATH, TXN_ERRORS,
                                        Route, declare)
from exactly.app.http.api.validation import body, json_values, parse, query
from exactly.app.kafka.wire import ApiKey
from exactly.storage.errors import InvalidRequestError, KafkaError
from exactly.storage.partition_log import AppendResult
from exactly.storage.read_committed import read_records
from exactly.storage.record_batch import SimpleRecord, encode_batch

if TYPE_CHECKING:
    from exactly.app.engine import Engine

bp = Blueprint("records", __name__)

#: how long a produce waits for its record to be durable
PRODUCE_TIMEOUT_S = 60


# -- produce ----------------------------------------------------------------------------


def parse_record(item: models.ProduceRecord, now_ms: int, where: str = "") -> tuple[int | None, SimpleRecord]:
    """``(partition_id or None, record)`` of a REST v3 record; without a timestamp the
    record is stamped ``now_ms`` (the broker's clock)."""
    key = codec.decode_data(item.key, f"{where}key")
    value = codec.decode_data(item.value, f"{where}value")
    headers = codec.decode_headers(item.headers, f"{where}headers")
    assert not isinstance(item.timestamp, str), "ProduceRecord's validator turns an ISO 8601 time into milliseconds"
    return item.partition_id, SimpleRecord(value, key=key, headers=headers,
                                           timestamp=now_ms if item.timestamp is None else item.timestamp)


def choose_partition(count: int, key: bytes | None) -> int:
    """Kafka's default partitioner over ``count`` partitions: murmur2 of the key, else any."""
    return partition_for_key(key, count) if key is not None else random.randrange(count)


@dataclass(frozen=True)
class _Parsed:
    """One record of a produce request, ready to append: where, and the batch."""

    partition: int | None
    record: SimpleRecord
    batch: bytes
    #: the request's key and value objects, for the delivery report's summaries
    key: Any
    value: Any


def _parse(item: Any, now_ms: int, where: str = "") -> _Parsed:
    """A produce request's record (a JSON value, or an already validated entry)."""
    if not isinstance(item, models.ProduceRequest):
        item = parse(models.ProduceRequest, item, where)
    partition, record = parse_record(item, now_ms, where)
    batch = encode_batch([record], **_producer_fields(item, where))
    return _Parsed(partition, record, batch, item.key, item.value)


def _start(engine: "Engine", topic: str, count: int, parsed: _Parsed) -> tuple[int, Future[AppendResult]]:
    """Append one record (partitioned as Kafka's producer does over the topic's ``count``
    partitions): its partition, and the future of its AppendResult, done once durable."""
    partition = choose_partition(count, parsed.record.key) if parsed.partition is None else parsed.partition
    return partition, engine.submit(engine.partitions.start_produce, topic, partition, parsed.batch)


def _report(topic: str, parsed: _Parsed, partition: int, result: AppendResult) -> dict[str, Any]:
    """REST v3's delivery report of one durable record; ``timestamp`` is ISO 8601, as
    the proxy sends it (the log append time on a LogAppendTime topic)."""
    timestamp = parsed.record.timestamp if result.log_append_time < 0 else result.log_append_time
    return {"error_code": 200, "cluster_id": cluster_id(), "topic_name": topic, "partition_id": partition,
            "offset": result.base_offset, "timestamp": codec.iso_time(timestamp) if timestamp is not None else None,
            "key": codec.summary(parsed.key, parsed.record.key),
            "value": codec.summary(parsed.value, parsed.record.value)}


#: one record of a request: parsed and started (its partition, its append), or its error
_Outcome = tuple[_Parsed, int, Future[AppendResult]] | KafkaError


def _outcomes(engine: "Engine", topic: str, count: int, items: list[Any]) -> list[_Outcome]:
    """Parse and start every record, in order (a bad one is its error, the others go
    on); each started one's future resolves once it is durable."""
    now = engine.clock.now_ms()
    started: list[_Outcome] = []
    for i, item in enumerate(items):
        try:
            parsed = _parse(item, now, f"records[{i}]." if len(items) > 1 else "")
            started.append((parsed, *_start(engine, topic, count, parsed)))
        except KafkaError as e:
            started.append(e)
    return started


def _outcome_body(topic: str, outcome: _Outcome) -> dict[str, Any]:
    """The delivery report of one record, or its error body (Confluent's code, Kafka's name)."""
    try:
        if isinstance(outcome, KafkaError):
            raise outcome
        parsed, partition, appended = outcome
        return _report(topic, parsed, partition, appended.result(PRODUCE_TIMEOUT_S))
    except KafkaError as e:
        return errors.kafka_error_body(e)
    except Exception as e:  # noqa: BLE001 -- one record's bug must not end the others' reports
        return errors.server_error_body(e)


def _partition_count(engine: "Engine", topic: str) -> int:
    """The topic's partitions: an unknown topic fails the whole request (404), not each record in it."""
    return engine.call(engine.topics.partition_count, topic)


PRODUCE = kafka(ApiKey.PRODUCE, ON_TOPIC)
LIST_OFFSETS = kafka(ApiKey.LIST_OFFSETS, ON_TOPIC)


@declare(bp, Route(
    "post", TOPIC_PATH + "/records", "Produce record", "Records", 200, models.ProduceResponse, TXN_ERRORS,
    body=models.ProduceRequest, idempotent=True, needs=PRODUCE,
    description="Appends one record; answers once it is durable. With producer_id, producer_epoch and sequence, a "
                "retry is deduplicated as Kafka does (the original offset). Several record objects concatenated in "
                "the body (the proxy's streaming produce) get 200 and one delivery report per record, concatenated "
                "in order, each with its own error_code (200, or the error's code with message, error_name and "
                "kafka_error_code)."))
@idempotent(lambda topic_name: Scope(topic=topic_name))
def produce(topic_name: str):
    """One record: its delivery report, or its error as the HTTP status. Several
    records concatenated in the body (the proxy's streaming mode): 200, and one
    delivery report per record, in order, each streamed as soon as that record is
    durable, each with its own ``error_code`` (200: delivered)."""
    items = json_values()
    engine = current_engine()
    count = _partition_count(engine, topic_name)
    if len(items) == 1:
        parsed = _parse(items[0], engine.clock.now_ms())
        partition, appended = _start(engine, topic_name, count, parsed)
        return jsonify(_report(topic_name, parsed, partition, appended.result(PRODUCE_TIMEOUT_S)))
    outcomes = _outcomes(engine, topic_name, count, items)

    def reports() -> Iterator[bytes]:
        for outcome in outcomes:
            yield json.dumps(_outcome_body(topic_name, outcome), separators=(",", ":")).encode() + b"\n"

    return Response(stream_with_context(reports()), mimetype="application/json")


@declare(bp, Route(
    "post", TOPIC_PATH + "/records:batch", "Produce record batch", "Records", 207, models.ProduceBatchResponse,
    body=models.ProduceBatch, idempotent=True, needs=PRODUCE,
    description="The proxy's batch produce: entries with distinct ids, each appended on its own; successes and "
                "failures name their entry's id."))
@idempotent(lambda topic_name: Scope(topic=topic_name))
def produce_batch(topic_name: str):
    """The proxy's batch produce: ``{"entries": [{"id", ...record}]}``, ids unique,
    at most :data:`models.MAX_BATCH_ENTRIES`; 207 with ``successes`` and ``failures``, each
    naming its entry's id. Entries are appended in order, each on its own."""
    entries = body(models.ProduceBatch).entries
    ids: list[str] = []
    for i, entry in enumerate(entries):
        if entry.id in ids:
            raise InvalidRequestError(f"entries[{i}].id: {entry.id!r} appears more than once; entry ids must be "
                                      f"distinct")
        ids.append(entry.id)
    engine = current_engine()
    count = _partition_count(engine, topic_name)
    successes, failures = [], []
    for entry_id, outcome in zip(ids, _outcomes(engine, topic_name, count, entries)):
        answer = _outcome_body(topic_name, outcome)
        if answer["error_code"] == 200:
            successes.append({"id": entry_id, **{k: v for k, v in answer.items() if k != "error_code"}})
        else:
            failures.append({"id": entry_id, **answer})
    return jsonify({"successes": successes, "failures": failures}), 207


class _ProducerFields(TypedDict, total=False):
    producer_id: int
    producer_epoch: int
    base_sequence: int


def _producer_fields(item: models.ProduceRequest, where: str = "") -> _ProducerFields:
    """encode_batch's producer arguments: all three of producer_id, producer_epoch,
    sequence, or none (a plain, non-idempotent record)."""
    producer_id, producer_epoch, sequence = item.producer_id, item.producer_epoch, item.sequence
    if producer_id is None and producer_epoch is None and sequence is None:
        return {}
    if producer_id is None or producer_epoch is None or sequence is None:
        raise InvalidRequestError(f"{where}producer_id, producer_epoch and sequence go together: "
                                  f"send all three or none")
    return {"producer_id": producer_id, "producer_epoch": producer_epoch, "base_sequence": sequence}


@declare(bp, Route("post", CLUSTER_PATH + "/producer-ids", "Init producer id", "Records", 200, models.ProducerId,
                   CHANGES, description="A new producer id (epoch 0) for idempotent produce.",
                   needs=kafka(ApiKey.INIT_PRODUCER_ID, anywhere(TOPIC), or_cluster=True)))
def init_producer_id():
    """InitProducerId without a transactional id: a fresh producer id (never reused)
    at epoch 0, for idempotent produce. Needs IdempotentWrite on the Cluster, or Write
    on any topic (KIP-679), as Kafka's InitProducerId."""
    engine = current_engine()
    producer_id, epoch = engine.call(engine.transactions.init_producer_id, None, -1)
    return jsonify({"producer_id": producer_id, "producer_epoch": epoch})


# -- read -------------------------------------------------------------------------------


@declare(bp, Route("get", PARTITION_PATH + "/records", "Read records", "Records", 200, models.RecordList, (404, 416),
                   query=models.ReadQuery, needs=kafka(ApiKey.FETCH, ON_TOPIC)))
def read(topic_name: str, partition_id: int):
    asked = query(models.ReadQuery)
    offset, max_bytes, isolation = asked.offset, asked.max_bytes, asked.isolation_level
    engine = current_engine()
    offset, result = engine.call(engine.partitions.fetch_from, topic_name, partition_id, offset, max_bytes,
                                 isolation)
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


@declare(bp, Route("get", PARTITION_PATH + "/offsets", "List offsets", "Records", 200, models.Offsets,
                   query=models.OffsetsQuery, needs=LIST_OFFSETS))
def list_offsets(topic_name: str, partition_id: int):
    """ListOffsets; ``offset`` and ``timestamp`` are -1 when no record is at or after the time."""
    asked = query(models.OffsetsQuery)
    timestamp = {"latest": -1, "earliest": -2}.get(asked.timestamp)
    if timestamp is None:
        timestamp = int(asked.timestamp)
    if timestamp > models.INT64_MAX:
        raise InvalidRequestError(f"query parameter timestamp must be at most {models.INT64_MAX}, "
                                  f"got {asked.timestamp!r}")
    isolation = asked.isolation_level
    engine = current_engine()
    found = engine.call(engine.partitions.list_offsets, topic_name, partition_id, timestamp, isolation)
    return jsonify({"topic_name": topic_name, "partition_id": partition_id, "isolation_level": isolation,
                    "offset": found.offset, "timestamp": found.timestamp})


@declare(bp, Route("get", PARTITION_PATH + "/offset", "Get partition offsets", "Records", 200, models.PartitionOffsets,
                   query=models.PartitionOffsetsQuery, needs=LIST_OFFSETS))
def partition_offsets(topic_name: str, partition_id: int):
    """The proxy's ``KafkaPartitionWithOffsets``: earliest and latest offset at once.
    As the proxy (whose admin client lists offsets read_uncommitted) ``latest`` is
    the high watermark; ``isolation_level=read_committed`` (Exactly's) makes it the LSO."""
    isolation = query(models.PartitionOffsetsQuery).isolation_level
    engine = current_engine()
    earliest = engine.call(engine.partitions.list_offsets, topic_name, partition_id, -2, isolation)
    latest = engine.call(engine.partitions.list_offsets, topic_name, partition_id, -1, isolation)
    return jsonify(resource("KafkaPartitionWithOffsets", ("topics", topic_name, "partitions", partition_id, "offset"),
                            crn(topic=topic_name, partition=partition_id, offset_type="earliest_and_latest"),
                            cluster_id=cluster_id(), topic_name=topic_name, partition_id=partition_id,
                            earliest_offset=earliest.offset, latest_offset=latest.offset,
                            isolation_level=isolation))
