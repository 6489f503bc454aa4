"""Who may call what: Kafka's table "Operations and Resources on Protocols", declared
once, and the checks every handler makes through it.

:data:`TABLE` gives, per API key, the (resource type, operation) pairs its handler
checks; a handler asks :func:`allowed` or :func:`check` with its API key, and a pair
the table does not declare for that API is a programming error, so the table is what
runs. ``tests/test_authorization_table.py`` checks that every served API has an entry
and is denied to a principal without ACLs.

Kafka's rules kept here:

* a principal that may not Describe a topic gets TOPIC_AUTHORIZATION_FAILED for it
  whether it exists or not (no existence leak), never UNKNOWN_TOPIC_OR_PARTITION;
* the denial's error is the resource type's (:data:`DENIED`);
* ``__cluster_metadata`` (ACLs, credentials) is refused to every principal on every
  API, whatever the ACLs, super users and ``allow.everyone.if.no.acl.found`` say, and
  with no authorizer too (``Access.authorize``: it holds every user's SCRAM keys, and
  Kafka's metadata log is no topic to clients); nobody produces to it (the engine
  refuses every internal topic, as control batches).

With no authorizer configured every other check passes (``Access.authorize``).
"""

from __future__ import annotations

from dataclasses import dataclass

from exactly.app.kafka.api import ApiKey, RequestContext
from exactly.app.security.acl import CLUSTER_NAME, DENIED, AclOperation, ResourceType
from exactly.app.security.authorizer import operations_bit_field
from exactly.storage.errors import KafkaError


@dataclass(frozen=True)
class Rule:
    resource_type: ResourceType
    operation: AclOperation


T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
O = AclOperation

#: API key -> what its handler authorizes. Where an API names two rules of one resource
#: type, the first is the usual one and the handler names the operation of the other.
#: Keyed by code so that APIs served elsewhere (SASL, branch ``sasl``) are declared too.
TABLE: dict[int, tuple[Rule, ...]] = {
    # transactional batches also Write on the transactional id; idempotent ones nothing more
    # than the topic's Write since Kafka 2.8 (KAFKA-10619: IdempotentWrite moved to InitProducerId)
    ApiKey.PRODUCE: (Rule(T, O.WRITE), Rule(X, O.WRITE)),
    ApiKey.FETCH: (Rule(T, O.READ),),
    ApiKey.LIST_OFFSETS: (Rule(T, O.DESCRIBE),),
    # topics listed or named: Describe; auto-creation: Create on the cluster or the topic
    ApiKey.METADATA: (Rule(T, O.DESCRIBE), Rule(C, O.CREATE), Rule(T, O.CREATE)),
    ApiKey.OFFSET_COMMIT: (Rule(G, O.READ), Rule(T, O.READ)),
    ApiKey.OFFSET_FETCH: (Rule(G, O.DESCRIBE), Rule(T, O.DESCRIBE)),
    # a share group's key (KIP-932, v6): ClusterAction, the share coordinator's callers are brokers
    ApiKey.FIND_COORDINATOR: (Rule(G, O.DESCRIBE), Rule(X, O.DESCRIBE), Rule(C, O.CLUSTER_ACTION)),
    ApiKey.JOIN_GROUP: (Rule(G, O.READ),),
    ApiKey.HEARTBEAT: (Rule(G, O.READ),),
    ApiKey.LEAVE_GROUP: (Rule(G, O.READ),),
    ApiKey.SYNC_GROUP: (Rule(G, O.READ),),
    ApiKey.DESCRIBE_GROUPS: (Rule(G, O.DESCRIBE),),
    # Describe on the cluster lists every group, else the groups the principal may Describe
    ApiKey.LIST_GROUPS: (Rule(C, O.DESCRIBE), Rule(G, O.DESCRIBE)),
    17: (),  # SaslHandshake
    ApiKey.API_VERSIONS: (),
    ApiKey.CREATE_TOPICS: (Rule(C, O.CREATE), Rule(T, O.CREATE)),
    ApiKey.DELETE_TOPICS: (Rule(T, O.DELETE),),
    ApiKey.DELETE_RECORDS: (Rule(T, O.DELETE),),
    # a transactional id: Write on it, and for enable2Pc (KIP-939) TwoPhaseCommit on it too;
    # none (idempotent): IdempotentWrite on the cluster or Write on any topic (KIP-679)
    ApiKey.INIT_PRODUCER_ID: (Rule(X, O.WRITE), Rule(X, O.TWO_PHASE_COMMIT), Rule(C, O.IDEMPOTENT_WRITE),
                              Rule(T, O.WRITE)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (Rule(T, O.DESCRIBE),),
    # v4+ is the brokers' form (KIP-890): ClusterAction instead
    ApiKey.ADD_PARTITIONS_TO_TXN: (Rule(X, O.WRITE), Rule(T, O.WRITE), Rule(C, O.CLUSTER_ACTION)),
    ApiKey.ADD_OFFSETS_TO_TXN: (Rule(X, O.WRITE), Rule(G, O.READ)),
    ApiKey.END_TXN: (Rule(X, O.WRITE),),
    ApiKey.WRITE_TXN_MARKERS: (Rule(C, O.CLUSTER_ACTION),),
    ApiKey.TXN_OFFSET_COMMIT: (Rule(X, O.WRITE), Rule(G, O.READ), Rule(T, O.READ)),
    ApiKey.DESCRIBE_ACLS: (Rule(C, O.DESCRIBE),),
    ApiKey.CREATE_ACLS: (Rule(C, O.ALTER),),
    ApiKey.DELETE_ACLS: (Rule(C, O.ALTER),),
    ApiKey.DESCRIBE_CONFIGS: (Rule(T, O.DESCRIBE_CONFIGS), Rule(C, O.DESCRIBE_CONFIGS)),
    ApiKey.ALTER_CONFIGS: (Rule(T, O.ALTER_CONFIGS), Rule(C, O.ALTER_CONFIGS)),
    ApiKey.DESCRIBE_LOG_DIRS: (Rule(C, O.DESCRIBE),),
    36: (),  # SaslAuthenticate
    ApiKey.CREATE_PARTITIONS: (Rule(T, O.ALTER),),
    ApiKey.DELETE_GROUPS: (Rule(G, O.DELETE),),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (Rule(T, O.ALTER_CONFIGS), Rule(C, O.ALTER_CONFIGS)),
    ApiKey.OFFSET_DELETE: (Rule(G, O.DELETE), Rule(T, O.READ)),
    50: (Rule(C, O.DESCRIBE),),  # DescribeUserScramCredentials
    51: (Rule(C, O.ALTER),),  # AlterUserScramCredentials
    ApiKey.UPDATE_FEATURES: (Rule(C, O.ALTER),),
    ApiKey.DESCRIBE_CLUSTER: (Rule(C, O.DESCRIBE),),
    ApiKey.DESCRIBE_PRODUCERS: (Rule(T, O.READ),),
    # each transaction's partitions: only those on topics the principal may Describe (filtered)
    ApiKey.DESCRIBE_TRANSACTIONS: (Rule(X, O.DESCRIBE), Rule(T, O.DESCRIBE)),
    # filtered: the transactional ids the principal may Describe
    ApiKey.LIST_TRANSACTIONS: (Rule(X, O.DESCRIBE),),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (Rule(G, O.READ), Rule(T, O.DESCRIBE)),
    # a group assigned a topic the principal may not Describe: TOPIC_AUTHORIZATION_FAILED (KAFKA-18813)
    ApiKey.CONSUMER_GROUP_DESCRIBE: (Rule(G, O.DESCRIBE), Rule(T, O.DESCRIBE)),
    ApiKey.LIST_CONFIG_RESOURCES: (Rule(C, O.DESCRIBE_CONFIGS),),
    # topics listed or named: Describe (KIP-966's paginated Metadata)
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (Rule(T, O.DESCRIBE),),
}


#: an "authorized operations" field nobody asked for (Kafka's ``Integer.MIN_VALUE``)
NOT_REQUESTED = -2**31


def rule(api: int, resource_type: ResourceType, operation: AclOperation | None = None) -> Rule:
    """The rule of ``api`` on ``resource_type`` (the first, or the one of ``operation``).

    :raise LookupError: the table does not declare it -- a handler checking what its
        row does not say."""
    for r in TABLE[api]:
        if r.resource_type is resource_type and operation in (None, r.operation):
            return r
    raise LookupError(f"API {api} declares no {resource_type.name} {operation} rule in TABLE")


def allowed(ctx: RequestContext, api: int, resource_type: ResourceType, name: str,
            operation: AclOperation | None = None, audit: bool = True) -> bool:
    """May the request's principal do what ``api`` needs on the resource? ``audit``
    false for a check that only filters a listing (not logged, not counted)."""
    r = rule(api, resource_type, operation)
    return ctx.engine.access.authorize(ctx.principal, ctx.connection.host, r.operation, resource_type, name,
                                       audit=audit)


def allowed_to_create(ctx: RequestContext, api: int, topic: str) -> bool:
    """Create on the cluster, or on the topic (CreateTopics, Metadata's auto-creation)."""
    return (allowed(ctx, api, C, CLUSTER_NAME, O.CREATE, audit=False)
            or allowed(ctx, api, T, topic, O.CREATE))


def allowed_on_any(ctx: RequestContext, api: int, resource_type: ResourceType, operation: AclOperation) -> bool:
    """May the principal do ``operation`` on at least one resource of the type (an
    idempotent producer's "Write on any topic")? Not audited: :func:`refused` is."""
    rule(api, resource_type, operation)
    return ctx.engine.access.authorize_any(ctx.principal, ctx.connection.host, operation, resource_type)


def refused(ctx: RequestContext, api: int, resource_type: ResourceType, name: str,
            operation: AclOperation | None = None) -> KafkaError:
    """A denial decided from unaudited checks, counted and logged now; its error."""
    r = rule(api, resource_type, operation)
    ctx.engine.access.authorization_denied(ctx.principal, ctx.connection.host, r.operation, resource_type, name)
    return denial(resource_type, name)


def denial(resource_type: ResourceType, name: str) -> KafkaError:
    """The error of a denied request on the resource."""
    return DENIED[resource_type](f"not authorized: {resource_type.name} {name!r}")


def check(ctx: RequestContext, api: int, resource_type: ResourceType, name: str,
          operation: AclOperation | None = None) -> None:
    """:raise KafkaError: the resource type's authorization error, when not :func:`allowed`."""
    if not allowed(ctx, api, resource_type, name, operation):
        raise denial(resource_type, name)


def check_cluster(ctx: RequestContext, api: int, operation: AclOperation | None = None) -> None:
    check(ctx, api, C, CLUSTER_NAME, operation)


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str, asked: bool) -> int:
    """An "authorized operations" bit field (Metadata, DescribeGroups, DescribeCluster),
    :data:`NOT_REQUESTED` unless ``asked``."""
    if not asked:
        return NOT_REQUESTED
    return operations_bit_field(ctx.engine.access.authorized_operations(ctx.principal, ctx.connection.host,
                                                                 resource_type, name))
