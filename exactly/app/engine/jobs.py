"""The periodic work (Kafka's log manager and coordinator tasks), which the scheduled
jobs (``exactly/app/engine/scheduler.py``) and tests call: producer-state snapshots,
retention, the log cleaner, producer-id expiry, checkpoints, and the transaction
coordinator's timeouts and transactional-id expiry.

Each is planned on the loop and does its file I/O on a maintenance thread
(``exactly/app/engine/maintenance.py``); the loop serves requests meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from exactly.app.config import BrokerConfig
from exactly.app.engine.maintenance import LogCleaningFailedError, Maintenance, MaintenanceCancelledError
from exactly.coordinator.transaction_coordinator import TransactionCoordinator
from exactly.storage.background import Job, Steps
from exactly.storage.clock import Clock
from exactly.storage.errors import KafkaError, LogDirFullError
from exactly.storage.log_cleaner import CleaningAbortedError
from exactly.storage.log_manager import LogManager

log = logging.getLogger(__name__)


class Jobs:
    """The broker's periodic work, one operation each."""

    def __init__(self, logs: LogManager, maintenance: Maintenance, clock: Clock, config: BrokerConfig,
                 transaction_coordinator: TransactionCoordinator) -> None:
        self._logs = logs
        self._maintenance = maintenance
        self._clock = clock
        self._config = config
        #: the transaction coordinator's own periodic work, as it is
        self.abort_timed_out_transactions = transaction_coordinator.abort_timed_out_transactions
        self.expire_transactional_ids = transaction_coordinator.expire_transactional_ids

    async def take_snapshots(self) -> int:
        """Snapshot producer state on every partition whose log end has no snapshot."""
        due = [log_.take_snapshot() for log_ in self._logs
               if log_.log_end_offset not in log_.snapshot_offsets()]
        await asyncio.gather(*(self._maintenance.run(steps) for steps in due))
        return len(due)

    async def apply_retention(self) -> int:
        """Delete segments past retention everywhere; returns how many went."""
        now = self._clock.now_ms()
        deleted = 0
        for log_ in self._logs:
            try:
                deleted += await self._maintenance.on_partition(log_, log_.delete_old_segments, now)
            except MaintenanceCancelledError:
                continue  # its topic is being deleted, or the broker is closing
        if deleted:
            await self.checkpoint()
        return deleted

    async def compact_logs(self) -> int:
        """One log-cleaner round on every compacted partition; returns how many segments
        were rewritten. A partition that cannot be cleaned (a damaged batch, an I/O
        error, a worker process that died) is logged and skipped, as Kafka's cleaner
        skips an uncleanable partition; the others are still cleaned, and then the
        round fails. :raise LogCleaningFailedError: some partition was not cleaned."""
        now = self._clock.now_ms()
        rewritten = 0
        moved = False
        failed: list[str] = []
        for log_ in self._logs:
            if not log_.config.compact:
                continue
            before = log_.cleaner_state.checkpoint
            try:
                rewritten += (await self._maintenance.on_partition(log_, log_.clean, now)).segments_rewritten
            except (MaintenanceCancelledError, CleaningAbortedError):
                continue  # its topic is being deleted, or the broker is closing
            except LogDirFullError:
                continue  # the disk watch has said so once; the next round tries again
            except (KafkaError, OSError):
                log.exception("cleaning %s-%d failed", log_.topic, log_.partition)
                failed.append(f"{log_.topic}-{log_.partition}")
            moved = moved or log_.cleaner_state.checkpoint != before
        if moved:
            await self.checkpoint()
        if failed:
            raise LogCleaningFailedError(failed, rewritten)
        return rewritten

    def expire_producer_ids(self) -> int:
        """Forget producers idle for producer.id.expiration.ms on every partition."""
        now = self._clock.now_ms()
        return sum(len(log_.producer_state.remove_expired(now, self._config.producer_id_expiration_ms))
                   for log_ in self._logs)

    async def checkpoint(self) -> None:
        """Write the recovery-point, log-start-offset and cleaner checkpoints."""
        await self._maintenance.run(self._logs.checkpoint())

    async def persist(self, job: Job) -> None:
        """Run a short file write (``job.run()``) on the metadata thread; return once done."""
        await self._maintenance.run(one_job(job))


def one_job(job: Job) -> Steps[Any]:
    """Steps of a single job."""
    return (yield job)
