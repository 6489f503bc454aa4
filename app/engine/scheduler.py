"""Scheduled jobs (APScheduler, in-process), the same for an embedded ``Broker`` and
``exactly serve``. Each job is a thin wrapper that asks the engine to do one thing on
its loop (the logic and its clock live there), or runs one round of the SQLite
mirror, which reads the engine the same way and writes SQLite on the job's thread."""

from __future__ import annotations

import logging
from functools import partial
from typing import Callable

from apscheduler.schedulers.background import BackgroundScheduler

from app.engine import Engine
from coordinator.mirror import Mirror

log = logging.getLogger(__name__)


def start_scheduler(engine: Engine, mirror: Mirror) -> BackgroundScheduler:
    """Every periodic job of a broker, each at its configured interval (Kafka's where
    Kafka has the job); ``shutdown(wait=True)`` lets a running round finish."""
    config = engine.config
    scheduler = BackgroundScheduler(daemon=True)
    jobs: dict[str, tuple[Callable[[], object], int]] = {
        "abort-timed-out-transactions": (partial(engine.call, engine.abort_timed_out_transactions),
                                         config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        "expire-transactional-ids": (partial(engine.call, engine.expire_transactional_ids),
                                     config.transaction_remove_expired_transaction_cleanup_interval_ms),
        "expire-producer-ids": (partial(engine.call, engine.expire_producer_ids),
                                config.producer_id_expiration_check_interval_ms),
        "producer-snapshots": (partial(engine.call, engine.take_snapshots), config.producer_snapshot_interval_ms),
        "log-retention": (partial(engine.call, engine.apply_retention), config.log_retention_check_interval_ms),
        "log-cleaner": (partial(engine.call, engine.compact_logs), config.log_cleaner_backoff_ms),
        "offset-checkpoints": (partial(engine.call, engine.checkpoint),
                               config.log_flush_offset_checkpoint_interval_ms),
        "sqlite-mirror": (partial(mirror_round, mirror), config.exactly_mirror_interval_ms),
    }
    for name, (job, interval_ms) in jobs.items():
        scheduler.add_job(_run, "interval", args=(name, job), seconds=interval_ms / 1000,
                          id=name, max_instances=1, coalesce=True)
    scheduler.start()
    return scheduler


def mirror_round(mirror: Mirror) -> None:
    """Bring the SQLite mirror up to date: new coordinator records, fresh snapshots."""
    mirror.catch_up()
    mirror.refresh_stats()


def _run(name: str, job: Callable[[], object]) -> None:
    try:
        job()
    except Exception:  # a failed round is logged and retried at the next interval
        log.exception("scheduled job %s failed", name)
