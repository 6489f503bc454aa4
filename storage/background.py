"""Disk work the owner of a log hands to another thread: jobs, and steps made of jobs.

Everything in ``storage/`` is owned by one thread (the engine's event loop), and that
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
tests); the engine drives them on its worker threads (``app/engine/maintenance.py``).
Nothing here knows about threads or asyncio.
"""

from __future__ import annotations

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
            return stop.value
        try:
            result, error = job.run(), None
        except Exception as e:  # handed to the steps, which clean up and re-raise
            result, error = None, e

