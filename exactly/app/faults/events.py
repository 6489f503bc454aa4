"""Fault-shaped events: presets that install the faults a real broker's trouble looks
like from a client, through the same :class:`~exactly.app.faults.fault.Faults` registry.

* a **coordinator** (``transaction`` or ``group``) that is unavailable, loading or no
  longer the coordinator for ``duration_ms``: its APIs answer
  COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, as
  during a coordinator move; FindCoordinator answers COORDINATOR_NOT_AVAILABLE too
  when it is unavailable (while loading, or moved, it names this node, as Kafka's
  does, and the client retries there);
* a **pause**: every request held until ``duration_ms`` have passed, then answered
  (a long GC pause or a network partition: late, nothing lost);
* a **full disk**: writes refused as this broker refuses them on a real full disk
  (``exactly/app/engine/disk_space.py``): Produce and the topic changes KAFKA_STORAGE_ERROR,
  the transaction coordinator's writes COORDINATOR_NOT_AVAILABLE, the group
  coordinator's offset commits NOT_COORDINATOR -- all retriable, so clients wait it
  out; for ``duration_ms`` or until removed.
"""

from __future__ import annotations

import enum

from exactly.app.faults.fault import ANY, Action, FaultError, FaultSpec, Match, api_key
from exactly.storage.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    KafkaError,
    KafkaStorageError,
    NotCoordinatorError,
)


class Event(enum.Enum):
    COORDINATOR_NOT_AVAILABLE = "coordinator-not-available"
    COORDINATOR_LOAD_IN_PROGRESS = "coordinator-load-in-progress"
    NOT_COORDINATOR = "not-coordinator"
    PAUSE = "pause"
    DISK_FULL = "disk-full"


class Coordinator(enum.Enum):
    TRANSACTION = "transaction"
    GROUP = "group"


def _keys(*names: str) -> frozenset[int]:
    return frozenset(api_key(name) for name in names)


#: the APIs each coordinator answers (Kafka's routing of them to the coordinator)
COORDINATOR_APIS = {
    Coordinator.TRANSACTION: _keys("InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn"),
    Coordinator.GROUP: _keys("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch",
                             "TxnOffsetCommit", "DescribeGroups", "DeleteGroups", "OffsetDelete"),
}
FIND_COORDINATOR = _keys("FindCoordinator")
COORDINATOR_ERRORS: dict[Event, type[KafkaError]] = {
    Event.COORDINATOR_NOT_AVAILABLE: CoordinatorNotAvailableError,
    Event.COORDINATOR_LOAD_IN_PROGRESS: CoordinatorLoadInProgressError,
    Event.NOT_COORDINATOR: NotCoordinatorError,
}
#: what a full disk answers, per API (tests/test_disk_full.py shows the real one)
DISK_FULL_ERRORS: tuple[tuple[frozenset[int], type[KafkaError]], ...] = (
    (_keys("Produce", "CreateTopics", "CreatePartitions", "DeleteRecords"), KafkaStorageError),
    (COORDINATOR_APIS[Coordinator.TRANSACTION], CoordinatorNotAvailableError),
    (_keys("OffsetCommit", "TxnOffsetCommit"), NotCoordinatorError),
)


def event_specs(event: Event, duration_ms: int | None,
                coordinator: Coordinator = Coordinator.TRANSACTION) -> list[FaultSpec]:
    """The faults that make ``event`` happen (``coordinator``: which one, for the
    coordinator events)."""
    label = event.value
    if event is Event.PAUSE:
        return [FaultSpec(Match(), Action.PAUSE, duration_ms=duration_ms, event=label)]
    if event is Event.DISK_FULL:
        return [FaultSpec(Match(api_keys=keys), Action.ERROR, error=error, duration_ms=duration_ms, event=label)
                for keys, error in DISK_FULL_ERRORS]
    if duration_ms is None:
        raise FaultError(f"{label} needs duration_ms (how long the coordinator is away)")
    keys = COORDINATOR_APIS[coordinator]
    if event is Event.COORDINATOR_NOT_AVAILABLE:
        keys |= FIND_COORDINATOR
    named = (Match(api_keys=keys, transactional_id=ANY) if coordinator is Coordinator.TRANSACTION
             else Match(api_keys=keys, group=ANY))
    return [FaultSpec(named, Action.ERROR, error=COORDINATOR_ERRORS[event], duration_ms=duration_ms,
                      event=f"{label} ({coordinator.value})")]
