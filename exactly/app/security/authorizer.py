"""Kafka's StandardAuthorizer: may this principal, from this host, do this operation
on this resource?

The rules (Kafka's ``StandardAuthorizerData.authorize``), in order:

1. a principal in ``super.users`` may do everything;
2. the ACLs that apply to the resource are the LITERAL ones naming it, the LITERAL
   ``*`` of its type, and the PREFIXED ones whose name starts it; of those, the ones
   whose principal is the asker's or ``User:*`` and whose host is the asker's or ``*``
   decide:
3. a DENY of the operation (or of ALL) denies -- deny wins over any allow;
4. an ALLOW of the operation (or of ALL) allows; an ALLOW of READ, WRITE, DELETE or
   ALTER also allows DESCRIBE, one of ALTER_CONFIGS also DESCRIBE_CONFIGS (a DENY
   implies nothing);
5. when no ACL at all applies to the resource (whoever it names),
   ``allow.everyone.if.no.acl.found`` decides (false by default); otherwise the
   answer is no.

ACLs are held by id (Kafka's ``addAcl(Uuid, StandardAcl)`` / ``removeAcl(Uuid)``):
the id is what ``exactly/coordinator/cluster_metadata.py`` keys the durable record by. Not thread-safe:
the engine's loop owns it.
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Iterator

from exactly.app.security.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from exactly.app.security.principal import WILDCARD, KafkaPrincipal

#: what ``authorizer.class.name`` accepts to switch the authorizer on (KRaft's and
#: ZooKeeper-mode Kafka's class names: both mean these rules here)
AUTHORIZER_CLASS_NAMES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
})

#: the ALLOWed operations that also allow DESCRIBE / DESCRIBE_CONFIGS
IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                              AclOperation.DELETE, AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

O = AclOperation
WILDCARD_PRINCIPAL = str(WILDCARD)


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (``User:alice;User:bob``)."""
    return frozenset(str(KafkaPrincipal.parse(p.strip())) for p in text.split(";") if p.strip())


def _grants(acl: AclBinding, operation: AclOperation) -> bool:
    """Whether ``acl`` speaks about ``operation`` (Kafka's ``findResult``): ALL always;
    an ALLOW through the implied operations too; a DENY only of the operation itself."""
    acl_operation = acl.entry.operation
    if acl_operation is AclOperation.ALL or acl_operation is operation:
        return True
    if acl.entry.permission_type is not AclPermissionType.ALLOW:
        return False
    if operation is AclOperation.DESCRIBE:
        return acl_operation in IMPLIES_DESCRIBE
    return operation is AclOperation.DESCRIBE_CONFIGS and acl_operation in IMPLIES_DESCRIBE_CONFIGS


class Reason(enum.Enum):
    """Why a :class:`Decision` went the way it did (the rules of the module docstring)."""

    NO_AUTHORIZER = "no authorizer is configured: everything is allowed"
    SUPER_USER = "a super user (super.users)"
    DENIED_BY_ACL = "an ACL denies it"
    ALLOWED_BY_ACL = "an ACL allows it"
    NO_ACL_ALLOWED = "no ACL names the resource, and allow.everyone.if.no.acl.found=true"
    NO_ACL_DENIED = "no ACL names the resource (allow.everyone.if.no.acl.found=false)"
    NOT_ALLOWED = "ACLs name the resource, but none allows this principal this operation"
    NEVER_SERVED = ("__cluster_metadata holds the users' credentials: no client reads it, whatever the ACLs "
                    "(Kafka's metadata log is no topic to clients)")


@dataclass(frozen=True, slots=True)
class Decision:
    """An authorization answer and what decided it: the one DENY, or every ALLOW that applies."""

    allowed: bool
    reason: Reason
    acls: tuple[AclBinding, ...] = ()


class StandardAuthorizer:
    """ACLs indexed by resource type, pattern type and name, and the rules above."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._by_id: dict[bytes, AclBinding] = {}
        self._ids: dict[AclBinding, bytes] = {}
        #: resource type -> pattern type -> name -> the ACLs of that pattern (enums are
        #: hashed once per lookup, names as plain strings)
        self._index: dict[ResourceType, dict[PatternType, dict[str, set[AclBinding]]]] = {}
        #: resource type -> the lengths of its PREFIXED names (the prefixes worth trying)
        self._prefix_lengths: dict[ResourceType, Counter[int]] = defaultdict(Counter)

    def __len__(self) -> int:
        return len(self._by_id)

    def add_acl(self, acl_id: bytes, binding: AclBinding) -> None:
        self._by_id[acl_id] = binding
        self._ids[binding] = acl_id
        p = binding.pattern
        by_name = self._index.setdefault(p.resource_type, {}).setdefault(p.pattern_type, {})
        by_name.setdefault(p.name, set()).add(binding)
        if p.pattern_type is PatternType.PREFIXED:
            self._prefix_lengths[p.resource_type][len(p.name)] += 1

    def remove_acl(self, acl_id: bytes) -> None:
        binding = self._by_id.pop(acl_id, None)
        if binding is None:
            return
        del self._ids[binding]
        p = binding.pattern
        by_name = self._index[p.resource_type][p.pattern_type]
        by_name[p.name].discard(binding)
        if not by_name[p.name]:
            del by_name[p.name]
        if p.pattern_type is PatternType.PREFIXED:
            lengths = self._prefix_lengths[p.resource_type]
            lengths[len(p.name)] -= 1
            if not lengths[len(p.name)]:
                del lengths[len(p.name)]

    def id_of(self, binding: AclBinding) -> bytes | None:
        return self._ids.get(binding)

    def acls(self, acl_filter: AclBindingFilter) -> list[tuple[bytes, AclBinding]]:
        """``(id, binding)`` of every ACL the filter matches."""
        return [(acl_id, b) for acl_id, b in self._by_id.items() if acl_filter.matches(b)]

    def _applicable(self, resource_type: ResourceType, name: str) -> Iterator[AclBinding]:
        """The ACLs whose pattern covers the resource, whoever they name."""
        by_pattern = self._index.get(resource_type)
        if not by_pattern:
            return
        literal = by_pattern.get(PatternType.LITERAL, {})
        yield from literal.get(name, ())
        if name != WILDCARD_RESOURCE:
            yield from literal.get(WILDCARD_RESOURCE, ())
        prefixed = by_pattern.get(PatternType.PREFIXED, {})
        for length in self._prefix_lengths[resource_type]:
            if length <= len(name):
                yield from prefixed.get(name[:length], ())

    def authorize(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """The rules of the module docstring."""
        asker = principal if isinstance(principal, str) else str(principal)
        if asker in self.super_users:
            return True
        found = allowed = False
        for acl in self._applicable(resource_type, name):
            found = True
            entry = acl.entry
            if entry.principal not in (asker, WILDCARD_PRINCIPAL) or entry.host not in (host, WILDCARD_HOST):
                continue
            if not _grants(acl, operation):
                continue
            if entry.permission_type is AclPermissionType.DENY:
                return False
            allowed = True
        return allowed or (not found and self.allow_everyone_if_no_acl_found)

    def explain(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> Decision:
        """:meth:`authorize`'s answer with what decided it (the console's "who may do
        what"); the same rules, kept off authorize's hot path."""
        asker = str(principal)
        if asker in self.super_users:
            return Decision(True, Reason.SUPER_USER)
        applicable = list(self._applicable(resource_type, name))
        deciding = [acl for acl in applicable if acl.entry.principal in (asker, WILDCARD_PRINCIPAL)
                    and acl.entry.host in (host, WILDCARD_HOST) and _grants(acl, operation)]
        denying = [acl for acl in deciding if acl.entry.permission_type is AclPermissionType.DENY]
        if denying:
            return Decision(False, Reason.DENIED_BY_ACL, (denying[0],))
        if deciding:
            return Decision(True, Reason.ALLOWED_BY_ACL, tuple(deciding))
        if applicable:
            return Decision(False, Reason.NOT_ALLOWED)
        if self.allow_everyone_if_no_acl_found:
            return Decision(True, Reason.NO_ACL_ALLOWED)
        return Decision(False, Reason.NO_ACL_DENIED)

    def authorize_by_resource_type(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May the principal do ``operation`` on at least one resource of the type? (Kafka's
        ``Authorizer.authorizeByResourceType``: an idempotent producer's "Write on any
        topic".) Yes when an ALLOW of the principal's names a literal or a prefix that no
        DENY of the principal's covers (a DENY of ``*`` covers everything); with no ACL
        of the type at all, ``allow.everyone.if.no.acl.found`` decides."""
        asker = principal if isinstance(principal, str) else str(principal)
        if asker in self.super_users:
            return True
        by_pattern = self._index.get(resource_type, {})
        mine = [acl for names in by_pattern.values() for acls in names.values() for acl in acls
                if acl.entry.principal in (asker, WILDCARD_PRINCIPAL) and acl.entry.host in (host, WILDCARD_HOST)
                and _grants(acl, operation)]
        if not any(by_pattern.values()):
            return self.allow_everyone_if_no_acl_found
        denied = [acl.pattern for acl in mine if acl.entry.permission_type is AclPermissionType.DENY]

        def covered(name: str, pattern_type: PatternType) -> bool:
            return any(d.name == WILDCARD_RESOURCE and d.pattern_type is PatternType.LITERAL
                       or (d.pattern_type is PatternType.PREFIXED and name.startswith(d.name))
                       or (d.pattern_type is pattern_type is PatternType.LITERAL and d.name == name)
                       for d in denied)

        return any(not covered(acl.pattern.name, acl.pattern.pattern_type) for acl in mine
                   if acl.entry.permission_type is AclPermissionType.ALLOW)

    def authorized_operations(self, principal: KafkaPrincipal | str, host: str, resource_type: ResourceType,
                              name: str) -> frozenset[AclOperation]:
        """The operations of the resource's type the principal may do on it (Metadata's
        and DescribeGroups' ``authorized_operations``; :func:`operations_bit_field`)."""
        return frozenset(op for op in SUPPORTED_OPERATIONS.get(resource_type, ())
                         if self.authorize(principal, host, op, resource_type, name))


def operations_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``code`` set for each operation."""
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field
