"""A partition directory's ``partition.metadata``: the id of the partition's topic,
in Kafka's format (``PartitionMetadataFile`` / ``PartitionMetadata.encode``)::

    version: 0
    topic_id: 6oh5fpJYQ0-DFhCk7sT0yw

(no newline after the id, as Kafka writes it). Every partition of a topic holds the
same id; ``topics.json`` is the registry that says which it is, and a partition
directory whose file names another id is refused at open, as Kafka refuses it
(``InconsistentTopicIdException``): its data is not that topic's. The file is written
whole (``.tmp``, fsync, rename, directory fsync), off the event loop.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from exactly.storage import filenames, topic_id
from exactly.storage.atomic_file import write_atomically
from exactly.storage.errors import KafkaStorageError

#: Kafka's ``PartitionMetadataFile.CURRENT_VERSION``
VERSION = 0
#: Kafka's reader splits each line at a colon followed by whitespace
_LINE = re.compile(r":\s+")


class InconsistentTopicIdError(KafkaStorageError):
    """A partition directory's ``partition.metadata`` names another topic id than the
    registry's (Kafka's ``InconsistentTopicIdException``)."""


def encode(topic: uuid.UUID) -> bytes:
    return f"version: {VERSION}\ntopic_id: {topic_id.to_string(topic)}".encode()


def path(directory: Path) -> Path:
    return directory / filenames.PARTITION_METADATA


def read(directory: Path) -> uuid.UUID | None:
    """The topic id in ``directory``'s file; None if it has none.

    :raise KafkaStorageError: a file that is not Kafka's format."""
    file = path(directory)
    try:
        text = file.read_text("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise KafkaStorageError(f"cannot read {file}: {e}") from e
    try:
        fields = dict(_LINE.split(line.strip(), maxsplit=1) for line in text.splitlines() if line.strip())
        if int(fields["version"]) != VERSION:
            raise KafkaStorageError(f"{file}: unrecognized version {fields['version']} (expected {VERSION})")
        return topic_id.parse(fields["topic_id"])
    except (KeyError, ValueError) as e:
        raise KafkaStorageError(f"{file} is not a partition metadata file (version, topic_id): {text!r}") from e


def write(directory: Path, topic: uuid.UUID) -> None:
    """Write the file whole and durably (any thread but the event loop's)."""
    write_atomically(path(directory), encode(topic))


def ensure(directory: Path, topic: uuid.UUID) -> None:
    """The file as it must be: written if missing (a directory from before topic ids);

    :raise InconsistentTopicIdError: it names another topic id."""
    found = read(directory)
    if found is None:
        write(directory, topic)
    elif found != topic:
        raise InconsistentTopicIdError(
            f"{path(directory)} names topic id {topic_id.to_string(found)}, but the topic registry "
            f"({filenames.TOPICS_FILE}) gives this partition's topic the id {topic_id.to_string(topic)}")
