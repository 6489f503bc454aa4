"""Fetch: stored batches served verbatim, with Kafka's long polling and size limits.

Per partition the engine reads whole batches from the fetch offset up to the high
watermark (read_uncommitted) or the last stable offset (read_committed, with the
aborted transactions in range, which the client uses to drop aborted data).

Sizes, as Kafka (KIP-74): partitions are read in request order, each up to its
``partition_max_bytes`` and what is left of the response's ``max_bytes``; the
first partition that returns data returns at least one whole batch even when that
batch is larger, so a consumer always makes progress, and later partitions only
what fits.

Long polling: when the response holds fewer than ``min_bytes`` and no partition
has an error, the request waits up to ``max_wait_ms`` for the high watermark of one
of its partitions to move -- an append becoming durable, or a transaction marker,
which is also what moves the LSO -- then reads again.

Fetch sessions (KIP-227): none are created. A request for one gets ``SessionId 0``
(a full fetch every time), which every client accepts.

What later versions add, as Kafka 4's broker answers it:

- v12 (KIP-320 for fetchers): a partition's ``LastFetchedEpoch`` is checked against
  the log's one leader epoch -- an epoch after it is OFFSET_OUT_OF_RANGE, a fetch
  offset past its end answers ``DivergingEpoch`` (epoch 0, where it ends) and no
  records -- instead of the client learning it from an OffsetForLeaderEpoch.
  ``PreferredReadReplica`` is always -1 (the one replica is the leader's) and no
  ``SnapshotId`` is ever given (that is KRaft's metadata log, not a topic's).
- v13 (KIP-516): topics by id; an id that is no topic's (never was, or its topic was
  deleted, even if one of the same name exists since) is UNKNOWN_TOPIC_ID.
- v12/v16 (KIP-951): with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH a partition
  says who leads it now (``CurrentLeader``) and the response gives that node's
  endpoint (``NodeEndpoints``), so the client need not ask Metadata first.
- v15 (KIP-903) moves the replica id into ``ReplicaState``; v17 and v18 add a
  follower's directory id and high watermark. This node has no followers: a fetch
  from one is served as a consumer's, as it was before v15.
"""

from __future__ import annotations

import asyncio

import uuid
from typing import Any

from exactly.app.kafka import authorization
from exactly.app.kafka.api import (
    LEADER_EPOCH,
    ApiKey,
    RequestContext,
    check_leader_epoch,
    current_leader,
    error_code,
    node_endpoints,
    serves,
)
from exactly.app.kafka.authorization import T
from exactly.app.kafka.codec import millis
from exactly.storage import topic_id
from exactly.storage.errors import (
    FetchSessionIdNotFoundError,
    KafkaError,
    OffsetOutOfRangeError,
    UnknownTopicIdError,
)
from exactly.storage.isolation_level import IsolationLevel


@serves(ApiKey.FETCH, 4, 18)
async def fetch(ctx: RequestContext, request: Any) -> dict:
    if getattr(request, "session_id", 0) != 0:
        return {"error_code": FetchSessionIdNotFoundError.code, "session_id": 0, "responses": []}
    loop = asyncio.get_running_loop()  # the engine's: this handler runs on it
    deadline = loop.time() + millis(request.max_wait) / 1000
    names = _topic_names(ctx, request)
    watched = [(name, p.partition) for name, topic in zip(names, request.topics) if name is not None
               for p in topic.partitions]
    while True:
        topics, size, failed = await _read(ctx, request, names)
        remaining = deadline - loop.time()
        if size >= request.min_bytes or failed or remaining <= 0 or not watched:
            return {"error_code": 0, "session_id": 0, "responses": topics,
                    "node_endpoints": node_endpoints(ctx, (p for t in topics for p in t["partitions"]))}
        await ctx.engine.partitions.wait_for_data(remaining, watched)


def _topic_names(ctx: RequestContext, request: Any) -> list[str | None]:
    """Each requested topic's name: as given (v4-12), or its id's (v13+; None for an
    id that is no topic's)."""
    if ctx.version < 13:
        return [topic.topic for topic in request.topics]
    named = ctx.engine.topics.names_by_id(topic.topic_id for topic in request.topics)
    return [named.get(topic.topic_id) for topic in request.topics]


async def _read(ctx: RequestContext, request: Any, names: list[str | None]) -> tuple[list[dict], int, bool]:
    """One pass over the requested partitions: ``(topics, bytes of records, any error)``."""
    committed = getattr(request, "isolation_level", 0) == IsolationLevel.READ_COMMITTED
    budget = getattr(request, "max_bytes", 2**31 - 1)
    size, failed, topics = 0, False, []
    for topic, name in zip(request.topics, names):
        partitions = []
        for wanted in topic.partitions:
            entry = await _read_partition(ctx, name, getattr(topic, "topic_id", None), wanted,
                                          min(wanted.partition_max_bytes, budget - size),
                                          first=size == 0, committed=committed)
            size += len(entry["records"])
            failed = failed or entry["error_code"] != 0
            partitions.append(entry)
        topics.append({"topic": name, "topic_id": getattr(topic, "topic_id", topic_id.ZERO), "partitions": partitions})
    return topics, size, failed


async def _read_partition(ctx: RequestContext, topic: str | None, id_: uuid.UUID | None, wanted: Any, limit: int,
                          first: bool, committed: bool) -> dict:
    entry = {"partition_index": wanted.partition, "error_code": 0, "high_watermark": -1,
             "last_stable_offset": -1, "log_start_offset": -1, "preferred_read_replica": -1,
             "aborted_transactions": [] if committed else None, "records": b""}
    try:
        if topic is None:  # Kafka answers an empty list of aborted transactions there, whatever the isolation
            entry["aborted_transactions"] = []
            raise UnknownTopicIdError(f"no topic has the id {topic_id.to_string(id_ or topic_id.ZERO)}")
        authorization.check(ctx, ApiKey.FETCH, T, topic)
        check_leader_epoch(getattr(wanted, "current_leader_epoch", -1))
        log = ctx.engine.partitions.partition_offsets(topic, wanted.partition)
        entry.update(high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                     log_start_offset=log.log_start_offset)
        diverging = _diverging_epoch(getattr(wanted, "last_fetched_epoch", -1), wanted.fetch_offset,
                                     log.log_start_offset, log.high_watermark)
        if diverging is not None:
            entry["diverging_epoch"] = diverging
            return entry
        if limit <= 0 and not first:
            return entry  # the response is full
        result = ctx.engine.partitions.fetch(topic, wanted.partition, wanted.fetch_offset, max(limit, 0),
                                  IsolationLevel(committed))
    except KafkaError as e:
        entry["error_code"] = error_code(e)
        entry["current_leader"] = current_leader(ctx, entry["error_code"])
        return entry
    if first or len(result.records) <= limit:
        entry["records"] = result.records
        if committed:
            entry["aborted_transactions"] = [{"producer_id": pid, "first_offset": first_offset}
                                             for pid, first_offset in result.aborted_transactions or ()]
    return entry


def _diverging_epoch(last_fetched_epoch: int, fetch_offset: int, log_start_offset: int,
                     end_offset: int) -> dict | None:
    """Kafka's check of a fetcher's last fetched epoch (``Partition.readRecords``), on a
    log with one leader epoch that ends where a consumer can read to (the high
    watermark, as OffsetForLeaderEpoch answers): None to read on; the diverging epoch
    when the fetch offset is past that end. :raise OffsetOutOfRangeError: an epoch
    after the log's, or an offset before its start."""
    if last_fetched_epoch < 0:
        return None
    if last_fetched_epoch > LEADER_EPOCH:
        raise OffsetOutOfRangeError(f"Could not determine the end offset of the last fetched epoch "
                                    f"{last_fetched_epoch}: the log's latest is {LEADER_EPOCH}")
    if fetch_offset < log_start_offset:
        raise OffsetOutOfRangeError(f"fetch offset {fetch_offset} is before the log start offset {log_start_offset}")
    if end_offset < fetch_offset:
        return {"epoch": LEADER_EPOCH, "end_offset": end_offset}
    return None
