"""A fault: which requests it matches, what it does to them, how often -- and the
registry of the faults installed on a broker.

A :class:`FaultSpec` is what a test declares (kfake's ``Fault``, librdkafka's mock
``push_request_errors``, Toxiproxy's toxics, in one model); :meth:`Faults.add`
installs it and returns the :class:`Fault`, the handle that counts how often it
fired and removes itself. Several faults: the first installed one that matches a
request and still has budget acts on it (installation order), and no other.

The registry is shared by the broker's faces: the Kafka listener reads it on the
engine's loop (``installed`` is the one attribute a request checks when no fault is
installed), HTTP threads and the embedded ``Broker.faults`` change it. A change
swaps one immutable tuple, so the listener never sees half of one.
"""

from __future__ import annotations

import difflib
import enum
import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from kio.index import api_key_map

from exactly.storage.errors import KafkaError, error_for_name, error_names

#: a match value meaning "any, as long as the request has one" (a transactional id, a group)
ANY = "*"
#: API key -> Kafka's name (``Produce``, ``EndTxn``), from kio's ``end_txn``
API_NAMES: dict[int, str] = {key: "".join(w.capitalize() for w in name.split("_")) for key, name in api_key_map.items()}
#: API name, lower case -> key (``endtxn``: a name is looked up without case or underscores)
_API_KEYS: dict[str, int] = {name.lower(): key for key, name in API_NAMES.items()}

#: the request a transaction coordinator sends a partition's leader to write its markers
WRITE_TXN_MARKERS = _API_KEYS["writetxnmarkers"]


class Action(enum.Enum):
    """What a fault does to a request it matches."""

    #: answer with ``error`` (per partition where the response has partitions, the
    #: other partitions answered for real); nothing of the faulted part is done
    ERROR = "error"
    #: answer ``delay_ms`` late (a slow network or broker; the work is done at once)
    DELAY = "delay"
    #: close the connection instead of doing the work (a connection reset)
    CLOSE_BEFORE = "close-before"
    #: do the work, then close instead of answering (a lost response: the retry meets
    #: the real state)
    CLOSE_AFTER = "close-after"
    #: never answer, do nothing (the client times out; the connection stays open)
    NO_ANSWER = "no-answer"
    #: hold the answer until the fault's window ends (a GC pause, a network
    #: partition: every answer late, none lost)
    PAUSE = "pause"


class FaultError(ValueError):
    """A fault that cannot be installed as declared (an unknown API or error name...)."""


@dataclass(frozen=True)
class Match:
    """Which requests a fault matches: each field set must hold (None: any). ``topic``
    and ``partition`` hold when the request touches that partition; a fault answering
    an error then answers it on the matching partitions only."""

    api_keys: frozenset[int] = frozenset()
    client_id: str | None = None
    principal: str | None = None
    topic: str | None = None
    partition: int | None = None
    #: the request's group (``*``: any request naming a group)
    group: str | None = None
    #: the request's transactional id (``*``: any request naming one)
    transactional_id: str | None = None

    @property
    def names_internal_write(self) -> bool:
        """Whether it names a coordinator's own write by what it writes: WriteTxnMarkers, or
        an internal topic (``__transaction_state``, ``__consumer_offsets``) -- the only faults
        that match those writes, so a fault on every Produce leaves the coordinators alone."""
        return WRITE_TXN_MARKERS in self.api_keys or (self.topic or "").startswith("__")

    def partition_matches(self, topic: str, partition: int) -> bool:
        return (self.topic is None or self.topic == topic) and (self.partition is None or self.partition == partition)

    @property
    def by_partition(self) -> bool:
        return self.topic is not None or self.partition is not None


@dataclass(frozen=True)
class RequestFacts:
    """What a fault can match in one request (``exactly/app/kafka/fault_shapes.py`` extracts it)."""

    api_key: int
    client_id: str | None
    principal: str
    partitions: tuple[tuple[str, int], ...] = ()
    groups: tuple[str, ...] = ()
    transactional_id: str | None = None


@dataclass(frozen=True)
class FaultSpec:
    """A fault as declared. Budget: the first ``count`` matching requests (None: every
    one), each fired with ``probability`` (drawn from a ``random.Random(seed)``, so a
    seeded fault fires on the same requests every run); ``duration_ms``: removed that
    long after installation (None: until removed)."""

    match: Match
    action: Action
    error: type[KafkaError] | None = None
    delay_ms: int = 0
    count: int | None = None
    probability: float = 1.0
    seed: int | None = None
    duration_ms: int | None = None
    #: the event preset that installed it (``exactly/app/faults/events.py``), for the listing
    event: str | None = None

    def __post_init__(self) -> None:
        if (self.action is Action.ERROR) != (self.error is not None):
            raise FaultError("an error fault needs an error, and only an error fault takes one")
        if self.action is Action.DELAY and self.delay_ms <= 0:
            raise FaultError("a delay fault needs delay_ms > 0")
        if self.action is Action.PAUSE and self.duration_ms is None:
            raise FaultError("a pause needs duration_ms: it holds the answers until then")
        if self.count is not None and self.count < 1:
            raise FaultError("count must be at least 1 (omit it for every matching request)")
        if not 0 < self.probability <= 1:
            raise FaultError("probability must be in (0, 1]")
        if self.duration_ms is not None and self.duration_ms <= 0:
            raise FaultError("duration_ms must be positive")

    def matches(self, facts: RequestFacts) -> bool:
        m = self.match
        return ((not m.api_keys or facts.api_key in m.api_keys)
                and (m.client_id is None or m.client_id == facts.client_id)
                and (m.principal is None or m.principal == facts.principal)
                and (not m.by_partition or any(m.partition_matches(t, p) for t, p in facts.partitions))
                and _named(m.group, facts.groups)
                and _named(m.transactional_id, (facts.transactional_id,) if facts.transactional_id else ()))


def _named(wanted: str | None, present: tuple[str, ...]) -> bool:
    return wanted is None or (bool(present) if wanted == ANY else wanted in present)


def api_key(name_or_key: str | int) -> int:
    """An API key from Kafka's name (``Produce``) or its number; FaultError if unknown."""
    if isinstance(name_or_key, int) or str(name_or_key).isdigit():
        key = int(name_or_key)
        if key not in api_key_map:
            raise FaultError(f"unknown API key {key}")
        return key
    try:
        return _API_KEYS[str(name_or_key).replace("_", "").lower()]
    except KeyError:
        raise FaultError(unknown("API", str(name_or_key), API_NAMES.values(), "Produce, Fetch, EndTxn, ...")) from None


def kafka_error(name: str) -> type[KafkaError]:
    """The error class for a Kafka error name; FaultError if this broker knows none."""
    try:
        return error_for_name(name.upper())
    except KeyError:
        raise FaultError(unknown("Kafka error", name, error_names(), "NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR, ... "
                                 "(exactly/storage/errors.py)")) from None


def unknown(what: str, name: str, known: Iterable[str], examples: str) -> str:
    """``unknown <what> 'name'``, with the known names closest to it (spelled as known,
    compared without case), else ``examples``: never the whole list."""
    by_folded = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), by_folded, n=3, cutoff=0.6)
    if close:
        return f"unknown {what} {name!r}: did you mean {' or '.join(by_folded[c] for c in close)}?"
    return f"unknown {what} {name!r} (such as {examples})"


def declare(*, action: str | Action | None = None, api: str | int | Iterable[str | int] | None = None,
            client_id: str | None = None, principal: str | None = None, topic: str | None = None,
            partition: int | None = None, group: str | None = None, transactional_id: str | None = None,
            error: str | None = None, delay_ms: int = 0, count: int | None = None, probability: float = 1.0,
            seed: int | None = None, duration_ms: int | None = None) -> FaultSpec:
    """A :class:`FaultSpec` from plain values, as every face takes them: API names or
    keys, an error name; ``action`` defaults to ``error`` with an error, ``delay``
    with a delay. FaultError when something is unknown or inconsistent."""
    if action is None:
        action = Action.ERROR if error else Action.DELAY if delay_ms else None
        if action is None:
            raise FaultError("say what the fault does: an error, a delay, or an action "
                             f"({', '.join(a.value for a in Action)})")
    try:
        action = Action(action)
    except ValueError:
        raise FaultError(f"unknown action {action!r} ({', '.join(a.value for a in Action)})") from None
    apis = () if api is None else (api,) if isinstance(api, (str, int)) else tuple(api)
    match = Match(frozenset(api_key(a) for a in apis), client_id, principal, topic, partition, group,
                  transactional_id)
    return FaultSpec(match, action, kafka_error(error) if error else None, delay_ms, count, probability, seed,
                     duration_ms)


@dataclass(eq=False)
class Fault:
    """An installed fault: its spec, and how often it fired (the handle a test keeps)."""

    id: int
    spec: FaultSpec
    #: wall-clock ms of installation, and of the last time it fired
    installed_ms: int
    last_fired_ms: int | None = None
    fired: int = 0
    #: ``time.monotonic()`` at which its window ends (None: no window)
    expires: float | None = None
    _registry: "Faults | None" = field(default=None, repr=False)
    _random: random.Random | None = field(default=None, repr=False)

    def remove(self) -> bool:
        """Uninstall; False if it was no longer installed (removed or expired)."""
        return self._registry is not None and self._registry.remove(self.id)

    def remaining_s(self) -> float:
        """Seconds left in its window (0 without one)."""
        return 0.0 if self.expires is None else max(0.0, self.expires - time.monotonic())

    @property
    def active(self) -> bool:
        """Installed, and its window (if any) not over."""
        return (self._registry is not None and self in self._registry.installed
                and (self.expires is None or time.monotonic() < self.expires))

    @property
    def exhausted(self) -> bool:
        return self.spec.count is not None and self.fired >= self.spec.count

    def describe(self) -> dict[str, Any]:
        """The fault as every face shows it (JSON-ready)."""
        spec, match = self.spec, self.spec.match
        return {
            "fault_id": self.id, "action": spec.action.value, "event": spec.event,
            "api": [API_NAMES[k] for k in sorted(match.api_keys)], "client_id": match.client_id,
            "principal": match.principal, "topic": match.topic, "partition": match.partition,
            "group": match.group, "transactional_id": match.transactional_id,
            "error": spec.error.name if spec.error else None, "delay_ms": spec.delay_ms, "count": spec.count,
            "probability": spec.probability, "seed": spec.seed, "duration_ms": spec.duration_ms,
            "remaining_ms": None if self.expires is None else int(self.remaining_s() * 1000),
            "fired": self.fired, "installed_ms": self.installed_ms, "last_fired_ms": self.last_fired_ms}


class Faults:
    """The faults installed on one broker, in installation order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        #: the installed faults; empty (falsy) when none is: the listener's one check
        self.installed: tuple[Fault, ...] = ()

    def add(self, spec: FaultSpec | None = None, **declared: Any) -> Fault:
        """Install ``spec`` (or the fault :func:`declare` makes of ``declared``) after
        every fault installed before it; returns its handle::

            broker.faults.add(api="Produce", topic="orders", error="NOT_ENOUGH_REPLICAS", count=3)
        """
        if spec is None:
            spec = declare(**declared)
        now = time.monotonic()
        with self._lock:
            fault = Fault(next(self._ids), spec, int(time.time() * 1000),
                          expires=None if spec.duration_ms is None else now + spec.duration_ms / 1000,
                          _registry=self,
                          _random=random.Random(spec.seed) if spec.probability < 1 else None)
            self.installed = (*self.installed, fault)
        return fault

    def event(self, event: str, duration_ms: int | None = None, coordinator: str = "transaction") -> list[Fault]:
        """Install the faults of an event preset (``exactly/app/faults/events.py``): ``pause``,
        ``disk-full``, ``coordinator-not-available``, ``coordinator-load-in-progress``,
        ``not-coordinator`` (of the ``transaction`` or ``group`` coordinator)."""
        from exactly.app.faults.events import Coordinator, Event, event_specs  # events.py builds on this module

        try:
            kind, which = Event(event), Coordinator(coordinator)
        except ValueError as error:
            raise FaultError(f"{error} (events: {', '.join(k.value for k in Event)}; coordinators: "
                             f"{', '.join(c.value for c in Coordinator)})") from None
        return [self.add(spec) for spec in event_specs(kind, duration_ms, which)]

    def remove(self, fault_id: int) -> bool:
        with self._lock:
            kept = tuple(f for f in self.installed if f.id != fault_id)
            removed, self.installed = len(kept) != len(self.installed), kept
        return removed

    def clear(self) -> int:
        """Remove every fault; returns how many there were."""
        with self._lock:
            removed, self.installed = len(self.installed), ()
        return removed

    def list(self) -> list[Fault]:
        """The faults installed now (expired ones removed first)."""
        self._expire(time.monotonic())
        return list(self.installed)

    def get(self, fault_id: int) -> Fault | None:
        return next((f for f in self.list() if f.id == fault_id), None)

    def fire(self, facts: RequestFacts, internal: bool = False) -> Fault | None:
        """The first installed fault that matches ``facts`` and has budget left, counted
        as fired; None when none acts on this request. ``internal``: the request is a
        coordinator's own write (``exactly/app/faults/internal_writes.py``), which only a
        fault naming such writes matches (:attr:`Match.names_internal_write`)."""
        now = time.monotonic()
        with self._lock:
            for fault in self.installed:
                if fault.expires is not None and now >= fault.expires:
                    continue
                if internal and not fault.spec.match.names_internal_write:
                    continue
                if fault.exhausted or not fault.spec.matches(facts):
                    continue
                if fault._random is not None and fault._random.random() >= fault.spec.probability:
                    continue
                fault.fired += 1
                fault.last_fired_ms = int(time.time() * 1000)
                break
            else:
                fault = None
        self._expire(now)
        return fault

    def _expire(self, now: float) -> None:
        """Drop the faults whose window has ended (spent ones stay listed, with their count)."""
        if any(_over(f, now) for f in self.installed):
            with self._lock:
                self.installed = tuple(f for f in self.installed if not _over(f, now))


def _over(fault: Fault, now: float) -> bool:
    return fault.expires is not None and now >= fault.expires
