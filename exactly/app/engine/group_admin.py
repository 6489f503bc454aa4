"""Consumer-group administration, as Kafka's ``kafka-consumer-groups`` tool does it.

An offset reset (``--reset-offsets --execute``) picks the partitions -- one topic's, or
every partition the group has committed offsets for (``--all-topics``) -- computes the
new offset of each from the partition's log, then commits them through the group
coordinator, which refuses unless the group is Empty (NON_EMPTY_GROUP). The targets
are the tool's:

* ``earliest`` -- the log start offset (``--to-earliest``);
* ``latest`` -- the high watermark (``--to-latest``): the tool asks ListOffsets with
  its default isolation, read_uncommitted. A read_committed consumer started there
  skips the records of transactions still open below it, whatever their outcome;
* ``offset`` -- the given offset, clamped into [log start, high watermark], as the
  tool clamps it (``--to-offset``);
* ``timestamp`` -- the first offset whose timestamp is at or after the given time
  (ListOffsets by time); a partition with no such record goes to its high watermark
  (``--to-datetime``).

A coroutine on the engine's loop (``engine.call(group_admin.reset_offsets, engine, ...)``);
deleting a group is the coordinator's own ``delete_group``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exactly.app.engine.partitions import READ_UNCOMMITTED
from exactly.storage.errors import InvalidRequestError

if TYPE_CHECKING:
    from exactly.app.engine import Engine

#: what an offset reset may go to (kafka-consumer-groups' --to-earliest, --to-latest, --to-offset, --to-datetime)
RESET_TARGETS = ("earliest", "latest", "offset", "timestamp")


async def reset_offsets(engine: "Engine", group_id: str, to: str, value: int | None = None,
                        topic: str | None = None, execute: bool = True) -> list[dict[str, Any]]:
    """Reset the group's offsets (see the module docstring); returns, per partition,
    the offset before and after, as the tool prints them. ``execute=False`` is the
    tool's ``--dry-run``: the plan, nothing committed."""
    if to not in RESET_TARGETS:
        raise InvalidRequestError(f"reset to one of {', '.join(RESET_TARGETS)}, not {to!r}")
    if to in ("offset", "timestamp") and value is None:
        raise InvalidRequestError(f"a reset to an {to} needs the {to}")
    group = engine.groups.coordinator.describe(group_id)
    committed = dict(group.committed) if group is not None else {}
    if topic is not None:
        partitions = [(topic, p) for p in range(engine.topics.partition_count(topic))]
    else:
        partitions = sorted(tp for tp in committed if engine.partitions.has_partition(*tp))
        if not partitions:
            raise InvalidRequestError(f"group {group_id!r} has no committed offsets on an existing topic: "
                                      f"choose a topic to reset")
    targets = {tp: _target(engine, tp, to, value) for tp in partitions}
    if execute:
        await engine.groups.coordinator.reset_offsets(group_id, targets)
    return [{"topic_name": t, "partition_id": p,
             "previous_offset": committed[(t, p)].offset if (t, p) in committed else None,
             "offset": targets[(t, p)]} for t, p in partitions]


def _target(engine: "Engine", tp: tuple[str, int], to: str, value: int | None) -> int:
    log = engine.partitions.log(*tp)
    if to == "earliest":
        return log.log_start_offset
    if to == "latest":
        return log.high_watermark
    assert value is not None, "reset_offsets refuses an offset or timestamp reset without its value"
    if to == "offset":
        return min(max(value, log.log_start_offset), log.high_watermark)
    if value < 0:
        raise InvalidRequestError(f"a reset timestamp is milliseconds since the epoch, got {value}")
    found = engine.partitions.list_offsets(tp[0], tp[1], value, READ_UNCOMMITTED)
    return found.offset if found.offset >= 0 else log.high_watermark

