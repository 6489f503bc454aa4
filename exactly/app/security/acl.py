"""Kafka's ACL model: what an ACL names and how a filter matches it.

An :class:`AclBinding` binds a :class:`ResourcePattern` (resource type, name, and
LITERAL or PREFIXED; a LITERAL ``*`` names every resource of its type) to an
:class:`AccessControlEntry` (principal, host, operation, ALLOW or DENY). The enums
carry Kafka's wire codes (``org.apache.kafka.common.acl``/``resource``), which is
also how ``exactly/coordinator/cluster_metadata.py`` stores them. A filter (DescribeAcls, DeleteAcls)
matches as Kafka's ``AclBindingFilter.matches``: ANY matches every value, a null
name or principal or host matches every one, and pattern type MATCH matches every
pattern that would apply to the named resource (the literal name, ``*``, and every
prefix of it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from exactly.app.security.principal import KafkaPrincipal
from exactly.coordinator.cluster_metadata import AclRecord
from exactly.storage.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)

#: the literal resource name that matches every resource of its type
WILDCARD_RESOURCE = "*"
#: an ACL's host that matches every host
WILDCARD_HOST = "*"
#: the one cluster resource's name (Kafka's ``Resource.CLUSTER_NAME``)
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` and its wire codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Kafka's ``PatternType``: LITERAL and PREFIXED name ACLs; ANY and MATCH only filter."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """Kafka's ``AclOperation`` and its wire codes (also the bit of each operation in
    an "authorized operations" bit field)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    #: KIP-939: an InitProducerId with enable2Pc (or keepPreparedTxn) on the transactional id
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: what an ACL may not hold: UNKNOWN, and what only a filter holds (Kafka's ``isUnknown``
#: and ``ANY`` checks); by name, as the enums share codes
_NOT_IN_AN_ACL = frozenset({"UNKNOWN", "ANY", "MATCH"})


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        """Refuse what Kafka's ``AclControlManager.validateNewAcl`` refuses.

        :raise InvalidRequestError: a filter-only or unknown value, an empty name, a
            principal that is not ``Type:name``."""
        values = (self.pattern.resource_type, self.pattern.pattern_type, self.entry.operation,
                  self.entry.permission_type)
        for value in values:
            if value.name in _NOT_IN_AN_ACL:
                raise InvalidRequestError(f"an ACL cannot have {type(value).__name__} {value.name}")
        if not self.pattern.name:
            raise InvalidRequestError("an ACL's resource name must not be empty")
        KafkaPrincipal.parse(self.entry.principal)

    def to_record(self, acl_id: bytes) -> AclRecord:
        p, e = self.pattern, self.entry
        return AclRecord(acl_id, int(p.resource_type), p.name, int(p.pattern_type), e.principal, e.host,
                         int(e.operation), int(e.permission_type))

    @classmethod
    def from_record(cls, record: AclRecord) -> "AclBinding":
        """:raise ValueError: a code Kafka does not define."""
        return cls(ResourcePattern(ResourceType(record.resource_type), record.resource_name,
                                   PatternType(record.pattern_type)),
                   AccessControlEntry(record.principal, record.host, AclOperation(record.operation),
                                      AclPermissionType(record.permission_type)))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs DescribeAcls lists and DeleteAcls removes (None: any name, principal, host)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def validate(self) -> None:
        """:raise InvalidRequestError: an UNKNOWN value (Kafka's ``findIndefiniteField``)."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission_type):
            if value == 0:
                raise InvalidRequestError(f"a filter cannot have {type(value).__name__} UNKNOWN")

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``."""
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:  # MATCH from here on
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        """Kafka's ``AccessControlEntryFilter.matches``."""
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission_type in (AclPermissionType.ANY, entry.permission_type))


#: the operations that mean something on each resource type (Kafka 4.4's ``AclEntry.supportedOperations``,
#: KIP-848's group configs and KIP-939's TwoPhaseCommit included):
#: what an "authorized operations" answer (Metadata, DescribeGroups, DescribeCluster) is made of
_O = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                                   _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                                     _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE, _O.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({_O.DESCRIBE}),
    ResourceType.USER: frozenset({_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS}),
}

#: the error a request gets when the authorizer denies it, by the resource type denied
#: (Kafka's TOPIC/GROUP/CLUSTER/TRANSACTIONAL_ID_AUTHORIZATION_FAILED): every face's
DENIED: dict[ResourceType, type[KafkaError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailedError,
    ResourceType.GROUP: GroupAuthorizationFailedError,
    ResourceType.CLUSTER: ClusterAuthorizationFailedError,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailedError,
}
