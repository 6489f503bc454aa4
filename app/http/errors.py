"""Errors at the HTTP edge: every failure becomes JSON, never an HTML page.

``{"error_code": <Kafka code, or the HTTP status for non-Kafka errors>,
"error_name": "INVALID_PRODUCER_EPOCH", "message": "..."}`` with an HTTP status that
fits the Kafka error (``STATUS_BY_ERROR``). Bad input is raised as
``InvalidRequestError`` (INVALID_REQUEST, 42) by the handlers' validation and ends
here as a 400.

Anything else -- an ``InternalError`` (a broken invariant: a bug, see
``storage/errors.py``), UNKNOWN_SERVER_ERROR or an unexpected exception -- is a 500
that says only UNKNOWN_SERVER_ERROR and a short reference id; the exception's text
and traceback go to the broker's log under that id (:func:`log_server_error`), never
to the client, whose request did nothing wrong and who must not see internals.
"""

from __future__ import annotations

import logging
import secrets

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from storage import errors as e

log = logging.getLogger(__name__)

#: Kafka error -> HTTP status (anything not listed is a client error, 400)
STATUS_BY_ERROR: dict[type[e.KafkaError], int] = {
    e.UnknownTopicOrPartitionError: 404,
    e.GroupIdNotFoundError: 404,
    e.TransactionalIdNotFoundError: 404,
    e.TopicAlreadyExistsError: 409,
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
    e.TopicAuthorizationFailedError: 403,
    e.GroupAuthorizationFailedError: 403,
    e.ClusterAuthorizationFailedError: 403,
    e.TransactionalIdAuthorizationFailedError: 403,
    e.CoordinatorNotAvailableError: 503,
    e.CoordinatorLoadInProgressError: 503,
    e.NotCoordinatorError: 503,
    e.KafkaStorageError: 503,
    e.RequestTimedOutError: 504,
    e.UnknownServerError: 500,
}


def status_for(error: e.KafkaError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 400


def error_body(code: int, name: str, message: str) -> dict:
    return {"error_code": code, "error_name": name, "message": message}


def log_server_error(error: BaseException) -> str:
    """Log ``error`` with its traceback under a new short reference id; returns the id."""
    reference = secrets.token_hex(4)
    log.error("server error %s on %s %s: %s", reference, request.method, request.path, type(error).__name__,
              exc_info=error)
    return reference


def server_error_response(error: BaseException) -> Response:
    """The 500 for ``error``: its reference id, never its text."""
    reference = log_server_error(error)
    response = jsonify(error_body(e.UnknownServerError.code, e.UnknownServerError.name,
                                  f"internal server error; reference {reference} in the broker's log"))
    response.status_code = 500
    return response


def kafka_error_response(error: e.KafkaError) -> Response:
    status = status_for(error)
    if status == 500:
        return server_error_response(error)
    response = jsonify(error_body(error.code, error.name, str(error)))
    response.status_code = status
    if error.retriable:
        response.headers["Retry-After"] = "1"
    return response


def init_app(app: Flask) -> None:
    @app.errorhandler(e.KafkaError)
    def _kafka(error: e.KafkaError):
        return kafka_error_response(error)

    @app.errorhandler(HTTPException)
    def _http(error: HTTPException):
        name = (error.name or "HTTP_ERROR").upper().replace(" ", "_")
        response = jsonify(error_body(error.code or 500, name, error.description or name))
        response.status_code = error.code or 500
        return response

    @app.errorhandler(Exception)  # InternalError included: a bug is a 500, whatever its base
    def _unexpected(error: Exception):
        return server_error_response(error)
