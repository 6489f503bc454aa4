"""ApiVersions, Metadata, FindCoordinator and DescribeCluster: what a client asks
before anything else -- which versions to speak, where each partition's leader is
and which node coordinates its group or transaction. On one node the answer to
the last two is always this broker."""

from __future__ import annotations

import re
import uuid
from typing import Any

from exactly.app.kafka import authorization
from exactly.app.kafka.api import APIS, LEADER_EPOCH, ApiKey, RequestContext, error_code, serves
from exactly.app.kafka.authorization import C, G, T, X
from exactly.app.kafka.wire import CoordinatorType
from exactly.app.security.acl import CLUSTER_NAME
from exactly.coordinator import features
from exactly.coordinator.internal_topics import INTERNAL_TOPICS
from exactly.storage import topic_id
from exactly.storage.errors import (
    ClusterAuthorizationFailedError,
    CoordinatorNotAvailableError,
    InvalidRequestError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedEndpointTypeError,
)
from exactly.storage.log_manager import validate_topic_name

BROKERS_ENDPOINT = 1


#: what KIP-511's ClientSoftwareName and ClientSoftwareVersion must match (Kafka's
#: ``ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN``)
SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@serves(ApiKey.API_VERSIONS, 0, 4)
async def api_versions(ctx: RequestContext, request: Any) -> dict:
    """Every advertised API with the versions its handler declared; INVALID_REQUEST
    (and nothing recorded) for a v3+ client software name or version Kafka would refuse;
    from v3 the supported and finalized features (``exactly/coordinator/features.py``)."""
    name = getattr(request, "client_software_name", "")
    version = getattr(request, "client_software_version", "")
    if ctx.version >= 3:
        for what, value in (("name", name), ("version", version)):
            if not SOFTWARE_NAME_VERSION.fullmatch(value):
                raise InvalidRequestError(f"client software {what} {value!r} does not match "
                                          f"{SOFTWARE_NAME_VERSION.pattern}")
    ctx.connection.software_name, ctx.connection.software_version = name, version
    return {"api_keys": [{"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
                         for api in sorted(APIS.values(), key=lambda a: a.key) if api.advertised],
            **features.api_versions_fields(ctx.engine.features.levels, ctx.engine.features.epoch, ctx.version)}


def _broker(ctx: RequestContext) -> dict:
    return {"node_id": ctx.node.node_id, "host": ctx.node.host, "port": ctx.node.port, "rack": None}


@serves(ApiKey.METADATA, 0, 13)
async def metadata(ctx: RequestContext, request: Any) -> dict:
    """Brokers (this one) and topics; a requested topic that does not exist is created
    when ``auto.create.topics.enable`` and the client allow it (``num.partitions``) and
    the principal may Create it. All topics: those the principal may Describe; a topic
    named and not describable is TOPIC_AUTHORIZATION_FAILED, existing or not. From v8
    the principal's authorized operations on each topic (and, v8 to v10, the cluster),
    when asked; from v10 each topic's id (KIP-516); from v12 topics asked for by id (an
    id no topic has: UNKNOWN_TOPIC_ID; an id is never created), as Kafka 4's broker
    answers them: when any topic is asked for by id, the names given are not looked at."""
    engine = ctx.engine
    wanted = request.topics
    ids: list[uuid.UUID] = []
    unknown_ids: list[dict] = []
    if wanted is None or (ctx.version == 0 and not wanted):
        names = [name for name in engine.topics.topic_names()
                 if authorization.allowed(ctx, ApiKey.METADATA, T, name, audit=False)]
    else:
        ids = list(dict.fromkeys(t.topic_id for t in wanted
                                 if getattr(t, "topic_id", None) not in (None, topic_id.ZERO)))
        if ids and ctx.version < 12:
            return _refused(ctx, request, InvalidRequestError(
                f"Topic IDs are not supported in requests for version {ctx.version}"))
        if not ids and any(t.name is None for t in wanted):
            return _refused(ctx, request, InvalidRequestError("a topic is asked for by name, or (v12+) by id"))
        if ids:
            named = engine.topics.names_by_id(ids)
            names = [named[i] for i in ids if i in named]
            unknown_ids = [_error_topic(UnknownTopicIdError(f"no topic has the id {topic_id.to_string(i)}"), None, i)
                           for i in ids if i not in named]
        else:
            names = list(dict.fromkeys(t.name for t in wanted))
    allow_create = (not ids and getattr(request, "allow_auto_topic_creation", True)
                    and engine.config.auto_create_topics_enable)
    asked = getattr(request, "include_topic_authorized_operations", False)
    topics = [await _topic_metadata(ctx, name, allow_create, asked, by_id=bool(ids)) for name in names]
    return {"brokers": [_broker(ctx)], "cluster_id": engine.topics.cluster_id,
            "controller_id": ctx.node.node_id, "topics": topics + unknown_ids, "error_code": 0,
            "cluster_authorized_operations": authorization.authorized_operations(
                ctx, C, CLUSTER_NAME, getattr(request, "include_cluster_authorized_operations", False))}


def _refused(ctx: RequestContext, request: Any, error: KafkaError) -> dict:
    """A request refused as a whole, as Kafka's ``MetadataRequest.getErrorResponse``
    answers it: each topic asked for with the error."""
    return {"brokers": [_broker(ctx)], "cluster_id": ctx.engine.topics.cluster_id,
            "controller_id": ctx.node.node_id, "error_code": 0,
            "topics": [_error_topic(error, t.name or "", getattr(t, "topic_id", None) or topic_id.ZERO)
                       for t in request.topics]}


def _error_topic(error: KafkaError, name: str | None, id_: uuid.UUID = topic_id.ZERO) -> dict:
    return {"error_code": error_code(error), "name": name, "topic_id": id_, "is_internal": False, "partitions": []}


async def _topic_metadata(ctx: RequestContext, name: str, allow_create: bool, asked: bool,
                          by_id: bool = False) -> dict:
    """One topic's answer; ``by_id``: it was asked for by id, so an error answers the
    id, not the name (Kafka: ids are not sensitive, names may be)."""
    engine = ctx.engine
    if not authorization.allowed(ctx, ApiKey.METADATA, T, name):
        denied = engine.topics.topic_info(name) if by_id else None
        return _error_topic(authorization.denial(T, name), None if by_id else name,
                            denied.topic_id if denied is not None else topic_id.ZERO)
    info = engine.topics.topic_info(name)
    if info is None:
        try:
            validate_topic_name(name)
            if not allow_create:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            if not authorization.allowed_to_create(ctx, ApiKey.METADATA, name):
                raise authorization.denial(T, name)
            info = await engine.topics.create_topic(name)
            assert info is not None, "create_topic returns the topic it made (None answers validate_only)"
        except TopicAlreadyExistsError:
            info = engine.topics.describe_topic(name)
        except KafkaError as e:
            return _error_topic(e, name)
    return {"error_code": 0, "name": name, "topic_id": info.topic_id, "is_internal": info.internal,
            "topic_authorized_operations": authorization.authorized_operations(ctx, T, name, asked),
            "partitions": [_partition(ctx, p) for p in range(info.partitions)]}


#: Kafka's ``max.request.partition.size.limit`` default: the most partitions one
#: DescribeTopicPartitions answer holds, whatever the request's limit
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000


@serves(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def describe_topic_partitions(ctx: RequestContext, request: Any) -> dict:
    """KIP-966's paginated Metadata (``kafka-topics --describe`` uses it): the topics
    named (none: every topic the principal may Describe) in name order, from the
    cursor's topic and partition on, at most ``ResponsePartitionLimit`` partitions (and
    :data:`MAX_REQUEST_PARTITION_SIZE_LIMIT`); ``NextCursor`` says where the next page
    starts. A topic named and not describable is TOPIC_AUTHORIZATION_FAILED (after the
    others, as Kafka's ``DescribeTopicPartitionsRequestHandler`` answers), one named
    and unknown UNKNOWN_TOPIC_OR_PARTITION; nothing is ever created."""
    cursor = request.cursor
    start = "" if cursor is None else cursor.topic_name
    if cursor is not None and cursor.partition_index < 0:
        return _pages_refused(request, InvalidRequestError(f"Invalid partition index: {cursor.partition_index}"))
    every = not request.topics
    if every:
        names = {name for name in ctx.engine.topics.topic_names() if name >= start}
    else:
        names = {t.name for t in request.topics if t.name >= start}
        if cursor is not None and cursor.topic_name not in names:
            return _pages_refused(request, InvalidRequestError(
                f"DescribeTopicPartitionsRequest topic list should contain the cursor topic: {cursor.topic_name}"))
    allowed = {name for name in names if authorization.allowed(ctx, ApiKey.DESCRIBE_TOPIC_PARTITIONS, T, name,
                                                               audit=not every)}
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, request.response_partition_limit), 1)
    topics: list[dict] = []
    next_cursor = None
    for name in sorted(allowed):
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        info = ctx.engine.topics.topic_info(name)
        if info is None:
            if not every:
                topics.append({**_error_topic(UnknownTopicOrPartitionError(f"topic {name!r} does not exist"), name),
                               "topic_authorized_operations": authorization.NOT_REQUESTED})
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        last = min(info.partitions, first + remaining)
        topics.append({"error_code": 0, "name": name, "topic_id": info.topic_id, "is_internal": info.internal,
                       "topic_authorized_operations": authorization.authorized_operations(ctx, T, name, True),
                       "partitions": [_partition(ctx, p, elr=True) for p in range(first, last)]})
        if last < info.partitions:
            next_cursor = {"topic_name": name, "partition_index": last}
            break
        remaining -= max(last - first, 0)
    topics += [{**_error_topic(authorization.denial(T, name), name), "is_internal": name in INTERNAL_TOPICS,
                "topic_authorized_operations": authorization.NOT_REQUESTED}
               for name in sorted(names - allowed) if not every]
    return {"topics": topics, "next_cursor": next_cursor}


def _pages_refused(request: Any, error: KafkaError) -> dict:
    """A DescribeTopicPartitions refused as a whole, as Kafka's ``getErrorResponse``
    answers it: each topic asked for with the error (the response has no other place
    for one)."""
    return {"topics": [{**_error_topic(error, t.name), "topic_authorized_operations": authorization.NOT_REQUESTED}
                       for t in request.topics], "next_cursor": None}


def _partition(ctx: RequestContext, index: int, elr: bool = False) -> dict:
    """A partition of this node: it leads it and holds its one replica, in sync. ``elr``:
    with KIP-966's eligible leader replicas (none: the ISR is every replica)."""
    node = ctx.node.node_id
    partition = {"error_code": 0, "partition_index": index, "leader_id": node, "leader_epoch": LEADER_EPOCH,
                 "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}
    return {**partition, "eligible_leader_replicas": [], "last_known_elr": []} if elr else partition


#: the first FindCoordinator version that may ask for a share group's coordinator (KIP-932)
SHARE_SINCE = 6


@serves(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx: RequestContext, request: Any) -> dict:
    """This node, for any group id (KeyType 0) or transactional id (1); v4 asks for
    several keys at once; v5 (KIP-890) says the client knows TRANSACTION_ABORTABLE,
    which no lookup answers; v6 may ask for a share group's coordinator (2, KIP-932),
    which this broker has none of (see :func:`_coordinator`)."""
    key_type = getattr(request, "key_type", CoordinatorType.GROUP)
    if ctx.version >= 4:
        return {"coordinators": [{"key": key, **_coordinator(ctx, key_type, key)}
                                 for key in request.coordinator_keys]}
    return _coordinator(ctx, key_type, request.key)


def _coordinator(ctx: RequestContext, key_type: int, key: str) -> dict:
    """Describe on the group or the transactional id, else its authorization error. A
    share key, as Kafka's ``getCoordinator`` answers it on a node with no share
    coordinator: INVALID_REQUEST below v6, else ClusterAction on the cluster
    (CLUSTER_AUTHORIZATION_FAILED) and then COORDINATOR_NOT_AVAILABLE."""
    error: KafkaError | None = None
    if key_type == CoordinatorType.SHARE and ctx.version >= SHARE_SINCE:
        if not authorization.allowed(ctx, ApiKey.FIND_COORDINATOR, C, CLUSTER_NAME):
            error = ClusterAuthorizationFailedError("a share coordinator is looked up with ClusterAction")
        else:
            error = CoordinatorNotAvailableError(f"no share coordinator for {key!r}: this broker has no "
                                                 "share groups (KIP-932)")
    elif key_type not in (CoordinatorType.GROUP, CoordinatorType.TRANSACTION):
        error = InvalidRequestError(f"unknown coordinator key type {key_type}")
    else:
        resource_type = G if key_type == CoordinatorType.GROUP else X
        if not authorization.allowed(ctx, ApiKey.FIND_COORDINATOR, resource_type, key):
            error = authorization.denial(resource_type, key)
    if error is not None:
        return {"error_code": error.code, "error_message": str(error), "node_id": -1, "host": "", "port": -1}
    return {"error_code": 0, "error_message": None, "node_id": ctx.node.node_id, "host": ctx.node.host,
            "port": ctx.node.port}


@serves(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def describe_cluster(ctx: RequestContext, request: Any) -> dict:
    """This node, to a principal that may Describe the cluster; v1 may ask for the
    controllers' endpoints, which a broker does not give; v2 (KIP-1073) may ask for
    fenced brokers too: this one is never fenced (``IsFenced`` false), so the answer
    is the same."""
    authorization.check_cluster(ctx, ApiKey.DESCRIBE_CLUSTER)
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint_type != BROKERS_ENDPOINT:
        error = UnsupportedEndpointTypeError(f"endpoint type {endpoint_type}: a broker describes brokers (1)")
        return {"error_code": error.code, "error_message": str(error), "endpoint_type": endpoint_type}
    return {"cluster_id": ctx.engine.topics.cluster_id, "controller_id": ctx.node.node_id,
            "endpoint_type": BROKERS_ENDPOINT,
            "cluster_authorized_operations": authorization.authorized_operations(
                ctx, C, CLUSTER_NAME, request.include_cluster_authorized_operations),
            "brokers": [{"broker_id": ctx.node.node_id, "host": ctx.node.host, "port": ctx.node.port,
                         "is_fenced": False}]}

