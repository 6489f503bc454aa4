"""Administration: CreateTopics, DeleteTopics, DescribeConfigs, DeleteRecords, DescribeLogDirs.

One node holds one replica of everything: a replication factor other than 1 (or
-1, the default) is INVALID_REPLICATION_FACTOR, and a manual assignment may name
only this node. Configs are Kafka's topic configs (``storage/log_config.py``);
a bad one is INVALID_CONFIG and creates nothing. A request creating more than
10,000 partitions in all fails as a whole, every topic POLICY_VIOLATION, as in Kafka
(``Engine.check_partitions_per_request``); a topic that would take the broker past
``exactly.max.partitions`` is POLICY_VIOLATION alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.engine import read_models
from app.kafka.api import ApiKey, RequestContext, error_code, serves
from storage.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    KafkaError,
    PolicyViolationError,
)

if TYPE_CHECKING:
    from app.engine.engine import LogDeleteRecordsResult

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
#: DescribeConfigs ConfigSource values
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
SOURCE = {read_models.DYNAMIC_TOPIC_CONFIG: TOPIC_CONFIG, read_models.STATIC_BROKER_CONFIG: STATIC_BROKER_CONFIG,
          read_models.DEFAULT_CONFIG: DEFAULT_CONFIG}


@serves(ApiKey.CREATE_TOPICS, 2, 4)
async def create_topics(ctx: RequestContext, request: Any) -> dict:
    try:  # as Kafka: a request over the limit in total fails as a whole, every topic POLICY_VIOLATION
        ctx.engine.check_partitions_per_request(sum(max(_requested_partitions(ctx, t), 0) for t in request.topics))
    except PolicyViolationError as e:
        return {"topics": [{"name": t.name, "error_code": e.code, "error_message": str(e)} for t in request.topics]}
    names = [t.name for t in request.topics]
    results = []
    for topic in request.topics:
        try:
            if names.count(topic.name) > 1:
                raise InvalidRequestError(f"topic {topic.name!r} appears more than once in the request")
            await _create(ctx, topic, request.validate_only)
            results.append({"name": topic.name, "error_code": 0, "error_message": None})
        except KafkaError as e:
            results.append({"name": topic.name, "error_code": error_code(e), "error_message": str(e)})
    return {"topics": results}


def _requested_partitions(ctx: RequestContext, topic: Any) -> int:
    """The partitions a CreateTopics entry asks for: its assignments, its count, or
    (-1) the broker's num.partitions."""
    if topic.assignments:
        return len(topic.assignments)
    return ctx.engine.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions


async def _create(ctx: RequestContext, topic: Any, validate_only: bool) -> None:
    engine = ctx.engine
    node = ctx.node.node_id
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise InvalidRequestError("give either assignments or num_partitions and replication_factor")
        if any(list(a.broker_ids) != [node] for a in topic.assignments):
            raise InvalidReplicationFactorError(f"every partition must be assigned to this node ({node}) alone")
        if sorted(a.partition_index for a in topic.assignments) != list(range(len(topic.assignments))):
            raise InvalidPartitionsError("assigned partitions must be 0 .. n-1")
    elif topic.replication_factor not in (-1, 1):
        raise InvalidReplicationFactorError(
            f"replication factor {topic.replication_factor} is more than the 1 broker there is")
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    await engine.create_topic(topic.name, _requested_partitions(ctx, topic), configs, validate_only=validate_only)


@serves(ApiKey.DELETE_TOPICS, 1, 3)
async def delete_topics(ctx: RequestContext, request: Any) -> dict:
    results = []
    for name in request.topic_names:
        try:
            await ctx.engine.delete_topic(name)
            results.append({"name": name, "error_code": 0})
        except KafkaError as e:
            results.append({"name": name, "error_code": error_code(e)})
    return {"responses": results}


@serves(ApiKey.DESCRIBE_CONFIGS, 1, 2)
async def describe_configs(ctx: RequestContext, request: Any) -> dict:
    results = []
    for resource in request.resources:
        entry = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                 "error_code": 0, "error_message": None, "configs": []}
        try:
            configs = await _configs(ctx, resource.resource_type, resource.resource_name)
            keys = resource.configuration_keys  # null: every config; a list, even empty: those
            entry["configs"] = [c for c in configs if keys is None or c["name"] in keys]
        except KafkaError as e:
            entry.update(error_code=error_code(e), error_message=str(e))
        results.append(entry)
    return {"results": results}


async def _configs(ctx: RequestContext, resource_type: int, name: str) -> list[dict]:
    """``(name, value, source)`` of every config of a topic (``read_models.topic_configs``)
    or of this broker."""
    if resource_type == TOPIC_RESOURCE:
        return [_config(c) for c in await read_models.topic_configs(ctx.engine, name)]
    if resource_type == BROKER_RESOURCE:
        if name not in ("", str(ctx.node.node_id)):
            raise InvalidRequestError(f"this is broker {ctx.node.node_id}, not {name!r}")
        return [_config(c) for c in await read_models.broker_configs(ctx.engine)]
    raise InvalidRequestError(f"resource type {resource_type} is not a topic (2) or a broker (4)")


def _config(row: dict) -> dict:
    """DescribeConfigs' entry of a ``read_models.topic_configs`` / ``broker_configs`` row."""
    return {"name": row["name"], "value": row["value"], "read_only": True, "config_source": SOURCE[row["source"]],
            "is_sensitive": row["is_sensitive"], "synonyms": []}


@serves(ApiKey.DELETE_RECORDS, 0, 2)
async def delete_records(ctx: RequestContext, request: Any) -> dict:
    """Move log start offsets (``Engine.delete_records``); the timeout has nothing to
    wait for on one node (no follower has to catch up)."""
    results = await ctx.engine.delete_records(
        {(t.name, p.partition_index): p.offset for t in request.topics for p in t.partitions})
    return {"topics": [
        {"name": t.name, "partitions": [_delete_records_result(p.partition_index, results[t.name, p.partition_index])
                                        for p in t.partitions]}
        for t in request.topics]}


def _delete_records_result(partition: int, result: LogDeleteRecordsResult) -> dict:
    return {"partition_index": partition, "low_watermark": result.low_watermark,
            "error_code": error_code(result.error)}


@serves(ApiKey.DESCRIBE_LOG_DIRS, 1, 4)
async def describe_log_dirs(ctx: RequestContext, request: Any) -> dict:
    """The one log directory and the size of each partition asked for (null topics:
    all), offset lag 0 (the log end is the high watermark's to reach, no replica's)
    and no future log (no AlterReplicaLogDirs)."""
    topics = None if request.topics is None else [(t.topic, t.partitions) for t in request.topics]
    log_dir = await ctx.engine.describe_log_dir(topics)
    by_topic: dict[str, list[dict]] = {}
    for p in log_dir.partitions:
        by_topic.setdefault(p.topic, []).append(
            {"partition_index": p.partition, "partition_size": p.size_bytes, "offset_lag": 0,
             "is_future_key": False})
    return {"error_code": 0, "results": [{
        "error_code": 0, "log_dir": log_dir.path, "total_bytes": log_dir.total_bytes,
        "usable_bytes": log_dir.usable_bytes,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}]}
