"""The worker process: runs ``ProcessJob`` calls (``exactly/storage/background.py``) -- the
log cleaner's CPU work -- outside the broker's interpreter, so they never hold the GIL
that the event loop, the fsync thread and the clients' threads need.

One child process, started on first use as ``python -m exactly.storage.background``
(never ``fork``: the broker runs an asyncio loop and threads; nor multiprocessing's
``spawn``, which imports the parent's main script again in the child -- an embedded
``Broker`` in a plain script, as docs/python.md writes them, ran the whole script a
second time there, failed on the data directory's lock and killed every cleaning
round), running :func:`exactly.storage.background.serve_calls` at a lower CPU priority.
Calls and replies go over one socket pair (multiprocessing's ``Connection``: pickles),
cancellations over another. It is started by a launcher thread of normal priority
(made with the ``WorkerProcess``), never by the niced thread that makes the first
call: a process inherits its starter's niceness, and a new interpreter's imports at
that priority took 15 s instead of 1.4 s on a machine whose two cores were busy. One
thread at a time makes calls (the maintenance thread, which waits for each); the job
it hands the process carries plain values only (paths, offsets, config numbers, the
aborted transactions), and what comes back is as plain (which cleaned files it wrote).

* **cancel** -- any thread: the call's id goes to the worker, which sees it between
  two batches and raises the call's own error (``CleaningAbortedError``).
* **death** -- a worker killed or crashed mid-call (SIGKILL, out of memory) fails
  that call with :class:`WorkerProcessDiedError` (its end of the socket closes); the
  next call starts a new worker. Whoever made the call cleans up after it (the round
  deletes its ``.cleaned`` files).
* **stop** -- ask the worker to exit, kill it if it has not within
  ``STOP_TIMEOUT_S``; it never outlives the broker (``serve_calls``).
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import exactly
from exactly.storage.background import ProcessJob, Reply

#: how long stop waits for the worker to exit before killing it
STOP_TIMEOUT_S = 5.0
#: the directory ``exactly`` is imported from: on the worker's ``PYTHONPATH``, so it
#: finds the same code as the broker, installed or not
IMPORT_ROOT = str(Path(exactly.__file__).resolve().parent.parent)


class WorkerProcessDiedError(ChildProcessError):
    """The worker process died during a call (killed, out of memory, a crash of the
    interpreter); the call's work is lost, nothing else. An OSError, as any failure
    of the system under a maintenance job is."""


class WorkerProcess:
    """One worker process, started when first needed; see the module docstring."""

    def __init__(self, name: str, nice: int = 0) -> None:
        self._name = name
        self._nice = nice
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._connection: Connection | None = None
        #: where the ids of cancelled calls go to the worker
        self._cancels: Connection | None = None
        self._running: ProcessCall | None = None
        self._calls = 0
        self._stopped = False
        self._launches: queue.SimpleQueue[Future[_Launched] | None] = queue.SimpleQueue()
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
            if call.cancelled:
                self._send_cancel(call)
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
                self._send_cancel(call)

    def _send_cancel(self, call: ProcessCall) -> None:
        """With the lock held: tell the worker ``call`` is cancelled."""
        try:
            if self._cancels is not None:
                self._cancels.send(call.id)
        except OSError:
            pass  # the worker is gone: the call fails with its death

    def _started(self) -> tuple[Connection, subprocess.Popen[bytes]]:
        if self._process is None or self._connection is None:
            launched: Future[_Launched] = Future()
            self._launches.put(launched)
            self._connection, self._cancels, self._process = launched.result()
        return self._connection, self._process

    def _launcher(self) -> None:
        """Start a worker process for each request, on this thread of normal priority."""
        while (launched := self._launches.get()) is not None:
            try:
                launched.set_result(self._launch())
            except BaseException as e:  # to the caller, who waits for it
                launched.set_exception(e)

    def _launch(self) -> _Launched:
        calls, their_calls = socket.socketpair()
        cancels, their_cancels = socket.socketpair()
        try:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                filter(None, [IMPORT_ROOT, os.environ.get("PYTHONPATH")]))}
            process = subprocess.Popen(
                [sys.executable, "-m", "exactly.storage.background", str(os.getpid()), str(self._nice),
                 str(their_calls.fileno()), str(their_cancels.fileno())],
                pass_fds=(their_calls.fileno(), their_cancels.fileno()), stdin=subprocess.DEVNULL, env=env)
        except BaseException:
            calls.close()
            cancels.close()
            raise
        finally:  # the worker's ends are the worker's: its death closes them, which ends a call
            their_calls.close()
            their_cancels.close()
        return Connection(calls.detach()), Connection(cancels.detach(), readable=False), process

    def _exchange(self, connection: Connection, process: subprocess.Popen[bytes], call: ProcessCall) -> Reply:
        """Send the call and wait for its reply or the worker's death."""
        try:
            connection.send((call.id, call.job.function, call.job.args))
            return connection.recv()
        except (EOFError, OSError):  # the socket broke: the worker is gone
            pass
        process.wait()
        self._forget(process)
        raise WorkerProcessDiedError(
            f"{self._name} (pid {process.pid}) died with exit code {process.returncode} during "
            f"{call.job.function.__name__}")

    def _forget(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            if self._process is process and self._connection is not None and self._cancels is not None:
                self._connection.close()
                self._cancels.close()
                self._process = self._connection = self._cancels = None

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
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._forget(process)


#: a started worker: its calls' connection, its cancellations' connection, the process
_Launched = tuple[Connection, Connection, "subprocess.Popen[bytes]"]


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
