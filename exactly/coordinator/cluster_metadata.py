"""Records of ``__cluster_metadata``: the ACLs, the users' SCRAM credentials, the
principal each producer id was handed to and the finalized feature levels, durable
across restarts (docs/formats.md §14a, §14b, §14c, §14d).

Kafka (KRaft) keeps both in its metadata log ``__cluster_metadata``; this broker keeps
the same records, in Kafka's metadata-record frame, on a compacted internal topic of
that name (one partition). Each key starts with its record's type, so compaction keeps
the last record per ACL and per (user, mechanism), and a tombstone removes one -- the
compacted-topic form of Kafka's ``RemoveAccessControlEntryRecord`` and
``RemoveUserScramCredentialRecord``::

    Key   v0 => Version(int16: 0) RecordType(int16: 6, AccessControlEntryRecord's api key)
                Id(uuid)
    Key   v0 => Version(int16: 0) RecordType(int16: 11, UserScramCredentialRecord's api key)
                Name(string) Mechanism(int8)
    Key   v0 => Version(int16: 0) RecordType(int16: 12, FeatureLevelRecord's api key)
                Name(string)
    Key   v0 => Version(int16: 0) RecordType(int16: 10000, Exactly's ProducerIdOwnerRecord)
                ProducerId(int64)
    Value    => FrameVersion(uvarint: 0) ApiKey(uvarint: 6, 11, 12 or 10000) Version(uvarint: 0)
                AccessControlEntryRecord v0 (flexible) => Id(uuid) ResourceType(int8)
                    ResourceName(compact string) PatternType(int8) Principal(compact string)
                    Host(compact string) Operation(int8) PermissionType(int8) TaggedFields
                UserScramCredentialRecord v0 (flexible) => Name(compact string)
                    Mechanism(int8) Salt(compact bytes) StoredKey(compact bytes)
                    ServerKey(compact bytes) Iterations(int32) TaggedFields
                FeatureLevelRecord v0 (flexible) => Name(compact string) FeatureLevel(int16)
                    TaggedFields
                ProducerIdOwnerRecord v0 (flexible) => ProducerId(int64) Principal(compact string)
                    TaggedFields
    null value: the ACL of that id, or the credential of that user and mechanism, was
    removed; the producer id is no longer remembered

A FeatureLevelRecord is written by UpdateFeatures (``kafka-features upgrade`` /
``downgrade``), as Kafka's controller writes it; the last one of a feature is its
finalized level (level 0: the feature is not finalized).

A ProducerIdOwnerRecord is Exactly's own (Kafka binds no producer id to a principal:
any writer of a topic may send a batch under any producer id there). It is written,
durably, before InitProducerId answers an authenticated principal with the authorizer
on, so a producer id is its principal's after a restart as before
(``exactly/app/engine/access.py``); its type is far above Kafka's metadata record
api keys.

The codes are Kafka's (``exactly/app/security/acl.py`` and ``exactly/app/security/scram.py`` name
them); this module keeps them as plain numbers, so the coordinator layer knows nothing
of the authorizer or of SASL. No password is in any record: a credential is the salt,
the iteration count and the two keys RFC 5802 derives from them.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, field
from typing import Iterable, TypeVar

from exactly.coordinator.schema import (
    INT8,
    INT16,
    INT32,
    INT64,
    MAX_STRING_BYTES,
    NULLABLE_BYTES,
    STRING,
    UNSIGNED_VARINT,
    UUID,
    Schema,
    SchemaError,
    decode_versioned,
    flexible,
    versioned,
)

TOPIC = "__cluster_metadata"
#: the largest batch of records one change writes (all of one CreateAcls request's ACLs,
#: atomically): KRaft's metadata log's limit, ``KafkaRaftClient.MAX_BATCH_SIZE_BYTES``
MAX_BATCH_BYTES = 8 * 1024 * 1024
KEY_VERSION = 0
#: Kafka's metadata record api key of an AccessControlEntryRecord
ACCESS_CONTROL_ENTRY_RECORD = 6
#: Kafka's metadata record api key of a UserScramCredentialRecord
USER_SCRAM_CREDENTIAL_RECORD = 11
#: Kafka's metadata record api key of a FeatureLevelRecord
FEATURE_LEVEL_RECORD = 12
#: Exactly's record of the principal a producer id belongs to (no Kafka record has this key)
PRODUCER_ID_OWNER_RECORD = 10000
FRAME_VERSION = 0
RECORD_VERSION = 0

RECORD_TYPE = Schema(("record_type", INT16))
KEY = Schema(("record_type", INT16), ("id", UUID))
SCRAM_KEY = Schema(("record_type", INT16), ("name", STRING), ("mechanism", INT8))
OWNER_KEY = Schema(("record_type", INT16), ("producer_id", INT64))
FEATURE_KEY = Schema(("record_type", INT16), ("name", STRING))
FEATURE_LEVEL = flexible(Schema(("name", STRING), ("feature_level", INT16)))
PRODUCER_ID_OWNER = flexible(Schema(("producer_id", INT64), ("principal", STRING)))
#: the longest user name a credential's key holds (a STRING: an int16 length)
MAX_SCRAM_NAME_BYTES = MAX_STRING_BYTES
FRAME = Schema(("frame_version", UNSIGNED_VARINT), ("api_key", UNSIGNED_VARINT), ("version", UNSIGNED_VARINT))
ACCESS_CONTROL_ENTRY = flexible(Schema(
    ("id", UUID),
    ("resource_type", INT8),
    ("resource_name", STRING),
    ("pattern_type", INT8),
    ("principal", STRING),
    ("host", STRING),
    ("operation", INT8),
    ("permission_type", INT8),
))
USER_SCRAM_CREDENTIAL = flexible(Schema(
    ("name", STRING),
    ("mechanism", INT8),
    ("salt", NULLABLE_BYTES),
    ("stored_key", NULLABLE_BYTES),
    ("server_key", NULLABLE_BYTES),
    ("iterations", INT32),
))


@dataclass(frozen=True, slots=True)
class AclRecord:
    """One AccessControlEntryRecord: an ACL and its id, with Kafka's codes."""

    id: bytes
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class ScramCredentialRecord:
    """One UserScramCredentialRecord: a user's salted credential for one mechanism
    (Kafka's ScramMechanism code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512)."""

    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass
class MetadataImage:
    """What a log of ``__cluster_metadata`` records leaves: the ACLs by id, the
    credentials by (user name, mechanism code), the producer ids' principals (in the
    order they were last written)."""

    acls: dict[bytes, AclRecord] = field(default_factory=dict)
    scram_credentials: dict[tuple[str, int], ScramCredentialRecord] = field(default_factory=dict)
    producer_owners: dict[int, str] = field(default_factory=dict)
    #: the finalized level of each feature an UpdateFeatures changed (0: not finalized)
    feature_levels: dict[str, int] = field(default_factory=dict)


def encode_key(acl_id: bytes) -> bytes:
    return INT16.fmt.pack(KEY_VERSION) + KEY.encode({"record_type": ACCESS_CONTROL_ENTRY_RECORD, "id": acl_id})


def encode_value(record: AclRecord) -> bytes:
    return _frame(ACCESS_CONTROL_ENTRY_RECORD) + ACCESS_CONTROL_ENTRY.encode(
        dict(zip(ACCESS_CONTROL_ENTRY.names, astuple(record))))


def encode_scram_key(name: str, mechanism: int) -> bytes:
    return INT16.fmt.pack(KEY_VERSION) + SCRAM_KEY.encode(
        {"record_type": USER_SCRAM_CREDENTIAL_RECORD, "name": name, "mechanism": mechanism})


def encode_scram_value(record: ScramCredentialRecord) -> bytes:
    return _frame(USER_SCRAM_CREDENTIAL_RECORD) + USER_SCRAM_CREDENTIAL.encode(
        dict(zip(USER_SCRAM_CREDENTIAL.names, astuple(record))))


def encode_owner_key(producer_id: int) -> bytes:
    return INT16.fmt.pack(KEY_VERSION) + OWNER_KEY.encode(
        {"record_type": PRODUCER_ID_OWNER_RECORD, "producer_id": producer_id})


def encode_owner_value(producer_id: int, principal: str) -> bytes:
    return _frame(PRODUCER_ID_OWNER_RECORD) + PRODUCER_ID_OWNER.encode(
        {"producer_id": producer_id, "principal": principal})


def decode_owner(key: bytes | None, value: bytes | None) -> tuple[int, str | None]:
    """(producer id, principal; None for a tombstone). :raise SchemaError: not one."""
    k = decode_versioned(key, KEY_VERSION, OWNER_KEY, "__cluster_metadata key")
    if k["record_type"] != PRODUCER_ID_OWNER_RECORD:
        raise SchemaError(f"unknown __cluster_metadata record type {k['record_type']}")
    if value is None:
        return k["producer_id"], None
    return k["producer_id"], PRODUCER_ID_OWNER.decode_all(_body(value, PRODUCER_ID_OWNER_RECORD))["principal"]


def encode_feature_key(name: str) -> bytes:
    return INT16.fmt.pack(KEY_VERSION) + FEATURE_KEY.encode({"record_type": FEATURE_LEVEL_RECORD, "name": name})


def encode_feature_value(name: str, level: int) -> bytes:
    return _frame(FEATURE_LEVEL_RECORD) + FEATURE_LEVEL.encode({"name": name, "feature_level": level})


def decode_feature(value: bytes | None) -> tuple[str, int]:
    """(feature name, level) of a FeatureLevelRecord. :raise SchemaError: not one."""
    if value is None:
        raise SchemaError("a FeatureLevelRecord has no tombstone: level 0 removes a feature")
    fields = FEATURE_LEVEL.decode_all(_body(value, FEATURE_LEVEL_RECORD))
    return fields["name"], fields["feature_level"]


def _frame(api_key: int) -> bytes:
    return FRAME.encode({"frame_version": FRAME_VERSION, "api_key": api_key, "version": RECORD_VERSION})


def record_type(key: bytes | None) -> int:
    """The record type a key names (6 ACL, 11 SCRAM credential, 12 feature level, 10000
    producer id owner).
    :raise SchemaError: not a key of a known version or type."""
    version, body = versioned(key)
    if version != KEY_VERSION:
        raise SchemaError(f"unsupported __cluster_metadata key version {version}")
    found: int = RECORD_TYPE.decode(memoryview(body), 0)[0]["record_type"]
    if found not in (ACCESS_CONTROL_ENTRY_RECORD, USER_SCRAM_CREDENTIAL_RECORD, FEATURE_LEVEL_RECORD,
                     PRODUCER_ID_OWNER_RECORD):
        raise SchemaError(f"unknown __cluster_metadata record type {found}")
    return found


def decode_key(key: bytes | None) -> bytes:
    """The ACL id a key names. :raise SchemaError: not an ACL key of a known version."""
    k = decode_versioned(key, KEY_VERSION, KEY, "__cluster_metadata key")
    if k["record_type"] != ACCESS_CONTROL_ENTRY_RECORD:
        raise SchemaError(f"unknown __cluster_metadata record type {k['record_type']}")
    acl_id: bytes = k["id"]
    return acl_id


def decode_scram_key(key: bytes | None) -> tuple[str, int]:
    """(user name, mechanism code) of a credential's key. :raise SchemaError: not one."""
    k = decode_versioned(key, KEY_VERSION, SCRAM_KEY, "__cluster_metadata key")
    if k["record_type"] != USER_SCRAM_CREDENTIAL_RECORD:
        raise SchemaError(f"unknown __cluster_metadata record type {k['record_type']}")
    return k["name"], k["mechanism"]


def _body(value: bytes, api_key: int) -> memoryview:
    frame, pos = FRAME.decode(memoryview(value), 0)
    if (frame["frame_version"], frame["api_key"], frame["version"]) != (FRAME_VERSION, api_key, RECORD_VERSION):
        raise SchemaError(f"unsupported __cluster_metadata record {frame}")
    return memoryview(value)[pos:]


def decode_value(value: bytes | None) -> AclRecord | None:
    """None for a tombstone. :raise SchemaError: not an AccessControlEntryRecord v0."""
    if value is None:
        return None
    fields = ACCESS_CONTROL_ENTRY.decode_all(_body(value, ACCESS_CONTROL_ENTRY_RECORD))
    return AclRecord(*(fields[name] for name in ACCESS_CONTROL_ENTRY.names))


def decode_scram_value(value: bytes | None) -> ScramCredentialRecord | None:
    """None for a tombstone. :raise SchemaError: not a UserScramCredentialRecord v0."""
    if value is None:
        return None
    fields = USER_SCRAM_CREDENTIAL.decode_all(_body(value, USER_SCRAM_CREDENTIAL_RECORD))
    return ScramCredentialRecord(*(fields[name] for name in USER_SCRAM_CREDENTIAL.names))


def replay(records: Iterable[tuple[bytes | None, bytes | None]]) -> MetadataImage:
    """The ACLs, credentials, producer ids' owners and feature levels a log's ``(key,
    value)`` records leave, in log order (last write wins, a tombstone removes).
    :raise SchemaError: a record this version cannot read."""
    image = MetadataImage()
    for key, value in records:
        found = record_type(key)
        if found == ACCESS_CONTROL_ENTRY_RECORD:
            _apply(image.acls, decode_key(key), decode_value(value))
        elif found == PRODUCER_ID_OWNER_RECORD:
            producer_id, principal = decode_owner(key, value)
            image.producer_owners.pop(producer_id, None)
            _apply(image.producer_owners, producer_id, principal)
        elif found == FEATURE_LEVEL_RECORD:
            name, level = decode_feature(value)
            image.feature_levels[name] = level
        else:
            _apply(image.scram_credentials, decode_scram_key(key), decode_scram_value(value))
    return image


K = TypeVar("K")
V = TypeVar("V")


def _apply(records: dict[K, V], key: K, record: V | None) -> None:
    if record is None:
        records.pop(key, None)
    else:
        records[key] = record
