"""``Idempotency-Key``: a retried HTTP call appends nothing new and gets the first answer.

A client that lost the answer to a call (a timeout, a dropped connection, a broker
that was killed) sends it again with the same ``Idempotency-Key`` header. Calls are
remembered per scope (the transactional id for transaction calls, the topic for a
produce) and key, with a SHA-256 fingerprint of the operation (method and path) and
of the JSON body:

* the same key and fingerprint -- the first answer is returned again, with
  ``Idempotent-Replayed: true``, and nothing is executed; a retry that arrives
  while the first call is still running waits for its answer;
* the same key with another operation or body -- 422, nothing is executed;
* answers worth repeating are kept: successes and errors a retry would meet again.
  A retriable error (5xx, or one sent with ``Retry-After``) is not kept, so the
  retry runs the call again.

The cache is this process's, bounded to :data:`CAPACITY` keys (least recently used
go first). The one answer that must outlive the process is written with the data
itself and put back into the cache when the app is made
(:meth:`IdempotencyCache.remember`): a transaction's ``records`` call stores its key
and fingerprint in each record it appends, and its answer is rebuilt from the open
transactions at start (``exactly/app/http/api/transactions.py``). The other calls need no memory
across a restart: ``offsets`` writes the same pending offsets again, ``commit`` and
``abort`` of a finished transaction answer from the coordinator's state, ``init``
bumps the epoch once more (only the lost answer's epoch is fenced), and a plain
produce is deduplicated by Kafka's own producer id, epoch and sequence when it
carries them (the producer state is persisted); without them the key protects it
within one process only.
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

from flask import Flask, Response, current_app, g, make_response, request
from werkzeug.exceptions import UnprocessableEntity

from exactly.app.http import errors
from exactly.app.http.api import models
from exactly.app.http.api.validation import json_body
from exactly.storage.errors import InvalidRequestError, KafkaError

HEADER = "Idempotency-Key"
EXTENSION = "exactly.idempotency"
CAPACITY = 10_000
#: how long a retry waits for the answer of the first call, still running
WAIT_S = 120
KEY_PATTERN = re.compile(models.IDEMPOTENCY_KEY)


@dataclass
class _Entry:
    fingerprint: str
    done: threading.Event = field(default_factory=threading.Event)
    #: (status, body, mimetype) once answered; None if the answer was not kept
    answer: tuple[int, bytes, str | None] | None = None


class IdempotencyCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def remember(self, scope: str, key: str, fingerprint: str, answer: Response) -> None:
        """Keep ``answer`` as the first answer of (scope, key), unless one is kept already
        (how answers written with the data come back after a restart)."""
        kept = _kept(answer)
        with self._lock:
            if kept is None or (scope, key) in self._entries:
                return
            entry = self._entries[(scope, key)] = _Entry(fingerprint, answer=kept)
            entry.done.set()
            self._evict()

    def _evict(self) -> None:
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def run(self, scope: str, key: str, fingerprint: str, call: Callable[[], Response]) -> Response:
        """The answer of ``call``, run at most once per (scope, key) while remembered."""
        while True:
            with self._lock:
                entry = self._entries.get((scope, key))
                if entry is None:
                    entry = self._entries[(scope, key)] = _Entry(fingerprint)
                    self._evict()
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
            entry.answer = _kept(response)
            return response
        finally:
            if entry.answer is None:
                with self._lock:
                    if self._entries.get((scope, key)) is entry:
                        del self._entries[(scope, key)]
            entry.done.set()


def _kept(response: Response) -> tuple[int, bytes, str | None] | None:
    """What a retry gets back: the answer, unless a retry could meet another one."""
    if response.status_code >= 500 or "Retry-After" in response.headers:
        return None
    return response.status_code, response.get_data(), response.mimetype


def cache(app: Flask) -> IdempotencyCache:
    """The app's cache (made on first use)."""
    return app.extensions.setdefault(EXTENSION, IdempotencyCache())


def current_call() -> tuple[str, str] | None:
    """``(key, fingerprint)`` of the request being run under an ``Idempotency-Key``;
    None without one. For a view that stores them with what it writes."""
    return g.get("idempotency")


def fingerprint() -> str:
    """SHA-256 of the method, the path and the canonical JSON body."""
    try:
        body = json.dumps(json_body(required=False), sort_keys=True, separators=(",", ":"))
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
            g.idempotency = (key, fingerprint())
            return cache(current_app).run(scope(**kwargs), key, g.idempotency[1], lambda: _answer(view, kwargs))
        return run

    return decorate


def _answer(view: Callable[..., Response], kwargs: dict) -> Response:
    """The view's response, Kafka errors included (they are answers worth repeating)."""
    try:
        return make_response(view(**kwargs))
    except KafkaError as e:
        return errors.kafka_error_response(e)
