"""Record-level lineage: each output record names the input record it was made from.

The convention is one header, :data:`HEADER` (``exactly.input``), whose value is the
input record's place in Kafka's spelling, ``<topic>-<partition>@<offset>``
(``orders-3@1017``: the partition is the number after the last ``-``, so any topic
name reads back). An application adopts it in one line, where it writes its output::

    from exactly.app.testing import lineage

    producer.produce("payments", value, headers=[lineage(message)])   # confluent-kafka
    producer.send("payments", value, headers=[lineage(record)])       # the embedded producer

With it, the exactly-once audit (``exactly/app/engine/audit.py``) checks every input
record against the committed output records that name it -- exactly one (or
``records_per_input`` of them), in the transaction that committed the record's offset
-- across any number of input partitions per transaction, instead of counting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: the header an output record names its input record in
HEADER = "exactly.input"


@dataclass(frozen=True, slots=True)
class InputRecord:
    """Where an output record's input record is."""

    topic: str
    partition: int
    offset: int

    def header_value(self) -> bytes:
        return f"{self.topic}-{self.partition}@{self.offset}".encode()


def header(topic: str, partition: int, offset: int) -> tuple[str, bytes]:
    """The lineage header naming input record ``topic``-``partition``@``offset``."""
    return HEADER, InputRecord(topic, partition, offset).header_value()


def lineage(record: Any) -> tuple[str, bytes]:
    """The lineage header naming ``record``: anything with a topic, a partition and an
    offset, as methods (confluent-kafka's ``Message``) or attributes (the embedded
    consumer's ``ConsumerRecord``, kafka-python's, aiokafka's)."""
    def field(name: str) -> Any:
        value = getattr(record, name)
        return value() if callable(value) else value

    return header(field("topic"), field("partition"), field("offset"))


def parse(value: bytes | None) -> InputRecord | None:
    """The input record a lineage header's value names; None when it names none."""
    try:
        place, _, offset = (value or b"").decode().rpartition("@")
        topic, _, partition = place.rpartition("-")
        if topic and partition.isdigit() and offset.isdigit():
            return InputRecord(topic, int(partition), int(offset))
    except UnicodeDecodeError:
        pass
    return None


def of(headers: tuple[tuple[str, bytes | None], ...]) -> InputRecord | None:
    """The input record named by the lineage header among ``headers`` (the first one),
    None when there is none or it names none."""
    return next((parse(value) for key, value in headers if key == HEADER), None)
