"""Kafka's errors: one exception class per Kafka error code.

Every layer raises these (storage is the lowest layer, so they live here and
``exactly/coordinator/`` and ``exactly/app/`` import them); the edges translate them -- the Kafka
listener to the numeric ``code`` on the wire, the HTTP API to JSON carrying
``code`` and ``name``. Names and numbers are those of
``org.apache.kafka.common.protocol.Errors``.

Declare one with its code and wire name::

    class InvalidProducerEpochError(KafkaError, code=47, name="INVALID_PRODUCER_EPOCH"):
        '''Produce with an epoch older than the producer's current one.'''

A Kafka error is an answer a client can get. A state that only a bug in the broker
can reach is not: it raises an :class:`InternalError` (an :class:`InvariantViolation`
when a checked invariant broke), which is deliberately *not* a Kafka error, so no
``except InvalidTxnStateError`` can mistake a bug for a client's mistake and no
edge can send it as a 409. The edges answer it as a server error and log it (the
HTTP API: 500 with a reference id, never the exception's text).
"""

from __future__ import annotations

import errno
from typing import ClassVar, Sequence

_BY_CODE: dict[int, type["KafkaError"]] = {}


class KafkaError(Exception):
    """Base of every Kafka error; ``code`` and ``name`` are Kafka's."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False
    #: the partition's log start offset when a log refused a batch for what is in it (a
    #: sequence, an epoch, a record): a Produce answer carries it, as Kafka's does; -1 otherwise
    log_start_offset: int = -1

    def __init_subclass__(cls, code: int | None = None, name: str | None = None,
                          retriable: bool = False, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if code is None or name is None:
            return  # an abstract grouping class, not a wire error
        if code in _BY_CODE:
            raise TypeError(f"Kafka error code {code} declared twice")
        cls.code, cls.name, cls.retriable = code, name, retriable
        _BY_CODE[code] = cls

    def __init__(self, message: str = "") -> None:
        super().__init__(message or (self.__doc__ or self.name).strip().splitlines()[0])

    @property
    def message(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}={self.code}: {self})"


class InternalError(Exception):
    """Base of the broker's own failures: never a Kafka error, never a client's fault."""


class InvariantViolation(InternalError):
    """An invariant the broker keeps itself was about to break (an illegal state
    transition, an offset going backwards in an index or a segment): a bug."""


def error_for_code(code: int) -> type[KafkaError]:
    """The exception class for a Kafka error code (UNKNOWN_SERVER_ERROR if unknown)."""
    return _BY_CODE.get(code, UnknownServerError)


def error_for_name(name: str) -> type[KafkaError]:
    """The exception class for a Kafka error name (``NOT_ENOUGH_REPLICAS``); KeyError if
    no error has that name."""
    for cls in _BY_CODE.values():
        if cls.name == name:
            return cls
    raise KeyError(name)


def error_names() -> list[str]:
    """Every Kafka error name this broker knows, in code order."""
    return [_BY_CODE[code].name for code in sorted(_BY_CODE)]


def raise_for_code(code: int, message: str = "") -> None:
    """Raise the exception for ``code``; do nothing for NONE (0)."""
    if code != 0:
        raise error_for_code(code)(message)


class UnknownServerError(KafkaError, code=-1, name="UNKNOWN_SERVER_ERROR"):
    """An unexpected server error."""


class OffsetOutOfRangeError(KafkaError, code=1, name="OFFSET_OUT_OF_RANGE"):
    """The requested offset is not within the range of offsets the partition holds."""


class CorruptMessageError(KafkaError, code=2, name="CORRUPT_MESSAGE", retriable=True):
    """A record batch failed its CRC check, is shorter than its header, or is otherwise corrupt."""


class UnknownTopicOrPartitionError(KafkaError, code=3, name="UNKNOWN_TOPIC_OR_PARTITION",
                                   retriable=True):
    """This server does not host this topic-partition."""


class InvalidFetchSizeError(KafkaError, code=4, name="INVALID_FETCH_SIZE"):
    """The requested fetch size is invalid."""


class NotLeaderOrFollowerError(KafkaError, code=6, name="NOT_LEADER_OR_FOLLOWER", retriable=True):
    """This server is not the leader for that topic-partition."""


class RequestTimedOutError(KafkaError, code=7, name="REQUEST_TIMED_OUT", retriable=True):
    """The request timed out."""


class MessageTooLargeError(KafkaError, code=10, name="MESSAGE_TOO_LARGE"):
    """The record batch is larger than the topic's max.message.bytes."""


class OffsetMetadataTooLargeError(KafkaError, code=12, name="OFFSET_METADATA_TOO_LARGE"):
    """The metadata field of the offset request was too large."""


class CoordinatorLoadInProgressError(KafkaError, code=14, name="COORDINATOR_LOAD_IN_PROGRESS",
                                     retriable=True):
    """The coordinator is loading and hence can't process requests."""


class CoordinatorNotAvailableError(KafkaError, code=15, name="COORDINATOR_NOT_AVAILABLE",
                                   retriable=True):
    """The coordinator is not available."""


class NotCoordinatorError(KafkaError, code=16, name="NOT_COORDINATOR", retriable=True):
    """This is not the correct coordinator."""


class InvalidTopicError(KafkaError, code=17, name="INVALID_TOPIC_EXCEPTION"):
    """The request attempted to perform an operation on an invalid topic."""


class RecordListTooLargeError(KafkaError, code=18, name="RECORD_LIST_TOO_LARGE"):
    """The request included message batch larger than the configured segment size."""


class NotEnoughReplicasError(KafkaError, code=19, name="NOT_ENOUGH_REPLICAS", retriable=True):
    """Fewer in-sync replicas than min.insync.replicas (never on one node; a fault answers it)."""


class NotEnoughReplicasAfterAppendError(KafkaError, code=20, name="NOT_ENOUGH_REPLICAS_AFTER_APPEND",
                                        retriable=True):
    """Written, but fewer in-sync replicas than required acknowledged it (a fault answers it)."""


class InvalidRequiredAcksError(KafkaError, code=21, name="INVALID_REQUIRED_ACKS"):
    """Produce request specified an invalid value for required acks (must be -1, 0 or 1)."""


class IllegalGenerationError(KafkaError, code=22, name="ILLEGAL_GENERATION"):
    """Specified group generation id is not valid."""


class InconsistentGroupProtocolError(KafkaError, code=23, name="INCONSISTENT_GROUP_PROTOCOL"):
    """The group member's supported protocols are incompatible with those of existing members."""


class InvalidGroupIdError(KafkaError, code=24, name="INVALID_GROUP_ID"):
    """The configured groupId is invalid."""


class UnknownMemberIdError(KafkaError, code=25, name="UNKNOWN_MEMBER_ID"):
    """The coordinator is not aware of this member."""


class InvalidSessionTimeoutError(KafkaError, code=26, name="INVALID_SESSION_TIMEOUT"):
    """The session timeout is not within the range allowed by the broker."""


class RebalanceInProgressError(KafkaError, code=27, name="REBALANCE_IN_PROGRESS"):
    """The group is rebalancing, so a rejoin is needed."""


class InvalidCommitOffsetSizeError(KafkaError, code=28, name="INVALID_COMMIT_OFFSET_SIZE"):
    """The committing offset data size is not valid."""


class TopicAuthorizationFailedError(KafkaError, code=29, name="TOPIC_AUTHORIZATION_FAILED"):
    """Topic authorization failed."""


class GroupAuthorizationFailedError(KafkaError, code=30, name="GROUP_AUTHORIZATION_FAILED"):
    """Group authorization failed."""


class ClusterAuthorizationFailedError(KafkaError, code=31, name="CLUSTER_AUTHORIZATION_FAILED"):
    """Cluster authorization failed."""


class RecordValidationError(KafkaError):
    """An error about particular records of a batch (Kafka's ``RecordValidationException``):
    ``record_errors`` holds each refused record's index in its batch and why, which a
    Produce answer (v8+) lists."""

    def __init__(self, message: str = "", record_errors: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(message)
        self.record_errors = tuple(record_errors)


class InvalidTimestampError(RecordValidationError, code=32, name="INVALID_TIMESTAMP"):
    """The timestamp of the message is out of acceptable range."""


class UnsupportedSaslMechanismError(KafkaError, code=33, name="UNSUPPORTED_SASL_MECHANISM"):
    """The broker does not support the requested SASL mechanism."""


class IllegalSaslStateError(KafkaError, code=34, name="ILLEGAL_SASL_STATE"):
    """Request is not valid given the current SASL state."""


class UnsupportedVersionError(KafkaError, code=35, name="UNSUPPORTED_VERSION"):
    """The version of API is not supported."""


class TopicAlreadyExistsError(KafkaError, code=36, name="TOPIC_ALREADY_EXISTS"):
    """Topic with this name already exists."""


class InvalidPartitionsError(KafkaError, code=37, name="INVALID_PARTITIONS"):
    """Number of partitions is below 1."""


class InvalidReplicationFactorError(KafkaError, code=38, name="INVALID_REPLICATION_FACTOR"):
    """Replication factor is below 1 or larger than the number of available brokers."""


class InvalidReplicaAssignmentError(KafkaError, code=39, name="INVALID_REPLICA_ASSIGNMENT"):
    """Replica assignment is invalid."""


class InvalidConfigError(KafkaError, code=40, name="INVALID_CONFIG"):
    """Configuration is invalid."""


class InvalidRequestError(KafkaError, code=42, name="INVALID_REQUEST"):
    """The request is malformed or violates the protocol."""


class UnsupportedForMessageFormatError(KafkaError, code=43, name="UNSUPPORTED_FOR_MESSAGE_FORMAT"):
    """The message format version on the broker does not support the request."""


class PolicyViolationError(KafkaError, code=44, name="POLICY_VIOLATION"):
    """Request parameters do not satisfy the configured policy."""


class OutOfOrderSequenceNumberError(KafkaError, code=45, name="OUT_OF_ORDER_SEQUENCE_NUMBER"):
    """The broker received an out of order sequence number."""


class DuplicateSequenceNumberError(KafkaError, code=46, name="DUPLICATE_SEQUENCE_NUMBER"):
    """The broker received a duplicate sequence number."""


class InvalidProducerEpochError(KafkaError, code=47, name="INVALID_PRODUCER_EPOCH"):
    """Producer attempted to produce with an old epoch."""


class InvalidTxnStateError(KafkaError, code=48, name="INVALID_TXN_STATE"):
    """The producer attempted a transactional operation in an invalid state."""


class InvalidProducerIdMappingError(KafkaError, code=49, name="INVALID_PRODUCER_ID_MAPPING"):
    """The producer id does not match the one the transactional id is mapped to."""


class InvalidTransactionTimeoutError(KafkaError, code=50, name="INVALID_TRANSACTION_TIMEOUT"):
    """The transaction timeout is larger than max.transaction.timeout.ms or not positive."""


class ConcurrentTransactionsError(KafkaError, code=51, name="CONCURRENT_TRANSACTIONS",
                                  retriable=True):
    """The producer's previous transaction is still being completed; retry."""


class TransactionCoordinatorFencedError(KafkaError, code=52,
                                        name="TRANSACTION_COORDINATOR_FENCED"):
    """A marker came from a coordinator with an older coordinator epoch than the partition has seen."""


class TransactionalIdAuthorizationFailedError(KafkaError, code=53,
                                              name="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
    """Transactional id authorization failed."""


class SecurityDisabledError(KafkaError, code=54, name="SECURITY_DISABLED"):
    """No authorizer is configured (authorizer.class.name), so there are no ACLs to manage."""


class OperationNotAttemptedError(KafkaError, code=55, name="OPERATION_NOT_ATTEMPTED"):
    """The broker did not attempt this operation because another part of the request failed."""


class KafkaStorageError(KafkaError, code=56, name="KAFKA_STORAGE_ERROR", retriable=True):
    """Disk error when trying to access the log file on disk."""


class LogDirFullError(KafkaStorageError):
    """The data directory's filesystem is full (ENOSPC, EDQUOT): the write was undone
    and nothing of it was acknowledged; the same write succeeds once space is freed."""


class LogOfflineError(KafkaStorageError):
    """A write or fsync of this log failed with an I/O error: what the page cache
    holds of it is unknown (the "fsyncgate" lesson), so, like Kafka's offline log
    directory, the log refuses every write until a restart reloads it from disk."""


#: errno values that mean "no space": recoverable in place once space is freed
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(error: BaseException) -> bool:
    """Whether ``error`` is an OSError for a full filesystem or an exhausted quota."""
    return isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS


def storage_error(error: OSError, what: str) -> KafkaStorageError:
    """The Kafka error for an OSError of a write: LogDirFullError for a full disk, a
    plain KafkaStorageError otherwise (the caller decides whether that takes a log offline)."""
    cls = LogDirFullError if is_no_space(error) else KafkaStorageError
    return cls(f"{what}: {error.strerror or error}")


class SaslAuthenticationFailedError(KafkaError, code=58, name="SASL_AUTHENTICATION_FAILED"):
    """SASL Authentication failed."""


class UnknownProducerIdError(KafkaError, code=59, name="UNKNOWN_PRODUCER_ID"):
    """The broker has no state for this producer id and the batch does not start a sequence."""


class NonEmptyGroupError(KafkaError, code=68, name="NON_EMPTY_GROUP"):
    """The group is not empty."""


class GroupIdNotFoundError(KafkaError, code=69, name="GROUP_ID_NOT_FOUND"):
    """The group id does not exist."""


class FetchSessionIdNotFoundError(KafkaError, code=70, name="FETCH_SESSION_ID_NOT_FOUND",
                                  retriable=True):
    """The fetch session id is not known (this broker creates no fetch sessions)."""


class FencedLeaderEpochError(KafkaError, code=74, name="FENCED_LEADER_EPOCH", retriable=True):
    """The leader epoch in the request is older than the epoch on the broker."""


class UnknownLeaderEpochError(KafkaError, code=75, name="UNKNOWN_LEADER_EPOCH", retriable=True):
    """The leader epoch in the request is newer than the epoch on the broker."""


class UnsupportedCompressionTypeError(KafkaError, code=76, name="UNSUPPORTED_COMPRESSION_TYPE"):
    """The requesting client does not support the compression type of given partition."""


class OffsetNotAvailableError(KafkaError, code=78, name="OFFSET_NOT_AVAILABLE", retriable=True):
    """The leader high watermark has not caught up."""


class MemberIdRequiredError(KafkaError, code=79, name="MEMBER_ID_REQUIRED"):
    """The group member needs to have a valid member id before actually entering a consumer group."""

    def __init__(self, member_id: str, message: str = "") -> None:
        super().__init__(message)
        #: the id the coordinator gave the member: its next JoinGroup names it (KIP-394)
        self.member_id = member_id


class GroupMaxSizeReachedError(KafkaError, code=81, name="GROUP_MAX_SIZE_REACHED"):
    """The consumer group has reached its max size."""


class FencedInstanceIdError(KafkaError, code=82, name="FENCED_INSTANCE_ID"):
    """Another member with the same group.instance.id took over."""


class GroupSubscribedToTopicError(KafkaError, code=86, name="GROUP_SUBSCRIBED_TO_TOPIC"):
    """The group's members consume the topic: its offsets cannot be deleted (OffsetDelete)."""


class InvalidRecordError(RecordValidationError, code=87, name="INVALID_RECORD"):
    """The record batch failed validation on the broker."""


class UnstableOffsetCommitError(KafkaError, code=88, name="UNSTABLE_OFFSET_COMMIT",
                                retriable=True):
    """There are unstable (pending transactional) offsets for this partition."""


class ThrottlingQuotaExceededError(KafkaError, code=89, name="THROTTLING_QUOTA_EXCEEDED", retriable=True):
    """A per-principal quota refused the request; ``throttle_time_ms`` says when to
    try again (KIP-599's error, KIP-936's producer-id rate)."""

    def __init__(self, message: str = "", throttle_time_ms: int = 0) -> None:
        super().__init__(message)
        self.throttle_time_ms = throttle_time_ms


class ProducerFencedError(KafkaError, code=90, name="PRODUCER_FENCED"):
    """A newer producer with the same transactional id has fenced this one."""


class ResourceNotFoundError(KafkaError, code=91, name="RESOURCE_NOT_FOUND"):
    """A request illegally referred to a resource that does not exist."""


class DuplicateResourceError(KafkaError, code=92, name="DUPLICATE_RESOURCE"):
    """A request illegally referred to the same resource twice."""


class UnacceptableCredentialError(KafkaError, code=93, name="UNACCEPTABLE_CREDENTIAL"):
    """Requested credential would not meet criteria for acceptability."""


class InvalidUpdateVersionError(KafkaError, code=95, name="INVALID_UPDATE_VERSION"):
    """UpdateFeatures asked for a level the feature cannot be set to (KIP-584)."""


class UnknownTopicIdError(KafkaError, code=100, name="UNKNOWN_TOPIC_ID", retriable=True):
    """No topic has this id (KIP-516): it never had, or the topic was deleted."""


class TransactionalIdNotFoundError(KafkaError, code=105, name="TRANSACTIONAL_ID_NOT_FOUND"):
    """The transactional id cannot be found."""


class FencedMemberEpochError(KafkaError, code=110, name="FENCED_MEMBER_EPOCH"):
    """A consumer group member's epoch is not its current one (KIP-848): it must rejoin
    with epoch 0, giving up its partitions."""


class UnreleasedInstanceIdError(KafkaError, code=111, name="UNRELEASED_INSTANCE_ID"):
    """A static member joins with an instance id another member of the group still holds."""


class UnsupportedAssignorError(KafkaError, code=112, name="UNSUPPORTED_ASSIGNOR"):
    """The server-side assignor a consumer group member asks for is not configured."""


class StaleMemberEpochError(KafkaError, code=113, name="STALE_MEMBER_EPOCH"):
    """An offset commit or fetch names a member epoch the member no longer has."""


class UnsupportedEndpointTypeError(KafkaError, code=115, name="UNSUPPORTED_ENDPOINT_TYPE"):
    """The target endpoint type is not supported (a broker answers for brokers, not controllers)."""


class TransactionAbortableError(KafkaError, code=120, name="TRANSACTION_ABORTABLE"):
    """The transaction hit an error it cannot commit past; abort it and start over."""


class InvalidRegularExpressionError(KafkaError, code=128, name="INVALID_REGULAR_EXPRESSION"):
    """A regular expression in the request (e.g. ListTransactions' transactional id
    pattern) does not compile."""
