"""The one way a test waits: poll a condition until it holds, with a deadline.

A test never sleeps to let something happen; it names the condition it waits for, and
fails with that name when the deadline passes, so a slow machine costs time, not a
flaky failure."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Callable, TypeVar

import pytest

T = TypeVar("T")


def eventually(condition: Callable[[], T], timeout: float = 30.0, what: str = "condition", *,
               interval: float = 0.01, child: subprocess.Popen | None = None,
               progress: Callable[[], object] | None = None) -> T:
    """Poll ``condition`` every ``interval`` seconds until it returns something truthy,
    and return that; fail after ``timeout`` seconds. With ``child``, fail as soon as that
    process exits (its stderr in the message), and wait on its exit between polls. With
    ``progress``, the deadline is for a stall: it starts again whenever ``progress()``
    changes, so work whose length depends on the machine's load fails only when it stops."""
    deadline = time.monotonic() + timeout
    seen = progress() if progress is not None else None
    while True:
        value = condition()
        if value:
            return value
        if child is not None and child.poll() is not None:
            pytest.fail(f"the child exited with status {child.returncode} before {what}:\n{_stderr(child)}")
        if progress is not None and (now := progress()) != seen:
            seen, deadline = now, time.monotonic() + timeout
        if time.monotonic() > deadline:
            stalled = "with no progress " if progress is not None else ""
            pytest.fail(f"timed out after {timeout} s {stalled}waiting for {what}")
        _pause(interval, child)


def _pause(interval: float, child: subprocess.Popen | None) -> None:
    """Wait ``interval`` between polls: on ``child``'s exit when there is one."""
    if child is None:
        time.sleep(interval)
        return
    try:
        child.wait(timeout=interval)
    except subprocess.TimeoutExpired:
        pass


def _stderr(child: subprocess.Popen) -> str:
    return child.stderr.read().decode(errors="replace") if child.stderr else ""


def returns_within(call: Callable[[], T], timeout: float, what: str = "the call") -> T:
    """``call()``'s result, which must come within ``timeout`` seconds: how a test says
    "this returns at once, it does not wait out its own (far longer) timeout" without
    asserting on the elapsed wall time. A call that does not return fails the test; it
    goes on in a daemon thread."""
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as e:  # re-raised in the test's thread
            outcome.append((False, e))
    thread = threading.Thread(target=run, daemon=True, name=f"returns_within: {what}")
    thread.start()
    thread.join(timeout)
    if not outcome:
        pytest.fail(f"{what} did not return within {timeout} s")
    returned, value = outcome[0]
    if not returned:
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]
