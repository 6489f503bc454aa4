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
from typing import Any, Callable, Coroutine, ParamSpec, TypeVar, TypeVarTuple, overload

from exactly.storage.errors import KafkaStorageError, RequestTimedOutError

T = TypeVar("T")
P = ParamSpec("P")
Ts = TypeVarTuple("Ts")
#: what a coroutine function returns: awaited on the loop, it gives a T
Coro = Coroutine[Any, Any, T]


class LoopBridge:
    """Work handed to one event loop from other threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: set when the engine closes: nothing more is accepted
        self.closed = False
        #: set at the instant of a kill: work already queued is refused, not run
        self.killed = False

    # The overloads infer the result: a coroutine function's awaited value, a plain
    # function's return value (or, when it returns a future, that future's). Without
    # ``timeout`` the arguments are checked against ``fn`` too; with it they are not,
    # as a ParamSpec cannot have a keyword of the caller's beside ``fn``'s (PEP 612).
    @overload
    def call(self, fn: Callable[..., Coro[T]], /, *args: Any, timeout: float | None, **kwargs: Any) -> T: ...
    @overload
    def call(self, fn: Callable[..., Future[T]], /, *args: Any, timeout: float | None, **kwargs: Any) -> T: ...
    @overload
    def call(self, fn: Callable[..., T], /, *args: Any, timeout: float | None, **kwargs: Any) -> T: ...
    @overload
    def call(self, fn: Callable[P, Coro[T]], /, *args: P.args, **kwargs: P.kwargs) -> T: ...
    @overload
    def call(self, fn: Callable[P, Future[T]], /, *args: P.args, **kwargs: P.kwargs) -> T: ...
    @overload
    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T: ...

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the loop and wait for its result: a coroutine
        function is awaited there, a plain function called there.

        Past ``timeout`` seconds (a keyword, 60 by default) the work is cancelled -- a
        coroutine at its next await, a plain function if it has not started (once
        started it runs to its end) -- so the loop does no work for a caller that gave
        up, and the caller gets REQUEST_TIMED_OUT."""
        timeout: float | None = kwargs.pop("timeout", 60)
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

    @overload
    def submit(self, fn: Callable[[*Ts], Future[T]], /, *args: *Ts) -> Future[T]: ...
    @overload
    def submit(self, fn: Callable[[*Ts], T], /, *args: *Ts) -> Future[T]: ...

    def submit(self, fn: Callable[[*Ts], Any], /, *args: *Ts) -> Future[Any]:
        """Run the plain function ``fn(*args)`` on the loop; the returned future gets
        its result -- or, when ``fn`` returns a future, that future's outcome.

        The hot path (produce from the embedded client): no Task, no coroutine, one
        wake-up of the loop; the caller blocks on the future, not on the loop.
        """
        self._check_open()
        outer: Future[Any] = Future()

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

    def schedule(self, fn: Callable[[*Ts], Coro[T]], /, *args: *Ts) -> Future[T]:
        """Start the coroutine ``fn(*args)`` on the loop and return its future at once
        (:meth:`call` waits for it): for a caller that waits in slices of its own."""
        self._check_open()
        return asyncio.run_coroutine_threadsafe(fn(*args), self.loop)

    def _check_open(self) -> None:
        if self.closed:
            raise KafkaStorageError("the broker is closed")


def done(result: T) -> Future[T]:
    """A future that already holds ``result``."""
    future: Future[T] = Future()
    future.set_result(result)
    return future


def _copy_outcome(source: Future[T], target: Future[T]) -> None:
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())
