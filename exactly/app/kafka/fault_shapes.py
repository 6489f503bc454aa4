"""Where a request keeps what a fault matches, derived from kio's entity shapes.

One rule per kind of field, read from the types kio gives every message field:

* the **transactional id**: the top-level field typed ``TransactionalId``
  (AddPartitionsToTxn v3's ``v3_and_below_transactional_id`` as well);
* the **groups**: top-level fields typed ``GroupId`` (or a tuple of them, as
  DescribeGroups has);
* the **partitions**: the first top-level tuple of entities that have a
  ``TopicName`` field (or, from Fetch v13, a ``topic_id``: KIP-516's id, matched by
  the name of the topic that has it, :class:`TopicIds`) and a tuple of partitions -- entities with an index field
  (``index``, ``partition_index``, ``partition``), or bare int32s; the response's
  partitions the same way, their error being the field typed ``ErrorCode``.

FindCoordinator is the one API declared by hand: its key is a group or a
transactional id as its ``key_type`` says (0 group, 1 transaction; v4 asks for
several keys at once).

:func:`without` rebuilds a request without some partitions (the rest is answered for
real) and :func:`error_answer` writes the answer of the faulted part, which
:func:`merge` puts back beside the real one.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.types import GroupId, TopicName, TransactionalId

from exactly.app.faults.fault import RequestFacts
from exactly.app.kafka.wire import CoordinatorType
from exactly.storage import topic_id

FIND_COORDINATOR = 10
#: FindCoordinator's key types
#: the names an entity's partition index goes by, across APIs
INDEX_NAMES = ("index", "partition_index", "partition")

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Partitioned:
    """Where a message nests its partitions under its topics."""

    #: the message's tuple of topic entities
    topics: str
    #: the topic entity's name field
    name: str
    #: the topic entity's tuple of partitions
    partitions: str
    #: the partition entity's index field; None: the partitions are bare int32s
    index: str | None
    #: (responses) the partition entity's error field
    error: str | None
    #: the name field is a topic id (KIP-516)
    by_id: bool = False


@dataclass(frozen=True)
class TopicIds:
    """The topic names of the ids a request gives (Fetch v13+), and back: a fault
    matches a topic by name whichever way a request names it. An id no topic has
    goes by its text (``topic_id.to_string``), which no fault's topic can be."""

    #: the names of those of some ids that are topics' (``Topics.names_by_id``)
    names_by_id: Callable[[Iterable[uuid.UUID]], Mapping[uuid.UUID, str]] = lambda ids: {}
    #: the id of a topic, None if there is no such topic
    id_of: Callable[[str], uuid.UUID | None] = lambda name: None

    def name(self, id_: uuid.UUID) -> str:
        return self.names_by_id([id_]).get(id_) or topic_id.to_string(id_)

    def id(self, name: str) -> uuid.UUID:
        return self.id_of(name) or topic_id.parse(name)


NO_IDS = TopicIds()


def _key(shape: Partitioned, topic: Any, ids: TopicIds) -> str:
    """The name of a request's topic entity."""
    value = getattr(topic, shape.name)
    return ids.name(value) if shape.by_id else value


def _keyed(shape: Partitioned, name: str, ids: TopicIds) -> Any:
    """A topic entity's name field's value for the topic ``name``."""
    return ids.id(name) if shape.by_id else name


def _element(hint: Any) -> Any:
    """The element type of ``tuple[X, ...]`` (or ``tuple[X, ...] | None``); None otherwise."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is tuple:
        return args[0]
    if len(args) == 1 and typing.get_origin(args[0]) is tuple:
        return typing.get_args(args[0])[0]
    return None


def _strip_none(hint: Any) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 and type(None) in typing.get_args(hint) else hint


def _entity_class(body: Any) -> type:
    """``type(body)`` as a plain ``type``: mypy does not see ``type[Any]`` as hashable,
    which a cached function's argument must be."""
    return type(body)


def _is_struct(hint: Any) -> bool:
    """A kio entity (a dataclass), not a primitive. A bool, not a narrowing: mypy would
    narrow ``hint`` to a dataclass type, which it does not see as hashable (a cache key)."""
    return dataclasses.is_dataclass(hint)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return {name: _strip_none(hint) for name, hint in typing.get_type_hints(cls).items()}


@functools.cache
def partitioned(cls: type) -> Partitioned | None:
    """Where ``cls`` (a kio request or response entity) keeps its partitions, if it has any."""
    for topics, hint in _hints(cls).items():
        topic_cls = _element(hint)
        if not _is_struct(topic_cls):
            continue
        topic_hints = _hints(topic_cls)
        name = next((n for n, h in topic_hints.items() if h is TopicName), None)
        by_id = name is None and topic_hints.get("topic_id") is uuid.UUID
        name = "topic_id" if by_id else name
        partitions = next((n for n, h in topic_hints.items() if _element(h) is not None), None)
        if name is None or partitions is None:
            continue
        partition_cls = _element(topic_hints[partitions])
        if not _is_struct(partition_cls):
            return Partitioned(topics, name, partitions, None, None, by_id)
        fields = _hints(partition_cls)
        index = next((n for n in INDEX_NAMES if n in fields), None)
        error = next((n for n, h in fields.items() if h is ErrorCode), None)
        return Partitioned(topics, name, partitions, index, error, by_id) if index else None
    return None


@functools.cache
def _named_fields(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(group fields, transactional id fields)`` of a request entity."""
    hints = _hints(cls)
    groups = tuple(n for n, h in hints.items() if h is GroupId or _element(h) is GroupId)
    txn_ids = tuple(n for n, h in hints.items() if h is TransactionalId)
    return groups, txn_ids


def partitions_of(body: Any, ids: TopicIds = NO_IDS) -> tuple[TopicPartition, ...]:
    """Every (topic, partition) a request names."""
    shape = partitioned(_entity_class(body))
    if shape is None:
        return ()
    return tuple((_key(shape, topic, ids), _index(shape, p))
                 for topic in getattr(body, shape.topics) or ()
                 for p in getattr(topic, shape.partitions))


def _index(shape: Partitioned, partition: Any) -> int:
    return int(partition if shape.index is None else getattr(partition, shape.index))


def facts(api_key: int, client_id: str | None, principal: str, body: Any, ids: TopicIds = NO_IDS) -> RequestFacts:
    """What a fault can match in this request."""
    if api_key == FIND_COORDINATOR:
        keys = tuple(getattr(body, "coordinator_keys", None) or (body.key,))
        is_txn = getattr(body, "key_type", CoordinatorType.GROUP) == CoordinatorType.TRANSACTION
        return RequestFacts(api_key, client_id, principal, groups=() if is_txn else keys,
                            transactional_id=keys[0] if is_txn else None)
    group_fields, txn_fields = _named_fields(_entity_class(body))
    groups: list[str] = []
    for name in group_fields:
        value = getattr(body, name)
        groups.extend(value if isinstance(value, tuple) else () if value is None else (value,))
    txn_id = next((getattr(body, n) for n in txn_fields if getattr(body, n)), None)
    return RequestFacts(api_key, client_id, principal, partitions_of(body, ids), tuple(groups), txn_id)


def without(body: Any, dropped: Callable[[str, int], bool], ids: TopicIds = NO_IDS) -> Any:
    """The request without the partitions ``dropped`` says so of (topics left empty go too)."""
    shape = partitioned(_entity_class(body))
    assert shape is not None
    topics = []
    for topic in getattr(body, shape.topics):
        name = _key(shape, topic, ids)
        kept = tuple(p for p in getattr(topic, shape.partitions) if not dropped(name, _index(shape, p)))
        if kept:
            topics.append(dataclasses.replace(topic, **{shape.partitions: kept}))
    return dataclasses.replace(body, **{shape.topics: tuple(topics)})


def error_answer(api_key: int, version: int, code: int, body: Any,
                 faulted: tuple[TopicPartition, ...], ids: TopicIds = NO_IDS) -> dict[str, Any] | None:
    """The answer of ``code`` for the faulted part of a request: per partition where
    the response has partitions, per key for FindCoordinator v4, else the top-level
    ``error_code``; None when the response has no place for an error."""
    response_cls = load_response_schema(api_key, version)
    shape = partitioned(response_cls)
    if shape is not None and shape.index is not None and shape.error is not None and faulted:
        return {shape.topics: _topics(shape, shape.index, shape.error, code, faulted, ids)}
    if api_key == FIND_COORDINATOR and version >= 4:
        return {"coordinators": [{"key": key, "error_code": code, "node_id": -1, "host": "", "port": -1}
                                 for key in body.coordinator_keys]}
    if "error_code" in _hints(response_cls):
        return {"error_code": code}
    return None


def _topics(shape: Partitioned, index: str, error: str, code: int,
            faulted: tuple[TopicPartition, ...], ids: TopicIds) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in faulted:
        by_topic.setdefault(topic, []).append({index: partition, error: code})
    return [{shape.name: _keyed(shape, topic, ids), shape.partitions: entries} for topic, entries in by_topic.items()]


def merge(api_key: int, version: int, real: Any, faulted: dict[str, Any]) -> Any:
    """The real answer of the rest of a request with the faulted partitions' answer added."""
    if real is None or not isinstance(real, dict):
        return real  # acks=0 (no answer) or a CLOSE: the faulted part changes nothing
    shape = partitioned(load_response_schema(api_key, version))
    assert shape is not None
    topics = {t[shape.name]: {**t, shape.partitions: list(t[shape.partitions])} for t in real.get(shape.topics, ())}
    for topic in faulted[shape.topics]:
        entry = topics.setdefault(topic[shape.name], {shape.name: topic[shape.name], shape.partitions: []})
        entry[shape.partitions].extend(topic[shape.partitions])
    return {**real, shape.topics: list(topics.values())}
