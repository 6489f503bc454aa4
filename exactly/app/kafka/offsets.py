"""Offsets: where to read (ListOffsets, OffsetForLeaderEpoch) and where a group got
to (OffsetCommit, OffsetFetch).

ListOffsets answers -1 (latest) with the high watermark, or the last stable offset
under read_committed; -2 (earliest) with the log start offset; -3 (v7+, KIP-734) with
the first record of the largest timestamp; a timestamp with the first record at or
after it (-1 when there is none): the record's own offset and timestamp, not its
batch's. OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a
partition whose group has transactional offsets pending, and the consumer retries
until the transaction ends (librdkafka's read_committed consumers ask for this).
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from exactly.app.engine.partitions import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from exactly.app.kafka import authorization
from exactly.app.kafka.api import LEADER_EPOCH, ApiKey, RequestContext, check_leader_epoch, error_code, serves
from exactly.app.kafka.authorization import G, T
from exactly.coordinator.group_metadata import CommittedOffset
from exactly.storage.errors import (
    InvalidRequestError,
    KafkaError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)


def by_topic(entries: Iterable[tuple[str, object]], topic_key: str = "name", partitions_key: str = "partitions",
             ) -> list[dict[str, Any]]:
    """``[(topic, partition entry or index)]`` grouped as Kafka's responses nest them."""
    grouped: dict[str, list[object]] = {}
    for topic, entry in entries:
        grouped.setdefault(topic, []).append(entry)
    return [{topic_key: topic, partitions_key: partitions} for topic, partitions in grouped.items()]


#: the first ListOffsets version that knows each special timestamp (Kafka's
#: ``ReplicaManager.timestampMinSupportedVersion``); any other negative one, or one
#: older than its version, is UNSUPPORTED_VERSION for that partition
TIMESTAMP_SINCE = {LATEST_TIMESTAMP: 0, EARLIEST_TIMESTAMP: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8,
                   LATEST_TIERED_TIMESTAMP: 9, EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11}


def check_timestamp(version: int, timestamp: int) -> None:
    """UNSUPPORTED_VERSION for a special timestamp ListOffsets ``version`` does not know."""
    since = 0 if timestamp >= 0 else TIMESTAMP_SINCE.get(timestamp)
    if since is None or version < since:
        raise UnsupportedVersionError(f"ListOffsets v{version} does not support timestamp {timestamp}")


@serves(ApiKey.LIST_OFFSETS, 1, 11)
async def list_offsets(ctx: RequestContext, request: Any) -> dict:
    """Each partition's offset for its timestamp (``Partitions.list_offsets``). A
    partition asked for twice is answered once, INVALID_REQUEST, as Kafka does. v10's
    ``timeout`` bounds a wait for remote (tiered) storage, which Exactly has not: every
    answer is immediate, so it never expires."""
    isolation = getattr(request, "isolation_level", 0)
    asked = Counter((topic.name, wanted.partition_index) for topic in request.topics for wanted in topic.partitions)
    entries, answered = [], set()
    for topic in request.topics:
        for wanted in topic.partitions:
            key = (topic.name, wanted.partition_index)
            if key in answered:
                continue
            entry = {"partition_index": wanted.partition_index, "error_code": 0, "timestamp": -1,
                     "offset": -1, "leader_epoch": -1}
            try:
                authorization.check(ctx, ApiKey.LIST_OFFSETS, T, topic.name)
                if asked[key] > 1:
                    answered.add(key)
                    raise InvalidRequestError(f"{topic.name}-{wanted.partition_index} is asked for more than once")
                check_timestamp(ctx.version, wanted.timestamp)
                check_leader_epoch(getattr(wanted, "current_leader_epoch", -1))
                found = ctx.engine.partitions.list_offsets(topic.name, wanted.partition_index, wanted.timestamp,
                                                isolation)
                entry.update(offset=found.offset, timestamp=found.timestamp,
                             leader_epoch=LEADER_EPOCH if found.offset >= 0 else -1)
            except KafkaError as e:
                entry["error_code"] = error_code(e)
            entries.append((topic.name, entry))
    return {"topics": by_topic(entries)}


@serves(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def offset_for_leader_epoch(ctx: RequestContext, request: Any) -> dict:
    """The end offset of a leader epoch. There is one epoch, so any epoch up to ours
    ends where a consumer can read to: the high watermark (KIP-320 validation)."""
    entries = []
    for topic in request.topics:
        for wanted in topic.partitions:
            entry = {"partition": wanted.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
            try:
                authorization.check(ctx, ApiKey.OFFSET_FOR_LEADER_EPOCH, T, topic.topic)
                check_leader_epoch(wanted.current_leader_epoch)
                log = ctx.engine.partitions.partition_offsets(topic.topic, wanted.partition)
                if wanted.leader_epoch <= LEADER_EPOCH:
                    entry.update(leader_epoch=LEADER_EPOCH, end_offset=log.high_watermark)
            except KafkaError as e:
                entry["error_code"] = error_code(e)
            entries.append((topic.topic, entry))
    return {"topics": by_topic(entries, topic_key="topic")}


def requested_offsets(ctx: RequestContext, api: ApiKey, topics: Any) -> tuple[dict, list[tuple[str, dict]]]:
    """An OffsetCommit / TxnOffsetCommit request's offsets by partition, and an error
    entry for each partition the principal may not Read (TOPIC_AUTHORIZATION_FAILED)
    or that does not exist (Kafka refuses those at the edge)."""
    now = ctx.engine.clock.now_ms()
    offsets, unknown = {}, []
    for topic in topics:
        readable = authorization.allowed(ctx, api, T, topic.name)
        for p in topic.partitions:
            error: KafkaError | None = None
            if not readable:
                error = authorization.denial(T, topic.name)
            elif not ctx.engine.partitions.has_partition(topic.name, p.partition_index):
                error = UnknownTopicOrPartitionError(f"{topic.name}-{p.partition_index} does not exist")
            if error is not None:
                unknown.append((topic.name, {"partition_index": p.partition_index, "error_code": error.code}))
                continue
            offsets[(topic.name, p.partition_index)] = CommittedOffset(
                p.committed_offset, p.committed_metadata or "", getattr(p, "committed_leader_epoch", -1), now)
    return offsets, unknown


def refused_offsets(topics: Any, error: KafkaError, topic_key: str = "name") -> list[dict]:
    """An offset commit's answer when the whole request is refused: ``error`` for every partition."""
    return [{topic_key: getattr(t, topic_key), "partitions": [
        {"partition_index": p.partition_index, "error_code": error.code} for p in t.partitions]} for t in topics]


@dataclass(frozen=True)
class NamedTopic:
    """A request's topic named by id (OffsetCommit and OffsetFetch v10), with its name."""

    name: str
    topic_id: uuid.UUID
    partitions: Any = ()
    partition_indexes: Any = ()


def named_by_id(ctx: RequestContext, topics: Any, partitions: str) -> tuple[list[NamedTopic], list[dict]]:
    """v10 names topics by id (KIP-848): the topics a name is found for, and for each id
    no topic has an answer of UNKNOWN_TOPIC_ID for its partitions, as Kafka's KafkaApis
    answers before anything else is checked."""
    named, unknown = [], []
    for topic in topics:
        name = ctx.engine.groups.topic_name(topic.topic_id)
        entries = getattr(topic, partitions)
        if name is None:
            error = UnknownTopicIdError(f"no topic has the id {topic.topic_id}")
            unknown.append({"topic_id": topic.topic_id, "partitions": [
                {"partition_index": p if partitions == "partition_indexes" else p.partition_index,
                 "error_code": error.code, **({"committed_offset": -1, "committed_leader_epoch": -1, "metadata": ""}
                                              if partitions == "partition_indexes" else {})} for p in entries]})
        else:
            named.append(NamedTopic(name, topic.topic_id, **{partitions: entries}))
    return named, unknown


def by_topic_id(ctx: RequestContext, answer: list[dict]) -> list[dict]:
    """An answer's topics (``name``) named by id for v10; a topic no longer there (deleted
    while answering, or an offset of a deleted topic in "all offsets") is left out, as
    Kafka leaves out a topic whose id is the zero uuid."""
    named = []
    for topic in answer:
        info = ctx.engine.topics.topic_info(topic["name"])
        if info is not None:
            named.append({"topic_id": info.topic_id, "partitions": topic["partitions"]})
    return named


def commit_results(offsets: dict, errors: dict | BaseException, unknown: list[tuple[str, dict]],
                   code: Callable[[BaseException | None], int] = error_code) -> list[dict]:
    """The per-partition answer to an offset commit: ``errors`` per partition, or one
    error for all of them."""
    entries = [(topic, {"partition_index": partition,
                        "error_code": code(errors if isinstance(errors, BaseException)
                                           else errors.get((topic, partition)))})
               for topic, partition in offsets]
    return by_topic(entries + unknown)


@serves(ApiKey.OFFSET_COMMIT, 2, 10)
async def offset_commit(ctx: RequestContext, request: Any) -> dict:
    """Read on the group (else GROUP_AUTHORIZATION_FAILED for every partition) and on
    each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions). In a consumer group
    (KIP-848) the generation is the member epoch, and its members must commit with v9+
    (UNSUPPORTED_VERSION otherwise, as Kafka answers). v10 names topics by id: an id no
    topic has is UNKNOWN_TOPIC_ID."""
    by_id = ctx.version >= 10
    if not authorization.allowed(ctx, ApiKey.OFFSET_COMMIT, G, request.group_id):
        return {"topics": refused_offsets(request.topics, authorization.denial(G, request.group_id),
                                          "topic_id" if by_id else "name")}
    topics, unknown_ids = named_by_id(ctx, request.topics, "partitions") if by_id else (request.topics, [])
    offsets, unknown = requested_offsets(ctx, ApiKey.OFFSET_COMMIT, topics)
    try:
        errors: dict | BaseException = await ctx.engine.groups.commit_offsets(
            request.group_id, offsets, request.generation_id_or_member_epoch, request.member_id,
            getattr(request, "group_instance_id", None), ctx.version) if offsets else {}
    except KafkaError as e:
        errors = e
    answer = commit_results(offsets, errors, unknown)
    return {"topics": unknown_ids + by_topic_id(ctx, answer) if by_id else answer}


@serves(ApiKey.OFFSET_FETCH, 1, 10)
async def offset_fetch(ctx: RequestContext, request: Any) -> dict:
    """Describe on the group (else GROUP_AUTHORIZATION_FAILED) and on each topic: a topic
    asked for and not describable is TOPIC_AUTHORIZATION_FAILED, one of "all offsets"
    left out. v1 has no top-level error code: an error of the whole request is every
    requested partition's, as Kafka's ``OffsetFetchRequest.getErrorResponse`` answers it
    (rather than a closed connection)."""
    try:
        return await _offset_fetch(ctx, request)
    except KafkaError as e:
        if ctx.version >= 2:
            raise
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": None, "error_code": e.code}
            for p in t.partition_indexes]} for t in request.topics]}


async def _offset_fetch(ctx: RequestContext, request: Any) -> dict:
    """From v8 several groups, each with its own error; from v9 each names its member
    and member epoch, checked in a consumer group (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID)."""
    if ctx.version < 8:
        return {"error_code": 0, "topics": await _fetch_group(
            ctx, request.group_id, request.topics, getattr(request, "require_stable", False))}
    by_id = ctx.version >= 10
    groups = []
    for group in request.groups:
        wanted, unknown_ids = (named_by_id(ctx, group.topics, "partition_indexes")
                               if by_id and group.topics is not None else (group.topics, []))
        try:
            topics = await _fetch_group(ctx, group.group_id, wanted, request.require_stable,
                                        getattr(group, "member_id", None), getattr(group, "member_epoch", -1))
        except KafkaError as e:
            groups.append({"group_id": group.group_id, "topics": [], "error_code": e.code})
            continue
        groups.append({"group_id": group.group_id, "error_code": 0,
                       "topics": unknown_ids + by_topic_id(ctx, topics) if by_id else topics})
    return {"groups": groups}


async def _fetch_group(ctx: RequestContext, group_id: str, topics: Any, require_stable: bool,
                       member_id: str | None = None, member_epoch: int = -1) -> list[dict]:
    authorization.check(ctx, ApiKey.OFFSET_FETCH, G, group_id)
    wanted = None if topics is None else [
        (topic.name, p) for topic in topics for p in topic.partition_indexes]
    visible = {name: authorization.allowed(ctx, ApiKey.OFFSET_FETCH, T, name, audit=wanted is not None)
               for name in {t for t, _ in wanted or ()}}
    fetched = await ctx.engine.groups.fetch_offsets(
        group_id, None if wanted is None else [tp for tp in wanted if visible[tp[0]]], require_stable,
        member_id, member_epoch)
    entries = [(topic, {"partition_index": partition, "committed_offset": found.offset,
                        "committed_leader_epoch": found.leader_epoch, "metadata": found.metadata,
                        "error_code": error_code(found.error)})
               for (topic, partition), found in fetched.items()
               if visible.setdefault(topic, authorization.allowed(ctx, ApiKey.OFFSET_FETCH, T, topic, audit=False))]
    denied = [(topic, {"partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1,
                       "metadata": None, "error_code": authorization.denial(T, topic).code})
              for topic, partition in wanted or () if not visible[topic]]
    return by_topic(entries + denied)
