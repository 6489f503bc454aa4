"""What the engine keeps per principal once the authorizer is on: denials logged
without flooding, whose producer id is whose, and the abuse limits of a shared broker.

* :class:`DenialLog` -- each denial is counted; it is logged once per (principal,
  operation, resource) per :data:`DENIAL_LOG_INTERVAL_S`, so a client retrying in a
  loop cannot flood the log, and at most :data:`DENIAL_LINES_PER_INTERVAL` lines in all
  per interval, so neither can one probing many names (the rest are summed up in one line).
* :class:`ProducerOwners` -- the principal each producer id was handed to by
  InitProducerId (issue 15, item 5: the seeds leave PID hijacking as future work).
  Durable: ``Access.bind_producer`` writes each binding to ``__cluster_metadata``
  before InitProducerId answers, and the engine loads them at start, so after a
  restart the refusals are the ones before (issue 29, item 2). An id nobody is bound to
  (handed out with the authorizer off, or forgotten past :data:`OWNERS_REMEMBERED`) is
  owned by the first principal to use it. A transactional id's producer id is also
  protected by its transactional id: a Produce naming it must be authorized for it, and
  the engine checks that the batch's producer id is that transactional id's
  (``Engine._verify_producer``).
* :class:`ProducerIdRate` -- KIP-936's idea: at most ``rate`` new producer ids per
  principal per second (``exactly.producer.id.rate.per.principal``).
* :class:`OpenTransactions` -- the transactional ids a principal has a transaction
  open on, at most ``exactly.max.open.transactions.per.principal`` of them.

Everything here runs on the engine's loop: no locks.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Callable, Deque

log = logging.getLogger(__name__)

#: how often one (principal, operation, resource) denial is logged again
DENIAL_LOG_INTERVAL_S = 60.0
#: the denials remembered for rate-limiting the log; past it the memory starts over
DENIALS_REMEMBERED = 10_000
#: denial lines logged per interval at most
DENIAL_LINES_PER_INTERVAL = 100
#: producer ids whose owner is remembered; past it the oldest binding is forgotten, in
#: memory and on disk (and that id is then unbound, see the module docstring)
OWNERS_REMEMBERED = 100_000


class DenialLog:
    """Logs a denial the first time it is seen, and again after the interval."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._logged: dict[tuple[str, ...], float] = {}
        self._window_start = now()
        self._lines = self._suppressed = 0

    def denied(self, surface: str, principal: str, host: str, operation: str, resource_type: str,
               name: str) -> None:
        key = (principal, host, operation, resource_type, name)
        now = self._now()
        last = self._logged.get(key)
        if last is not None and now - last < DENIAL_LOG_INTERVAL_S:
            return
        if not self._line_allowed(now):
            return
        if len(self._logged) >= DENIALS_REMEMBERED:
            self._logged.clear()
        self._logged[key] = now
        log.warning("authorization: %s denied %s from %s: %s on %s %r (logged once a minute at most)",
                    surface, principal, host, operation, resource_type, name)


    def _line_allowed(self, now: float) -> bool:
        """Within this interval's lines; a new interval first says what the last one left out."""
        if now - self._window_start >= DENIAL_LOG_INTERVAL_S:
            if self._suppressed:
                log.warning("authorization: %d more denials were not logged in the last minute", self._suppressed)
            self._window_start, self._lines, self._suppressed = now, 0, 0
        if self._lines >= DENIAL_LINES_PER_INTERVAL:
            self._suppressed += 1
            return False
        self._lines += 1
        return True


class ProducerOwners:
    """producer id -> the principal it belongs to."""

    def __init__(self) -> None:
        self._owners: dict[int, str] = {}

    def bind(self, producer_id: int, principal: str) -> list[int]:
        """Returns the producer ids forgotten to make room (the oldest bound)."""
        self._owners.pop(producer_id, None)
        self._owners[producer_id] = principal  # the newest last: the oldest goes first
        forgotten = []
        while len(self._owners) > OWNERS_REMEMBERED:
            oldest = next(iter(self._owners))
            del self._owners[oldest]
            forgotten.append(oldest)
        return forgotten

    def owner(self, producer_id: int) -> str | None:
        return self._owners.get(producer_id)

    def claim(self, producer_id: int, principal: str) -> bool:
        """Whether ``principal`` may use the producer id: it owns it, or nobody does
        (then it does from now on)."""
        return self._owners.setdefault(producer_id, principal) == principal


class ProducerIdRate:
    """At most ``rate`` producer ids per principal in any second (0: no limit)."""

    def __init__(self, rate: int, now: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._now = now
        self._handed_out: dict[str, Deque[float]] = collections.defaultdict(collections.deque)

    def throttle_ms(self, principal: str) -> int:
        """0 and the id counted, or how long until the principal may have one."""
        if self.rate <= 0:
            return 0
        now = self._now()
        times = self._handed_out[principal]
        while times and now - times[0] >= 1.0:
            times.popleft()
        if len(times) >= self.rate:
            return max(1, int((1.0 - (now - times[0])) * 1000))
        times.append(now)
        return 0


class OpenTransactions:
    """principal -> the transactional ids it may have open; ``is_open`` says which still
    are. An admitted id counts as open until its request is settled, before the
    coordinator has made it Ongoing: two requests at once cannot both pass the cap."""

    def __init__(self, cap: int, is_open: Callable[[str], bool]) -> None:
        self.cap = cap
        self._is_open = is_open
        self._by_principal: dict[str, set[str]] = collections.defaultdict(set)
        self._admitting: collections.Counter[str] = collections.Counter()

    def admit(self, principal: str, transactional_id: str) -> bool:
        """Whether the principal may have a transaction open on ``transactional_id``
        (counted as open from now; :meth:`settle` once the request has ended): one already
        open always, a new one while the principal has fewer than ``cap`` (0: no limit)."""
        if self.cap <= 0:
            return True
        held = self._by_principal[principal]
        held.intersection_update({t for t in held if self._admitting[t] or self._is_open(t)})
        if transactional_id not in held and len(held) >= self.cap:
            return False
        held.add(transactional_id)
        self._admitting[transactional_id] += 1
        return True

    def settle(self, transactional_id: str) -> None:
        """An admitted request has ended: the coordinator's state says from now whether
        its transaction is open."""
        if self._admitting[transactional_id] > 1:
            self._admitting[transactional_id] -= 1
        else:
            self._admitting.pop(transactional_id, None)
