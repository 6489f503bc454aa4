"""``Idempotency-Key``: a retried HTTP call appends nothing new and gets the first answer.

A client that lost the answer to a call (a timeout, a dropped connection, a broker
that was killed) sends it again with the same ``Idempotency-Key`` header. Calls are
remembered per principal (who sent them: another principal's keys are another
space), per :class:`Scope` (the transactional id for transaction calls, the topic for
a produce) and key, with a SHA-256 fingerprint of the operation (method and path) and
of the JSON body:

* the same key and fingerprint -- the first answer is returned again, with
  ``Idempotent-Replayed: true``, and nothing is executed; a retry that arrives
  while the first call is still running waits for its answer;
* the same key with another operation or body -- 422, nothing is executed;
* answers worth repeating are kept: successes and errors a retry would meet again.
  A retriable error (5xx, or one sent with ``Retry-After``) is not kept, so the
  retry runs the call again.

**How long a key is kept**: as long as the call it protects can be retried. A
transaction call's key lives with its transaction: while the transaction it was
answered in is open, and at most ``transactional.id.expiration.ms`` (after which the
coordinator forgets the transactional id itself); a produce's key at most
``producer.id.expiration.ms`` (how long Kafka keeps a producer's deduplication state).
Nothing else ever removes a key: each principal may hold
``exactly.http.idempotency.keys.per.principal`` keys, and a new key past that is
refused -- 429, THROTTLING_QUOTA_EXCEEDED -- rather than evicting a key whose call
could still be retried (a client flooding keys only ever fills its own principal's
place; every client of a broker without authentication is ``User:ANONYMOUS``).

The cache is this process's. The one answer that must outlive the process is written
with the data itself and put back into the cache when the app is made
(:meth:`IdempotencyCache.remember`): a transaction's ``records`` call stores its key,
fingerprint and principal in each record it appends, and its answer is rebuilt from
the open transactions at start (``exactly/app/http/api/transactions.py``). The other
calls need no memory across a restart: ``offsets`` writes the same pending offsets
again, ``commit`` and ``abort`` of a finished transaction answer from the
coordinator's state, ``init`` bumps the epoch once more (only the lost answer's epoch
is fenced), and a plain produce is deduplicated by Kafka's own producer id, epoch and
sequence when it carries them (the producer state is persisted); without them the key
protects it within one process only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

from flask import Flask, Response, current_app, g, make_response, request
from werkzeug.exceptions import UnprocessableEntity

from exactly.app.http import errors
from exactly.app.http.api import models
from exactly.app.http.api.validation import json_body
from exactly.app.http.auth import request_principal
from exactly.storage.errors import InvalidRequestError, KafkaError, ThrottlingQuotaExceededError

if TYPE_CHECKING:
    from exactly.app.engine import Engine

HEADER = "Idempotency-Key"
EXTENSION = "exactly.idempotency"
#: how long a retry waits for the answer of the first call, still running
WAIT_S = 120
KEY_PATTERN = re.compile(models.IDEMPOTENCY_KEY)


@dataclass(frozen=True)
class Scope:
    """Where a key is unique: one transactional id's calls, or one topic's produce calls."""

    transactional_id: str | None = None
    topic: str | None = None


@dataclass
class _Entry:
    fingerprint: str
    scope: Scope
    done: threading.Event = field(default_factory=threading.Event)
    #: (status, body, mimetype) once answered; None if the answer was not kept
    answer: tuple[int, bytes, str | None] | None = None
    #: the engine clock's time of the answer (None: the call still runs)
    answered_ms: int | None = None


#: (principal, scope, key)
_Id = tuple[str, Scope, str]


class IdempotencyCache:
    """The keys of one broker's HTTP API, per principal (see the module docstring)."""

    def __init__(self, engine: "Engine") -> None:
        self._engine = engine
        config = engine.config
        self.keys_per_principal = config.exactly_http_idempotency_keys_per_principal
        self._txn_retention_ms = config.transactional_id_expiration_ms
        self._produce_retention_ms = config.producer_id_expiration_ms
        self._entries: dict[_Id, _Entry] = {}
        #: principal -> its keys held
        self._held: dict[str, set[_Id]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def remember(self, principal: str, scope: Scope, key: str, fingerprint: str, answer: Response) -> None:
        """Keep ``answer`` as the first answer of (principal, scope, key), unless one is
        kept already (how answers written with the data come back after a restart; never
        refused: they were given before)."""
        kept = _kept(answer)
        with self._lock:
            if kept is None or (principal, scope, key) in self._entries:
                return
            entry = self._add((principal, scope, key), _Entry(fingerprint, scope, answer=kept))
            entry.answered_ms = self._engine.clock.now_ms()
            entry.done.set()

    def run(self, principal: str, scope: Scope, key: str, fingerprint: str, call: Callable[[], Response]) -> Response:
        """The answer of ``call``, run at most once per (principal, scope, key) while kept.
        :raise ThrottlingQuotaExceededError: a new key, and the principal holds its quota."""
        ident = (principal, scope, key)
        while True:
            entry, owned = self._entry(ident, fingerprint)
            if owned:
                break  # a new key: this call runs
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
            entry.answered_ms = self._engine.clock.now_ms()
            return response
        finally:
            if entry.answer is None:
                with self._lock:
                    if self._entries.get(ident) is entry:
                        self._remove(ident)
            entry.done.set()

    def _entry(self, ident: _Id, fingerprint: str) -> tuple[_Entry, bool]:
        """The entry of ``ident`` and whether it is new (the caller runs the call): the
        one kept, or a new one once the principal has room.
        :raise ThrottlingQuotaExceededError: a new key, and no room."""
        for attempt in range(2):
            with self._lock:
                entry = self._entries.get(ident)
                if entry is not None:
                    return entry, False
                if len(self._held.get(ident[0], ())) < self.keys_per_principal:
                    return self._add(ident, _Entry(fingerprint, ident[1])), True
            if attempt == 0:
                self._release(ident[0])
        raise ThrottlingQuotaExceededError(
            f"{ident[0]} holds {self.keys_per_principal} {HEADER}s whose calls can still be retried "
            f"(exactly.http.idempotency.keys.per.principal); a new one is refused until one of them expires "
            f"or its transaction ends", throttle_time_ms=self._soonest_expiry_ms(ident[0]))

    def _add(self, ident: _Id, entry: _Entry) -> _Entry:
        self._entries[ident] = entry
        self._held.setdefault(ident[0], set()).add(ident)
        return entry

    def _remove(self, ident: _Id) -> None:
        del self._entries[ident]
        held = self._held[ident[0]]
        held.discard(ident)
        if not held:
            del self._held[ident[0]]

    def _retention_ms(self, scope: Scope) -> int:
        return self._txn_retention_ms if scope.transactional_id is not None else self._produce_retention_ms

    def _answered(self, principal: str) -> list[tuple[_Id, _Entry]]:
        with self._lock:
            return [(ident, entry) for ident in self._held.get(principal, ())
                    if (entry := self._entries[ident]).answered_ms is not None]

    def _release(self, principal: str) -> None:
        """Drop the principal's keys whose calls can no longer be retried: past their
        retention, or answered in a transaction that has ended since."""
        answered = self._answered(principal)
        now = self._engine.clock.now_ms()
        txn_ids = {e.scope.transactional_id for _, e in answered if e.scope.transactional_id is not None}
        open_since = self._engine.call(_open_since, self._engine, txn_ids) if txn_ids else {}
        with self._lock:
            for ident, entry in answered:
                assert entry.answered_ms is not None
                txn_id = entry.scope.transactional_id
                expired = now - entry.answered_ms >= self._retention_ms(entry.scope)
                started = open_since.get(txn_id) if txn_id is not None else None
                ended = txn_id is not None and (started is None or started > entry.answered_ms)
                if (expired or ended) and self._entries.get(ident) is entry:
                    self._remove(ident)

    def _soonest_expiry_ms(self, principal: str) -> int:
        now = self._engine.clock.now_ms()
        return max(0, min((e.answered_ms + self._retention_ms(e.scope) - now for _, e in self._answered(principal)
                           if e.answered_ms is not None), default=0))


def _open_since(engine: "Engine", transactional_ids: Iterable[str]) -> dict[str, int | None]:
    """On the loop: each transactional id's open transaction's start (ms), None when none is open."""
    found: dict[str, int | None] = {}
    for txn_id in transactional_ids:
        meta = engine.transactions.describe_transaction(txn_id)
        found[txn_id] = meta.txn_start_timestamp if meta is not None and meta.state.is_open else None
    return found


def _kept(response: Response) -> tuple[int, bytes, str | None] | None:
    """What a retry gets back: the answer, unless a retry could meet another one."""
    if response.status_code >= 500 or "Retry-After" in response.headers:
        return None
    return response.status_code, response.get_data(), response.mimetype


def cache(app: Flask) -> IdempotencyCache:
    """The app's cache (made on first use)."""
    found = app.extensions.get(EXTENSION)
    if found is None:
        found = app.extensions[EXTENSION] = IdempotencyCache(app.extensions["exactly.engine"])
    return found


def current_call() -> tuple[str, str, str] | None:
    """``(key, fingerprint, principal)`` of the request being run under an
    ``Idempotency-Key``; None without one. For a view that stores them with what it writes."""
    return g.get("idempotency")


def fingerprint() -> str:
    """SHA-256 of the method, the path and the canonical JSON body."""
    try:
        body = json.dumps(json_body(required=False), sort_keys=True, separators=(",", ":"))
    except InvalidRequestError:
        body = request.get_data().decode("latin-1")  # not JSON: the handler will refuse it
    return hashlib.sha256(f"{request.method} {request.path}\n{body}".encode("utf-8", "surrogatepass")).hexdigest()


def idempotent(scope: Callable[..., Scope]) -> Callable:
    """Make a view honour ``Idempotency-Key``; ``scope(**view_args)`` is its scope."""

    def decorate(view: Callable[..., Response]) -> Callable[..., Response]:
        @functools.wraps(view)
        def run(**kwargs):
            key = request.headers.get(HEADER)
            if key is None:
                return view(**kwargs)
            if not KEY_PATTERN.match(key):
                raise InvalidRequestError(f"{HEADER} must be 1 to 255 visible ASCII characters")
            principal = str(request_principal())
            g.idempotency = (key, fingerprint(), principal)
            return cache(current_app).run(principal, scope(**kwargs), key, g.idempotency[1],
                                          lambda: _answer(view, kwargs))
        return run

    return decorate


def _answer(view: Callable[..., Response], kwargs: dict) -> Response:
    """The view's response, Kafka errors included (they are answers worth repeating)."""
    try:
        return make_response(view(**kwargs))
    except KafkaError as e:
        return errors.kafka_error_response(e)
