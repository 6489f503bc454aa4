"""``/openapi.json``: the OpenAPI 3.1 document, derived from the models.

It holds no shapes: every schema is pydantic's JSON Schema of a model in
``exactly/app/http/api/models.py`` (the same models that validate the requests), and each
operation below names only its models, statuses and words. Pinned by tests: every
Flask rule under ``/v3`` is a path here and every path here is a rule
(tests/test_http_api.py), and schemathesis fuzzes the API from this document
(tests/test_http_fuzz.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, jsonify
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from exactly.app.http.api import models as m

bp = Blueprint("openapi", __name__)

REF = "#/components/schemas/{model}"

ERROR_TEXT = {
    400: "invalid input (INVALID_REQUEST, TOPIC_ALREADY_EXISTS, INVALID_CONFIG and other Kafka client errors)",
    401: "missing or wrong bearer token (or Basic user and password)",
    403: "not authorized: the principal may not do this (TOPIC_AUTHORIZATION_FAILED, "
         "GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED), "
         "or a write sent by a browser from another site's page",
    404: "unknown cluster, topic, partition, transactional id or group",
    409: "refused by the broker's state: fenced producer, wrong epoch or sequence, transaction state",
    413: "request body or record too large",
    415: "the body is not application/json",
    416: "offset outside the partition (OFFSET_OUT_OF_RANGE)",
    422: "Idempotency-Key reused for another request",
    429: "a new Idempotency-Key past the principal's quota (THROTTLING_QUOTA_EXCEEDED); retry after Retry-After",
    503: "coordinator or storage unavailable; retry (Retry-After)",
}


@dataclass(frozen=True)
class Operation:
    """One route: its models, its statuses and its words."""

    method: str
    path: str
    summary: str
    tag: str
    ok: int
    answer: type[BaseModel] | None
    errors: tuple[int, ...] = (404,)
    body: type[BaseModel] | None = None
    body_required: bool = True
    query: type[m.Query] | None = None
    idempotent: bool = False
    description: str = ""
    #: another success status with the same answer (create topic's dry run: 200)
    also_ok: int | None = None


C = "/v3/clusters/{cluster_id}"
T = C + "/topics/{topic_name}"
P = T + "/partitions/{partition_id}"
X = C + "/transactions/{transactional_id}"
B = C + "/brokers/{broker_id}"
CF = T + "/configs"
G = C + "/consumer-groups/{group_id}"
A = C + "/acls"
CO = G + "/consumers/{consumer_id}"
F = C + "/faults"
CHANGES = (404, 503)
STATIC = ("Refused (400 INVALID_REQUEST), as Kafka refuses a read-only config: this broker's configs are set at "
          "start-up and change with a restart.")
NO_REASSIGNMENT = "One node, one replica: no reassignment is ever in progress (an empty list)."
TXN = (404, 409, 503)

def _refused_changes(path: str, what: str) -> tuple[Operation, ...]:
    """The proxy's PUT, DELETE and batch alter of configs this broker holds static."""
    return (Operation("put", path + "/{name}", f"Update {what} config", "Configs", 204, None, CHANGES,
                      body=m.UpdateConfig, description=STATIC),
            Operation("delete", path + "/{name}", f"Reset {what} config", "Configs", 204, None, CHANGES,
                      description=STATIC),
            Operation("post", path + ":alter", f"Batch alter {what} configs", "Configs", 204, None, CHANGES,
                      body=m.AlterConfigs, description=STATIC))


OPERATIONS = (
    Operation("get", "/v3/clusters", "List clusters", "Cluster", 200, m.listing(m.Cluster), ()),
    Operation("get", C, "Get cluster", "Cluster", 200, m.Cluster),
    Operation("get", C + "/brokers", "List brokers", "Broker", 200, m.listing(m.Broker)),
    Operation("get", B, "Get broker", "Broker", 200, m.Broker),
    Operation("get", C + "/brokers/-/configs", "List all broker configs", "Configs", 200, m.listing(m.BrokerConfig)),
    Operation("get", C + "/topics/-/configs", "List all topic configs", "Configs", 200, m.listing(m.TopicConfig)),
    Operation("get", B + "/configs", "List broker configs", "Configs", 200, m.listing(m.BrokerConfig),
              description="This broker's settings; read-only (set at start-up)."),
    Operation("get", B + "/configs/{name}", "Get broker config", "Configs", 200, m.BrokerConfig),
    *_refused_changes(B + "/configs", "broker"),
    Operation("get", C + "/broker-configs", "List cluster configs", "Configs", 200, m.listing(m.ClusterConfig),
              description="The dynamic cluster-wide broker configs: none (this broker's configs are static)."),
    Operation("get", C + "/broker-configs/{name}", "Get cluster config", "Configs", 200, m.ClusterConfig,
              description="404: no config is dynamic here (GET .../brokers/{broker_id}/configs/{name} has "
                          "the value)."),
    *_refused_changes(C + "/broker-configs", "cluster"),
    Operation("get", B + "/partition-replicas", "List broker replicas", "Broker", 200, m.listing(m.Replica)),
    Operation("get", C + "/topics", "List topics", "Topic", 200, m.listing(m.Topic), query=m.TopicQuery),
    Operation("post", C + "/topics", "Create topic", "Topic", 201, m.Topic, CHANGES, body=m.CreateTopic,
              also_ok=200, description="201: created; 200: validate_only, nothing created (the proxy's dry run)."),
    Operation("get", CF, "List topic configs", "Configs", 200, m.listing(m.TopicConfig)),
    Operation("get", CF + "/{name}", "Get topic config", "Configs", 200, m.TopicConfig),
    Operation("put", CF + "/{name}", "Update topic config", "Configs", 204, None, CHANGES, body=m.UpdateConfig),
    Operation("delete", CF + "/{name}", "Reset topic config", "Configs", 204, None, CHANGES),
    Operation("post", CF + ":alter", "Batch alter topic configs", "Configs", 204, None, CHANGES,
              body=m.AlterConfigs,
              description="SET or DELETE several configs at once, all or nothing; validate_only checks and "
                          "changes nothing."),
    Operation("get", T, "Get topic", "Topic", 200, m.Topic, query=m.TopicQuery),
    Operation("patch", T, "Update partition count", "Topic", 200, m.Topic, CHANGES, body=m.UpdatePartitionCount,
              description="CreatePartitions: the count can only grow."),
    Operation("delete", T, "Delete topic", "Topic", 204, None, CHANGES),
    Operation("get", T + "/partitions", "List partitions", "Partition", 200, m.listing(m.Partition)),
    Operation("get", P, "Get partition", "Partition", 200, m.Partition,
              description="Offsets, and the open transactions holding the LSO back."),
    Operation("get", P + "/replicas", "List replicas", "Partition", 200, m.listing(m.Replica)),
    Operation("get", C + "/topics/-/partitions/-/reassignment", "List all replica reassignments", "Partition", 200,
              m.listing(m.Reassignment), (), description=NO_REASSIGNMENT),
    Operation("get", T + "/partitions/-/reassignment", "Search replica reassignments by topic", "Partition", 200,
              m.listing(m.Reassignment), description=NO_REASSIGNMENT),
    Operation("get", P + "/reassignment", "Get replica reassignments", "Partition", 200, m.Reassignment,
              description=NO_REASSIGNMENT + " A partition's is 404."),
    Operation("get", P + "/replicas/{broker_id}", "Get replica", "Partition", 200, m.Replica),
    Operation("get", P + "/offset", "Get partition offsets", "Records", 200, m.PartitionOffsets,
              query=m.PartitionOffsetsQuery),
    Operation("get", P + "/producers", "List producers", "Partition", 200, m.listing(m.Producer),
              description="DescribeProducers: the partition's producer state."),
    Operation("get", P + "/producers/{producer_id}", "Get producer", "Partition", 200, m.Producer),
    Operation("post", P + "/producers/{producer_id}/abort", "Abort hanging transaction", "Transactions", 200,
              m.AbortedHanging, TXN,
              description="Ends the open transaction of any producer holding this partition's LSO and fences "
                          "the producer (Kafka's AbortTransaction, KIP-664): the coordinator aborts its "
                          "transactional id's transaction with an epoch bump, or, for a producer no coordinator "
                          "knows, an ABORT marker one epoch up is written on this partition."),
    Operation("post", T + "/records", "Produce record", "Records", 200, m.ProduceResponse, TXN,
              body=m.ProduceRequest, idempotent=True,
              description="Appends one record; answers once it is durable. With producer_id, producer_epoch and "
                          "sequence, a retry is deduplicated as Kafka does (the original offset). Several record "
                          "objects concatenated in the body (the proxy's streaming produce) get 200 and one "
                          "delivery report per record, concatenated in order, each with its own error_code (200, "
                          "or the error's code with message, error_name and kafka_error_code)."),
    Operation("post", T + "/records:batch", "Produce record batch", "Records", 207, m.ProduceBatchResponse,
              body=m.ProduceBatch, idempotent=True,
              description="The proxy's batch produce: entries with distinct ids, each appended on its own; "
                          "successes and failures name their entry's id."),
    Operation("get", P + "/records", "Read records", "Records", 200, m.RecordList, (404, 416), query=m.ReadQuery),
    Operation("get", P + "/offsets", "List offsets", "Records", 200, m.Offsets, query=m.OffsetsQuery),
    Operation("post", C + "/producer-ids", "Init producer id", "Records", 200, m.ProducerId, CHANGES,
              description="A new producer id (epoch 0) for idempotent produce."),
    Operation("get", C + "/consumer-groups", "List consumer groups", "Consumer Groups", 200,
              m.listing(m.ConsumerGroupSummary)),
    Operation("get", G, "Get consumer group", "Consumer Groups", 200, m.ConsumerGroupDetail,
              description="Members, committed and pending offsets, lag against the LSO."),
    Operation("get", G + "/consumers", "List consumers", "Consumer Groups", 200, m.listing(m.Consumer)),
    Operation("get", CO, "Get consumer", "Consumer Groups", 200, m.Consumer),
    Operation("get", CO + "/assignments", "List consumer assignments", "Consumer Groups", 200,
              m.listing(m.ConsumerAssignment)),
    Operation("get", CO + "/assignments/{topic_name}/partitions/{partition_id}", "Get consumer assignment",
              "Consumer Groups", 200, m.ConsumerAssignment),
    Operation("get", G + "/lags", "List consumer lags", "Consumer Groups", 200, m.listing(m.ConsumerLag),
              description="Per partition with a committed offset: the records a read_committed consumer would "
                          "still receive."),
    Operation("get", G + "/lags/{topic_name}/partitions/{partition_id}", "Get consumer lag", "Consumer Groups",
              200, m.ConsumerLag),
    Operation("get", G + "/lag-summary", "Get consumer group lag summary", "Consumer Groups", 200,
              m.ConsumerGroupLagSummary),
    Operation("get", G + "/audit", "Audit exactly-once", "Consumer Groups", 200, m.ExactlyOnceAudit,
              query=m.AuditQuery,
              description="Exactly's audit of a consume-transform-produce group, from the durable logs: the "
                          "chain of committed transactions per input partition with their input ranges and "
                          "output batches, aborted attempts with their cause, and every violation with its "
                          "exact offsets (ok: none)."),
    Operation("get", C + "/transactions", "List transactions", "Transactions", 200, m.listing(m.Transaction),
              query=m.TransactionsQuery),
    Operation("get", X, "Get transaction", "Transactions", 200, m.TransactionDetail, query=m.TransactionQuery),
    Operation("post", X + "/init", "Init transactions", "Transactions", 200, m.ProducerIdentity, TXN,
              body=m.InitTransaction, body_required=False, idempotent=True,
              description="InitProducerId: a producer id and a new epoch; fences older instances and aborts their "
                          "open transaction."),
    Operation("post", X + "/records", "Send records in transaction", "Transactions", 200, m.AppendedRecords, TXN,
              body=m.TransactionRecords, idempotent=True),
    Operation("post", X + "/offsets", "Send offsets to transaction", "Transactions", 200, m.SentOffsets, TXN,
              body=m.TransactionOffsets, idempotent=True),
    Operation("post", X + "/commit", "Commit transaction", "Transactions", 200, m.Transaction, TXN,
              body=m.ProducerFields, idempotent=True),
    Operation("post", X + "/abort", "Abort transaction", "Transactions", 200, m.Transaction, TXN,
              body=m.ProducerFields, idempotent=True),
    Operation("post", X + "/admin-abort", "Admin abort transaction", "Transactions", 200, m.Transaction, TXN,
              description="The coordinator aborts the open transaction and fences its producer."),
    Operation("get", A, "Search ACLs", "ACL", 200, m.listing(m.Acl), (), query=m.AclFilter,
              description="DescribeAcls: the ACLs the filter matches. Without an authorizer: SECURITY_DISABLED "
                          "(400)."),
    Operation("post", A, "Create ACL", "ACL", 201, None, CHANGES, body=m.CreateAcl,
              description="CreateAcls: durable in __cluster_metadata before it applies; Location is the search "
                          "that finds it."),
    Operation("delete", A, "Delete ACLs", "ACL", 200, m.DeletedAcls, CHANGES, query=m.AclFilter,
              description="DeleteAcls: removes every ACL the filter matches and answers them."),
    Operation("post", A + ":batch", "Batch create ACLs", "ACL", 204, None, CHANGES, body=m.CreateAcls),
    Operation("get", F, "List faults", "Faults", 200, m.listing(m.Fault),
              description="The faults installed on purpose, in the order they are tried (the first that "
                          "matches a request acts on it), with how often each fired."),
    Operation("post", F, "Add fault", "Faults", 201, m.Fault, (400, 404), body=m.AddFault,
              description="Install a fault after the others: matching Kafka requests get an error (per "
                          "partition), a delay, a closed connection before or after the work, or no answer."),
    Operation("delete", F, "Remove every fault", "Faults", 204, None),
    Operation("post", F + ":event", "Add fault event", "Faults", 201, m.listing(m.Fault), (400, 404),
              body=m.AddFaultEvent, description="Install an event preset's faults: a coordinator unavailable, "
                                               "loading or moved; a pause of every answer; a full disk."),
    Operation("get", F + "/{fault_id}", "Get fault", "Faults", 200, m.Fault),
    Operation("delete", F + "/{fault_id}", "Remove fault", "Faults", 204, None),
    Operation("post", X + ":fence", "Fence transactional producer", "Events", 200, m.Transaction, TXN,
              description="Now, as a new instance's InitProducerId would: its open transaction is aborted and the "
                          "epoch bumped; the producer's next request is PRODUCER_FENCED or INVALID_PRODUCER_EPOCH."),
    Operation("post", X + ":timeout", "Time out transaction", "Events", 200, m.Transaction, TXN,
              description="Now, as transaction.timeout.ms expiring would: the open transaction is aborted with "
                          "the timeout's epoch bump (cause timeout)."),
    Operation("get", C + "/server", "Get server", "Events", 200, m.Server,
              description="The running server's ports and restarts; 404 for a broker not served by a Server."),
    Operation("post", C + "/server:restart", "Restart server", "Events", 202, m.Server, (404,),
              body=m.RestartServer, body_required=False,
              description="Restarts the broker in place, on the same ports, after answering: cleanly, or as a "
                          "SIGKILL would leave it. Poll Get server until restarts grows."),
)


@bp.get("/openapi.json")
def openapi_json():
    return jsonify(document())


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    return {"$ref": REF.format(model=model.__name__)}


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema without the null an optional field allows (absent is its null)."""
    variants = [s for s in schema.get("anyOf", ()) if s.get("type") != "null"]
    if len(variants) == 1:
        rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        return {**variants[0], **rest}
    return {k: v for k, v in schema.items() if not (k == "default" and v is None)}


def _parameters(model: type[BaseModel], where: str, names: Any = None) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=REF)
    required = set(schema.get("required", ()))
    found = []
    for name, prop in schema["properties"].items():
        if names is not None and name not in names:
            continue
        prop = _not_null(prop)
        prop.pop("title", None)
        description = prop.pop("description", None)
        parameter = {"name": name, "in": where, "required": where == "path" or name in required, "schema": prop}
        if description:
            parameter["description"] = description
        if prop.get("type") == "array":
            parameter.update(style="form", explode=True)
        found.append(parameter)
    return found


def _operation(op: Operation) -> dict[str, Any]:
    names = re.findall(r"{([a-z_]+)}", op.path)  # "{transactional_id}:fence" names one too
    parameters = sorted(_parameters(m.PathParameters, "path", names), key=lambda p: names.index(p["name"]))
    parameters += _parameters(op.query, "query") if op.query else []
    parameters += _parameters(m.IdempotencyHeader, "header") if op.idempotent else []
    responses: dict[str, Any] = {str(ok): {"description": "OK", **(_json(_ref(op.answer)) if op.answer else {})}
                                 for ok in sorted({op.ok, op.also_ok or op.ok})}
    # any request whose body passes MAX_CONTENT_LENGTH is refused 413 before it is read
    codes = {400, 401, 403, 413, *op.errors, *((415,) if op.body else ()),
             *((422, 429) if op.idempotent else ())}
    for code in sorted(codes):
        responses[str(code)] = {"$ref": f"#/components/responses/{code}"}
    responses["default"] = {"$ref": "#/components/responses/default"}
    operation: dict[str, Any] = {"summary": op.summary, "tags": [op.tag], "operationId": _operation_id(op.summary),
                                 "parameters": parameters, "responses": responses}
    if op.description:
        operation["description"] = op.description
    if op.body:
        operation["requestBody"] = {"required": op.body_required, **_json(_ref(op.body))}
    return operation


def _operation_id(summary: str) -> str:
    return "".join(w.capitalize() if i else w.lower() for i, w in enumerate(summary.replace("-", " ").split()))


def _schemas() -> dict[str, Any]:
    """Every body and answer model's JSON Schema, the models they use beside them."""
    used = {model for op in OPERATIONS for model in (op.body, op.answer) if model is not None} | {m.Error}
    _, top = models_json_schema([(model, "validation") for model in sorted(used, key=lambda c: c.__name__)],
                                ref_template=REF)
    return top["$defs"]


def _monitoring(operation_id: str, summary: str, ok: dict[str, Any]) -> dict[str, Any]:
    return {"get": {"summary": summary, "tags": ["Monitoring"], "operationId": operation_id,
                    "responses": {"200": ok, "401": {"$ref": "#/components/responses/401"}}}}


@functools.cache
def document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    paths["/openapi.json"] = _monitoring("openapi", "This document",
                                         {"description": "OpenAPI 3.1", **_json({"type": "object"})})
    paths["/metrics"] = _monitoring("metrics", "Prometheus metrics", {
        "description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}})
    responses = {str(code): {"description": text, **_json(_ref(m.Error))} for code, text in ERROR_TEXT.items()}
    responses["default"] = {"description": "error", **_json(_ref(m.Error))}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Exactly HTTP API", "version": "1",
                 "description": "Confluent REST Proxy v3 names and shapes where they exist, plus transactions "
                                "over HTTP. Errors are the proxy's JSON {error_code, message}, with Kafka's "
                                "error_name and kafka_error_code beside them."},
        "security": [{}, {"bearerAuth": []}, {"basicAuth": []}],
        "paths": paths,
        "components": {"schemas": _schemas(), "responses": responses,
                       "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer",
                                                          "description": "needed when the broker has "
                                                                         "http.auth.token set"},
                                           "basicAuth": {"type": "http", "scheme": "basic",
                                                         "description": "a user and password; the token is "
                                                                        "the password of "
                                                                        "http.auth.token.principal"}}},
    }
