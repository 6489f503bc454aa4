"""Faults on the coordinators' own writes: what Kafka's coordinators ask of a partition's
leader, faulted like any request (``fault.py``'s model) -- a transaction's markers are a
WriteTxnMarkers request to each partition, an append to ``__transaction_state`` or
``__consumer_offsets`` a Produce to that internal topic, from the broker itself::

    held = broker.faults.add(api="WriteTxnMarkers", action="no-answer")     # PrepareCommit until removed
    broker.faults.add(api="Produce", topic="__consumer_offsets", error="KAFKA_STORAGE_ERROR", count=1)

Only a fault that names such a write (WriteTxnMarkers, or an internal topic) matches it,
so a fault on every Produce leaves the coordinators alone. What the write then meets:

* **error**: the write fails with the fault's error, nothing written -- the coordinator
  handles it as it handles the same error from the log (a refused offsets append is
  NOT_COORDINATOR to the group's member, as Kafka answers);
* **delay**: written ``delay_ms`` late;
* **pause**: held until the fault's window ends, or it is removed;
* **no-answer**: held until the fault is removed (no connection times it out);
* **close-before** / **close-after**: no connection to close: the write goes on.

``exactly/app/engine/coordinator_io.py`` asks :func:`meet` before each write.
"""

from __future__ import annotations

import asyncio

from exactly.app.faults.fault import Action, Faults, RequestFacts

#: how often a held write looks whether its fault is still there (a test facility: held
#: writes are rare, and a removal is seen within this)
HOLD_POLL_S = 0.005
#: the principal of the coordinators' own requests (Kafka's inter-broker principal)
BROKER_PRINCIPAL = "User:ANONYMOUS"


async def meet(faults: Faults, api_key: int, topic: str, partition: int, transactional_id: str | None = None,
               group: str | None = None) -> None:
    """Whatever a fault installed for this write does to it (nothing, if none matches)."""
    if not faults.installed:
        return
    facts = RequestFacts(api_key, None, BROKER_PRINCIPAL, ((topic, partition),), (group,) if group else (),
                         transactional_id)
    fault = faults.fire(facts, internal=True)
    if fault is None:
        return
    action = fault.spec.action
    if action is Action.ERROR:
        assert fault.spec.error is not None
        raise fault.spec.error(f"fault {fault.id} on {topic}-{partition}")
    if action is Action.DELAY:
        await asyncio.sleep(fault.spec.delay_ms / 1000)
    elif action in (Action.PAUSE, Action.NO_ANSWER):
        while fault.active:
            await asyncio.sleep(HOLD_POLL_S)
