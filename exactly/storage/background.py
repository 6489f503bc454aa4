"""Disk work the owner of a log hands to another thread: jobs, and steps made of jobs.

Everything in ``exactly/storage/`` is owned by one thread (the engine's event loop), and that
thread must never wait on the disk. So the slow part of each maintenance operation
-- writing and fsyncing a snapshot or a checkpoint, cleaning segments, deleting them
-- is a *job*: an object made on the owner's thread from immutable inputs, whose
``run()`` does the file I/O and may run on any thread. It touches nothing the owner
still uses; its result is installed by the owner afterwards. ``FlushPlan`` (group
commit) was the first job.

An operation of more than one job (a cleaning round) is written as *steps*: a
generator that yields jobs. The code between its yields runs on the owner's thread
and is where it plans and installs; the driver runs each yielded job wherever it
likes and sends back its result (or throws its exception in). :func:`run_inline`
drives steps on the calling thread (opening and closing a data directory, tools,
tests); the engine drives them on its worker threads (``exactly/app/engine/maintenance.py``).
Nothing here knows about threads or asyncio.

A job that is CPU work in Python (a cleaning round decodes every record it keeps) is
a :class:`ProcessJob`: one call of a module-level function on plain, picklable values.
Run on a thread it would share the interpreter's GIL with the owner's loop and slow
every request; so the engine runs it in a worker process of its own
(``exactly/app/engine/worker_process.py``), whose main is :func:`main` here (``python -m
exactly.storage.background``), so that the worker imports nothing but ``exactly/storage/``. ``run()`` makes the same call on
the calling thread (:func:`run_inline`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any, Callable, Generator, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


class Job(Protocol):
    """File I/O prepared on the owner's thread; ``run`` may execute on any thread."""

    def run(self) -> Any: ...


@runtime_checkable
class Cancellable(Protocol):
    """A long job that stops early (raising) once ``cancel`` is called from another thread."""

    def cancel(self) -> None: ...


#: steps of a maintenance operation returning T: yield jobs, receive their results
Steps = Generator[Job, Any, T]

#: how an owner has steps run: at once (:func:`run_inline`) or handed to a worker
RunSteps = Callable[[Steps[Any]], object]


def run_inline(steps: Steps[T]) -> T:
    """Drive ``steps`` to the end on the calling thread; returns what they return."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            job = steps.send(result) if error is None else steps.throw(error)
        except StopIteration as stop:
            value: T = stop.value
            return value
        try:
            result, error = job.run(), None
        except Exception as e:  # handed to the steps, which clean up and re-raise
            result, error = None, e


class ProcessJob:
    """A job that may run in another process: ``function(is_cancelled, *args)``, where
    ``function`` is module-level and ``args`` and its result pickle. ``is_cancelled()``
    turning true makes the function raise soon (it checks between pieces of work).
    ``run`` calls it here; :meth:`cancel` (from any thread) cancels that call. A driver
    that runs the call elsewhere cancels it its own way."""

    def __init__(self, function: Callable[..., Any], *args: Any) -> None:
        self.function = function
        self.args = args
        self._cancelled = False

    def run(self) -> Any:
        return self.function(lambda: self._cancelled, *self.args)

    def cancel(self) -> None:
        self._cancelled = True


#: what the broker sends a worker process: (call id, function, args), or None to stop
Call = tuple[int, Callable[..., Any], tuple[Any, ...]] | None
#: what it answers: (True, the result) or (False, the exception raised)
Reply = tuple[bool, Any]

_PR_SET_PDEATHSIG = 1


def serve_calls(connection: Connection, cancellations: Connection, parent_pid: int, nice: int) -> None:
    """The main loop of a worker process: receive a :data:`Call`, make it, send its
    :data:`Reply`; until None, or the broker is gone. ``cancellations`` brings the id
    of each call the broker cancels (a call checks it between pieces of work). The
    worker never outlives the broker: it is killed when the broker dies (Linux), and a
    call in progress stops once its parent changed -- an orphan must not go on writing
    files in a data directory a restarted broker now owns. Ctrl-C is the broker's to
    handle (it stops the worker), so the worker ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(parent_pid)
    if nice:  # as the engine's worker threads do: the niceness itself, not an increment
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    cancelled = _Cancellations(cancellations)
    while (call := _receive(connection)) is not None:
        call_id, function, args = call

        def is_cancelled(call_id: int = call_id) -> bool:
            return cancelled.includes(call_id) or os.getppid() != parent_pid
        try:
            reply: Reply = (True, function(is_cancelled, *args))
        except Exception as e:  # the broker re-raises it; the traceback goes with it
            e.add_note(f"in worker process {os.getpid()}:\n{traceback.format_exc()}")
            reply = (False, e)
        connection.send(reply)  # one that does not pickle ends the worker: a bug, reported as its death


class _Cancellations:
    """The call ids the broker has cancelled, read as they come (never waiting)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._latest = 0
        self._broker_gone = False

    def includes(self, call_id: int) -> bool:
        try:
            while not self._broker_gone and self._connection.poll():
                self._latest = self._connection.recv()
        except (EOFError, OSError):  # the broker closed its end, or died: stop
            self._broker_gone = True
        return self._broker_gone or self._latest == call_id


def main(argv: list[str]) -> None:
    """``python -m exactly.storage.background PARENT_PID NICE CALLS_FD CANCELS_FD``: a
    worker process, started as a module of its own so that it never imports the
    program that runs the broker (multiprocessing's ``spawn`` runs the main script
    again: an embedded broker's whole program, the broker included)."""
    parent_pid, nice, calls_fd, cancels_fd = map(int, argv)
    serve_calls(Connection(calls_fd), Connection(cancels_fd, writable=False), parent_pid, nice)


def _receive(connection: Connection) -> Call:
    try:
        call: Call = connection.recv()
    except EOFError:  # the broker closed its end, or died
        return None
    return call


def _die_with(parent_pid: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux's
    PR_SET_PDEATHSIG); exit now if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
