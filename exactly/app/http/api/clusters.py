"""The REST API under ``/v3``: Confluent REST Proxy v3 names and shapes where they exist,
plus transactions over HTTP, which no REST proxy has. ``/openapi.json`` describes it.

This module holds the ``api`` blueprint with clusters, brokers, topics, partitions,
replicas and producers; the other resources are nested blueprints named after what
they serve: ``records`` (produce, read, list offsets, producer ids), ``configs``
(topic and broker configs), ``transactions``, ``groups`` (consumer groups, consumers,
lags), ``audit`` (the exactly-once audit of a group) and ``openapi`` (``document.py``:
derived from the routes' declarations, ``route.py``). Every path below
``/v3/clusters/<cluster_id>`` checks the cluster id (another one is 404, as in the
REST proxy), and every read goes through the shared read models of
``exactly/app/engine/read_models.py`` on the engine's loop.
"""

from __future__ import annotations

from flask import Blueprint, abort, g, jsonify, request

from exactly.app.engine import read_models
from exactly.app.http import access, current_engine, errors
from exactly.app.http.access import OPEN, TOPIC, kafka
from exactly.app.http.auth import request_principal
from exactly.app.http.api import (acls, audit, configs, document, events, faults, groups, models, records, transactions)
from exactly.app.http.api.route import (BROKER_PATH, CHANGES, CLUSTER_PATH, ON_TOPIC, PARTITION_PATH, TOPIC_PATH,
                                        Route, declare)
from exactly.app.http.api.validation import body, query
from exactly.app.kafka.wire import ApiKey
from exactly.app.security.acl import ResourceType
from exactly.app.security.principal import ANONYMOUS
from exactly.app.http.api.resources import check_broker, cluster_id, crn, listing, related, resource
from exactly.storage.errors import UnknownTopicOrPartitionError

bp = Blueprint("api", __name__)
for child in (records.bp, transactions.bp, groups.bp, audit.bp, configs.bp, acls.bp, faults.bp, document.bp,
              events.bp):
    bp.register_blueprint(child)

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
    if wanted is not None and wanted != current_engine().topics.cluster_id:
        abort(404, f"cluster {wanted!r} not found; this broker is {current_engine().topics.cluster_id!r}")


@bp.before_request
def _check_partition():
    """A path naming a partition its topic does not have is the proxy's 404 / 40402
    (an unknown topic is left to the handler: 40403)."""
    args = request.view_args or {}
    if "topic_name" in args and "partition_id" in args:
        engine = current_engine()
        missing = engine.call(_missing_partition, engine, args["topic_name"], args["partition_id"])
        if missing is not None:
            return errors.partition_not_found_response(missing)
    return None


def _missing_partition(engine, topic: str, partition: int) -> UnknownTopicOrPartitionError | None:
    """On the loop: the error for a partition an existing topic does not have, else None."""
    if engine.topics.topic_info(topic) is None:
        return None
    try:
        engine.partitions.partition_offsets(topic, partition)
    except UnknownTopicOrPartitionError as error:
        return error
    return None


def _cluster() -> dict:
    node = current_engine().topics.node_id
    return resource("KafkaCluster", (), crn(), cluster_id=cluster_id(), controller=related("brokers", node),
                    brokers=related("brokers"), broker_configs=related("broker-configs"),
                    partition_reassignments=related(*ALL_REASSIGNMENTS), topics=related("topics"),
                    consumer_groups=related("consumer-groups"), acls=related("acls"),
                    transactions=related("transactions"))


#: what Metadata answers about topics: those the principal may Describe
DESCRIBE_TOPIC = kafka(ApiKey.METADATA, ON_TOPIC)


@declare(bp, Route("get", "/v3/clusters", "List clusters", "Cluster", 200, models.listing(models.Cluster), (),
                   needs=OPEN))
def list_clusters():
    query = f"?{request.query_string.decode('latin-1')}" if request.query_string else ""
    return jsonify({"kind": "KafkaClusterList",
                    "metadata": {"self": f"{request.host_url}v3/clusters{query}", "next": None},
                    "data": [_cluster()]})


@declare(bp, Route("get", CLUSTER_PATH, "Get cluster", "Cluster", 200, models.Cluster, needs=OPEN))
def get_cluster():
    return jsonify(_cluster())


# -- brokers: this one --------------------------------------------------------------------


def _broker() -> dict:
    """This node; ``host`` and ``port`` are the Kafka address clients are told to
    connect to (``advertised.listeners``, else the Kafka listener's own address), as
    the REST proxy answers them; null only when no Kafka listener serves (an embedded
    ``Broker`` with the HTTP face alone)."""
    engine = current_engine()
    node = engine.topics.node_id
    host, port = engine.kafka_address or engine.config.advertised_listener() or (None, None)
    return resource("KafkaBroker", ("brokers", node), crn(broker=node), cluster_id=cluster_id(),
                    broker_id=node, host=host, port=port, rack=None, configs=related("brokers", node, "configs"),
                    partition_replicas=related("brokers", node, "partition-replicas"))


@declare(bp, Route("get", CLUSTER_PATH + "/brokers", "List brokers", "Broker", 200, models.listing(models.Broker),
                   needs=OPEN))
def list_brokers():
    return jsonify(listing("KafkaBrokerList", ("brokers",), [_broker()]))


@declare(bp, Route("get", BROKER_PATH, "Get broker", "Broker", 200, models.Broker, needs=OPEN))
def get_broker(broker_id: int):
    check_broker(broker_id)
    return jsonify(_broker())


@declare(bp, Route("get", BROKER_PATH + "/partition-replicas", "List broker replicas", "Broker", 200,
                   models.listing(models.Replica), needs=access.TOPICS_NAMED))
def list_broker_replicas(broker_id: int):
    """Every partition has its one replica here."""
    check_broker(broker_id)
    engine = current_engine()
    topics = engine.call(read_models.topics, engine, include_internal=True)
    shown = access.visible(TOPIC, (t["topic_name"] for t in topics))
    return jsonify(listing("KafkaReplicaList", ("brokers", broker_id, "partition-replicas"),
                           [_replica(t["topic_name"], p["partition_id"]) for t in topics
                            if t["topic_name"] in shown for p in t["partitions"]]))


# -- topics ---------------------------------------------------------------------------


def topic_resource(topic: dict, effective_configs: list[dict] | None) -> dict:
    """REST v3's KafkaTopic; Exactly adds ``topic_id`` and ``effective_configs`` (every
    config with its value and source, as ``.../configs`` lists them, without the synonyms
    that ``.../configs`` shows)."""
    name = topic["topic_name"]
    if effective_configs is not None:
        effective_configs = [{k: v for k, v in config.items() if k != "synonyms"} for config in effective_configs]
    return resource("KafkaTopic", ("topics", name), crn(topic=name),
                    cluster_id=cluster_id(), topic_name=name, topic_id=topic["topic_id"],
                    is_internal=topic["is_internal"], replication_factor=1,
                    partitions_count=topic["partitions_count"],
                    partitions=related("topics", name, "partitions"), configs=related("topics", name, "configs"),
                    partition_reassignments=related("topics", name, "partitions", "-", "reassignment"),
                    authorized_operations=_authorized_operations(name),
                    effective_configs=effective_configs)


def _authorized_operations(topic: str) -> list[str]:
    """The proxy's ``authorized_operations``: with ``include_authorized_operations=true``
    what the caller may do on the topic (Kafka's answer to DescribeTopics with
    ``include_topic_authorized_operations``), else empty."""
    if query(models.TopicQuery).include_authorized_operations != "true":
        return []
    engine = current_engine()
    allowed = engine.access.authorized_operations(g.get("principal", ANONYMOUS), request.remote_addr or "",
                                           ResourceType.TOPIC, topic)
    return sorted(op.name for op in allowed)


@declare(bp, Route("get", CLUSTER_PATH + "/topics", "List topics", "Topic", 200, models.listing(models.Topic),
                   query=models.TopicQuery, needs=access.TOPICS_NAMED))
def list_topics():
    engine = current_engine()
    topics = engine.call(read_models.topics_with_configs, engine)
    shown = access.visible(TOPIC, (t["topic_name"] for t, _ in topics))
    return jsonify(listing("KafkaTopicList", ("topics",),
                           [topic_resource(t, c) for t, c in topics if t["topic_name"] in shown]))


@declare(bp, Route("post", CLUSTER_PATH + "/topics", "Create topic", "Topic", 201, models.Topic, CHANGES,
                   body=models.CreateTopic, also_ok=200,
                   description="201: created; 200: validate_only, nothing created (the proxy's dry run).",
                   needs=kafka(ApiKey.CREATE_TOPICS, access.body(TOPIC), or_cluster=True)))
def create_topic():
    """CreateTopics: 201 and the topic; with ``validate_only`` 200 (as the proxy's
    dry run) and the topic as it would be, nothing created."""
    wanted = body(models.CreateTopic)
    name, count = wanted.topic_name, wanted.partitions_count
    access.require(TOPIC, (name,))
    configs = {c.name: c.value for c in wanted.configs if c.value is not None}  # null: the default
    validate_only = bool(wanted.validate_only)
    engine = current_engine()
    engine.call(engine.topics.create_topic, name, count, configs, validate_only=validate_only,
                replication_factor=wanted.replication_factor)
    if validate_only:
        would_be = {"topic_name": name, "topic_id": None, "is_internal": False,
                    "partitions_count": count or engine.config.num_partitions}
        return jsonify(topic_resource(would_be, None)), 200
    return jsonify(topic_resource(*engine.call(read_models.topics_with_configs, engine, name)[0])), 201


@declare(bp, Route("get", TOPIC_PATH, "Get topic", "Topic", 200, models.Topic, query=models.TopicQuery,
                   needs=DESCRIBE_TOPIC))
def get_topic(topic_name: str):
    engine = current_engine()
    return jsonify(topic_resource(*engine.call(read_models.topics_with_configs, engine, topic_name)[0]))


@declare(bp, Route("patch", TOPIC_PATH, "Update partition count", "Topic", 200, models.Topic, CHANGES,
                   body=models.UpdatePartitionCount, description="CreatePartitions: the count can only grow.",
                   needs=kafka(ApiKey.CREATE_PARTITIONS, ON_TOPIC)))
def update_partition_count(topic_name: str):
    """CreatePartitions, as the proxy takes it: ``{"partitions_count": n}`` grows the
    topic to n partitions (keys then map to other partitions, as in Kafka)."""
    count = body(models.UpdatePartitionCount).partitions_count
    engine = current_engine()
    engine.call(engine.topics.create_partitions, topic_name, count)
    return jsonify(topic_resource(*engine.call(read_models.topics_with_configs, engine, topic_name)[0]))


@declare(bp, Route("delete", TOPIC_PATH, "Delete topic", "Topic", 204, None, CHANGES,
                   needs=kafka(ApiKey.DELETE_TOPICS, ON_TOPIC)))
def delete_topic(topic_name: str):
    engine = current_engine()
    engine.call(engine.topics.delete_topic, topic_name)
    return "", 204


# -- partitions -----------------------------------------------------------------------


def partition_resource(p: dict) -> dict:
    """A partition, its open transactions named only as :func:`access.named_transactions` lets."""
    topic, partition = p["topic_name"], p["partition_id"]
    fields = {k: v for k, v in p.items() if k not in ("topic_name", "partition_id")}
    fields["open_transactions"] = access.named_transactions(p["open_transactions"])
    here = ("topics", topic, "partitions", partition)
    return resource("KafkaPartition", here, crn(topic=topic, partition=partition), cluster_id=cluster_id(),
                    topic_name=topic, partition_id=partition,
                    leader=related(*here, "replicas", current_engine().topics.node_id),
                    replicas=related(*here, "replicas"), reassignment=related(*here, "reassignment"), **fields,
                    records=related(*here, "records"), producers=related(*here, "producers"))


def _replica(topic: str, partition: int) -> dict:
    """The one replica of a partition: on this node, the leader, in sync."""
    node = current_engine().topics.node_id
    return resource("KafkaReplica", ("topics", topic, "partitions", partition, "replicas", node),
                    crn(topic=topic, partition=partition, replica=node), cluster_id=cluster_id(),
                    topic_name=topic, partition_id=partition, broker_id=node, is_leader=True, is_in_sync=True,
                    broker=related("brokers", node))


@declare(bp, Route("get", TOPIC_PATH + "/partitions", "List partitions", "Partition", 200,
                   models.listing(models.Partition), needs=DESCRIBE_TOPIC + access.TXNS_NAMED))
def list_partitions(topic_name: str):
    engine = current_engine()
    partitions = engine.call(read_models.topic_partitions, engine, topic_name)
    return jsonify(listing("KafkaPartitionList", ("topics", topic_name, "partitions"),
                           [partition_resource(p) for p in partitions]))


@declare(bp, Route("get", PARTITION_PATH, "Get partition", "Partition", 200, models.Partition,
                   description="Offsets, and the open transactions holding the LSO back.",
                   needs=DESCRIBE_TOPIC + access.TXNS_NAMED))
def get_partition(topic_name: str, partition_id: int):
    engine = current_engine()
    return jsonify(partition_resource(engine.call(read_models.partition, engine, topic_name, partition_id)))


@declare(bp, Route("get", PARTITION_PATH + "/replicas", "List replicas", "Partition", 200,
                   models.listing(models.Replica), needs=DESCRIBE_TOPIC))
def list_replicas(topic_name: str, partition_id: int):
    engine = current_engine()
    engine.call(read_models.partition, engine, topic_name, partition_id)  # UNKNOWN_TOPIC_OR_PARTITION
    return jsonify(listing("KafkaReplicaList", ("topics", topic_name, "partitions", partition_id, "replicas"),
                           [_replica(topic_name, partition_id)]))


@declare(bp, Route("get", PARTITION_PATH + "/replicas/{broker_id}", "Get replica", "Partition", 200, models.Replica,
                   needs=DESCRIBE_TOPIC))
def get_replica(topic_name: str, partition_id: int, broker_id: int):
    engine = current_engine()
    engine.call(read_models.partition, engine, topic_name, partition_id)
    if broker_id != engine.topics.node_id:
        raise UnknownTopicOrPartitionError(f"{topic_name}-{partition_id} has no replica on broker {broker_id}")
    return jsonify(_replica(topic_name, partition_id))


# -- reassignments: none on one node ---------------------------------------------------------

#: the proxy's path of every ongoing reassignment (the cluster links to it)
ALL_REASSIGNMENTS = ("topics", "-", "partitions", "-", "reassignment")
NO_REASSIGNMENT = "One node, one replica: no reassignment is ever in progress (an empty list)."


@declare(bp, Route("get", CLUSTER_PATH + "/topics/-/partitions/-/reassignment", "List all replica reassignments",
                   "Partition", 200, models.listing(models.Reassignment), (), description=NO_REASSIGNMENT,
                   needs=access.TOPICS_NAMED))
def list_all_reassignments():
    """The proxy's ongoing replica reassignments: none, ever (one replica, one node)."""
    return jsonify(listing("KafkaReassignmentList", ALL_REASSIGNMENTS, []))


@declare(bp, Route("get", TOPIC_PATH + "/partitions/-/reassignment", "Search replica reassignments by topic",
                   "Partition", 200, models.listing(models.Reassignment), description=NO_REASSIGNMENT,
                   needs=DESCRIBE_TOPIC))
def list_topic_reassignments(topic_name: str):
    engine = current_engine()
    engine.call(read_models.topic, engine, topic_name)  # UNKNOWN_TOPIC_OR_PARTITION
    return jsonify(listing("KafkaReassignmentList", ("topics", topic_name, "partitions", "-", "reassignment"), []))


@declare(bp, Route("get", PARTITION_PATH + "/reassignment", "Get replica reassignments", "Partition", 200,
                   models.Reassignment, description=NO_REASSIGNMENT + " A partition's is 404.", needs=DESCRIBE_TOPIC))
def get_reassignment(topic_name: str, partition_id: int):
    """404, as the proxy answers a partition with no reassignment in progress."""
    engine = current_engine()
    engine.call(read_models.partition, engine, topic_name, partition_id)
    abort(404, f"{topic_name}-{partition_id} has no reassignment in progress (one node: there is never one)")


def producer_resource(topic: str, partition: int, producer: dict) -> dict:
    """One producer of a partition (DescribeProducers), as a REST v3 resource."""
    pid = producer["producer_id"]
    return resource("KafkaProducer", ("topics", topic, "partitions", partition, "producers", pid),
                    crn(topic=topic, partition=partition, producer=pid), cluster_id=cluster_id(),
                    topic_name=topic, partition_id=partition, **producer)


#: DescribeProducers
DESCRIBE_PRODUCERS = kafka(ApiKey.DESCRIBE_PRODUCERS, ON_TOPIC) + access.TXNS_NAMED


def _visible_producers(topic_name: str, partition_id: int) -> list[dict]:
    """The partition's producers this request's principal may see (``Access.may_see_producer``)."""
    engine = current_engine()
    principal, host = str(request_principal()), request.remote_addr or ""

    async def visible() -> list[dict]:
        producers = await read_models.producers(engine, topic_name, partition_id)
        return [p for p in producers
                if engine.access.may_see_producer(principal, host, p["producer_id"], p["transactional_id"])]
    return access.named_transactions(engine.call(visible))


@declare(bp, Route("get", PARTITION_PATH + "/producers", "List producers", "Partition", 200,
                   models.listing(models.Producer), description="DescribeProducers: the partition's producer state.",
                   needs=DESCRIBE_PRODUCERS))
def list_producers(topic_name: str, partition_id: int):
    """DescribeProducers: who wrote to the partition, and which of them hold it open."""
    producers = _visible_producers(topic_name, partition_id)
    return jsonify(listing("KafkaProducerList", ("topics", topic_name, "partitions", partition_id, "producers"),
                           [producer_resource(topic_name, partition_id, p) for p in producers]))


@declare(bp, Route("get", PARTITION_PATH + "/producers/{producer_id}", "Get producer", "Partition", 200,
                   models.Producer, needs=DESCRIBE_PRODUCERS))
def get_producer(topic_name: str, partition_id: int, producer_id: int):
    producers = _visible_producers(topic_name, partition_id)
    found = next((p for p in producers if p["producer_id"] == producer_id), None)
    if found is None:
        abort(404, f"{topic_name}-{partition_id} has no state for producer {producer_id}")
    return jsonify(producer_resource(topic_name, partition_id, found))
