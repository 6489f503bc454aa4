"""Every HTTP shape, declared once as a pydantic model, with the limits it obeys.

Request models validate what a client sends (``exactly/app/http/api/validation.py`` turns a
failure into INVALID_REQUEST, 400, naming the field: ``records[2].partition_id``);
response models state what the handlers answer. ``exactly/app/http/api/document.py`` derives the
OpenAPI document from both, so the document and the checks cannot disagree. The
bounds are Kafka's wire types: int16 epochs, int32 partitions and sequences, int64
offsets and producer ids. Request models are strict (no ``"1"`` for 1, no ``true``
for 1) and ignore unknown fields; null in an optional field means absent.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime
import typing
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, field_validator

from exactly.app.engine import READ_COMMITTED, READ_UNCOMMITTED
from exactly.app.engine.audit import ViolationKind
from exactly.app.engine.topics import MAX_PARTITIONS_PER_REQUEST
from exactly.app.engine.views import ConfigSource
from exactly.app.faults.events import Coordinator, Event
from exactly.app.faults.fault import Action
from exactly.app.http.api.codec import MAX_TIME_MS
from exactly.app.security.acl import SUPPORTED_OPERATIONS, AclOperation, AclPermissionType, PatternType, ResourceType
from exactly.coordinator.consumer_group import ConsumerGroupState
from exactly.coordinator.group_metadata import GroupState
from exactly.coordinator.transaction_state import AbortCause, TransactionState
from exactly.storage.log_config import LogConfig
from exactly.storage.log_manager import LEGAL_TOPIC_NAME, MAX_TOPIC_NAME_LENGTH
from exactly.storage.errors import error_names
from exactly.storage.record_batch import MAX_SEQUENCE

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
#: the longest string field (Kafka's STRING: an int16 length)
MAX_STRING = 32767
#: Kafka's fetch.max.bytes default: the most one read may ask for
MAX_FETCH_BYTES = 52_428_800
DEFAULT_FETCH_BYTES = 1 << 20
#: the proxy's produce.batch.maximum.entries default
MAX_BATCH_ENTRIES = 10
#: the most records or offsets one transactional call may carry
MAX_ITEMS = 10_000
#: the most configs one call may set
MAX_CONFIGS = 100
DEFAULT_TXN_TIMEOUT_MS = 60_000
MAX_HISTORY = 1000
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)
STATES = tuple(state.display for state in TransactionState)
OUTCOMES = tuple(sorted({state.outcome.name for state in TransactionState if state.outcome is not None}))
ABORT_CAUSES = tuple(cause.value for cause in AbortCause)
#: a classic group's states, then those only a KIP-848 group has
GROUP_STATES = tuple(dict.fromkeys([*(state.name for state in GroupState),
                                    *(state.name for state in ConsumerGroupState)]))
#: Confluent's ConsumerGroupType values
GROUP_TYPES = ("CLASSIC", "CONSUMER", "SHARE", "UNKNOWN")
CONFIG_NAMES = tuple(sorted(LogConfig().to_kafka()))
#: a topic's operations, as the proxy spells ``authorized_operations``
TOPIC_OPERATIONS = tuple(sorted(op.name for op in SUPPORTED_OPERATIONS[ResourceType.TOPIC]))
CONFIG_SOURCES = tuple(source.name for source in ConfigSource)
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
BATCH_ID = r"^[0-9a-zA-Z_-]{1,80}$"
OFFSET_TIMESTAMP = r"^(latest|earliest|[0-9]{1,19})$"
IDEMPOTENCY_KEY = r"^[!-~]{1,255}$"
#: the most ACLs one batch creates, and the longest principal and host: a batch at its
#: limits stays below MAX_CONTENT_LENGTH, so a too-long batch is refused as one (400)
MAX_ACL_BATCH = 100
MAX_PRINCIPAL = 1000
MAX_HOST = 255
#: Kafka's ACL enums by name, as REST v3 spells them; a filter may say ANY (and MATCH for
#: the pattern), an ACL may not (nor UNKNOWN)
FILTER_ONLY = ("UNKNOWN", "ANY", "MATCH")
ACL_RESOURCE_TYPES = tuple(t.name for t in ResourceType if t.name != "UNKNOWN")
ACL_PATTERN_TYPES = tuple(t.name for t in PatternType if t.name != "UNKNOWN")
ACL_OPERATIONS = tuple(t.name for t in AclOperation if t.name != "UNKNOWN")
ACL_PERMISSIONS = tuple(t.name for t in AclPermissionType if t.name != "UNKNOWN")


# -- field types --------------------------------------------------------------------------


def _digits(value: Any) -> Any:
    """A query parameter's decimal digits as an int (anything else is left to fail)."""
    return int(value) if isinstance(value, str) and re.fullmatch(r"[0-9]{1,19}", value) else value


def Text(min_length: int = 1, max_length: int = MAX_STRING, **extra: Any) -> Any:  # noqa: N802 (a type)
    """A string of ``min_length`` to ``max_length`` characters (pydantic refuses a lone
    surrogate escaped in the JSON, ``"\\ud800"``: it is not Unicode)."""
    return Annotated[str, Field(min_length=min_length, max_length=max_length, **extra)]


def Int(minimum: int = 0, maximum: int = INT64_MAX, **extra: Any) -> Any:  # noqa: N802 (a type)
    return Annotated[int, Field(ge=minimum, le=maximum, **extra)]


def QueryInt(minimum: int = 0, maximum: int = INT64_MAX) -> Any:  # noqa: N802 (a type)
    return Annotated[int, Field(ge=minimum, le=maximum), BeforeValidator(_digits)]


def _upper(value: Any) -> Any:
    """An enum name in any case (``topic`` for ``TOPIC``), as the proxy takes it."""
    return value.upper() if isinstance(value, str) else value


def AclEnum(names: tuple[str, ...], acl: bool = False) -> Any:  # noqa: N802 (a type)
    """One of Kafka's names (any case); ``acl``: without the filter-only ones."""
    allowed = tuple(n for n in names if not (acl and n in FILTER_ONLY))
    return Annotated[Literal[allowed], BeforeValidator(_upper)]


#: checked for its length here; its characters are the engine's (INVALID_TOPIC_EXCEPTION)
TopicName = Annotated[str, Field(min_length=1, max_length=MAX_TOPIC_NAME_LENGTH,
                                 json_schema_extra={"pattern": LEGAL_TOPIC_NAME})]
ConfigName = Text(max_length=MAX_TOPIC_NAME_LENGTH)
#: a name in a path: any non-empty string
Name = Annotated[str, Field(min_length=1)]
PartitionId = Int(maximum=INT32_MAX)
Epoch = Int(maximum=INT16_MAX)
TimestampMs = Int(-1, description="milliseconds since the epoch")
Isolation = Literal[ISOLATION_LEVELS]
Source = Literal[CONFIG_SOURCES]


class Request(BaseModel):
    """A request shape: strict types, unknown fields ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")


class Query(Request):
    """A query string's shape (a list field takes the repeated parameter)."""


# -- requests -----------------------------------------------------------------------------


class Config(Request):
    name: ConfigName
    value: Optional[Text(0)] = Field(None, description="null: the default")


class CreateTopic(Request):
    topic_name: TopicName
    partitions_count: Optional[Int(1, INT32_MAX)] = Field(None, description=(
        f"default: the broker's num.partitions; more than {MAX_PARTITIONS_PER_REQUEST} is POLICY_VIOLATION, "
        f"as is going past exactly.max.partitions"))
    replication_factor: Optional[Int(-1, INT16_MAX)] = Field(None, description=(
        "one node: 1 (or -1, the default); more is accepted, with one replica, under "
        "exactly.replication.factor.ignore=true"))
    configs: list[Config] = Field(default_factory=list, max_length=MAX_CONFIGS, description=(
        "topic configs by Kafka name, e.g. cleanup.policy, retention.ms, compression.type"))
    validate_only: Optional[bool] = Field(None, description="check only: nothing is created")


class UpdatePartitionCount(Request):
    partitions_count: Int(1, INT32_MAX, description=(
        f"growing by more than {MAX_PARTITIONS_PER_REQUEST}, or past exactly.max.partitions, is POLICY_VIOLATION"))


class UpdateConfig(Request):
    value: Text(0)


class AlterConfig(Request):
    name: ConfigName
    value: Optional[Text(0)] = Field(None, description="required for SET")
    operation: Optional[Literal["SET", "DELETE"]] = Field(None, description="default SET")


class AlterConfigs(Request):
    data: list[AlterConfig] = Field(max_length=MAX_CONFIGS)
    validate_only: Optional[bool] = Field(None, description="check only: nothing changes")


class BinaryData(Request):
    type: Literal["BINARY"]
    data: Annotated[str, Field(pattern=BASE64, description="base64")]


class StringData(Request):
    type: Literal["STRING"]
    data: Text(0, INT32_MAX)


class JsonData(Request):
    type: Literal["JSON"]
    data: Any = Field(description="any JSON value")


RecordData = Annotated[Union[BinaryData, StringData, JsonData], Field(discriminator="type", description=(
    "a key or value: BINARY (base64), STRING (UTF-8) or JSON (any JSON value); null or absent for none"))]


class Header(Request):
    name: Text(0, INT32_MAX)
    value: Optional[Annotated[str, Field(pattern=BASE64, description="base64")]] = None


class ProduceRecord(Request):
    partition_id: Optional[PartitionId] = Field(None, description="default: murmur2 of the key, or any partition")
    key: Optional[RecordData] = None
    value: Optional[RecordData] = None
    headers: Optional[list[Header]] = None
    timestamp: Optional[Union[Int(maximum=MAX_TIME_MS), Annotated[str, Field(json_schema_extra={
        "format": "date-time"})]]] = Field(None, description=(
            "ISO 8601 with a zone (as the proxy takes it), or milliseconds since the epoch; default: now"))

    @field_validator("timestamp", mode="before")
    @classmethod
    def _milliseconds(cls, value: Any) -> Any:
        """An ISO 8601 time as milliseconds since the epoch (then checked as those)."""
        if not isinstance(value, str):
            return value
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"not an ISO 8601 time: {value!r:.50}") from None
        if moment.tzinfo is None:
            raise ValueError("an ISO 8601 time needs a time zone (e.g. Z)")
        return round(moment.timestamp() * 1000)


class ProduceRequest(ProduceRecord):
    producer_id: Optional[Int()] = Field(None, description=(
        "with producer_epoch and sequence: an idempotent producer's batch, deduplicated on retry"))
    producer_epoch: Optional[Epoch] = None
    sequence: Optional[Int(maximum=MAX_SEQUENCE)] = None


class BatchEntry(ProduceRequest):
    id: Annotated[str, Field(pattern=BATCH_ID)]


class ProduceBatch(Request):
    entries: list[BatchEntry] = Field(min_length=1, max_length=MAX_BATCH_ENTRIES)


class InitTransaction(Request):
    transaction_timeout_ms: Int(1, INT32_MAX) = Field(DEFAULT_TXN_TIMEOUT_MS, description=(
        "at most transaction.max.timeout.ms"))


class RestartServer(Request):
    clean: bool = Field(True, description=(
        "true: as exactly serve shuts down and starts; false: as a SIGKILL would leave the data directory"))


class ProducerFields(Request):
    producer_id: Int()
    producer_epoch: Epoch


class TransactionRecord(ProduceRecord):
    topic_name: TopicName


class TransactionRecords(ProducerFields):
    records: list[TransactionRecord] = Field(min_length=1, max_length=MAX_ITEMS)


class TransactionOffset(Request):
    topic_name: TopicName
    partition_id: PartitionId
    offset: Int()
    metadata: Optional[Text(0)] = None


class TransactionOffsets(ProducerFields):
    group_id: Text()
    generation_id: Optional[Int(-1, INT32_MAX)] = Field(None, description=(
        "with member_id: KIP-447 fencing; -1 or absent: none"))
    member_id: Optional[Text(0)] = None
    group_instance_id: Optional[Text()] = None
    offsets: list[TransactionOffset] = Field(min_length=1, max_length=MAX_ITEMS)


class ReadQuery(Query):
    offset: Optional[QueryInt()] = Field(None, description="first offset to read; default: the log start")
    max_bytes: QueryInt(1, MAX_FETCH_BYTES) = Field(DEFAULT_FETCH_BYTES, description=(
        "at most this many bytes of batches (at least one batch is returned)"))
    isolation_level: Isolation = Field(READ_COMMITTED, description=(
        "read_committed (default): only committed records, below the LSO"))


class OffsetsQuery(Query):
    timestamp: Annotated[str, Field(pattern=OFFSET_TIMESTAMP)] = Field("latest", description=(
        "latest (the LSO under read_committed), earliest, or milliseconds"))
    isolation_level: Isolation = Field(READ_COMMITTED, description=(
        "read_committed (default): only committed records, below the LSO"))


class PartitionOffsetsQuery(Query):
    offset_type: Literal["earliest_and_latest"] = Field("earliest_and_latest", description=(
        "the only one the proxy has"))
    isolation_level: Isolation = Field(READ_UNCOMMITTED, description=(
        "read_uncommitted (default, as the proxy): latest is the high watermark; read_committed: the LSO"))


class TransactionsQuery(Query):
    state: list[Literal[STATES]] = Field(default_factory=list,
                                         description="only these states (repeatable)")


class TopicQuery(Query):
    include_authorized_operations: Literal["true", "false"] = Field("false", description=(
        "true: each topic's authorized_operations lists what the caller may do on it (else empty, as the proxy)"))


class TransactionQuery(Query):
    history_limit: QueryInt(0, MAX_HISTORY) = Field(20, description="finished transactions to show")


class AuditQuery(Query):
    input: TopicName = Field(description="the topic the group consumes")
    output: TopicName = Field(description="the topic its transactions write")
    records_per_input: Optional[QueryInt(1, INT32_MAX)] = Field(None, description=(
        "output records a transaction writes per input record (1 for a 1:1 transform): then a transaction that "
        "wrote fewer records than its input ranges hold is a GAP, more a DUPLICATE; with lineage, the output "
        "records each input record must have"))
    until: list[Annotated[str, Field(pattern=r"^[0-9]{1,10}:[0-9]{1,19}$")]] = Field(
        default_factory=list, max_length=MAX_ITEMS, description=(
            "PARTITION:OFFSET (repeatable): audit that input partition up to OFFSET instead of its high watermark"))


class AclFilter(Query):
    """Which ACLs a search lists or a delete removes (Kafka's AclBindingFilter): ANY or
    an absent name, principal or host matches every one; pattern_type MATCH matches
    every pattern that applies to resource_name (literal, ``*`` and prefixes)."""

    resource_type: AclEnum(ACL_RESOURCE_TYPES) = "ANY"
    resource_name: Optional[Text(0)] = Field(None, description="absent or empty: any")
    pattern_type: AclEnum(ACL_PATTERN_TYPES) = "ANY"
    principal: Optional[Text(0, MAX_PRINCIPAL)] = Field(None, description=(
        "Type:name, e.g. User:alice; absent or empty: any"))
    host: Optional[Text(0, MAX_HOST)] = Field(None, description="absent or empty: any")
    operation: AclEnum(ACL_OPERATIONS) = "ANY"
    permission: AclEnum(ACL_PERMISSIONS) = "ANY"


class CreateAcl(Request):
    """One ACL (Kafka's AclBinding)."""

    resource_type: AclEnum(ACL_RESOURCE_TYPES, acl=True)
    resource_name: Text(description="a name, a prefix (PREFIXED), or * for every resource of the type")
    pattern_type: AclEnum(ACL_PATTERN_TYPES, acl=True)
    principal: Text(max_length=MAX_PRINCIPAL, description="Type:name, e.g. User:alice; User:* is everyone")
    host: Text(max_length=MAX_HOST) = Field("*", description="the client's address; * (default) is every host")
    operation: AclEnum(ACL_OPERATIONS, acl=True)
    permission: AclEnum(ACL_PERMISSIONS, acl=True)


class CreateAcls(Request):
    data: list[CreateAcl] = Field(min_length=1, max_length=MAX_ACL_BATCH)


class PathParameters(Query):
    """Every path parameter, for the document: Flask's converters check the integers,
    the engine the names (an unknown one is 404)."""

    cluster_id: str = Field(description="the broker's cluster id (GET /v3/clusters)")
    topic_name: TopicName
    partition_id: PartitionId
    transactional_id: Name
    group_id: Name
    producer_id: Int()
    broker_id: PartitionId
    name: Name
    consumer_id: Name
    fault_id: Int(1)


class IdempotencyHeader(Query):
    """The header of a retriable write (``exactly/app/http/api/idempotency.py`` checks it)."""

    idempotency_key: Optional[Annotated[str, Field(pattern=IDEMPOTENCY_KEY)]] = Field(
        None, alias="Idempotency-Key", description=(
            "a retry with the same key and body returns the first answer and appends nothing; remembered for "
            "this broker process's lifetime (bounded), and for a transaction's records call also across a "
            "restart while the transaction is open"))


FAULT_ACTIONS = tuple(action.value for action in Action)
FAULT_EVENTS = tuple(event.value for event in Event)
COORDINATORS = tuple(coordinator.value for coordinator in Coordinator)
KAFKA_ERROR_NAMES = tuple(error_names())


class AddFault(Request):
    """A fault (``exactly/app/faults/fault.py``): every field given must match; the first
    installed fault that matches a request acts on it."""

    action: Optional[Literal[FAULT_ACTIONS]] = Field(None, description=(
        "default: error with an error, delay with a delay_ms"))
    api: list[Text(max_length=64)] = Field(default_factory=list, max_length=100, description=(
        "Kafka API names (Produce, EndTxn) or keys; empty: any"))
    client_id: Optional[Text(0)] = None
    principal: Optional[Text()] = Field(None, examples=["User:alice"])
    topic: Optional[TopicName] = None
    partition: Optional[PartitionId] = None
    group: Optional[Text()] = Field(None, description="a group id, or * for any request naming a group")
    transactional_id: Optional[Text()] = Field(None, description="an id, or * for any request naming one")
    # a name the broker knows (the schema lists them); an unknown one is refused with the closest names
    error: Optional[Text(max_length=64, json_schema_extra={"enum": list(KAFKA_ERROR_NAMES)})] = Field(
        None, examples=["NOT_ENOUGH_REPLICAS"])
    delay_ms: Int(0, INT32_MAX) = 0
    count: Optional[Int(1, INT32_MAX)] = Field(None, description="the first N matching requests; null: every one")
    probability: Annotated[float, Field(gt=0, le=1)] = Field(1.0, description="each matching request, drawn "
                                                              "from a generator seeded with seed")
    seed: Optional[Int(0)] = None
    duration_ms: Optional[Int(1, INT32_MAX)] = Field(None, description="removed this long after installation")


class AddFaultEvent(Request):
    event: Literal[FAULT_EVENTS]
    duration_ms: Optional[Int(1, INT32_MAX)] = Field(None, description=(
        "how long; null (pause and the coordinator events need one): until removed"))
    coordinator: Literal[COORDINATORS] = "transaction"


# -- responses ----------------------------------------------------------------------------


class Error(BaseModel):
    error_code: Int(400, 59999, description=("the Confluent REST proxy's code (40403 unknown topic, 40002 bad "
                                             "request, ...), else the HTTP status"))
    message: str
    error_name: str = Field(description="Kafka's error name, or the HTTP status's",
                            examples=["INVALID_PRODUCER_EPOCH"])
    kafka_error_code: Optional[Int(-1, INT16_MAX)] = Field(description=(
        "Kafka's error code; null for errors that are not Kafka's"))


class ResourceMetadata(BaseModel):
    self: str = Field(json_schema_extra={"format": "uri"})
    resource_name: Optional[str]


class ListMetadata(BaseModel):
    self: str = Field(json_schema_extra={"format": "uri"})
    next: Optional[str]


class Related(BaseModel):
    related: str = Field(json_schema_extra={"format": "uri"})


class Resource(BaseModel):
    metadata: ResourceMetadata


@functools.cache
def listing(item: type[BaseModel]) -> type[BaseModel]:
    """REST v3's list of ``item`` resources: ``{"kind": "<item's kind>List", "metadata", "data": [...]}``."""
    (kind,) = typing.get_args(item.model_fields["kind"].annotation)
    # a type made at run time (a Literal of the computed name, a list of ``item``): Any to mypy
    fields: dict[str, Any] = {"kind": (Literal[f"{kind}List"], ...), "metadata": (ListMetadata, ...),
                              "data": (list[item], ...)}
    return create_model(f"{item.__name__}List", **fields)


class Cluster(Resource):
    kind: Literal["KafkaCluster"]
    cluster_id: str
    controller: Related
    brokers: Related
    broker_configs: Related
    partition_reassignments: Related
    topics: Related
    consumer_groups: Related
    acls: Related
    transactions: Related


class Broker(Resource):
    kind: Literal["KafkaBroker"]
    cluster_id: str
    broker_id: PartitionId
    host: Optional[str] = Field(description="the Kafka host clients are told to connect to (advertised.listeners, else the listener's address); null when no Kafka listener serves")
    port: Optional[Int(maximum=65535)]
    rack: Optional[str]
    configs: Related
    partition_replicas: Related


class Replica(Resource):
    kind: Literal["KafkaReplica"]
    cluster_id: str
    topic_name: str
    partition_id: PartitionId
    broker_id: PartitionId
    is_leader: bool
    is_in_sync: bool
    broker: Related


class EffectiveConfig(BaseModel):
    name: Literal[CONFIG_NAMES]
    value: str
    is_default: bool
    source: Source
    is_read_only: bool
    is_sensitive: bool


class Topic(Resource):
    kind: Literal["KafkaTopic"]
    cluster_id: str
    topic_name: str
    topic_id: Optional[str] = Field(description="null in a validate_only answer")
    is_internal: bool
    replication_factor: Int(1, 1)
    partitions_count: Int(1, INT32_MAX)
    partitions: Related
    configs: Related
    partition_reassignments: Related
    authorized_operations: list[Literal[TOPIC_OPERATIONS]] = Field(description=(
        "with include_authorized_operations=true, what the caller may do on the topic (every operation while "
        "no authorizer is configured); else empty"))
    effective_configs: Optional[list[EffectiveConfig]] = Field(description=(
        "every config, its value and where it comes from (Exactly's); null in a validate_only answer"))


class ConfigSynonym(BaseModel):
    name: str
    value: Optional[str]
    source: Source


class TopicConfig(EffectiveConfig):
    kind: Literal["KafkaTopicConfig"]
    metadata: ResourceMetadata
    cluster_id: str
    topic_name: str
    synonyms: list[ConfigSynonym]


class ClusterConfig(Resource):
    """A dynamic cluster-wide broker config (Kafka's DYNAMIC_DEFAULT_BROKER_CONFIG)."""

    kind: Literal["KafkaClusterConfig"]
    cluster_id: str
    config_type: Literal["BROKER"]
    name: str
    value: Optional[str]
    is_default: bool
    source: Source
    is_read_only: bool
    is_sensitive: bool
    synonyms: list[ConfigSynonym]


class Reassignment(Resource):
    kind: Literal["KafkaReassignment"]
    cluster_id: str
    topic_name: str
    partition_id: PartitionId
    adding_replicas: list[PartitionId]
    removing_replicas: list[PartitionId]
    replicas: Related


class BrokerConfig(Resource):
    kind: Literal["KafkaBrokerConfig"]
    cluster_id: str
    broker_id: PartitionId
    name: str
    value: Optional[str] = Field(description="null for a sensitive one, and for one whose Kafka default is null "
                                             "(log.retention.ms: log.retention.hours says it) until it is given")
    is_default: bool
    source: Source
    is_read_only: bool
    is_sensitive: bool
    synonyms: list[ConfigSynonym]


class OpenTransaction(BaseModel):
    producer_id: Int()
    first_offset: Int()
    transactional_id: Optional[str] = Field(description=(
        "null: no coordinator knows the producer (hanging), or a transactional id the principal may not Describe"))
    transaction_start_ms: Optional[TimestampMs]
    transaction_timeout_ms: Optional[Int()]


class Partition(Resource):
    kind: Literal["KafkaPartition"]
    cluster_id: str
    topic_name: str
    partition_id: PartitionId
    log_start_offset: Int()
    high_watermark: Int(description="the durable end of the log")
    last_stable_offset: Int(description="read_committed consumers read up to here")
    log_end_offset: Int()
    size_bytes: Int()
    open_transactions: list[OpenTransaction] = Field(description="what holds the LSO back")
    leader: Related
    replicas: Related
    reassignment: Related
    records: Related
    producers: Related


class Connection(BaseModel):
    """The Kafka connection that last used a producer or transactional id, while it is open."""

    address: str = Field(description="the client's host:port")
    client_id: Optional[str]
    last_request_ms: TimestampMs


class Producer(Resource):
    kind: Literal["KafkaProducer"]
    cluster_id: str
    topic_name: str
    partition_id: PartitionId
    producer_id: Int()
    producer_epoch: Int(-1, INT16_MAX)
    last_sequence: Int(-1, INT32_MAX)
    last_timestamp: TimestampMs
    coordinator_epoch: Int(-1, INT32_MAX)
    current_transaction_start_offset: Int(-1, description="-1: no open transaction")
    transactional_id: Optional[str] = Field(description=(
        "null: an idempotent producer, or a transactional id the principal may not Describe"))
    connection: Optional[Connection] = Field(description="null: no open Kafka connection uses the producer")


class DataSummary(BaseModel):
    type: Literal["BINARY", "JSON", "STRING"]
    size: Int()


class Delivered(BaseModel):
    cluster_id: str
    topic_name: str
    partition_id: PartitionId
    offset: Int()
    timestamp: Optional[str] = Field(json_schema_extra={"format": "date-time"},
                                     description="ISO 8601 UTC, as the proxy sends it")
    key: Optional[DataSummary]
    value: Optional[DataSummary]


class ProduceResponse(Delivered):
    error_code: Int(200, 200)


class BatchSuccess(Delivered):
    id: str


class BatchFailure(Error):
    id: str


class ProduceBatchResponse(BaseModel):
    successes: list[BatchSuccess]
    failures: list[BatchFailure]


class PartitionOffsets(Resource):
    kind: Literal["KafkaPartitionWithOffsets"]
    cluster_id: str
    topic_name: str
    partition_id: PartitionId
    earliest_offset: Int(-1)
    latest_offset: Int(-1, description="the high watermark (the LSO with isolation_level=read_committed)")
    isolation_level: Isolation


class ProducerId(BaseModel):
    producer_id: Int()
    producer_epoch: Epoch


class ConsumedData(BaseModel):
    type: Literal["BINARY"]
    data: str = Field(description="base64")


class ConsumedHeader(BaseModel):
    name: str
    value: Optional[str] = Field(description="base64")


class ConsumedRecord(BaseModel):
    offset: Int()
    timestamp: TimestampMs
    key: Optional[ConsumedData]
    value: Optional[ConsumedData]
    headers: list[ConsumedHeader]
    producer_id: Int(-1)
    is_transactional: bool


class RecordList(BaseModel):
    topic_name: str
    partition_id: PartitionId
    isolation_level: Isolation
    high_watermark: Int()
    last_stable_offset: Int()
    log_start_offset: Int()
    next_offset: Int(description="where the next read continues")
    records: list[ConsumedRecord]


class Offsets(BaseModel):
    topic_name: str
    partition_id: PartitionId
    isolation_level: Isolation
    offset: Int(-1, description="-1: no record at or after the timestamp")
    timestamp: Int(-1, description="the found record's timestamp; -1 for latest and earliest")


class TopicPartition(BaseModel):
    topic_name: str
    partition_id: PartitionId


class GroupMember(BaseModel):
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    session_timeout_ms: Int()
    assignment: Optional[list[TopicPartition]] = Field(description=(
        "the member's partitions; null for a group of another protocol than the consumer's"))
    member_epoch: Optional[Int(-2, INT32_MAX)] = Field(None, description="a KIP-848 group's member epoch")
    member_state: Optional[Literal["STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"]] = Field(
        None, description="where a KIP-848 member is in its reconciliation")
    pending_revocation: Optional[list[TopicPartition]] = Field(None, description=(
        "a KIP-848 member's partitions it still owns and must revoke"))
    target_assignment: Optional[list[TopicPartition]] = Field(None, description=(
        "a KIP-848 member's partitions in the group's target assignment, which it converges on"))
    member_type: Optional[Literal["classic", "consumer"]] = Field(None, description=(
        "a KIP-848 group's member: of the consumer protocol, or of the classic one (JoinGroup/SyncGroup, "
        "let in by an online migration: KIP-1099's member type)"))


class PendingOffset(BaseModel):
    producer_id: Int()
    transactional_id: Optional[str] = Field(description="null: a transactional id the principal may not Describe")
    offset: Int()


class HoldingTransaction(BaseModel):
    producer_id: Int()
    producer_epoch: Optional[Int(-1, INT16_MAX)]
    transactional_id: Optional[str] = Field(None, description=(
        "null: no coordinator knows the producer, or a transactional id the principal may not Describe"))
    state: Optional[str] = None
    first_offset: Int()
    holds_lso: bool = Field(description="its first offset is the LSO: it is the one holding the partition back")
    transaction_start_ms: Optional[TimestampMs]
    transaction_timeout_ms: Optional[Int(-1, INT32_MAX)]
    age_ms: Optional[Int(-INT64_MAX)]
    last_timestamp: Optional[TimestampMs]
    hanging: bool = Field(description="no coordinator knows the producer: only an abort on the partition ends it")
    in_transaction: bool = Field(description="the coordinator's Ongoing transaction covers this partition")


class GroupOffset(BaseModel):
    topic_name: str
    partition_id: PartitionId
    committed_offset: Optional[Int()]
    metadata: Optional[str]
    assigned: bool = Field(description="a member of the group is assigned the partition")
    pending: list[PendingOffset] = Field(description="inside open transactions")
    high_watermark: Optional[Int()]
    last_stable_offset: Optional[Int()]
    lag: Optional[Int()] = Field(description=(
        "records a read_committed consumer would still receive: data records from the committed offset to "
        "the LSO, markers and aborted records excluded"))
    lag_exact: bool = Field(description=(
        "false only right after the broker started, while it counts the batches it opened with (an upper "
        "bound meanwhile)"))
    held_back: Int(description=("data records from the LSO to the high watermark (aborted ones not counted): "
                                "they wait for the open transactions in held_by"))
    held_by: list[HoldingTransaction] = Field(description="open transactions, the one pinning the LSO first")


class ConsumerGroup(Resource):
    kind: Literal["KafkaConsumerGroup"]
    cluster_id: str
    consumer_group_id: str
    is_simple: bool
    #: the rebalance protocol the group uses (Confluent's ConsumerGroupType): CLASSIC or
    #: CONSUMER (KIP-848)
    type: Literal[GROUP_TYPES]
    #: a consumer group with members of the classic protocol in it (an online migration)
    is_mixed_consumer_group: bool
    partition_assignor: str
    state: Literal[GROUP_STATES]
    coordinator: Related
    consumers: Related
    lag_summary: Related
    generation_id: Int(-1, INT32_MAX)
    protocol_type: Optional[str]


class ConsumerGroupSummary(ConsumerGroup):
    members_count: Int()


class ConsumerGroupDetail(ConsumerGroup):
    assignment_epoch: Optional[Int(0, INT32_MAX)] = Field(None, description=(
        "a KIP-848 group's target assignment epoch (its generation_id is the group epoch)"))
    protocol: Optional[str]
    leader: Optional[str]
    members: list[GroupMember]
    offsets: list[GroupOffset]


class Consumer(Resource):
    kind: Literal["KafkaConsumer"]
    cluster_id: str
    consumer_group_id: str
    consumer_id: str
    instance_id: Optional[str]
    client_id: str
    assignments: Related
    client_host: str
    session_timeout_ms: Int()


class ConsumerAssignment(Resource):
    kind: Literal["KafkaConsumerAssignment"]
    cluster_id: str
    consumer_group_id: str
    consumer_id: str
    topic_name: str
    partition_id: PartitionId
    partition: Related
    lag: Related


class ConsumerLag(Resource):
    kind: Literal["KafkaConsumerLag"]
    cluster_id: str
    consumer_group_id: str
    topic_name: str
    partition_id: PartitionId
    current_offset: Int(-1, description=(
        "the committed offset; -1 (as OffsetFetch answers) for a partition assigned but never committed, "
        "whose lag counts from the log start, as kafka-consumer-groups.sh does"))
    log_end_offset: Int(description="the last stable offset: where a read_committed consumer ends")
    lag: Int(description="records a read_committed consumer would still receive (markers and aborted records "
                         "not counted)")
    consumer_id: str = Field(description="the member assigned the partition; empty when none is")
    instance_id: Optional[str]
    client_id: str
    high_watermark: Int()
    lag_exact: bool


class ConsumerGroupLagSummary(Resource):
    kind: Literal["KafkaConsumerGroupLagSummary"]
    cluster_id: str
    consumer_group_id: str
    max_lag_consumer_id: str
    max_lag_instance_id: Optional[str]
    max_lag_client_id: str
    max_lag_topic_name: str = Field(description="empty when the group has no committed offset")
    max_lag_partition_id: Int(-1, INT32_MAX)
    max_lag: Int()
    total_lag: Int()
    lag_exact: bool = Field(description="false while any partition's lag is an upper bound: the broker has not "
                                        "yet counted the records behind its open transactions (after a restart)")
    max_lag_consumer: Optional[Related]
    max_lag_partition: Optional[Related]


class Server(Resource):
    kind: Literal["ExactlyServer"]
    cluster_id: str
    restarts: Int(description="restarts in place completed since the server started")
    kafka_port: Int(1, 65535)
    http_port: Int(1, 65535)


class Transaction(Resource):
    kind: Literal["KafkaTransaction"]
    cluster_id: str
    transactional_id: str
    state: Literal[STATES]
    activity: Literal["open", "idle", "dead"] = Field(description=(
        "open: a transaction is in progress; idle: between transactions; dead: expired"))
    last_outcome: Optional[Literal[OUTCOMES]] = Field(description=(
        "how the last transaction ended, while idle after one; null otherwise"))
    two_phase_commit: bool = Field(description="a KIP-939 two-phase-commit producer (no transaction timeout)")
    transaction_version: Int(0, 2) = Field(description=(
        "the transaction version of its client's last request: 2 is KIP-890 part 2 (partitions added by "
        "Produce, the epoch bumped at every EndTxn), 0 the earlier protocol"))
    producer_id: Int(-1)
    producer_epoch: Int(-1, INT16_MAX)
    transaction_timeout_ms: Int(-1, INT32_MAX)
    transaction_start_ms: Optional[TimestampMs]
    age_ms: Optional[Int(-INT64_MAX)]
    last_update_ms: TimestampMs
    partitions: list[TopicPartition]
    connection: Optional[Connection] = Field(description="null: no open Kafka connection uses the transactional id")


class FinishedTransaction(BaseModel):
    producer_id: Int()
    producer_epoch: Int(-1, INT16_MAX)
    outcome: Literal[OUTCOMES]
    partitions: list[TopicPartition]
    start_ms: TimestampMs
    end_ms: TimestampMs
    abort_cause: Optional[Literal[ABORT_CAUSES]] = Field(
        description="why it was aborted; null for a commit")
    abort_actor: Optional[str] = Field(description="who aborted it, and from where")
    transaction_version: Int(0, 2) = Field(description="2: KIP-890 part 2, 0: the earlier protocol")


class TransactionDetail(Transaction):
    history: Optional[list[FinishedTransaction]] = Field(description=(
        "finished transactions, newest first, from the SQLite mirror; null when the broker runs without one"))


class Acl(Resource):
    kind: Literal["KafkaAcl"]
    cluster_id: str
    resource_type: Literal[ACL_RESOURCE_TYPES]
    resource_name: str
    pattern_type: Literal[ACL_PATTERN_TYPES]
    principal: str
    host: str
    operation: Literal[ACL_OPERATIONS]
    permission: Literal[ACL_PERMISSIONS]


class DeletedAcls(BaseModel):
    data: list[Acl]


class ProducerIdentity(ProducerId):
    transactional_id: str


class AppendedRecord(TopicPartition):
    offset: Int()


class AppendedRecords(BaseModel):
    records: list[AppendedRecord]


class SentOffset(AppendedRecord):
    metadata: str


class SentOffsets(BaseModel):
    transactional_id: str
    group_id: str
    offsets: list[SentOffset]


class AbortedHanging(TopicPartition):
    producer_id: Int()
    transactional_id: Optional[str] = Field(description=(
        "the transactional id whose transaction the coordinator aborted; null: no coordinator could, an ABORT "
        "marker was written on this partition"))
    producer_epoch: Int(description="the producer's epoch now: older ones are fenced")
    last_stable_offset: Int()


# -- the exactly-once audit (exactly/app/engine/audit.py) ------------------------------------------

VIOLATION_KINDS = tuple(kind.value for kind in ViolationKind)


class AuditInputRange(BaseModel):
    partition_id: PartitionId
    from_offset: Int(-1, description="the committed offset before the transaction")
    to_offset: Int(-1, description="the offset the transaction committed")


class AuditOutputBatch(BaseModel):
    partition_id: PartitionId
    base_offset: Int()
    last_offset: Int()
    record_count: Int()


class AuditTransaction(BaseModel):
    transactional_id: Optional[str] = Field(description="null: the transaction log no longer names it")
    producer_id: Int(-1)
    producer_epoch: Int(-1, INT16_MAX)
    outcome: Literal["COMMIT", "ABORT", "OPEN"]
    offsets_marker_offset: Optional[Int()] = Field(description=(
        "where its marker is on the group's __consumer_offsets partition; null: it committed no offsets"))
    inputs: list[AuditInputRange]
    outputs: list[AuditOutputBatch]
    output_records: Int()
    abort_cause: Optional[Literal[ABORT_CAUSES]]
    abort_actor: Optional[str]


class AuditPartition(BaseModel):
    partition_id: PartitionId
    log_start_offset: Int()
    high_watermark: Int()
    committed_offset: Optional[Int()] = Field(description="where the chain ends; null: nothing committed yet")
    audited_to: Int(description="the audit covers the input up to here: the high watermark, or until's offset")


class AuditViolation(BaseModel):
    kind: Literal[VIOLATION_KINDS]
    topic_name: str
    partition_id: PartitionId
    start_offset: Int(description="first offset that broke it")
    end_offset: Int(description="the offset after the last one")
    producer_id: Optional[Int()]
    detail: str
    likely_cause: Optional[str] = Field(description="what in the application likely did it, when the logs show it")


class ExactlyOnceAudit(Resource):
    kind: Literal["ExactlyOnceAudit"]
    cluster_id: str
    consumer_group_id: str
    input_topic_name: str
    output_topic_name: str
    ok: bool = Field(description=(
        "true: every input record up to the audited end was covered by exactly one committed transaction"))
    mode: Literal["lineage", "records_per_input", "offsets"] = Field(description=(
        "what was checked beside the offsets: each input record against the output naming it (the exactly.input "
        "header), each transaction's output count, or the offsets alone (blind to skipped batches and aborted "
        "input processed)"))
    checked: str = Field(description="what the mode checks, and what it cannot see, in words")
    records_per_input: Optional[int]
    offsets_partition_id: PartitionId
    partitions: list[AuditPartition]
    transactions: list[AuditTransaction] = Field(description="the committed chain, in commit order")
    aborted: list[AuditTransaction]
    violations: list[AuditViolation]
class Fault(Resource):
    kind: Literal["ExactlyFault"]
    fault_id: int
    action: Literal[FAULT_ACTIONS]
    event: Optional[str] = Field(description="the event preset that installed it")
    api: list[str]
    client_id: Optional[str]
    principal: Optional[str]
    topic: Optional[str]
    partition: Optional[int]
    group: Optional[str]
    transactional_id: Optional[str]
    error: Optional[str]
    delay_ms: int
    count: Optional[int]
    probability: float
    seed: Optional[int]
    duration_ms: Optional[int]
    remaining_ms: Optional[int] = Field(description="left of its window; null: none")
    fired: int = Field(description="how often it acted on a request")
    installed_ms: int
    last_fired_ms: Optional[int]
