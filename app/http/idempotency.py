"""``Idempotency-Key``: a retried HTTP call appends nothing new and gets the first answer.

A client that lost the answer to a call (a timeout, a dropped connection) sends it
again with the same ``Idempotency-Key`` header. Calls are remembered per scope (the
transactional id for transaction calls, the topic for a produce) and key, with a
SHA-256 fingerprint of the operation (method and path) and of the JSON body:

* the same key and fingerprint -- the first answer is returned again, with
  ``Idempotent-Replayed: true``, and nothing is executed; a retry that arrives
  while the first call is still running waits for its answer;
* the same key with another operation or body -- 422, nothing is executed;
* answers worth repeating are kept: successes and errors a retry would meet again.
  A retriable error (5xx, or one sent with ``Retry-After``) is not kept, so the
  retry runs the call again.

The memory is this process's, bounded to :data:`CAPACITY` keys (least recently
used go first), and gone after a restart. Across restarts the Kafka-level
identities dedupe instead: producer id, epoch and sequence on a produce (the
partition's producer state is persisted), and the producer epoch on transaction
calls (a call from an older epoch is fenced).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from flask import Response, current_app, make_response, request
from werkzeug.exceptions import UnprocessableEntity

from app.http import errors, inputs
from storage.errors import InvalidRequestError, KafkaError

HEADER = "Idempotency-Key"
CAPACITY = 10_000
#: how long a retry waits for the answer of the first call, still running
WAIT_S = 120
KEY_PATTERN = re.compile(r"^[\x21-\x7e]{1,255}$")


@dataclass
class _Entry:
    fingerprint: str
    done: threading.Event = field(default_factory=threading.Event)
    #: (status, body, mimetype) once answered; None if the answer was not kept
    answer: tuple[int, bytes, str] | None = None


class IdempotencyCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def run(self, scope: str, key: str, fingerprint: str, call: Callable[[], Response]) -> Response:
        """The answer of ``call``, run at most once per (scope, key) while remembered."""
        while True:
            with self._lock:
                entry = self._entries.get((scope, key))
                if entry is None:
                    entry = self._entries[(scope, key)] = _Entry(fingerprint)
                    while len(self._entries) > self.capacity:
                        self._entries.popitem(last=False)
                    break
                self._entries.move_to_end((scope, key))
            if entry.fingerprint != fingerprint:
                raise UnprocessableEntity(f"{HEADER} {key!r} was used for another request "
                                          f"(a different operation or body)")
            if not entry.done.wait(WAIT_S):
                raise UnprocessableEntity(f"the first request with {HEADER} {key!r} is still running")
            if entry.answer is not None:
                status, body, mimetype = entry.answer
                replay = Response(body, status=status, mimetype=mimetype)
                replay.headers["Idempotent-Replayed"] = "true"
                return replay
            # the first answer was not kept: run again (the loop makes this call the owner)
        try:
            response = call()
            if response.status_code < 500 and "Retry-After" not in response.headers:
                entry.answer = (response.status_code, response.get_data(), response.mimetype)
            return response
        finally:
            if entry.answer is None:
                with self._lock:
                    if self._entries.get((scope, key)) is entry:
                        del self._entries[(scope, key)]
            entry.done.set()


def fingerprint() -> str:
    """SHA-256 of the method, the path and the canonical JSON body."""
    try:
        body = json.dumps(inputs.json_body(required=False), sort_keys=True, separators=(",", ":"))
    except InvalidRequestError:
        body = request.get_data().decode("latin-1")  # not JSON: the handler will refuse it
    return hashlib.sha256(f"{request.method} {request.path}\n{body}".encode("utf-8", "surrogatepass")).hexdigest()


def idempotent(scope: Callable[..., str]) -> Callable:
    """Make a view honour ``Idempotency-Key``; ``scope(**view_args)`` names its scope."""

    def decorate(view: Callable[..., Response]) -> Callable[..., Response]:
        @functools.wraps(view)
        def run(**kwargs):
            key = request.headers.get(HEADER)
            if key is None:
                return view(**kwargs)
            if not KEY_PATTERN.match(key):
                raise InvalidRequestError(f"{HEADER} must be 1 to 255 visible ASCII characters")
            cache: IdempotencyCache = current_app.extensions["exactly.idempotency"]
            return cache.run(scope(**kwargs), key, fingerprint(), lambda: _answer(view, kwargs))
        return run

    return decorate


def _answer(view: Callable[..., Response], kwargs: dict) -> Response:
    """The view's response, Kafka errors included (they are answers worth repeating)."""
    try:
        return make_response(view(**kwargs))
    except KafkaError as e:
        return errors.kafka_error_response(e)
