"""``Engine.call`` past its timeout: the caller gets REQUEST_TIMED_OUT, and the work it
gave up on stops -- the loop that serves every client does nothing for nobody."""

from __future__ import annotations

import asyncio
import threading

import pytest

from exactly.app import Broker
from exactly.storage.errors import RequestTimedOutError

WAIT_S = 10  # a deadline for what must happen promptly; the tests never wait it out when it does


def test_a_timed_out_coroutine_is_cancelled(broker: Broker) -> None:
    started, stopped = threading.Event(), threading.Event()
    outcome: list[str] = []

    async def waits_forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never set: only cancellation ends it
            outcome.append("finished")
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        finally:
            stopped.set()

    with pytest.raises(RequestTimedOutError) as caught:
        broker.engine.call(waits_forever, timeout=0.2)
    assert (caught.value.code, caught.value.name) == (7, "REQUEST_TIMED_OUT")
    assert "waits_forever" in str(caught.value) and "cancelled" in str(caught.value)
    assert started.is_set()
    assert stopped.wait(WAIT_S), "the coroutine kept running after its caller timed out"
    assert outcome == ["cancelled"]


def test_a_timed_out_function_that_has_not_started_never_runs(broker: Broker) -> None:
    """A plain function queued behind a busy loop, whose caller gave up, is skipped."""
    release, busy = threading.Event(), threading.Event()
    ran: list[str] = []

    def hold_the_loop() -> None:
        busy.set()
        release.wait(WAIT_S)

    holder = threading.Thread(target=broker.engine.call, args=(hold_the_loop,), kwargs={"timeout": WAIT_S})
    holder.start()
    try:
        assert busy.wait(WAIT_S)
        with pytest.raises(RequestTimedOutError):
            broker.engine.call(lambda: ran.append("late"), timeout=0.2)
    finally:
        release.set()
        holder.join(WAIT_S)
    assert broker.engine.call(lambda: "after", timeout=WAIT_S) == "after"  # queued after the skipped one
    assert ran == []


def test_a_call_within_its_timeout_answers(broker: Broker) -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert broker.engine.call(answer, timeout=WAIT_S) == 42
