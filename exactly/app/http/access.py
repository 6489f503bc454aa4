"""Each HTTP request authorized as its principal, as the same request on the Kafka port.

:data:`NEEDS` maps every endpoint of the app (the API's and the console's) to what it
needs, with Kafka's resource types and operations ("Operations and Resources on
Protocols"): reading records is Read on the Topic (Fetch), producing Write on it
(Produce), a transaction's calls Write on its TransactionalId (and on each topic its
records go to), configs DescribeConfigs/AlterConfigs, ACLs Describe/Alter on the
Cluster. An operator's abort -- of a transaction or of a partition's hanging
producer -- is ClusterAction on the Cluster: it writes transaction markers, which is
what Kafka's ``kafka-transactions.sh abort`` (WriteTxnMarkers) needs. The console's
broker-wide pages (overview, lists, clients) show every topic, transaction and group
at once, so they need Describe on the Cluster (as ListGroups does to list every group).

A need is checked where its resource's name is known (:class:`Where`): a path
argument before the view runs (:func:`init_app`), a name in the body by the view
(:func:`require`), or the names of a list, which the view filters (:func:`visible`),
as Kafka filters Metadata's topics and ListTransactions. Every answer comes from the
engine's ``authorize`` (which logs and counts denials), so with no authorizer nothing
changes; a denial is the Kafka error of the resource type -- 403, its name and code
in the JSON body (``exactly/app/http/errors.py``). tests/test_http_acls.py checks that every
endpoint is in the table, so a new one cannot skip authorization.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable

from flask import Flask, request

from exactly.app.http import current_engine
from exactly.app.http.auth import request_principal
from exactly.app.security.acl import CLUSTER_NAME, DENIED, AclOperation, ResourceType

O = AclOperation
TOPIC, GROUP, TXN, CLUSTER = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID,
                              ResourceType.CLUSTER)

#: the Kafka error a denial on each resource type is
class Where(enum.Enum):
    """Where a need's resource name comes from, and so who checks it."""

    CLUSTER = "the cluster, before the view runs"
    PATH = "a path argument, before the view runs"
    BODY = "the request body: the view checks each name (require)"
    LIST = "the answer's items: the view lists only those allowed (visible)"


@dataclass(frozen=True, slots=True)
class Need:
    resource_type: ResourceType
    operation: AclOperation
    where: Where
    #: the path argument naming the resource (Where.PATH)
    arg: str = ""


def path(resource_type: ResourceType, operation: AclOperation, arg: str) -> Need:
    return Need(resource_type, operation, Where.PATH, arg)


def cluster(operation: AclOperation) -> Need:
    return Need(CLUSTER, operation, Where.CLUSTER)


def body(resource_type: ResourceType, operation: AclOperation) -> Need:
    return Need(resource_type, operation, Where.BODY)


def listed(resource_type: ResourceType, operation: AclOperation) -> Need:
    return Need(resource_type, operation, Where.LIST)


NONE: tuple[Need, ...] = ()
DESCRIBE_TOPIC = (path(TOPIC, O.DESCRIBE, "topic_name"),)
DESCRIBE_GROUP = (path(GROUP, O.DESCRIBE, "group_id"),)
WRITE_TXN = (path(TXN, O.WRITE, "transactional_id"),)

#: endpoint -> what it needs (a console page's live fragment needs what its page does)
NEEDS: dict[str, tuple[Need, ...]] = {
    # the cluster and its broker: what Metadata answers anyone
    "api.list_clusters": NONE, "api.get_cluster": NONE, "api.list_brokers": NONE, "api.get_broker": NONE,
    "api.list_broker_replicas": (listed(TOPIC, O.DESCRIBE),),
    "api.list_topics": (listed(TOPIC, O.DESCRIBE),),
    "api.create_topic": (body(TOPIC, O.CREATE),),  # or Create on the Cluster, as CreateTopics
    "api.get_topic": DESCRIBE_TOPIC,
    "api.update_partition_count": (path(TOPIC, O.ALTER, "topic_name"),),
    "api.delete_topic": (path(TOPIC, O.DELETE, "topic_name"),),
    "api.list_partitions": DESCRIBE_TOPIC, "api.get_partition": DESCRIBE_TOPIC,
    "api.list_replicas": DESCRIBE_TOPIC, "api.get_replica": DESCRIBE_TOPIC,
    "api.list_producers": (path(TOPIC, O.READ, "topic_name"),),  # DescribeProducers
    "api.get_producer": (path(TOPIC, O.READ, "topic_name"),),
    "api.records.produce": (path(TOPIC, O.WRITE, "topic_name"),),
    "api.records.produce_batch": (path(TOPIC, O.WRITE, "topic_name"),),
    # InitProducerId without a transactional id: IdempotentWrite on the Cluster, or Write on any topic
    "api.records.init_producer_id": (body(CLUSTER, O.IDEMPOTENT_WRITE),),
    "api.records.read": (path(TOPIC, O.READ, "topic_name"),),
    "api.records.list_offsets": DESCRIBE_TOPIC, "api.records.partition_offsets": DESCRIBE_TOPIC,
    "api.transactions.init": WRITE_TXN,
    "api.transactions.produce": (*WRITE_TXN, body(TOPIC, O.WRITE)),
    "api.transactions.send_offsets": (*WRITE_TXN, body(GROUP, O.READ), body(TOPIC, O.READ)),
    "api.transactions.commit": WRITE_TXN, "api.transactions.abort": WRITE_TXN,
    "api.transactions.list_transactions": (listed(TXN, O.DESCRIBE),),
    "api.transactions.describe": (path(TXN, O.DESCRIBE, "transactional_id"),),
    "api.transactions.admin_abort": (cluster(O.CLUSTER_ACTION),),
    "api.transactions.abort_hanging": (cluster(O.CLUSTER_ACTION),),
    "api.groups.list_groups": (listed(GROUP, O.DESCRIBE),),  # all of them with Describe on the Cluster
    "api.groups.describe_group": DESCRIBE_GROUP, "api.groups.list_consumers": DESCRIBE_GROUP,
    "api.groups.get_consumer": DESCRIBE_GROUP, "api.groups.list_assignments": DESCRIBE_GROUP,
    "api.groups.get_assignment": DESCRIBE_GROUP, "api.groups.list_lags": DESCRIBE_GROUP,
    "api.groups.get_lag": DESCRIBE_GROUP, "api.groups.lag_summary": DESCRIBE_GROUP,
    "api.faults.list_faults": (cluster(O.DESCRIBE),), "api.faults.get_fault": (cluster(O.DESCRIBE),),
    "api.faults.add_fault": (cluster(O.ALTER),), "api.faults.add_fault_event": (cluster(O.ALTER),),
    "api.faults.remove_fault": (cluster(O.ALTER),), "api.faults.clear_faults": (cluster(O.ALTER),),
    # events on demand: fencing is what a new instance's InitProducerId does (Write on the id);
    # timing out and restarting are the broker's own acts, an operator's (as the admin abort)
    "api.events.fence": WRITE_TXN, "api.events.timeout": (cluster(O.CLUSTER_ACTION),),
    "api.events.get_server": (cluster(O.DESCRIBE),), "api.events.restart": (cluster(O.CLUSTER_ACTION),),
    "api.audit.audit": DESCRIBE_GROUP,  # the group's committed offsets, as OffsetFetch reads them
    "api.configs.list_configs": (path(TOPIC, O.DESCRIBE_CONFIGS, "topic_name"),),
    "api.configs.get_config": (path(TOPIC, O.DESCRIBE_CONFIGS, "topic_name"),),
    "api.configs.list_all_topic_configs": (listed(TOPIC, O.DESCRIBE_CONFIGS),),
    "api.configs.update_config": (path(TOPIC, O.ALTER_CONFIGS, "topic_name"),),
    "api.configs.reset_config": (path(TOPIC, O.ALTER_CONFIGS, "topic_name"),),
    "api.configs.alter_configs": (path(TOPIC, O.ALTER_CONFIGS, "topic_name"),),
    "api.configs.list_all_broker_configs": (cluster(O.DESCRIBE_CONFIGS),),
    "api.configs.list_broker_configs": (cluster(O.DESCRIBE_CONFIGS),),
    "api.configs.get_broker_config": (cluster(O.DESCRIBE_CONFIGS),),
    "api.configs.change_broker_configs": (cluster(O.ALTER_CONFIGS),),  # refused: read-only here, after this
    "api.configs.list_cluster_configs": (cluster(O.DESCRIBE_CONFIGS),),
    "api.configs.get_cluster_config": (cluster(O.DESCRIBE_CONFIGS),),
    "api.configs.change_cluster_configs": (cluster(O.ALTER_CONFIGS),),
    # reassignments (always none on one node): what Describe on a topic shows
    "api.list_all_reassignments": (listed(TOPIC, O.DESCRIBE),),
    "api.list_topic_reassignments": (path(TOPIC, O.DESCRIBE, "topic_name"),),
    "api.get_reassignment": (path(TOPIC, O.DESCRIBE, "topic_name"),),
    "api.acls.search_acls": (cluster(O.DESCRIBE),),
    "api.acls.create_acl": (cluster(O.ALTER),),
    "api.acls.delete_acls": (cluster(O.ALTER),),
    "api.acls.create_acls_batch": (cluster(O.ALTER),),
    "api.openapi.openapi_json": NONE, "metrics.metrics": NONE, "static": NONE,
    # the console
    "ui.login": NONE, "ui.logout": NONE, "ui.unknown_page": NONE, "ui.status": NONE, "ui.storage_banner": NONE,
    "ui.overview": (cluster(O.DESCRIBE),), "ui.transactions": (cluster(O.DESCRIBE),),
    "ui.groups": (cluster(O.DESCRIBE),), "ui.clients": (cluster(O.DESCRIBE),),
    "ui.transaction": (path(TXN, O.DESCRIBE, "txn_id"),),
    "ui.topic": (path(TOPIC, O.DESCRIBE, "topic"),),
    "ui.partition": (path(TOPIC, O.READ, "topic"),),  # it shows the partition's last records
    "ui.records_browser": (path(TOPIC, O.READ, "topic"),), "ui.record_detail": (path(TOPIC, O.READ, "topic"),),
    "ui.record_tail": (path(TOPIC, O.READ, "topic"),),
    "ui.group": (path(GROUP, O.DESCRIBE, "group_id"),),
    "ui.fence_transaction": (path(TXN, O.WRITE, "txn_id"),),
    "ui.time_out_transaction": (cluster(O.CLUSTER_ACTION),),
    "ui.topics": (cluster(O.DESCRIBE),), "ui.history": (cluster(O.DESCRIBE),),  # broker-wide lists
    "ui.audit": (cluster(O.DESCRIBE),),  # its pickers list every group and topic
    # faults change what every client gets: Alter on the Cluster, as broker configs; seeing them, Describe
    "ui.faults": (cluster(O.DESCRIBE),), "ui.add_fault": (cluster(O.ALTER),),
    "ui.remove_fault": (cluster(O.ALTER),), "ui.clear_faults": (cluster(O.ALTER),),
    "ui.abort_transaction": (cluster(O.CLUSTER_ACTION),), "ui.abort_hanging": (cluster(O.CLUSTER_ACTION),),
    "ui.create_topic": (cluster(O.CREATE),),
    "ui.delete_topic": (path(TOPIC, O.DELETE, "topic"),),
    "ui.produce_record": (path(TOPIC, O.WRITE, "topic"),),
    "ui.reset_group_offsets": (path(GROUP, O.READ, "group_id"),),  # OffsetCommit
    "ui.delete_group_offsets": (path(GROUP, O.DELETE, "group_id"),),  # OffsetDelete
    "ui.delete_group": (path(GROUP, O.DELETE, "group_id"),),
    "ui.acls": (cluster(O.DESCRIBE),), "ui.add_acl": (cluster(O.ALTER),), "ui.remove_acl": (cluster(O.ALTER),),
    "ui.users": (cluster(O.DESCRIBE),),  # DescribeUserScramCredentials
    "ui.access": (cluster(O.DESCRIBE),),  # it shows the ACLs behind each answer
}

FRAGMENT_SUFFIX = "_fragment"


def needs_of(endpoint: str) -> tuple[Need, ...]:
    """What ``endpoint`` needs. :raise KeyError: an endpoint the table does not know."""
    return NEEDS[endpoint.removesuffix(FRAGMENT_SUFFIX)]


def _allowed(engine, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
             names: list[str], audit: bool) -> list[str]:
    """On the loop: the names ``principal`` may do ``operation`` on."""
    return [name for name in names
            if engine.access.authorize(principal, host, operation, resource_type, name, surface="http", audit=audit)]


def visible(resource_type: ResourceType, operation: AclOperation, names: Iterable[str],
            audit: bool = False) -> set[str]:
    """Which of ``names`` this request's principal may ``operation``: a list's filter,
    not logged or counted as a denial (as Kafka's filtered listings), unless ``audit``."""
    engine = current_engine()
    if not engine.access.authorizer_enabled:  # everything is allowed: no trip to the loop
        return set(names)
    return set(engine.call(_allowed, engine, str(request_principal()), request.remote_addr or "",
                           operation, resource_type, list(names), audit))


def allows(resource_type: ResourceType, operation: AclOperation, name: str = CLUSTER_NAME) -> bool:
    return bool(visible(resource_type, operation, (name,)))


def require(resource_type: ResourceType, operation: AclOperation, names: Iterable[str] = (CLUSTER_NAME,)) -> None:
    """:raise KafkaError: the resource type's authorization error, naming the first
    of ``names`` this request's principal may not ``operation``."""
    wanted = list(dict.fromkeys(names))
    refused = [name for name in wanted if name not in visible(resource_type, operation, wanted, audit=True)]
    if refused:
        raise DENIED[resource_type](f"{request_principal()} may not {operation.name} "
                                    f"{resource_type.name} {refused[0]!r}")


def init_app(app: Flask) -> None:
    @app.before_request
    def _authorize() -> None:
        """After authentication: the needs a path names (an unknown URL has no endpoint: 404)."""
        if request.endpoint is None:
            return
        args = request.view_args or {}
        for need in needs_of(request.endpoint):
            if need.where is Where.CLUSTER:
                require(CLUSTER, need.operation)
            elif need.where is Where.PATH:
                require(need.resource_type, need.operation, (str(args[need.arg]),))
