"""Kafka protocol entities from plain mappings, and request/response frames, with
``kio`` (which generates every API version's types from Kafka's JSON definitions).

Shared by both ends of the wire: the listener (``exactly/app/kafka/``) builds its responses
with :func:`build`; the Kafka-protocol client (``exactly/app/spark/kafka_client.py``, which
the tests use as their raw client) frames requests with :func:`encode_request` and
reads answers with :func:`decode_response`.

A mapping has one shape for every version of an API (as Kafka's generated ``*Data``
classes are): a field that version does not have is left out; a field the mapping
does not give gets the schema's default (or Kafka's zero value); a key that no
version kio knows has at that place is an ``UnknownFieldError`` (a misspelling).
Milliseconds become the ``timedelta`` / ``datetime`` kio uses for ``*Ms`` fields,
ints the ``ErrorCode`` it uses for error codes.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import io
import types
import typing
from pkgutil import resolve_name
from typing import Any, Callable, Literal, Mapping

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import TZAware, i16, i32


class ApiKey(enum.IntEnum):
    """The API keys this broker knows (Kafka's ``ApiKeys``)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75


class CoordinatorType(enum.IntEnum):
    """FindCoordinator's key type (Kafka's ``FindCoordinatorRequest.CoordinatorType``)."""

    GROUP = 0
    TRANSACTION = 1
    #: a share group's partition, ``groupId:topicId:partition`` (KIP-932, FindCoordinator v6)
    SHARE = 2

_MS = datetime.timedelta(milliseconds=1)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: Mapping[str, Any]) -> bytes:
    """The whole frame (size, request header, body) of one request."""
    cls = load_request_schema(api_key, version)
    header_cls = cls.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=i16(api_key), request_api_version=i16(version),
                                              correlation_id=i32(correlation_id), client_id=client_id))
    entity_writer(cls)(out, build(cls, body))
    data = out.getvalue()
    return len(data).to_bytes(4, "big") + data


def decode_response(api_key: int, version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    """``(correlation id, response entity)`` of a response frame (its size prefix removed).
    A time that may be -1 on the wire is read as Kafka's integer milliseconds (see
    :func:`_lenient`)."""
    view = memoryview(frame)
    cls = load_response_schema(api_key, version)
    header, used = entity_reader(cls.__header_schema__)(view, 0)
    read: Any = entity_reader(_lenient(cls))
    body, _ = read(view, used)
    return header.correlation_id, body


@functools.cache
def _lenient(cls: type) -> type:
    """``cls``, or a copy whose non-nullable ``datetime_i64`` fields are plain int64:
    Kafka answers -1 for "no time" in some (DescribeTransactions' TransactionStartTimeMs
    of an Empty transaction), which kio's time reader refuses."""
    hints = typing.get_type_hints(cls)
    changed = False
    specs = []
    for f in dataclasses.fields(cls):
        kind, metadata = hints[f.name], dict(f.metadata)
        if metadata.get("kafka_type") == "datetime_i64" and not _strip_optional(kind)[1]:
            kind, metadata, changed = int, {**metadata, "kafka_type": "int64"}, True
        elif typing.get_origin(kind) is tuple and _is_entity(element := typing.get_args(kind)[0]):
            if (copy := _lenient(element)) is not element:
                kind, changed = tuple[copy, ...], True  # type: ignore[valid-type]
        default = {} if f.default is dataclasses.MISSING else {"default": f.default}
        specs.append((f.name, kind, dataclasses.field(metadata=metadata, **default)))
    if not changed:
        return cls
    copy = dataclasses.make_dataclass(cls.__name__, specs, frozen=True, slots=True)
    for attribute in ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__"):
        setattr(copy, attribute, getattr(cls, attribute))
    return copy


class UnknownFieldError(TypeError):
    """A mapping key that no version of the message has at that place: a misspelling
    would otherwise be dropped silently (``eror_code`` answering NONE)."""


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """The kio entity ``cls`` from ``values`` (see the module docstring); raises
    UnknownFieldError for a key no version of the message has there."""
    unknown = values.keys() - _known_names(cls)
    if unknown:
        raise UnknownFieldError(f"{cls.__module__}.{cls.__name__} has no field {', '.join(sorted(unknown))} "
                                f"in any version (it has {', '.join(sorted(_known_names(cls)))})")
    kwargs = {}
    for name, convert, default in _plan(cls):
        value = values.get(name, _MISSING)
        if value is _MISSING:
            kwargs[name] = default
        elif value is None or convert is None:
            kwargs[name] = value
        else:
            kwargs[name] = convert(value)
    return cls(**kwargs)


_MISSING = object()


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, Callable | None, Any], ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for field in dataclasses.fields(cls):
        kind, nullable = _strip_optional(hints[field.name])
        default = field.default if field.default is not dataclasses.MISSING else _zero(kind, nullable)
        plan.append((field.name, _converter(kind), default))
    return tuple(plan)


@functools.cache
def _known_names(cls: type) -> frozenset[str]:
    """The field names of the entity at ``cls``'s place in its request or response, in
    any version kio knows (a mapping has one shape for every version)."""
    versions = _versions(cls)
    paths = [path for path, entity in _entities(_top(cls)).items() if entity is cls] if versions else []
    if not paths:
        return frozenset(field.name for field in dataclasses.fields(cls))
    return frozenset(field.name for message in versions for path in paths
                     if (entity := _entities(message).get(path)) is not None
                     for field in dataclasses.fields(entity))


def _top(cls: type) -> type:
    """The request or response class whose module defines ``cls``."""
    key = _message_key(cls)
    if key is None:
        raise TypeError(f"{cls.__module__}.{cls.__name__} is not an entity of a request or response")
    name, version, direction = key
    return resolve_name(schema_name_map[name][version][direction])


def _message_key(cls: type) -> tuple[str, int, Literal[EntityType.request, EntityType.response]] | None:
    """(API name, version, direction) from kio's module ``kio.schema.<api>.v<N>.<direction>``;
    None for an entity of no request or response (a header)."""
    parts = cls.__module__.split(".")
    if len(parts) != 5 or parts[4] not in ("request", "response") or parts[2] not in schema_name_map:
        return None
    return parts[2], int(parts[3][1:]), EntityType.request if parts[4] == "request" else EntityType.response


@functools.cache
def _versions(cls: type) -> tuple[type, ...]:
    """Every version of the request or response ``cls`` belongs to (none for a header)."""
    key = _message_key(cls)
    if key is None:
        return ()
    name, _, direction = key
    return tuple(resolve_name(paths[direction]) for paths in schema_name_map[name].values() if direction in paths)


@functools.cache
def _entities(message: type) -> dict[tuple[str, ...], type]:
    """Every entity in ``message`` (itself at ``()``) by its path of field names."""
    found: dict[tuple[str, ...], type] = {(): message}
    _add_children(message, (), found)
    return found


def _add_children(entity: type, path: tuple[str, ...], found: dict[tuple[str, ...], type]) -> None:
    hints = typing.get_type_hints(entity)
    for field in dataclasses.fields(entity):
        kind, _ = _strip_optional(hints[field.name])
        if typing.get_origin(kind) is tuple:
            kind = typing.get_args(kind)[0]
        if _is_entity(kind):
            found[path + (field.name,)] = kind
            _add_children(kind, path + (field.name,), found)


def _strip_optional(kind: Any) -> tuple[Any, bool]:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(kind))
    return kind, False


def _is_entity(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _converter(kind: Any) -> Callable | None:
    if _is_entity(kind):
        return functools.partial(build, kind)
    if typing.get_origin(kind) is tuple:
        element = typing.get_args(kind)[0]
        if _is_entity(element):
            return lambda values, element=element: tuple(build(element, v) for v in values)
        return tuple
    if isinstance(kind, type) and issubclass(kind, ErrorCode):
        return ErrorCode
    if isinstance(kind, type) and issubclass(kind, datetime.timedelta):
        return lambda ms: ms if isinstance(ms, datetime.timedelta) else ms * _MS
    if isinstance(kind, type) and issubclass(kind, datetime.datetime):
        return lambda ms: ms if isinstance(ms, datetime.datetime) else _EPOCH + ms * _MS
    return None


def _zero(kind: Any, nullable: bool) -> Any:
    """Kafka's default for a field with no default of its own."""
    if nullable:
        return None
    if _is_entity(kind):
        return build(kind, {})  # entities are frozen: one shared instance will do
    if typing.get_origin(kind) is tuple:
        return ()
    if isinstance(kind, type):
        if issubclass(kind, ErrorCode):
            return ErrorCode.none
        if issubclass(kind, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(kind, TZAware):
            return _EPOCH
        for base, zero in ((bool, False), (int, 0), (float, 0.0), (str, ""), (bytes, b"")):
            if issubclass(kind, base):
                return zero
    raise TypeError(f"no zero value for {kind!r}")


def millis(value: datetime.timedelta | int) -> int:
    """A kio ``*Ms`` duration as Kafka's integer milliseconds."""
    return value if isinstance(value, int) else value // _MS
