"""Reads of the SQLite mirror (``exactly/coordinator/mirror_models.py``): finished
transactions, for the HTTP API and the console.

Not coroutines: they read SQLite on the caller's thread (``db`` is a read-only
engine, ``exactly.coordinator.mirror_db.reader_engine``), never on the engine's loop.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Collection

if TYPE_CHECKING:
    from sqlalchemy import Engine as SqlEngine


def transaction_history(db: "SqlEngine", txn_id: str, limit: int = 20) -> list[dict[str, Any]]:
    """The last ``limit`` finished transactions of ``txn_id``, newest first, from the
    SQLite mirror's ``transactions`` table (``exactly/coordinator/mirror_models.py``).

    Not a coroutine: it reads SQLite on the caller's thread (``db`` is a read-only
    engine, ``exactly.coordinator.mirror_db.reader_engine``), never on the engine's loop.
    """
    from sqlalchemy import select

    from exactly.coordinator.mirror_models import FinishedTransaction as T

    query = (select(T.producer_id, T.producer_epoch, T.outcome, T.partitions, T.start_ms, T.end_ms,
                    T.abort_cause, T.abort_actor, T.transaction_version)
             .where(T.transactional_id == txn_id).order_by(T.end_ms.desc(), T.id.desc()).limit(limit))
    with db.connect() as connection:
        rows = connection.execute(query).all()
        connection.rollback()
    return [_finished(r) for r in rows]


def finished_transactional_ids(db: "SqlEngine") -> list[str]:
    """Every transactional id with a finished transaction in the mirror (what a page of
    them is filtered by, as ListTransactions filters its ids)."""
    from sqlalchemy import select

    from exactly.coordinator.mirror_models import FinishedTransaction as T

    with db.connect() as connection:
        ids = list(connection.execute(select(T.transactional_id).distinct()).scalars())
        connection.rollback()
    return ids


def finished_transactions(db: "SqlEngine", txn_id: str = "", outcome: str = "", cause: str = "",
                          limit: int = 50, offset: int = 0,
                          among: Collection[str] | None = None) -> tuple[list[dict[str, Any]], int]:
    """A page of finished transactions, newest first, and how many match: every
    transactional id (or only those ``among``), or those containing ``txn_id``; one
    ``outcome`` (COMMIT, ABORT) and one abort ``cause`` (an ``AbortCause`` value) when
    given. Read on the caller's thread, like :func:`transaction_history`."""
    from sqlalchemy import ColumnElement, func, select

    from exactly.coordinator.mirror_models import FinishedTransaction as T

    where: list[ColumnElement[bool]] = [] if among is None else [T.transactional_id.in_(list(among))]
    if txn_id:
        where.append(T.transactional_id.contains(txn_id, autoescape=True))
    if outcome:
        where.append(T.outcome == outcome)
    if cause:
        where.append(T.abort_cause == cause)
    query = (select(T.transactional_id, T.producer_id, T.producer_epoch, T.outcome, T.partitions, T.start_ms,
                    T.end_ms, T.abort_cause, T.abort_actor, T.transaction_version)
             .where(*where).order_by(T.end_ms.desc(), T.id.desc()).limit(limit).offset(offset))
    with db.connect() as connection:
        rows = connection.execute(query).all()
        total = connection.execute(select(func.count()).select_from(T).where(*where)).scalar_one()
        connection.rollback()
    return [{"transactional_id": r.transactional_id, **_finished(r)} for r in rows], total


def committed_with(db: "SqlEngine", offsets_partition: str) -> dict[str, set[str]]:
    """The transactional ids whose committed transactions spanned ``offsets_partition``
    (a group's ``__consumer_offsets-N``: AddOffsetsToTxn adds it, so they committed
    offsets there), each with the topics those transactions wrote (internal ones left
    out), from the mirror's ``transactions`` table; read on the caller's thread."""
    from sqlalchemy import select

    from exactly.coordinator.mirror_models import FinishedTransaction as T

    found: dict[str, set[str]] = {}
    query = (select(T.transactional_id, T.partitions)
             .where(T.outcome == "COMMIT", T.partitions.contains(json.dumps(offsets_partition))))
    with db.connect() as connection:
        for txn_id, partitions in connection.execute(query):
            topics = {_topic_partition(tp)["topic_name"] for tp in json.loads(partitions)}
            found.setdefault(txn_id, set()).update(t for t in topics if not t.startswith("__"))
        connection.rollback()
    return found


def _finished(r: Any) -> dict[str, Any]:
    """A finished transaction's row as the readers answer it."""
    return {"producer_id": r.producer_id, "producer_epoch": r.producer_epoch, "outcome": r.outcome,
            "partitions": [_topic_partition(tp) for tp in json.loads(r.partitions)],
            "start_ms": r.start_ms, "end_ms": r.end_ms,
            "abort_cause": r.abort_cause, "abort_actor": r.abort_actor,
            "transaction_version": r.transaction_version}


def outcome_counts(db: "SqlEngine") -> dict[str, dict[str, int]]:
    """Per transactional id, how many of its finished transactions committed and
    aborted: ``{"billing": {"COMMIT": 3, "ABORT": 1}}``."""
    from sqlalchemy import func, select

    from exactly.coordinator.mirror_models import FinishedTransaction as T

    counts: dict[str, dict[str, int]] = {}
    with db.connect() as connection:
        for txn_id, outcome, n in connection.execute(
                select(T.transactional_id, T.outcome, func.count()).group_by(T.transactional_id, T.outcome)):
            counts.setdefault(txn_id, {})[outcome] = n
        connection.rollback()
    return counts


def _topic_partition(name: str) -> dict[str, Any]:
    """``"orders-0"`` -> ``{"topic_name": "orders", "partition_id": 0}`` (topics may hold ``-``)."""
    topic, _, partition = name.rpartition("-")
    return {"topic_name": topic, "partition_id": int(partition)}


def finished_counts(db: "SqlEngine") -> dict[str, int]:
    """How many finished transactions the SQLite mirror holds, by outcome (COMMIT,
    ABORT). Like :func:`transaction_history`, read on the caller's thread."""
    from sqlalchemy import func, select

    from exactly.coordinator.mirror_models import FinishedTransaction as T

    with db.connect() as connection:
        counts = {outcome: n for outcome, n in connection.execute(
            select(T.outcome, func.count()).group_by(T.outcome))}
        connection.rollback()
    return counts


def scram_credentials(db: "SqlEngine") -> list[dict[str, Any]]:
    """Every user's SCRAM mechanisms and iterations (never a salt or key), by user
    name, from the mirror's ``scram_credentials``; read on the caller's thread."""
    from sqlalchemy import select

    from exactly.coordinator.mirror_models import ScramCredential as S

    with db.connect() as connection:
        rows = connection.execute(select(S.user_name, S.mechanism, S.iterations)
                                  .order_by(S.user_name, S.mechanism)).all()
        connection.rollback()
    return [{"user_name": r.user_name, "mechanism": r.mechanism, "iterations": r.iterations} for r in rows]
