"""The online migration through broker crashes: the scenario of tests/kip848_migration.py
(a transactional application's members replaced classic -> consumer -> classic, one at a
time) on ``run.py``, SIGKILLed and restarted on its data directory once the group has
become a consumer group with a classic member in it, and once it has become classic again.
After each restart the group is what it was (its type, state, members' types: the
conversions' records replayed) and the application goes on; every input record ends up
in the output exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import kip848_migration
from tests.kafka.differential import Peer
from tests.test_kafka_crash import ServedBroker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
#: the steps after which the broker is killed: upgraded (a classic member inside), downgraded
KILL_AFTER = (1, 4)


def test_a_migrating_group_survives_sigkills_exactly_once(tmp_path: Path) -> None:
    broker = ServedBroker(tmp_path / "data")
    kills = []

    def kill_and_restart(step: int) -> None:
        if step in KILL_AFTER:
            broker.kill()
            broker.start()
            kills.append(step)
    try:
        kip848_migration.run(Peer("exactly", broker.bootstrap), tmp_path, kill_and_restart)
    finally:
        broker.stop()
    assert kills == list(KILL_AFTER)
