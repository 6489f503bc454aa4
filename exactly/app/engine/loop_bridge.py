"""The bridge between the engine's loop and every other thread: HTTP workers, scheduled
jobs, the embedded clients and the CLI hand the loop work and wait for its answer here,
and nowhere else.

:meth:`LoopBridge.call` runs a service's operation on the loop and waits;
:meth:`LoopBridge.submit` runs a plain function there and returns a future at once (the
embedded producer's hot path); :meth:`LoopBridge.schedule` starts a coroutine there and
returns its future. Once the engine closes (or is killed) every one of them refuses with
KAFKA_STORAGE_ERROR, and work queued before a kill is never started.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from concurrent.futures import Future
from typing import Any, Callable, Coroutine, TypeVar, overload

from exactly.storage.errors import KafkaStorageError, RequestTimedOutError

T = TypeVar("T")


class LoopBridge:
    """Work handed to one event loop from other threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: set when the engine closes: nothing more is accepted
        self.closed = False
        #: set at the instant of a kill: work already queued is refused, not run
        self.killed = False

    @overload
    def call(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, timeout: float | None = 60,
             **kwargs: Any) -> T: ...

    @overload
    def call(self, fn: Callable[..., T], *args: Any, timeout: float | None = 60, **kwargs: Any) -> T: ...

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = 60, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the loop and wait for its result: a coroutine
        function is awaited there, a plain function called there.

        Past the timeout the work is cancelled -- a coroutine at its next await, a plain
        function if it has not started (once started it runs to its end) -- so the loop
        does no work for a caller that gave up, and the caller gets REQUEST_TIMED_OUT."""
        self._check_open()
        if inspect.iscoroutinefunction(fn):
            future = asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), self.loop)
        else:
            future = self.submit(functools.partial(fn, *args, **kwargs))
        try:
            return future.result(timeout)
        except TimeoutError:
            if not future.cancel() and future.done():  # it finished as the wait ended
                return future.result()
            raise RequestTimedOutError(f"{getattr(fn, '__qualname__', fn)} did not finish on the broker's "
                                       f"loop within {timeout} s and was cancelled") from None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run the plain function ``fn(*args)`` on the loop; the returned future gets
        its result -- or, when ``fn`` returns a future, that future's outcome.

        The hot path (produce from the embedded client): no Task, no coroutine, one
        wake-up of the loop; the caller blocks on the future, not on the loop.
        """
        self._check_open()
        outer: Future = Future()

        def run() -> None:
            if not outer.set_running_or_notify_cancel():  # its caller gave up before it started
                return
            if self.killed:  # queued before the kill: a killed broker does no more work
                outer.set_exception(KafkaStorageError("the broker was killed"))
                return
            try:
                result = fn(*args)
            except BaseException as e:  # delivered to the caller, never lost
                outer.set_exception(e)
                return
            if isinstance(result, Future):
                result.add_done_callback(lambda inner: _copy_outcome(inner, outer))
            else:
                outer.set_result(result)

        self.loop.call_soon_threadsafe(run)
        return outer

    def schedule(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> "Future[T]":
        """Start the coroutine ``fn(*args)`` on the loop and return its future at once
        (:meth:`call` waits for it): for a caller that waits in slices of its own."""
        self._check_open()
        return asyncio.run_coroutine_threadsafe(fn(*args), self.loop)

    def _check_open(self) -> None:
        if self.closed:
            raise KafkaStorageError("the broker is closed")


def done(result: Any) -> Future:
    """A future that already holds ``result``."""
    future: Future = Future()
    future.set_result(result)
    return future


def _copy_outcome(source: Future, target: Future) -> None:
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())
