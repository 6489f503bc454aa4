"""``/openapi.json``: the OpenAPI 3.0 document of the HTTP API.

Written by hand next to the handlers, with the same bounds they check
(``app/http/inputs.py``), and pinned to them by tests: every Flask rule under
``/v3`` is a path here and every path here is a rule (tests/test_http_api.py), and
schemathesis fuzzes the API from this document, checking that every answer has a
documented status and matches its schema (tests/test_http_fuzz.py).
"""

from __future__ import annotations

import functools
from typing import Any

from flask import Blueprint, jsonify

from app.engine.engine import MAX_PARTITIONS_PER_REQUEST
from app.http.codec import MAX_TIME_MS
from app.http.inputs import INT16_MAX, INT32_MAX, INT64_MAX
from app.http.records import MAX_BATCH_ENTRIES
from coordinator.group_metadata import GroupState
from coordinator.transaction_state import AbortCause, TransactionState
from storage.log_config import LogConfig

bp = Blueprint("openapi", __name__)

Schema = dict[str, Any]

TOPIC_PATTERN = "^[a-zA-Z0-9._-]{1,249}$"
STATES = [state.display for state in TransactionState]
OUTCOMES = sorted({state.outcome.name for state in TransactionState if state.outcome is not None})
ABORT_CAUSES = [cause.value for cause in AbortCause]
MAX_FETCH_BYTES = 52_428_800
GROUP_STATES = [state.name for state in GroupState]
CONFIG_NAMES = sorted(LogConfig().to_kafka())
CONFIG_SOURCES = ["DYNAMIC_TOPIC_CONFIG", "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"]


@bp.get("/openapi.json")
def openapi_json():
    return jsonify(document())


# -- schema helpers ---------------------------------------------------------------------


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: list[str] | None = None, **properties: Schema) -> Schema:
    """An object with these properties, all required unless ``required`` says which."""
    return {"type": "object", "required": list(properties) if required is None else required,
            "properties": properties}


def integer(minimum: int = 0, maximum: int = INT64_MAX, **extra: Any) -> Schema:
    return {"type": "integer", "format": "int64" if maximum > INT32_MAX else "int32",
            "minimum": minimum, "maximum": maximum, **extra}


def string(**extra: Any) -> Schema:
    return {"type": "string", **extra}


def nullable(schema: Schema) -> Schema:
    return {**schema, "nullable": True}


def array(items: Schema, **extra: Any) -> Schema:
    return {"type": "array", "items": items, **extra}


def listing(kind: str, item: str) -> Schema:
    return obj(kind=string(enum=[kind]), metadata=ref("ListMetadata"), data=array(ref(item)))


def resource(kind: str, **fields: Schema) -> Schema:
    return obj(kind=string(enum=[kind]), metadata=ref("ResourceMetadata"), **fields)


TIMESTAMP_MS = integer(-1, description="milliseconds since the epoch")
TOPIC_PARTITION = obj(topic_name=string(), partition_id=integer(maximum=INT32_MAX))
BOOLEAN: Schema = {"type": "boolean"}
RELATED = ref("Related")


def _data_variant(kind: str, data: Schema) -> Schema:
    return obj(type=string(enum=[kind]), data=data)


SCHEMAS: dict[str, Schema] = {
    "Error": obj(error_code=integer(400, 59999, description="the Confluent REST proxy's code (40403 unknown "
                                                             "topic, 40002 bad request, ...), else the HTTP "
                                                             "status"),
                 message=string(),
                 error_name=string(example="INVALID_PRODUCER_EPOCH", description="Kafka's error name, or the "
                                                                                 "HTTP status's"),
                 kafka_error_code=nullable(integer(-1, INT16_MAX, description="Kafka's error code; null for "
                                                                              "errors that are not Kafka's"))),
    "ResourceMetadata": obj(self=string(format="uri"), resource_name=nullable(string())),
    "ListMetadata": obj(self=string(format="uri"), next=nullable(string())),
    "Related": obj(related=string(format="uri")),
    "Cluster": resource("KafkaCluster", cluster_id=string(), controller=RELATED, brokers=RELATED, topics=RELATED,
                        consumer_groups=RELATED, transactions=RELATED),
    "ClusterList": listing("KafkaClusterList", "Cluster"),
    "Broker": resource("KafkaBroker", cluster_id=string(), broker_id=integer(maximum=INT32_MAX),
                       host=nullable(string(description="the advertised Kafka host; null when "
                                                        "advertised.listeners is not set")),
                       port=nullable(integer(maximum=65535)), rack=nullable(string()), configs=RELATED,
                       partition_replicas=RELATED),
    "BrokerList": listing("KafkaBrokerList", "Broker"),
    "Replica": resource("KafkaReplica", cluster_id=string(), topic_name=string(),
                        partition_id=integer(maximum=INT32_MAX), broker_id=integer(maximum=INT32_MAX),
                        is_leader=BOOLEAN, is_in_sync=BOOLEAN, broker=RELATED),
    "ReplicaList": listing("KafkaReplicaList", "Replica"),
    "Config": obj(["name"], name=string(minLength=1, maxLength=249),
                  value=nullable(string(maxLength=32767, description="null: the default"))),
    "EffectiveConfig": obj(name=string(enum=CONFIG_NAMES), value=string(), is_default=BOOLEAN,
                           source=string(enum=CONFIG_SOURCES), is_read_only=BOOLEAN, is_sensitive=BOOLEAN),
    "Topic": resource("KafkaTopic", cluster_id=string(), topic_name=string(),
                      topic_id=nullable(string(description="null in a validate_only answer")),
                      is_internal=BOOLEAN, replication_factor=integer(1, 1),
                      partitions_count=integer(1, INT32_MAX), partitions=RELATED, configs=RELATED,
                      effective_configs=nullable(array(ref("EffectiveConfig"), description=(
                          "every config, its value and where it comes from (Exactly's); null in a "
                          "validate_only answer")))),
    "TopicList": listing("KafkaTopicList", "Topic"),
    "CreateTopic": obj(
        ["topic_name"], topic_name=string(pattern=TOPIC_PATTERN),
        partitions_count=integer(1, MAX_PARTITIONS_PER_REQUEST, description=(
            f"default: the broker's num.partitions; more than {MAX_PARTITIONS_PER_REQUEST} is POLICY_VIOLATION, "
            f"as is going past exactly.max.partitions")),
        replication_factor=integer(-1, 1, enum=[-1, 1], description="one node: 1 (or -1, the default)"),
        configs=array(ref("Config"), maxItems=100, description="topic configs by Kafka name, e.g. "
                                                                "cleanup.policy, retention.ms, compression.type"),
        validate_only=nullable({**BOOLEAN, "description": "check only: nothing is created"})),
    "UpdatePartitionCount": obj(partitions_count=integer(1, INT32_MAX, description=(
        f"growing by more than {MAX_PARTITIONS_PER_REQUEST}, or past exactly.max.partitions, is "
        f"POLICY_VIOLATION"))),
    "ConfigSynonym": obj(name=string(), value=nullable(string()), source=string(enum=CONFIG_SOURCES)),
    "TopicConfig": {"allOf": [ref("EffectiveConfig"), resource(
        "KafkaTopicConfig", cluster_id=string(), topic_name=string(), synonyms=array(ref("ConfigSynonym")))]},
    "TopicConfigList": listing("KafkaTopicConfigList", "TopicConfig"),
    "BrokerConfig": resource(
        "KafkaBrokerConfig", cluster_id=string(), broker_id=integer(maximum=INT32_MAX), name=string(),
        value=nullable(string(description="null for a sensitive one")), is_default=BOOLEAN,
        source=string(enum=CONFIG_SOURCES), is_read_only=BOOLEAN, is_sensitive=BOOLEAN,
        synonyms=array(ref("ConfigSynonym"))),
    "BrokerConfigList": listing("KafkaBrokerConfigList", "BrokerConfig"),
    "UpdateConfig": obj(value=string(maxLength=32767)),
    "AlterConfigs": obj(["data"], data=array(obj(
        ["name"], name=string(minLength=1, maxLength=249), value=nullable(string(maxLength=32767)),
        operation=nullable(string(enum=["SET", "DELETE"], description="default SET"))), maxItems=100),
        validate_only=nullable({**BOOLEAN, "description": "check only: nothing changes"})),
    "OpenTransaction": obj(
        producer_id=integer(), first_offset=integer(),
        transactional_id=nullable(string(description="null: no coordinator knows the producer (hanging)")),
        transaction_start_ms=nullable(TIMESTAMP_MS), transaction_timeout_ms=nullable(integer())),
    "Partition": resource(
        "KafkaPartition", cluster_id=string(), topic_name=string(), partition_id=integer(maximum=INT32_MAX),
        log_start_offset=integer(), high_watermark=integer(description="the durable end of the log"),
        last_stable_offset=integer(description="read_committed consumers read up to here"),
        log_end_offset=integer(), size_bytes=integer(),
        open_transactions=array(ref("OpenTransaction"), description="what holds the LSO back"),
        leader=RELATED, replicas=RELATED, records=RELATED, producers=RELATED),
    "PartitionList": listing("KafkaPartitionList", "Partition"),
    "Producer": resource(
        "KafkaProducer", cluster_id=string(), topic_name=string(), partition_id=integer(maximum=INT32_MAX),
        producer_id=integer(), producer_epoch=integer(-1, INT16_MAX), last_sequence=integer(-1, INT32_MAX),
        last_timestamp=TIMESTAMP_MS, coordinator_epoch=integer(-1, INT32_MAX),
        current_transaction_start_offset=integer(-1, description="-1: no open transaction"),
        transactional_id=nullable(string())),
    "ProducerList": listing("KafkaProducerList", "Producer"),
    "RecordData": nullable({
        "description": "a key or value: BINARY (base64), STRING (UTF-8) or JSON (any JSON value); "
                       "null or absent for none",
        "oneOf": [_data_variant("BINARY", string(format="byte")), _data_variant("STRING", string()),
                  _data_variant("JSON", {"description": "any JSON value"})]}),
    "Header": obj(name=string(), value=nullable(string(format="byte", description="base64"))),
    "ProduceRecord": obj(
        [], partition_id=nullable(integer(maximum=INT32_MAX, description="default: murmur2 of the key, "
                                                                          "or any partition")),
        key=ref("RecordData"), value=ref("RecordData"), headers=nullable(array(ref("Header"))),
        timestamp=nullable({"description": "ISO 8601 with a zone (as the proxy takes it), or milliseconds "
                                           "since the epoch; default: now",
                            "oneOf": [integer(maximum=MAX_TIME_MS), string(format="date-time")]})),
    "ProduceRequest": {"allOf": [ref("ProduceRecord"), obj(
        [], producer_id=nullable(integer(description="with producer_epoch and sequence: an idempotent "
                                                     "producer's batch, deduplicated on retry")),
        producer_epoch=nullable(integer(maximum=INT16_MAX)), sequence=nullable(integer(maximum=INT32_MAX)))]},
    "DataSummary": nullable(obj(type=string(enum=["BINARY", "JSON", "STRING"]), size=integer())),
    "ProduceResponse": obj(
        error_code=integer(200, 200), cluster_id=string(), topic_name=string(),
        partition_id=integer(maximum=INT32_MAX), offset=integer(),
        timestamp=nullable(string(format="date-time", description="ISO 8601 UTC, as the proxy sends it")),
        key=ref("DataSummary"), value=ref("DataSummary")),
    "BatchEntry": {"allOf": [ref("ProduceRequest"), obj(["id"], id=string(pattern="^[0-9a-zA-Z_-]{1,80}$"))]},
    "ProduceBatch": obj(entries=array(ref("BatchEntry"), minItems=1, maxItems=MAX_BATCH_ENTRIES)),
    "ProduceBatchResponse": obj(
        successes=array({"allOf": [obj(id=string()), obj(
            cluster_id=string(), topic_name=string(), partition_id=integer(maximum=INT32_MAX), offset=integer(),
            timestamp=nullable(string(format="date-time")), key=ref("DataSummary"), value=ref("DataSummary"))]}),
        failures=array({"allOf": [obj(id=string()), ref("Error")]})),
    "PartitionOffsets": resource(
        "KafkaPartitionWithOffsets", cluster_id=string(), topic_name=string(),
        partition_id=integer(maximum=INT32_MAX), earliest_offset=integer(-1),
        latest_offset=integer(-1, description="the high watermark (the LSO with isolation_level=read_committed)"),
        isolation_level=string(enum=["read_committed", "read_uncommitted"])),
    "ProducerId": obj(producer_id=integer(), producer_epoch=integer(maximum=INT16_MAX)),
    "BinaryData": nullable(obj(type=string(enum=["BINARY"]), data=string(format="byte"))),
    "ConsumedRecord": obj(
        offset=integer(), timestamp=TIMESTAMP_MS, key=ref("BinaryData"), value=ref("BinaryData"),
        headers=array(ref("Header")), producer_id=integer(-1), is_transactional={"type": "boolean"}),
    "RecordList": obj(
        topic_name=string(), partition_id=integer(maximum=INT32_MAX),
        isolation_level=string(enum=["read_committed", "read_uncommitted"]),
        high_watermark=integer(), last_stable_offset=integer(), log_start_offset=integer(),
        next_offset=integer(description="where the next read continues"), records=array(ref("ConsumedRecord"))),
    "Offsets": obj(
        topic_name=string(), partition_id=integer(maximum=INT32_MAX),
        isolation_level=string(enum=["read_committed", "read_uncommitted"]),
        offset=integer(-1, description="-1: no record at or after the timestamp"),
        timestamp=integer(-1, description="the found record's timestamp; -1 for latest and earliest")),
    "GroupMember": obj(member_id=string(), group_instance_id=nullable(string()), client_id=string(),
                       client_host=string(), session_timeout_ms=integer()),
    "PendingOffset": obj(producer_id=integer(), transactional_id=nullable(string()), offset=integer()),
    "GroupOffset": obj(
        topic_name=string(), partition_id=integer(maximum=INT32_MAX), committed_offset=nullable(integer()),
        metadata=nullable(string()), pending=array(ref("PendingOffset"), description="inside open transactions"),
        high_watermark=nullable(integer()), last_stable_offset=nullable(integer()),
        lag=nullable(integer(description="records a read_committed consumer would still receive: data "
                                          "records from the committed offset to the LSO, markers and "
                                          "aborted records excluded")),
        lag_exact={"type": "boolean", "description": "false only right after the broker started, while "
                                                     "it counts the batches it opened with (an upper bound "
                                                     "meanwhile)"},
        held_back=integer(description="data records from the LSO to the high watermark (aborted ones "
                                      "not counted): they wait for the open transactions in held_by"),
        held_by=array(obj(["producer_id", "first_offset"], producer_id=integer(),
                          transactional_id=nullable(string()), first_offset=integer(),
                          state=nullable(string())), description="open transactions, the one pinning "
                                                                 "the LSO first")),
    "ConsumerGroup": resource(
        "KafkaConsumerGroup", cluster_id=string(), consumer_group_id=string(), is_simple=BOOLEAN,
        partition_assignor=string(), state=string(enum=GROUP_STATES), coordinator=RELATED, consumers=RELATED,
        lag_summary=RELATED, generation_id=integer(-1, INT32_MAX), protocol_type=nullable(string()),
        members_count=integer()),
    "ConsumerGroupList": listing("KafkaConsumerGroupList", "ConsumerGroup"),
    "ConsumerGroupDetail": resource(
        "KafkaConsumerGroup", cluster_id=string(), consumer_group_id=string(), is_simple=BOOLEAN,
        partition_assignor=string(), state=string(enum=GROUP_STATES), coordinator=RELATED, consumers=RELATED,
        lag_summary=RELATED, generation_id=integer(-1, INT32_MAX), protocol_type=nullable(string()),
        protocol=nullable(string()), leader=nullable(string()), members=array(ref("GroupMember")),
        offsets=array(ref("GroupOffset"))),
    "Consumer": resource(
        "KafkaConsumer", cluster_id=string(), consumer_group_id=string(), consumer_id=string(),
        instance_id=nullable(string()), client_id=string(), assignments=RELATED, client_host=string(),
        session_timeout_ms=integer()),
    "ConsumerList": listing("KafkaConsumerList", "Consumer"),
    "ConsumerAssignment": resource(
        "KafkaConsumerAssignment", cluster_id=string(), consumer_group_id=string(), consumer_id=string(),
        topic_name=string(), partition_id=integer(maximum=INT32_MAX), partition=RELATED, lag=RELATED),
    "ConsumerAssignmentList": listing("KafkaConsumerAssignmentList", "ConsumerAssignment"),
    "ConsumerLag": resource(
        "KafkaConsumerLag", cluster_id=string(), consumer_group_id=string(), topic_name=string(),
        partition_id=integer(maximum=INT32_MAX), current_offset=integer(description="the committed offset"),
        log_end_offset=integer(description="the last stable offset: where a read_committed consumer ends"),
        lag=integer(description="records a read_committed consumer would still receive (markers and "
                                "aborted records not counted)"),
        consumer_id=string(description="the member assigned the partition; empty when none is"),
        instance_id=nullable(string()), client_id=string(), high_watermark=integer(),
        lag_exact=BOOLEAN),
    "ConsumerLagList": listing("KafkaConsumerLagList", "ConsumerLag"),
    "ConsumerGroupLagSummary": resource(
        "KafkaConsumerGroupLagSummary", cluster_id=string(), consumer_group_id=string(),
        max_lag_consumer_id=string(), max_lag_instance_id=nullable(string()), max_lag_client_id=string(),
        max_lag_topic_name=string(description="empty when the group has no committed offset"),
        max_lag_partition_id=integer(-1, INT32_MAX), max_lag=integer(), total_lag=integer(),
        max_lag_consumer=nullable(RELATED), max_lag_partition=nullable(RELATED)),
    "Transaction": resource(
        "KafkaTransaction", cluster_id=string(), transactional_id=string(), state=string(enum=STATES),
        producer_id=integer(-1),
        producer_epoch=integer(-1, INT16_MAX), transaction_timeout_ms=integer(-1, INT32_MAX),
        transaction_start_ms=nullable(TIMESTAMP_MS), age_ms=nullable(integer(-INT64_MAX)),
        last_update_ms=TIMESTAMP_MS, partitions=array(TOPIC_PARTITION)),
    "TransactionList": listing("KafkaTransactionList", "Transaction"),
    "FinishedTransaction": obj(
        producer_id=integer(), producer_epoch=integer(-1, INT16_MAX), outcome=string(enum=OUTCOMES),
        partitions=array(TOPIC_PARTITION), start_ms=TIMESTAMP_MS, end_ms=TIMESTAMP_MS,
        abort_cause=nullable(string(enum=ABORT_CAUSES, description="why it was aborted; null for a commit")),
        abort_actor=nullable(string(description="who aborted it, and from where"))),
    "TransactionDetail": {"allOf": [ref("Transaction"), obj(history=nullable(array(
        ref("FinishedTransaction"), description="finished transactions, newest first, from the SQLite "
                                                "mirror; null when the broker runs without one")))]},
    "InitTransaction": obj([], transaction_timeout_ms=integer(
        1, INT32_MAX, description="default 60000; at most transaction.max.timeout.ms")),
    "ProducerIdentity": obj(transactional_id=string(), producer_id=integer(),
                            producer_epoch=integer(maximum=INT16_MAX)),
    "ProducerFields": obj(producer_id=integer(), producer_epoch=integer(maximum=INT16_MAX)),
    "TransactionRecord": {"allOf": [ref("ProduceRecord"), obj(["topic_name"],
                                                              topic_name=string(pattern=TOPIC_PATTERN))]},
    "TransactionRecords": {"allOf": [ref("ProducerFields"), obj(
        records=array(ref("TransactionRecord"), minItems=1, maxItems=10_000))]},
    "AppendedRecords": obj(records=array(obj(topic_name=string(), partition_id=integer(maximum=INT32_MAX),
                                             offset=integer()))),
    "TransactionOffset": obj(["topic_name", "partition_id", "offset"], topic_name=string(pattern=TOPIC_PATTERN),
                             partition_id=integer(maximum=INT32_MAX), offset=integer(),
                             metadata=nullable(string(maxLength=32767))),
    "TransactionOffsets": {"allOf": [ref("ProducerFields"), obj(
        ["group_id", "offsets"], group_id=string(minLength=1, maxLength=32767),
        generation_id=nullable(integer(-1, INT32_MAX, description="with member_id: KIP-447 fencing; "
                                                                  "-1 or absent: none")),
        member_id=nullable(string(maxLength=32767)),
        group_instance_id=nullable(string(minLength=1, maxLength=32767)),
        offsets=array(ref("TransactionOffset"), minItems=1, maxItems=10_000))]},
    "SentOffsets": obj(transactional_id=string(), group_id=string(), offsets=array(obj(
        topic_name=string(), partition_id=integer(maximum=INT32_MAX), offset=integer(), metadata=string()))),
    "AbortedHanging": obj(topic_name=string(), partition_id=integer(maximum=INT32_MAX), producer_id=integer(),
                          transactional_id=nullable(string(description="the transactional id whose transaction "
                                                                       "the coordinator aborted; null: no "
                                                                       "coordinator could, an ABORT marker "
                                                                       "was written on this partition")),
                          producer_epoch=integer(description="the producer's epoch now: older ones are fenced"),
                          last_stable_offset=integer()),
}


# -- operations -------------------------------------------------------------------------

ERROR_TEXT = {
    400: "invalid input (INVALID_REQUEST, TOPIC_ALREADY_EXISTS, INVALID_CONFIG and other Kafka client errors)",
    401: "missing or wrong bearer token",
    403: "a write sent by a browser from another site's page",
    404: "unknown cluster, topic, partition, transactional id or group",
    409: "refused by the broker's state: fenced producer, wrong epoch or sequence, transaction state",
    413: "request body or record too large",
    415: "the body is not application/json",
    416: "offset outside the partition (OFFSET_OUT_OF_RANGE)",
    422: "Idempotency-Key reused for another request",
    503: "coordinator or storage unavailable; retry (Retry-After)",
}

PATH_PARAMS: dict[str, Schema] = {
    "cluster_id": string(description="the broker's cluster id (GET /v3/clusters)"),
    "topic_name": string(pattern=TOPIC_PATTERN),
    "partition_id": integer(maximum=INT32_MAX),
    "transactional_id": string(minLength=1),
    "group_id": string(minLength=1),
    "producer_id": integer(),
    "broker_id": integer(maximum=INT32_MAX),
    "name": string(minLength=1),
    "consumer_id": string(minLength=1),
}

IDEMPOTENCY_KEY = {"name": "Idempotency-Key", "in": "header", "required": False,
                   "description": "a retry with the same key and body returns the first answer and appends "
                                  "nothing; remembered for this broker process's lifetime (bounded), and "
                                  "for a transaction's records call also across a restart while the "
                                  "transaction is open",
                   "schema": string(pattern="^[!-~]{1,255}$")}


def _json(schema: Schema) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def operation(method: str, path: str, summary: str, tag: str, ok: tuple[int, str | None], errors: tuple[int, ...],
              body: str | None = None, body_required: bool = True, query: tuple[Schema, ...] = (),
              idempotent: bool = False, description: str = "") -> dict[str, Any]:
    names = [segment[1:-1] for segment in path.split("/") if segment.startswith("{")]
    parameters = [{"name": n, "in": "path", "required": True, "schema": PATH_PARAMS[n]} for n in names]
    parameters += list(query) + ([IDEMPOTENCY_KEY] if idempotent else [])
    status, schema = ok
    responses: dict[str, Any] = {str(status): {"description": "OK", **(_json(ref(schema)) if schema else {})}}
    codes = {400, 401, *errors, *((403,) if method != "get" else ()), *((413, 415) if body else ()),
             *((422,) if idempotent else ())}
    for code in sorted(codes):
        responses[str(code)] = {"$ref": f"#/components/responses/{code}"}
    responses["default"] = {"$ref": "#/components/responses/default"}
    op: dict[str, Any] = {"summary": summary, "tags": [tag], "operationId": _operation_id(summary),
                          "parameters": parameters, "responses": responses}
    if description:
        op["description"] = description
    if body:
        op["requestBody"] = {"required": body_required, **_json(ref(body))}
    return op


def _operation_id(summary: str) -> str:
    return "".join(w.capitalize() if i else w.lower() for i, w in enumerate(summary.replace("-", " ").split()))


def query_param(name: str, schema: Schema, description: str, **extra: Any) -> Schema:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema,
            **extra}


ISOLATION = query_param("isolation_level", string(enum=["read_committed", "read_uncommitted"],
                                                  default="read_committed"),
                        "read_committed (default): only committed records, below the LSO")

C = "/v3/clusters/{cluster_id}"
T = C + "/topics/{topic_name}"
P = T + "/partitions/{partition_id}"
X = C + "/transactions/{transactional_id}"
B = C + "/brokers/{broker_id}"
CF = T + "/configs"
G = C + "/consumer-groups/{group_id}"
CO = G + "/consumers/{consumer_id}"


def _paths() -> dict[str, dict[str, Any]]:
    paths: dict[str, dict[str, Any]] = {
        "/v3/clusters": {"get": operation("get", "/v3/clusters", "List clusters", "Cluster", (200, "ClusterList"),
                                          ())},
        C: {"get": operation("get", C, "Get cluster", "Cluster", (200, "Cluster"), (404,))},
        C + "/brokers": {"get": operation("get", C + "/brokers", "List brokers", "Broker", (200, "BrokerList"),
                                          (404,))},
        B: {"get": operation("get", B, "Get broker", "Broker", (200, "Broker"), (404,))},
        C + "/brokers/-/configs": {"get": operation("get", C + "/brokers/-/configs", "List all broker configs",
                                                     "Configs", (200, "BrokerConfigList"), (404,))},
        C + "/topics/-/configs": {"get": operation("get", C + "/topics/-/configs", "List all topic configs",
                                                   "Configs", (200, "TopicConfigList"), (404,))},
        B + "/configs": {"get": operation("get", B + "/configs", "List broker configs", "Configs",
                                          (200, "BrokerConfigList"), (404,),
                                          description="This broker's settings; read-only (set at start-up).")},
        B + "/configs/{name}": {"get": operation("get", B + "/configs/{name}", "Get broker config", "Configs",
                                                 (200, "BrokerConfig"), (404,))},
        B + "/partition-replicas": {"get": operation("get", B + "/partition-replicas", "List broker replicas",
                                                     "Broker", (200, "ReplicaList"), (404,))},
        C + "/topics": {
            "get": operation("get", C + "/topics", "List topics", "Topic", (200, "TopicList"), (404,)),
            "post": operation("post", C + "/topics", "Create topic", "Topic", (201, "Topic"), (404, 503),
                              body="CreateTopic")},
        CF: {"get": operation("get", CF, "List topic configs", "Configs", (200, "TopicConfigList"), (404,))},
        CF + "/{name}": {
            "get": operation("get", CF + "/{name}", "Get topic config", "Configs", (200, "TopicConfig"), (404,)),
            "put": operation("put", CF + "/{name}", "Update topic config", "Configs", (204, None), (404, 503),
                             body="UpdateConfig"),
            "delete": operation("delete", CF + "/{name}", "Reset topic config", "Configs", (204, None),
                                (404, 503))},
        CF + ":alter": {"post": operation("post", CF + ":alter", "Batch alter topic configs", "Configs",
                                          (204, None), (404, 503), body="AlterConfigs",
                                          description="SET or DELETE several configs at once, all or nothing; "
                                                      "validate_only checks and changes nothing.")},
        T: {"get": operation("get", T, "Get topic", "Topic", (200, "Topic"), (404,)),
            "patch": operation("patch", T, "Update partition count", "Topic", (200, "Topic"), (404, 503),
                               body="UpdatePartitionCount",
                               description="CreatePartitions: the count can only grow."),
            "delete": operation("delete", T, "Delete topic", "Topic", (204, None), (404, 503))},
        T + "/partitions": {"get": operation("get", T + "/partitions", "List partitions", "Partition",
                                             (200, "PartitionList"), (404,))},
        P: {"get": operation("get", P, "Get partition", "Partition", (200, "Partition"), (404,),
                             description="Offsets, and the open transactions holding the LSO back.")},
        P + "/replicas": {"get": operation("get", P + "/replicas", "List replicas", "Partition",
                                           (200, "ReplicaList"), (404,))},
        P + "/replicas/{broker_id}": {"get": operation("get", P + "/replicas/{broker_id}", "Get replica",
                                                       "Partition", (200, "Replica"), (404,))},
        P + "/offset": {"get": operation("get", P + "/offset", "Get partition offsets", "Records",
                                         (200, "PartitionOffsets"), (404,),
                                         query=(query_param("offset_type", string(enum=["earliest_and_latest"]),
                                                            "the only one the proxy has"),
                                                query_param("isolation_level", string(
                                                    enum=["read_committed", "read_uncommitted"],
                                                    default="read_uncommitted"),
                                                    "read_uncommitted (default, as the proxy): latest is the "
                                                    "high watermark; read_committed: the LSO")))},
        P + "/producers": {"get": operation("get", P + "/producers", "List producers", "Partition",
                                            (200, "ProducerList"), (404,),
                                            description="DescribeProducers: the partition's producer state.")},
        P + "/producers/{producer_id}": {"get": operation("get", P + "/producers/{producer_id}", "Get producer",
                                                          "Partition", (200, "Producer"), (404,))},
        P + "/producers/{producer_id}/abort": {"post": operation("post", 
            P + "/producers/{producer_id}/abort", "Abort hanging transaction", "Transactions",
            (200, "AbortedHanging"), (404, 409, 503),
            description="Ends the open transaction of any producer holding this partition's LSO and "
                        "fences the producer (Kafka's AbortTransaction, KIP-664): the coordinator aborts "
                        "its transactional id's transaction with an epoch bump, or, for a producer no "
                        "coordinator knows, an ABORT marker one epoch up is written on this partition.")},
        T + "/records": {"post": operation("post", 
            T + "/records", "Produce record", "Records", (200, "ProduceResponse"), (404, 409, 503),
            body="ProduceRequest", idempotent=True,
            description="Appends one record; answers once it is durable. With producer_id, producer_epoch "
                        "and sequence, a retry is deduplicated as Kafka does (the original offset). Several "
                        "record objects concatenated in the body (the proxy's streaming produce) get 200 and "
                        "one delivery report per record, concatenated in order, each with its own error_code "
                        "(200, or the error's code with message, error_name and kafka_error_code).")},
        T + "/records:batch": {"post": operation("post", 
            T + "/records:batch", "Produce record batch", "Records", (207, "ProduceBatchResponse"), (404,),
            body="ProduceBatch", idempotent=True,
            description="The proxy's batch produce: entries with distinct ids, each appended on its own; "
                        "successes and failures name their entry's id.")},
        P + "/records": {"get": operation("get", 
            P + "/records", "Read records", "Records", (200, "RecordList"), (404, 416),
            query=(query_param("offset", integer(), "first offset to read; default: the log start"),
                   query_param("max_bytes", integer(1, MAX_FETCH_BYTES, default=1 << 20),
                               "at most this many bytes of batches (at least one batch is returned)"),
                   ISOLATION))},
        P + "/offsets": {"get": operation("get", 
            P + "/offsets", "List offsets", "Records", (200, "Offsets"), (404,),
            query=(query_param("timestamp", string(pattern="^(latest|earliest|[0-9]{1,19})$", default="latest"),
                               "latest (the LSO under read_committed), earliest, or milliseconds"),
                   ISOLATION))},
        C + "/producer-ids": {"post": operation("post", 
            C + "/producer-ids", "Init producer id", "Records", (200, "ProducerId"), (404, 503),
            description="A new producer id (epoch 0) for idempotent produce.")},
        C + "/consumer-groups": {"get": operation("get", C + "/consumer-groups", "List consumer groups",
                                                  "Consumer Groups", (200, "ConsumerGroupList"), (404,))},
        G: {"get": operation("get", G, "Get consumer group", "Consumer Groups", (200, "ConsumerGroupDetail"),
                             (404,), description="Members, committed and pending offsets, lag against the LSO.")},
        G + "/consumers": {"get": operation("get", G + "/consumers", "List consumers", "Consumer Groups",
                                            (200, "ConsumerList"), (404,))},
        CO: {"get": operation("get", CO, "Get consumer", "Consumer Groups", (200, "Consumer"), (404,))},
        CO + "/assignments": {"get": operation("get", CO + "/assignments", "List consumer assignments",
                                               "Consumer Groups", (200, "ConsumerAssignmentList"), (404,))},
        CO + "/assignments/{topic_name}/partitions/{partition_id}": {"get": operation(
            "get", CO + "/assignments/{topic_name}/partitions/{partition_id}", "Get consumer assignment",
            "Consumer Groups", (200, "ConsumerAssignment"), (404,))},
        G + "/lags": {"get": operation("get", G + "/lags", "List consumer lags", "Consumer Groups",
                                       (200, "ConsumerLagList"), (404,),
                                       description="Per partition with a committed offset: the records a "
                                                   "read_committed consumer would still receive.")},
        G + "/lags/{topic_name}/partitions/{partition_id}": {"get": operation(
            "get", G + "/lags/{topic_name}/partitions/{partition_id}", "Get consumer lag", "Consumer Groups",
            (200, "ConsumerLag"), (404,))},
        G + "/lag-summary": {"get": operation("get", G + "/lag-summary", "Get consumer group lag summary",
                                              "Consumer Groups", (200, "ConsumerGroupLagSummary"), (404,))},
        C + "/transactions": {"get": operation("get", 
            C + "/transactions", "List transactions", "Transactions", (200, "TransactionList"), (404,),
            query=(query_param("state", array(string(enum=STATES)), "only these states (repeatable)",
                               style="form", explode=True),))},
        X: {"get": operation("get", X, "Get transaction", "Transactions", (200, "TransactionDetail"), (404,),
                             query=(query_param("history_limit", integer(0, 1000, default=20),
                                                "finished transactions to show"),))},
        X + "/init": {"post": operation("post", 
            X + "/init", "Init transactions", "Transactions", (200, "ProducerIdentity"), (404, 409, 503),
            body="InitTransaction", body_required=False, idempotent=True,
            description="InitProducerId: a producer id and a new epoch; fences older instances and aborts "
                        "their open transaction.")},
        X + "/records": {"post": operation("post", 
            X + "/records", "Send records in transaction", "Transactions", (200, "AppendedRecords"),
            (404, 409, 503), body="TransactionRecords", idempotent=True)},
        X + "/offsets": {"post": operation("post", 
            X + "/offsets", "Send offsets to transaction", "Transactions", (200, "SentOffsets"),
            (404, 409, 503), body="TransactionOffsets", idempotent=True)},
        X + "/commit": {"post": operation("post", X + "/commit", "Commit transaction", "Transactions",
                                          (200, "Transaction"), (404, 409, 503), body="ProducerFields",
                                          idempotent=True)},
        X + "/abort": {"post": operation("post", X + "/abort", "Abort transaction", "Transactions",
                                         (200, "Transaction"), (404, 409, 503), body="ProducerFields",
                                         idempotent=True)},
        X + "/admin-abort": {"post": operation("post", 
            X + "/admin-abort", "Admin abort transaction", "Transactions", (200, "Transaction"), (404, 409, 503),
            description="The coordinator aborts the open transaction and fences its producer.")},
    }
    paths["/openapi.json"] = {"get": {"summary": "This document", "tags": ["Monitoring"],
                                      "operationId": "openapi", "responses": {
                                          "200": {"description": "OpenAPI 3.0", **_json({"type": "object"})},
                                          "401": {"$ref": "#/components/responses/401"}}}}
    paths["/metrics"] = {"get": {"summary": "Prometheus metrics", "tags": ["Monitoring"], "operationId": "metrics",
                                 "responses": {"200": {"description": "Prometheus text format",
                                                       "content": {"text/plain": {"schema": string()}}},
                                               "401": {"$ref": "#/components/responses/401"}}}}
    return paths


@functools.cache
def document() -> dict[str, Any]:
    responses = {str(code): {"description": text, **_json(ref("Error"))} for code, text in ERROR_TEXT.items()}
    responses["default"] = {"description": "error", **_json(ref("Error"))}
    return {
        "openapi": "3.0.3",
        "info": {"title": "Exactly HTTP API", "version": "1",
                 "description": "Confluent REST Proxy v3 names and shapes where they exist, plus transactions "
                                "over HTTP. Errors are the proxy's JSON {error_code, message}, with Kafka's "
                                "error_name and kafka_error_code beside them."},
        "security": [{}, {"bearerAuth": []}],
        "paths": _paths(),
        "components": {"schemas": SCHEMAS, "responses": responses,
                       "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer",
                                                          "description": "needed when the broker has "
                                                                         "http.auth.token set"}}},
    }
