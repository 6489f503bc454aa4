"""Alembic environment of the SQLite mirror (``exactly/coordinator/mirror_db.py`` runs it).

The caller passes an open connection in ``config.attributes["connection"]`` (its
transaction is the writer's ``BEGIN IMMEDIATE``); otherwise the ``sqlalchemy.url``
option is opened with the writer's settings. Batch mode lets later migrations
alter tables, which SQLite can only do by copying them. Offline (``--sql``) mode is
not offered: the database is always at hand.
"""

from __future__ import annotations

from alembic import context

from exactly.coordinator.mirror_db import writer_engine
from exactly.coordinator.mirror_models import Base

config = context.config


def run(connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata,
                      render_as_batch=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("the mirror's migrations run online only (no --sql)")
given = config.attributes.get("connection")
if given is not None:
    run(given)
else:
    url = config.get_main_option("sqlalchemy.url")
    if url is None:
        raise SystemExit("the mirror's migrations need a connection or sqlalchemy.url; neither is set")
    engine = writer_engine(url.removeprefix("sqlite:///"))
    try:
        with engine.begin() as connection:
            run(connection)
    finally:
        engine.dispose()
