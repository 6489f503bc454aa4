"""Whole-file writes that survive a crash: the old content or the new, never a mix.

Write ``<name>.tmp``, fsync it, rename it over ``<name>``, fsync the directory
(so the rename itself is durable). A leftover ``.tmp`` from a crash is ignored
by readers and removed on start.
"""

from __future__ import annotations

import os
from pathlib import Path

from exactly.storage.filenames import TEMP_SUFFIX


def write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + TEMP_SUFFIX)
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:  # a full disk, say: give back what the partial file took
        temporary.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make a new, renamed or deleted entry in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
