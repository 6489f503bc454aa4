"""Server-side assignors of KIP-848 consumer groups (``group.consumer.assignors``).

The coordinator computes a group's *target assignment* with one of these whenever
the group epoch moves past the assignment epoch (a member joined, left or changed
its subscription, or a subscribed topic changed). Each takes every member's
subscribed topics, the partition count of each subscribed topic and the previous
target assignment, and returns member id -> its partitions:

* ``uniform`` (Kafka's ``UniformAssignor``, the default): as balanced as the
  subscriptions allow and sticky -- a member keeps the partitions it had, up to
  its fair share, and only the surplus and the unowned partitions move, each to
  the subscribed member with the fewest partitions.
* ``range`` (Kafka's server-side ``RangeAssignor``): per topic, its partitions in
  order cut into contiguous ranges, one per subscribed member in member-id order,
  the first ``partitions % members`` getting one more -- so members subscribed
  to co-partitioned topics get the same partition numbers of each (joins).
"""

from __future__ import annotations

from typing import Callable, Mapping

TopicPartition = tuple[str, int]
Assignment = dict[str, frozenset[TopicPartition]]
#: member id -> subscribed topics; topic -> partition count; previous target
Assignor = Callable[[Mapping[str, frozenset[str]], Mapping[str, int], Mapping[str, frozenset[TopicPartition]]],
                    Assignment]

UNIFORM = "uniform"
RANGE = "range"


def uniform(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
            previous: Mapping[str, frozenset[TopicPartition]]) -> Assignment:
    """Balanced and sticky: see the module docstring."""
    members = sorted(subscriptions)
    assigned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    # every partition some member subscribes to, and who may have it
    eligible: dict[TopicPartition, list[str]] = {}
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        takers = [m for m in members if topic in subscriptions[m]]
        for p in range(partitions.get(topic, 0)):
            eligible[(topic, p)] = takers
    base, extra = divmod(len(eligible), len(members)) if members else (0, 0)
    # stickiness: each member keeps what it had and may still have, up to an even
    # share; ``extra`` of them (those that had more) keep one more
    kept = {m: sorted(tp for tp in previous.get(m, ()) if m in eligible.get(tp, ())) for m in members}
    for member in members:
        assigned[member].update(kept[member][:base])
    for member in sorted(members, key=lambda m: (-len(kept[m]), m)):
        if extra and len(kept[member]) > base:
            assigned[member].add(kept[member][base])
            extra -= 1
    taken = {tp for tps in assigned.values() for tp in tps}
    for tp in sorted(set(eligible) - taken):
        owner = min(eligible[tp], key=lambda m: (len(assigned[m]), m))
        assigned[owner].add(tp)
    return {m: frozenset(tps) for m, tps in assigned.items()}


def range_(subscriptions: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
           previous: Mapping[str, frozenset[TopicPartition]]) -> Assignment:
    """Contiguous ranges per topic: see the module docstring."""
    assigned: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        takers = sorted(m for m, topics in subscriptions.items() if topic in topics)
        count = partitions.get(topic, 0)
        per_member, extra = divmod(count, len(takers))
        start = 0
        for i, member in enumerate(takers):
            size = per_member + (1 if i < extra else 0)
            assigned[member].update((topic, p) for p in range(start, start + size))
            start += size
    return {m: frozenset(tps) for m, tps in assigned.items()}


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform, RANGE: range_}
