"""Kafka's text checkpoint files, such as recovery-point-offset-checkpoint (docs/formats.md §7).

The format is that of Kafka's ``CheckpointFile`` at version 0. It is UTF-8 text
and every line ends with ``\\n``::

    0                   version
    N                   number of entries
    topic partition offset      N lines, fields separated by one space

Worked example: recovery points 1042 and 977 for partitions 0 and 1 of
``orders.v1``::

    0
    2
    orders.v1 0 1042
    orders.v1 1 977

Topics may contain ``.``, ``_`` and ``-`` but never whitespace, so a line
splits cleanly into its three fields. We write entries sorted by topic and
partition (Kafka writes them in hash-map order). Readers do not care about the
order.

A checkpoint is replaced whole. We write ``<name>.tmp``, fsync it, rename it
over ``<name>`` and fsync the directory. A crash then leaves either the old or
the new file, and perhaps a stray ``.tmp`` that reading ignores. A missing file
or an empty one (Kafka creates the file empty before its first write) reads as
no entries.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from exactly.storage.atomic_file import write_atomically

VERSION = 0

_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # what Java's BufferedReader.readLine splits on
_COUNT = re.compile(r"[0-9]+")
_ENTRY = re.compile(r"(\S+)\s+([0-9]+)\s+(-?[0-9]+)", re.ASCII)
_TOPIC = re.compile(r"\S+", re.ASCII)


class CorruptCheckpointError(Exception):
    """A checkpoint file cannot be parsed.

    ``line_number`` is 1-based. ``line`` is that line's text, or None when the
    line is missing or cannot be decoded.
    """

    def __init__(self, path: str, line_number: int, line: str | None, reason: str) -> None:
        super().__init__(f"corrupt checkpoint {path} line {line_number} ({line!r}): {reason}")
        self.path = path
        self.line_number = line_number
        self.line = line
        self.reason = reason


def read_checkpoint(path: str | os.PathLike[str]) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` from the checkpoint at ``path``; ``{}`` if missing or empty.

    :raise CorruptCheckpointError: if the file is not a version-0 checkpoint
        whose entry count matches its entry lines.
    """
    name = os.fspath(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorruptCheckpointError(name, raw.count(b"\n", 0, error.start) + 1, None,
                                     "not valid UTF-8") from None
    lines = _LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()  # the text after the final line break
    if not lines:
        return {}

    def corrupt(line_number: int, reason: str) -> CorruptCheckpointError:
        line = lines[line_number - 1] if line_number <= len(lines) else None
        return CorruptCheckpointError(name, line_number, line, reason)

    if lines[0] != str(VERSION):
        raise corrupt(1, f"expected version {VERSION}")
    if len(lines) < 2 or not _COUNT.fullmatch(lines[1]):
        raise corrupt(2, "expected the number of entries")
    entries = {}
    for line_number, line in enumerate(lines[2:], start=3):
        match = _ENTRY.fullmatch(line)
        if match is None:
            raise corrupt(line_number, "expected 'topic partition offset'")
        topic, partition, offset = match.groups()
        entries[topic, int(partition)] = int(offset)
    count, found = int(lines[1]), len(lines) - 2
    if found < count:
        raise corrupt(len(lines) + 1, f"expected {count} entries, found {found}")
    if found > count:
        raise corrupt(3 + count, f"more lines than the {count} entries declared")
    return entries


def write_checkpoint(path: str | os.PathLike[str], entries: Mapping[tuple[str, int], int]) -> None:
    """Replace the checkpoint at ``path`` with ``entries`` atomically and durably.

    :raise ValueError: for a topic that is empty or contains whitespace, or a
        negative partition. Such entries could not be read back.
    """
    for topic, partition in entries:
        if not _TOPIC.fullmatch(topic):
            raise ValueError(f"topic {topic!r} cannot be written to a checkpoint")
        if partition < 0:
            raise ValueError(f"partition {partition} of {topic!r} is negative")
    lines = [str(VERSION), str(len(entries))]
    lines += [f"{topic} {partition} {offset}"
              for (topic, partition), offset in sorted(entries.items())]
    write_atomically(Path(path), "".join(line + "\n" for line in lines).encode("utf-8"))
