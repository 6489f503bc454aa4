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
"""

from __future__ import annotations

import asyncio

from typing import Any

from exactly.app.kafka import authorization
from exactly.app.kafka.api import ApiKey, RequestContext, check_leader_epoch, error_code, serves
from exactly.app.kafka.authorization import T
from exactly.app.kafka.codec import millis
from exactly.storage.errors import FetchSessionIdNotFoundError, KafkaError
from exactly.storage.isolation_level import IsolationLevel


@serves(ApiKey.FETCH, 4, 11)
async def fetch(ctx: RequestContext, request: Any) -> dict:
    if getattr(request, "session_id", 0) != 0:
        return {"error_code": FetchSessionIdNotFoundError.code, "session_id": 0, "responses": []}
    loop = asyncio.get_running_loop()  # the engine's: this handler runs on it
    deadline = loop.time() + millis(request.max_wait) / 1000
    watched = [(topic.topic, p.partition) for topic in request.topics for p in topic.partitions]
    while True:
        topics, size, failed = await _read(ctx, request)
        remaining = deadline - loop.time()
        if size >= request.min_bytes or failed or remaining <= 0 or not watched:
            return {"error_code": 0, "session_id": 0, "responses": topics}
        await ctx.engine.partitions.wait_for_data(remaining, watched)


async def _read(ctx: RequestContext, request: Any) -> tuple[list[dict], int, bool]:
    """One pass over the requested partitions: ``(topics, bytes of records, any error)``."""
    committed = getattr(request, "isolation_level", 0) == IsolationLevel.READ_COMMITTED
    budget = getattr(request, "max_bytes", 2**31 - 1)
    size, failed, topics = 0, False, []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            entry = await _read_partition(ctx, topic.topic, wanted, min(wanted.partition_max_bytes, budget - size),
                                          first=size == 0, committed=committed)
            size += len(entry["records"])
            failed = failed or entry["error_code"] != 0
            partitions.append(entry)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return topics, size, failed


async def _read_partition(ctx: RequestContext, topic: str, wanted: Any, limit: int, first: bool,
                          committed: bool) -> dict:
    entry = {"partition_index": wanted.partition, "error_code": 0, "high_watermark": -1,
             "last_stable_offset": -1, "log_start_offset": -1, "preferred_read_replica": -1,
             "aborted_transactions": [] if committed else None, "records": b""}
    try:
        authorization.check(ctx, ApiKey.FETCH, T, topic)
        check_leader_epoch(getattr(wanted, "current_leader_epoch", -1))
        log = ctx.engine.partitions.partition_offsets(topic, wanted.partition)
        entry.update(high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                     log_start_offset=log.log_start_offset)
        if limit <= 0 and not first:
            return entry  # the response is full
        result = ctx.engine.partitions.fetch(topic, wanted.partition, wanted.fetch_offset, max(limit, 0),
                                  IsolationLevel(committed))
    except KafkaError as e:
        entry["error_code"] = error_code(e)
        return entry
    if first or len(result.records) <= limit:
        entry["records"] = result.records
        if committed:
            entry["aborted_transactions"] = [{"producer_id": pid, "first_offset": first_offset}
                                             for pid, first_offset in result.aborted_transactions or ()]
    return entry
