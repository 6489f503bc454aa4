"""A worker thread: runs jobs (``exactly/storage/background.py``) in order, off the event loop,
and reports each outcome back on the loop.

The engine has three, so that no kind of disk work waits behind another kind:
``exactly-fsync`` (group commit's flush plans: every acks=all produce waits on it),
``exactly-maintenance`` (cleaning rounds and retention: long) and
``exactly-metadata`` (short whole-file writes someone may be waiting for: producer
snapshots, checkpoints, ``topics.json``, producer-id blocks).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from typing import Any, Callable

from exactly.storage.background import Job

#: called with (result, error) on the loop once a job is done
Done = Callable[[Any, BaseException | None], None]


class Worker:
    """One thread that runs jobs in the order they were submitted."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str, nice: int = 0) -> None:
        """``nice`` > 0 lowers the thread's CPU priority (Linux schedules threads
        apart): when the machine's cores are busy, the others run first."""
        self._loop = loop
        self._nice = nice
        self._queue: queue.SimpleQueue[tuple[Job, Done] | None] = queue.SimpleQueue()
        #: Test hook: when set, called on the worker thread with each job just before it
        #: runs. A test holds a real job in progress with it (waiting there on a gate of
        #: its own) to show what keeps working meanwhile. Never set outside tests.
        self.before_job: Callable[[Job], None] | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def submit(self, job: Job, done: Done) -> None:
        """Run ``job.run()`` on the thread; then ``done(result, error)`` on the loop."""
        self._queue.put((job, done))

    def run(self, job: Job) -> asyncio.Future[Any]:
        """For a coroutine on the loop: ``await worker.run(job)`` is ``job.run()``'s result."""
        future = self._loop.create_future()

        def done(result: Any, error: BaseException | None) -> None:
            if future.cancelled():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
        self.submit(job, done)
        return future

    def _run(self) -> None:
        if self._nice:
            with contextlib.suppress(OSError, AttributeError):  # not on every platform
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._nice)
        while (item := self._queue.get()) is not None:
            job, done = item
            result: Any = None
            error: BaseException | None = None
            try:
                if self.before_job is not None:
                    self.before_job(job)
                result = job.run()
            except BaseException as e:  # reported to whoever waits, never lost
                error = e
            try:
                self._loop.call_soon_threadsafe(done, result, error)
            except RuntimeError:  # the loop is closed: the engine closed, nobody waits
                pass

    def stop(self) -> None:
        """Finish the jobs submitted so far, then end the thread."""
        self._queue.put(None)
        self._thread.join()
