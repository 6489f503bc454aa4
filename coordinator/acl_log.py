"""Records of ``__cluster_metadata``: the ACLs, durable across restarts (docs/formats.md §14a).

Kafka (KRaft) keeps ACLs as ``AccessControlEntryRecord``s in its metadata log
``__cluster_metadata``; this broker keeps the same record, in Kafka's metadata-record
frame, on a compacted internal topic of that name (one partition). Each record is
keyed by its ACL's id, and removing the ACL writes a tombstone for that key -- the
compacted-topic form of Kafka's ``RemoveAccessControlEntryRecord`` (which carries only
the id)::

    Key   v0 => Version(int16: 0) RecordType(int16: 6, AccessControlEntryRecord's api key)
                Id(uuid)
    Value    => FrameVersion(uvarint: 0) ApiKey(uvarint: 6) Version(uvarint: 0)
                AccessControlEntryRecord v0 (flexible) => Id(uuid) ResourceType(int8)
                    ResourceName(compact string) PatternType(int8) Principal(compact string)
                    Host(compact string) Operation(int8) PermissionType(int8) TaggedFields
    null value: the ACL of that id was removed

The codes are Kafka's (``app/security/acl.py`` names them); this module keeps them as
plain numbers, so the coordinator layer knows nothing of the authorizer.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Iterable

from coordinator.schema import (
    INT8,
    INT16,
    STRING,
    UNSIGNED_VARINT,
    UUID,
    Schema,
    SchemaError,
    decode_versioned,
    flexible,
)

TOPIC = "__cluster_metadata"
KEY_VERSION = 0
#: Kafka's metadata record api key of an AccessControlEntryRecord
ACCESS_CONTROL_ENTRY_RECORD = 6
FRAME_VERSION = 0
RECORD_VERSION = 0

KEY = Schema(("record_type", INT16), ("id", UUID))
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


def encode_key(acl_id: bytes) -> bytes:
    return INT16.fmt.pack(KEY_VERSION) + KEY.encode({"record_type": ACCESS_CONTROL_ENTRY_RECORD, "id": acl_id})


def encode_value(record: AclRecord) -> bytes:
    frame = FRAME.encode({"frame_version": FRAME_VERSION, "api_key": ACCESS_CONTROL_ENTRY_RECORD,
                          "version": RECORD_VERSION})
    return frame + ACCESS_CONTROL_ENTRY.encode(dict(zip(ACCESS_CONTROL_ENTRY.names, astuple(record))))


def decode_key(key: bytes | None) -> bytes:
    """The ACL id a key names. :raise SchemaError: not an ACL key of a known version."""
    k = decode_versioned(key, KEY_VERSION, KEY, "__cluster_metadata key")
    if k["record_type"] != ACCESS_CONTROL_ENTRY_RECORD:
        raise SchemaError(f"unknown __cluster_metadata record type {k['record_type']}")
    return k["id"]


def decode_value(value: bytes | None) -> AclRecord | None:
    """None for a tombstone. :raise SchemaError: not an AccessControlEntryRecord v0."""
    if value is None:
        return None
    frame, pos = FRAME.decode(value)
    if (frame["frame_version"], frame["api_key"], frame["version"]) != (
            FRAME_VERSION, ACCESS_CONTROL_ENTRY_RECORD, RECORD_VERSION):
        raise SchemaError(f"unsupported __cluster_metadata record {frame}")
    fields = ACCESS_CONTROL_ENTRY.decode_all(value[pos:])
    return AclRecord(*(fields[name] for name in ACCESS_CONTROL_ENTRY.names))


def replay(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[bytes, AclRecord]:
    """The ACLs a log's ``(key, value)`` records leave, in log order (last write wins,
    a tombstone removes). :raise SchemaError: a record this version cannot read."""
    acls: dict[bytes, AclRecord] = {}
    for key, value in records:
        acl_id, record = decode_key(key), decode_value(value)
        if record is None:
            acls.pop(acl_id, None)
        else:
            acls[acl_id] = record
    return acls
