"""Errors at the HTTP edge: every failure becomes JSON, never an HTML page or a 500.

``{"error_code": <Kafka code, or the HTTP status for non-Kafka errors>,
"error_name": "INVALID_PRODUCER_EPOCH", "message": "..."}`` with an HTTP status that
fits the Kafka error (``STATUS_BY_ERROR``). Bad input is raised as
``InvalidRequestError`` (INVALID_REQUEST, 42) by the handlers' validation and ends
here as a 400.
"""

from __future__ import annotations

import logging

from flask import Flask, jsonify, request
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


def kafka_error_response(error: e.KafkaError):
    response = jsonify(error_body(error.code, error.name, str(error)))
    response.status_code = status_for(error)
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

    @app.errorhandler(Exception)
    def _unexpected(error: Exception):
        log.exception("unexpected error on %s %s", request.method, request.path)
        response = jsonify(error_body(-1, "UNKNOWN_SERVER_ERROR", f"{type(error).__name__}: {error}"))
        response.status_code = 500
        return response
