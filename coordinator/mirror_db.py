"""Opening the mirror database: the one writer's engine, read-only readers, migrations.

Datasette's rules: one writer whose transactions start with ``BEGIN IMMEDIATE``
(it takes the write lock up front, so it never fails half-way on a lock upgrade),
readers on ``mode=ro`` connections that cannot write by accident, WAL so that
readers (Spark, the web UI) never block the writer or each other, and a busy
timeout instead of instant ``database is locked`` errors. ``synchronous=NORMAL``
is enough for derived data: a power cut may lose the last commits, never
consistency, and the mirror re-derives what is missing from the logs.

Alembic owns the schema; its environment is ``migrations/`` at the repository root
and :func:`upgrade` runs it without an ``alembic.ini``. To write the next
migration, autogenerate against a migrated database::

    from alembic import command
    from coordinator.mirror_db import alembic_config
    command.revision(alembic_config("data/exactly.db"), "what changed", autogenerate=True)
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import NullPool

from storage.filenames import MIRROR_DB

MIGRATIONS_DIR = Path(__file__).resolve().parents[1] / "migrations"
BUSY_TIMEOUT_MS = 5_000


def db_path(data_dir: Path | str) -> Path:
    """Where the mirror of a data directory lives."""
    return Path(data_dir) / MIRROR_DB


def _take_over_transactions(engine: Engine, begin: str, pragmas: tuple[str, ...]) -> None:
    """Run ``pragmas`` on each new connection and start transactions with ``begin``:
    pysqlite's own BEGIN is deferred and skipped for SELECTs, so turn it off."""

    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection) -> None:
        connection.exec_driver_sql(begin)


def writer_engine(path: Path | str) -> Engine:
    """The engine of the one writer: WAL, busy timeout, ``BEGIN IMMEDIATE``."""
    engine = create_engine(f"sqlite:///{Path(path)}", poolclass=NullPool)
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
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", f"sqlite:///{Path(path)}")
    return config


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(path: Path | str) -> tuple[str | None, str | None]:
    """Create or migrate the database at ``path`` to the newest revision (a no-op
    when it is current); returns the revisions (before, after)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = writer_engine(path)
    try:
        before = current_revision(engine)
        config = alembic_config(path)
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        return before, current_revision(engine)
    finally:
        engine.dispose()
