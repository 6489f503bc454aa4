"""Scheduled jobs (APScheduler, in-process). Each job is a thin wrapper that asks
the engine to do one thing on its loop; the logic and its clock live there."""

from __future__ import annotations

import logging

from apscheduler.schedulers.background import BackgroundScheduler

from app.engine import Engine

log = logging.getLogger(__name__)


def start_scheduler(engine: Engine) -> BackgroundScheduler:
    """Producer-state snapshots, retention and checkpoints at Kafka's intervals."""
    config = engine.config
    scheduler = BackgroundScheduler(daemon=True)
    jobs = {
        "abort-timed-out-transactions": (engine.abort_timed_out_transactions,
                                         config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        "expire-transactional-ids": (engine.expire_transactional_ids,
                                     config.transaction_remove_expired_transaction_cleanup_interval_ms),
        "expire-producer-ids": (engine.expire_producer_ids, config.producer_id_expiration_check_interval_ms),
        "producer-snapshots": (engine.take_snapshots, config.producer_snapshot_interval_ms),
        "log-retention": (engine.apply_retention, config.log_retention_check_interval_ms),
        "log-cleaner": (engine.compact_logs, config.log_cleaner_backoff_ms),
        "offset-checkpoints": (engine.checkpoint, config.log_flush_offset_checkpoint_interval_ms),
    }
    for name, (job, interval_ms) in jobs.items():
        scheduler.add_job(_run, "interval", args=(engine, name, job), seconds=interval_ms / 1000,
                          id=name, max_instances=1, coalesce=True)
    scheduler.start()
    return scheduler


def _run(engine: Engine, name: str, job) -> None:
    try:
        engine.call(job)
    except Exception:  # a failed round is logged and retried at the next interval
        log.exception("scheduled job %s failed", name)
