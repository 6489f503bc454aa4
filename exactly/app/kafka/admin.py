"""Administration: CreateTopics, DeleteTopics, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, ListConfigResources, CreatePartitions, DeleteRecords,
DescribeLogDirs, UpdateFeatures.

One node holds one replica of everything: a replication factor other than 1 (or
-1, the default) is INVALID_REPLICATION_FACTOR unless exactly.replication.factor.ignore
(``Topics.check_replication_factor``), and a manual assignment (of a new topic's
partitions, or of those CreatePartitions adds) may name only this node. Configs are
Kafka's topic configs (``exactly/storage/log_config.py``); a bad one is INVALID_CONFIG and
changes nothing. This broker's own settings are read-only: they change with a restart.
A request creating more than 10,000 partitions in all fails as a whole, every topic
POLICY_VIOLATION, as in Kafka (``Topics.check_partitions_per_request``); a topic that
would take the broker past ``exactly.max.partitions`` is POLICY_VIOLATION alone.
Each face changes topics through the same engine operations: ``create_topic``,
``create_partitions``, ``alter_topic_config`` (``tests/test_layering.py``).
"""

from __future__ import annotations

import enum
import uuid
from typing import Any, Awaitable, Callable

from exactly.app.config import static_config_change
from exactly.app.engine import read_models
from exactly.app.engine.access import NEVER_SERVED_TOPICS
from exactly.app.engine.partitions import LogDeleteRecordsResult
from exactly.app.engine.views import ConfigSource
from exactly.app.kafka import authorization
from exactly.app.kafka.api import ApiKey, RequestContext, error_code, serves
from exactly.app.kafka.authorization import C, T
from exactly.app.kafka.config_types import config_type
from exactly.coordinator import features
from exactly.app.security.acl import CLUSTER_NAME
from exactly.storage import topic_id
from exactly.storage.topic_id import new_topic_id
from exactly.storage.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    KafkaError,
    PolicyViolationError,
    UnknownTopicIdError,
    UnsupportedVersionError,
)

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
#: Kafka's other config resource types (``ConfigResource.Type``): none of them has configs here
BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE = 8, 16, 32
#: what ListConfigResources v1 lists when no type is named, and the only types it may be asked for
LISTED_RESOURCES = (TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE,
                    GROUP_RESOURCE)


@serves(ApiKey.CREATE_TOPICS, 2, 7)
async def create_topics(ctx: RequestContext, request: Any) -> dict:
    """Each topic created (or, ``validate_only``, checked); from v5 (KIP-525) the answer
    gives what it was created with -- partitions, replication factor and every config
    as DescribeConfigs shows it, or, to a principal that may not DescribeConfigs the
    topic, TOPIC_AUTHORIZATION_FAILED as ``TopicConfigErrorCode`` -- and from v7 its id
    (KIP-516; none for a topic only validated)."""
    partitions = sum(max(_requested_partitions(ctx, t), 0) for t in request.topics)
    return {"topics": _over_the_request_limit(ctx, request.topics, partitions)
            or await _each_topic(request.topics, lambda topic: _create(ctx, topic, request.validate_only))}


def _over_the_request_limit(ctx: RequestContext, topics: Any, partitions: int) -> list[dict] | None:
    """As Kafka: a request creating more than 10,000 partitions in all fails as a whole,
    every topic POLICY_VIOLATION (``Topics.check_partitions_per_request``); else None."""
    try:
        ctx.engine.topics.check_partitions_per_request(partitions)
    except PolicyViolationError as e:
        return [{"name": t.name, "error_code": e.code, "error_message": str(e)} for t in topics]
    return None


async def _each_topic(topics: Any, change: Callable[[Any], Awaitable[dict]]) -> list[dict]:
    """Each topic's result of ``change`` (its answer's fields, or its error), a topic
    named twice in the request INVALID_REQUEST."""
    names = [t.name for t in topics]
    results = []
    for topic in topics:
        try:
            if names.count(topic.name) > 1:
                raise InvalidRequestError(f"topic {topic.name!r} appears more than once in the request")
            results.append({"name": topic.name, "error_code": 0, "error_message": None, **await change(topic)})
        except KafkaError as e:
            results.append({"name": topic.name, "error_code": error_code(e), "error_message": str(e)})
    return results


def _requested_partitions(ctx: RequestContext, topic: Any) -> int:
    """The partitions a CreateTopics entry asks for: its assignments, its count, or
    (-1) the broker's num.partitions."""
    if topic.assignments:
        return len(topic.assignments)
    return ctx.engine.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions


async def _create(ctx: RequestContext, topic: Any, validate_only: bool) -> dict:
    """Create one topic (Create on the cluster or on the topic); returns its answer's
    fields: the note of a replication factor accepted with one replica, and (v5+) what
    the topic was created with."""
    engine = ctx.engine
    if not authorization.allowed_to_create(ctx, ApiKey.CREATE_TOPICS, topic.name):
        raise authorization.denial(T, topic.name)
    node = ctx.node.node_id
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise InvalidRequestError("give either assignments or num_partitions and replication_factor")
        if any(list(a.broker_ids) != [node] for a in topic.assignments):
            raise InvalidReplicationFactorError(f"every partition must be assigned to this node ({node}) alone")
        if sorted(a.partition_index for a in topic.assignments) != list(range(len(topic.assignments))):
            raise InvalidPartitionsError("assigned partitions must be 0 .. n-1")
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    created = await engine.topics.create_topic(topic.name, _requested_partitions(ctx, topic), configs,
                                               validate_only=validate_only, replication_factor=topic.replication_factor)
    answer: dict[str, Any] = {"error_message": engine.topics.check_replication_factor(topic.replication_factor),
                              "num_partitions": _requested_partitions(ctx, topic), "replication_factor": 1,
                              # validate_only: as Kafka's controller, the id it would have had (kept nowhere)
                              "topic_id": created.topic_id if created is not None else new_topic_id()}
    if not authorization.allowed(ctx, ApiKey.DESCRIBE_CONFIGS, T, topic.name):
        return {**answer, "topic_config_error_code": authorization.denial(T, topic.name).code}
    described = await read_models.topic_configs(ctx.engine, topic.name, None if created is not None else configs)
    answer["configs"] = [{"name": c["name"], "value": None if c["is_sensitive"] else c["value"],
                          "read_only": c["is_read_only"], "config_source": ConfigSource[c["source"]].value,
                          "is_sensitive": c["is_sensitive"]} for c in described]
    return answer


@serves(ApiKey.DELETE_TOPICS, 1, 6)
async def delete_topics(ctx: RequestContext, request: Any) -> dict:
    """Delete each topic named (v1-5) or, from v6, named or given by id (KIP-516): an id
    no topic has is UNKNOWN_TOPIC_ID, a topic given both ways or neither INVALID_REQUEST,
    as Kafka's controller answers them. Each answer gives the topic's name and id."""
    if ctx.version < 6:
        wanted = [(name, None) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id if t.topic_id not in (None, topic_id.ZERO) else None) for t in request.topics]
    named = ctx.engine.topics.names_by_id(i for _, i in wanted if i is not None)
    return {"responses": [await _delete(ctx, name, id_, named) for name, id_ in wanted]}


async def _delete(ctx: RequestContext, name: str | None, id_: uuid.UUID | None,
                  named: dict[uuid.UUID, str]) -> dict:
    """One topic's deletion, answered with its name and id (those known)."""
    try:
        topic = _deleted(name, id_, named)
        authorization.check(ctx, ApiKey.DELETE_TOPICS, T, topic)
        if id_ is None:
            info = ctx.engine.topics.topic_info(topic)
            id_ = None if info is None else info.topic_id
        await ctx.engine.topics.delete_topic(topic)
        return {"name": topic, "topic_id": id_ or topic_id.ZERO, "error_code": 0, "error_message": None}
    except KafkaError as e:
        return {"name": name, "topic_id": id_ or topic_id.ZERO, "error_code": error_code(e), "error_message": str(e)}


def _deleted(name: str | None, id_: uuid.UUID | None, named: dict[uuid.UUID, str]) -> str:
    """The topic a DeleteTopics entry names, by name or by id (not both, not neither)."""
    if name is not None and id_ is not None:
        raise InvalidRequestError("You may not specify both topic name and topic id.")
    if id_ is not None:
        if id_ not in named:
            raise UnknownTopicIdError(f"no topic has the id {topic_id.to_string(id_)}")
        return named[id_]
    if name is None:
        raise InvalidRequestError("Neither topic name nor id were specified.")
    return name


@serves(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(ctx: RequestContext, request: Any) -> dict:
    """Each resource's configs (those named, or every one); v1+ their synonyms when
    asked; v3+ Kafka's type of each (``config_types.py``) and, when asked, its
    documentation -- which this broker has for none (null, as Kafka answers for a
    config without any: docs/operations.md describes them)."""
    results = []
    for resource in request.resources:
        entry = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                 "error_code": 0, "error_message": None, "configs": []}
        try:
            _authorize_resource(ctx, ApiKey.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name)
            configs = await _configs(ctx, resource.resource_type, resource.resource_name)
            keys = resource.configuration_keys  # null: every config; a list, even empty: those
            entry["configs"] = [_config(c, getattr(request, "include_synonyms", False))
                                for c in configs if keys is None or c["name"] in keys]
        except KafkaError as e:
            entry.update(error_code=error_code(e), error_message=str(e))
        results.append(entry)
    return {"results": results}


async def _configs(ctx: RequestContext, resource_type: int, name: str) -> list[dict]:
    """Every config of a topic (``read_models.topic_configs``) or of this broker."""
    if resource_type == TOPIC_RESOURCE:
        return await read_models.topic_configs(ctx.engine, name)
    if resource_type == BROKER_RESOURCE:
        _check_broker(ctx, name)
        return await read_models.broker_configs(ctx.engine)
    raise InvalidRequestError(f"resource type {resource_type} is not a topic (2) or a broker (4)")


def _authorize_resource(ctx: RequestContext, api: ApiKey, resource_type: int, name: str) -> None:
    """DescribeConfigs / AlterConfigs on the topic, or on the cluster for the broker."""
    if resource_type == TOPIC_RESOURCE:
        authorization.check(ctx, api, T, name)
    elif resource_type == BROKER_RESOURCE:
        authorization.check_cluster(ctx, api)


def _check_broker(ctx: RequestContext, name: str) -> None:
    """A broker resource names this broker, or ("") the cluster's default: the same here."""
    if name not in ("", str(ctx.node.node_id)):
        raise InvalidRequestError(f"Unexpected broker id, expected {ctx.node.node_id} or empty string, "
                                  f"but received {name}")


def _config(row: dict, include_synonyms: bool) -> dict:
    """DescribeConfigs' entry of a ``read_models.topic_configs`` / ``broker_configs`` row
    (its synonyms only when the request asks for them, v1+, as Kafka's)."""
    synonyms = [{"name": s["name"], "value": s["value"], "source": ConfigSource[s["source"]].value}
                for s in row["synonyms"]] if include_synonyms else []
    return {"name": row["name"], "value": row["value"], "read_only": row["is_read_only"],
            "config_source": ConfigSource[row["source"]].value, "is_sensitive": row["is_sensitive"],
            "synonyms": synonyms, "config_type": config_type(row["name"], row["is_sensitive"]),
            "documentation": None}


# -- AlterConfigs, IncrementalAlterConfigs, CreatePartitions ----------------------------


class AlterConfigOp(enum.IntEnum):
    """IncrementalAlterConfigs' operations (Kafka's ``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


#: Kafka's LIST-typed topic configs among this broker's: those APPEND and SUBTRACT apply to
LIST_CONFIGS = frozenset({"cleanup.policy"})
#: a topic's changes, from the request's configs and the topic's current ones by name
Changes = Callable[[Any, dict[str, dict]], dict[str, str | None]]


@serves(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, request: Any) -> dict:
    """The legacy API: a topic's overrides become exactly those given, the others
    back to their defaults."""
    return {"responses": await _alter_resources(ctx, ApiKey.ALTER_CONFIGS, request, _replacing)}


@serves(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, request: Any) -> dict:
    """KIP-339: SET, DELETE, APPEND or SUBTRACT each config named; the others stay."""
    return {"responses": await _alter_resources(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, request, _incremental)}


async def _alter_resources(ctx: RequestContext, api: ApiKey, request: Any, changes: Changes) -> list[dict]:
    """Each resource's outcome: all its changes (``Topics.alter_topic_config``, as the
    HTTP API's) or, with its error, none; ``validate_only`` checks and changes nothing."""
    resources = [(r.resource_type, r.resource_name) for r in request.resources]
    results = []
    for resource in request.resources:
        entry = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                 "error_code": 0, "error_message": None}
        try:
            names = [c.name for c in resource.configs]
            if resources.count((resource.resource_type, resource.resource_name)) > 1:
                raise InvalidRequestError("Duplicate resource in request")
            if len(set(names)) < len(names):
                raise InvalidRequestError("Error due to duplicate config keys")
            _authorize_resource(ctx, api, resource.resource_type, resource.resource_name)
            await _alter(ctx, resource, changes, request.validate_only)
        except KafkaError as e:
            entry.update(error_code=error_code(e), error_message=str(e))
        results.append(entry)
    return results


async def _alter(ctx: RequestContext, resource: Any, changes: Changes, validate_only: bool) -> None:
    name = resource.resource_name
    if resource.resource_type == TOPIC_RESOURCE:
        async def computed() -> dict[str, str | None]:  # from the configs as they are once it is this one's turn
            return changes(resource.configs, {c["name"]: c for c in await read_models.topic_configs(ctx.engine, name)})

        await ctx.engine.topics.alter_topic_config(name, computed, validate_only)
    elif resource.resource_type == BROKER_RESOURCE:
        _check_broker(ctx, name)
        if resource.configs:  # this broker's settings are given at start-up (exactly/app/config.py)
            raise static_config_change(c.name for c in resource.configs)
    else:
        raise InvalidRequestError(f"resource type {resource.resource_type} is not a topic (2) or a broker (4)")


def _replacing(configs: Any, current: dict[str, dict]) -> dict[str, str | None]:
    """AlterConfigs: the given values, and every other override reset."""
    nulls = [c.name for c in configs if c.value is None]
    if nulls:
        raise InvalidRequestError(f"Null value not supported for topic configs: {','.join(nulls)}")
    changes: dict[str, str | None] = {n: None for n, c in current.items()
                                      if c["source"] == read_models.DYNAMIC_TOPIC_CONFIG}
    changes.update({c.name: c.value for c in configs})
    return changes


def _incremental(configs: Any, current: dict[str, dict]) -> dict[str, str | None]:
    """IncrementalAlterConfigs, as Kafka's controller applies it: APPEND adds to and
    SUBTRACT removes from a list config's effective value the items not (yet) there."""
    changes: dict[str, str | None] = {}
    for config in configs:
        name, value = config.name, config.value
        try:
            op = AlterConfigOp(config.config_operation)
        except ValueError:
            raise InvalidRequestError(f"unknown config operation {config.config_operation} for {name}") from None
        if op is AlterConfigOp.DELETE:
            changes[name] = None
            continue
        if value is None:
            raise InvalidRequestError(f"Null value not supported for {op.name} of {name}")
        if op is AlterConfigOp.SET:
            changes[name] = value
        elif name not in current:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
        elif name not in LIST_CONFIGS:
            raise InvalidConfigError(f"Can't {op.name} to key {name} because its type is not LIST.")
        else:
            changes[name] = ",".join(_listed(current[name]["value"].split(","), op, value.split(",")))
    return changes


def _listed(items: list[str], op: AlterConfigOp, given: list[str]) -> list[str]:
    """A list config's items after APPEND (each given one not there yet, in order) or
    SUBTRACT (every given one removed)."""
    if op is AlterConfigOp.SUBTRACT:
        return [v for v in items if v not in given]
    for v in given:
        if v not in items:
            items.append(v)
    return items


@serves(ApiKey.CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx: RequestContext, request: Any) -> dict:
    """Grow each topic to its ``count`` partitions (``Topics.create_partitions``, as
    the HTTP API's); new partitions may be assigned only to this node."""
    held = ctx.engine.topics.partition_counts([t.name for t in request.topics])
    partitions = sum(max(t.count - held.get(t.name, t.count), 0) for t in request.topics)
    return {"results": _over_the_request_limit(ctx, request.topics, partitions)
            or await _each_topic(request.topics, lambda topic: _grow(ctx, topic, held, request.validate_only))}


async def _grow(ctx: RequestContext, topic: Any, held: dict[str, int], validate_only: bool) -> dict:
    authorization.check(ctx, ApiKey.CREATE_PARTITIONS, T, topic.name)
    new = topic.count - held.get(topic.name, topic.count)
    if topic.assignments is not None and new > 0:  # else: the engine's error (unknown topic, no growth)
        node = ctx.node.node_id
        if len(topic.assignments) != new:
            raise InvalidReplicaAssignmentError(f"Increasing the number of partitions by {new} but "
                                                f"{len(topic.assignments)} assignments provided.")
        if any(list(a.broker_ids) != [node] for a in topic.assignments):
            raise InvalidReplicaAssignmentError(f"every new partition must be assigned to this node ({node}) alone")
    await ctx.engine.topics.create_partitions(topic.name, topic.count, validate_only)
    return {}


@serves(ApiKey.DELETE_RECORDS, 0, 2)
async def delete_records(ctx: RequestContext, request: Any) -> dict:
    """Move log start offsets (``Partitions.delete_records``); the timeout has nothing to
    wait for on one node (no follower has to catch up)."""
    deletable = {t.name: authorization.allowed(ctx, ApiKey.DELETE_RECORDS, T, t.name) for t in request.topics}
    results = await ctx.engine.partitions.delete_records(
        {(t.name, p.partition_index): p.offset for t in request.topics for p in t.partitions if deletable[t.name]})
    results.update({(t.name, p.partition_index): LogDeleteRecordsResult(error=authorization.denial(T, t.name))
                    for t in request.topics for p in t.partitions if not deletable[t.name]})
    return {"topics": [
        {"name": t.name, "partitions": [_delete_records_result(p.partition_index, results[t.name, p.partition_index])
                                        for p in t.partitions]}
        for t in request.topics]}


def _delete_records_result(partition: int, result: LogDeleteRecordsResult) -> dict:
    return {"partition_index": partition, "low_watermark": result.low_watermark,
            "error_code": error_code(result.error)}


@serves(ApiKey.DESCRIBE_LOG_DIRS, 1, 5)
async def describe_log_dirs(ctx: RequestContext, request: Any) -> dict:
    """The one log directory and the size of each partition asked for (null topics:
    all), offset lag 0 (the log end is the high watermark's to reach, no replica's)
    and no future log (no AlterReplicaLogDirs). Describe on the cluster, else
    CLUSTER_AUTHORIZATION_FAILED (v3+; no log directory before). v5 (KIP-1066): the
    directory is never cordoned (no ``cordoned.log.dirs``: it takes new partitions)."""
    if not authorization.allowed(ctx, ApiKey.DESCRIBE_LOG_DIRS, C, CLUSTER_NAME):
        return {"error_code": authorization.denial(C, CLUSTER_NAME).code, "results": []}
    topics = None if request.topics is None else [(t.topic, t.partitions) for t in request.topics]
    log_dir = await ctx.engine.partitions.describe_log_dir(topics)
    by_topic: dict[str, list[dict]] = {}
    for p in log_dir.partitions:
        by_topic.setdefault(p.topic, []).append(
            {"partition_index": p.partition, "partition_size": p.size_bytes, "offset_lag": 0,
             "is_future_key": False})
    return {"error_code": 0, "results": [{
        "error_code": 0, "log_dir": log_dir.path, "total_bytes": log_dir.total_bytes,
        "usable_bytes": log_dir.usable_bytes, "is_cordoned": False,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}]}


@serves(ApiKey.UPDATE_FEATURES, 0, 2)
async def update_features(ctx: RequestContext, request: Any) -> dict:
    """``kafka-features upgrade|downgrade``: Alter on the cluster, else
    CLUSTER_AUTHORIZATION_FAILED; the levels change all together or not at all
    (``FeatureLevels.update``: INVALID_UPDATE_VERSION), durably before the answer;
    ``validate_only`` (v1) checks only. v0 says a downgrade with ``allow_downgrade``
    (a safe one), v1+ with ``upgrade_type``. A feature named twice counts once, its
    first update (Kafka's request keys them by name). As Kafka's, every error is the
    request's; v0-1 list each feature updated, v2 lists none."""
    updates: dict[str, tuple[int, int]] = {}
    for update in request.feature_updates:
        upgrade_type = getattr(update, "upgrade_type", None)
        if upgrade_type is None:
            upgrade_type = features.SAFE_DOWNGRADE if update.allow_downgrade else features.UPGRADE
        updates.setdefault(update.feature, (update.max_version_level, upgrade_type))
    try:
        authorization.check_cluster(ctx, ApiKey.UPDATE_FEATURES)
        await ctx.engine.features.update([(name, level, kind) for name, (level, kind) in updates.items()],
                                         getattr(request, "validate_only", False))
    except KafkaError as e:
        return {"error_code": e.code, "error_message": str(e), "results": []}
    return {"error_code": 0, "error_message": None,
            "results": [{"feature": name, "error_code": 0, "error_message": None} for name in updates]}


@serves(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
async def list_config_resources(ctx: RequestContext, request: Any) -> dict:
    """KIP-1142: the resources that have configs, to a principal with DescribeConfigs on
    the cluster (else CLUSTER_AUTHORIZATION_FAILED). v0 was ListClientMetricsResources:
    client metrics resources only, of which there are none here. v1 lists the types
    asked for (none: every type Kafka lists) -- every topic (not ``__cluster_metadata``,
    which no client sees) and this broker; broker loggers, client metrics and groups
    have no configs here, so none is listed -- and a type Kafka does not list is
    UNSUPPORTED_VERSION for the whole request, as Kafka answers it."""
    try:
        authorization.check_cluster(ctx, ApiKey.LIST_CONFIG_RESOURCES)
        wanted = list(getattr(request, "resource_types", ())) or list(LISTED_RESOURCES)
        unknown = [t for t in wanted if t not in LISTED_RESOURCES]
        if ctx.version >= 1 and unknown:
            raise UnsupportedVersionError(f"resource types {unknown} are not listed (KIP-1142: "
                                          f"{list(LISTED_RESOURCES)})")
    except KafkaError as e:
        return {"error_code": e.code, "config_resources": []}
    listed: list[dict] = []
    if ctx.version >= 1 and BROKER_RESOURCE in wanted:
        listed.append({"resource_name": str(ctx.node.node_id), "resource_type": BROKER_RESOURCE})
    if ctx.version >= 1 and TOPIC_RESOURCE in wanted:
        listed += [{"resource_name": name, "resource_type": TOPIC_RESOURCE}
                   for name in ctx.engine.topics.topic_names() if name not in NEVER_SERVED_TOPICS]
    return {"error_code": 0, "config_resources": listed}
