"""Topic ids (KIP-516): every topic's UUID, as Kafka's ``org.apache.kafka.common.Uuid``.

A topic id tells a topic from an earlier one of the same name: deleted and created
again, a topic gets a new id, so a client holding the old one notices (librdkafka's
test 0107: a topic re-created with fewer partitions). Kafka writes an id as 22
characters of URL-safe base64 without padding (``kafka-topics --describe`` shows
``TopicId: 6oh5fpJYQ0-DFhCk7sT0yw``); the all-zero id means "none" on the wire.
"""

from __future__ import annotations

import base64
import uuid

#: Kafka's ``Uuid.ZERO_UUID``: no topic id (a topic named, not identified)
ZERO = uuid.UUID(int=0)
#: Kafka's ``Uuid.METADATA_TOPIC_ID``, reserved for ``__cluster_metadata`` in Kafka
METADATA_TOPIC_ID = uuid.UUID(int=1)


def new_topic_id() -> uuid.UUID:
    """A random id, never one Kafka reserves nor one whose string starts with ``-``
    (which a command line would read as an option): Kafka's ``Uuid.randomUuid``."""
    while True:
        topic_id = uuid.uuid4()
        if topic_id not in (ZERO, METADATA_TOPIC_ID) and not to_string(topic_id).startswith("-"):
            return topic_id


def to_string(topic_id: uuid.UUID) -> str:
    """Kafka's form: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def parse(text: str) -> uuid.UUID:
    """An id from Kafka's form, or from the hex form (``str(uuid)``) Exactly's
    ``topics.json`` held before ids were written as Kafka writes them.

    :raise ValueError: neither form."""
    if len(text) == 22:
        raw = base64.urlsafe_b64decode(text + "==")
        if len(raw) == 16 and to_string(uuid.UUID(bytes=raw)) == text:
            return uuid.UUID(bytes=raw)
    return uuid.UUID(text)
