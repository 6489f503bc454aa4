"""The worker process: runs ``ProcessJob`` calls (``exactly/storage/background.py``) -- the
log cleaner's CPU work -- outside the broker's interpreter, so they never hold the GIL
that the event loop, the fsync thread and the clients' threads need.

One child process, started on first use with the ``spawn`` method (never ``fork``:
the broker runs an asyncio loop and threads), running
:func:`exactly.storage.background.serve_calls` at a lower CPU priority. It is started by a
launcher thread of normal priority (made with the ``WorkerProcess``), never by the
niced thread that makes the first call: a process inherits its starter's niceness, and
the new interpreter's imports (the broker's whole ``__main__``) at that priority took
15 s instead of 1.4 s on a machine whose two cores were busy. One thread at a time
makes calls (the maintenance thread, which waits for each); the job it hands the
process carries plain values only (paths, offsets, config numbers, the aborted
transactions), and what comes back is as plain (which cleaned files it wrote).

* **cancel** -- any thread: a shared integer names the call to stop; the call sees
  it between two batches and raises its own error (``CleaningAbortedError``).
* **death** -- a worker killed or crashed mid-call (SIGKILL, out of memory) fails
  that call with :class:`WorkerProcessDiedError`; the next call starts a new worker.
  Whoever made the call cleans up after it (the round deletes its ``.cleaned`` files).
* **stop** -- ask the worker to exit, kill it if it has not within
  ``STOP_TIMEOUT_S``; it never outlives the broker (``serve_calls``).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from exactly.storage.background import ProcessJob, Reply, serve_calls

#: how long stop waits for the worker to exit before killing it
STOP_TIMEOUT_S = 5.0


class WorkerProcessDiedError(ChildProcessError):
    """The worker process died during a call (killed, out of memory, a crash of the
    interpreter); the call's work is lost, nothing else. An OSError, as any failure
    of the system under a maintenance job is."""


class WorkerProcess:
    """One worker process, started when first needed; see the module docstring."""

    def __init__(self, name: str, nice: int = 0) -> None:
        self._name = name
        self._nice = nice
        self._context = multiprocessing.get_context("spawn")
        #: the id of the call the worker is to cancel (0: none)
        self._cancelled_call = self._context.RawValue("q", 0)
        self._lock = threading.Lock()
        self._process: BaseProcess | None = None
        self._connection: Connection | None = None
        self._running: ProcessCall | None = None
        self._calls = 0
        self._stopped = False
        self._launches: queue.SimpleQueue[Future[tuple[Connection, BaseProcess]] | None] = queue.SimpleQueue()
        threading.Thread(target=self._launcher, name=f"{name}-launcher", daemon=True).start()

    @property
    def pid(self) -> int | None:
        """The worker's process id; None before it starts (or after it died)."""
        process = self._process
        return process.pid if process is not None else None

    def call(self, job: ProcessJob) -> ProcessCall:
        """A job (``run``, ``cancel``) that runs ``job``'s call in the worker process."""
        with self._lock:
            self._calls += 1
            return ProcessCall(self, job, self._calls)

    def run_call(self, call: ProcessCall) -> Any:
        """Make ``call`` in the worker (starting one if none runs) and wait for its reply."""
        with self._lock:
            if self._stopped:
                raise WorkerProcessDiedError(f"{self._name} is stopped")
            connection, process = self._started()
            self._running = call
            self._cancelled_call.value = call.id if call.cancelled else 0
        try:
            ok, value = self._exchange(connection, process, call)
        finally:
            with self._lock:
                self._running = None
        if not ok:
            raise value
        return value

    def cancel_call(self, call: ProcessCall) -> None:
        """Stop ``call`` early: now if it runs, at once when it starts if it has not yet."""
        with self._lock:
            call.cancelled = True
            if self._running is call:
                self._cancelled_call.value = call.id

    def _started(self) -> tuple[Connection, BaseProcess]:
        if self._process is None or self._connection is None:
            launched: Future[tuple[Connection, BaseProcess]] = Future()
            self._launches.put(launched)
            self._connection, self._process = launched.result()
        return self._connection, self._process

    def _launcher(self) -> None:
        """Start a worker process for each request, on this thread of normal priority."""
        while (launched := self._launches.get()) is not None:
            try:
                ours, theirs = self._context.Pipe()
                process = self._context.Process(
                    target=serve_calls, name=self._name, daemon=True,
                    args=(theirs, self._cancelled_call, os.getpid(), self._nice))
                process.start()
                theirs.close()
            except BaseException as e:  # to the caller, who waits for it
                launched.set_exception(e)
            else:
                launched.set_result((ours, process))

    def _exchange(self, connection: Connection, process: BaseProcess, call: ProcessCall) -> Reply:
        """Send the call and wait for its reply or the worker's death."""
        try:
            connection.send((call.id, call.job.function, call.job.args))
            if connection in wait([connection, process.sentinel]):  # else only its death woke us
                return connection.recv()
        except (EOFError, OSError):  # the pipe broke: the worker is gone
            pass
        process.join()
        self._forget(process)
        raise WorkerProcessDiedError(
            f"{self._name} (pid {process.pid}) died with exit code {process.exitcode} during "
            f"{call.job.function.__name__}")

    def _forget(self, process: BaseProcess) -> None:
        with self._lock:
            if self._process is process and self._connection is not None:
                self._connection.close()
                self._process = self._connection = None

    def stop(self) -> None:
        """End the worker (it finishes the call in progress first, if any, unless that
        takes longer than ``STOP_TIMEOUT_S``); later calls fail."""
        with self._lock:
            self._stopped = True
            process, connection = self._process, self._connection
        self._launches.put(None)
        if process is None or connection is None:
            return
        try:
            connection.send(None)
        except OSError:
            pass  # it is gone already
        process.join(STOP_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join()
        self._forget(process)


class ProcessCall:
    """A :class:`ProcessJob` bound to a worker process: a job for the maintenance
    thread, whose ``run`` waits for the call, and which ``cancel`` stops early."""

    def __init__(self, worker: WorkerProcess, job: ProcessJob, id_: int) -> None:
        self.worker = worker
        self.job = job
        self.id = id_
        self.cancelled = False

    def run(self) -> Any:
        return self.worker.run_call(self)

    def cancel(self) -> None:
        self.worker.cancel_call(self)
