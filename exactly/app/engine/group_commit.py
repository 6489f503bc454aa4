"""Group commit: every append waiting on a partition shares one fsync.

While one fsync runs (on the fsync thread, never on the event loop), the appends
that arrive queue up; when it finishes, the next fsync covers all of them at once.
Under load the number of fsyncs per second stays at what the disk can do, and the
records per fsync grow with the load.

``acks=all`` appends wait for the fsync that covers them. Other appends only ask
for one: at once when ``flush.ms`` is 0, after ``flush.ms`` or when
``flush.messages`` records are unflushed otherwise.

An fsync that fails acknowledges nothing: every waiter fails with
KAFKA_STORAGE_ERROR and the log goes offline (``PartitionLog.flush_failed``): it
refuses every write, and no fsync is tried again, until a restart reloads it -- a
retried fsync that succeeds proves nothing once the kernel has reported (and maybe
dropped) the dirty pages. The high watermark stays below what was not synced, so no
reader sees it either.

Waiters are ``concurrent.futures.Future`` objects, so a thread (the embedded
client) can block on one directly and a coroutine can await it with
``asyncio.wrap_future``; they complete only after the high watermark has moved
past their offset, so whoever was acknowledged can read what it wrote.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future, InvalidStateError
from typing import Any, Callable, TypeVar

from exactly.app.engine.counters import LatencyHistogram
from exactly.app.engine.worker import Worker
from exactly.storage.errors import KafkaStorageError, LogOfflineError
from exactly.storage.partition_log import FlushPlan, PartitionLog

log = logging.getLogger(__name__)
T = TypeVar("T")


class GroupCommit:
    """The fsync scheduler of one partition log. Lives on the event loop."""

    def __init__(self, partition_log: PartitionLog, loop: asyncio.AbstractEventLoop,
                 fsync_thread: Worker, fsync_latency: LatencyHistogram,
                 on_durable: Callable[[], None] = lambda: None) -> None:
        """``fsync_latency``: where each fsync round's duration is recorded (metrics)."""
        self._log = partition_log
        self._fsync_latency = fsync_latency
        self._on_durable = on_durable
        self._loop = loop
        self._fsync = fsync_thread
        self._waiters: list[tuple[int, Future[Any], Any]] = []
        self._in_flight = False
        self._drained: list[asyncio.Future[None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self.fsyncs = 0

    @property
    def failed(self) -> KafkaStorageError | None:
        """Why the log is offline (an fsync failed), or None: nothing appended since
        can be trusted to be durable."""
        return self._log.offline

    def when_durable(self, offset: int, result: T) -> Future[T]:
        """A future that resolves to ``result`` once ``offset`` is below the high
        watermark (fsynced)."""
        future: Future[T] = Future()
        if self.failed is not None:
            future.set_exception(LogOfflineError(f"partition is offline: {self.failed}"))
        elif offset < self._log.high_watermark:
            future.set_result(result)
        else:
            self._waiters.append((offset, future, result))
            self._start()
        return future

    async def wait_durable(self, offset: int) -> None:
        await asyncio.wrap_future(self.when_durable(offset, None))

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
        if self._in_flight or self.failed is not None or self._log.high_watermark >= self._log.log_end_offset:
            return
        plan = self._log.prepare_flush()
        self._in_flight = True
        self._fsync.submit(plan, lambda _, error: self._finished(plan, error))

    def _finished(self, plan: FlushPlan, error: BaseException | None) -> None:
        self._in_flight = False
        self.fsyncs += 1
        self._fsync_latency.observe(plan.seconds)
        if error is not None:
            offline = self._log.flush_failed(plan, error)
            log.error("fsync of %s-%s failed: %s; the partition is offline: nothing it held unsynced was "
                      "acknowledged, and its writes are refused with KAFKA_STORAGE_ERROR (56) until the broker "
                      "restarts and reloads it from disk", self._log.topic, self._log.partition, error)
            self._fail_all(offline)
        else:
            self._log.complete_flush(plan)
            self._on_durable()
            high_watermark = self._log.high_watermark
            still_waiting = []
            for offset, future, result in self._waiters:
                if offset < high_watermark:
                    _settle(future, result=result)
                else:
                    still_waiting.append((offset, future, result))
            self._waiters = still_waiting
            if self._waiters or (self._log.config.flush_ms == 0 and self._log.unflushed_messages):
                self._start()
        if not self._in_flight:
            for drained in self._drained:
                drained.set_result(None)
            self._drained = []

    def _fail_all(self, error: BaseException) -> None:
        for _, future, _ in self._waiters:
            _settle(future, error=error)
        self._waiters = []

    async def drain(self) -> None:
        """Wait for the fsync in flight, if any (before the log is closed)."""
        if self._in_flight:
            drained = self._loop.create_future()
            self._drained.append(drained)
            await drained

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._fail_all(KafkaStorageError("the broker is shutting down"))


def _settle(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Complete a waiter unless its caller gave up (a cancelled request cancels its
    future): one abandoned request must not wedge every later append."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass
