"""Opening the mirror database: the one writer's engine, read-only readers, migrations.

Datasette's rules: one writer whose transactions start with ``BEGIN IMMEDIATE``
(it takes the write lock up front, so it never fails half-way on a lock upgrade),
readers on ``mode=ro`` connections that cannot write by accident, WAL so that
readers (Spark, the web UI) never block the writer or each other, and a busy
timeout instead of instant ``database is locked`` errors. ``synchronous=NORMAL``
is enough for derived data: a power cut may lose the last commits, never
consistency, and the mirror re-derives what is missing from the logs.

Alembic owns the schema; its environment is ``exactly/migrations/`` (package
data, found from an installed copy too) and :func:`upgrade` runs it without an ``alembic.ini``. Every broker open calls
:func:`upgrade`, so it is quick when there is nothing to do: a database at the head
revision is left alone after one query (and without importing Alembic: its head is read from the
scripts), and a new database is a copy of the one the
migrations built once in this process (Alembic's own run takes ~20 ms, mostly
building DDL; the copy ~3 ms). To write the next migration, autogenerate against a
migrated database::

    from alembic import command
    from exactly.coordinator.mirror_db import alembic_config
    command.revision(alembic_config("data/exactly.db"), "what changed", autogenerate=True)
"""

from __future__ import annotations

import ast
import contextlib
import functools
import logging
import sqlite3
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import ConnectionPoolEntry, NullPool, QueuePool

from exactly.storage.filenames import MIRROR_DB

if TYPE_CHECKING:
    from alembic.config import Config

#: the Alembic environment, package data of ``exactly`` (``exactly/migrations/``, found from an
#: installed copy too)
MIGRATIONS_DIR = Path(__file__).resolve().parents[1] / "migrations"
BUSY_TIMEOUT_MS = 5_000


class MigrationError(Exception):
    """Alembic refused to migrate the database (its ``CommandError``, e.g. a revision
    this version does not know)."""


#: what creating or migrating a database can raise: the file, SQLite, SQLAlchemy, Alembic
UPGRADE_ERRORS = (OSError, sqlite3.Error, SQLAlchemyError, MigrationError)


def db_path(data_dir: Path | str) -> Path:
    """Where the mirror of a data directory lives."""
    return Path(data_dir) / MIRROR_DB


def _take_over_transactions(engine: Engine, begin: str, pragmas: tuple[str, ...]) -> None:
    """Run ``pragmas`` on each new connection and start transactions with ``begin``:
    pysqlite's own BEGIN is deferred and skipped for SELECTs, so turn it off."""

    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection: Connection) -> None:
        connection.exec_driver_sql(begin)


def writer_engine(path: Path | str) -> Engine:
    """The engine of the one writer: WAL, busy timeout, ``BEGIN IMMEDIATE``, and one
    connection kept open between transactions (closing the last connection of a WAL
    database checkpoints it, an fsync per transaction otherwise)."""
    engine = create_engine(f"sqlite:///{Path(path)}", poolclass=QueuePool, pool_size=1, max_overflow=0)
    _take_over_transactions(engine, "BEGIN IMMEDIATE", (
        f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
        "PRAGMA journal_mode = WAL",
        "PRAGMA synchronous = NORMAL",
    ))
    return engine


def reader_engine(path: Path | str) -> Engine:
    """A read-only engine; each transaction is one consistent snapshot."""
    engine = create_engine(f"sqlite:///file:{Path(path).resolve()}?mode=ro&uri=true", poolclass=NullPool)
    _take_over_transactions(engine, "BEGIN", (f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",))
    return engine


def alembic_config(path: Path | str) -> Config:
    """Alembic's configuration for the database at ``path``, without an ini file."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", f"sqlite:///{Path(path)}")
    return config


def upgrade(path: Path | str) -> tuple[str | None, str | None]:
    """Create or migrate the database at ``path`` to the newest revision (a no-op
    when it is current); returns the revisions (before, after)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    has_tables, before = _inspect(path)
    head = head_revision()
    if before == head:
        return before, before
    if not has_tables:
        _copy_database(_migrated_image(), path)
        return None, head
    _migrate(path)
    return before, _inspect(path)[1]


@functools.cache
def head_revision() -> str | None:
    """The newest revision in ``migrations/versions/``: the one no other follows. Read
    from the scripts' ``revision`` and ``down_revision`` assignments, not by Alembic's
    ``ScriptDirectory``: opening a current database then never imports Alembic (0.25 s
    of a broker process's start). tests/test_mirror.py checks it against Alembic's."""
    revisions: set[str] = set()
    followed: set[str] = set()
    for script in (MIGRATIONS_DIR / "versions").glob("*.py"):
        for name, value in _assignments(script, ("revision", "down_revision")):
            if name == "revision":
                revisions.add(value)
            elif value is not None:
                followed.update((value,) if isinstance(value, str) else value)
    heads = revisions - followed
    if len(heads) > 1:
        raise MigrationError(f"the migrations have several heads: {sorted(heads)}")
    return next(iter(heads), None)


def _assignments(script: Path, names: tuple[str, ...]) -> list[tuple[str, Any]]:
    """The module-level constant assignments (plain or annotated) to ``names`` in the
    Python file ``script``, with their literal values."""
    found = []
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in names:
            found.append((target.id, ast.literal_eval(value)))
    return found


def _inspect(path: Path) -> tuple[bool, str | None]:
    """Whether the database at ``path`` has any table (an absent file has none), and
    its Alembic revision."""
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "alembic_version" not in tables:
            return bool(tables), None
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        return True, None if row is None else row[0]
    finally:
        connection.close()


def _migrate(path: Path) -> None:
    """Run every migration the database at ``path`` lacks, in one transaction."""
    with _alembic_quiet():
        from alembic import command
        from alembic.util import CommandError

        engine = writer_engine(path)
        try:
            config = alembic_config(path)
            with engine.begin() as connection:
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        except CommandError as e:
            raise MigrationError(str(e)) from e
        finally:
            engine.dispose()


@contextlib.contextmanager
def _alembic_quiet() -> Iterator[None]:
    """Alembic says at INFO each plugin it sets up and each migration's whole docstring:
    a broker's log and ``exactly db upgrade`` say in one line what changed instead. Its
    warnings and errors still show."""
    logger = logging.getLogger("alembic")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


@functools.cache
def _migrated_image() -> bytes:
    """A new database migrated to the head revision by Alembic, serialised (built once)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / MIRROR_DB
        _migrate(path)
        connection = sqlite3.connect(path)
        try:
            connection.execute("PRAGMA journal_mode = DELETE")  # an image must not need a -wal file
            return connection.serialize()
        finally:
            connection.close()


def _copy_database(image: bytes, path: Path) -> None:
    """Write ``image`` into the empty database at ``path`` (SQLite's backup: one
    transaction), then switch it to WAL as the writer's connections expect."""
    source = sqlite3.connect(":memory:")
    target = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        source.deserialize(image)
        source.backup(target)
        target.execute("PRAGMA journal_mode = WAL")
    finally:
        source.close()
        target.close()
