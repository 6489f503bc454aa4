"""The authorizer against a small reference model of Kafka's rules, the ACL model's
filters as Kafka's tests pin them, and the ``__cluster_metadata`` record codec."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactly.app.config import BrokerConfig
from exactly.app.security.acl import AccessControlEntry, AclBinding, AclBindingFilter, ResourcePattern
from exactly.app.security.acl import AclOperation as O
from exactly.app.security.acl import AclPermissionType as P
from exactly.app.security.acl import PatternType as T
from exactly.app.security.acl import ResourceType as R
from exactly.app.security.acl import SUPPORTED_OPERATIONS
from exactly.app.security.authorizer import (
    Reason,
    StandardAuthorizer,
    operations_bit_field,
    parse_super_users,
)
from exactly.app.security.principal import ANONYMOUS, KafkaPrincipal
from exactly.coordinator import cluster_metadata
from exactly.coordinator.schema import SchemaError
from exactly.storage.errors import InvalidConfigError, InvalidRequestError

pytestmark = pytest.mark.timeout(120)

NAMES = ("orders", "ord", "orders-eu", "o", "payments", "*")
PRINCIPALS = ("User:alice", "User:bob", "User:*")
HOSTS = ("*", "10.0.0.1", "10.0.0.2")
TYPES = (R.TOPIC, R.GROUP, R.TRANSACTIONAL_ID, R.CLUSTER)
OPERATIONS = tuple(op for op in O if op not in (O.UNKNOWN, O.ANY))

bindings = st.builds(
    lambda rt, name, pt, principal, host, op, perm: AclBinding(
        ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm)),
    st.sampled_from(TYPES), st.sampled_from(NAMES), st.sampled_from((T.LITERAL, T.PREFIXED)),
    st.sampled_from(PRINCIPALS), st.sampled_from(HOSTS), st.sampled_from(OPERATIONS),
    st.sampled_from((P.ALLOW, P.DENY)))
askers = st.sampled_from(("User:alice", "User:bob", "User:carol"))
requests = st.tuples(askers, st.sampled_from(HOSTS[1:]), st.sampled_from(OPERATIONS),
                     st.sampled_from(TYPES), st.sampled_from(NAMES[:-1]))


def reference(acls: list[AclBinding], super_users: frozenset[str], allow_if_none: bool,
              principal: str, host: str, op: O, rtype: R, name: str) -> bool:
    """Kafka's rules, written as plainly as they read in its documentation."""
    if principal in super_users:
        return True
    on_resource = [a for a in acls if a.pattern.resource_type == rtype and (
        (a.pattern.pattern_type == T.LITERAL and a.pattern.name in (name, "*"))
        or (a.pattern.pattern_type == T.PREFIXED and name.startswith(a.pattern.name)))]
    if not on_resource:
        return allow_if_none
    mine = [a for a in on_resource if a.entry.principal in (principal, "User:*") and a.entry.host in (host, "*")]

    def covers(a: AclBinding) -> bool:
        implied = (op == O.DESCRIBE and a.entry.operation in (O.READ, O.WRITE, O.DELETE, O.ALTER)) or (
            op == O.DESCRIBE_CONFIGS and a.entry.operation == O.ALTER_CONFIGS)
        return a.entry.operation in (O.ALL, op) or (a.entry.permission_type == P.ALLOW and implied)

    if any(a.entry.permission_type == P.DENY and covers(a) for a in mine):
        return False
    return any(a.entry.permission_type == P.ALLOW and covers(a) for a in mine)


def authorizer_of(acls: list[AclBinding], super_users: frozenset[str] = frozenset(),
                  allow_if_none: bool = False) -> StandardAuthorizer:
    authorizer = StandardAuthorizer(super_users, allow_if_none)
    for i, binding in enumerate(acls):
        authorizer.add_acl(i.to_bytes(16, "big"), binding)
    return authorizer


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=12, unique=True), st.frozensets(askers, max_size=1), st.booleans(), requests)
def test_the_authorizer_answers_as_the_reference_model(acls, super_users, allow_if_none, request) -> None:
    authorizer = authorizer_of(acls, super_users, allow_if_none)
    assert authorizer.authorize(*request) == reference(acls, super_users, allow_if_none, *request)


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=12, unique=True), st.frozensets(askers, max_size=1), st.booleans(), requests)
def test_explain_answers_as_authorize_and_names_what_decided(acls, super_users, allow_if_none, request) -> None:
    """The console's "who may do what" (explain) never disagrees with authorize, and the
    ACLs it names are ones that apply: the one DENY, or the ALLOWs."""
    authorizer = authorizer_of(acls, super_users, allow_if_none)
    decision = authorizer.explain(*request)
    assert decision.allowed == authorizer.authorize(*request)
    principal = request[0]
    assert (decision.reason is Reason.SUPER_USER) == (principal in super_users)
    expected_permission = P.ALLOW if decision.allowed else P.DENY
    assert all(b in acls and b.entry.permission_type is expected_permission and
               b.entry.principal in (principal, "User:*") for b in decision.acls)
    assert bool(decision.acls) == (decision.reason in (Reason.ALLOWED_BY_ACL, Reason.DENIED_BY_ACL))


@settings(max_examples=200, deadline=None)
@given(st.lists(bindings, max_size=10, unique=True), requests)
def test_a_matching_deny_wins_over_every_allow(acls, request) -> None:
    principal, host, op, rtype, name = request
    deny = AclBinding(ResourcePattern(rtype, name, T.LITERAL), AccessControlEntry(principal, host, op, P.DENY))
    assert not authorizer_of([*acls, deny]).authorize(*request)
    assert authorizer_of([*acls, deny], frozenset({principal})).authorize(*request)  # super users bypass


@settings(max_examples=200, deadline=None)
@given(st.lists(bindings, max_size=10, unique=True), requests)
def test_removing_what_was_added_restores_the_answer(acls, request) -> None:
    authorizer = authorizer_of(acls[:len(acls) // 2])
    before = authorizer.authorize(*request)
    for i, binding in enumerate(acls[len(acls) // 2:], start=100):
        authorizer.add_acl(i.to_bytes(16, "big"), binding)
    for i in range(100, 100 + len(acls) - len(acls) // 2):
        authorizer.remove_acl(i.to_bytes(16, "big"))
    assert authorizer.authorize(*request) == before
    assert len(authorizer) == len(acls) // 2


def acl(op: O, perm: P = P.ALLOW, name: str = "orders", pattern: T = T.LITERAL,
        principal: str = "User:alice", host: str = "*", rtype: R = R.TOPIC) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, perm))


@pytest.mark.parametrize(("granted", "asked", "allowed"), [
    (O.READ, O.DESCRIBE, True), (O.WRITE, O.DESCRIBE, True), (O.DELETE, O.DESCRIBE, True),
    (O.ALTER, O.DESCRIBE, True), (O.CREATE, O.DESCRIBE, False), (O.ALTER_CONFIGS, O.DESCRIBE_CONFIGS, True),
    (O.DESCRIBE, O.READ, False), (O.ALL, O.IDEMPOTENT_WRITE, True), (O.WRITE, O.READ, False),
])
def test_implied_operations(granted: O, asked: O, allowed: bool) -> None:
    assert authorizer_of([acl(granted)]).authorize("User:alice", "10.0.0.1", asked, R.TOPIC, "orders") is allowed


def test_a_deny_implies_nothing() -> None:
    authorizer = authorizer_of([acl(O.DESCRIBE), acl(O.READ, P.DENY)])
    assert authorizer.authorize("User:alice", "h", O.DESCRIBE, R.TOPIC, "orders")
    assert not authorizer.authorize("User:alice", "h", O.READ, R.TOPIC, "orders")


def test_prefixed_literal_and_wildcard_patterns() -> None:
    authorizer = authorizer_of([acl(O.WRITE, name="ord", pattern=T.PREFIXED), acl(O.READ, name="*"),
                                acl(O.READ, P.DENY, name="orders-secret")])
    ask = authorizer.authorize
    assert ask("User:alice", "h", O.WRITE, R.TOPIC, "orders")
    assert not ask("User:alice", "h", O.WRITE, R.TOPIC, "payments")
    assert ask("User:alice", "h", O.READ, R.TOPIC, "payments")
    assert not ask("User:alice", "h", O.READ, R.TOPIC, "orders-secret")
    assert not ask("User:alice", "h", O.READ, R.GROUP, "payments"), "patterns are per resource type"


def test_hosts_and_the_wildcard_principal() -> None:
    authorizer = authorizer_of([acl(O.READ, host="10.0.0.1"), acl(O.WRITE, principal="User:*")])
    assert authorizer.authorize("User:alice", "10.0.0.1", O.READ, R.TOPIC, "orders")
    assert not authorizer.authorize("User:alice", "10.0.0.2", O.READ, R.TOPIC, "orders")
    assert authorizer.authorize(ANONYMOUS, "10.0.0.2", O.WRITE, R.TOPIC, "orders")


def test_allow_everyone_if_no_acl_found_applies_only_to_resources_no_acl_names() -> None:
    authorizer = authorizer_of([acl(O.READ, principal="User:bob")], allow_if_none=True)
    assert authorizer.authorize("User:alice", "h", O.WRITE, R.TOPIC, "payments")
    assert not authorizer.authorize("User:alice", "h", O.READ, R.TOPIC, "orders")
    assert not authorizer_of([]).authorize("User:alice", "h", O.READ, R.TOPIC, "orders"), "false by default"


def test_authorized_operations_and_their_bit_field() -> None:
    authorizer = authorizer_of([acl(O.READ, rtype=R.GROUP, name="g")])
    ops = authorizer.authorized_operations("User:alice", "h", R.GROUP, "g")
    assert ops == {O.READ, O.DESCRIBE}
    assert operations_bit_field(ops) == (1 << 3) | (1 << 8)
    assert authorizer_of([acl(O.ALL, rtype=R.GROUP, name="g")]).authorized_operations(
        "User:alice", "h", R.GROUP, "g") == SUPPORTED_OPERATIONS[R.GROUP]


# -- filters (Kafka's ResourcePatternFilterTest / AclBindingFilterTest) ----------------------

@pytest.mark.parametrize(("flt", "pattern", "matches"), [
    (AclBindingFilter(R.TOPIC, "orders", T.LITERAL), ResourcePattern(R.TOPIC, "orders", T.LITERAL), True),
    (AclBindingFilter(R.TOPIC, "orders", T.LITERAL), ResourcePattern(R.TOPIC, "orders", T.PREFIXED), False),
    (AclBindingFilter(R.TOPIC, "orders", T.ANY), ResourcePattern(R.TOPIC, "orders", T.PREFIXED), True),
    (AclBindingFilter(R.TOPIC, "orders", T.ANY), ResourcePattern(R.TOPIC, "*", T.LITERAL), False),
    (AclBindingFilter(R.TOPIC, "orders", T.MATCH), ResourcePattern(R.TOPIC, "*", T.LITERAL), True),
    (AclBindingFilter(R.TOPIC, "orders", T.MATCH), ResourcePattern(R.TOPIC, "ord", T.PREFIXED), True),
    (AclBindingFilter(R.TOPIC, "orders", T.MATCH), ResourcePattern(R.TOPIC, "orders-eu", T.PREFIXED), False),
    (AclBindingFilter(R.TOPIC, "orders", T.MATCH), ResourcePattern(R.TOPIC, "order", T.LITERAL), False),
    (AclBindingFilter(R.ANY, None, T.ANY), ResourcePattern(R.GROUP, "g", T.PREFIXED), True),
    (AclBindingFilter(R.GROUP, None, T.ANY), ResourcePattern(R.TOPIC, "g", T.LITERAL), False),
])
def test_pattern_filters_match_as_kafkas(flt: AclBindingFilter, pattern: ResourcePattern, matches: bool) -> None:
    assert flt.matches_pattern(pattern) is matches


def test_entry_filters_match_as_kafkas() -> None:
    entry = AccessControlEntry("User:alice", "*", O.READ, P.ALLOW)
    assert AclBindingFilter().matches_entry(entry)
    assert AclBindingFilter(principal="User:alice", host="*", operation=O.READ,
                            permission_type=P.ALLOW).matches_entry(entry)
    assert not AclBindingFilter(principal="User:*").matches_entry(entry), "a filter matches principals literally"
    assert not AclBindingFilter(operation=O.ALL).matches_entry(entry)
    with pytest.raises(InvalidRequestError):
        AclBindingFilter(operation=O.UNKNOWN).validate()


@pytest.mark.parametrize("binding", [
    acl(O.ANY), acl(O.READ, P.ANY), acl(O.READ, pattern=T.MATCH), acl(O.READ, pattern=T.ANY),
    acl(O.READ, rtype=R.ANY), acl(O.READ, name=""), acl(O.READ, principal="alice"), acl(O.UNKNOWN),
])
def test_what_an_acl_cannot_be(binding: AclBinding) -> None:
    with pytest.raises(InvalidRequestError):
        binding.validate()


def test_principals_and_super_users_parse_as_kafkas() -> None:
    assert KafkaPrincipal.parse("User:CN=a:b") == KafkaPrincipal("User", "CN=a:b")
    assert parse_super_users(" User:alice ; User:bob;") == {"User:alice", "User:bob"}
    with pytest.raises(InvalidConfigError):
        BrokerConfig.from_kafka({"authorizer.class.name": "org.example.Mine"})
    with pytest.raises(InvalidConfigError):
        BrokerConfig.from_kafka({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                 "super.users": "alice"})
    assert BrokerConfig.from_kafka({}).authorizer() is None


# -- __cluster_metadata records ----------------------------------------------------------------

records = st.builds(cluster_metadata.AclRecord, st.binary(min_size=16, max_size=16), st.integers(0, 127), st.text(),
                    st.integers(0, 127), st.text(), st.text(), st.integers(0, 127), st.integers(0, 127))


@given(records)
def test_acl_records_round_trip(record: cluster_metadata.AclRecord) -> None:
    key, value = cluster_metadata.encode_key(record.id), cluster_metadata.encode_value(record)
    assert cluster_metadata.decode_key(key) == record.id
    assert cluster_metadata.decode_value(value) == record
    assert cluster_metadata.replay([(key, value)]).acls == {record.id: record}
    assert cluster_metadata.replay([(key, value), (key, None)]).acls == {}


def test_an_acl_record_is_kafkas_access_control_entry_record() -> None:
    record = cluster_metadata.AclRecord(bytes(range(16)), 2, "orders", 4, "User:alice", "*", 4, 3)
    value = cluster_metadata.encode_value(record)
    # frame version 0, api key 6, version 0; then the uuid; compact strings are length + 1
    assert value[:3] == bytes([0, 6, 0]) and value[3:19] == bytes(range(16))
    assert value[19:27] == b"\x02\x07orders" and value.endswith(b"\x04\x03\x00")


@pytest.mark.parametrize("mangle", [
    lambda v: v[:-1], lambda v: v + b"\x00", lambda v: b"\x01" + v[1:], lambda v: v[:1] + b"\x07" + v[2:],
])
def test_a_record_this_version_cannot_read_is_refused(mangle) -> None:
    value = cluster_metadata.encode_value(cluster_metadata.AclRecord(bytes(16), 2, "t", 3, "User:a", "*", 3, 3))
    with pytest.raises(SchemaError):
        cluster_metadata.decode_value(mangle(value))
    with pytest.raises(SchemaError):
        cluster_metadata.decode_key(b"\x00\x01" + cluster_metadata.encode_key(bytes(16))[2:])


def test_the_documented_dump_is_what_the_code_writes() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text()
    section = doc[doc.index("### 14a."):doc.index("## 15.")]
    key, value = re.search(r"key   ([0-9a-f ]+)\nvalue ([0-9a-f \n]+)```", section).groups()
    record = cluster_metadata.AclRecord(bytes.fromhex("5f3c9a0e1b2d4c6e8f90a1b2c3d4e5f6"), 2, "orders", 4, "User:alice", "*",
                               4, 3)
    assert cluster_metadata.encode_key(record.id) == bytes.fromhex(key)
    assert cluster_metadata.encode_value(record) == bytes.fromhex(value)
