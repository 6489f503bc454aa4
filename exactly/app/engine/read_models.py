"""Read models of broker state, shared by the HTTP API and the console.

Each function runs on the engine's loop -- the coroutines through
``engine.call(read_models.x, engine, ...)`` -- and returns plain, JSON-ready dicts
(reads of the SQLite mirror, on callers' threads, are in ``mirror_reads.py``)
and returns plain, JSON-ready dicts, so the API and the console show the same facts
computed one way. Offsets are Kafka's: high watermark (the durable end), LSO, log
start. A group's lag (``exactly.storage.visibility.read_committed_lag``) is the number of records a
read_committed consumer would still receive: the data records between its committed
offset and the LSO, markers and aborted records not counted (a lag against the high
watermark, or an offset difference, never reaches 0 with transactional producers:
markers occupy offsets).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any, Iterator

from exactly.app.config import NULL_DEFAULTS, SENSITIVE_CONFIGS, TOPIC_DEFAULTS, BrokerConfig
from exactly.app.engine.counters import LatencyHistogram
from exactly.app.engine.views import ConfigSource
from exactly.coordinator import consumer_protocol
from exactly.coordinator.group_metadata import GroupMetadata
from exactly.coordinator.internal_topics import INTERNAL_TOPICS
from exactly.coordinator.schema import SchemaError
from exactly.coordinator.transaction_state import TWO_PHASE_COMMIT_TIMEOUT_MS, TransactionState
from exactly.storage.aborted_transactions import AbortedTransactionTracker
from exactly.storage import topic_id
from exactly.storage.errors import GroupIdNotFoundError, OffsetOutOfRangeError, TransactionalIdNotFoundError
from exactly.storage.log_config import LogConfig
from exactly.storage.partition_log import PartitionLog
from exactly.storage.record_batch import Record, decode_batch, decode_control_record
from exactly.storage.visibility import data_records, read_committed_lag

if TYPE_CHECKING:
    from exactly.app.engine import Engine

def _partition(log: PartitionLog) -> dict[str, Any]:
    open_txns = log.producer_state.ongoing_transactions()
    return {
        "topic_name": log.topic,
        "partition_id": log.partition,
        "log_start_offset": log.log_start_offset,
        "high_watermark": log.high_watermark,
        "last_stable_offset": log.last_stable_offset,
        "log_end_offset": log.log_end_offset,
        "size_bytes": log.size_bytes,
        "open_transactions": [{"producer_id": pid, "first_offset": first} for pid, first in open_txns],
    }


async def topics(engine: "Engine", include_internal: bool = False) -> list[dict[str, Any]]:
    result = []
    for name, info in engine.topics.items():
        if info.internal and not include_internal:
            continue
        partitions = [_partition(engine.partitions.log(name, p)) for p in range(info.partitions)]
        result.append({"topic_name": name, "topic_id": topic_id.to_string(info.topic_id), "is_internal": info.internal,
                       "partitions_count": info.partitions, "configs": dict(info.overrides),
                       "partitions": partitions})
    return result


async def topics_summary(engine: "Engine") -> list[dict[str, Any]]:
    """One row per topic, internal ones too, for the console's Topics page: partitions,
    ``messages`` -- the data records a read_committed consumer from the log start
    receives (``data_records`` up to the LSO: markers, aborted and still-open records
    not counted; ``messages_exact`` as there) -- size on disk, and the producers
    (with their transactional ids, when known) with a transaction open on it. From the counts the logs
    keep: no batch read, fast for thousands of topics."""
    tc = engine.transactions.coordinator
    rows = []
    for name, info in engine.topics.items():
        logs = [engine.partitions.log(name, p) for p in range(info.partitions)]
        counts = [data_records(log, log.log_start_offset, log.last_stable_offset) for log in logs]
        holders = {pid: tc.transactional_id_of(pid)
                   for log in logs for pid, _ in log.producer_state.ongoing_transactions()}
        rows.append({"topic_name": name, "is_internal": info.internal, "partitions_count": info.partitions,
                     "messages": sum(n for n, _ in counts), "messages_exact": all(x for _, x in counts),
                     "size_bytes": sum(log.size_bytes for log in logs),
                     "held_back": sum(log.high_watermark - log.last_stable_offset for log in logs),
                     "open_transactions": [{"producer_id": pid, "transactional_id": txn_id}
                                           for pid, txn_id in sorted(holders.items())]})
    return rows


async def topic(engine: "Engine", name: str) -> dict[str, Any]:
    info = engine.topics.topic(name)
    return {"topic_name": name, "topic_id": topic_id.to_string(info.topic_id), "is_internal": info.internal,
            "partitions_count": info.partitions, "configs": dict(info.overrides),
            "effective_configs": engine.topics.topic_config(name).to_kafka(),
            "partitions": [_partition(engine.partitions.log(name, p)) for p in range(info.partitions)]}


#: where a config's value comes from, as the dicts name it (``views.ConfigSource``)
DEFAULT_CONFIG, STATIC_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG = (
    ConfigSource.DEFAULT_CONFIG.name, ConfigSource.STATIC_BROKER_CONFIG.name, ConfigSource.DYNAMIC_TOPIC_CONFIG.name)


async def topics_with_configs(engine: "Engine", name: str | None = None) -> list[tuple[dict, list[dict]]]:
    """One topic (``name``) or all (internal ones too), each with its effective configs."""
    listed = [await topic(engine, name)] if name else await topics(engine, include_internal=True)
    return [(t, await topic_configs(engine, t["topic_name"])) for t in listed]


async def topic_configs(engine: "Engine", name: str, overrides: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every config of a topic, by name, with its effective value and where that
    comes from: set on the topic (DYNAMIC_TOPIC_CONFIG), a broker-wide default given
    at start-up (STATIC_BROKER_CONFIG, e.g. ``--config log.retention.ms=...``) or
    Kafka's default (DEFAULT_CONFIG). Values are strings, as Kafka shows them.
    ``synonyms``: Kafka's, most significant first -- the topic's own value, then the
    broker-level name's value given at start-up and its default (see :func:`_synonyms`).
    ``overrides``: those of a topic not created (CreateTopics' validate_only), instead
    of topic ``name``'s."""
    if overrides is None:
        overrides, effective = engine.topics.topic(name).overrides, engine.topics.topic_config(name)
    else:
        effective = LogConfig.from_kafka(overrides, base=engine.topics.defaults)
    broker, kafka = engine.topics.defaults.to_kafka(), LogConfig().to_kafka()
    result = []
    for key, value in sorted(effective.to_kafka().items()):
        synonyms = [_synonym(key, value, DYNAMIC_TOPIC_CONFIG)] if key in overrides else []
        if key in _BROKER_NAMES:
            synonyms += _synonyms(_BROKER_NAMES[key], broker[key], kafka[key])
        source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
        result.append({"name": key, "value": LogConfig.kafka_text(value), "is_default": source == DEFAULT_CONFIG,
                       "source": source, "is_read_only": False, "is_sensitive": False, "synonyms": synonyms})
    return result


#: topic config -> its broker-level name (Kafka's ``ServerTopicConfigSynonyms``)
_BROKER_NAMES = {topic: broker for broker, topic in TOPIC_DEFAULTS.items()}


def _synonym(name: str, value: Any, source: str) -> dict[str, Any]:
    return {"name": name, "value": LogConfig.kafka_text(value), "source": source}


def _synonyms(name: str, value: Any, default: Any) -> list[dict[str, Any]]:
    """Kafka's synonyms of the broker config ``name`` (its ``ConfigHelper.configSynonyms``):
    the value given at start-up (STATIC_BROKER_CONFIG), then Kafka's default
    (DEFAULT_CONFIG) unless that is null (:data:`~exactly.app.config.NULL_DEFAULTS`).
    A value that differs from Kafka's default counts as given."""
    found = [_synonym(name, value, STATIC_BROKER_CONFIG)] if value != default else []
    if name not in NULL_DEFAULTS:
        found.append(_synonym(name, default, DEFAULT_CONFIG))
    return found


async def broker_configs(engine: "Engine") -> list[dict[str, Any]]:
    """This broker's settings (``exactly/app/config.py``) and the broker-wide defaults of the
    topic configs under their broker-level names (``log.segment.bytes``), by name, in
    :func:`topic_configs`' form: given at start-up (STATIC_BROKER_CONFIG) or Kafka's
    default, all read-only (they change with a restart), a sensitive one's value null,
    and, as Kafka shows them, null for those whose Kafka default is null until given."""
    defaults, topic_defaults, kafka = BrokerConfig(), engine.topics.defaults.to_kafka(), LogConfig().to_kafka()
    settings = {f.name.replace("_", "."): (getattr(engine.config, f.name), getattr(defaults, f.name))
                for f in fields(BrokerConfig) if f.name != "log"}  # "log": the topic defaults, below
    settings.update({name: (topic_defaults[topic], kafka[topic]) for name, topic in TOPIC_DEFAULTS.items()})
    result = []
    for name, (value, default) in sorted(settings.items()):
        synonyms = _synonyms(name, value, default)
        source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
        hidden = name in SENSITIVE_CONFIGS or (name in NULL_DEFAULTS and source == DEFAULT_CONFIG)
        if name in SENSITIVE_CONFIGS:
            synonyms = [{**synonym, "value": None} for synonym in synonyms]
        result.append({"name": name, "value": None if hidden else LogConfig.kafka_text(value),
                       "is_default": source == DEFAULT_CONFIG, "source": source, "is_read_only": True,
                       "is_sensitive": name in SENSITIVE_CONFIGS, "synonyms": synonyms})
    return result


async def topic_producers(engine: "Engine", name: str) -> list[dict[str, Any]]:
    """DescribeProducers for every partition of a topic: :func:`producers`, each with its partition."""
    return [{"partition_id": p, **producer} for p in range(engine.topics.topic(name).partitions)
            for producer in await producers(engine, name, p)]


async def partition(engine: "Engine", name: str, partition_id: int) -> dict[str, Any]:
    """A partition with what explains its LSO: open transactions (and who owns them)."""
    log = engine.partitions.log(name, partition_id)
    detail = _partition(log)
    tc = engine.transactions.coordinator
    for txn in detail["open_transactions"]:
        txn_id = tc.transactional_id_of(txn["producer_id"])
        meta = tc.describe(txn_id) if txn_id else None
        txn["transactional_id"] = txn_id
        txn["transaction_start_ms"] = meta.txn_start_timestamp if meta else None
        txn["transaction_timeout_ms"] = meta.txn_timeout_ms if meta else None
    return detail


async def topic_partitions(engine: "Engine", name: str) -> list[dict[str, Any]]:
    """Every partition of a topic, each as :func:`partition` describes it."""
    return [await partition(engine, name, p) for p in range(engine.topics.topic(name).partitions)]


async def segments(engine: "Engine", name: str, partition_id: int) -> list[dict[str, Any]]:
    log = engine.partitions.log(name, partition_id)
    return [{"base_offset": s.base_offset, "next_offset": s.next_offset, "size_bytes": s.size,
             "max_timestamp": s.max_timestamp, "index_entries": len(s.offset_index),
             "time_index_entries": len(s.time_index), "aborted_transactions": len(s.txn_index.all_entries())}
            for s in log.segments]


async def aborted_transactions(engine: "Engine", name: str, partition_id: int) -> list[dict[str, Any]]:
    """The ``.txnindex`` entries of every segment."""
    log = engine.partitions.log(name, partition_id)
    return [{"producer_id": t.producer_id, "first_offset": t.first_offset, "last_offset": t.last_offset,
             "last_stable_offset": t.last_stable_offset}
            for s in log.segments for t in s.txn_index.all_entries()]


async def producers(engine: "Engine", name: str, partition_id: int) -> list[dict[str, Any]]:
    """DescribeProducers: the producer state of one partition."""
    log = engine.partitions.log(name, partition_id)
    tc = engine.transactions.coordinator
    live = live_producers(engine)
    return [{"producer_id": e.producer_id, "producer_epoch": e.producer_epoch,
             "connection": live.get(e.producer_id) or live.get(tc.transactional_id_of(e.producer_id) or -1),
             "last_sequence": e.last_seq, "last_timestamp": e.last_timestamp,
             "coordinator_epoch": e.coordinator_epoch,
             "current_transaction_start_offset": (e.current_txn_first_offset
                                                  if e.current_txn_first_offset is not None else -1),
             "transactional_id": tc.transactional_id_of(e.producer_id)}
            for e in sorted(log.producer_state, key=lambda e: e.producer_id)]


def _transaction(txn_id: str, meta, now_ms: int) -> dict[str, Any]:
    """A transactional id's state (Kafka's name), what that means now (``activity``:
    ``open``, ``idle`` between transactions, ``dead``) and how its last transaction
    ended when it is idle after one (``last_outcome``: COMMIT, ABORT or None)."""
    open_ = meta.state.is_open
    activity = "open" if open_ else "dead" if meta.state is TransactionState.DEAD else "idle"
    return {"transactional_id": txn_id, "state": meta.state.display, "activity": activity,
            "last_outcome": meta.state.outcome.name if meta.state.is_complete else None,
            "two_phase_commit": meta.txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS,
            "transaction_version": meta.client_transaction_version,
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch, "transaction_timeout_ms": meta.txn_timeout_ms,
            "transaction_start_ms": meta.txn_start_timestamp if open_ else None,
            "age_ms": now_ms - meta.txn_start_timestamp if open_ and meta.txn_start_timestamp >= 0 else None,
            "last_update_ms": meta.txn_last_update_timestamp,
            "partitions": [{"topic_name": t, "partition_id": p} for t, p in sorted(meta.partitions)]}


async def transactions(engine: "Engine", states: list[str] | None = None) -> list[dict[str, Any]]:
    """ListTransactions, with each one's age against its timeout and the connection
    that last used its transactional id, if one is open now (``connection``: None)."""
    now = engine.clock.now_ms()
    live = live_producers(engine)
    return [{**_transaction(txn_id, meta, now), "connection": live.get(txn_id)}
            for txn_id, meta in engine.transactions.coordinator.list_transactions(states or ())]


async def transaction(engine: "Engine", txn_id: str) -> dict[str, Any]:
    meta = engine.transactions.coordinator.describe(txn_id)
    if meta is None:
        raise TransactionalIdNotFoundError(f"no transactional id {txn_id!r}")
    return {**_transaction(txn_id, meta, engine.clock.now_ms()), "connection": live_producers(engine).get(txn_id)}


async def groups(engine: "Engine") -> list[dict[str, Any]]:
    return [{"group_id": g.group_id, "state": g.state.value, "generation": g.generation,
             "protocol_type": g.protocol_type, "protocol": g.protocol, "members": len(g.members),
             **_consumer_side(engine, g, members=False)}
            for g in sorted(engine.groups.coordinator.groups.values(), key=lambda g: g.group_id)]


def _consumer_side(engine: "Engine", g: GroupMetadata, members: bool = True) -> dict[str, Any]:
    """The group's type (Kafka's ``classic`` or ``consumer``) and, for a KIP-848 group, what
    replaces the classic fields: its state, group and assignment epochs (``generation``
    is the group epoch, the protocol its assignor) and, with ``members``, each member's
    epoch, reconciliation state, partitions (owned, still to revoke), target and protocol
    (``member_type``: a ``classic`` member is one an online migration let in)."""
    c = g.consumer
    if c is None:
        return {"type": "classic", "mixed": False}
    side: dict[str, Any] = {"type": "consumer", "state": c.state.value, "generation": c.group_epoch,
                            # members of the classic protocol inside it: a group migrating
                            "mixed": any(m.classic is not None for m in c.members.values()),
                            "assignment_epoch": c.assignment_epoch, "protocol_type": "consumer",
                            "protocol": engine.groups.coordinator.consumer.assignor_for(c), "members": len(c.members)}
    if members:
        side["members"] = [{
            "member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
            "client_host": m.client_host,
            "session_timeout_ms": (m.classic.session_timeout_ms if m.classic is not None
                                   else engine.groups.coordinator.config.group_consumer_session_timeout_ms),
            "member_type": "classic" if m.classic is not None else "consumer",
            "member_epoch": m.member_epoch, "member_state": m.state.name,
            "assignment": _partitions(m.assigned), "pending_revocation": _partitions(m.pending_revocation),
            "target_assignment": _partitions(c.target.get(m.member_id, frozenset()))}
            for m in sorted(c.members.values(), key=lambda m: m.member_id)]
    return side


def _partitions(partitions: frozenset[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic_name": t, "partition_id": p} for t, p in sorted(partitions)]


async def group(engine: "Engine", group_id: str) -> dict[str, Any]:
    """A group's members, committed and pending offsets, and per partition its lag
    (``read_committed_lag``; ``lag_exact`` False only while the batches the broker
    started with are being counted) and, while the LSO
    is held back, what is held back (``held_back``: the data records from the LSO to
    the high watermark, open or decided, aborted ones not counted -- what the consumer
    may receive once the LSO moves) and by which open transactions (``held_by``, the
    one pinning the LSO first): a consumer at the LSO has lag 0 yet is not done."""
    g = engine.groups.coordinator.describe(group_id)
    if g is None:
        raise GroupIdNotFoundError(f"no group {group_id!r}")
    tc = engine.transactions.coordinator
    now = engine.clock.now_ms()
    offsets = []
    assigned = assigned_partitions(g)
    partitions = sorted(set(g.committed) | assigned | {tp for pending in g.pending.values() for tp in pending})
    for tp in partitions:
        committed = g.committed.get(tp)
        log = engine.partitions.get(tp)
        lag, exact = _lag(log, committed.offset if committed else None, tp in assigned)
        pending = [{"producer_id": pid, "transactional_id": tc.transactional_id_of(pid), "offset": offs[tp].offset}
                   for pid, offs in sorted(g.pending.items()) if tp in offs]
        offsets.append({
            "topic_name": tp[0], "partition_id": tp[1],
            "committed_offset": committed.offset if committed else None,
            "metadata": committed.metadata if committed else None,
            "assigned": tp in assigned,
            "pending": pending,
            "high_watermark": log.high_watermark if log else None,
            "last_stable_offset": log.last_stable_offset if log else None,
            "lag": lag, "lag_exact": exact,
            "held_back": data_records(log, log.last_stable_offset, log.high_watermark)[0] if log else 0,
            "held_by": _holders(engine, log, now) if log else []})
    return {"group_id": g.group_id, "state": g.state.value, "generation": g.generation,
            "protocol_type": g.protocol_type, "protocol": g.protocol, "leader": g.leader,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "session_timeout_ms": m.session_timeout_ms,
                         "assignment": _assignment(g.protocol_type, m.assignment)} for m in g.members.values()],
            "offsets": offsets, **_consumer_side(engine, g)}


async def offsets_partition(engine: "Engine", group_id: str) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``: where its offsets are
    committed, and what AddOffsetsToTxn adds to a transaction committing them."""
    return engine.groups.coordinator.partition_of(group_id)


def assigned_partitions(group: GroupMetadata) -> set[tuple[str, int]]:
    """The partitions the group's current assignment gives its members (decoded from
    the consumer protocol; none for another protocol)."""
    if group.consumer is not None:
        return {tp for m in group.consumer.members.values() for tp in m.owns()}
    return {(a["topic_name"], a["partition_id"]) for m in group.members.values()
            for a in _assignment(group.protocol_type, m.assignment) or ()}


def _lag(log: PartitionLog | None, committed: int | None, assigned: bool) -> tuple[int | None, bool]:
    """``read_committed_lag`` from the committed offset or -- for a partition assigned
    but never committed, as ``kafka-consumer-groups.sh`` counts it -- from the log
    start; None for a partition gone or neither committed nor assigned."""
    if log is None or (committed is None and not assigned):
        return None, True
    return read_committed_lag(log, log.log_start_offset if committed is None else committed)


def _assignment(protocol_type: str | None, data: bytes) -> list[dict[str, Any]] | None:
    """A member's partitions, when its group speaks the consumer protocol (whose
    assignment layout every Kafka consumer shares); None for another protocol or bytes
    that do not decode -- the coordinator itself treats them as opaque."""
    if protocol_type != consumer_protocol.PROTOCOL_TYPE:
        return None
    try:
        return [{"topic_name": t, "partition_id": p} for t, p in consumer_protocol.decode_assignment(data)]
    except SchemaError:
        return None


async def kafka_clients(engine: "Engine") -> list[dict[str, Any]]:
    """Connected Kafka clients, oldest first: who they authenticated as, who they say
    they are (client id; software name and version from ApiVersions v3+), where from,
    since when, how many requests, when the last came, and the transactional id and
    producer id they last used."""
    return sorted(({"principal": str(c.principal), "client_id": c.client_id, "client_software_name": c.software_name,
                    "client_software_version": c.software_version, "address": c.address, "host": c.host,
                    "connected_since_ms": c.since_ms, "requests": c.requests,
                    "last_request_ms": c.last_request_ms, "transactional_id": c.transactional_id,
                    "producer_id": c.producer_id}
                   for c in engine.clients), key=lambda c: (c["connected_since_ms"], c["address"]))


#: connections of one client instance open within this long of its first one: librdkafka
#: opens a bootstrap connection, then one to the broker it found, milliseconds apart
CLIENT_INSTANCE_WINDOW_MS = 5_000


async def client_instances(engine: "Engine") -> list[dict[str, Any]]:
    """Connected clients, one row per client instance, oldest first. The rule: the
    connections with the same principal, client id, host, software name and version, opened within
    :data:`CLIENT_INSTANCE_WINDOW_MS` of the instance's first one, are one instance.
    Each with the transactional ids and producer ids its connections used and the
    consumer groups whose members have its client id and host."""
    members: dict[tuple[str, str], set[str]] = {}
    for g in engine.groups.coordinator.groups.values():
        for m in g.members.values():  # a Kafka member's host is in Kafka's form, "/127.0.0.1"
            members.setdefault((m.client_id, m.client_host.removeprefix("/")), set()).add(g.group_id)
    instances: list[dict[str, Any]] = []
    for c in await kafka_clients(engine):
        key = (c["principal"], c["client_id"], c["host"], c["client_software_name"], c["client_software_version"])
        same = next((i for i in reversed(instances) if i["key"] == key
                     and c["connected_since_ms"] - i["connected_since_ms"] <= CLIENT_INSTANCE_WINDOW_MS), None)
        if same is None:
            same = {"key": key, **{k: c[k] for k in ("principal", "client_id", "host", "client_software_name",
                                                     "client_software_version", "connected_since_ms")},
                    "connections": [], "requests": 0, "last_request_ms": c["last_request_ms"],
                    "transactional_ids": set(), "producer_ids": set(),
                    "groups": sorted(members.get((c["client_id"] or "", c["host"]), ()))}
            instances.append(same)
        same["connections"].append(c["address"])
        same["requests"] += c["requests"]
        same["last_request_ms"] = max(same["last_request_ms"], c["last_request_ms"])
        same["transactional_ids"].update([c["transactional_id"]] if c["transactional_id"] else [])
        same["producer_ids"].update([c["producer_id"]] if c["producer_id"] >= 0 else [])
    return [{**{k: v for k, v in i.items() if k != "key"}, "transactional_ids": sorted(i["transactional_ids"]),
             "producer_ids": sorted(i["producer_ids"])} for i in instances]


def live_producers(engine: "Engine") -> dict[str | int, dict[str, Any]]:
    """Who is connected now, by the transactional id and by the producer id a
    connection last used: its address, client id and last request time (the latest,
    when several connections used the same id)."""
    live: dict[str | int, dict[str, Any]] = {}
    for c in engine.clients:
        seen = {"address": c.address, "client_id": c.client_id, "last_request_ms": c.last_request_ms}
        for key in (c.transactional_id, c.producer_id if c.producer_id >= 0 else None):
            if key is not None and (key not in live or live[key]["last_request_ms"] < c.last_request_ms):
                live[key] = seen
    return live


async def overview(engine: "Engine") -> dict[str, Any]:
    """What the console's first page shows: partitions with their LSO gap, and
    transaction counts by state."""
    by_state: dict[str, int] = {}
    for _, meta in engine.transactions.coordinator.list_transactions():
        by_state[meta.state.display] = by_state.get(meta.state.display, 0) + 1
    stuck = [p for t in await topics(engine) for p in t["partitions"]
             if p["last_stable_offset"] < p["high_watermark"]]
    return {"cluster_id": engine.topics.cluster_id, "topics": await topics(engine),
            "transactions_by_state": by_state, "partitions_behind": stuck}


async def storage(engine: "Engine") -> dict[str, Any]:
    """Whether writes are refused (the console's banner): the full disk, if it is,
    and every partition offline after a failed write or fsync."""
    full = engine.disk.full
    return {"full": None if full is None else {"since_ms": int(full.since * 1000),
                                               "refused_writes": full.refused_writes, "error": full.error},
            "offline": [{"topic_name": log.topic, "partition_id": log.partition, "reason": str(log.offline)}
                        for _, log in engine.partitions.logs() if log.offline is not None]}


# -- what the console asks (exactly/app/http/console/views.py); the API may use them too ----------------------

def _holder(engine: "Engine", log: PartitionLog, producer_id: int, first_offset: int,
            now_ms: int) -> dict[str, Any]:
    """One open transaction on ``log``: who owns it, since when, whether the
    coordinator knows it (a producer it does not know is a *hanging* transaction:
    only an AbortTransaction on the partition can end it) and whether it is the
    coordinator's Ongoing transaction on this partition (``in_transaction``: the
    transaction's own Abort ends it; any other holder takes the partition's)."""
    tc = engine.transactions.coordinator
    entry = log.producer_state.producers.get(producer_id)
    txn_id = tc.transactional_id_of(producer_id)
    meta = tc.describe(txn_id) if txn_id else None
    start = meta.txn_start_timestamp if meta and meta.state.is_open else None
    return {"producer_id": producer_id,
            "producer_epoch": entry.producer_epoch if entry else None,
            "transactional_id": txn_id,
            "state": meta.state.display if meta else None,
            "first_offset": first_offset,
            "holds_lso": first_offset == log.last_stable_offset,
            "transaction_start_ms": start,
            "transaction_timeout_ms": meta.txn_timeout_ms if meta else None,
            "age_ms": now_ms - start if start is not None and start >= 0 else None,
            "last_timestamp": entry.last_timestamp if entry else None,
            "hanging": txn_id is None,
            "in_transaction": meta is not None and meta.state is TransactionState.ONGOING
            and (log.topic, log.partition) in meta.partitions}


def _holders(engine: "Engine", log: PartitionLog, now_ms: int) -> list[dict[str, Any]]:
    """The open transactions on ``log`` (:func:`_holder`), the one pinning its LSO first."""
    return [_holder(engine, log, pid, first, now_ms)
            for pid, first in sorted(log.producer_state.ongoing_transactions(), key=lambda t: t[1])]


async def lso_blockers(engine: "Engine") -> list[dict[str, Any]]:
    """Every partition whose LSO is below its high watermark -- where a read_committed
    consumer waits -- with the open transactions on it, the one pinning the LSO
    first. Internal topics come last (pending transactional offsets hold theirs)."""
    now = engine.clock.now_ms()
    blocked = []
    for (name, partition_id), log in sorted(engine.partitions.logs(),
                                            key=lambda item: (item[0][0] in INTERNAL_TOPICS, item[0])):
        lso, hw = log.last_stable_offset, log.high_watermark
        if lso >= hw:
            continue
        holders = _holders(engine, log, now)
        blocked.append({"topic_name": name, "partition_id": partition_id,
                        "is_internal": name in INTERNAL_TOPICS,
                        "high_watermark": hw, "last_stable_offset": lso, "gap": hw - lso,
                        "holders": holders})
    return blocked


async def transaction_counts(engine: "Engine") -> dict[str, Any]:
    """Open transactions now (by state) and those finished since the broker started."""
    by_state = Counter(meta.state for _, meta in engine.transactions.coordinator.list_transactions())
    open_by_state = {state.display: n for state, n in by_state.items() if state.is_open}
    completed = engine.transactions.coordinator.completed
    return {"open": sum(open_by_state.values()),
            "by_state": {state.display: n for state, n in by_state.items()}, "open_by_state": open_by_state,
            "committed_since_start": completed["commit"], "aborted_since_start": completed["abort"]}


async def dashboard(engine: "Engine") -> dict[str, Any]:
    """The console's first page in one snapshot: partitions, blockers, counts."""
    return {"cluster_id": engine.topics.cluster_id, "topics": await topics(engine),
            "internal_topics": [t for t in await topics(engine, include_internal=True) if t["is_internal"]],
            "blockers": await lso_blockers(engine), "transactions": await transaction_counts(engine),
            "now_ms": engine.clock.now_ms()}


async def transaction_detail(engine: "Engine", txn_id: str) -> dict[str, Any]:
    """:func:`transaction` plus, per partition, where its open transaction starts and
    whether that pins the LSO, the group offsets pending on its commit, and why its
    transaction is being or was aborted (``abort_cause``, ``abort_actor``)."""
    detail = await transaction(engine, txn_id)
    described = engine.transactions.coordinator.describe(txn_id)
    reason = described.abort_reason if described is not None else None  # PrepareAbort, CompleteAbort
    detail["abort_cause"] = reason.cause.value if reason else None
    detail["abort_actor"] = reason.actor if reason else None
    refusal = engine.transactions.coordinator.last_refusal.get(txn_id)  # why its markers were stuck
    detail["marker_refusal"] = asdict(refusal) if refusal else None
    open_ = detail["transaction_start_ms"] is not None
    for tp in detail["partitions"]:
        log = engine.partitions.get((tp["topic_name"], tp["partition_id"]))
        entry = log.producer_state.producers.get(detail["producer_id"]) if log else None
        first = entry.current_txn_first_offset if entry and open_ else None
        tp.update(first_offset=first, high_watermark=log.high_watermark if log else None,
                  last_stable_offset=log.last_stable_offset if log else None,
                  holds_lso=first is not None and log is not None and first == log.last_stable_offset)
    detail["holds_lso"] = any(tp["holds_lso"] for tp in detail["partitions"])
    detail["pending_offsets"] = [
        {"group_id": g.group_id, "topic_name": tp[0], "partition_id": tp[1], "offset": o.offset}
        for g in sorted(engine.groups.coordinator.groups.values(), key=lambda g: g.group_id)
        for tp, o in sorted(g.pending.get(detail["producer_id"], {}).items())]
    detail["now_ms"] = engine.clock.now_ms()
    return detail


def committed_lags(engine: "Engine", g: GroupMetadata) -> dict[tuple[str, int], tuple[int, bool]]:
    """The lag and its exactness (:func:`_lag`) of each partition, still there, where
    the group has a committed offset or is assigned it: O(log n) each, no log read."""
    assigned = assigned_partitions(g)
    lags = {}
    for tp in sorted(set(g.committed) | assigned):
        committed = g.committed.get(tp)
        lag, exact = _lag(engine.partitions.get(tp), committed.offset if committed else None, tp in assigned)
        if lag is not None:
            lags[tp] = (lag, exact)
    return lags


async def groups_summary(engine: "Engine") -> list[dict[str, Any]]:
    """:func:`groups` with each group's total lag (:func:`committed_lags`), how many
    records are held back behind open transactions on its partitions, and how many
    of its offsets wait on a transaction -- each from the counts the logs keep."""
    result = []
    for g in await groups(engine):
        meta = engine.groups.coordinator.groups[g["group_id"]]
        lags = committed_lags(engine, meta)
        logs = [engine.partitions.log(*tp) for tp in lags]
        result.append({**g, "partitions": len(set(meta.committed).union(assigned_partitions(meta),
                                                                         *meta.pending.values())),
                       "lag": sum(lag for lag, _ in lags.values()) if lags else None,
                       "lag_exact": all(exact for _, exact in lags.values()),
                       "held_back": sum(data_records(log, log.last_stable_offset, log.high_watermark)[0]
                                        for log in logs),
                       "pending_offsets": sum(len(offsets) for offsets in meta.pending.values())})
    return result


def _preview(data: bytes | None, limit: int = 96) -> str | None:
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = "0x" + data[: limit // 2].hex()
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def records(engine: "Engine", name: str, partition_id: int, offset: int | None = None,
                  limit: int = 25) -> dict[str, Any]:
    """Up to ``limit`` records from ``offset`` (default: the last ones below the high
    watermark), markers included, each with what a read_committed consumer makes of
    it (``status``): ``visible`` (not transactional, below the LSO), ``committed``,
    ``aborted`` (never delivered), ``open`` (its own transaction is undecided),
    ``waits`` (decided or not transactional, but at or after the LSO: delivered once
    ``held_by``, the transaction pinning the LSO, ends), or a ``marker``."""
    log = engine.partitions.log(name, partition_id)
    hw, lso = log.high_watermark, log.last_stable_offset
    start = max(log.log_start_offset, hw - limit) if offset is None else offset
    if start < log.log_start_offset or start > hw:
        raise OffsetOutOfRangeError(f"offset {start} is outside [{log.log_start_offset}, {hw}] "
                                    f"of {name}-{partition_id}")
    aborted = AbortedTransactionTracker.of(log.collect_aborted(start, hw) if start < hw else ())
    pinning = next((h for h in _holders(engine, log, engine.clock.now_ms()) if h["holds_lso"]), None)
    held_by = pinning and {"transactional_id": pinning["transactional_id"],
                           "producer_id": pinning["producer_id"], "first_offset": pinning["first_offset"]}
    rows: list[dict[str, Any]] = []
    for header, raw in (log.batches(start) if start < hw else ()):
        if header.base_offset >= hw or len(rows) >= limit:
            break
        batch = decode_batch(raw)
        in_aborted_txn = aborted.is_aborted(header)
        for record in batch.records:
            if record.offset < start or record.offset >= hw or len(rows) >= limit:
                continue
            row: dict[str, Any] = {
                "offset": record.offset, "timestamp": record.timestamp, "producer_id": header.producer_id,
                "producer_epoch": header.producer_epoch, "transactional": header.is_transactional,
                "key": _preview(record.key), "value": _preview(record.value), "marker": None, "held_by": None}
            if header.is_control:
                control, _ = decode_control_record(record)
                row.update(status="marker", marker=getattr(control, "name", str(control)), key=None, value=None)
            elif in_aborted_txn:
                row["status"] = "aborted"
            elif header.is_transactional and _in_open_transaction(log, header.producer_id, record.offset):
                row["status"] = "open"
            elif record.offset >= lso:
                row.update(status="waits", held_by=held_by)
            else:
                row["status"] = "committed" if header.is_transactional else "visible"
            rows.append(row)
    return {"topic_name": name, "partition_id": partition_id, "start_offset": start,
            "log_start_offset": log.log_start_offset, "high_watermark": hw,
            "last_stable_offset": lso, "held_by": held_by, "records": rows}


def _in_open_transaction(log: PartitionLog, producer_id: int, offset: int) -> bool:
    entry = log.producer_state.producers.get(producer_id)
    first = entry.current_txn_first_offset if entry else None
    return first is not None and offset >= first


def _oldest_transaction_age_ms(engine: "Engine", log: PartitionLog, now_ms: int) -> int:
    """How long the oldest transaction open on ``log`` has been open (0: none). Its
    start is the coordinator's; a producer no coordinator knows (a hanging
    transaction) has only its last write on the partition to go by."""
    tc = engine.transactions.coordinator
    starts = []
    for producer_id, _ in log.producer_state.ongoing_transactions():
        txn_id = tc.transactional_id_of(producer_id)
        meta = tc.txns.get(txn_id) if txn_id is not None else None
        if meta is not None and meta.state.is_open and meta.txn_start_timestamp >= 0:
            starts.append(meta.txn_start_timestamp)
        elif (entry := log.producer_state.producers.get(producer_id)) is not None:
            starts.append(entry.last_timestamp)
    return max(0, now_ms - min(starts)) if starts else 0


def _group_lags(engine: "Engine") -> list[tuple[str, str, str, int]]:
    """``(group, topic, partition, lag)`` for every committed offset of a partition that
    exists, from the counts the logs keep (``read_models.committed_lags``): no log read on
    the loop per scrape."""
    groups = engine.groups.coordinator.groups
    return [(group_id, topic, str(partition), lag) for group_id in sorted(groups)
            for (topic, partition), (lag, _) in committed_lags(engine, groups[group_id]).items()]


def metrics(engine: "Engine") -> dict[str, Any]:
    """Everything a ``/metrics`` scrape reports (``exactly/app/http/metrics.py``), read at one
    instant: the broker state and the engine's counters."""
    counters = engine.counters
    return {
        **_partition_metrics(engine),
        "counters": (counters.produce_requests, counters.produced_records, counters.fetch_requests,
                     counters.fetched_bytes, counters.timed_out_transactions, counters.admin_aborted_transactions),
        "fenced": dict(counters.fenced_producers),
        "latency": (_histogram(counters.produce_latency), _histogram(counters.fsync_latency),
                    _histogram(counters.fetch_latency)),
        "end_txn": {outcome: _histogram(h) for outcome, h in counters.end_txn_latency.items()},
        "kafka_requests": {api: _histogram(h) for api, h in counters.kafka_requests.items()},
        "kafka_connections": len(engine.clients),
        "limit_refusals": dict(counters.limit_refusals),
        "authentication_failures": dict(counters.authentication_failures),
        "authorization_denials": dict(counters.authorization_denials),
    }


def _histogram(histogram: LatencyHistogram) -> tuple[list[int], float]:
    return list(histogram.counts), histogram.total_s


def _partition_metrics(engine: "Engine") -> dict[str, Any]:
    """Per partition, late transactions, group lags, transactional ids by open state."""
    tc = engine.transactions.coordinator
    by_state = {state.display: 0 for state in TransactionState if state.is_open}
    now = engine.clock.now_ms()
    two_phase_ages = []  # KIP-939: open two-phase transactions, which no timeout ends
    for meta in tc.txns.values():
        if meta.state.is_open:
            by_state[meta.state.display] += 1
            if meta.txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS and meta.txn_start_timestamp >= 0:
                two_phase_ages.append((now - meta.txn_start_timestamp) / 1000)
    return {
        "partitions": [(log.topic, str(log.partition), len(log.producer_state.producers), log.high_watermark,
                        log.last_stable_offset, log.log_start_offset, log.high_watermark - log.last_stable_offset,
                        _oldest_transaction_age_ms(engine, log, now) / 1000) for _, log in engine.partitions.logs()],
        "late": sum(log.producer_state.has_late_transaction(now, engine.config.transaction_max_timeout_ms)
                    for _, log in engine.partitions.logs()),
        "group_lags": _group_lags(engine),
        "transactional_ids": by_state,
        "two_phase": (len(two_phase_ages), max(two_phase_ages, default=0)),
        "completed": dict(tc.completed),
    }


def open_transaction_records(engine: "Engine") -> list[tuple[str, str, int, Record]]:
    """``(transactional id, topic, partition, record)`` for every data record of the
    open transactions of transactional ids, on the topics clients write."""
    return list(_open_transaction_records(engine))


def _open_transaction_records(engine: "Engine") -> Iterator[tuple[str, str, int, Record]]:
    for _, log_ in engine.partitions.logs():
        first_offsets = dict(log_.producer_state.ongoing_transactions())
        if log_.topic in INTERNAL_TOPICS or not first_offsets:
            continue
        for header, batch in log_.batches(min(first_offsets.values())):
            first = first_offsets.get(header.producer_id)
            txn_id = engine.transactions.transactional_id_of(header.producer_id)
            if first is None or header.base_offset < first or header.is_control or txn_id is None:
                continue
            for record in decode_batch(batch).records:
                yield txn_id, log_.topic, log_.partition, record
