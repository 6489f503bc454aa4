"""Acting on a request a fault matches, in the Kafka listener.

The listener calls :func:`handle` instead of the API's handler while any fault is
installed (one attribute check when none is). It runs before the handler, so before
any side effect -- kfake checks its faults at the same point as its ACLs. A delay
or a pause holds the answer, not the work: the work of a connection's requests runs
in the order they came (``exactly/app/kafka/server.py``), whatever is held.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from exactly.app.kafka import fault_shapes as shapes
from exactly.app.faults.fault import Action, Fault, Faults
from exactly.app.kafka.api import (
    CLOSE,
    LEADER_MOVED,
    ApiKey,
    Handler,
    RequestContext,
    current_leader,
    node_endpoints,
)

log = logging.getLogger(__name__)


async def handle(faults: Faults, api_key: int, handler: Handler, ctx: RequestContext, body: Any) -> Any:
    """The answer to one request: the handler's, or what the fault that fires on it makes of it."""
    fault = faults.fire(shapes.facts(api_key, ctx.client_id, str(ctx.principal), body, _ids(ctx)))
    if fault is None:
        return await handler(ctx, body)
    action = fault.spec.action
    if action is Action.ERROR:
        return await _error(fault, api_key, handler, ctx, body)
    if action is Action.CLOSE_BEFORE:
        return CLOSE
    if action is Action.NO_ANSWER:
        await asyncio.get_running_loop().create_future()  # cancelled when the connection closes
    answer = await handler(ctx, body)  # at once: a connection's appends stay in request order
    if action is Action.CLOSE_AFTER:
        return CLOSE
    await asyncio.sleep(fault.spec.delay_ms / 1000 if action is Action.DELAY else fault.remaining_s())
    return answer


async def _error(fault: Fault, api_key: int, handler: Handler, ctx: RequestContext, body: Any) -> Any:
    """The fault's error on the matching partitions (every one, without a partition
    filter), the other partitions answered for real."""
    assert fault.spec.error is not None
    if getattr(body, "acks", None) == 0:
        return None  # Produce with acks=0 is never answered, an error neither
    match = fault.spec.match
    ids = _ids(ctx)
    partitions = shapes.partitions_of(body, ids)
    faulted = tuple(tp for tp in partitions if not match.by_partition or match.partition_matches(*tp))
    answer = shapes.error_answer(api_key, ctx.version, fault.spec.error.code, body, faulted, ids)
    if answer is None:
        log.warning("fault %d: %s v%d has no error field to carry %s; closing the connection instead",
                    fault.id, api_key, ctx.version, fault.spec.error.name)
        return CLOSE
    if fault.spec.error.code in LEADER_MOVED and api_key in _TOLD_LEADER and "responses" in answer:
        answer = _leader_told(ctx, api_key, answer)
    if len(faulted) == len(partitions):
        return answer
    real = await handler(ctx, shapes.without(body, lambda t, p: (t, p) in faulted, ids))
    merged = shapes.merge(api_key, ctx.version, real, answer)
    if isinstance(merged, dict) and "node_endpoints" in answer:
        merged["node_endpoints"] = answer["node_endpoints"]
    return merged


#: where the answers that tell a moved leader (KIP-951) keep their partitions
_TOLD_LEADER = {ApiKey.PRODUCE: "partition_responses", ApiKey.FETCH: "partitions"}


def _leader_told(ctx: RequestContext, api_key: int, answer: dict) -> dict:
    """An injected NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH answered as Kafka answers
    a leader that moved (KIP-951, Produce v10+ and Fetch v12+): each partition names its
    leader (this node), whose endpoint the answer gives (older versions drop both)."""
    partitions = _TOLD_LEADER[ApiKey(api_key)]
    topics = [{**topic, partitions: [{**p, "current_leader": current_leader(ctx, p["error_code"])}
                                     for p in topic[partitions]]} for topic in answer["responses"]]
    return {**answer, "responses": topics,
            "node_endpoints": node_endpoints(ctx, (p for topic in topics for p in topic[partitions]))}


def _ids(ctx: RequestContext) -> shapes.TopicIds:
    """Topic names by id and back, for a request that names topics by id."""
    topics = ctx.engine.topics

    def id_of(name: str) -> uuid.UUID | None:
        info = topics.topic_info(name)
        return None if info is None else info.topic_id

    return shapes.TopicIds(topics.names_by_id, id_of)
