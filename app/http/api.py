"""The REST API under ``/v3``: Confluent REST Proxy v3 names and shapes where they exist,
plus transactions over HTTP, which no REST proxy has. ``/openapi.json`` describes it.

This module holds the ``api`` blueprint with clusters, topics and partitions; the
other resources are nested blueprints named after what they serve:
``records`` (produce, read, list offsets, producer ids), ``transactions``,
``groups`` (consumer groups) and ``openapi``. Every path below
``/v3/clusters/<cluster_id>`` checks the cluster id (another one is 404, as in the
REST proxy), and every read goes through the shared read models of
``app/engine/queries.py`` on the engine's loop.
"""

from __future__ import annotations

from flask import Blueprint, abort, g, jsonify, request

from app.engine import queries
from app.http import current_engine, groups, inputs, openapi, records, transactions
from app.http.resources import crn, listing, related, resource
from storage.errors import InvalidReplicationFactorError

bp = Blueprint("api", __name__)
for child in (records.bp, transactions.bp, groups.bp, openapi.bp):
    bp.register_blueprint(child)

#: partitions one create request may ask for (each is a directory and three open files)
MAX_PARTITIONS = 1000


@bp.record_once
def _setup(state) -> None:
    # "/v3//x" must be a 404 like any unknown path, not a redirect to "/v3/x"
    state.app.url_map.merge_slashes = False


@bp.url_value_preprocessor
def _pop_cluster_id(endpoint, values) -> None:
    if values and "cluster_id" in values:
        g.cluster_id = values.pop("cluster_id")


@bp.before_request
def _check_cluster_id() -> None:
    """After authentication (app-wide, earlier): an unknown cluster id is 404."""
    wanted = g.get("cluster_id")
    if wanted is not None and wanted != current_engine().logs.cluster_id:
        abort(404, f"cluster {wanted!r} not found; this broker is {current_engine().logs.cluster_id!r}")


def _cluster() -> dict:
    return resource("KafkaCluster", (), crn(), cluster_id=current_engine().logs.cluster_id,
                    topics=related("topics"), consumer_groups=related("consumer-groups"),
                    transactions=related("transactions"))


@bp.get("/v3/clusters")
def list_clusters():
    return jsonify({"kind": "KafkaClusterList",
                    "metadata": {"self": f"{request.host_url}v3/clusters", "next": None}, "data": [_cluster()]})


@bp.get("/v3/clusters/<cluster_id>")
def get_cluster():
    return jsonify(_cluster())


# -- topics ---------------------------------------------------------------------------


def topic_resource(topic: dict) -> dict:
    name = topic["topic_name"]
    return resource("KafkaTopic", ("topics", name), crn(topic=name),
                    cluster_id=current_engine().logs.cluster_id, topic_name=name, topic_id=topic["topic_id"],
                    is_internal=topic["is_internal"], replication_factor=1,
                    partitions_count=topic["partitions_count"],
                    configs=[{"name": k, "value": v} for k, v in sorted(topic["configs"].items())],
                    partitions=related("topics", name, "partitions"))


@bp.get("/v3/clusters/<cluster_id>/topics")
def list_topics():
    engine = current_engine()
    topics = engine.call(queries.topics, engine, include_internal=True)
    return jsonify(listing("KafkaTopicList", ("topics",), [topic_resource(t) for t in topics]))


@bp.post("/v3/clusters/<cluster_id>/topics")
def create_topic():
    body = inputs.json_body()
    name = inputs.string(body, "topic_name", max_length=249)
    count = inputs.integer(body, "partitions_count", required=False, minimum=1, maximum=MAX_PARTITIONS)
    factor = inputs.integer(body, "replication_factor", required=False, minimum=-1, maximum=2**15 - 1)
    if factor not in (None, -1, 1):
        raise InvalidReplicationFactorError(f"this broker is one node: replication_factor must be 1, got {factor}")
    configs = {}
    for where, item in inputs.objects(body, "configs", required=False, max_items=100):
        configs[inputs.string(item, "name", where=where, max_length=249)] = inputs.string(
            item, "value", where=where, min_length=0)
    engine = current_engine()
    engine.call(engine.create_topic, name, count, configs)
    return jsonify(topic_resource(engine.call(queries.topic, engine, name))), 201


@bp.get("/v3/clusters/<cluster_id>/topics/<topic_name>")
def get_topic(topic_name: str):
    engine = current_engine()
    return jsonify(topic_resource(engine.call(queries.topic, engine, topic_name)))


@bp.delete("/v3/clusters/<cluster_id>/topics/<topic_name>")
def delete_topic(topic_name: str):
    engine = current_engine()
    engine.call(engine.delete_topic, topic_name)
    return "", 204


# -- partitions -----------------------------------------------------------------------


def partition_resource(p: dict) -> dict:
    topic, partition = p["topic_name"], p["partition_id"]
    fields = {k: v for k, v in p.items() if k not in ("topic_name", "partition_id")}
    return resource("KafkaPartition", ("topics", topic, "partitions", partition),
                    crn(topic=topic, partition=partition), cluster_id=current_engine().logs.cluster_id,
                    topic_name=topic, partition_id=partition, **fields,
                    records=related("topics", topic, "partitions", partition, "records"),
                    producers=related("topics", topic, "partitions", partition, "producers"))


@bp.get("/v3/clusters/<cluster_id>/topics/<topic_name>/partitions")
def list_partitions(topic_name: str):
    engine = current_engine()
    partitions = engine.call(queries.topic_partitions, engine, topic_name)
    return jsonify(listing("KafkaPartitionList", ("topics", topic_name, "partitions"),
                           [partition_resource(p) for p in partitions]))


@bp.get("/v3/clusters/<cluster_id>/topics/<topic_name>/partitions/<int:partition_id>")
def get_partition(topic_name: str, partition_id: int):
    engine = current_engine()
    return jsonify(partition_resource(engine.call(queries.partition, engine, topic_name, partition_id)))


@bp.get("/v3/clusters/<cluster_id>/topics/<topic_name>/partitions/<int:partition_id>/producers")
def list_producers(topic_name: str, partition_id: int):
    """DescribeProducers: who wrote to the partition, and which of them hold it open."""
    engine = current_engine()
    producers = engine.call(queries.producers, engine, topic_name, partition_id)
    return jsonify(listing("KafkaProducerList", ("topics", topic_name, "partitions", partition_id, "producers"),
                           producers))
