"""Scheduled jobs (APScheduler, in-process), the same for an embedded ``Broker`` and
``exactly serve``. Each job is a thin wrapper that asks the engine to do one thing on
its loop (the logic and its clock live there), or runs one round of the SQLite
mirror, which reads the engine the same way and writes SQLite on the job's thread.

The server log stays quiet while nothing happens: a round that did something says
so at INFO, naming the job and what it did ("aborted 1 timed-out transaction(s):
orders-tx"); a round that did nothing, or only routine bookkeeping (checkpoints,
the mirror catching up), logs at DEBUG; a failed round at ERROR -- except one that
found the disk full, which the engine's ``DiskSpace`` logs once for every write. APScheduler's own
lines go to WARNING and above: its INFO lines, one per round, name no job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Callable

from apscheduler.schedulers.background import BackgroundScheduler

from exactly.app.engine import Engine
from exactly.app.engine.disk_space import DiskSpace, is_disk_full
from exactly.app.engine.maintenance import LogCleaningFailedError
from exactly.coordinator.mirror import Mirror
from exactly.storage.errors import KafkaError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScheduledJob:
    name: str
    #: one round; returns what it did: a count, or the names of what it acted on
    run: Callable[[], object]
    interval_ms: int
    #: what a round that did something did, with ``{n}`` for how many; None: routine
    #: bookkeeping, never worth an INFO line
    did: str | None


def scheduled_jobs(engine: Engine, mirror: Mirror) -> list[ScheduledJob]:
    """Every periodic job of a broker, each at its configured interval (Kafka's where
    Kafka has the job)."""
    config = engine.config

    def call(fn: Callable[[], object]) -> Callable[[], object]:
        return partial(engine.call, fn)

    return [
        ScheduledJob("abort-timed-out-transactions", call(engine.jobs.abort_timed_out_transactions),
                     config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                     "aborted {n} timed-out transaction(s)"),
        ScheduledJob("expire-transactional-ids", call(engine.jobs.expire_transactional_ids),
                     config.transaction_remove_expired_transaction_cleanup_interval_ms,
                     "expired {n} transactional id(s)"),
        ScheduledJob("expire-producer-ids", call(engine.jobs.expire_producer_ids),
                     config.producer_id_expiration_check_interval_ms, "expired {n} idle producer id(s)"),
        ScheduledJob("producer-snapshots", call(engine.jobs.take_snapshots), config.producer_snapshot_interval_ms,
                     "wrote {n} producer-state snapshot(s)"),
        ScheduledJob("log-retention", call(engine.jobs.apply_retention), config.log_retention_check_interval_ms,
                     "deleted {n} segment(s) past retention"),
        ScheduledJob("log-cleaner", call(engine.jobs.compact_logs), config.log_cleaner_backoff_ms,
                     "rewrote {n} segment(s) of compacted topics"),
        ScheduledJob("offset-checkpoints", call(engine.jobs.checkpoint),
                     config.log_flush_offset_checkpoint_interval_ms, None),
        ScheduledJob("sqlite-mirror", partial(mirror_round, mirror), config.exactly_mirror_interval_ms, None),
    ]


def start_scheduler(engine: Engine, mirror: Mirror) -> BackgroundScheduler:
    """Start every job of :func:`scheduled_jobs`; ``shutdown(wait=True)`` lets a running
    round finish."""
    # run_round logs every round under the job's name; APScheduler's own lines name the
    # wrapper (_run), and its warnings -- a round skipped because the last one is still
    # running, a run time missed -- are what max_instances=1 and coalesce ask for on a
    # busy machine (the next round catches up), so only its errors are kept
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    scheduler = BackgroundScheduler(daemon=True)
    for job in scheduled_jobs(engine, mirror):
        scheduler.add_job(run_round, "interval", args=(job, engine.disk), seconds=job.interval_ms / 1000,
                          id=job.name, name=job.name, max_instances=1, coalesce=True)
    scheduler.start()
    return scheduler


def mirror_round(mirror: Mirror) -> int:
    """Bring the SQLite mirror up to date: new coordinator records, fresh snapshots.
    Returns how many records it mirrored."""
    mirrored = mirror.catch_up()
    mirror.refresh_stats()
    return mirrored


def run_round(job: ScheduledJob, disk: DiskSpace | None = None) -> None:
    """One round of ``job``, logged as the module docstring says; a full disk is
    reported to ``disk`` instead."""
    try:
        result = job.run()
    except Exception as e:  # a failed round is logged and retried at the next interval
        if disk is not None and is_disk_full(e):
            disk.refused(e)
            log.debug("scheduled job %s found the disk full: %s", job.name, e)
        elif isinstance(e, KafkaError):  # expected (a partition gone meanwhile ...): one line
            log.warning("scheduled job %s failed: %s: %s", job.name, e.name, e)
        elif isinstance(e, LogCleaningFailedError):  # each partition's error is logged above it
            log.error("scheduled job %s failed: %s", job.name, e)
        else:
            log.exception("scheduled job %s failed", job.name)
        return
    if isinstance(result, list):  # the names of what it acted on
        count, named = len(result), f": {', '.join(map(str, result))}"
    else:
        count, named = (result if isinstance(result, int) else 0), ""
    if count and job.did is not None:
        log.info("scheduled job %s: %s%s", job.name, job.did.format(n=count), named)
    else:
        log.debug("scheduled job %s: round done (%r)", job.name, result)
