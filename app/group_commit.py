"""Group commit: every append waiting on a partition shares one fsync.

While one fsync runs (on a worker thread, never on the event loop), the appends
that arrive queue up; when it finishes, the next fsync covers all of them at once.
Under load the number of fsyncs per second stays at what the disk can do, and the
records per fsync grow with the load.

``acks=all`` appends wait for the fsync that covers them. Other appends only ask
for one: at once when ``flush.ms`` is 0, after ``flush.ms`` or when
``flush.messages`` records are unflushed otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor

from storage.errors import KafkaStorageError
from storage.partition_log import FlushPlan, PartitionLog

log = logging.getLogger(__name__)


class GroupCommit:
    """The fsync scheduler of one partition log. Lives on the event loop."""

    def __init__(self, partition_log: PartitionLog, loop: asyncio.AbstractEventLoop,
                 executor: Executor) -> None:
        self._log = partition_log
        self._loop = loop
        self._executor = executor
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._in_flight: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: set after an fsync failure: nothing appended since can be trusted to be durable
        self.failed: BaseException | None = None
        self.fsyncs = 0

    async def wait_durable(self, offset: int) -> None:
        """Return once ``offset`` is below the high watermark (fsynced)."""
        if self.failed is not None:
            raise KafkaStorageError(f"partition is offline after an fsync failure: {self.failed}")
        if offset < self._log.high_watermark:
            return
        future: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append((offset, future))
        self._start()
        await future

    def appended(self) -> None:
        """An append that does not wait: fsync according to flush.messages / flush.ms."""
        config = self._log.config
        if config.flush_ms == 0 or self._log.unflushed_messages >= config.flush_messages:
            self._start()
        elif self._timer is None:
            self._timer = self._loop.call_later(config.flush_ms / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._start()

    def _start(self) -> None:
        if self._in_flight is not None or self._log.high_watermark >= self._log.log_end_offset:
            return
        plan = self._log.prepare_flush()
        future = self._in_flight = self._loop.run_in_executor(self._executor, plan.run)
        future.add_done_callback(lambda f: self._finished(plan, f))

    def _finished(self, plan: FlushPlan, future: asyncio.Future[None]) -> None:
        self._in_flight = None
        self.fsyncs += 1
        error = future.exception()
        if error is not None:
            log.error("fsync of %s-%s failed: %s", self._log.topic, self._log.partition, error)
            self._log.flush_failed(plan)
            self.failed = error
            self._fail_all(KafkaStorageError(f"fsync failed: {error}"))
            return
        self._log.complete_flush(plan)
        high_watermark = self._log.high_watermark
        still_waiting = []
        for offset, waiter in self._waiters:
            if offset < high_watermark:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                still_waiting.append((offset, waiter))
        self._waiters = still_waiting
        if self._waiters or (self._log.config.flush_ms == 0 and self._log.unflushed_messages):
            self._start()

    def _fail_all(self, error: BaseException) -> None:
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self._waiters = []

    async def drain(self) -> None:
        """Wait for the fsync in flight, if any (before the log is closed)."""
        while self._in_flight is not None:
            await asyncio.wait([self._in_flight])
            await asyncio.sleep(0)  # let the done callback run

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._fail_all(KafkaStorageError("the broker is shutting down"))
