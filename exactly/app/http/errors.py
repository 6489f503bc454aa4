"""Errors at the HTTP edge: every failure becomes JSON, never an HTML page.

The body is Confluent REST Proxy v3's error, ``{"error_code": ..., "message": ...}``,
with Kafka's own name and code of the error kept beside it::

    {"error_code": 40403, "message": "unknown topic 'x'",
     "error_name": "UNKNOWN_TOPIC_OR_PARTITION", "kafka_error_code": 3}

``error_code`` and the HTTP status are what the Confluent proxy answers
(:data:`CONFLUENT`, from its ``KafkaExceptionMapper``): UNKNOWN_TOPIC_OR_PARTITION is
404 / 40403 (40402 when the topic exists but not the partition: the path's
partition is checked before the request runs, as the proxy does); TOPIC_ALREADY_EXISTS, INVALID_CONFIG, INVALID_REQUEST and the other
invalid-argument errors are 400 / 40002, and so is SECURITY_DISABLED (ACLs asked of a
broker without an authorizer); authorization failures 403 / 40301. Kafka
errors the proxy has no code for -- those of Exactly's own resources, such as a
fenced transactional producer -- get the status of :data:`STATUS_BY_ERROR` and, as
the proxy does for its errors without a code of their own, that status as
``error_code`` (404 for an unknown group), except that a retriable one is 50003,
the proxy's "retriable Kafka error", with ``Retry-After``. A write the disk refused --
full (``LogDirFullError``) or its log offline after a failed fsync
(``LogOfflineError``), both KAFKA_STORAGE_ERROR (56) -- is 507 Insufficient Storage
(WebDAV's status for "cannot store what the request needs"), ``error_code`` 50003,
``Retry-After``; a broker that is closing stays 503. A per-principal quota
(THROTTLING_QUOTA_EXCEEDED) is 429 Too Many Requests, its ``Retry-After`` the
throttle time. Errors that are not
Kafka's (an unknown path: 404, a wrong method: 405, ...) have the status as
``error_code`` and a null ``kafka_error_code``. Bad input is raised as
``InvalidRequestError`` (INVALID_REQUEST, 42) by the handlers' validation and ends
here as a 400.

Anything else -- an ``InternalError`` (a broken invariant: a bug, see
``exactly/storage/errors.py``), UNKNOWN_SERVER_ERROR or an unexpected exception -- is a 500
that says only UNKNOWN_SERVER_ERROR and a short reference id; the exception's text
and traceback go to the broker's log under that id (:func:`log_server_error`), never
to the client, whose request did nothing wrong and who must not see internals.
"""

from __future__ import annotations

import logging
import math
import secrets

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from exactly.app.engine.disk_space import is_disk_full
from exactly.storage import errors as e

log = logging.getLogger(__name__)

#: Confluent's bad-request, authorization, unknown-topic and retriable codes, and its
#: "partition not found" (a topic that exists without that partition)
BAD_REQUEST, NOT_AUTHORIZED, UNKNOWN_TOPIC_OR_PARTITION, RETRIABLE = 40002, 40301, 40403, 50003
PARTITION_NOT_FOUND = 40402

#: Kafka error -> (HTTP status, error_code) as the Confluent REST proxy answers it
CONFLUENT: dict[type[e.KafkaError], tuple[int, int]] = {
    e.UnknownTopicOrPartitionError: (404, UNKNOWN_TOPIC_OR_PARTITION),
    e.TopicAlreadyExistsError: (400, BAD_REQUEST),
    e.InvalidConfigError: (400, BAD_REQUEST),
    e.InvalidRequestError: (400, BAD_REQUEST),
    e.InvalidPartitionsError: (400, BAD_REQUEST),
    e.InvalidReplicationFactorError: (400, BAD_REQUEST),
    e.PolicyViolationError: (400, BAD_REQUEST),
    e.UnsupportedVersionError: (400, BAD_REQUEST),
    e.TopicAuthorizationFailedError: (403, NOT_AUTHORIZED),
    e.GroupAuthorizationFailedError: (403, NOT_AUTHORIZED),
    e.ClusterAuthorizationFailedError: (403, NOT_AUTHORIZED),
    e.TransactionalIdAuthorizationFailedError: (403, NOT_AUTHORIZED),
    e.SecurityDisabledError: (400, BAD_REQUEST),  # the proxy's "thrown when ACLs are not enabled"
}

#: Kafka error -> HTTP status, for those :data:`CONFLUENT` has not (anything not
#: listed is a client error, 400)
STATUS_BY_ERROR: dict[type[e.KafkaError], int] = {
    e.GroupIdNotFoundError: 404,
    e.TransactionalIdNotFoundError: 404,
    e.OffsetOutOfRangeError: 416,
    e.MessageTooLargeError: 413,
    e.RecordListTooLargeError: 413,
    e.ProducerFencedError: 409,
    e.InvalidProducerEpochError: 409,
    e.InvalidProducerIdMappingError: 409,
    e.InvalidTxnStateError: 409,
    e.OutOfOrderSequenceNumberError: 409,
    e.UnknownProducerIdError: 409,
    e.ConcurrentTransactionsError: 409,
    e.TransactionAbortableError: 409,
    e.IllegalGenerationError: 409,
    e.UnknownMemberIdError: 409,
    e.FencedInstanceIdError: 409,
    e.RebalanceInProgressError: 409,
    e.UnstableOffsetCommitError: 409,
    e.TransactionCoordinatorFencedError: 409,
    e.CoordinatorNotAvailableError: 503,
    e.CoordinatorLoadInProgressError: 503,
    e.NotCoordinatorError: 503,
    e.KafkaStorageError: 503,
    e.LogDirFullError: 507,
    e.LogOfflineError: 507,
    e.RequestTimedOutError: 504,
    e.UnknownServerError: 500,
    e.ThrottlingQuotaExceededError: 429,
}


def status_and_code(error: e.KafkaError) -> tuple[int, int]:
    """The HTTP status and Confluent ``error_code`` of a Kafka error (see the module docstring)."""
    for cls in type(error).__mro__:
        if cls in CONFLUENT:
            return CONFLUENT[cls]
    status = next((STATUS_BY_ERROR[cls] for cls in type(error).__mro__ if cls in STATUS_BY_ERROR), 400)
    return status, RETRIABLE if error.retriable and status >= 500 else status


def status_for(error: e.KafkaError) -> int:
    return status_and_code(error)[0]


def error_body(code: int, name: str, message: str, kafka_code: int | None = None) -> dict:
    """The error JSON: Confluent's ``error_code`` and ``message``, Kafka's name and code."""
    return {"error_code": code, "message": message, "error_name": name, "kafka_error_code": kafka_code}


def kafka_error_body(error: e.KafkaError) -> dict:
    return error_body(status_and_code(error)[1], error.name, str(error), error.code)


def log_server_error(error: BaseException) -> str:
    """Log ``error`` with its traceback under a new short reference id; returns the id."""
    reference = secrets.token_hex(4)
    log.error("server error %s on %s %s: %s", reference, request.method, request.path, type(error).__name__,
              exc_info=error)
    return reference


def log_mirror_error(logger: logging.Logger, error: Exception, what: str) -> None:
    """Log a failed read of the optional SQLite mirror (``what`` failed) to ``logger``:
    with its traceback -- unless the disk is full, when SQLite cannot even grow its WAL
    index to read; the broker says that once (``DiskSpace``), not at every page view."""
    if is_disk_full(error):
        logger.debug("%s: the disk is full: %s", what, error)
    else:
        logger.error("%s", what, exc_info=error)


def partition_not_found_response(error: e.UnknownTopicOrPartitionError) -> Response:
    """The proxy's answer for a partition its topic does not have: 404 / 40402."""
    response = jsonify(error_body(PARTITION_NOT_FOUND, error.name, str(error), error.code))
    response.status_code = 404
    return response


def server_error_body(error: BaseException) -> dict:
    """The error JSON of a bug (``error``, logged): its reference id, never its text."""
    reference = log_server_error(error)
    return error_body(500, e.UnknownServerError.name,
                      f"internal server error; reference {reference} in the broker's log", e.UnknownServerError.code)


def server_error_response(error: BaseException) -> Response:
    response = jsonify(server_error_body(error))
    response.status_code = 500
    return response


def kafka_error_response(error: e.KafkaError) -> Response:
    status = status_for(error)
    if status == 500:
        return server_error_response(error)
    response = jsonify(kafka_error_body(error))
    response.status_code = status
    if error.retriable:
        throttle_ms = getattr(error, "throttle_time_ms", 0)
        response.headers["Retry-After"] = str(max(1, math.ceil(throttle_ms / 1000)))
    return response


def http_error_response(status: int, name: str, message: str) -> Response:
    """An error that is not Kafka's: the status is its ``error_code``."""
    response = jsonify(error_body(status, name, message))
    response.status_code = status
    return response


def init_app(app: Flask) -> None:
    @app.errorhandler(e.KafkaError)
    def _kafka(error: e.KafkaError):
        return kafka_error_response(error)

    @app.errorhandler(HTTPException)
    def _http(error: HTTPException):
        name = (error.name or "HTTP_ERROR").upper().replace(" ", "_")
        return http_error_response(error.code or 500, name, error.description or name)

    @app.errorhandler(Exception)  # InternalError included: a bug is a 500, whatever its base
    def _unexpected(error: Exception):
        return server_error_response(error)
